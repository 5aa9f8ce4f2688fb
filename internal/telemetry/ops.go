package telemetry

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/ncclprof/ncclprof/internal/aggregate"
)

// Per-operation recording.
//
// The SDK costs about half a microsecond per measurement with ncclprof's attribute sets (it
// re-normalizes the attribute set on every call), and an operation feeds up to 14 instruments.
// The drainer must not pay that: when it falls behind, the hot path's windows fill and NCCL's
// events are dropped for every output, not only metrics. So the drainer only
//   - adds the operation's counts and bytes to per-series sums (exact, a map lookup), handed to
//     the SDK once per drainer pass, and
//   - queues the operation's histogram values (a non-blocking channel send)
// and a worker goroutine records them. If the worker cannot keep up, histogram values are
// skipped and counted (ncclprof.op.samples_dropped); the counters stay exact.

// Counters, in opInstruments.counters order.
const (
	cOps = iota
	cBytes
	cIncomplete
	cTransfers
	cTransferBytes
	nCounters
)

var counterNames = [nCounters]string{MOps, MOpIO, MOpIncomplete, MOpTransfers, MOpTransferBytes}

// Histograms, in opInstruments.hists order.
const (
	hSize = iota
	hCompletion
	hEnqueue
	hGPU
	hAPI
	hTransferSize
	hTransferTime
	hAlgBW
	hBusBW
	nHists
)

var histNames = [nHists]string{MOpSize, MOpCompletion, MOpEnqueue, MOpGPU, MOpAPI,
	MOpTransferSize, MOpTransferTime, MOpAlgBW, MOpBusBW}

type opInstruments struct {
	counters [nCounters]metric.Int64Counter
	hists    [nHists]metric.Float64Histogram
}

// opQueue is how many operations' histogram values may wait for the worker.
const opQueue = 8192

type opAttrKey struct {
	hash                        uint64
	rank, nranks, nnodes, nch   int
	name, fn, algo, proto, step string
	apiOnly                     bool
}

// series is one per-operation attribute set with its pending counter sums.
type series struct {
	opt   metric.MeasurementOption
	sums  [nCounters]int64
	dirty bool
}

// sample is one operation's histogram values, or a barrier or counter batch for the worker.
type sample struct {
	opt     metric.MeasurementOption
	vals    [nHists]float64
	has     uint16
	adds    []counterAdd
	barrier chan struct{}
}

type counterAdd struct {
	opt  metric.MeasurementOption
	sums [nCounters]int64
}

// opRecorder is the drainer's side (series, pending counters) and the worker.
type opRecorder struct {
	closed  atomic.Bool
	in      *opInstruments
	fix     *repairs
	series  map[opAttrKey]*series // drainer goroutine only
	queue   chan sample
	dropped atomic.Uint64 // histogram samples skipped
	// behind: a wait for room timed out; until the worker has emptied half the queue, samples
	// that find it full are dropped without waiting (drainer goroutine only).
	behind bool
}

// queueWait is how long the drainer waits for the worker when a burst of completed operations
// fills the queue: it is the drainer's goroutine, never NCCL's threads, and its windows hold
// far more than this, so a burst the worker absorbs a moment later costs no values.
const queueWait = 50 * time.Millisecond

// maxSeriesCache bounds the attribute-set cache (the SDK's cardinality limit bounds the
// exported series themselves).
const maxSeriesCache = 8192

func newOpRecorder(in *opInstruments, fix *repairs) *opRecorder {
	o := &opRecorder{in: in, fix: fix, series: map[opAttrKey]*series{}, queue: make(chan sample, opQueue)}
	go o.work()
	return o
}

func (o *opRecorder) work() {
	ctx := context.Background()
	for s := range o.queue {
		switch {
		case s.barrier != nil:
			close(s.barrier)
		case s.adds != nil:
			for _, a := range s.adds {
				// Zeros too: a series that exists from the start makes rate() and alerts
				// on, say, incomplete operations work before the first one happens.
				for i, v := range a.sums {
					o.in.counters[i].Add(ctx, v, a.opt)
				}
			}
		default:
			for i := 0; i < nHists; i++ {
				if s.has&(1<<i) != 0 {
					o.in.hists[i].Record(ctx, s.vals[i], s.opt)
				}
			}
		}
	}
}

