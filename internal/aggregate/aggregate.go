// Package aggregate turns the plugin's event windows into what users measure: per-operation
// counts, bytes and times, rank-to-rank latency and bandwidth, and per-channel transfer stats.
//
// It follows the seed design's four phases for every window of a communicator:
//  1. track Coll/P2p operations (and their API and Group parents);
//  2. fold ProxySteps into their ProxyOp: a transfer is a send step that reached SendWait,
//     its time is stop − SendWait and its size the step's transSize;
//  3. link ProxyOps (and KernelCh) to their Coll/P2p: an operation completes at its last
//     child's stop, so its time is Coll start → last ProxyOp/KernelCh stop;
//  4. compute: per-operation stats, per rank-pair fits, per-channel stats.
//
// Unlike the seed, windows do not have to contain whole families. Events still open when their
// window was read are carried over and finished by later windows (their late stops arrive as
// Late records), and an operation completes only once it has been quiet (no child started or
// stopped) for QuietNs, because NCCL's proxy thread can start an operation's ProxyOps well
// after the user thread enqueued it. Quiet is judged against the communicator's frontier (the
// latest event time processed: windows are read in order, so nothing older can still arrive)
// or, for a communicator gone idle, against the drainer's clock. Everything pending ages out
// after MaxAgeNs, so memory is bounded even when NCCL never stops an event (CollNet ProxyOps).
//
// Conventions (documented in the README):
//   - bytes of an operation are nccl-tests' "size": count × datatype size, times nranks for
//     AllGather, ReduceScatter and AlltoAll;
//   - rank-pair and channel stats use send-side transfers; receive steps add RecvBytes only;
//   - a self send/recv (peer == rank) has no proxy children: it counts as an operation with
//     its enqueue time and, with KernelCh enabled, its GPU time;
//   - with API events (v5+), a single API call that NCCL expanded into several P2P tasks
//     (groupDepth 1, two or more P2pApi) is reported as one AlltoAll, Gather or Scatter.
package aggregate

import (
	"slices"

	"github.com/ncclprof/ncclprof/internal/align"
	"github.com/ncclprof/ncclprof/internal/event"
	"github.com/ncclprof/ncclprof/internal/linfit"
)

// Defaults for the aggregator's time limits.
const (
	DefaultQuietNs       = 200e6 // an operation with no child activity this long is complete
	DefaultMaxAgeNs      = 30e9  // a pending event older than this is given up
	DefaultWindowDelayNs = 2e9   // longest an event can wait in an open window (period + grace)
)

// Op is one completed operation, as handed to OnOp.
type Op struct {
	Handle                     uint64 // the Coll/P2p event (of the first member, when rebuilt)
	Comm                       Comm
	Func, Algo, Proto, Dtype   string
	Seq                        uint64
	NChannels                  int
	Peer, Root                 int
	Count, Bytes               uint64
	Start, Enqueued, End       event.Ticks // End: last child stop (0 without completion)
	EnqueueNs, CompletionNs    float64
	GPUNs, APINs               float64
	HasCompletion, HasGPU      bool
	Transfers, TransferBytes   uint64
	TransferSize, TransferTime Dist // per transfer, bytes and ns
	Incomplete, Rebuilt        bool
	Members                    int // P2P tasks of a rebuilt operation
	AlgBWGBps, BusBWGBps       float64
}

// Result is everything aggregated for one communicator.
type Result struct {
	Comm     Comm
	Ops      map[OpKey]*OpStats
	Pairs    map[PairKey]*PairStats
	Channels map[ChannelKey]*ChannelStats
	Health   Health
}

func newResult(c Comm) *Result {
	return &Result{Comm: c, Ops: map[OpKey]*OpStats{}, Pairs: map[PairKey]*PairStats{},
		Channels: map[ChannelKey]*ChannelStats{}}
}

