package main

/*
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
#include "core.h"
static long np_gettid(void) { return syscall(SYS_gettid); }
#include "chain.h"
static uint64_t np_counter(int i) { return __atomic_load_n(&np_counters[i], __ATOMIC_RELAXED); }
*/
import "C"

import (
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/ncclprof/ncclprof/internal/aggregate"
	"github.com/ncclprof/ncclprof/internal/align"
	"github.com/ncclprof/ncclprof/internal/event"
)

const (
	// pollInterval is the drainer's idle period; after a poll that found windows it polls
	// again after busyInterval, so bursts are drained at the rate they fill windows.
	pollInterval = 10 * time.Millisecond
	busyInterval = time.Millisecond
	maxReady     = 64
)

// drain owns everything the background goroutine touches. Other goroutines (the control API)
// take mu to read results.
type drain struct {
	mu    sync.Mutex
	agg   *aggregate.Aggregator
	clock *align.TickClock
	cpu   *align.CPU
	recs  []C.np_record
	batch []event.Record
	// Transfer sums as read from C (a window's worth of buckets), and as handed on.
	xfer    []C.np_xfer
	buckets []aggregate.Bucket
	comms   map[uint32]aggregate.Comm
	strs    map[uintptr]string
	sinks   []sink
	// warnedDrops: the one warning about dropped events was given.
	warnedDrops bool
	// What it did: CPU time spent in passes, records read, operations completed.
	cpuNs, records, opsDone uint64
}

// publishStats makes the drainer's work visible through ncclprof_stats.
func (d *drain) publishStats() {
	C.np_stat_set(C.NP_S_DRAIN_CPU_NS, C.uint64_t(d.cpuNs))
	C.np_stat_set(C.NP_S_DRAIN_RECORDS, C.uint64_t(d.records))
	C.np_stat_set(C.NP_S_OPS_COMPLETED, C.uint64_t(d.opsDone))
}

// passClock measures the CPU time of one drainer pass: the OS thread's CPU clock, when the
// goroutine stayed on one thread (the usual case), else the pass's wall time. (Locking the
// drainer to its thread would make this exact but delays the goroutines it feeds, such as the
// metrics recorder's worker, whenever it wakes from a cgo call.)
type passClock struct {
	tid  C.long
	cpu  uint64
	wall time.Time
}

func startPass() passClock { return passClock{C.np_gettid(), threadCPU(), time.Now()} }

func (p passClock) cpuNs() uint64 {
	if C.np_gettid() == p.tid {
		return threadCPU() - p.cpu
	}
	return uint64(time.Since(p.wall))
}

// threadCPU is the calling OS thread's CPU time in ns.
func threadCPU() uint64 {
	var ts C.struct_timespec
	C.clock_gettime(C.CLOCK_THREAD_CPUTIME_ID, &ts)
	return uint64(ts.tv_sec)*1e9 + uint64(ts.tv_nsec)
}

// sink receives what the drainer produces. The summary writer is one; metrics and the trace
// writer are others.
type sink interface {
	window(c aggregate.Comm, recs []event.Record)
	finalized(r *aggregate.Result)
}

var drainer = &drain{
	comms: map[uint32]aggregate.Comm{},
	strs:  map[uintptr]string{},
}

