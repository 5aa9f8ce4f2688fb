package telemetry

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ncclprof/ncclprof/internal/aggregate"
	"github.com/ncclprof/ncclprof/internal/event"
	"github.com/ncclprof/ncclprof/internal/linfit"
)

var (
	tpComm = aggregate.Comm{Index: 3, Incarnation: 1, Hash: 0xA11EDCE000000001, Name: "tp",
		Rank: 2, NRanks: 8, NNodes: 2, ABI: 6}
	ppComm = aggregate.Comm{Index: 4, Incarnation: 1, Hash: 0x9292929200000002, Name: "",
		Rank: 0, NRanks: 4, NNodes: 1, ABI: 6}
)

// allReduce is a completed ring AllReduce with known times (ns) and transfers.
func allReduce(start event.Ticks, bytes uint64, completionNs, enqueueNs, gpuNs, apiNs float64,
	sizes []float64, times []float64) *aggregate.Op {
	o := &aggregate.Op{Comm: tpComm, Func: "AllReduce", Algo: "RING", Proto: "SIMPLE", Dtype: "ncclFloat32",
		NChannels: 2, Peer: -1, Bytes: bytes, Count: bytes / 4, Start: start,
		EnqueueNs: enqueueNs, CompletionNs: completionNs, HasCompletion: completionNs > 0,
		GPUNs: gpuNs, HasGPU: gpuNs > 0, APINs: apiNs}
	for i := range sizes {
		o.Transfers++
		o.TransferBytes += uint64(sizes[i])
		o.TransferNs += times[i]
	}
	// What aggregate.emit computes (nccl-tests' definitions).
	f, _ := aggregate.Factor(o.Func, o.Comm.NRanks)
	o.AlgBWGBps = float64(bytes) / completionNs
	o.BusBWGBps = o.AlgBWGBps * f
	return o
}

var opAttrs = map[string]any{AttrCommHash: "0xa11edce000000001", AttrCommName: "tp", AttrRank: 2,
	AttrNRanks: 8, AttrNNodes: 2, AttrOp: "AllReduce", AttrAlgo: "RING", AttrProto: "SIMPLE",
	AttrNChannels: 2}