// Aggregator holds pending events of every communicator. Use it from one goroutine.
type Aggregator struct {
	// TicksPerNs converts the hot path's counter to nanoseconds.
	TicksPerNs float64
	// QuietNs, MaxAgeNs and WindowDelayNs: see the Default constants.
	QuietNs, MaxAgeNs, WindowDelayNs float64
	// OnOp, if set, receives every completed operation.
	OnOp  func(*Op)
	comms map[uint32]*commState
}

// New returns an aggregator for a counter running at ticksPerNs.
func New(ticksPerNs float64) *Aggregator {
	return &Aggregator{TicksPerNs: ticksPerNs, QuietNs: DefaultQuietNs, MaxAgeNs: DefaultMaxAgeNs,
		WindowDelayNs: DefaultWindowDelayNs, comms: map[uint32]*commState{}}
}

type opEntry struct {
	op             Op
	handle         uint64
	stopped        bool
	open           int         // children started and not stopped
	born, last     event.Ticks // creation and latest child activity
	api            *apiEntry
	gpuMin, gpuMax uint64
	expired        bool // a child was given up
}

type proxyEntry struct {
	rec       event.Record
	op        *opEntry
	born      event.Ticks
	stopped   bool
	stoppedAt event.Ticks
	totals    []uint64 // v1–v3: running totals its steps reported, sorted
}

type stepEntry struct {
	rec  event.Record
	born event.Ticks
}

type apiEntry struct {
	rec   event.Record
	group *groupEntry
	born  event.Ticks
}

type groupEntry struct {
	rec      event.Record
	p2pAPIs  int
	collAPIs int
	linked   map[*apiEntry]bool // P2pApi calls whose P2p task has been seen
	pending  int                // member operations not yet complete
	members  []*Op
	born     event.Ticks
	finished bool
}

type commState struct {
	info     Comm
	frontier event.Ticks // latest event time processed
	wall     event.Ticks // the drainer's clock (Advance)
	res      *Result
	ops      map[uint64]*opEntry
	proxies  map[uint64]*proxyEntry
	steps    map[uint64]*stepEntry  // open steps, carried over
	kernels  map[uint64]*proxyEntry // open KernelCh, carried over
	apis     map[uint64]*apiEntry
	groups   map[uint64]*groupEntry
	others   map[uint64]event.Ticks // open events of types not aggregated (Group, …): born
	done     map[uint64]event.Ticks // recently completed operations, for late children

	fold []*event.Record // stopped steps of the current window, folded at its end
	// scanned is the time of the last scan of pending operations and groups: quiet is judged at
	// QuietNs resolution, so scanning every QuietNs/4 is enough at any event rate.
	scanned event.Ticks

	// Expiry queues, oldest first (see expiry).
	qProxies, qStopped, qSteps, qKernels, qAPIs, qOthers, qDone expiry
}

// maxDone bounds how many completed operations are remembered for late children.
const maxDone = 1 << 16

func (a *Aggregator) state(c Comm) *commState {
	cs := a.comms[c.Index]
	if cs == nil || cs.info.Incarnation != c.Incarnation {
		cs = &commState{res: newResult(c), ops: map[uint64]*opEntry{},
			proxies: map[uint64]*proxyEntry{}, steps: map[uint64]*stepEntry{},
			kernels: map[uint64]*proxyEntry{}, apis: map[uint64]*apiEntry{},
			groups: map[uint64]*groupEntry{}, others: map[uint64]event.Ticks{},
			done: map[uint64]event.Ticks{}}
		a.comms[c.Index] = cs
	}
	cs.info = c // v1–v3 learn hash and rank after init
	cs.res.Comm = c
	return cs
}

func (a *Aggregator) ns(d event.Ticks) float64 {
	if a.TicksPerNs <= 0 {
		return float64(d)
	}
	return float64(d) / a.TicksPerNs
}

