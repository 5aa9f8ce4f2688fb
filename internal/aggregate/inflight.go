package aggregate

import (
	"slices"

	"github.com/ncclprof/ncclprof/internal/collective"
	"github.com/ncclprof/ncclprof/internal/event"
)

// In-flight state: what a hang dump (internal/hang) shows of a communicator — how far each
// function got, and every operation still open with its channels and ProxyOps — and what tells
// a hang from a ProxyOp NCCL simply never stops.

// KernelSeen is one KernelCh channel of an operation.
type KernelSeen struct {
	Handle            uint64
	Channel           int
	Start             event.Ticks // when the plugin heard of the start
	GPUStart, GPUStop uint64      // %globaltimer (v4+; 0: unknown)
	Stopped           bool
}

// ProxySeen is a ProxyOp of an operation that has stopped (open ones are read live from the
// plugin's arena, where their steps' progress is).
type ProxySeen struct {
	Channel, Peer     int
	IsSend            bool
	NSteps, StepsDone int
	Start             event.Ticks
}

// FuncDone is the progress of one collective function: operations completed (Replays of them
// a CUDA graph's replays), and the furthest of them (collective.Place order).
type FuncDone struct {
	Ops, Replays uint64
	Last         collective.Place
}

// P2pDone counts the point-to-point operations completed with one peer.
type P2pDone struct{ Sends, Recvs uint64 }

// FlightRecord is how many completed operations per communicator Progress.Recent keeps (the hang
// dump's flight record, internal/hang.FlightRecord).
const FlightRecord = 16

// Called is a completed operation as the application called it: what ranks must agree on.
type Called struct {
	P2p         bool
	Func, Dtype string
	Seq         int64 // collectives: NCCL's seq; P2P: the plugin's ordinal
	Repeat      int64 // collectives: the n-th in a row with this seq (progress.repeatOf)
	Replay      bool  // one of a CUDA graph's replays
	Peer, Root  int   // Peer: P2P only (-1 otherwise); Root as NCCL gives it (collectives)
	Count       uint64
}

// progress is a communicator's completed work.
type progress struct {
	byFunc map[string]*FuncDone
	byPeer map[int]*P2pDone
	ops    uint64
	// recent is a ring of the last FlightRecord operations completed; next is where the next goes.
	recent [FlightRecord]Called
	next   uint64
	// runs numbers, per collective function and kind (graph replays apart), the collectives
	// that repeat a seq.
	runs collective.Repeats[runKey]
}

type runKey struct {
	fn     string
	replay bool
}

// repeatOf numbers a collective of fn just started with seq (replay: one of a CUDA graph's
// replays): how many of fn's collectives of its kind came with that seq right before it (0: the
// first; collective.Repeats). NCCL gives every replay of a CUDA graph's collective the seq of
// the next eager one (2.26-2.30, unless KernelCh is on: src/plugin/profiler.cc
// ncclProfilerStartTaskEvents, the persistent test); commops numbers traces alike
// (NumberRepeats), so the dumps and the traces' analyses name the same collective.
func (p *progress) repeatOf(fn string, seq int64, replay bool) int64 {
	if p.runs == nil {
		p.runs = collective.Repeats[runKey]{}
	}
	return p.runs.Next(runKey{fn, replay}, seq)
}

// flight lists the ring's operations, oldest first.
func (p *progress) flight() []Called {
	n := min(p.next, FlightRecord)
	out := make([]Called, 0, n)
	for i := p.next - n; i < p.next; i++ {
		out = append(out, p.recent[i%FlightRecord])
	}
	return out
}

