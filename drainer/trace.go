package main

/*
#include "core.h"
*/
import "C"

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/ncclprof/ncclprof/internal/aggregate"
	"github.com/ncclprof/ncclprof/internal/align"
	"github.com/ncclprof/ncclprof/internal/chrome"
	"github.com/ncclprof/ncclprof/internal/event"
	"github.com/ncclprof/ncclprof/internal/outfile"
)

// traceSink writes the Chrome trace of docs/trace-format.md. Tracing is off by default and
// then costs nothing: the hot path is the same, and this sink only watches for a trace window
// to open (NCCLPROF_TRACE=1, or ncclprof_trace_start from Python).
type traceSink struct {
	cpu  *align.CPU
	gpu  *align.GPU
	host string
	pid  int64

	w       *chrome.Writer // nil while no trace window is open
	want    bool           // a trace window is requested
	from    int64          // Unix ns the requested window starts at
	dir     string
	files   int
	ctlSeq  uint64
	pending []control // requests waiting for the windows to be read (a stop first)
	stepSeq uint64
	// steps are labels not written yet (the last maxPendingSteps): set while no file is open
	// (with NCCLPROF_TRACE=1 it opens only after the first window is read) or after a pending
	// stop. inEffect is the latest label before the open file began, written at its start.
	steps        []stepLabel
	inEffect     stepLabel
	startLabeled bool
	failed       bool // a write failed: tracing stopped until the next start request
	memShort     bool // address space ran short: no tracing for the rest of the process
	stats        traceStats
	// The plugin's drop counters when the trace window began: taken while no trace is wanted,
	// so drops between a request and the file's opening are the file's.
	dropsAtOpen dropCounts

	comms   map[uint32]uint64 // communicator index → incarnation announced in this file
	threads map[int64]*thread
	gpuLn   map[[3]int64]*chrome.Lanes // (comm index, rank, channel)
	opLn    map[[2]int64]*chrome.Lanes // (comm index, rank)
	named   map[int64]bool             // tids whose thread_name is written
	carry   map[uint64]*event.Record   // open events waiting for their stop
	placed  map[uint64]loc             // where recent slices went, for flows
	order   []uint64
	flow    uint64

	// A slice and its states as emit places them, reused from one event to the next (an event
	// at a time, millions a second: no allocation each).
	group  [][2]int64
	states []stepState

	// The sampled trace (NCCLPROF_TRACE_SAMPLE, sample.go): which records it writes, and its
	// files, rotated at about half of NCCLPROF_TRACE_MAX_MB. nil for the trace of windows.
	sample *sampler
	rot    rotation
}

type traceStats struct{ events, bytes, errors, skipped, skippedCarry uint64 }

// dropCounts are the plugin's per-type drop counters (np_dropped_read): events not tracked at
// all, and detail records a trace wanted but could not get.
type dropCounts struct{ untracked, trace [C.NP_T_COUNT]C.uint64_t }

func readDrops() (d dropCounts) {
	C.np_dropped_read(&d.untracked[0], &d.trace[0])
	return d
}

// since gives what was dropped after `from`, per type name: untracked, then trace detail.
func (d dropCounts) since(from dropCounts) (untracked, trace map[string]uint64) {
	diff := func(now, then *[C.NP_T_COUNT]C.uint64_t) map[string]uint64 {
		m := map[string]uint64{}
		for k := range now {
			if n := uint64(now[k] - then[k]); n > 0 {
				m[event.Type(k).String()] = n
			}
		}
		return m
	}
	return diff(&d.untracked, &from.untracked), diff(&d.trace, &from.trace)
}

type thread struct {
	lanes chrome.Lanes
	role  string
}

// loc is where a slice went (for flows) and, for operations, their function (names KernelCh).
type loc struct {
	tid, ts, end int64
	fn           string
}

const (
	maxCarry  = 1 << 16
	maxPlaced = 1 << 16
)

func newTraceSink(cpu *align.CPU) *traceSink {
	h, _ := os.Hostname()
	t := &traceSink{cpu: cpu, gpu: align.NewGPU(), host: h, pid: int64(os.Getpid())}
	t.want = os.Getenv("NCCLPROF_TRACE") == "1"
	t.reset()
	return t
}

// newSampledSink is the always-on sampled trace: it ignores trace windows (the control API
// and NCCLPROF_TRACE serve the trace of windows, beside it) and writes the operations the hot
// path chose, into rotating files.
func newSampledSink(cpu *align.CPU, cfg sampleConfig) *traceSink {
	t := newTraceSink(cpu)
	t.want = true
	t.sample = newSampler(cfg)
	return t
}

func (t *traceSink) reset() {
	t.comms = map[uint32]uint64{}
	t.threads = map[int64]*thread{}
	t.gpuLn = map[[3]int64]*chrome.Lanes{}
	t.opLn = map[[2]int64]*chrome.Lanes{}
	t.named = map[int64]bool{}
	t.placed = map[uint64]loc{}
	t.order = t.order[:0]
}