// Window processes one window of a communicator; windows of a communicator must arrive in the
// order they were closed.
func (a *Aggregator) Window(c Comm, recs []event.Record) {
	cs := a.state(c)
	cs.res.Health.Windows++
	cs.res.Health.Records += uint64(len(recs))
	for i := range recs {
		cs.frontier = max(cs.frontier, recs[i].Start, recs[i].Stop)
	}
	event.ParentsFirst(recs, func(r *event.Record) { a.record(cs, r) })
	// Steps are folded once the window's records are all in: a v1–v3 step's size is its
	// running total minus the previous one, which may come later in the window.
	for _, s := range cs.fold {
		a.stepStopped(cs, s)
	}
	clear(cs.fold)
	cs.fold = cs.fold[:0]
	a.sweep(cs, false)
}

// Advance tells the aggregator the drainer's current time, so operations of a communicator that
// went idle still complete.
func (a *Aggregator) Advance(now event.Ticks) {
	for _, cs := range a.comms {
		cs.wall = now
		a.sweep(cs, false)
	}
}

func (a *Aggregator) ticks(ns float64) event.Ticks {
	if a.TicksPerNs <= 0 {
		return event.Ticks(ns)
	}
	return event.Ticks(ns * a.TicksPerNs)
}

// since reports whether at least ns have passed after t, by the frontier, or by the drainer's
// clock allowing for events still waiting in open windows.
func (a *Aggregator) since(cs *commState, t event.Ticks, ns float64) bool {
	if cs.frontier >= t && cs.frontier-t >= a.ticks(ns) {
		return true
	}
	return cs.wall >= t && cs.wall-t >= a.ticks(ns+a.WindowDelayNs)
}

// Finalize completes everything pending for the communicator and returns its result.
func (a *Aggregator) Finalize(c Comm) *Result {
	cs := a.state(c)
	a.sweep(cs, true)
	delete(a.comms, c.Index)
	return cs.res
}

// Results returns the current results of every live communicator (for periodic export).
func (a *Aggregator) Results() []*Result {
	out := make([]*Result, 0, len(a.comms))
	for _, cs := range a.comms {
		out = append(out, cs.res)
	}
	return out
}

func (a *Aggregator) record(cs *commState, r *event.Record) {
	if r.Flags&event.ParentStale != 0 {
		cs.res.Health.ParentCarried++
	}
	switch r.Type {
	case event.Late:
		a.late(cs, r)
	case event.GroupAPI:
		cs.groups[r.Handle] = &groupEntry{rec: *r, linked: map[*apiEntry]bool{}, born: r.Start}
	case event.CollAPI, event.P2pAPI:
		e := &apiEntry{rec: *r, born: r.Start}
		cs.qAPIs.push(r.Start, r.Handle)
		if g := a.group(r.Parent); g != nil {
			e.group = g
			if r.Type == event.P2pAPI {
				g.p2pAPIs++
			} else {
				g.collAPIs++
			}
		}
		cs.apis[r.Handle] = e
	case event.Coll, event.P2p:
		a.track(cs, r)
	case event.ProxyOp:
		a.proxyOp(cs, r)
	case event.KernelCh:
		a.kernelCh(cs, r)
	case event.ProxyStep:
		a.step(cs, r)
	default:
		// Not aggregated, but its late stop must still be recognised as ours.
		if r.Flags&event.Open != 0 {
			cs.others[r.Handle] = r.Start
			cs.qOthers.push(r.Start, r.Handle)
		}
	}
}

// group finds a GroupApi entry by handle in whichever communicator's window recorded it
// (NCCL starts one GroupApi for a thread's whole group, across communicators).
func (a *Aggregator) group(h uint64) *groupEntry {
	if !event.IsHandle(h) {
		return nil
	}
	if cs := a.comms[event.HandleComm(h)]; cs != nil {
		return cs.groups[h]
	}
	return nil
}

