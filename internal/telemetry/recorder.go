package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/exemplar"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"

	"github.com/ncclprof/ncclprof/internal/aggregate"
	"github.com/ncclprof/ncclprof/internal/event"
	"github.com/ncclprof/ncclprof/internal/linfit"
)

// ScopeName is the instrumentation scope of every metric.
const ScopeName = "github.com/ncclprof/ncclprof"

// Options configure a Recorder.
type Options struct {
	Config Config
	// Host describes the process for the resource (ProcessHost in the plugin).
	Host Host
	// Warn receives one-line warnings. It may be called from any goroutine (the SDK's export
	// goroutine included) and must not block. nil discards them.
	Warn func(string)
	// Counters returns the plugin's process-wide counters by name (drainer/summary.go
	// counterNames). It is called at collection, from the SDK's goroutine. nil: none.
	Counters func() map[string]uint64
	// Drops returns the events dropped since the plugin started, per event type: those not
	// tracked (windows full) and the detail records a trace could not get. Called at
	// collection; nil: the totals of Counters are reported without a type.
	Drops func() (untracked, trace map[string]uint64)
	// Reader, if set, replaces the configured exporter (tests use a ManualReader).
	Reader sdkmetric.Reader
}

// Recorder turns what the plugin aggregates into OpenTelemetry metrics.
//
// Threads: RecordOp, Pass, ObserveResults, FinalResult, FinalFlush and Sync belong to the
// goroutine that owns the aggregator (the plugin's drainer). Except FinalFlush, which waits a
// bounded time for the export at teardown, they never wait for the network: per-operation
// values are recorded by a worker goroutine (ops.go) and exports run on the Recorder's export
// goroutine or, for Prometheus, on the scrape's. SetStepLabel, SetTraceBytes, Stats, Config,
// ForceFlush and Shutdown may be called from any goroutine.
type Recorder struct {
	cfg      Config
	warnFn   func(string)
	counters func() map[string]uint64
	drops    func() (untracked, trace map[string]uint64)

	provider  *sdkmetric.MeterProvider
	push      *pusher // nil for Prometheus and injected readers
	file      *fileExporter
	host      Host
	getenv    Getenv
	prom      *http.Server
	promConns *connGuard // the endpoint's listener (promserve.go)
	promAddr  string

	ops     opInstruments
	fix     repairs // strings from outside made valid UTF-8 (valid.go)
	labels  *labelHistory
	rec     *opRecorder
	lastObs time.Time

	mu    sync.Mutex // guards snaps
	snaps map[commKey]*commSnap

	traceBytes atomic.Pointer[func() uint64]

	exportFailures, droppedPoints, exportsOK atomic.Uint64
	lastFailed                               atomic.Bool
	warnedExport, warnedListen, warnedSDK    atomic.Bool
	warnedLabels, warnedPanic, warnedUTF8    atomic.Bool
}

// New starts metrics as configured. With Config.Exporter "none" it returns (nil, nil): a nil
// *Recorder accepts every call and does nothing.
func New(ctx context.Context, o Options) (*Recorder, error) {
	if o.Config.Exporter == ExporterNone && o.Reader == nil {
		return nil, nil
	}
	getenv := o.Host.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	r := &Recorder{cfg: o.Config, warnFn: o.Warn, counters: o.Counters, drops: o.Drops, host: o.Host, getenv: getenv,
		labels: newLabelHistory(o.Config.MaxLabels), snaps: map[commKey]*commSnap{}}
	installGlobalHandlers(r)
	res, err := NewResource(o.Host)
	if err != nil && res == nil {
		return nil, fmt.Errorf("cannot build the metrics resource: %w", err)
	}
	res = r.fix.resource(res)
	r.warnRepairs()
	reader := o.Reader
	switch {
	case reader != nil:
	case r.cfg.Exporter == ExporterPrometheus:
		if reader, err = r.prometheusReader(); err != nil {
			return nil, err
		}
	default:
		if r.push, err = r.newPusher(ctx); err != nil {
			return nil, err
		}
		reader = r.push.reader
	}
	r.provider = sdkmetric.NewMeterProvider(
		sdkmetric.WithResource(res),
		sdkmetric.WithReader(reader),
		sdkmetric.WithView(views(r.cfg.Histogram)...),
		// The plugin has no trace context, so exemplars would never be sampled: skip the work.
		sdkmetric.WithExemplarFilter(exemplar.AlwaysOffFilter),
	)
	r.rec = newOpRecorder(&r.ops, &r.fix) // its worker reads r.ops only once operations arrive
	if err := r.instruments(); err != nil {
		r.rec.stop(ctx)
		_ = r.provider.Shutdown(ctx)
		return nil, err
	}
	if r.push != nil {
		r.push.start()
	}
	return r, nil
}