func (d *drain) run() {
	// Nothing to do until NCCL initializes the first communicator: block without a timer.
	C.np_wait(-1)
	syncEnv()
	d.clock = align.NewTickClock(tickSampler{}, float64(C.np_clock_nominal_hz()))
	d.agg = aggregate.New(d.clock.TicksPerNs())
	// An event can wait in an open window for its period plus the grace before it is read.
	cfg := C.np_config_get()
	d.agg.WindowDelayNs = float64(cfg.window_ns+cfg.grace_max_ns) + float64(pollInterval)
	// The export buffer lives in C memory: cgo checks every Go pointer passed to C, which for a
	// window-sized Go array cost more than the export itself.
	n := int(cfg.nslots)
	d.recs = unsafe.Slice((*C.np_record)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(C.np_record{})))), n)
	d.xfer = unsafe.Slice((*C.np_xfer)(C.calloc(C.NP_XFER_BUCKETS, C.size_t(unsafe.Sizeof(C.np_xfer{})))), C.NP_XFER_BUCKETS)
	d.sinks = append(d.sinks, newSummaryWriter())
	metrics := newMetricsSink(d) // OpenTelemetry metrics (plugin/metrics.go)
	d.cpu = align.NewCPU(tickSampler{}, d.clock.TicksPerNs())
	trace := newTraceSink(d.cpu) // the Chrome trace (plugin/trace.go)
	// The traces first: the final metrics export then counts the trace writers' last bytes.
	d.sinks = append(d.sinks, trace)
	var sampled *traceSink // the always-on sampled trace (NCCLPROF_TRACE_SAMPLE, sample.go)
	if cfg, ok := readSampleConfig(); ok {
		sampled = newSampledSink(d.cpu, cfg)
		d.sinks = append(d.sinks, sampled)
	}
	d.sinks = append(d.sinks, metrics)
	d.agg.OnOp = func(o *aggregate.Op) {
		d.opsDone += max(o.Untimed, 1)
		metrics.op(o)
		trace.op(o)
		if sampled != nil {
			sampled.op(o) // and its trigger
		}
	}
	if sampled != nil && sampled.sample.cfg.trigger.on {
		// The trigger acts when a slow operation's span is known, not when it completes.
		d.agg.SlowNs, d.agg.OnSlow = sampled.sample.slowNs, sampled.sample.fire
	}
	dog := newWatchdog(d) // hang dumps (plugin/hang.go)
	lastAnchor := time.Now()
	var mem memoryWatch
	var ready [maxReady]C.np_ready
	wait := pollInterval
	for {
		C.np_wait(C.int(wait / time.Millisecond))
		pass := startPass()
		req := uint64(C.np_flush_pending())
		dumpReq := uint64(C.np_dump_pending())
		d.agg.RecordingKernels(C.np_get_mask()&C.NPABI_KERNEL_CH != 0, event.Ticks(C.np_now()))
		d.clock.Refresh()
		C.np_set_tick_rate(C.double(d.clock.TicksPerNs()))
		d.mu.Lock()
		d.agg.TicksPerNs = d.clock.TicksPerNs()
		flush := C.int(0)
		// A flush request, or a trace start/stop: read every window first, so the file being
		// closed gets the events up to the stop and the new one starts where it should.
		if ctl := trace.beforeDrain(); req != 0 || dumpReq != 0 || ctl {
			flush = 1
		}
		wait = pollInterval
		if d.serve(&ready, flush) {
			wait = busyInterval
		}
		d.advance()
		d.finishComms()
		now := time.Now()
		if dumpReq != 0 {
			err := dog.request(now)
			if err != nil {
				warnf("hang dump requested but not written: %v", err)
				why := C.CString(err.Error())
				C.np_dump_failed(C.uint64_t(dumpReq), why)
				C.free(unsafe.Pointer(why))
			}
			C.np_dump_done(C.uint64_t(dumpReq), C.int(b2i(err != nil)))
		}
		dog.tick(now)
		if time.Since(lastAnchor) >= 100*time.Millisecond {
			d.cpu.Refresh() // a new TSC↔CLOCK_REALTIME anchor for the trace's timestamps
			lastAnchor = time.Now()
		}
		trace.tick()
		if sampled != nil {
			sampled.tick()
		}
		publishRuntime()
		metrics.tick()
		mem.check(trace)
		d.warnDrops()
		d.cpuNs += pass.cpuNs()
		d.publishStats()
		C.np_chain_report() // failures of a chained plugin (NCCLPROF_CHAIN), said once
		d.mu.Unlock()
		if req != 0 {
			C.np_flush_done(C.uint64_t(req))
		}
	}
}

// serve reads every window that is ready, operation windows first: after each detail window
// (trace detail, which costs the trace writer's time) the operation windows are served again,
// so however much detail a trace wants, operation events never wait behind it and drop.
// Reports whether any window was read.
func (d *drain) serve(ready *[maxReady]C.np_ready, flush C.int) bool {
	const op, detail = 1 << C.NP_SET_OP, 1 << C.NP_SET_DETAIL
	any := false
	for {
		d.serveSet(ready, flush, op, &any)
		n := int(C.np_poll(&ready[0], 1, flush, detail))
		if n == 0 {
			return any
		}
		d.window(&ready[0])
		any = true
	}
}