func TestRecordOpValues(t *testing.T) {
	tr := newTestRecorder(t, Config{}, nil)
	// Three AllReduces of 4 MiB with completion 1, 2 and 3 ms: per-operation values, not
	// averages, so the histogram's min/max/sum must be exactly those.
	ops := []*aggregate.Op{
		allReduce(100, 4<<20, 1e6, 20e3, 0.8e6, 5e3, []float64{1 << 20, 1 << 20}, []float64{50e3, 70e3}),
		allReduce(200, 4<<20, 2e6, 30e3, 1.8e6, 6e3, []float64{2 << 20}, []float64{90e3}),
		allReduce(300, 4<<20, 3e6, 40e3, 2.8e6, 7e3, []float64{512 << 10, 512 << 10, 1 << 20}, []float64{10e3, 20e3, 60e3}),
	}
	for _, o := range ops {
		tr.RecordOp(o)
	}
	// A point-to-point send without completion (self send: no proxy children) on another comm.
	tr.RecordOp(&aggregate.Op{Comm: ppComm, Func: "Send", NChannels: 1, Peer: 0, Root: -1,
		Bytes: 1 << 16, EnqueueNs: 900, Start: 400, Incomplete: true})

	rm := tr.collect(t)
	if p := onePoint(t, rm, MOps, opAttrs); p.value != 3 || !p.monotonic || p.temporality != metricdata.CumulativeTemporality {
		t.Errorf("%s = %+v, want 3 (monotonic, cumulative)", MOps, p)
	}
	if p := onePoint(t, rm, MOpIO, opAttrs); p.value != 3*(4<<20) {
		t.Errorf("%s = %v, want %d", MOpIO, p.value, 3*(4<<20))
	}
	hist := func(name string, n uint64, sum, mn, mx float64) {
		t.Helper()
		p := onePoint(t, rm, name, opAttrs)
		if !p.exponential {
			t.Errorf("%s: want an exponential histogram by default", name)
		}
		if p.count != n || !near(p.sum, sum, 1e-9) || !near(p.min, mn, 1e-9) || !near(p.max, mx, 1e-9) {
			t.Errorf("%s: count/sum/min/max = %d/%g/%g/%g, want %d/%g/%g/%g", name, p.count, p.sum, p.min, p.max, n, sum, mn, mx)
		}
	}
	hist(MOpCompletion, 3, 6e-3, 1e-3, 3e-3)
	hist(MOpEnqueue, 3, 90e-6, 20e-6, 40e-6)
	hist(MOpGPU, 3, 5.4e-3, 0.8e-3, 2.8e-3)
	hist(MOpAPI, 3, 18e-6, 5e-6, 7e-6)
	hist(MOpSize, 3, 3*(4<<20), 4<<20, 4<<20)
	// Per-operation mean transfer size and time: 1 MiB, 2 MiB, 2/3 MiB; 60, 90, 30 µs.
	hist(MOpTransferSize, 3, (1<<20)+(2<<20)+float64(2<<20)/3, float64(2<<20)/3, 2<<20)
	hist(MOpTransferTime, 3, 180e-6, 30e-6, 90e-6)
	// algbw = 4 MiB / t; busbw = algbw × 2(n−1)/n with n = 8.
	b := float64(4 << 20)
	hist(MOpAlgBW, 3, b/1e-3+b/2e-3+b/3e-3, b/3e-3, b/1e-3)
	hist(MOpBusBW, 3, (b/1e-3+b/2e-3+b/3e-3)*1.75, b/3e-3*1.75, b/1e-3*1.75)
	if p := onePoint(t, rm, MOpTransfers, opAttrs); p.value != 6 {
		t.Errorf("%s = %v, want 6", MOpTransfers, p.value)
	}
	if p := onePoint(t, rm, MOpTransferBytes, opAttrs); p.value != float64(2<<20+2<<20+2<<20) {
		t.Errorf("%s = %v, want %d", MOpTransferBytes, p.value, 6<<20)
	}
	if p := onePoint(t, rm, MOpIncomplete, opAttrs); p.value != 0 {
		t.Errorf("%s: AllReduces were complete, got %v (the series exists from the start, at 0)", MOpIncomplete, p.value)
	}

	// The Send: no algorithm, protocol or name attribute; enqueue only; counted incomplete.
	send := map[string]any{AttrCommHash: "0x9292929200000002", AttrOp: "Send", AttrRank: 0, AttrNRanks: 4,
		AttrNNodes: 1, AttrNChannels: 1, AttrAlgo: nil, AttrProto: nil, AttrCommName: nil, AttrStep: nil}
	if p := onePoint(t, rm, MOps, send); p.value != 1 {
		t.Errorf("Send count = %v", p.value)
	}
	if p := onePoint(t, rm, MOpEnqueue, send); p.count != 1 || p.sum != 900e-9 {
		t.Errorf("Send enqueue = %+v, want one value of 900 ns", p)
	}
	if ps := pointsOf(t, rm, MOpCompletion, send); len(ps) != 0 {
		t.Errorf("Send had no completion, got %+v", ps)
	}
	if ps := pointsOf(t, rm, MOpAlgBW, send); len(ps) != 0 {
		t.Errorf("Send had no time, so no bandwidth; got %+v", ps)
	}
	if p := onePoint(t, rm, MOpIncomplete, send); p.value != 1 {
		t.Errorf("Send incomplete = %v, want 1", p.value)
	}

	// Resource: ncclprof's own attributes.
	res := rm.Resource
	for k, want := range map[string]string{"service.name": "ncclprof", "host.name": "testhost",
		KeyVersion: "0.1.0"} {
		if v, ok := res.Set().Value(attrKey(k)); !ok || v.AsString() != want {
			t.Errorf("resource %s = %v, want %q", k, v.Emit(), want)
		}
	}
	if v, ok := res.Set().Value("process.pid"); !ok || v.AsInt64() != 4242 {
		t.Errorf("resource process.pid = %v", v.Emit())
	}
	if m, _ := findMetric(rm, MOpCompletion); m.Unit != "s" || m.Description == "" {
		t.Errorf("%s unit %q description %q", MOpCompletion, m.Unit, m.Description)
	}
}