// traceDir: the directory asked for, NCCLPROF_TRACE_DIR, or the output directory.
func (t *traceSink) traceDir() string {
	if t.dir != "" {
		return t.dir
	}
	if d := os.Getenv("NCCLPROF_TRACE_DIR"); d != "" {
		return d
	}
	return outputDir()
}

// control is a start or stop request of the control API.
type control struct {
	on  bool
	at  int64 // Unix ns of the call: where the window begins or ends
	dir string
}

// beforeDrain takes the control requests made since the last pass. A start is applied before
// the windows are read, so the events after it go to its file; the stop that may follow is
// kept in t.pending and applied by tick once the windows are read, so the file gets every
// event that started before it. It reports whether there were requests (the drainer then
// reads every window at once).
func (t *traceSink) beforeDrain() bool {
	var buf [1024]C.char
	n := uint64(C.np_trace_count())
	got := t.ctlSeq < n
	for ; t.ctlSeq < n; t.ctlSeq++ {
		var on C.int
		var tick C.uint64_t
		if C.np_trace_get(C.uint64_t(t.ctlSeq), &on, &tick, &buf[0], C.int(len(buf))) == 0 {
			continue // overwritten: more requests than the ring holds between two passes
		}
		t.pending = append(t.pending, control{on: on != 0, at: t.cpu.UnixNs(uint64(tick)), dir: C.GoString(&buf[0])})
	}
	// Steps first: the label in effect when a window starts must be known as it opens.
	t.pollSteps()
	for len(t.pending) > 0 && t.pending[0].on { // starts before the next stop: open now
		t.apply(t.pending[0])
		t.pending = t.pending[1:]
	}
	return got
}

// afterDrain applies the requests left by beforeDrain, in order.
func (t *traceSink) afterDrain() {
	for _, p := range t.pending {
		t.apply(p)
	}
	t.pending = t.pending[:0]
}

func (t *traceSink) apply(p control) {
	t.want, t.dir, t.failed, t.from = p.on, p.dir, false, p.at
	if t.w != nil { // stop, or a new start while open: this file is complete
		t.close()
	}
	if t.want {
		t.open(t.from)
	}
	t.wantDetail()
}