// serveSet reads every ready window of the sets in mask.
func (d *drain) serveSet(ready *[maxReady]C.np_ready, flush C.int, mask C.int, any *bool) {
	for {
		n := int(C.np_poll(&ready[0], maxReady, flush, mask))
		for i := 0; i < n; i++ {
			d.window(&ready[i])
		}
		*any = *any || n > 0
		if n < maxReady {
			return
		}
	}
}

func (d *drain) comm(i uint32) (aggregate.Comm, int, bool) {
	var info C.np_comm_info
	if C.np_comm_get(C.uint32_t(i), &info) == 0 {
		return aggregate.Comm{}, 0, false
	}
	c := aggregate.Comm{
		Index: i, Incarnation: uint64(info.incarnation), Hash: uint64(info.comm_hash),
		Name: C.GoString(&info.name[0]), Rank: int(info.rank), NRanks: int(info.nranks),
		NNodes: int(info.nnodes), ABI: int(info.abi),
	}
	d.comms[i] = c
	return c, int(info.state), true
}

// window reads one sealed window, gives it back, and feeds the records on.
func (d *drain) window(r *C.np_ready) {
	n := int(C.np_export(r, &d.recs[0], C.int(len(d.recs))))
	d.records += uint64(n)
	d.batch = d.batch[:0]
	for i := 0; i < n; i++ {
		d.batch = append(d.batch, d.convert(&d.recs[i]))
	}
	C.np_release(r)
	c, _, ok := d.comm(uint32(r.comm))
	if !ok {
		return
	}
	for _, s := range d.sinks {
		s.window(c, d.batch)
	}
	d.agg.Window(c, d.batch)
}

// eachComm calls fn for every communicator in use whose current incarnation the drainer has
// read windows of (the PXN communicator included).
func (d *drain) eachComm(fn func(i uint32, c aggregate.Comm, info *C.np_comm_info)) {
	for i := uint32(0); i < C.NP_MAX_COMMS; i++ {
		var info C.np_comm_info
		if C.np_comm_get(C.uint32_t(i), &info) == 0 {
			break
		}
		if info.state == C.NP_COMM_UNUSED {
			continue
		}
		if c, ok := d.comms[i]; ok && c.Incarnation == uint64(info.incarnation) {
			fn(i, c, &info)
		}
	}
}

// advance tells the aggregator, per live communicator, up to when every event has been read,
// so operations complete QuietNs after their last child whether or not more events come.
func (d *drain) advance() {
	d.eachComm(func(_ uint32, c aggregate.Comm, info *C.np_comm_info) {
		d.agg.Advance(c, event.Ticks(info.read_tsc))
	})
}

// syncPlugin hands the aggregator what the plugin keeps outside records for communicator i:
// its transfer sums (the rank-pair and channel figures), its lost-operation table and what it
// could not track, per type. Read at metric snapshots and at finalize, not per pass: the sums
// are cumulative, so reading them more often would only cost time.
func (d *drain) syncPlugin(i uint32, c aggregate.Comm, info *C.np_comm_info) {
	n := int(C.np_xfer_read(C.uint32_t(i), &d.xfer[0], C.int(len(d.xfer))))
	buckets := d.buckets[:0]
	for k := 0; k < n; k++ {
		x := &d.xfer[k]
		buckets = append(buckets, aggregate.Bucket{Kind: int(x.kind), Rank: int(x.rank), ID: int(x.id),
			Size: uint64(x.size), N: uint64(x.n), Bytes: uint64(x.bytes), SumT: uint64(x.sum_t),
			TMin: uint64(x.t_min), TMax: uint64(x.t_max), SumT2: float64(x.sum_t2)})
	}
	d.buckets = buckets
	var un aggregate.Unkeyed
	var un_n, un_b [4]C.uint64_t
	C.np_xfer_unkeyed(C.uint32_t(i), &un_n[0], &un_b[0])
	for k := range un.N {
		un.N[k], un.Bytes[k] = uint64(un_n[k]), uint64(un_b[k])
	}
	d.agg.SetTransfers(c, buckets, un)
	var lost [C.NP_LOST_KEYS]C.np_lost_op
	m := int(C.np_lost_read(C.uint32_t(i), &lost[0], C.int(len(lost))))
	ops := make([]aggregate.LostOp, 0, m)
	for _, l := range lost[:m] {
		ops = append(ops, aggregate.LostOp{Type: event.Type(l._type & 0xff), API: uint8(l._type >> 8), Func: d.str(l._func),
			Dtype: d.str(l.dtype), Algo: d.str(l.algo), Proto: d.str(l.proto),
			NChannels: int(l.nchannels), N: uint64(l.n), SumCount: uint64(l.sum_count)})
	}
	d.agg.SetLost(c, ops)
	d.agg.SetDrops(c, byType(&info.dropped_type), byType(&info.trace_dropped), uint64(info.orphan_steps))
}