// views choose the histogram aggregation: base-2 exponential (default: no bucket bounds to
// choose, values spanning 8 B..16 GB or µs..s keep their resolution) or explicit buckets per
// unit.
func views(hist string) []sdkmetric.View {
	if hist == HistogramExplicit {
		bounds := map[string][]float64{
			"s":    {1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 100},
			"By":   {64, 256, 1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30, 4 << 30, 16 << 30},
			"By/s": {1e6, 1e7, 1e8, 2e8, 5e8, 1e9, 2e9, 5e9, 1e10, 2e10, 5e10, 1e11, 2e11, 5e11, 1e12},
		}
		var vs []sdkmetric.View
		for unit, b := range bounds {
			vs = append(vs, sdkmetric.NewView(
				sdkmetric.Instrument{Kind: sdkmetric.InstrumentKindHistogram, Unit: unit, Scope: scopeCriteria()},
				sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{Boundaries: b}}))
		}
		return vs
	}
	return []sdkmetric.View{sdkmetric.NewView(
		sdkmetric.Instrument{Kind: sdkmetric.InstrumentKindHistogram, Scope: scopeCriteria()},
		sdkmetric.Stream{Aggregation: sdkmetric.AggregationBase2ExponentialHistogram{MaxSize: 160, MaxScale: 20}})}
}

// meter is ncclprof's instrumentation scope: its name, the plugin's version and the semantic
// conventions its attribute names follow.
func (r *Recorder) meter() metric.Meter {
	return r.provider.Meter(ScopeName, metric.WithInstrumentationVersion(r.host.Version),
		metric.WithSchemaURL(semconv.SchemaURL))
}

func (r *Recorder) instruments() error {
	m := r.meter()
	var errs []error
	desc := map[string]Def{}
	for _, d := range Catalog {
		desc[d.Name] = d
	}
	i64 := func(name string) metric.Int64Counter {
		d := desc[name]
		c, err := m.Int64Counter(name, metric.WithUnit(d.Unit), metric.WithDescription(d.Desc))
		errs = append(errs, err)
		return c
	}
	hist := func(name string) metric.Float64Histogram {
		d := desc[name]
		h, err := m.Float64Histogram(name, metric.WithUnit(d.Unit), metric.WithDescription(d.Desc))
		errs = append(errs, err)
		return h
	}
	for i, name := range counterNames {
		r.ops.counters[i] = i64(name)
	}
	for i, name := range histNames {
		r.ops.hists[i] = hist(name)
	}
	obs := map[string]metric.Observable{}
	var list []metric.Observable
	for _, d := range Catalog {
		var o metric.Observable
		var err error
		switch d.Kind {
		case KindObservableCounter:
			if d.Unit == "s" {
				o, err = m.Float64ObservableCounter(d.Name, metric.WithUnit(d.Unit), metric.WithDescription(d.Desc))
			} else {
				o, err = m.Int64ObservableCounter(d.Name, metric.WithUnit(d.Unit), metric.WithDescription(d.Desc))
			}
		case KindObservableGauge:
			o, err = m.Float64ObservableGauge(d.Name, metric.WithUnit(d.Unit), metric.WithDescription(d.Desc))
		default:
			continue
		}
		errs = append(errs, err)
		obs[d.Name] = o
		list = append(list, o)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	_, err := m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		return r.observe(o, obs)
	}, list...)
	return err
}

// SetStepLabel labels the operations that start at or after `at` (the clock of
// aggregate.Op.Start: the plugin's tick counter) with `label`, until the next change. An empty
// label removes the attribute. Use a few phase names ("warmup", "train", "eval"), not step
// numbers: each label multiplies the per-operation series; past NCCLPROF_METRICS_MAX_LABELS
// distinct labels, new ones are reported as "other". It returns the label as recorded.
func (r *Recorder) SetStepLabel(label string, at event.Ticks) string {
	if r == nil {
		return label
	}
	label = r.fix.str(label)
	got := r.labels.set(label, at)
	if got != label {
		r.warnOnce(&r.warnedLabels, fmt.Sprintf("more than %d distinct step labels; later ones are "+
			"reported as %q (use a few phase names rather than step numbers, or raise "+
			"NCCLPROF_METRICS_MAX_LABELS)", r.cfg.MaxLabels, OtherLabel))
	}
	return got
}

