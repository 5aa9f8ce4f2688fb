package telemetry

import (
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
	colpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	cpb "go.opentelemetry.io/proto/otlp/common/v1"
	mpb "go.opentelemetry.io/proto/otlp/metrics/v1"
	rpb "go.opentelemetry.io/proto/otlp/resource/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// otlpJSON is the OTLP/JSON encoding of an export request, as the OTLP specification defines
// it (lowerCamelCase keys, enums as numbers, 64-bit integers as strings): what the collector's
// file exporter writes and its otlpjsonfile receiver and OTLP/HTTP receiver read.
func otlpJSON(rm *metricdata.ResourceMetrics) ([]byte, error) {
	req := &colpb.ExportMetricsServiceRequest{ResourceMetrics: []*mpb.ResourceMetrics{toOTLP(rm)}}
	return protojson.MarshalOptions{UseEnumNumbers: true}.Marshal(req)
}

// toOTLP converts the SDK's collected data into the OTLP protobuf form. Exemplars are not
// carried (ncclprof records none: the plugin has no trace context).
func toOTLP(rm *metricdata.ResourceMetrics) *mpb.ResourceMetrics {
	out := &mpb.ResourceMetrics{Resource: resourcePB(rm.Resource)}
	if rm.Resource != nil {
		out.SchemaUrl = rm.Resource.SchemaURL()
	}
	for _, sm := range rm.ScopeMetrics {
		s := &mpb.ScopeMetrics{Scope: scopePB(sm.Scope), SchemaUrl: sm.Scope.SchemaURL}
		for _, m := range sm.Metrics {
			if pm := metricPB(m); pm != nil {
				s.Metrics = append(s.Metrics, pm)
			}
		}
		out.ScopeMetrics = append(out.ScopeMetrics, s)
	}
	return out
}

func resourcePB(r *resource.Resource) *rpb.Resource {
	if r == nil {
		return &rpb.Resource{}
	}
	return &rpb.Resource{Attributes: attrsPB(r.Iter())}
}

func scopePB(s instrumentation.Scope) *cpb.InstrumentationScope {
	set := s.Attributes
	return &cpb.InstrumentationScope{Name: s.Name, Version: s.Version, Attributes: attrsPB(set.Iter())}
}

func attrsPB(it attribute.Iterator) []*cpb.KeyValue {
	if it.Len() == 0 {
		return nil
	}
	out := make([]*cpb.KeyValue, 0, it.Len())
	for it.Next() {
		kv := it.Attribute()
		out = append(out, &cpb.KeyValue{Key: string(kv.Key), Value: valuePB(kv.Value)})
	}
	return out
}

func valuePB(v attribute.Value) *cpb.AnyValue {
	switch v.Type() {
	case attribute.BOOL:
		return &cpb.AnyValue{Value: &cpb.AnyValue_BoolValue{BoolValue: v.AsBool()}}
	case attribute.INT64:
		return &cpb.AnyValue{Value: &cpb.AnyValue_IntValue{IntValue: v.AsInt64()}}
	case attribute.FLOAT64:
		return &cpb.AnyValue{Value: &cpb.AnyValue_DoubleValue{DoubleValue: v.AsFloat64()}}
	case attribute.STRING:
		return &cpb.AnyValue{Value: &cpb.AnyValue_StringValue{StringValue: v.AsString()}}
	case attribute.BOOLSLICE:
		return arrayPB(v.AsBoolSlice(), func(b bool) *cpb.AnyValue {
			return &cpb.AnyValue{Value: &cpb.AnyValue_BoolValue{BoolValue: b}}
		})
	case attribute.INT64SLICE:
		return arrayPB(v.AsInt64Slice(), func(i int64) *cpb.AnyValue {
			return &cpb.AnyValue{Value: &cpb.AnyValue_IntValue{IntValue: i}}
		})
	case attribute.FLOAT64SLICE:
		return arrayPB(v.AsFloat64Slice(), func(f float64) *cpb.AnyValue {
			return &cpb.AnyValue{Value: &cpb.AnyValue_DoubleValue{DoubleValue: f}}
		})
	case attribute.STRINGSLICE:
		return arrayPB(v.AsStringSlice(), func(s string) *cpb.AnyValue {
			return &cpb.AnyValue{Value: &cpb.AnyValue_StringValue{StringValue: s}}
		})
	}
	return &cpb.AnyValue{Value: &cpb.AnyValue_StringValue{StringValue: v.Emit()}}
}

func arrayPB[T any](vs []T, f func(T) *cpb.AnyValue) *cpb.AnyValue {
	a := &cpb.ArrayValue{Values: make([]*cpb.AnyValue, len(vs))}
	for i, v := range vs {
		a.Values[i] = f(v)
	}
	return &cpb.AnyValue{Value: &cpb.AnyValue_ArrayValue{ArrayValue: a}}
}

func unixNano(t time.Time) uint64 {
	if t.IsZero() {
		return 0
	}
	return uint64(t.UnixNano())
}

func temporalityPB(t metricdata.Temporality) mpb.AggregationTemporality {
	switch t {
	case metricdata.CumulativeTemporality:
		return mpb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE
	case metricdata.DeltaTemporality:
		return mpb.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA
	}
	return mpb.AggregationTemporality_AGGREGATION_TEMPORALITY_UNSPECIFIED
}

func metricPB(m metricdata.Metrics) *mpb.Metric {
	out := &mpb.Metric{Name: m.Name, Description: m.Description, Unit: m.Unit}
	switch d := m.Data.(type) {
	case metricdata.Gauge[int64]:
		out.Data = &mpb.Metric_Gauge{Gauge: &mpb.Gauge{DataPoints: numberPoints(d.DataPoints)}}
	case metricdata.Gauge[float64]:
		out.Data = &mpb.Metric_Gauge{Gauge: &mpb.Gauge{DataPoints: numberPoints(d.DataPoints)}}
	case metricdata.Sum[int64]:
		out.Data = &mpb.Metric_Sum{Sum: &mpb.Sum{DataPoints: numberPoints(d.DataPoints),
			AggregationTemporality: temporalityPB(d.Temporality), IsMonotonic: d.IsMonotonic}}
	case metricdata.Sum[float64]:
		out.Data = &mpb.Metric_Sum{Sum: &mpb.Sum{DataPoints: numberPoints(d.DataPoints),
			AggregationTemporality: temporalityPB(d.Temporality), IsMonotonic: d.IsMonotonic}}
	case metricdata.Histogram[int64]:
		out.Data = &mpb.Metric_Histogram{Histogram: &mpb.Histogram{DataPoints: histPoints(d.DataPoints),
			AggregationTemporality: temporalityPB(d.Temporality)}}
	case metricdata.Histogram[float64]:
		out.Data = &mpb.Metric_Histogram{Histogram: &mpb.Histogram{DataPoints: histPoints(d.DataPoints),
			AggregationTemporality: temporalityPB(d.Temporality)}}
	case metricdata.ExponentialHistogram[int64]:
		out.Data = &mpb.Metric_ExponentialHistogram{ExponentialHistogram: &mpb.ExponentialHistogram{
			DataPoints: expPoints(d.DataPoints), AggregationTemporality: temporalityPB(d.Temporality)}}
	case metricdata.ExponentialHistogram[float64]:
		out.Data = &mpb.Metric_ExponentialHistogram{ExponentialHistogram: &mpb.ExponentialHistogram{
			DataPoints: expPoints(d.DataPoints), AggregationTemporality: temporalityPB(d.Temporality)}}
	case metricdata.Summary:
		pts := make([]*mpb.SummaryDataPoint, 0, len(d.DataPoints))
		for _, p := range d.DataPoints {
			q := make([]*mpb.SummaryDataPoint_ValueAtQuantile, 0, len(p.QuantileValues))
			for _, v := range p.QuantileValues {
				q = append(q, &mpb.SummaryDataPoint_ValueAtQuantile{Quantile: v.Quantile, Value: v.Value})
			}
			pts = append(pts, &mpb.SummaryDataPoint{Attributes: attrsPB(p.Attributes.Iter()),
				StartTimeUnixNano: unixNano(p.StartTime), TimeUnixNano: unixNano(p.Time),
				Count: p.Count, Sum: p.Sum, QuantileValues: q})
		}
		out.Data = &mpb.Metric_Summary{Summary: &mpb.Summary{DataPoints: pts}}
	default:
		return nil
	}
	return out
}

func numberPoints[N int64 | float64](ps []metricdata.DataPoint[N]) []*mpb.NumberDataPoint {
	out := make([]*mpb.NumberDataPoint, 0, len(ps))
	for _, p := range ps {
		dp := &mpb.NumberDataPoint{Attributes: attrsPB(p.Attributes.Iter()),
			StartTimeUnixNano: unixNano(p.StartTime), TimeUnixNano: unixNano(p.Time)}
		switch v := any(p.Value).(type) {
		case int64:
			dp.Value = &mpb.NumberDataPoint_AsInt{AsInt: v}
		case float64:
			dp.Value = &mpb.NumberDataPoint_AsDouble{AsDouble: v}
		}
		out = append(out, dp)
	}
	return out
}

func extremum[N int64 | float64](e metricdata.Extrema[N]) *float64 {
	if v, ok := e.Value(); ok {
		f := float64(v)
		return &f
	}
	return nil
}

func histPoints[N int64 | float64](ps []metricdata.HistogramDataPoint[N]) []*mpb.HistogramDataPoint {
	out := make([]*mpb.HistogramDataPoint, 0, len(ps))
	for _, p := range ps {
		sum := float64(p.Sum)
		out = append(out, &mpb.HistogramDataPoint{Attributes: attrsPB(p.Attributes.Iter()),
			StartTimeUnixNano: unixNano(p.StartTime), TimeUnixNano: unixNano(p.Time),
			Count: p.Count, Sum: &sum, BucketCounts: p.BucketCounts, ExplicitBounds: p.Bounds,
			Min: extremum(p.Min), Max: extremum(p.Max)})
	}
	return out
}

func expPoints[N int64 | float64](ps []metricdata.ExponentialHistogramDataPoint[N]) []*mpb.ExponentialHistogramDataPoint {
	out := make([]*mpb.ExponentialHistogramDataPoint, 0, len(ps))
	for _, p := range ps {
		sum := float64(p.Sum)
		out = append(out, &mpb.ExponentialHistogramDataPoint{Attributes: attrsPB(p.Attributes.Iter()),
			StartTimeUnixNano: unixNano(p.StartTime), TimeUnixNano: unixNano(p.Time),
			Count: p.Count, Sum: &sum, Scale: p.Scale, ZeroCount: p.ZeroCount,
			ZeroThreshold: p.ZeroThreshold, Min: extremum(p.Min), Max: extremum(p.Max),
			Positive: &mpb.ExponentialHistogramDataPoint_Buckets{Offset: p.PositiveBucket.Offset,
				BucketCounts: p.PositiveBucket.Counts},
			Negative: &mpb.ExponentialHistogramDataPoint_Buckets{Offset: p.NegativeBucket.Offset,
				BucketCounts: p.NegativeBucket.Counts}})
	}
	return out
}

// dataPoints counts the data points of an export (what a failed export loses).
func dataPoints(rm *metricdata.ResourceMetrics) uint64 {
	var n int
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Gauge[int64]:
				n += len(d.DataPoints)
			case metricdata.Gauge[float64]:
				n += len(d.DataPoints)
			case metricdata.Sum[int64]:
				n += len(d.DataPoints)
			case metricdata.Sum[float64]:
				n += len(d.DataPoints)
			case metricdata.Histogram[int64]:
				n += len(d.DataPoints)
			case metricdata.Histogram[float64]:
				n += len(d.DataPoints)
			case metricdata.ExponentialHistogram[int64]:
				n += len(d.DataPoints)
			case metricdata.ExponentialHistogram[float64]:
				n += len(d.DataPoints)
			case metricdata.Summary:
				n += len(d.DataPoints)
			}
		}
	}
	return uint64(n)
}