func byType(v *[C.NP_T_COUNT]C.uint64_t) map[string]uint64 {
	var m map[string]uint64
	for t, n := range v {
		if n > 0 {
			if m == nil {
				m = map[string]uint64{}
			}
			m[event.Type(t).String()] = uint64(n)
		}
	}
	return m
}

// syncAll brings every live communicator's plugin-side figures in (before a metrics snapshot).
func (d *drain) syncAll() { d.eachComm(d.syncPlugin) }

// finishComms completes communicators NCCL finalized once their last window is processed.
func (d *drain) finishComms() {
	for i := uint32(0); i < C.NP_MAX_COMMS; i++ {
		var info C.np_comm_info
		if C.np_comm_get(C.uint32_t(i), &info) == 0 {
			break
		}
		if info.state != C.NP_COMM_FINALIZING || info.open_windows > 0 {
			continue
		}
		c, _, _ := d.comm(i)
		d.syncPlugin(i, c, &info)
		res := d.agg.Finalize(c)
		for _, s := range d.sinks {
			s.finalized(res)
		}
		d.publishStats() // before NCCL's destroy returns: what it finished is counted
		C.np_comm_drained(C.uint32_t(i))
	}
}

// str turns a C string from a record into a Go string. NCCL passes static literals, so each
// pointer is read once and cached.
func (d *drain) str(p *C.char) string {
	if p == nil {
		return ""
	}
	k := uintptr(unsafe.Pointer(p))
	if s, ok := d.strs[k]; ok {
		return s
	}
	s := C.GoStringN(p, C.int(C.strnlen(p, 64)))
	if len(d.strs) < 4096 {
		d.strs[k] = s
	}
	return s
}

func (d *drain) convert(c *C.np_record) event.Record {
	r := event.Record{
		Handle: uint64(c.handle), Parent: uint64(c.parent), ParentGroup: uint64(c.parent_group),
		Type: event.Type(c._type), ABI: uint8(c.abi), Flags: event.Flags(c.flags),
		Start: event.Ticks(c.t_start), Stop: event.Ticks(c.t_stop), TID: uint32(c.tid),
		Rank: int32(c.rank), NStates: uint32(c.nstates),
		Seq: uint64(c.seq), Count: uint64(c.count),
		Func: d.str(c._func), Dtype: d.str(c.dtype), Algo: d.str(c.algo), Proto: d.str(c.proto),
		Sync: d.str(c.sync), Root: int32(c.root), Peer: int32(c.peer),
		NChannels: uint8(c.nchannels), NWarps: uint8(c.nwarps), Stream: uint64(c.stream),
		Graph: c.graph != 0, PID: int32(c.pid), NSteps: int32(c.nsteps), Chunk: int32(c.chunk),
		Step: int32(c.step), Channel: uint8(c.channel), IsSend: c.is_send != 0,
		Bytes: uint64(c.bytes_aux), PeerWaits: uint16(c.npeerwait),
		XferN: uint32(c.x_n), StepsDone: uint32(c.steps_done), XferBytes: uint64(c.x_bytes),
		XferTime:    uint64(c.x_time),
		PTimerStart: uint64(c.ptimer_start), PTimerStop: uint64(c.ptimer_stop),
		Aux: event.Ticks(c.t_aux), NetID: int64(c.net_id), N: int32(c.aux),
		FirstState: uint8(c.first_state), LastState: uint8(c.last_state),
		CeSeq: uint32(c.ce_seq), BatchSize: uint32(c.batch_size), NumBatches: uint32(c.num_batches),
		LateTarget: uint64(c.late_target), LateState: uint32(c.late_state),
		LateArg0: uint64(c.late_arg0), LateArg1: uint64(c.late_arg1), LateArgs: uint8(c.late_has_args),
	}
	if r.Type == event.ProxyOp || r.Type == event.Late { // a late ProxyOp stop carries it too
		r.Progress = event.Ticks(c.t_aux)
		r.Aux = 0
	}
	for i := range r.States {
		r.States[i] = event.Ticks(c.t_state[i])
	}
	for i := range r.NetPayload {
		r.NetPayload[i] = byte(c.net_payload[i])
	}
	return r
}