// SetTraceBytes gives the function that reports how many bytes the trace writer has written
// (monotonic). It is called at collection from the SDK's goroutine, so it must be safe to call
// from any goroutine (an atomic load).
func (r *Recorder) SetTraceBytes(f func() uint64) {
	if r == nil {
		return
	}
	r.traceBytes.Store(&f)
}

// ---------------------------------------------------------------------------- snapshots

type commKey struct {
	index       uint32
	incarnation uint64
}

type pairSnap struct {
	rank, peer                 int
	hash                       uint64
	sendB, sendT, recvB, recvT uint64
	fits                       [2]linfit.Result // avg, min
}

type chanSnap struct {
	rank, channel int
	hash          uint64
	transfers     uint64
	bytes         uint64
	timeNs        float64
	fit           linfit.Result // min
}

type commSnap struct {
	comm     aggregate.Comm
	pairs    []pairSnap
	chans    []chanSnap
	health   aggregate.Health
	final    bool
	finalAge int // collections since it became final
}

// keepFinal is how many collections a finalized communicator's results stay exported.
const keepFinal = 2

func snapshot(res *aggregate.Result, fix *repairs) *commSnap {
	s := &commSnap{comm: res.Comm, health: res.Health}
	s.comm.Name = fix.str(s.comm.Name)
	for k, p := range res.Pairs {
		avg, mn := p.Fits()
		s.pairs = append(s.pairs, pairSnap{rank: k.Rank, peer: k.Peer, hash: k.CommHash,
			sendB: p.SentBytes, sendT: p.SendTransfers, recvB: p.RecvBytes, recvT: p.RecvTransfers,
			fits: [2]linfit.Result{avg, mn}})
	}
	for k, c := range res.Channels {
		s.chans = append(s.chans, chanSnap{rank: k.Rank, channel: k.Channel, hash: k.CommHash,
			transfers: c.Transfers, bytes: c.Bytes, timeNs: c.TransferTime.Sum, fit: c.Fit.Fit(linfit.MIN)})
	}
	return s
}

// SnapshotDue says whether ObserveResults should run now: rank-pair and channel results are
// copied at most every SnapshotEvery.
func (r *Recorder) SnapshotDue(now time.Time) bool {
	return r != nil && now.Sub(r.lastObs) >= SnapshotEvery
}