func TestExplicitHistograms(t *testing.T) {
	tr := newTestRecorder(t, Config{Histogram: HistogramExplicit}, nil)
	tr.RecordOp(allReduce(1, 1<<20, 1.5e-3*1e9, 10e3, 0, 0, nil, nil))
	rm := tr.collect(t)
	p := onePoint(t, rm, MOpCompletion, opAttrs)
	if p.exponential || len(p.bounds) == 0 || p.count != 1 {
		t.Fatalf("want an explicit-bucket histogram with one value, got %+v", p)
	}
	// 1.5 ms falls in (1 ms, 2 ms].
	for i, c := range p.bucketCounts {
		if c == 0 {
			continue
		}
		if i == 0 || p.bounds[i-1] != 1e-3 || p.bounds[i] != 2e-3 {
			t.Errorf("1.5 ms landed in bucket %d (bounds %v)", i, p.bounds)
		}
	}
	if p := onePoint(t, rm, MOpSize, opAttrs); p.bounds[0] != 64 {
		t.Errorf("byte histograms use byte bounds, got %v", p.bounds)
	}
}

// TestStepLabels: an operation carries the label in effect when it started, even when the label
// changed again before the operation was recorded.
func TestStepLabels(t *testing.T) {
	tr := newTestRecorder(t, Config{MaxLabels: 2}, nil)
	tr.SetStepLabel("warmup", 100)
	tr.SetStepLabel("train", 1000)
	tr.SetStepLabel("eval", 5000) // third distinct label: over the limit of 2
	tr.SetStepLabel("", 9000)
	for _, start := range []event.Ticks{50, 150, 999, 1000, 4000, 6000, 9500} {
		tr.RecordOp(allReduce(start, 1<<20, 1e6, 1e3, 0, 0, nil, nil))
	}
	rm := tr.collect(t)
	for label, want := range map[string]float64{"warmup": 2, "train": 2, OtherLabel: 1} {
		a := map[string]any{AttrOp: "AllReduce", AttrStep: label}
		if p := onePoint(t, rm, MOps, a); p.value != want {
			t.Errorf("ops labelled %q = %v, want %v", label, p.value, want)
		}
	}
	if p := onePoint(t, rm, MOps, map[string]any{AttrOp: "AllReduce", AttrStep: nil}); p.value != 2 {
		t.Errorf("unlabelled ops (before the first label and after clearing) = %v, want 2", p.value)
	}
	if p := onePoint(t, rm, MLabelsOverflowed, nil); p.value != 1 {
		t.Errorf("%s = %v, want 1", MLabelsOverflowed, p.value)
	}
	if w := tr.warnings(); len(w) != 1 || !strings.Contains(w[0], "distinct step labels") {
		t.Errorf("want one warning about labels, got %q", w)
	}
}

func TestLabelHistoryBound(t *testing.T) {
	h := newLabelHistory(4)
	for i := 0; i < 3*maxLabelChanges; i++ {
		h.set([]string{"a", "b"}[i%2], event.Ticks(10*i))
	}
	if len(h.at) > maxLabelChanges {
		t.Fatalf("history grew to %d entries", len(h.at))
	}
	// Recent changes are exact; times older than what is kept get the label in effect then.
	last := 3*maxLabelChanges - 1
	if got := h.lookup(event.Ticks(10*last + 5)); got != []string{"a", "b"}[last%2] {
		t.Errorf("latest label = %q", got)
	}
	if got := h.lookup(0); got == "" {
		t.Errorf("a time before the kept history should get the floor label, got %q", got)
	}
	// Out-of-order changes are kept sorted.
	h2 := newLabelHistory(4)
	h2.set("late", 500)
	h2.set("early", 100)
	if h2.lookup(200) != "early" || h2.lookup(600) != "late" || h2.lookup(50) != "" {
		t.Errorf("out-of-order labels: %q %q %q", h2.lookup(200), h2.lookup(600), h2.lookup(50))
	}
}

