package main

/*
#include <stdint.h>
#include <stdlib.h>
#include "core.h"
*/
import "C"

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/ncclprof/ncclprof/internal/aggregate"
	"github.com/ncclprof/ncclprof/internal/envnum"
	"github.com/ncclprof/ncclprof/internal/event"
	"github.com/ncclprof/ncclprof/internal/hang"
)

// watchdog writes the in-flight dump of docs/hang.md: when an operation has been in flight for
// NCCLPROF_HANG_TIMEOUT_S (default 60; 0 turns it off), and again every timeout period while the
// hang lasts; and on request (ncclprof_dump_inflight). It runs on the drainer's goroutine from
// what the drainer already keeps (pending operations) and what the hot path keeps live (the
// arena of ProxyOps and ProxySteps in flight), so NCCL's threads pay nothing for it, tracing on
// or off, and a hung job, which produces no events, needs no window to fill for it.
type watchdog struct {
	d       *drain
	timeout time.Duration // 0: off
	host    string

	checked  time.Time // the last look for operations past the timeout
	ghosts   time.Time // the last look for ProxyOps NCCL never stops
	detected int64     // Unix ns this hang was first seen (0: no hang now)
	written  time.Time // the last dump of this hang
	dumps    int       // written in this hang
	logged   bool      // the one line through NCCL's logger was written

	cells []C.np_open_cell // arena scan buffer (C memory)
	out   hang.Writer
}

// How often the watchdog looks: hangs are timed in seconds, so four times a second is plenty.
const (
	watchEvery = 250 * time.Millisecond
	ghostEvery = time.Second
)

// What a hang costs at most. A real hang leaves a few operations per communicator in flight;
// stops that never come (a bug, a lost event) leave a stream of them, which must not grow the
// job (issue 23: 599,368 operations held, 310 MB in one dump, the job +2 GB).
const (
	// holdMax: operations per communicator held past the aggregator's MaxAgeNs for the watchdog;
	// with more pending, none is (counted in the summaries' health.not_held).
	holdMax = 4096
	// listedMax: open operations listed in one dump, shared by its communicators (each lists
	// its oldest, at least listedMin); the rest are counted in health.ops_not_listed.
	listedMax = 8192
	listedMin = 16
)

func newWatchdog(d *drain) *watchdog {
	w := &watchdog{d: d, timeout: hangTimeout()}
	w.host, _ = os.Hostname()
	n := int(C.np_config_get().ncells)
	w.cells = unsafe.Slice((*C.np_open_cell)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(C.np_open_cell{})))), n)
	if w.timeout > 0 {
		// Pending work must outlive the timeout (and one rewrite) to be seen in a dump.
		d.agg.HoldNs = float64(2*w.timeout + 5*time.Second)
		d.agg.HoldMax = holdMax
	}
	return w
}

// hangTimeout is NCCLPROF_HANG_TIMEOUT_S: seconds (fractions allowed) in [1, 86400], default
// 60, 0 off. Below a second the watchdog (which looks four times a second) would rewrite dumps
// continuously; NaN and infinities are refused like any other non-number.
func hangTimeout() time.Duration {
	v := os.Getenv("NCCLPROF_HANG_TIMEOUT_S")
	if s, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && s == 0 {
		return 0
	}
	s, msg := envnum.Float("NCCLPROF_HANG_TIMEOUT_S", v, 60, 1, 86400)
	if msg != "" {
		warnf("%s (0 turns the watchdog off)", msg)
	}
	return time.Duration(s * float64(time.Second))
}

// tick runs once per drainer pass: finishes ProxyOps NCCL never stops, and writes a dump when
// an operation has been in flight past the timeout (then every timeout period while it lasts).
func (w *watchdog) tick(now time.Time) {
	if now.Sub(w.ghosts) >= ghostEvery {
		w.ghosts = now
		w.finishGhosts()
	}
	if w.timeout == 0 || now.Sub(w.checked) < watchEvery {
		return
	}
	w.checked = now
	c, started, ok := w.oldest()
	if !ok || now.Sub(time.Unix(0, started)) < w.timeout {
		w.detected, w.dumps = 0, 0 // no hang (or it ended): the next one starts afresh
		return
	}
	if w.detected == 0 {
		w.detected = now.UnixNano()
	} else if now.Sub(w.written) < w.timeout {
		return
	}
	path, err := w.write(hang.ReasonTimeout, now)
	if !w.logged {
		w.logged = true
		age := now.Sub(time.Unix(0, started)).Round(time.Second)
		if err != nil {
			warnf("an operation on communicator %s rank %d has been in flight for %s; the hang dump "+
				"could not be written: %v", hang.FormatHash(c.Hash), c.Rank, age, err)
		} else {
			warnf("an operation on communicator %s rank %d has been in flight for %s: wrote %s "+
				"(rewritten every %s while the hang lasts; `ncclmerge hang` on every rank's dumps "+
				"names the culprit)", hang.FormatHash(c.Hash), c.Rank, age, path, w.timeout)
		}
	}
}