// ObserveResults copies the live communicators' rank-pair, channel and health results for the
// next export (results of aggregate.Aggregator.Results; call from the goroutine that owns the
// aggregator). Fits are computed here, not at export.
func (r *Recorder) ObserveResults(results []*aggregate.Result) {
	if r == nil {
		return
	}
	defer r.recoverPanic("copying results")
	r.lastObs = time.Now()
	snaps := make([]*commSnap, 0, len(results))
	for _, res := range results {
		snaps = append(snaps, snapshot(res, &r.fix))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range snaps {
		r.putLocked(s)
	}
}

// FinalResult records a finalized communicator's last results; they stay exported for
// keepFinal more collections.
func (r *Recorder) FinalResult(res *aggregate.Result) {
	if r == nil || res == nil {
		return
	}
	defer r.recoverPanic("copying final results")
	s := snapshot(res, &r.fix)
	s.final = true
	r.mu.Lock()
	defer r.mu.Unlock()
	r.putLocked(s)
}

func (r *Recorder) putLocked(s *commSnap) {
	k := commKey{s.comm.Index, s.comm.Incarnation}
	// A finalized communicator replaced by a new one with the same identity: the new one's
	// counters start again from zero, so the old series must not be observed next to it.
	for ok, old := range r.snaps {
		if ok != k && old.final && old.comm.Hash == s.comm.Hash && old.comm.Rank == s.comm.Rank {
			delete(r.snaps, ok)
		}
	}
	r.snaps[k] = s
}

// ---------------------------------------------------------------------------- collection

// dropReasons names the ncclprof.reason of the plugin's drop counters.
var dropReasons = map[string]string{"dropped_windows_full": "windows_full", "dropped_detail": "trace_detail"}

func (r *Recorder) observe(o metric.Observer, obs map[string]metric.Observable) error {
	i64 := func(name string, v uint64, opts ...metric.ObserveOption) {
		o.ObserveInt64(obs[name].(metric.Int64Observable), int64(v), opts...)
	}
	f64 := func(name string, v float64, opts ...metric.ObserveOption) {
		o.ObserveFloat64(obs[name].(metric.Float64Observable), v, opts...)
	}
	with := func(kv ...attribute.KeyValue) metric.ObserveOption {
		return metric.WithAttributeSet(attribute.NewSet(kv...))
	}

	// Plugin health.
	if r.counters != nil {
		for name, v := range r.counters() {
			switch name {
			case "events":
				i64(MEvents, v)
			case "windows_processed":
				i64(MWindows, v)
			case "dropped_windows_full", "dropped_detail":
				if r.drops == nil { // else per type, below
					i64(MEventsDropped, v, with(attribute.String(AttrReason, dropReasons[name])))
				}
			case "dropped_too_many_threads":
				i64(MEventsDropped, v, with(attribute.String(AttrReason, "too_many_threads")))
			default:
				i64(MConditions, v, with(attribute.String(AttrKind, name)))
			}
		}
	}
	if r.drops != nil {
		untracked, trace := r.drops()
		for reason, byType := range map[string]map[string]uint64{"windows_full": untracked, "trace_detail": trace} {
			for typ, v := range byType {
				i64(MEventsDropped, v, with(attribute.String(AttrReason, reason), attribute.String(AttrEventType, typ)))
			}
		}
	}
	exp := with(attribute.String(AttrExporter, r.cfg.Exporter))
	i64(MExportFailures, r.exportFailures.Load(), exp)
	i64(MExportDropped, r.droppedPoints.Load(), exp)
	var tb uint64
	if f := r.traceBytes.Load(); f != nil && *f != nil {
		tb = (*f)()
	}
	i64(MTraceIO, tb)
	i64(MLabelsOverflowed, r.labels.overflowed())
	i64(MOpSamplesDropped, r.rec.dropped.Load())
	i64(MConditions, r.fix.n.Load(), with(attribute.String(AttrKind, KindInvalidUTF8)))
	if r.promConns != nil {
		i64(MConditions, r.promConns.refused.Load(), with(attribute.String(AttrKind, KindPromRefused)))
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	for k, s := range r.snaps {
		r.observeComm(s, i64, f64, with)
		if s.final {
			if s.finalAge++; s.finalAge >= keepFinal {
				delete(r.snaps, k)
			}
		}
	}
	return nil
}

func (r *Recorder) observeComm(s *commSnap, i64 func(string, uint64, ...metric.ObserveOption),
	f64 func(string, float64, ...metric.ObserveOption), with func(...attribute.KeyValue) metric.ObserveOption) {
	base := commAttrs(s.comm, s.comm.Hash, s.comm.Rank)
	i64(MCommEvents, s.health.Records, with(base...))
	h := s.health
	for _, kv := range []struct {
		kind string
		v    uint64
	}{{"orphan_steps", h.OrphanSteps}, {"orphan_proxyops", h.OrphanProxy},
		{"orphan_kernelch", h.OrphanKernel}, {"late_unmatched", h.LateUnmatched},
		{"expired", h.Expired}, {"foreign_pxn", h.Foreign}} {
		i64(MCommIssues, kv.v, with(append(base, attribute.String(AttrKind, kv.kind))...))
	}
	for _, p := range s.pairs {
		kv := append(commAttrs(s.comm, p.hash, p.rank), attribute.Int(AttrPeer, p.peer))
		tx := with(append(kv, attribute.String(AttrDirection, DirTransmit))...)
		rx := with(append(kv, attribute.String(AttrDirection, DirReceive))...)
		i64(MPairIO, p.sendB, tx)
		i64(MPairTransfers, p.sendT, tx)
		i64(MPairIO, p.recvB, rx)
		i64(MPairTransfers, p.recvT, rx)
		for _, f := range p.fits {
			if !f.Trusted {
				continue
			}
			fs := with(append(kv, attribute.String(AttrFit, f.Mode.String()))...)
			f64(MPairLatency, f.LatencyNs/1e9, fs)
			f64(MPairBandwidth, f.BandwidthBps, fs)
			f64(MPairR2, f.R2, fs)
		}
	}
	for _, c := range s.chans {
		kv := append(commAttrs(s.comm, c.hash, c.rank), attribute.Int(AttrChannel, c.channel))
		set := with(kv...)
		i64(MChanTransfers, c.transfers, set)
		i64(MChanIO, c.bytes, set)
		f64(MChanTime, c.timeNs/1e9, set)
		if c.fit.Trusted {
			fs := with(append(kv, attribute.String(AttrFit, c.fit.Mode.String()))...)
			f64(MChanLatency, c.fit.LatencyNs/1e9, fs)
			f64(MChanBandwidth, c.fit.BandwidthBps, fs)
			f64(MChanR2, c.fit.R2, fs)
		}
	}
}

// ---------------------------------------------------------------------------- export state

func (r *Recorder) exportFailed(err error, points uint64) {
	r.exportFailures.Add(1)
	r.droppedPoints.Add(points)
	r.lastFailed.Store(true)
	what := "metrics export failed"
	switch r.cfg.Exporter {
	case ExporterOTLP:
		what = fmt.Sprintf("metrics export (OTLP %s to %s) failed", r.cfg.Protocol, r.cfg.Endpoint)
	case ExporterFile:
		what = fmt.Sprintf("writing metrics to %s failed", r.cfg.OutputDir)
	}
	advice := "check the collector and OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_PROTOCOL, " +
		"or set NCCLPROF_METRICS=file or none"
	switch r.cfg.Exporter {
	case ExporterFile:
		advice = "check that the directory is writable and has space, choose another with " +
			"NCCLPROF_OUTPUT_DIR, or set NCCLPROF_METRICS=none"
	case ExporterConsole, ExporterPrometheus:
		advice = "set NCCLPROF_METRICS=none to turn metrics off"
	}
	if errors.As(err, new(encodeError)) {
		what, advice = "encoding metrics failed", "this is a bug in ncclprof: please report this message"
	}
	r.warnOnce(&r.warnedExport, fmt.Sprintf("%s: %v. The job continues; metrics that cannot be "+
		"exported are dropped and counted (ncclprof.export.failures); %s. This warning is "+
		"printed once.", what, err, advice))
}

func (r *Recorder) exportOK() {
	r.exportsOK.Add(1)
	r.lastFailed.Store(false)
}

// Stats are the Recorder's own counts.
type Stats struct {
	Exports, ExportFailures, DroppedPoints uint64
	// FileRotations counts the metrics file's rotations (NCCLPROF_METRICS_FILE_MAX_MB).
	FileRotations uint64
	// File is the metrics file (file exporter, after its first export); PrometheusAddr the
	// address the Prometheus endpoint listens on.
	File, PrometheusAddr string
	// PrometheusConns is how many connections the endpoint holds now; PrometheusRefused how
	// many it closed at once or evicted to stay within its bounds (promserve.go).
	PrometheusConns   int
	PrometheusRefused uint64
}

// Stats returns the Recorder's counts.
func (r *Recorder) Stats() Stats {
	if r == nil {
		return Stats{}
	}
	s := Stats{Exports: r.exportsOK.Load(), ExportFailures: r.exportFailures.Load(),
		DroppedPoints: r.droppedPoints.Load(), PrometheusAddr: r.promAddr}
	if r.file != nil {
		s.File, s.FileRotations = r.file.Path(), r.file.Rotations()
	}
	if r.promConns != nil {
		s.PrometheusConns, s.PrometheusRefused = r.promConns.open(), r.promConns.refused.Load()
	}
	return s
}

// Config returns the configuration in use.
func (r *Recorder) Config() Config {
	if r == nil {
		return Config{Exporter: ExporterNone}
	}
	return r.cfg
}

// ForceFlush collects and exports now (push exporters), bounded by ctx (by
// NCCLPROF_METRICS_FINAL_TIMEOUT_MS when ctx has no deadline). Prometheus is pulled: nothing to do.
func (r *Recorder) ForceFlush(ctx context.Context) error {
	if r == nil || r.push == nil {
		return nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.cfg.FinalTimeout)
		defer cancel()
	}
	_ = r.rec.sync(ctx, false)
	return r.push.flush(ctx)
}

// FinalFlush is the export done when the last communicator is finalized: bounded by
// NCCLPROF_METRICS_FINAL_TIMEOUT_MS, and by DownFinalTimeout when the previous export failed
// (the collector is probably down: one short attempt rather than a long teardown).
func (r *Recorder) FinalFlush() error {
	if r == nil || r.push == nil {
		return nil
	}

	t := r.cfg.FinalTimeout
	if r.lastFailed.Load() && t > DownFinalTimeout {
		t = DownFinalTimeout
	}
	if t <= 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), t)
	defer cancel()
	_ = r.rec.sync(ctx, true) // everything recorded goes out (the worker is fast; see ops.go)
	return r.push.flush(ctx)
}