// wantDetail tells the hot path whether to record detail (whole ProxySteps, NetPlugin,
// ProxyCtrl): only while a trace is wanted and can be written. A start request turns it on in
// C at once (control.c); it goes off here, once the stop has been applied.
func (t *traceSink) wantDetail() {
	if t.sample != nil { // the hot path records sampled operations' steps by itself
		return
	}
	on := t.want && !t.failed && !t.memShort
	if (C.np_detail() != 0) != on {
		C.np_set_detail(C.int(b2i(on)))
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// pollSteps reads the step labels set since the last pass and writes what it can.
func (t *traceSink) pollSteps() {
	var buf [1024]C.char
	for n := uint64(C.np_step_count()); t.stepSeq < n; t.stepSeq++ {
		var tick C.uint64_t
		if C.np_step_get(C.uint64_t(t.stepSeq), &tick, &buf[0], C.int(len(buf))) == 0 {
			t.stats.skipped++ // overwritten: more labels than the ring holds between polls
			continue
		}
		if len(t.steps) == maxPendingSteps {
			t.steps = t.steps[1:]
		}
		t.steps = append(t.steps, stepLabel{C.GoString(&buf[0]), t.cpu.UnixNs(uint64(tick))})
	}
	t.flushSteps()
}

// flushSteps writes the waiting labels into the open file: the one in effect when the file
// began at its start, those set since at their own times. Labels after a pending stop wait for
// a later file.
func (t *traceSink) flushSteps() {
	if t.w == nil {
		return
	}
	base := t.w.BaseNs()
	rest := t.steps[:0]
	for _, l := range t.steps {
		switch {
		case t.afterStop(l.at):
			rest = append(rest, l)
		case l.at < base:
			t.inEffect = l
		default:
			t.writeInEffect()
			t.writeStep(l.name, l.at)
			t.inEffect = l
		}
	}
	t.writeInEffect()
	t.steps = rest
}

// writeInEffect writes, once per file, the label in effect when the file began.
func (t *traceSink) writeInEffect() {
	if !t.startLabeled && t.inEffect.name != "" {
		t.writeStep(t.inEffect.name, t.w.BaseNs())
	}
	t.startLabeled = true
}

// stepLabel is a label set through ncclprof_set_step and when.
type stepLabel struct {
	name string
	at   int64 // Unix ns
}

const maxPendingSteps = 64 // as many as the control API's ring holds

func (t *traceSink) writeStep(name string, at int64) {
	t.w.Event('i', "ncclprof_step", "ncclprof", t.pid, 0).Ts("ts", at).Str("s", "p").
		Args().Str("step", name).End()
}

// open starts a trace file when a window is wanted and none is open. Events that started before
// `from` (Unix ns) are outside the window; with NCCLPROF_TRACE=1 the first window's earliest
// event opens it, so the trace covers the run from its first event.
func (t *traceSink) open(from int64) {
	if t.w != nil || !t.want || t.failed || t.memShort {
		return
	}
	base := from / 1000 * 1000
	head := map[string]any{"format": 1, "version": C.GoString(C.ncclprof_version()), "host": t.host,
		"pid": t.pid, "simulated": os.Getenv("NCCLPROF_SIMULATED") == "1",
		"clock": clockInfo(t.cpu)}
	name := fmt.Sprintf("ncclprof-%s-%d-%d", t.host, t.pid, t.files)
	if t.sample != nil {
		head["sampling"] = t.sample.cfg.header()
		name = fmt.Sprintf("ncclprof-%s-%d-sampled-%d", t.host, t.pid, t.files)
		base = t.rot.base(base)
	}
	hb, _ := json.Marshal(head)
	header := fmt.Appendf(nil, `"schemaVersion":1,"displayTimeUnit":"ms","baseTimeNanoseconds":%d,"ncclprof":%s`, base, hb)
	f, err := outfile.Create(t.traceDir(), name, ".trace.json")
	t.files++
	var w *chrome.Writer
	if err == nil {
		w, err = chrome.New(f, base, header)
	}
	if err != nil {
		t.fail(err)
		return
	}
	t.w = w
	t.reset()
	if t.sample != nil {
		t.rot.opened(t, base)
	}
	w.Event('M', "process_name", "", t.pid, 0).Args().
		Str("name", fmt.Sprintf("ncclprof %s pid %d", t.host, t.pid)).End()
	t.startLabeled = false
	t.flushSteps()
}

func clockInfo(cpu *align.CPU) map[string]any {
	src := [...]string{"tsc", "cntvct", "monotonic"}[C.np_clock_kind()]
	info := cpu.Info()
	return map[string]any{"source": src, "ns_per_tick": info.NsPerTick, "anchors": info.Anchors,
		"error_bound_ns": info.ErrorBoundNs, "clock_steps": info.ClockSteps}
}

// fail stops tracing after a write error (full disk, directory gone): one warning, a counter,
// and the job goes on; the metrics keep working.
func (t *traceSink) fail(err error) {
	t.stats.errors++
	t.failed = true
	t.rot.failedAt = time.Now()
	if t.w != nil {
		t.stats.events += t.w.Events()
		t.stats.bytes += uint64(t.w.Bytes())
		if t.sample != nil { // what it holds stays on disk, valid up to the last flush
			t.rot.closed(t.w.Path(), t.w.Bytes())
		}
		t.w = nil
	}
	t.wantDetail()
	hint := "set NCCLPROF_TRACE_DIR to a writable directory"
	if chrome.IsNoSpace(err) {
		hint = "the disk is full"
	}
	if t.sample != nil { // said once; tried again every minute (it is meant to be always on)
		if t.stats.errors == 1 {
			warnf("sampled tracing paused: %v (%s); it tries again every %v, the files written so far stay valid, metrics continue", err, hint, sampleRetry)
		}
		return
	}
	warnf("tracing stopped: %v (%s); the trace written so far stays valid, metrics continue", err, hint)
}

// stopForMemory completes the open file and traces nothing more in this process (memory.go
// says why, once).
func (t *traceSink) stopForMemory() {
	t.memShort = true
	t.close()
	t.wantDetail()
}

// close completes the open file with the closing metadata.
func (t *traceSink) close() {
	if t.w == nil {
		return
	}
	untracked, dropped := readDrops().since(t.dropsAtOpen)
	end := map[string]any{"complete": true, "communicators": t.commList(), "gpu_clock": t.gpu.Info(),
		"counters": counters(), "events": t.w.Events(), "clock": clockInfo(t.cpu),
		"partial": len(untracked)+len(dropped)+int(t.stats.skippedCarry) > 0,
		"dropped": dropped, "untracked": untracked, "carry_overflow": t.stats.skippedCarry,
		"lanes_overflow": t.lanesOverflow()}
	if t.sample != nil {
		end["sampling"] = t.sample.file.json()
		t.sample.file = sampleCounts{}
	}
	eb, _ := json.Marshal(end)
	err := t.w.Close(append([]byte(`"ncclprofEnd":`), eb...))
	if t.sample != nil {
		t.rot.closed(t.w.Path(), t.w.Bytes())
	}
	t.dropsAtOpen = readDrops() // a file that follows at once starts from here
	t.from = t.cpu.UnixNs(uint64(C.np_now()))
	t.stats.events += t.w.Events()
	t.stats.bytes += uint64(t.w.Bytes())
	t.w = nil
	if err != nil {
		t.fail(err)
	}
}

// lanesOverflow counts slices drawn on a track where they do not nest, because more than
// chrome's lane limit overlapped at once on one thread or operation track (real NCCL 2.30.7
// queued over a thousand ProxyOps at once: testdata/nccl/2.30.7-net-burst). Perfetto may draw
// those few wrongly; every figure of the trace is still there.
func (t *traceSink) lanesOverflow() uint64 {
	var n uint64
	for _, th := range t.threads {
		n += th.lanes.Overflow
	}
	for _, l := range t.gpuLn {
		n += l.Overflow
	}
	for _, l := range t.opLn {
		n += l.Overflow
	}
	return n
}

func (t *traceSink) commList() []map[string]any {
	var out []map[string]any
	for i := range t.comms {
		if c, ok := drainer.comms[i]; ok {
			out = append(out, commJSONMap(c))
		}
	}
	slices.SortFunc(out, func(a, b map[string]any) int { return a["local_index"].(int) - b["local_index"].(int) })
	return out
}

func commJSONMap(c aggregate.Comm) map[string]any {
	return map[string]any{"comm": fmt.Sprintf("0x%016x", c.Hash), "name": c.Name, "rank": c.Rank,
		"nranks": c.NRanks, "nnodes": c.NNodes, "abi": c.ABI, "local_index": int(c.Index)}
}

// tick runs once per drain loop: control requests, then a flush of what the windows produced.
func (t *traceSink) tick() {
	if t.sample != nil && t.failed && time.Since(t.rot.failedAt) >= sampleRetry {
		t.failed = false // the next window opens a new file
	}
	t.pollSteps() // labels set before a stop belong to the file it closes
	t.afterDrain()
	if t.w == nil && t.want && !t.failed && t.ctlSeq != 0 {
		t.open(t.from) // a window asked for through the control API opens now, steps and all
	}
	if t.w == nil {
		if !t.want {
			t.dropsAtOpen = readDrops()
		}
		t.publish()
		return
	}
	if err := t.w.Flush(); err != nil {
		t.fail(err)
	}
	t.maybeRotate()
	t.publish()
}

func (t *traceSink) publish() {
	if t.sample != nil {
		t.publishSampled()
		return
	}
	ev, by := t.stats.events, t.stats.bytes
	if t.w != nil {
		ev += t.w.Events()
		by += uint64(t.w.Bytes())
	}
	C.np_stat_set(C.NP_S_TRACE_FILES, C.uint64_t(t.files))
	C.np_stat_set(C.NP_S_TRACE_EVENTS, C.uint64_t(ev))
	C.np_stat_set(C.NP_S_TRACE_BYTES, C.uint64_t(by))
	C.np_stat_set(C.NP_S_TRACE_ERRORS, C.uint64_t(t.stats.errors))
	C.np_stat_set(C.NP_S_TRACE_SKIPPED, C.uint64_t(t.stats.skipped))
}

// allFinalized closes the file once NCCL destroyed every communicator; a later one opens the
// next file (the sequence number in the name).
func (t *traceSink) finalized(res *aggregate.Result) {
	if t.sample != nil {
		t.sample.forgetComm(res.Comm.Index)
	}
	for i := uint32(1); i < C.NP_MAX_COMMS; i++ {
		var info C.np_comm_info
		if C.np_comm_get(C.uint32_t(i), &info) == 0 {
			break
		}
		if info.state == C.NP_COMM_ACTIVE {
			return
		}
	}
	t.close()
}

// window turns one window's records into trace events.
func (t *traceSink) window(c aggregate.Comm, recs []event.Record) {
	for i := range recs {
		r := &recs[i]
		if r.Type == event.KernelCh { // GPU clock samples, whether or not a trace is open
			t.observeGPU(r)
		}
	}
	if t.w == nil && t.want && !t.failed {
		// From the request on (ncclprof_trace_start), from where the previous file ended, or
		// with NCCLPROF_TRACE=1 from the first communicator on.
		from := t.from
		if t.ctlSeq == 0 && t.files == 0 {
			from = t.cpu.UnixNs(uint64(C.np_first_init()))
		}
		t.open(from)
	}
	if t.w == nil {
		return
	}
	t.announce(c)
	// Parents before children, so a child's flow finds where its parent went.
	event.ParentsFirst(recs, func(r *event.Record) {
		var v verdict
		if t.sample != nil && r.Type != event.Late {
			if v = t.sample.first(r); v == drop {
				return // sampled away: counted, not carried
			}
		}
		switch {
		case r.Type == event.Late:
			if o := t.carry[r.LateTarget]; o != nil && o.ApplyLate(r) {
				delete(t.carry, r.LateTarget)
				if t.sample != nil {
					t.write(c, o, t.sample.again(o))
				} else {
					t.emit(c, o)
				}
			}
		case r.Flags&event.Open != 0:
			if t.carry == nil {
				t.carry = map[uint64]*event.Record{}
			}
			if len(t.carry) < maxCarry {
				cp := *r
				t.carry[r.Handle] = &cp
			} else {
				t.stats.skipped++
				t.stats.skippedCarry++
			}
		case t.sample != nil:
			t.write(c, r, v)
		default:
			t.emit(c, r)
		}
		t.w.Spill()
		t.maybeRotate()
	})
	if t.sample != nil {
		t.sample.windowDone()
	}
}

// announce writes a communicator's metadata event, once per file and incarnation.
func (t *traceSink) announce(c aggregate.Comm) {
	if old, ok := t.comms[c.Index]; !ok || old != c.Incarnation {
		t.comms[c.Index] = c.Incarnation
		e := t.w.Event('M', "ncclprof_comm", "", t.pid, 0).Args()
		e.Hex("comm", c.Hash).Str("name", c.Name).Int("rank", int64(c.Rank)).Int("nranks", int64(c.NRanks))
		e.Int("nnodes", int64(c.NNodes)).Int("abi", int64(c.ABI)).Int("local_index", int64(c.Index)).End()
	}
}

func (t *traceSink) observeGPU(r *event.Record) {
	if r.PTimerStart != 0 {
		t.gpu.Observe(t.cpu.UnixNs(uint64(r.Start)), r.PTimerStart)
	}
	if r.PTimerStop != 0 && r.Aux != 0 {
		t.gpu.Observe(t.cpu.UnixNs(uint64(r.Aux)), r.PTimerStop)
	}
}

var stepStates = [...]string{"SendGPUWait", "SendPeerWait", "SendWait", "RecvWait", "RecvFlushWait", "RecvGPUWait"}

// afterStop: a stop (or a new start) was requested before ts, so the event belongs to no
// window or to the next one, not to the file open now.
func (t *traceSink) afterStop(ts int64) bool { return len(t.pending) > 0 && ts > t.pending[0].at }

// emit writes one finished event as a slice.
func (t *traceSink) emit(c aggregate.Comm, r *event.Record) {
	if r.Type == event.KernelCh {
		t.emitKernel(c, r)
		return
	}
	start, stop := t.cpu.UnixNs(uint64(r.Start)), t.cpu.UnixNs(uint64(r.Stop))
	if start < t.w.BaseNs() || t.afterStop(start) { // outside this trace window
		t.stats.skipped++
		return
	}
	stop = max(stop, start)
	th := t.thread(int64(r.TID), r.Type)
	t.group, t.states = append(t.group[:0], [2]int64{start, stop}), t.states[:0]
	if r.Type == event.ProxyStep {
		t.states = t.stepStates(t.states, r, stop)
		for _, s := range t.states {
			t.group = append(t.group, [2]int64{s.at, s.end})
		}
	}
	lane := th.lanes.PlaceGroup(t.group)
	tid := t.laneTid(int64(r.TID), lane, th.role)
	name, cat := sliceName(r)
	e := t.w.Event('X', name, cat, t.pid, tid).Ts("ts", start).Dur("dur", stop-start).Args()
	t.commonArgs(e, c, r)
	t.typeArgs(e, c, r)
	e.End()
	for _, s := range t.states {
		t.w.Event('X', s.name, "nccl_step_state", t.pid, tid).Ts("ts", s.at).Dur("dur", s.end-s.at).End()
	}
	t.place(r.Handle, loc{tid, start, stop, r.Func})
	if event.IsHandle(r.Parent) {
		t.link(r.Parent, tid, start, stop)
	}
}

func (t *traceSink) commonArgs(e *chrome.Event, c aggregate.Comm, r *event.Record) {
	e.Hex("id", r.Handle)
	if event.IsHandle(r.Parent) && r.Flags&event.Foreign == 0 {
		e.Hex("parent", r.Parent)
	}
	hash := c.Hash
	if r.Flags&event.Foreign != 0 {
		hash = 0
	}
	e.Hex("comm", hash)
	rank := int64(r.Rank)
	if rank == 0 {
		rank = int64(c.Rank)
	}
	e.Int("rank", rank)
}

// stepState is one state of a step as a slice: from its record to the next state or the stop.
type stepState struct {
	name    string
	at, end int64
}

// stepStates fills sts (empty: a buffer reused from step to step) with a step's states as
// slices nested in it, in time order.
func (t *traceSink) stepStates(sts []stepState, r *event.Record, stop int64) []stepState {
	for i, v := range r.States {
		if v != 0 {
			sts = append(sts, stepState{name: stepStates[i], at: t.cpu.UnixNs(uint64(v))})
		}
	}
	slices.SortFunc(sts, func(a, b stepState) int { return int(a.at - b.at) })
	out := sts[:0]
	for i, s := range sts {
		s.end = stop
		if i+1 < len(sts) {
			s.end = sts[i+1].at
		}
		if s.at >= t.w.BaseNs() && s.end >= s.at {
			out = append(out, s)
		}
	}
	return out
}

// thread is the lane set of a real thread; its role names its tracks.
func (t *traceSink) thread(tid int64, tp event.Type) *thread {
	th := t.threads[tid]
	if th == nil {
		th = &thread{role: "NCCL", lanes: chrome.Lanes{Max: manyLanes}}
		t.threads[tid] = th
	}
	switch tp {
	case event.ProxyOp, event.ProxyStep, event.ProxyCtrl, event.NetPlugin:
		th.role = "NCCL proxy"
	case event.GroupAPI, event.CollAPI, event.P2pAPI:
		if th.role == "NCCL" {
			th.role = "NCCL user"
		}
	}
	return th
}

// manyLanes bounds the lanes of a thread's track and of a rank's completion track: real NCCL
// 2.30.7 needed 149 on a proxy thread and 130 for one rank's operations in 20 iterations of
// ordinary patterns (testdata/nccl/2.30.7-net), and over a thousand in a burst; thread lane ids
// leave room for 999.
const manyLanes = 512

// laneTid is the track of a lane: the thread itself for lane 0, a synthetic tid otherwise.
func (t *traceSink) laneTid(tid int64, lane int, role string) int64 {
	id := tid
	name := fmt.Sprintf("%s %d", role, tid)
	if lane > 0 {
		id = 2000000000 + tid%100000*1000 + int64(lane) // lanes < 1000 (manyLanes)
		name = fmt.Sprintf("%s %d lane %d", role, tid, lane)
	}
	if !t.named[id] {
		t.named[id] = true
		t.w.Event('M', "thread_name", "", t.pid, id).Args().Str("name", name).End()
	}
	return id
}

func (t *traceSink) place(h uint64, l loc) {
	if _, ok := t.placed[h]; !ok {
		t.order = append(t.order, h)
		if len(t.order) > maxPlaced {
			delete(t.placed, t.order[0])
			t.order = t.order[1:]
		}
	}
	t.placed[h] = l
}

// link writes a flow from a parent's slice to a child's when the parent is in this file, and
// the child does not already show inside it on the same track (a step in its proxy op): an
// arrow there adds nothing a viewer does not draw, and args.parent names the parent anyway.
// (Flows were a third of the events of a trace.)
func (t *traceSink) link(parent uint64, tid, ts, end int64) {
	p, ok := t.placed[parent]
	if !ok || (p.tid == tid && p.ts <= ts && end <= p.end) {
		return
	}
	t.flow++
	t.w.Event('s', "nccl", "nccl_flow", t.pid, p.tid).Ts("ts", p.ts).Uint("id", t.flow).End()
	t.w.Event('f', "nccl", "nccl_flow", t.pid, tid).Ts("ts", ts).Uint("id", t.flow).Str("bp", "e").End()
}

// emitKernel writes KernelCh on its GPU track, in GPU time converted to Unix time (the CPU
// callback times on ABI v3, which has no GPU timestamps, and for impossible GPU readings).
func (t *traceSink) emitKernel(c aggregate.Comm, r *event.Record) {
	start, stop := t.cpu.UnixNs(uint64(r.Start)), t.cpu.UnixNs(uint64(max(r.Stop, r.Aux)))
	clock := "cpu_callback"
	if r.PTimerStart != 0 && r.PTimerStop != 0 && t.gpu.Ready() {
		// An impossible GPU reading (counted in gpu_clock.rejected) leaves the callback times.
		gs, okStart := t.gpu.Convert(start, r.PTimerStart)
		gp, okStop := t.gpu.Convert(t.cpu.UnixNs(uint64(r.Aux)), r.PTimerStop)
		switch {
		case !okStart || !okStop:
			clock = "cpu_callback_gpu_rejected"
		case r.PTimerStop >= r.PTimerStart:
			start, stop, clock = gs, gp, "gpu"
		}
	}
	if start < t.w.BaseNs() || t.afterStop(t.cpu.UnixNs(uint64(r.Start))) {
		t.stats.skipped++
		return
	}
	stop = max(stop, start)
	key := [3]int64{int64(c.Index), int64(c.Rank), int64(r.Channel)}
	ln := t.gpuLn[key]
	if ln == nil {
		ln = &chrome.Lanes{}
		t.gpuLn[key] = ln
	}
	lane := ln.Place(start, stop)
	tid := 2200000000 + int64(c.Index)*4096 + int64(c.Rank%64)*64 + int64(r.Channel%64)
	if lane > 0 {
		tid += int64(lane) * 1000000 // rare: overlapping channel events (clock estimate error)
	}
	if !t.named[tid] {
		t.named[tid] = true
		t.w.Event('M', "thread_name", "", t.pid, tid).Args().
			Str("name", fmt.Sprintf("NCCL GPU rank %d ch %d", c.Rank, r.Channel)).End()
	}
	fn := "KernelCh"
	if p, ok := t.placed[r.Parent]; ok && p.fn != "" {
		fn = p.fn
	}
	e := t.w.Event('X', fn+" ch"+strconv.Itoa(int(r.Channel)), "nccl_gpu", t.pid, tid).
		Ts("ts", start).Dur("dur", stop-start).Args()
	t.commonArgs(e, c, r)
	// GPU times as decimal strings: JSON readers that parse numbers as doubles would lose
	// the low bits of a Unix-epoch nanosecond count.
	e.Int("channel", int64(r.Channel)).Str("gpu_start_ns", strconv.FormatUint(r.PTimerStart, 10))
	e.Str("gpu_stop_ns", strconv.FormatUint(r.PTimerStop, 10))
	e.Str("clock", clock).Hex("op", r.Parent).End()
	if event.IsHandle(r.Parent) {
		t.link(r.Parent, tid, start, stop)
	}
}

// op writes an operation's completion span on its communicator's ops track.
func (t *traceSink) op(o *aggregate.Op) {
	mark, slow := "", false
	if t.sample != nil {
		slow = t.sample.observe(o) // the trigger watches every operation, traced or not
		if t.w == nil || !opSpan(o) {
			return
		}
		if mark = t.sample.opMark(o, slow); mark == "" {
			return
		}
		defer t.maybeRotate()
	}
	if t.w == nil || !opSpan(o) {
		return
	}
	start, stop := t.cpu.UnixNs(uint64(o.Start)), t.cpu.UnixNs(uint64(o.End))
	if start < t.w.BaseNs() || t.afterStop(start) {
		return
	}
	key := [2]int64{int64(o.Comm.Index), int64(o.Comm.Rank)}
	ln := t.opLn[key]
	if ln == nil {
		ln = &chrome.Lanes{Max: manyLanes}
		t.opLn[key] = ln
	}
	lane := ln.Place(start, stop)
	tid := 2100000000 + int64(o.Comm.Index)*64 + int64(o.Comm.Rank%64) + int64(lane)*100000
	if !t.named[tid] {
		t.named[tid] = true
		name := o.Comm.Name
		if name == "" {
			name = fmt.Sprintf("0x%016x", o.Comm.Hash)
		}
		// Operations in flight together go to lanes of the track, each named apart (as the
		// proxy thread's lanes are), so that Perfetto does not show several identical tracks.
		name = fmt.Sprintf("NCCL ops %s rank %d", name, o.Comm.Rank)
		if lane > 0 {
			name += fmt.Sprintf(" lane %d", lane)
		}
		t.w.Event('M', "thread_name", "", t.pid, tid).Args().Str("name", name).End()
	}
	cat, interval := "nccl_op", "completion"
	if o.APIOnly { // not a completion: ncclmerge must not take the API call's time for the operation's
		cat, interval = "nccl_op_api", "api"
	}
	e := t.w.Event('X', o.Func, cat, t.pid, tid).Ts("ts", start).Dur("dur", stop-start).Args()
	e.Hex("id", o.Handle^0x8000000000000000).Hex("op", o.Handle).Hex("comm", o.Comm.Hash).Int("rank", int64(o.Comm.Rank))
	e.Str("interval", interval).Str("func", o.Func).Str("algo", o.Algo).Str("proto", o.Proto)
	if !o.APIOnly { // NCCL numbers only the collectives it starts a Coll for
		opSeq(e, o.Peer >= 0, o.Seq)
	}
	e.Uint("count", o.Count).Uint("bytes", o.Bytes).Int("nchannels", int64(o.NChannels))
	e.Float("enqueue_us", o.EnqueueNs/1000, 3).Uint("transfers", o.Transfers).Uint("transfer_bytes", o.TransferBytes)
	if o.HasGPU {
		e.Float("gpu_us", o.GPUNs/1000, 3)
	}
	if o.Rebuilt {
		e.Int("members", int64(o.Members))
	}
	if o.APIOnly {
		e.Bool("api_only", true)
	}
	if o.GraphReplay {
		e.Bool("graph_replay", true)
	}
	if mark != "" {
		e.Str("traced", mark)
	}
	if slow {
		e.Bool("trigger", true) // it fired the trigger
	}
	e.Float("algbw_gbps", o.AlgBWGBps, 3).Float("busbw_gbps", o.BusBWGBps, 3).End()
	t.link(o.Handle, tid, start, stop)
	t.w.Spill()
}

// opSpan: the operation has a span to draw: its completion, or for one NCCL reported only by
// API events, its API call.
func opSpan(o *aggregate.Op) bool { return o.HasCompletion || o.APIOnly && o.End > o.Start }

// opSeq writes an operation's sequence number: NCCL's seq for a collective; for a P2P the
// plugin's ordinal per (communicator, peer, direction), under its own name, since it numbers a
// different sequence (analyses match collectives across ranks by seq).
func opSeq(e *chrome.Event, p2p bool, seq uint64) {
	if p2p {
		e.Uint("p2p_seq", seq)
	} else {
		e.Uint("seq", seq)
	}
}

// sliceName is the slice's name and category (docs/trace-format.md).
func sliceName(r *event.Record) (string, string) {
	switch r.Type {
	case event.GroupAPI:
		return "ncclGroup", "nccl_api"
	case event.CollAPI, event.P2pAPI:
		return "nccl" + r.Func, "nccl_api"
	case event.KernelLaunch:
		return "ncclKernelLaunch", "nccl_launch"
	case event.Group:
		return "ncclGroupLaunch", "nccl_group"
	case event.Coll:
		return r.Func, "nccl_coll"
	case event.P2p:
		return r.Func, "nccl_p2p"
	case event.ProxyOp:
		if r.IsSend {
			return "ProxyOp send", "nccl_proxy"
		}
		return "ProxyOp recv", "nccl_proxy"
	case event.ProxyStep:
		return "Step " + strconv.Itoa(int(r.Step)), "nccl_step"
	case event.ProxyCtrl:
		return ctrlName(r.FirstState), "nccl_ctrl"
	case event.NetPlugin:
		switch uint32(r.NetID) & 0xffff0000 {
		case 1 << 16:
			return "IB QP", "nccl_net"
		case 2 << 16:
			return "Socket", "nccl_net"
		}
		return "NetPlugin", "nccl_net"
	case event.CeColl:
		return r.Func + " (CE)", "nccl_ce"
	case event.CeSync:
		return "CeSync", "nccl_ce"
	case event.CeBatch:
		return "CeBatch", "nccl_ce"
	}
	return r.Type.String(), "nccl"
}

func ctrlName(state uint8) string {
	switch state {
	case event.StateProxyCtrlIdle:
		return "Idle"
	case event.StateProxyCtrlActive:
		return "Active"
	case event.StateProxyCtrlSleep:
		return "Sleep"
	case event.StateProxyCtrlWakeup:
		return "Wakeup"
	case event.StateProxyCtrlAppend:
		return "Append"
	case event.StateProxyCtrlAppendEnd:
		return "AppendEnd"
	}
	return "ProxyCtrl"
}

// typeArgs adds each type's descriptor fields.
func (t *traceSink) typeArgs(e *chrome.Event, c aggregate.Comm, r *event.Record) {
	switch r.Type {
	case event.GroupAPI:
		e.Int("depth", int64(r.N)).Bool("graph_captured", r.Graph)
	case event.CollAPI, event.P2pAPI:
		e.Str("func", r.Func).Uint("count", r.Count).Str("datatype", r.Dtype).Hex("stream", r.Stream).Bool("graph_captured", r.Graph)
		if r.Type == event.CollAPI {
			e.Int("root", int64(r.Root))
		}
	case event.KernelLaunch:
		e.Hex("stream", r.Stream).Hex("group_api", r.Parent)
	case event.Coll, event.P2p:
		_, mul := aggregate.Factor(r.Func, c.NRanks)
		e.Str("func", r.Func).Uint("count", r.Count).Str("datatype", r.Dtype).Int("nchannels", int64(r.NChannels))
		e.Uint("bytes", r.Count*event.DtypeSize(r.Dtype)*mul).Str("interval", "enqueue")
		if r.Type == event.Coll {
			e.Uint("seq", r.Seq).Str("algo", r.Algo).Str("proto", r.Proto).Int("nwarps", int64(r.NWarps)).Int("root", int64(r.Root))
		} else {
			e.Int("peer", int64(r.Peer)).Uint("p2p_seq", r.Seq)
		}
		if r.Flags&sampleBits != 0 && t.sample != nil {
			e.Str("traced", recordMark(r.Flags))
		}
		if event.IsHandle(r.ParentGroup) && r.ParentGroup != r.Parent {
			e.Hex("group", r.ParentGroup)
		}
	case event.ProxyOp:
		e.Int("channel", int64(r.Channel)).Int("peer", int64(r.Peer)).Int("nsteps", int64(r.NSteps))
		e.Int("chunk_size", int64(r.Chunk)).Uint("trans_size", r.Bytes).Bool("is_send", r.IsSend).Int("pid", int64(r.PID))
		e.Int("steps_done", int64(r.StepsDone)).Uint("transfers", uint64(r.XferN)).Uint("transfer_bytes", r.XferBytes)
	case event.ProxyStep:
		// The state times are not repeated here: each state is a nccl_step_state slice nested
		// in the step, starting at that time (emitStates).
		e.Int("step", int64(r.Step)).Uint("trans_size", r.Bytes).Int("peer_waits", int64(r.PeerWaits))
		if r.Flags&event.NoOp != 0 {
			e.Bool("no_proxyop", true)
		}
	case event.ProxyCtrl:
		e.Str("first", ctrlName(r.FirstState)).Str("last", ctrlName(r.LastState)).Int("appended", int64(r.N))
	case event.NetPlugin:
		netArgs(e, r)
	case event.CeColl:
		e.Uint("seq", r.Seq).Uint("ce_seq", uint64(r.CeSeq)).Str("func", r.Func).Uint("count", r.Count)
		e.Str("datatype", r.Dtype).Str("sync", r.Sync).Uint("batch_size", uint64(r.BatchSize))
		e.Uint("num_batches", uint64(r.NumBatches)).Hex("stream", r.Stream)
	case event.CeSync:
		e.Int("nranks", int64(r.N)).Bool("complete", r.Graph)
	case event.CeBatch:
		e.Int("num_ops", int64(r.N)).Uint("total_bytes", r.Bytes).Bool("intra_sync", r.Graph)
	}
}

// netArgs decodes the IB or socket descriptor the network plugin passed (abi.h layouts).
func netArgs(e *chrome.Event, r *event.Record) {
	p := r.NetPayload[:]
	le := binary.LittleEndian
	e.Int("net_id", r.NetID).Int("updates", int64(r.N))
	switch uint32(r.NetID) & 0xffff0000 {
	case 1 << 16:
		e.Int("device", int64(int32(le.Uint32(p[8:])))).Uint("wr_id", le.Uint64(p[16:]))
		e.Int("opcode", int64(int32(le.Uint32(p[24:])))).Int("qp_num", int64(int32(le.Uint32(p[28:]))))
		e.Uint("length", le.Uint64(p[32:]))
	case 2 << 16:
		e.Int("fd", int64(int32(le.Uint32(p[8:])))).Int("op", int64(int32(le.Uint32(p[12:])))).Uint("length", le.Uint64(p[16:]))
	}
}