// commAttrs identify a communicator and this rank in it. nranks and nnodes are left out when
// NCCL did not report them (profiler ABI v1–v3), rather than exported as 0.
func commAttrs(c aggregate.Comm, hash uint64, rank int) []attribute.KeyValue {
	kv := []attribute.KeyValue{
		attribute.String(AttrCommHash, fmt.Sprintf("0x%016x", hash)),
		attribute.Int(AttrRank, rank),
	}
	if c.NRanks > 0 {
		kv = append(kv, attribute.Int(AttrNRanks, c.NRanks))
	}
	if c.NNodes > 0 {
		kv = append(kv, attribute.Int(AttrNNodes, c.NNodes))
	}
	if c.Name != "" {
		kv = append(kv, attribute.String(AttrCommName, c.Name))
	}
	return kv
}

func (o *opRecorder) seriesOf(op *aggregate.Op, step string) *series {
	k := opAttrKey{hash: op.Comm.Hash, rank: op.Comm.Rank, nranks: op.Comm.NRanks, nnodes: op.Comm.NNodes,
		nch: op.NChannels, name: op.Comm.Name, fn: op.Func, algo: op.Algo, proto: op.Proto, step: step,
		apiOnly: op.APIOnly}
	if s, ok := o.series[k]; ok {
		return s
	}
	comm := op.Comm
	comm.Name = o.fix.str(comm.Name)
	kv := commAttrs(comm, comm.Hash, comm.Rank)
	kv = append(kv, attribute.String(AttrOp, o.fix.str(op.Func)), attribute.Int(AttrNChannels, op.NChannels))
	if op.Algo != "" {
		kv = append(kv, attribute.String(AttrAlgo, o.fix.str(op.Algo)))
	}
	if op.Proto != "" {
		kv = append(kv, attribute.String(AttrProto, o.fix.str(op.Proto)))
	}
	if step != "" {
		kv = append(kv, attribute.String(AttrStep, step))
	}
	if op.APIOnly {
		kv = append(kv, attribute.Bool(AttrAPIOnly, true))
	}
	if len(o.series) >= maxSeriesCache {
		// Rare (more distinct series than the cache holds): hand every sum over, waiting for
		// room if need be, so clearing loses nothing.
		if msg, from := o.counterBatch(); len(from) > 0 {
			o.queue <- msg
		}
		clear(o.series)
	}
	s := &series{opt: metric.WithAttributeSet(attribute.NewSet(kv...))}
	o.series[k] = s
	return s
}

func usable(v float64) bool { return v > 0 && !math.IsInf(v, 0) && !math.IsNaN(v) }

// record is RecordOp's work on the drainer goroutine. Times go in seconds, bandwidths in bytes
// per second.
func (o *opRecorder) record(op *aggregate.Op, step string) {
	if o.closed.Load() {
		return
	}
	s := o.seriesOf(op, step)
	if op.Untimed > 0 { // operations counted without records: counts and bytes, no times
		s.sums[cOps] += int64(op.Untimed)
		s.sums[cBytes] += int64(op.Bytes)
		s.dirty = true
		return
	}
	s.sums[cOps]++
	s.sums[cBytes] += int64(op.Bytes)
	if op.Incomplete {
		s.sums[cIncomplete]++
	}
	s.sums[cTransfers] += int64(op.Transfers)
	s.sums[cTransferBytes] += int64(op.TransferBytes)
	s.dirty = true

	smp := sample{opt: s.opt}
	set := func(i int, v float64) {
		smp.vals[i] = v
		smp.has |= 1 << i
	}
	set(hSize, float64(op.Bytes))
	if op.HasCompletion {
		set(hCompletion, op.CompletionNs/1e9)
	}
	if usable(op.EnqueueNs) {
		set(hEnqueue, op.EnqueueNs/1e9)
	}
	if op.HasGPU {
		set(hGPU, op.GPUNs/1e9)
	}
	if usable(op.APINs) {
		set(hAPI, op.APINs/1e9)
	}
	if op.Transfers > 0 {
		set(hTransferSize, float64(op.TransferBytes)/float64(op.Transfers))
		set(hTransferTime, op.TransferNs/float64(op.Transfers)/1e9)
	}
	if usable(op.AlgBWGBps) {
		set(hAlgBW, op.AlgBWGBps*1e9)
		if usable(op.BusBWGBps) {
			set(hBusBW, op.BusBWGBps*1e9)
		}
	}
	o.enqueue(smp)
}