// Shutdown exports a last time (bounded by ctx) and stops everything, the Prometheus endpoint
// included.
func (r *Recorder) Shutdown(ctx context.Context) error {
	if r == nil {
		return nil
	}
	var err error
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, max(r.cfg.FinalTimeout, time.Second))
		defer cancel()
	}
	r.rec.stop(ctx)
	if r.push != nil {
		err = r.push.shutdown(ctx)
	}
	err = errors.Join(err, r.provider.Shutdown(ctx))
	if r.prom != nil {
		err = errors.Join(err, r.prom.Shutdown(ctx))
	}
	if current.Load() == r {
		current.CompareAndSwap(r, nil)
	}
	return err
}

// ---------------------------------------------------------------------------- warnings

func (r *Recorder) warn(msg string) {
	if r.warnFn != nil {
		r.warnFn(r.cfg.Redact(msg))
	}
}

func (r *Recorder) warnOnce(flag *atomic.Bool, msg string) {
	if flag.CompareAndSwap(false, true) {
		r.warn(msg)
	}
}

// warnRepairs warns once that strings had to be repaired (valid.go).
func (r *Recorder) warnRepairs() {
	if r.fix.n.Load() > 0 {
		r.warnOnce(&r.warnedUTF8, "a communicator name, operation string, step label or resource "+
			"attribute is not valid UTF-8; it is exported with U+FFFD in place of the invalid bytes "+
			"(counted in ncclprof.plugin.conditions{ncclprof.kind=\"invalid_utf8\"}). Printed once.")
	}
}