// Phase 1: a Coll or P2p operation.
func (a *Aggregator) track(cs *commState, r *event.Record) {
	e := &opEntry{handle: r.Handle, born: r.Start, last: max(r.Start, r.Stop)}
	o := &e.op
	o.Handle = r.Handle
	o.Comm = cs.info
	o.Func, o.Algo, o.Proto, o.Dtype = r.Func, r.Algo, r.Proto, r.Dtype
	o.Seq, o.NChannels, o.Count = r.Seq, int(r.NChannels), r.Count
	o.Peer, o.Root = int(r.Peer), int(r.Root)
	if r.Type == event.Coll {
		o.Peer = -1
	} else {
		o.Root = -1
	}
	if o.Comm.Rank == 0 && r.Rank != 0 {
		o.Comm.Rank = int(r.Rank)
	}
	_, mul := Factor(o.Func, cs.info.NRanks)
	o.Bytes = r.Count * event.DtypeSize(r.Dtype) * mul
	o.Start = r.Start
	if r.Flags&event.Open == 0 {
		e.stopped = true
		o.Enqueued = r.Stop
	}
	if api := cs.apis[r.Parent]; api != nil {
		e.api = api
		if g := api.group; g != nil {
			g.linked[api] = true
			g.pending++
		}
	}
	cs.ops[r.Handle] = e
}

// opFor finds the operation a child names as parent.
func (a *Aggregator) opFor(h uint64) *opEntry {
	if !event.IsHandle(h) {
		return nil
	}
	if cs := a.comms[event.HandleComm(h)]; cs != nil {
		return cs.ops[h]
	}
	return nil
}

// noParent counts a child whose operation is not pending: late if the operation already
// completed (its children came later than QuietNs after it), an orphan otherwise.
func (a *Aggregator) noParent(cs *commState, parent uint64, orphans *uint64) {
	if _, ok := cs.done[parent]; ok {
		cs.res.Health.LateChildren++
		return
	}
	*orphans++
}

// Phase 3 (registration): a ProxyOp attaches to its operation.
func (a *Aggregator) proxyOp(cs *commState, r *event.Record) {
	p := &proxyEntry{rec: *r, born: r.Start}
	if r.Flags&event.Foreign != 0 {
		cs.res.Health.Foreign++
	} else if p.op = a.opFor(r.Parent); p.op == nil {
		a.noParent(cs, r.Parent, &cs.res.Health.OrphanProxy)
	}
	if p.op != nil {
		p.op.open++
		p.op.last = max(p.op.last, r.Start)
	}
	cs.proxies[r.Handle] = p
	if r.Flags&event.Open == 0 {
		a.proxyStopped(cs, p, r.Stop)
	} else {
		cs.qProxies.push(r.Start, r.Handle)
	}
}

func (a *Aggregator) proxyStopped(cs *commState, p *proxyEntry, stop event.Ticks) {
	p.rec.Stop = stop
	p.stopped = true
	p.stoppedAt = stop
	cs.qStopped.push(stop, p.rec.Handle)
	if o := p.op; o != nil {
		o.open--
		o.last = max(o.last, stop)
		if stop > o.op.End {
			o.op.End = stop
		}
	}
}

// KernelCh: GPU channel times; its stop record marks the channel's completion.
func (a *Aggregator) kernelCh(cs *commState, r *event.Record) {
	k := &proxyEntry{rec: *r, born: r.Start}
	if k.op = a.opFor(r.Parent); k.op == nil {
		a.noParent(cs, r.Parent, &cs.res.Health.OrphanKernel)
		return
	}
	k.op.open++
	k.op.last = max(k.op.last, r.Start)
	if r.Flags&event.Open == 0 {
		a.kernelStopped(cs, k, r)
		return
	}
	cs.kernels[r.Handle] = k
	cs.qKernels.push(r.Start, r.Handle)
}