// enqueue hands a sample to the worker, waiting up to queueWait when the queue is full.
func (o *opRecorder) enqueue(smp sample) {
	select {
	case o.queue <- smp:
		return
	default:
	}
	if o.behind && len(o.queue) > cap(o.queue)/2 {
		o.dropped.Add(1)
		return
	}
	t := time.NewTimer(queueWait)
	defer t.Stop()
	select {
	case o.queue <- smp:
		o.behind = false
	case <-t.C:
		o.behind = true
		o.dropped.Add(1)
	}
}

// counterBatch collects the series with counts not yet handed to the SDK.
func (o *opRecorder) counterBatch() (sample, []*series) {
	var adds []counterAdd
	var from []*series
	for _, s := range o.series {
		if s.dirty {
			adds = append(adds, counterAdd{opt: s.opt, sums: s.sums})
			from = append(from, s)
		}
	}
	return sample{adds: adds}, from
}

// handed resets the sums a batch carried, once the worker has it.
func handed(from []*series) {
	for _, s := range from {
		s.sums, s.dirty = [nCounters]int64{}, false
	}
}

// flushCounters hands the counter sums to the worker. It never blocks: when the queue is full
// the sums stay in their series and go with the next call, so none is lost.
func (o *opRecorder) flushCounters() {
	if o.closed.Load() {
		return
	}
	msg, from := o.counterBatch()
	if len(from) == 0 {
		return
	}
	select {
	case o.queue <- msg:
		handed(from)
	default:
	}
}

// sync makes what was recorded so far visible to the SDK, waiting until ctx's deadline. With
// drainer set (the caller is the aggregator's goroutine) the counter sums go too; otherwise
// only the queued histogram values (counters follow within a drainer pass).
func (o *opRecorder) sync(ctx context.Context, drainer bool) error {
	if drainer && !o.closed.Load() {
		if msg, from := o.counterBatch(); len(from) > 0 {
			select {
			case o.queue <- msg:
				handed(from)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	done := make(chan struct{})
	select {
	case o.queue <- sample{barrier: done}:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stop ends the worker once what is queued is recorded (Shutdown).
func (o *opRecorder) stop(ctx context.Context) {
	if o.closed.CompareAndSwap(false, true) {
		_ = o.sync(ctx, false)
		close(o.queue)
	}
}

// RecordOp records one completed operation (aggregate.Aggregator.OnOp). Call it from the
// goroutine that owns the aggregator.
func (r *Recorder) RecordOp(o *aggregate.Op) {
	if r == nil || o == nil {
		return
	}
	defer r.recoverPanic("recording an operation")
	r.rec.record(o, r.labels.lookup(o.Start))
}

// Pass is called once per drainer pass: pending counter sums go to the SDK.
func (r *Recorder) Pass() {
	if r == nil {
		return
	}
	r.rec.flushCounters()
	r.warnRepairs()
}

// Sync makes every operation recorded so far visible to the next collection, waiting at most
// until ctx's deadline (at most a second without one). Call it from the aggregator's goroutine.
func (r *Recorder) Sync(ctx context.Context) error {
	if r == nil {
		return nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Second)
		defer cancel()
	}
	return r.rec.sync(ctx, true)
}