// recoverPanic keeps a bug in metrics from taking the training job down: the panic is reported
// once and the call is abandoned.
func (r *Recorder) recoverPanic(what string) {
	if p := recover(); p != nil {
		r.warnOnce(&r.warnedPanic, fmt.Sprintf("internal error while %s (%v); metrics may be "+
			"incomplete, the job continues", what, p))
	}
}

// The SDK reports problems through process-wide handlers; they go to the newest Recorder.
var current atomic.Pointer[Recorder]

func installGlobalHandlers(r *Recorder) {
	current.Store(r)
	installOnce.Do(func() {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			rec := current.Load()
			if rec == nil {
				return
			}
			var ee exportError
			if errors.As(err, &ee) {
				return // counted and reported by the exporter wrapper
			}
			rec.warnOnce(&rec.warnedSDK, "OpenTelemetry SDK: "+err.Error()+" (printed once)")
		}))
		otel.SetLogger(sdkLogger())
	})
}

var installOnce sync.Once

func scopeCriteria() instrumentation.Scope { return instrumentation.Scope{Name: ScopeName} }

// sdkLogger passes the SDK's warnings and errors (V(1) and below) to the newest Recorder's
// warnings, once, and drops its info and debug messages; the default would print to stderr.
func sdkLogger() logr.Logger { return logr.New(sdkSink{}) }

type sdkSink struct{}

func (sdkSink) Init(logr.RuntimeInfo)  {}
func (sdkSink) Enabled(level int) bool { return level <= 1 }
func (sdkSink) Info(level int, msg string, kv ...any) {
	if level <= 1 {
		sdkMessage(msg, nil, kv)
	}
}
func (sdkSink) Error(err error, msg string, kv ...any) { sdkMessage(msg, err, kv) }
func (s sdkSink) WithValues(...any) logr.LogSink       { return s }
func (s sdkSink) WithName(string) logr.LogSink         { return s }

func sdkMessage(msg string, err error, kv []any) {
	rec := current.Load()
	if rec == nil {
		return
	}
	var ee exportError
	if err != nil && errors.As(err, &ee) {
		return
	}
	if err != nil {
		msg += ": " + err.Error()
	}
	if len(kv) > 0 {
		msg += fmt.Sprint(" ", kv)
	}
	rec.warnOnce(&rec.warnedSDK, "OpenTelemetry SDK: "+msg+" (printed once)")
}