func (a *Aggregator) kernelStopped(cs *commState, k *proxyEntry, r *event.Record) {
	o := k.op
	o.open--
	end := r.Stop
	if r.Aux != 0 {
		end = r.Aux // the KernelChStop state: the channel's stop, before NCCL's stopEvent
	}
	if end > o.op.End {
		o.op.End = end
	}
	o.last = max(o.last, end)
	// A corrupted GPU reading (INT64_MAX, UINT64_MAX) would become the op's GPU time.
	if align.GPUTimePossible(r.PTimerStart) && align.GPUTimePossible(r.PTimerStop) &&
		r.PTimerStop >= r.PTimerStart {
		if o.gpuMin == 0 || r.PTimerStart < o.gpuMin {
			o.gpuMin = r.PTimerStart
		}
		if r.PTimerStop > o.gpuMax {
			o.gpuMax = r.PTimerStop
		}
	}
	delete(cs.kernels, r.Handle)
}

// Phase 2: a ProxyStep is folded into its ProxyOp once stopped.
func (a *Aggregator) step(cs *commState, r *event.Record) {
	a.noteTotal(r)
	if r.Flags&event.Open != 0 {
		cs.steps[r.Handle] = &stepEntry{rec: *r, born: r.Start}
		cs.qSteps.push(r.Start, r.Handle)
		return
	}
	cs.fold = append(cs.fold, r)
}

func (a *Aggregator) proxyFor(h uint64) *proxyEntry {
	if !event.IsHandle(h) {
		return nil
	}
	if cs := a.comms[event.HandleComm(h)]; cs != nil {
		return cs.proxies[h]
	}
	return nil
}

// noteTotal remembers a v1–v3 step's running total on its ProxyOp as soon as it is known, so
// later steps can subtract it whatever order they stop in.
func (a *Aggregator) noteTotal(r *event.Record) {
	if r.Flags&event.Cumulative == 0 {
		return
	}
	if p := a.proxyFor(r.Parent); p != nil {
		if i, found := slices.BinarySearch(p.totals, r.Bytes); !found {
			p.totals = slices.Insert(p.totals, i, r.Bytes)
		}
	}
}

// transferBytes is a step's own size: for v1–v3 its running total minus the previous one.
func transferBytes(p *proxyEntry, r *event.Record) uint64 {
	if r.Flags&event.Cumulative == 0 {
		return r.Bytes
	}
	i, _ := slices.BinarySearch(p.totals, r.Bytes)
	if i == 0 {
		return r.Bytes
	}
	return r.Bytes - p.totals[i-1]
}

func (a *Aggregator) stepStopped(cs *commState, r *event.Record) {
	p := a.proxyFor(r.Parent)
	if p == nil {
		cs.res.Health.OrphanSteps++
		return
	}
	size := transferBytes(p, r)
	pr := &p.rec
	hash := cs.info.Hash
	if p.op != nil {
		hash = p.op.op.Comm.Hash
	}
	rank := int(pr.Rank)
	pair := cs.pair(PairKey{CommHash: hash, Rank: rank, Peer: int(pr.Peer)})
	if !pr.IsSend {
		if size > 0 {
			pair.RecvBytes += size
			pair.RecvTransfers++
		}
		return
	}
	sw := r.States[event.SendWait]
	if sw == 0 || r.Stop < sw {
		return // the step never reached the network
	}
	t := a.ns(r.Stop - sw)
	pair.SentBytes += size
	pair.SendTransfers++
	pair.Fit.Add(size, t)
	ch := cs.channel(ChannelKey{CommHash: hash, Rank: rank, Channel: int(pr.Channel)})
	ch.Transfers++
	ch.Bytes += size
	ch.TransferSize.add(float64(size))
	ch.TransferTime.add(t)
	ch.Fit.Add(size, t)
	if o := p.op; o != nil {
		o.op.Transfers++
		o.op.TransferBytes += size
		o.op.TransferSize.add(float64(size))
		o.op.TransferTime.add(t)
	}
}

