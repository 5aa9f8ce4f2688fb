package main

/*
#include <stdlib.h>
#include <string.h>
#include "core.h"
#include "chain.h"
static uint64_t np_counter(int i) { return __atomic_load_n(&np_counters[i], __ATOMIC_RELAXED); }
*/
import "C"

import (
	"fmt"
	"runtime"
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
	comms map[uint32]aggregate.Comm
	strs  map[uintptr]string
	sinks []sink
	// warnedDrops: the one warning about dropped events was given.
	warnedDrops bool
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
	d.agg.WindowDelayNs = float64(C.np_cfg.window_ns+C.np_cfg.grace_max_ns) + float64(pollInterval)
	// The export buffer lives in C memory: cgo checks every Go pointer passed to C, which for a
	// window-sized Go array cost more than the export itself.
	n := int(C.np_cfg.nslots)
	d.recs = unsafe.Slice((*C.np_record)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(C.np_record{})))), n)
	d.sinks = append(d.sinks, newSummaryWriter())
	metrics := newMetricsSink(d) // OpenTelemetry metrics (plugin/metrics.go)
	d.cpu = align.NewCPU(tickSampler{}, d.clock.TicksPerNs())
	trace := newTraceSink(d.cpu) // the Chrome trace (plugin/trace.go)
	// The trace first: the final metrics export then counts the trace writer's last bytes.
	d.sinks = append(d.sinks, trace, metrics)
	d.agg.OnOp = func(o *aggregate.Op) {
		metrics.op(o)
		trace.op(o)
	}
	lastAnchor := time.Now()
	var ready [maxReady]C.np_ready
	wait := pollInterval
	for {
		C.np_wait(C.int(wait / time.Millisecond))
		req := uint64(C.np_flush_pending())
		d.clock.Refresh()
		C.np_set_tick_rate(C.double(d.clock.TicksPerNs()))
		d.mu.Lock()
		d.agg.TicksPerNs = d.clock.TicksPerNs()
		flush := C.int(0)
		// A flush request, or a trace start/stop: read every window first, so the file being
		// closed gets the events up to the stop and the new one starts where it should.
		if ctl := trace.beforeDrain(); req != 0 || ctl {
			flush = 1
		}
		wait = pollInterval
		for {
			n := int(C.np_poll(&ready[0], maxReady, flush))
			for i := 0; i < n; i++ {
				d.window(&ready[i])
			}
			if n > 0 {
				wait = busyInterval
			}
			if n < maxReady {
				break
			}
		}
		d.finishComms()
		if time.Since(lastAnchor) >= 100*time.Millisecond {
			d.cpu.Refresh() // a new TSC↔CLOCK_REALTIME anchor for the trace's timestamps
			lastAnchor = time.Now()
		}
		trace.tick()
		publishRuntime()
		metrics.tick()
		d.warnDrops()
		C.np_chain_report() // failures of a chained plugin (NCCLPROF_CHAIN), said once
		d.mu.Unlock()
		if req != 0 {
			C.np_flush_done(C.uint64_t(req))
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
		res := d.agg.Finalize(c)
		for _, s := range d.sinks {
			s.finalized(res)
		}
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
		PTimerStart: uint64(c.ptimer_start), PTimerStop: uint64(c.ptimer_stop),
		Aux: event.Ticks(c.t_aux), NetID: int64(c.net_id), N: int32(c.aux),
		FirstState: uint8(c.first_state), LastState: uint8(c.last_state),
		CeSeq: uint32(c.ce_seq), BatchSize: uint32(c.batch_size), NumBatches: uint32(c.num_batches),
		LateTarget: uint64(c.late_target), LateState: uint32(c.late_state),
		LateArg0: uint64(c.late_arg0), LateArg1: uint64(c.late_arg1), LateArgs: uint8(c.late_has_args),
	}
	if r.Type == event.ProxyOp {
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
	full := uint64(C.np_counter(C.NP_C_DROPPED_FULL))
	detail := uint64(C.np_counter(C.NP_C_DROPPED_DETAIL))
	threads := uint64(C.np_counter(C.NP_C_DROPPED_THREADS))
	switch {
	case full+detail > 0:
		warnf("events are being dropped: NCCL produces them faster than the plugin reads its "+
			"windows (%d steps/channel/network events, %d operation events so far). Raise "+
			"NCCLPROF_WINDOW_SLOTS or NCCLPROF_WINDOWS, or leave detail types out of "+
			"NCCLPROF_EVENT_MASK; counts are in the summaries (dropped_*) and the metric "+
			"ncclprof.events.dropped. This warning is printed once.", detail, full)
	case threads > 0:
		warnf("events are being dropped: more than %d threads called the plugin at once; "+
			"counted as dropped_too_many_threads. This warning is printed once.", C.NP_MAX_THREADS)
	default:
		return
	}
	d.warnedDrops = true
}

func warnf(format string, args ...any) {
	msg := C.CString(fmt.Sprintf(format, args...))
	C.np_log(C.NPABI_LOG_WARN, msg)
	C.free(unsafe.Pointer(msg))
}