// oldest is the communicator and the Unix start time of the oldest operation in flight.
func (w *watchdog) oldest() (aggregate.Comm, int64, bool) {
	var best aggregate.Comm
	var at event.Ticks
	found := false
	for _, c := range w.d.liveComms() {
		if t, ok := w.d.agg.OldestInFlight(c); ok && (!found || t < at) {
			best, at, found = c, t, true
		}
	}
	if !found {
		return best, 0, false
	}
	return best, w.d.cpu.UnixNs(uint64(at)), true
}

// request serves ncclprof_dump_inflight: the windows were just read (the drainer flushed them
// for it), so the dump has everything up to the call.
func (w *watchdog) request(now time.Time) error {
	_, err := w.write(hang.ReasonRequest, now)
	return err
}

func (w *watchdog) write(reason string, now time.Time) (string, error) {
	d := &hang.Dump{Host: w.host, PID: os.Getpid(), PluginVersion: C.GoString(C.ncclprof_version()),
		Simulated: os.Getenv("NCCLPROF_SIMULATED") == "1", Reason: reason,
		TimeoutS: w.timeout.Seconds(), EventMask: int(C.np_get_mask()),
		WrittenUnixNs: now.UnixNano(), FirstDetectedUnixNs: w.detected}
	if reason == hang.ReasonTimeout {
		w.dumps++
		w.written = now
		d.DumpsWritten = w.dumps
	} else {
		d.DumpsWritten = 1
	}
	drops := readDrops()
	for _, n := range drops.untracked {
		d.Health.EventsDropped += uint64(n)
	}
	d.Health.CommsNotTracked = counters()["init_disabled"]
	comms := w.d.liveComms()
	limit := max(listedMin, listedMax/max(1, len(comms)))
	for _, c := range comms {
		hc, cut := w.comm(c, limit)
		d.Comms = append(d.Comms, hc)
		d.Health.OpsNotListed += cut
	}
	w.out.Dir = outputDir()
	return w.out.Write(d) // its own name, claimed by the first dump (never another process's)
}

// comm is one communicator's part of a dump: its progress, and each operation in flight (the
// limit oldest; how many more, returned) with its kernel channels, its stopped ProxyOps (from
// records) and its open ones (from the arena, with the state each open step is in and since when).
func (w *watchdog) comm(c aggregate.Comm, limit int) (hang.Comm, uint64) {
	prog, open, cut := w.d.agg.InFlight(c, limit)
	hc := hang.Comm{Hash: hang.FormatHash(c.Hash), Name: c.Name, Rank: c.Rank, NRanks: c.NRanks,
		NNodes: c.NNodes, ABI: c.ABI, OpsCompleted: prog.Ops}
	for f, d := range prog.ByFunc {
		hc.Completed = append(hc.Completed, hang.Completed{Func: f, Ops: d.Ops, Replays: d.Replays, LastSeq: d.Last.Seq,
			LastRepeat: d.Last.Repeat, LastReplay: d.Last.Replay})
	}
	for p, d := range prog.ByPeer {
		hc.P2pCompleted = append(hc.P2pCompleted, hang.P2pCompleted{Peer: p, Sends: d.Sends, Recvs: d.Recvs})
	}
	for _, r := range prog.Recent {
		hc.Recent = append(hc.Recent, call(r))
	}
	ops, steps := w.scan(c.Index)
	for _, o := range open {
		hc.Open = append(hc.Open, w.op(o, ops[o.Handle], steps))
	}
	return hc, cut
}

// scan reads the communicator's arena: ProxyOps in flight by their operation's handle, and
// ProxySteps in flight by their ProxyOp's handle.
func (w *watchdog) scan(comm uint32) (ops map[uint64][]*C.np_open_cell, steps map[uint64][]*C.np_open_cell) {
	n := int(C.np_arena_scan(C.uint32_t(comm), &w.cells[0], C.int(len(w.cells))))
	ops, steps = map[uint64][]*C.np_open_cell{}, map[uint64][]*C.np_open_cell{}
	for i := range w.cells[:n] {
		cell := &w.cells[i]
		if event.Type(cell._type) == event.ProxyOp {
			ops[uint64(cell.parent)] = append(ops[uint64(cell.parent)], cell)
		} else {
			steps[uint64(cell.parent)] = append(steps[uint64(cell.parent)], cell)
		}
	}
	return ops, steps
}