// publishRuntime makes the Go runtime's own footprint visible through ncclprof_stats, so soak
// tests can see that goroutines and heap stay flat.
func publishRuntime() {
	var ms runtime.MemStats
	if time.Since(lastRuntime) < time.Second {
		return
	}
	lastRuntime = time.Now()
	runtime.ReadMemStats(&ms)
	C.np_stat_set(C.NP_S_GOROUTINES, C.uint64_t(runtime.NumGoroutine()))
	C.np_stat_set(C.NP_S_GO_HEAP, C.uint64_t(ms.HeapInuse))
}

var lastRuntime time.Time

// tickSampler reads (counter, CLOCK_MONOTONIC_RAW, CLOCK_REALTIME) through the C side.
type tickSampler struct{}

func (tickSampler) Sample() align.Sample {
	var before, mono, real, after C.uint64_t
	C.np_clock_sample(&before, &mono, &real, &after)
	return align.Sample{Before: uint64(before), After: uint64(after), MonoNs: uint64(mono),
		RealNs: uint64(real)}
}

// warnDrops says once, through NCCL's logger, that events are being dropped and what to do;
// the counts go on in the summaries and the metrics.
func (d *drain) warnDrops() {
	if d.warnedDrops {
		return
	}
	untracked, trace := readDrops().since(dropCounts{})
	threads := uint64(C.np_counter(C.NP_C_DROPPED_THREADS))
	switch {
	case len(untracked)+len(trace) > 0:
		warnf("events are being dropped: NCCL produces them faster than the plugin reads its "+
			"windows (so far, not tracked: %v; trace detail: %v). Operation counts and bytes "+
			"stay exact; the figures and trace say what is partial. Raise "+
			"NCCLPROF_WINDOW_SLOTS, NCCLPROF_WINDOWS or NCCLPROF_INFLIGHT_CELLS, or leave detail "+
			"types out of NCCLPROF_EVENT_MASK (or sample fewer operations: NCCLPROF_TRACE_SAMPLE); "+
			"counts are in the summaries (health) and the metric ncclprof.events.dropped. This "+
			"warning is printed once.", perType(untracked), perType(trace))
	case threads > 0:
		warnf("events are being dropped: more than %d threads called the plugin at once; "+
			"counted as dropped_too_many_threads. This warning is printed once.", C.NP_MAX_THREADS)
	default:
		return
	}
	d.warnedDrops = true
}

// perType writes per-type counts for a person: "ProxyStep 5, Coll 2", "none" when empty.
func perType(m map[string]uint64) string {
	if len(m) == 0 {
		return "none"
	}
	types := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(types))
	for i, t := range types {
		parts[i] = fmt.Sprintf("%s %d", t, m[t])
	}
	return strings.Join(parts, ", ")
}

func warnf(format string, args ...any) {
	msg := C.CString(fmt.Sprintf(format, args...))
	C.np_log(C.NPABI_LOG_WARN, msg)
	C.free(unsafe.Pointer(msg))
}