// late applies a stop or state that arrived after its event's window was read.
func (a *Aggregator) late(cs *commState, r *event.Record) {
	h := r.LateTarget
	stop := r.LateState == event.LateStop
	switch {
	case cs.steps[h] != nil:
		s := &cs.steps[h].rec
		if s.ApplyLate(r) {
			delete(cs.steps, h)
			cs.fold = append(cs.fold, s)
		}
		a.noteTotal(s)
	case cs.proxies[h] != nil && !cs.proxies[h].stopped:
		if stop {
			a.proxyStopped(cs, cs.proxies[h], r.Start)
		}
	case cs.kernels[h] != nil:
		k := cs.kernels[h]
		if k.rec.ApplyLate(r) {
			a.kernelStopped(cs, k, &k.rec)
		}
	case cs.ops[h] != nil:
		if stop {
			e := cs.ops[h]
			e.stopped = true
			e.op.Enqueued = r.Start
		}
	case cs.apis[h] != nil:
		if stop {
			cs.apis[h].rec.Stop = r.Start
			cs.apis[h].rec.Flags &^= event.Open
		}
	case cs.groups[h] != nil:
		if stop {
			cs.groups[h].rec.Stop = r.Start
			cs.groups[h].rec.Flags &^= event.Open
		}
	case cs.others[h] != 0:
		if stop {
			delete(cs.others, h)
		}
	default:
		cs.res.Health.LateUnmatched++
		return
	}
	cs.res.Health.LateApplied++
}

func (cs *commState) pair(k PairKey) *PairStats {
	p := cs.res.Pairs[k]
	if p == nil {
		p = &PairStats{}
		cs.res.Pairs[k] = p
	}
	return p
}

func (cs *commState) channel(k ChannelKey) *ChannelStats {
	c := cs.res.Channels[k]
	if c == nil {
		c = &ChannelStats{}
		cs.res.Channels[k] = c
	}
	return c
}

func opKey(o *Op) OpKey {
	return OpKey{CommHash: o.Comm.Hash, Rank: o.Comm.Rank, Func: o.Func, Algo: o.Algo,
		Proto: o.Proto, NChannels: o.NChannels}
}

// sweep completes operations that are done (stopped, no open children, and one window has
// passed without new children) and expires what waited too long. With all set (finalize)
// everything pending completes now.
func (a *Aggregator) sweep(cs *commState, all bool) {
	old := func(born event.Ticks) bool { return all || a.since(cs, born, a.MaxAgeNs) }
	quiet := func(t event.Ticks) bool { return all || a.since(cs, t, a.QuietNs) }
	// Stopped ProxyOps stay a while: a step lands after its op when the op's window filled up.
	for h, ok := cs.qStopped.pop(quiet); ok; h, ok = cs.qStopped.pop(quiet) {
		if p := cs.proxies[h]; p != nil && p.stopped {
			delete(cs.proxies, h)
		}
	}
	for h, ok := cs.qProxies.pop(old); ok; h, ok = cs.qProxies.pop(old) {
		if p := cs.proxies[h]; p != nil && !p.stopped {
			a.expire(cs, p.op, all)
			delete(cs.proxies, h)
		}
	}
	for h, ok := cs.qKernels.pop(old); ok; h, ok = cs.qKernels.pop(old) {
		if k := cs.kernels[h]; k != nil {
			a.expire(cs, k.op, all)
			delete(cs.kernels, h)
		}
	}
	for h, ok := cs.qSteps.pop(old); ok; h, ok = cs.qSteps.pop(old) {
		if _, open := cs.steps[h]; open {
			delete(cs.steps, h)
			if !all {
				cs.res.Health.Expired++
			}
		}
	}
	now := max(cs.frontier, cs.wall)
	if all || now < cs.scanned || now-cs.scanned >= a.ticks(a.QuietNs/4) {
		cs.scanned = now
		a.completeQuiet(cs, old)
		for h, g := range cs.groups {
			whole := len(g.linked) == g.p2pAPIs && g.pending == 0 && g.rec.Flags&event.Open == 0
			if (whole && quiet(g.born)) || old(g.born) {
				a.finishGroup(cs, g)
				delete(cs.groups, h)
			}
		}
	}
	for h, ok := cs.qAPIs.pop(old); ok; h, ok = cs.qAPIs.pop(old) {
		delete(cs.apis, h)
	}
	for h, ok := cs.qOthers.pop(old); ok; h, ok = cs.qOthers.pop(old) {
		delete(cs.others, h)
	}
	full := func(event.Ticks) bool { return cs.qDone.len() > maxDone }
	for h, ok := cs.qDone.pop(old); ok; h, ok = cs.qDone.pop(old) {
		delete(cs.done, h)
	}
	for h, ok := cs.qDone.pop(full); ok; h, ok = cs.qDone.pop(full) {
		delete(cs.done, h)
	}
}