// pairAcc fills a fit from the model time = latency + size/bandwidth.
func pairAcc(latNs, bwBps float64, sizes []uint64, reps int) linfit.Acc {
	var a linfit.Acc
	for r := 0; r < reps; r++ {
		for _, s := range sizes {
			a.Add(s, latNs+float64(s)/bwBps*1e9+float64(r)*10) // a little queueing noise
		}
	}
	return a
}

func testResult(c aggregate.Comm) *aggregate.Result {
	sizes := []uint64{64 << 10, 128 << 10, 256 << 10, 512 << 10}
	return &aggregate.Result{Comm: c,
		Pairs: map[aggregate.PairKey]*aggregate.PairStats{
			{CommHash: c.Hash, Rank: c.Rank, Peer: 1}: {SentBytes: 1000, RecvBytes: 2000, SendTransfers: 10,
				RecvTransfers: 20, Fit: pairAcc(3500, 24e9, sizes, 4)},
			// Two sizes only: not trusted, so no latency or bandwidth.
			{CommHash: c.Hash, Rank: c.Rank, Peer: 3}: {SentBytes: 300, SendTransfers: 3,
				Fit: pairAcc(6500, 8e9, sizes[:2], 4)},
		},
		Channels: map[aggregate.ChannelKey]*aggregate.ChannelStats{
			{CommHash: c.Hash, Rank: c.Rank, Channel: 1}: {Transfers: 16, Bytes: 16 << 20,
				TransferTime: aggregate.Dist{N: 16, Sum: 8e6}, Fit: pairAcc(2000, 12e9, sizes, 4)},
		},
		Health: aggregate.Health{Records: 12345, OrphanSteps: 7, Expired: 2},
	}
}

func TestObserveResults(t *testing.T) {
	tr := newTestRecorder(t, Config{}, nil)
	tr.ObserveResults([]*aggregate.Result{testResult(ppComm)})
	rm := tr.collect(t)
	peer1 := map[string]any{AttrCommHash: "0x9292929200000002", AttrRank: 0, AttrPeer: 1, AttrNRanks: 4}
	for _, c := range []struct {
		name, dir string
		want      float64
	}{{MPairIO, DirTransmit, 1000}, {MPairIO, DirReceive, 2000}, {MPairTransfers, DirTransmit, 10},
		{MPairTransfers, DirReceive, 20}} {
		peer1[AttrDirection] = c.dir
		if p := onePoint(t, rm, c.name, peer1); p.value != c.want || !p.monotonic {
			t.Errorf("%s %s = %+v, want %v (monotonic)", c.name, c.dir, p, c.want)
		}
	}
	// MIN fit: the minimum per size is the noiseless model, so it recovers it exactly.
	minFit := map[string]any{AttrPeer: 1, AttrFit: "min"}
	if p := onePoint(t, rm, MPairLatency, minFit); !near(p.value, 3500e-9, 1e-6) {
		t.Errorf("min-fit latency = %g s, want 3.5e-6", p.value)
	}
	if p := onePoint(t, rm, MPairBandwidth, minFit); !near(p.value, 24e9, 1e-6) {
		t.Errorf("min-fit bandwidth = %g B/s, want 24e9", p.value)
	}
	if p := onePoint(t, rm, MPairR2, minFit); !near(p.value, 1, 1e-9) {
		t.Errorf("min-fit R² = %g, want 1", p.value)
	}
	// AVG fit: noise adds 15 ns on average to every point.
	if p := onePoint(t, rm, MPairLatency, map[string]any{AttrPeer: 1, AttrFit: "avg"}); !near(p.value, 3515e-9, 1e-6) {
		t.Errorf("avg-fit latency = %g s, want 3.515e-6", p.value)
	}
	// Peer 3: counted, but its fit is not trusted (two sizes): no latency/bandwidth/R².
	if p := onePoint(t, rm, MPairIO, map[string]any{AttrPeer: 3, AttrDirection: DirTransmit}); p.value != 300 {
		t.Errorf("peer 3 bytes = %v", p.value)
	}
	for _, name := range []string{MPairLatency, MPairBandwidth, MPairR2} {
		if ps := pointsOf(t, rm, name, map[string]any{AttrPeer: 3}); len(ps) != 0 {
			t.Errorf("%s exported for an untrusted fit: %+v", name, ps)
		}
	}
	ch := map[string]any{AttrChannel: 1, AttrRank: 0}
	if p := onePoint(t, rm, MChanTransfers, ch); p.value != 16 {
		t.Errorf("channel transfers = %v", p.value)
	}
	if p := onePoint(t, rm, MChanIO, ch); p.value != 16<<20 {
		t.Errorf("channel bytes = %v", p.value)
	}
	if p := onePoint(t, rm, MChanTime, ch); !near(p.value, 8e-3, 1e-12) {
		t.Errorf("channel transfer time = %v s, want 8e-3", p.value)
	}
	if p := onePoint(t, rm, MChanLatency, ch); !near(p.value, 2000e-9, 1e-6) {
		t.Errorf("channel latency = %g, want 2e-6", p.value)
	}
	if p := onePoint(t, rm, MChanBandwidth, ch); !near(p.value, 12e9, 1e-6) {
		t.Errorf("channel bandwidth = %g, want 12e9", p.value)
	}
	if p := onePoint(t, rm, MCommEvents, map[string]any{AttrCommHash: "0x9292929200000002"}); p.value != 12345 {
		t.Errorf("comm events = %v", p.value)
	}
	for kind, want := range map[string]float64{"orphan_steps": 7, "expired": 2, "orphan_proxyops": 0} {
		if p := onePoint(t, rm, MCommIssues, map[string]any{AttrKind: kind}); p.value != want {
			t.Errorf("comm issues %s = %v, want %v", kind, p.value, want)
		}
	}
}