func (w *watchdog) op(o aggregate.OpenOp, live []*C.np_open_cell, steps map[uint64][]*C.np_open_cell) hang.Op {
	c := call(o.Called())
	h := hang.Op{Kind: c.Kind, Func: o.Func, Seq: o.Seq, Repeat: c.Repeat, GraphReplay: c.GraphReplay, Peer: c.Peer, Root: c.Root, Count: o.Count, Datatype: o.Dtype,
		Algorithm: o.Algo, Protocol: o.Proto, NChannels: o.NChannels,
		StartUnixNs: w.d.cpu.UnixNs(uint64(o.Start)), Launched: o.Launched}
	for _, k := range o.Kernels {
		h.Kernel = append(h.Kernel, hang.KernelCh{Channel: k.Channel, Started: true, Stopped: k.Stopped,
			StartUnixNs: w.d.cpu.UnixNs(uint64(k.Start)), GPUStartNs: k.GPUStart, GPUStopNs: k.GPUStop})
	}
	for _, p := range o.Proxies {
		h.Proxy = append(h.Proxy, hang.ProxyOp{Channel: p.Channel, Peer: p.Peer, Direction: direction(p.IsSend),
			NSteps: p.NSteps, StepsDone: p.StepsDone, StartUnixNs: w.d.cpu.UnixNs(uint64(p.Start)), Stopped: true})
	}
	for _, cell := range live {
		h.Proxy = append(h.Proxy, w.liveProxy(cell, steps[uint64(cell.handle)]))
	}
	return h
}

// call is an operation as the dump records what ranks must agree on: a peer for P2P, a root for
// the collectives that have one.
func call(o aggregate.Called) hang.Call {
	c := hang.Call{Kind: hang.KindColl, Func: o.Func, Seq: o.Seq, Count: o.Count, Datatype: o.Dtype}
	if o.P2p {
		c.Kind, c.Peer = hang.KindP2p, &o.Peer
	} else {
		c.Repeat, c.GraphReplay = o.Repeat, o.Replay
		if hang.Rooted(o.Func) {
			c.Root = &o.Root
		}
	}
	return c
}

func direction(send bool) string {
	if send {
		return hang.Send
	}
	return hang.Recv
}

// liveProxy is a ProxyOp in flight with its open steps, each in the state it entered last.
func (w *watchdog) liveProxy(cell *C.np_open_cell, steps []*C.np_open_cell) hang.ProxyOp {
	p := hang.ProxyOp{Channel: int(cell.channel), Peer: int(cell.peer), Direction: direction(cell.is_send != 0),
		NSteps: int(cell.nsteps), StepsDone: int(cell.steps_done), StartUnixNs: w.d.cpu.UnixNs(uint64(cell.t_start))}
	p.State, _ = hang.OpState(int(cell.last_state)) // its own latest state: ABI v1-v3 only
	slices.SortFunc(steps, func(a, b *C.np_open_cell) int { return int(a.step) - int(b.step) })
	for _, s := range steps {
		p.Open = append(p.Open, w.step(s, cell.is_send != 0))
	}
	return p
}

func (w *watchdog) step(s *C.np_open_cell, send bool) hang.Step {
	state, since := int(s.last_state), uint64(s.t_start)
	name, ok := hang.StepState(state)
	if ok {
		if k, _ := event.StepCell(uint32(state)); s.t_state[k] != 0 {
			since = uint64(s.t_state[k])
		}
	} else if name = hang.RecvWait; send { // started, no state yet: the first of its direction
		name = hang.SendGPUWait
	}
	return hang.Step{Step: int(s.step), State: name, SinceUnixNs: w.d.cpu.UnixNs(since)}
}

// finishGhosts finishes carried ProxyOps whose every step is done and none open: NCCL never
// stops some (CollNet, the CE copy modes), and their operations must not look hung.
func (w *watchdog) finishGhosts() {
	for _, c := range w.d.liveComms() {
		if !w.d.agg.Carried(c) {
			continue
		}
		n := int(C.np_arena_scan(C.uint32_t(c.Index), &w.cells[0], C.int(len(w.cells))))
		busy := map[uint64]bool{}
		for i := range w.cells[:n] {
			if event.Type(w.cells[i]._type) == event.ProxyStep {
				busy[uint64(w.cells[i].parent)] = true
			}
		}
		done := map[uint64]event.Ticks{}
		for i := range w.cells[:n] {
			cell := &w.cells[i]
			if event.Type(cell._type) == event.ProxyOp && !busy[uint64(cell.handle)] && cell.steps_done >= cell.nsteps {
				done[uint64(cell.handle)] = event.Ticks(cell.t_last)
			}
		}
		w.d.agg.FinishDone(c, done)
	}
}

// liveComms are the communicators NCCL has not finished with, as the drainer knows them (the
// PXN communicator, which holds other processes' ProxyOps, left out).
func (d *drain) liveComms() []aggregate.Comm {
	var out []aggregate.Comm
	d.eachComm(func(i uint32, c aggregate.Comm, info *C.np_comm_info) {
		if i != C.NP_PXN_COMM && (info.state == C.NP_COMM_ACTIVE || info.state == C.NP_COMM_FINALIZING) {
			out = append(out, c)
		}
	})
	return out
}