// completeQuiet completes the operations that are stopped, have no open child, and have been
// quiet for QuietNs (or are too old), in start order. Pending operations are few (those of the
// last QuietNs), so they are scanned.
func (a *Aggregator) completeQuiet(cs *commState, old func(event.Ticks) bool) {
	var done []*opEntry
	for _, e := range cs.ops {
		if (e.stopped && e.open <= 0 && a.since(cs, e.last, a.QuietNs)) || old(e.born) {
			done = append(done, e)
		}
	}
	slices.SortFunc(done, func(x, y *opEntry) int { return cmpTicks(x.op.Start, y.op.Start) })
	for _, e := range done {
		delete(cs.ops, e.handle)
		cs.done[e.handle] = e.op.Start
		cs.qDone.push(e.op.Start, e.handle)
		a.complete(cs, e)
	}
}

// expire gives up on a child that never stopped (a ProxyOp NCCL starts but never stops on
// CollNet, say): its operation completes without it and is marked incomplete.
func (a *Aggregator) expire(cs *commState, o *opEntry, final bool) {
	if o != nil {
		o.open--
		o.expired = true
	}
	if !final {
		cs.res.Health.Expired++
	}
}

func cmpTicks(x, y event.Ticks) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// complete finishes one operation: times, bandwidth, and its stats (or its group's).
func (a *Aggregator) complete(cs *commState, e *opEntry) {
	o := &e.op
	o.Incomplete = e.open > 0 || !e.stopped || e.expired
	if e.stopped && o.Enqueued >= o.Start {
		o.EnqueueNs = a.ns(o.Enqueued - o.Start)
	}
	if o.End > o.Start {
		o.HasCompletion = true
		o.CompletionNs = a.ns(o.End - o.Start)
	}
	if e.gpuMax > e.gpuMin && e.gpuMin != 0 {
		o.HasGPU = true
		o.GPUNs = float64(e.gpuMax - e.gpuMin) // GPU globaltimer is in ns
	}
	if api := e.api; api != nil && api.rec.Flags&event.Open == 0 && api.rec.Stop >= api.rec.Start {
		o.APINs = a.ns(api.rec.Stop - api.rec.Start)
	}
	if g := a.rebuildGroup(e); g != nil {
		g.pending--
		g.members = append(g.members, o)
		return
	}
	a.emit(cs, o)
}

// rebuildGroup is the group an operation belongs to when its API call was one AlltoAll,
// Gather or Scatter that NCCL expanded into P2P tasks.
func (a *Aggregator) rebuildGroup(e *opEntry) *groupEntry {
	if e.api == nil || e.api.group == nil {
		return nil
	}
	g := e.api.group
	if g.finished || g.rec.N != 1 || g.p2pAPIs < 2 || g.collAPIs > 0 {
		return nil
	}
	return g
}