// TestFinalResults: a finalized communicator stays exported for keepFinal collections, and a
// new communicator with the same identity replaces it.
func TestFinalResults(t *testing.T) {
	tr := newTestRecorder(t, Config{}, nil)
	tr.ObserveResults([]*aggregate.Result{testResult(ppComm), testResult(tpComm)})
	fin := testResult(ppComm)
	fin.Pairs[aggregate.PairKey{CommHash: ppComm.Hash, Rank: 0, Peer: 1}].SentBytes = 5000
	tr.FinalResult(fin)
	peer1 := map[string]any{AttrCommHash: "0x9292929200000002", AttrPeer: 1, AttrDirection: DirTransmit}
	for i := 0; i < keepFinal; i++ {
		rm := tr.collect(t)
		if p := onePoint(t, rm, MPairIO, peer1); p.value != 5000 {
			t.Fatalf("collection %d: final bytes = %v, want 5000", i, p.value)
		}
	}
	rm := tr.collect(t)
	if ps := pointsOf(t, rm, MPairIO, peer1); len(ps) != 0 {
		t.Errorf("finalized communicator still exported after %d collections: %+v", keepFinal, ps)
	}
	if ps := pointsOf(t, rm, MPairIO, map[string]any{AttrCommHash: "0xa11edce000000001", AttrDirection: DirTransmit}); len(ps) != 2 {
		t.Errorf("the live communicator must stay: %+v", ps)
	}

	// Finalized, then created again (init/finalize cycles): only the new one is observed.
	tr.FinalResult(fin)
	again := ppComm
	again.Incarnation = 2
	r2 := testResult(again)
	r2.Pairs[aggregate.PairKey{CommHash: ppComm.Hash, Rank: 0, Peer: 1}].SentBytes = 7
	tr.ObserveResults([]*aggregate.Result{r2})
	if p := onePoint(t, tr.collect(t), MPairIO, peer1); p.value != 7 {
		t.Errorf("after re-creation, bytes = %v, want 7 (the new communicator only)", p.value)
	}
}

