package telemetry

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// testRecorder is a Recorder reading into a ManualReader, with warnings captured.
type testRecorder struct {
	*Recorder
	reader *sdkmetric.ManualReader
	mu     sync.Mutex
	warns  []string
}

func newTestRecorder(t *testing.T, cfg Config, counters func() map[string]uint64) *testRecorder {
	t.Helper()
	return newTestRecorderWith(t, Options{Config: cfg, Counters: counters})
}

// newTestRecorderWith is newTestRecorder with the plugin's other sources (o.Reader, o.Host and
// o.Warn are the test's).
func newTestRecorderWith(t *testing.T, o Options) *testRecorder {
	t.Helper()
	cfg := o.Config
	tr := &testRecorder{reader: sdkmetric.NewManualReader()}
	if cfg.MaxLabels == 0 {
		cfg.MaxLabels = DefaultMaxLabels
	}
	if cfg.Exporter == "" {
		cfg.Exporter = "test"
	}
	if cfg.Histogram == "" {
		cfg.Histogram = HistogramExponential
	}
	o.Config, o.Reader = cfg, tr.reader
	o.Host = Host{Name: "testhost", PID: 4242, Version: "0.1.0", LocalRank: -1}
	o.Warn = func(s string) { tr.mu.Lock(); tr.warns = append(tr.warns, s); tr.mu.Unlock() }
	r, err := New(context.Background(), o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	tr.Recorder = r
	t.Cleanup(func() { _ = r.Shutdown(context.Background()) })
	return tr
}

func (tr *testRecorder) warnings() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]string(nil), tr.warns...)
}

func (tr *testRecorder) collect(t *testing.T) *metricdata.ResourceMetrics {
	t.Helper()
	if err := tr.Sync(context.Background()); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	var rm metricdata.ResourceMetrics
	if err := tr.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	return &rm
}

func findMetric(rm *metricdata.ResourceMetrics, name string) (metricdata.Metrics, bool) {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

// matches says whether set holds every key/value in want.
func matches(set attribute.Set, want map[string]any) bool {
	for k, v := range want {
		got, ok := set.Value(attribute.Key(k))
		if !ok {
			if v == nil {
				continue
			}
			return false
		}
		if v == nil {
			return false // must be absent
		}
		switch w := v.(type) {
		case string:
			if got.Type() != attribute.STRING || got.AsString() != w {
				return false
			}
		case int:
			if got.Type() != attribute.INT64 || got.AsInt64() != int64(w) {
				return false
			}
		case bool:
			if got.Type() != attribute.BOOL || got.AsBool() != w {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// point is a data point found by attributes: a number, or a histogram's count/sum/min/max.
type point struct {
	attrs            attribute.Set
	value            float64
	count            uint64
	sum, min, max    float64
	exponential      bool
	bounds           []float64
	bucketCounts     []uint64
	temporality      metricdata.Temporality
	monotonic, isSum bool
	n                int // how many points matched
}

// pointsOf returns every data point of the metric whose attributes match want.
func pointsOf(t *testing.T, rm *metricdata.ResourceMetrics, name string, want map[string]any) []point {
	t.Helper()
	m, ok := findMetric(rm, name)
	if !ok {
		return nil
	}
	var out []point
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			if matches(p.Attributes, want) {
				out = append(out, point{attrs: p.Attributes, value: float64(p.Value), temporality: d.Temporality, monotonic: d.IsMonotonic, isSum: true})
			}
		}
	case metricdata.Sum[float64]:
		for _, p := range d.DataPoints {
			if matches(p.Attributes, want) {
				out = append(out, point{attrs: p.Attributes, value: p.Value, temporality: d.Temporality, monotonic: d.IsMonotonic, isSum: true})
			}
		}
	case metricdata.Gauge[float64]:
		for _, p := range d.DataPoints {
			if matches(p.Attributes, want) {
				out = append(out, point{attrs: p.Attributes, value: p.Value})
			}
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			if matches(p.Attributes, want) {
				out = append(out, point{attrs: p.Attributes, value: float64(p.Value)})
			}
		}
	case metricdata.ExponentialHistogram[float64]:
		for _, p := range d.DataPoints {
			if matches(p.Attributes, want) {
				mn, _ := p.Min.Value()
				mx, _ := p.Max.Value()
				out = append(out, point{attrs: p.Attributes, count: p.Count, sum: p.Sum, min: mn, max: mx, exponential: true, temporality: d.Temporality})
			}
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			if matches(p.Attributes, want) {
				mn, _ := p.Min.Value()
				mx, _ := p.Max.Value()
				out = append(out, point{attrs: p.Attributes, count: p.Count, sum: p.Sum, min: mn, max: mx, bounds: p.Bounds, bucketCounts: p.BucketCounts, temporality: d.Temporality})
			}
		}
	default:
		t.Fatalf("metric %s has unexpected data %T", name, m.Data)
	}
	return out
}

// onePoint is the single data point of name matching want.
func onePoint(t *testing.T, rm *metricdata.ResourceMetrics, name string, want map[string]any) point {
	t.Helper()
	ps := pointsOf(t, rm, name, want)
	if len(ps) != 1 {
		t.Fatalf("%s%v: want exactly 1 data point, got %d", name, want, len(ps))
	}
	return ps[0]
}

func near(got, want, rel float64) bool {
	if want == 0 {
		return math.Abs(got) < 1e-12
	}
	return math.Abs(got-want) <= rel*math.Abs(want)
}

var timeZero = time.Time{}

func newManual() *sdkmetric.ManualReader { return sdkmetric.NewManualReader() }

func attrKey(k string) attribute.Key { return attribute.Key(k) }