// done counts o completed; repeat is its repeat (repeatOf; 0 for P2P).
func (p *progress) done(o *Op, repeat int64) {
	p.recent[p.next%FlightRecord] = Called{P2p: o.Peer >= 0, Func: o.Func, Dtype: o.Dtype, Seq: int64(o.Seq), Repeat: repeat,
		Replay: o.GraphReplay, Peer: o.Peer, Root: o.Root, Count: o.Count}
	p.next++
	p.ops++
	switch o.Func {
	case "Send", "Recv":
		if p.byPeer == nil {
			p.byPeer = map[int]*P2pDone{}
		}
		d := p.byPeer[o.Peer]
		if d == nil {
			d = &P2pDone{}
			p.byPeer[o.Peer] = d
		}
		if o.Func == "Send" {
			d.Sends++
		} else {
			d.Recvs++
		}
	default:
		if p.byFunc == nil {
			p.byFunc = map[string]*FuncDone{}
		}
		d := p.byFunc[o.Func]
		if d == nil {
			d = &FuncDone{}
			p.byFunc[o.Func] = d
		}
		d.Ops++
		if o.GraphReplay {
			d.Replays++
		}
		if at := (collective.Place{Seq: int64(o.Seq), Replay: o.GraphReplay, Repeat: repeat}); d.Ops == 1 || at.Compare(d.Last) > 0 {
			d.Last = at
		}
	}
}

// OpenOp is an operation still in flight, as a hang dump shows it.
type OpenOp struct {
	Handle     uint64
	Kind       event.Type // Coll or P2p
	Func       string
	Seq        int64 // collectives: NCCL's seq; P2P: the plugin's ordinal
	Repeat     int64 // collectives: the n-th in a row with this seq (progress.repeatOf)
	Replay     bool  // one of a CUDA graph's replays
	Peer       int
	Count      uint64
	Dtype      string
	Root       int // as NCCL gives it (collectives)
	Algo       string
	Proto      string
	NChannels  int
	Start      event.Ticks
	Stopped    bool  // NCCL stopped its Coll/P2p event (the enqueue finished)
	Launched   *bool // a KernelLaunch of its group was seen (v5+; nil before)
	Kernels    []KernelSeen
	Proxies    []ProxySeen // its ProxyOps that have stopped
	OpenKids   int         // children started and not stopped
	AwaitsKern bool        // KernelCh is recorded and no channel of its kernel started
}

// Called is the operation as the application called it.
func (o *OpenOp) Called() Called {
	return Called{P2p: o.Kind == event.P2p, Func: o.Func, Dtype: o.Dtype, Seq: o.Seq, Repeat: o.Repeat, Replay: o.Replay, Peer: o.Peer, Root: o.Root, Count: o.Count}
}

// Progress is a communicator's completed work, for a hang dump.
type Progress struct {
	ByFunc map[string]FuncDone
	ByPeer map[int]P2pDone
	Ops    uint64
	Recent []Called // the last FlightRecord operations completed, oldest first
}

// InFlight gives communicator c's progress and the operations pending in it, oldest first: at
// most limit of them (0: all), and how many more there are. Each operation returned is pinned:
// while the communicator has at most HoldMax pending, it is not given up by age (a hang must
// stay visible for as long as it lasts), though it still completes normally if its children stop.
func (a *Aggregator) InFlight(c Comm, limit int) (Progress, []OpenOp, uint64) {
	cs := a.comms[c.Index]
	if cs == nil || cs.info.Incarnation != c.Incarnation {
		return Progress{}, nil, 0
	}
	p := Progress{ByFunc: map[string]FuncDone{}, ByPeer: map[int]P2pDone{}, Ops: cs.progress.ops, Recent: cs.progress.flight()}
	for f, d := range cs.progress.byFunc {
		p.ByFunc[f] = *d
	}
	for peer, d := range cs.progress.byPeer {
		p.ByPeer[peer] = *d
	}
	var open []*opEntry
	for _, e := range cs.opOrder {
		if a.inFlight(cs, e) {
			open = append(open, e)
		}
	}
	slices.SortStableFunc(open, func(x, y *opEntry) int { return cmpTicks(x.op.Start, y.op.Start) })
	var cut uint64
	if limit > 0 && len(open) > limit {
		open, cut = open[:limit], uint64(len(open)-limit)
	}
	out := make([]OpenOp, 0, len(open))
	for _, e := range open {
		e.pinned = true
		out = append(out, a.openOp(cs, e))
	}
	return p, out, cut
}