// With the plugin's per-type drops, each reason is split by event type, and the counters'
// totals are not reported beside them (a sum over the series would count them twice).
func TestDropsPerEventType(t *testing.T) {
	counters := map[string]uint64{"dropped_windows_full": 7, "dropped_detail": 2, "dropped_too_many_threads": 1}
	tr := newTestRecorderWith(t, Options{Config: Config{Exporter: ExporterOTLP},
		Counters: func() map[string]uint64 { return counters },
		Drops: func() (map[string]uint64, map[string]uint64) {
			return map[string]uint64{"ProxyStep": 5, "Coll": 2}, map[string]uint64{"KernelCh": 2}
		}})
	rm := tr.collect(t)
	for _, c := range []struct {
		reason, typ string
		want        float64
	}{{"windows_full", "ProxyStep", 5}, {"windows_full", "Coll", 2}, {"trace_detail", "KernelCh", 2}} {
		if p := onePoint(t, rm, MEventsDropped, map[string]any{AttrReason: c.reason, AttrEventType: c.typ}); p.value != c.want {
			t.Errorf("%s %s = %v, want %v", c.reason, c.typ, p.value, c.want)
		}
	}
	var total float64
	for _, p := range pointsOf(t, rm, MEventsDropped, nil) {
		total += p.value
	}
	if total != 10 { // 7 + 2 + 1 too_many_threads, nothing twice
		t.Errorf("drops sum to %v over the series, want 10", total)
	}
}

func TestHealthAndTraceBytes(t *testing.T) {
	counters := map[string]uint64{"events": 1000, "dropped_windows_full": 5, "dropped_too_many_threads": 1,
		"windows_processed": 12, "stale_handle": 3, "late_records": 9}
	tr := newTestRecorder(t, Config{Exporter: ExporterOTLP}, func() map[string]uint64 { return counters })
	var written uint64 = 4096
	tr.SetTraceBytes(func() uint64 { return written })
	rm := tr.collect(t)
	check := func(name string, want float64, attrs map[string]any) {
		t.Helper()
		if p := onePoint(t, rm, name, attrs); p.value != want {
			t.Errorf("%s%v = %v, want %v", name, attrs, p.value, want)
		}
	}
	check(MEvents, 1000, nil)
	check(MEventsDropped, 5, map[string]any{AttrReason: "windows_full"})
	check(MEventsDropped, 1, map[string]any{AttrReason: "too_many_threads"})
	check(MWindows, 12, nil)
	check(MConditions, 3, map[string]any{AttrKind: "stale_handle"})
	check(MConditions, 9, map[string]any{AttrKind: "late_records"})
	check(MTraceIO, 4096, nil)
	// Without per-type drops the totals carry the reason alone; trace detail is its own reason.
	counters["dropped_detail"] = 4
	check2 := tr.collect(t)
	if p := onePoint(t, check2, MEventsDropped, map[string]any{AttrReason: "trace_detail"}); p.value != 4 {
		t.Errorf("trace_detail drops = %v, want 4", p.value)
	}
	check(MExportFailures, 0, map[string]any{AttrExporter: "otlp"})
	counters["events"] = 2500
	written = 8192
	rm = tr.collect(t)
	check(MEvents, 2500, nil)
	check(MTraceIO, 8192, nil)
}

func TestNilRecorder(t *testing.T) {
	r, err := New(context.Background(), Options{Config: Config{Exporter: ExporterNone}})
	if err != nil || r != nil {
		t.Fatalf("none: New = %v, %v; want nil, nil", r, err)
	}
	// Every method is safe on a nil Recorder.
	r.RecordOp(&aggregate.Op{})
	r.ObserveResults(nil)
	r.FinalResult(&aggregate.Result{})
	r.SetStepLabel("x", 1)
	r.SetTraceBytes(func() uint64 { return 1 })
	if err := r.FinalFlush(); err != nil {
		t.Error(err)
	}
	if err := r.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
	if r.SnapshotDue(timeZero) {
		t.Error("nil recorder wants snapshots")
	}
}