func (a *Aggregator) finishGroup(cs *commState, g *groupEntry) {
	g.finished = true
	if len(g.members) == 0 {
		return
	}
	sends, recvs := map[int]bool{}, map[int]bool{}
	var sendBytes, recvBytes uint64
	r := *g.members[0]
	r.Rebuilt, r.Members = true, len(g.members)
	r.Transfers, r.TransferBytes, r.HasGPU, r.HasCompletion, r.Incomplete = 0, 0, false, false, false
	r.TransferSize, r.TransferTime, r.APINs = Dist{}, Dist{}, 0
	var gpu float64
	for _, m := range g.members {
		if m.Func == "Send" {
			sends[m.Peer] = true
			sendBytes += m.Bytes
		} else {
			recvs[m.Peer] = true
			recvBytes += m.Bytes
		}
		r.Start = min(r.Start, m.Start)
		r.Enqueued = max(r.Enqueued, m.Enqueued)
		r.End = max(r.End, m.End)
		r.Transfers += m.Transfers
		r.TransferBytes += m.TransferBytes
		r.TransferSize.merge(m.TransferSize)
		r.TransferTime.merge(m.TransferTime)
		r.Incomplete = r.Incomplete || m.Incomplete
		gpu = max(gpu, m.GPUNs)
		r.HasGPU = r.HasGPU || m.HasGPU
		r.APINs += m.APINs
	}
	n := cs.info.NRanks
	switch {
	case n > 0 && len(sends) == n && len(recvs) == n:
		r.Func = "AlltoAll"
	case len(sends) == 1 && (len(recvs) == 0 || len(recvs) == n):
		r.Func, r.Root = "Gather", firstKey(sends)
	case (len(sends) == 0 || len(sends) == n) && len(recvs) == 1:
		r.Func, r.Root = "Scatter", firstKey(recvs)
	default:
		r.Func = "GroupedP2p"
	}
	r.Peer = -1
	r.Bytes = max(sendBytes, recvBytes)
	r.Algo, r.Proto = "", ""
	r.EnqueueNs = a.ns(r.Enqueued - r.Start)
	r.GPUNs = gpu
	r.CompletionNs = 0
	if r.End > r.Start {
		r.HasCompletion = true
		r.CompletionNs = a.ns(r.End - r.Start)
	}
	a.emit(cs, &r)
}

func firstKey(m map[int]bool) int {
	for k := range m {
		return k
	}
	return -1
}

// emit records a finished operation in its stats and hands it to OnOp.
func (a *Aggregator) emit(cs *commState, o *Op) {
	t := o.CompletionNs
	if !o.HasCompletion {
		t = o.GPUNs
	}
	o.AlgBWGBps, o.BusBWGBps = bandwidths(o.Func, o.Comm.NRanks, o.Bytes, t)
	k := opKey(o)
	s := cs.res.Ops[k]
	if s == nil {
		s = &OpStats{}
		cs.res.Ops[k] = s
	}
	s.Count++
	s.Bytes += o.Bytes
	if o.EnqueueNs > 0 {
		s.Enqueue.add(o.EnqueueNs)
	}
	if o.HasCompletion {
		s.Completion.add(o.CompletionNs)
	} else {
		s.NoCompletion++
	}
	if o.HasGPU {
		s.GPU.add(o.GPUNs)
	}
	if o.APINs > 0 {
		s.API.add(o.APINs)
	}
	if o.Incomplete {
		s.Incomplete++
	}
	if o.AlgBWGBps > 0 {
		s.AlgBW.add(finite(o.AlgBWGBps))
		s.BusBW.add(finite(o.BusBWGBps))
	}
	s.Transfers += o.Transfers
	s.TransferBytes += o.TransferBytes
	s.TransferSize.merge(o.TransferSize)
	s.TransferTime.merge(o.TransferTime)
	if a.OnOp != nil {
		a.OnOp(o)
	}
}

// Fits returns the rank-pair fit in both modes.
func (p *PairStats) Fits() (avg, mn linfit.Result) {
	return p.Fit.Fit(linfit.AVG), p.Fit.Fit(linfit.MIN)
}