func (a *Aggregator) openOp(cs *commState, e *opEntry) OpenOp {
	o := &e.op
	r := OpenOp{Handle: e.handle, Kind: event.Coll, Func: o.Func, Seq: int64(o.Seq), Repeat: e.repeat, Replay: e.replay, Peer: o.Peer,
		Count: o.Count, Dtype: o.Dtype, Root: o.Root, Algo: o.Algo, Proto: o.Proto, NChannels: o.NChannels,
		Start: o.Start, Stopped: e.stopped, Kernels: slices.Clone(e.kernels),
		Proxies: slices.Clone(e.proxies), OpenKids: e.open, AwaitsKern: a.awaitsKernel(cs, e)}
	if o.Peer >= 0 {
		r.Kind, r.Seq = event.P2p, e.p2pSeq
	}
	if cs.info.ABI >= 5 && e.api != nil && e.api.group != nil {
		l := e.api.group.launched
		r.Launched = &l
	}
	return r
}

// inFlight: the operation is not done, as opposed to done and waiting QuietNs before it is
// declared complete: its enqueue is unfinished, a child is open, or its kernel never started.
func (a *Aggregator) inFlight(cs *commState, e *opEntry) bool {
	return !e.stopped || e.open > 0 || a.awaitsKernel(cs, e)
}

// OldestInFlight is when the oldest operation of communicator c still in flight started.
func (a *Aggregator) OldestInFlight(c Comm) (event.Ticks, bool) {
	cs := a.comms[c.Index]
	if cs == nil || cs.info.Incarnation != c.Incarnation {
		return 0, false
	}
	var oldest event.Ticks
	found := false
	for _, e := range cs.opOrder {
		if a.inFlight(cs, e) && (!found || e.born < oldest) {
			oldest, found = e.born, true
		}
	}
	return oldest, found
}

// awaitsKernel: KernelCh is recorded and none of the operation's channels has started, so its
// kernel has not begun: it is in flight however quiet it looks.
func (a *Aggregator) awaitsKernel(cs *commState, e *opEntry) bool {
	return a.KernelRecorded && e.op.Start >= a.kernelSince && cs.info.ABI >= 3 && len(e.kernels) == 0
}

// RecordingKernels says whether NCCL is asked for KernelCh now (the event mask, which can change
// at run time), now being the plugin's clock. NCCL fixes an operation's mask when it is enqueued
// (enqueue.cc: task->eActivationMask), so an operation that started before KernelCh was asked
// for gets no kernel channels and is not waited for: it would look hung.
func (a *Aggregator) RecordingKernels(on bool, now event.Ticks) {
	if on && !a.KernelRecorded && a.maskSeen { // the mask the run started with covers its start
		a.kernelSince = now
	}
	a.KernelRecorded, a.maskSeen = on, true
}

// Carried reports whether communicator c has ProxyOps that were open when read (their stops
// still to come), the ones FinishDone may finish.
func (a *Aggregator) Carried(c Comm) bool {
	cs := a.comms[c.Index]
	return cs != nil && cs.info.Incarnation == c.Incarnation && len(cs.proxies) > 0
}

// FinishDone finishes carried ProxyOps the plugin reports finished in substance (every step
// done, none open: NCCL never stops some ProxyOps, on CollNet and in the CE copy modes), so
// their operations complete instead of waiting out MaxAgeNs as if they hung. done maps a
// ProxyOp's handle to when its last step stopped; quiet ones (QuietNs after it) are finished.
func (a *Aggregator) FinishDone(c Comm, done map[uint64]event.Ticks) {
	cs := a.comms[c.Index]
	if cs == nil || cs.info.Incarnation != c.Incarnation {
		return
	}
	for h, p := range cs.proxies {
		last, ok := done[h]
		if !ok || !a.since(cs, last, a.QuietNs) {
			continue
		}
		p.rec.Stop = last
		p.rec.Flags &^= event.Open
		if p.op != nil {
			p.op.open--
			a.proxyDone(p.op, &p.rec)
		}
		delete(cs.proxies, h)
		cs.res.Health.NeverStopped++
	}
}