// TestOverload: operations arriving faster than the SDK can record them never block the
// caller; histogram values are skipped and counted, counters stay exact.
func TestOverload(t *testing.T) {
	tr := newTestRecorder(t, Config{}, nil)
	const n = 50000
	o := allReduce(1, 1<<20, 2e6, 1e4, 0, 0, []float64{1 << 20}, []float64{5e4})
	start := time.Now()
	for i := 0; i < n; i++ {
		tr.RecordOp(o)
		if i%512 == 0 {
			tr.Pass()
		}
	}
	took := time.Since(start)
	rm := tr.collect(t)
	dropped := onePoint(t, rm, MOpSamplesDropped, nil).value
	size := onePoint(t, rm, MOpSize, opAttrs)
	t.Logf("%d operations recorded by the caller in %v (%.0f ns each); %v histogram samples skipped", n, took,
		float64(took.Nanoseconds())/n, dropped)
	if ops := onePoint(t, rm, MOps, opAttrs).value; ops != n {
		t.Errorf("%s = %v, want exactly %d", MOps, ops, n)
	}
	if b := onePoint(t, rm, MOpIO, opAttrs).value; b != n*(1<<20) {
		t.Errorf("%s = %v, want exactly %d", MOpIO, b, n*(1<<20))
	}
	if float64(size.count)+dropped != n {
		t.Errorf("histogram values %d + skipped %v != %d operations", size.count, dropped, n)
	}
	if dropped == 0 {
		t.Logf("the worker kept up with %d operations in %v", n, took)
	}
}

// TestScopeAndNames (issue 16 item 5): the instrumentation scope has a version and a schema,
// and metric names follow OpenTelemetry's conventions: no unit words (the unit is metadata),
// one metric per quantity with direction as an attribute rather than send/recv in the name.
func TestScopeAndNames(t *testing.T) {
	tr := newTestRecorder(t, Config{}, nil)
	rm := tr.collect(t)
	if len(rm.ScopeMetrics) != 1 {
		t.Fatalf("%d scopes", len(rm.ScopeMetrics))
	}
	if s := rm.ScopeMetrics[0].Scope; s.Name != ScopeName || s.Version != "0.1.0" ||
		!strings.HasPrefix(s.SchemaURL, "https://opentelemetry.io/schemas/") {
		t.Errorf("scope %+v, want %s version 0.1.0 with a schema URL", s, ScopeName)
	}
	units := map[string]bool{"bytes": true, "byte": true, "seconds": true, "second": true, "ms": true,
		"us": true, "ns": true, "bits": true, "percent": true, "ratio": true}
	for _, d := range Catalog {
		if strings.HasPrefix(d.Name, "ncclprof.op.transfer") {
			continue // per-operation transfer statistics: being replaced by per-transfer ones
		}
		for _, w := range strings.FieldsFunc(d.Name, func(r rune) bool { return r == '.' || r == '_' }) {
			if units[w] {
				t.Errorf("%s has the unit word %q in its name (its unit is %s)", d.Name, w, d.Unit)
			}
			if w == "send" || w == "recv" || w == "sent" || w == "received" {
				t.Errorf("%s: direction belongs in %s, not the name", d.Name, AttrDirection)
			}
		}
	}
}

// An operation NCCL reported only by its API events carries ncclprof.api_only=true, in a series
// of its own beside the same function's ordinary operations, which carry no such attribute.
func TestRecordAPIOnlyMarked(t *testing.T) {
	tr := newTestRecorder(t, Config{}, nil)
	tr.RecordOp(&aggregate.Op{Comm: ppComm, Func: "AllReduce", Peer: -1, Bytes: 1 << 16, APINs: 4000,
		Start: 100, End: 4100, APIOnly: true})
	tr.RecordOp(&aggregate.Op{Comm: ppComm, Func: "AllReduce", Peer: -1, Bytes: 1 << 16, APINs: 5000,
		Start: 200, End: 5200, APIOnly: true})
	tr.RecordOp(&aggregate.Op{Comm: ppComm, Func: "AllReduce", Algo: "RING", Proto: "LL", NChannels: 1,
		Peer: -1, Bytes: 1 << 16, Start: 300, End: 9300, CompletionNs: 9000, HasCompletion: true})
	rm := tr.collect(t)
	if p := onePoint(t, rm, MOps, map[string]any{AttrOp: "AllReduce", AttrAPIOnly: true}); p.value != 2 {
		t.Errorf("API-only AllReduces: %v, want 2", p.value)
	}
	if p := onePoint(t, rm, MOps, map[string]any{AttrOp: "AllReduce", AttrAlgo: "RING", AttrAPIOnly: nil}); p.value != 1 {
		t.Errorf("ordinary AllReduces: %v, want 1 without the attribute", p.value)
	}
}
