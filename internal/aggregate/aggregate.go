// Package aggregate turns the plugin's event windows into what users measure: per-operation
// counts, bytes and times, rank-to-rank latency and bandwidth, and per-channel transfer stats.
//
// It follows the seed design's phases, one pass per record:
//  1. track Coll/P2p operations (and their API and Group parents);
//  2. link ProxyOps (and KernelCh) to their Coll/P2p: an operation completes at its last
//     child's stop, so its time is Coll start → last ProxyOp/KernelCh stop; a ProxyOp's record
//     carries what its steps moved (folded by the plugin's hot path, see profiler/core.h);
//  3. compute per-operation stats. Rank-pair and channel stats (and their fits) come from the
//     plugin's transfer sums, not from records (SetTransfers, transfers.go): ProxySteps never
//     reach the aggregation.
//
// Unlike the seed, windows do not have to contain whole families. Events still open when their
// window was read are carried over and finished by later windows (their late stops arrive as
// Late records), and an operation completes only once it has been quiet (no child started or
// stopped) for QuietNs, because NCCL's proxy thread can start an operation's ProxyOps well
// after the user thread enqueued it. Quiet is judged against the communicator's read frontier:
// the plugin says up to when every event has been read (Advance), so an operation completes
// QuietNs after its last child, or once its windows are read, whether or not more events come.
// Everything pending ages out after MaxAgeNs, so memory is bounded even when NCCL never stops
// an event (CollNet ProxyOps).
//
// Conventions (documented in docs/numbers.md):
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
	"strings"

	"github.com/ncclprof/ncclprof/internal/align"
	"github.com/ncclprof/ncclprof/internal/event"
	"github.com/ncclprof/ncclprof/internal/linfit"
)

// Defaults for the aggregator's time limits.
const (
	DefaultQuietNs       = 200e6 // an operation with no child activity this long is complete
	DefaultMaxAgeNs      = 30e9  // a pending event older than this is given up
	DefaultWindowDelayNs = 2e9   // longest an event can wait in an open window (period + grace)
	// DefaultProxyWaitNs: how long an operation of a kind that goes over the network waits for
	// its first ProxyOp (awaitsProxy), short of DefaultMaxAgeNs. Real NCCL 2.30.7 showed an
	// AllReduce's first ProxyOp 10.75 s after the call while its proxy thread worked through 200
	// queued large AllReduce (docs/real-nccl.md); 2.28.9, slower on the same run, still had
	// 570-620 ProxyOps per rank come later than a 10 s wait. With 25 s, a second GPU session's
	// 200-iteration runs (slowest completion 16.2 s on both releases) lost none.
	DefaultProxyWaitNs = 25e9
)

// Op is one completed operation, as handed to OnOp.
type Op struct {
	Handle                   uint64 // the Coll/P2p event (of the first member, when rebuilt)
	Comm                     Comm
	Func, Algo, Proto, Dtype string
	Seq                      uint64
	NChannels                int
	Peer, Root               int
	Count, Bytes             uint64
	Start, Enqueued, End     event.Ticks // End: last child stop (0 without completion)
	EnqueueNs, CompletionNs  float64
	GPUNs, APINs             float64
	HasCompletion, HasGPU    bool
	Transfers, TransferBytes uint64
	TransferNs               float64 // Σ over its transfers of SendWait → stop
	Incomplete, Rebuilt      bool
	Members                  int // P2P tasks of a rebuilt operation
	// APIOnly: NCCL reported this operation only through its API events (CollApi, no Coll:
	// symmetric kernels, CE collectives, Broadcast's own path on 2.29+; apionly.go). It has
	// Func, Count, Dtype, Root, Bytes and its API time; Start/End are the API call's interval.
	APIOnly              bool
	AlgBWGBps, BusBWGBps float64
	// Untimed > 0: this Op stands for that many operations the plugin counted without records
	// (no room for them): only Func, Algo, Proto, NChannels, Comm and Bytes (their total) are set.
	Untimed uint64
	// Sample: how sampled tracing chose its Coll/P2p (event.Sampled, event.Triggered; 0 when
	// it was not chosen or sampling is off).
	Sample event.Flags
	// Slow: OnSlow was called for it while it was pending.
	Slow bool
	// GraphReplay: its API call was captured in a CUDA graph (graph_captured): it is one of the
	// graph's replays. NCCL starts a replay's Coll only on ranks whose part of the graph has
	// proxy work (enqueue.cc, plan->hasProxyOps), and gives it the seq of the next eager
	// collective (2.26+), so the analyses match replays apart from eager collectives.
	GraphReplay bool
}

// TransferStats of an operation: its ProxyOps' send transfers (count, bytes, Σ ns).
func (o *Op) addTransfers(r *event.Record, ticksPerNs float64) {
	o.Transfers += uint64(r.XferN)
	o.TransferBytes += r.XferBytes
	if ticksPerNs > 0 {
		o.TransferNs += float64(r.XferTime) / ticksPerNs
	} else {
		o.TransferNs += float64(r.XferTime)
	}
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
	// ProxyWaitNs: see DefaultProxyWaitNs (0: operations do not wait for a first ProxyOp).
	ProxyWaitNs float64
	// KernelRecorded: NCCL is asked for KernelCh events (ABI v3+), so every operation's kernel
	// reports its channels; an operation none of whose channels has started is in flight (its
	// kernel has not begun), not complete.
	// Set through RecordingKernels, which also notes since when.
	KernelRecorded bool
	kernelSince    event.Ticks // when KernelCh was asked for after the first mask seen
	maskSeen       bool
	// HoldNs: while a hang watchdog is on, pending operations and their open children are not
	// given up before this age (its timeout and a margin), so a hang stays visible to it.
	// HoldMax bounds that per communicator (0: no bound): with more operations pending (stops
	// that never come), nothing is held past MaxAgeNs, pinned or not, and what is given up
	// before HoldNs is counted (Health.NotHeld).
	HoldNs  float64
	HoldMax int
	// OnOp, if set, receives every completed operation. The Op is valid during the call only.
	OnOp func(*Op)
	// SlowNs and OnSlow let a watcher act on a slow operation long before it completes (QuietNs
	// after its last child): SlowNs gives an operation's threshold in ns (0: none) when it is
	// first read, and OnSlow is called once, while it is pending, as soon as the span known of
	// it (start to its latest child's stop) passes the threshold. Both or neither.
	SlowNs func(*Op) float64
	OnSlow func(*Op)
	comms  map[uint32]*commState
	free   []*opEntry // completed operation entries, for reuse
	// The window being read: its collectives in start order, and the repeat of those that repeat
	// a seq (numberRepeats).
	colls   []int32
	repeats map[uint64]int64
}

// maxFree bounds the entries kept for reuse (a few windows' worth of operations).
const maxFree = 4096

// New returns an aggregator for a counter running at ticksPerNs.
func New(ticksPerNs float64) *Aggregator {
	return &Aggregator{TicksPerNs: ticksPerNs, QuietNs: DefaultQuietNs, MaxAgeNs: DefaultMaxAgeNs,
		WindowDelayNs: DefaultWindowDelayNs, ProxyWaitNs: DefaultProxyWaitNs, comms: map[uint32]*commState{},
		repeats: map[uint64]int64{}}
}

type opEntry struct {
	op             Op
	handle         uint64
	stopped        bool
	open           int         // children started and not stopped
	born, last     event.Ticks // creation and latest child activity
	api            *apiEntry
	gpuMin, gpuMax uint64
	group          *groupEntry // the group it is rebuilt in (AlltoAll, …; one per graph replay)
	expired        bool        // a child was given up
	pinned         bool        // shown in a hang dump: never given up by age (InFlight)
	slowNs         float64     // SlowNs's threshold for it (0: none)
	hadProxy       bool        // a ProxyOp of its own came (awaitsProxy)
	// What a hang dump shows of it while it is in flight (inflight.go).
	p2pSeq  int64        // P2P: the plugin's ordinal of this (communicator, peer, direction)
	repeat  int64        // collectives: the n-th in a row with this seq (progress.repeatOf)
	replay  bool         // one of a CUDA graph's replays (replayOf)
	kernels []KernelSeen // its KernelCh channels
	proxies []ProxySeen  // its ProxyOps that have stopped (open ones are in the plugin's arena)
}

// proxyEntry is a ProxyOp or KernelCh that was open when its window was read: carried until
// its late stop. (One that had stopped is applied to its operation at once and not kept.)
type proxyEntry struct {
	rec  event.Record
	op   *opEntry
	born event.Ticks
}

// apiEntry is a CollApi/P2pApi call: its interval (the API time of its operation), its group,
// and what an operation known only from it needs (apionly.go).
type apiEntry struct {
	handle      uint64
	start, stop event.Ticks
	open        bool
	p2p         bool // a P2pApi (else CollApi)
	linked      bool // a P2pApi whose P2p task has been seen (rebuilding AlltoAll, Gather, …)
	group       *groupEntry
	fn, dtype   string
	count       uint64
	root        int
	graph       bool        // captured in a CUDA graph: its tasks come at each replay
	tasks       int         // Coll/P2p tasks seen with this call as parent (one per replay if graph)
	used        event.Ticks // its latest task (a captured call lives while its replays come)
	counted     bool        // counted as an operation known only from its API events
}

// groupEntry is a GroupApi: the calls in it, for rebuilding what NCCL expanded.
type groupEntry struct {
	handle   uint64
	depth    int32
	open     bool
	stop     event.Ticks // its stop, once seen
	launched bool        // a KernelLaunch of this group was seen (ABI v5+)
	p2pAPIs  int
	collAPIs int
	linked   int // P2pApi calls whose P2p task has been seen
	pending  int // member operations not yet complete
	members  []Op
	born     event.Ticks
	finished bool
	// A graph replay's stand-in for its captured group (apionly.go): the group and the
	// replay's ordinal, its key in commState.replays.
	capture *groupEntry
	replayN int
}

type commState struct {
	info     Comm
	frontier event.Ticks // latest event time processed
	read     event.Ticks // every event that started before this has been read (Advance)
	res      *Result
	ops      map[uint64]*opEntry // pending operations by handle (children find them here)
	opOrder  []*opEntry          // the same, in the order they were read (≈ start order)
	proxies  map[uint64]*proxyEntry
	kernels  map[uint64]*proxyEntry // open KernelCh, carried over
	apis     map[uint64]*apiEntry
	groups   map[uint64]*groupEntry
	grOrder  []*groupEntry // the same, in the order they were read
	apiOrder []*apiEntry   // CollApi calls not yet known to have a Coll (apionly.go)
	lostAPIs map[string]*lostCalls
	replays  map[replayKey]*groupEntry
	// Progress, for hang dumps and for telling a hang from a ghost (inflight.go).
	progress progress
	others   map[uint64]event.Ticks // open events of types not aggregated (Group, …): born
	done     map[uint64]event.Ticks // recently completed operations, for late children
	// scanned is the time of the last scan of pending operations and groups: quiet is judged at
	// QuietNs resolution, so scanning every QuietNs/4 is enough at any event rate.
	scanned event.Ticks

	lostSeen map[lostKey][2]uint64 // the lost-operation table as last taken (SetLost)
	// netKinds: the kinds of operation (netKind) whose ProxyOps this communicator has seen.
	netKinds map[netKind]bool

	// Expiry queues, oldest first (see expiry).
	qProxies, qKernels, qAPIs, qOthers, qDone expiry
}

// maxDone bounds how many completed operations are remembered for late children.
const maxDone = 1 << 16

func (a *Aggregator) state(c Comm) *commState {
	cs := a.comms[c.Index]
	if cs == nil || cs.info.Incarnation != c.Incarnation {
		cs = &commState{res: newResult(c), ops: map[uint64]*opEntry{},
			proxies: map[uint64]*proxyEntry{},
			kernels: map[uint64]*proxyEntry{}, apis: map[uint64]*apiEntry{},
			groups: map[uint64]*groupEntry{}, others: map[uint64]event.Ticks{},
			replays: map[replayKey]*groupEntry{}, lostAPIs: map[string]*lostCalls{},
			done: map[uint64]event.Ticks{}, netKinds: map[netKind]bool{}}
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
	a.numberRepeats(cs, recs)
	event.ParentsFirst(recs, func(r *event.Record) { a.record(cs, r) })
	a.sweep(cs, false)
}

// numberRepeats numbers the window's collectives by repeat (progress.repeatOf) in the order
// they started. A window's records are in slot order and each thread fills a block of slots of
// its own, so a CUDA graph's replays (started on CUDA's host-callback thread) and the eager
// collective that shares their seq (on the application's thread) can come in either order; by
// start time they come as NCCL started them, the order every rank numbers them in. Replays
// (replayOf) are numbered apart from eager collectives.
func (a *Aggregator) numberRepeats(cs *commState, recs []event.Record) {
	a.colls = a.colls[:0]
	for i := range recs {
		if recs[i].Type == event.Coll {
			a.colls = append(a.colls, int32(i))
		}
	}
	byStart := func(x, y int32) int { return cmpTicks(recs[x].Start, recs[y].Start) }
	if !slices.IsSortedFunc(a.colls, byStart) { // one thread's collectives: in order already
		slices.SortStableFunc(a.colls, byStart)
	}
	clear(a.repeats)
	for _, i := range a.colls {
		r := &recs[i]
		if n := cs.progress.repeatOf(r.Func, int64(r.Seq), replayOf(r)); n > 0 {
			a.repeats[r.Handle] = n
		}
	}
}

// replayOf: Coll or P2p r is a CUDA graph's replay: its parent, the API call NCCL started at
// capture, is captured, which the call's handle says (the plugin marks it: NP_F_MARK), however
// long ago the capture was and whether or not that call's record was read.
func replayOf(r *event.Record) bool { return event.HandleMarked(r.Parent) }

// Advance tells the aggregator that every event of communicator c that started before `read`
// has been read (the plugin knows: its oldest window not yet handed over opened then), so
// operations complete QuietNs after their last child even when no more events come.
func (a *Aggregator) Advance(c Comm, read event.Ticks) {
	cs := a.comms[c.Index]
	if cs == nil || cs.info.Incarnation != c.Incarnation {
		return
	}
	cs.read = max(cs.read, read)
	a.sweep(cs, false)
}

func (a *Aggregator) ticks(ns float64) event.Ticks {
	if a.TicksPerNs <= 0 {
		return event.Ticks(ns)
	}
	return event.Ticks(ns * a.TicksPerNs)
}

// since reports whether at least ns have passed after t with every event of that interval
// read: by the read frontier the plugin reports, or by the latest event seen allowing for
// events still waiting in open windows (WindowDelayNs).
func (a *Aggregator) since(cs *commState, t event.Ticks, ns float64) bool {
	if cs.read >= t && cs.read-t >= a.ticks(ns) {
		return true
	}
	return cs.frontier >= t && cs.frontier-t >= a.ticks(ns+a.WindowDelayNs)
}

// Finalize completes everything pending for the communicator and returns its result.
func (a *Aggregator) Finalize(c Comm) *Result {
	cs := a.state(c)
	a.sweep(cs, true)
	a.countLostAPIOnly(cs)
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
		g := &groupEntry{handle: r.Handle, depth: r.N, open: r.Flags&event.Open != 0, born: r.Start,
			stop: r.Stop}
		cs.groups[r.Handle] = g
		cs.grOrder = append(cs.grOrder, g)
	case event.CollAPI, event.P2pAPI:
		a.apiCall(cs, r)
	case event.Coll, event.P2p:
		a.track(cs, r)
	case event.ProxyOp:
		a.proxyOp(cs, r)
	case event.KernelCh:
		a.kernelCh(cs, r)
	case event.ProxyStep:
		// Folded by the plugin as it stopped; its record is for the trace only.
	case event.KernelLaunch:
		if g := a.group(r.Parent); g != nil {
			g.launched = true
		}
		a.other(cs, r)
	default:
		a.other(cs, r)
	}
}

// other keeps an open event of a type not aggregated, so its late stop is recognised as ours.
func (a *Aggregator) other(cs *commState, r *event.Record) {
	if r.Flags&event.Open != 0 {
		cs.others[r.Handle] = r.Start
		cs.qOthers.push(r.Start, r.Handle)
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

// newOp is an operation entry, from the ones completed before when there are (an aggregation
// at millions of records per second should not allocate per operation).
func (a *Aggregator) newOp() *opEntry {
	if n := len(a.free); n > 0 {
		e := a.free[n-1]
		a.free = a.free[:n-1]
		k, p := e.kernels[:0], e.proxies[:0]
		*e = opEntry{kernels: k, proxies: p}
		return e
	}
	return &opEntry{}
}

// Phase 1: a Coll or P2p operation.
func (a *Aggregator) track(cs *commState, r *event.Record) {
	e := a.newOp()
	e.handle, e.born, e.last = r.Handle, r.Start, max(r.Start, r.Stop)
	o := &e.op
	o.Handle = r.Handle
	o.Comm = cs.info
	o.Func, o.Algo, o.Proto, o.Dtype = r.Func, r.Algo, r.Proto, r.Dtype
	o.Seq, o.NChannels, o.Count = r.Seq, int(r.NChannels), r.Count
	o.Sample = r.Flags & (event.Sampled | event.Triggered)
	o.Peer, o.Root = int(r.Peer), int(r.Root)
	if r.Type == event.Coll {
		o.Peer = -1
	} else {
		o.Root = -1
		// NCCL gives P2P no seq: the plugin's hot path numbers them per (communicator, peer,
		// direction) from 0, the same way on every rank (np_p2p_next in profiler/hot.h).
		e.p2pSeq = int64(r.Seq)
	}
	e.replay = replayOf(r)
	if r.Type == event.Coll {
		e.repeat = a.repeats[r.Handle] // numberRepeats
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
		a.linkTask(cs, e, api, r.Start)
	} else if r.Type == event.Coll && r.Flags&event.ParentDropped != 0 {
		a.tally(cs, o.Func).gone(1, o.Bytes) // its CollApi was lost: that call had a Coll
	}
	if a.SlowNs != nil {
		e.slowNs = a.SlowNs(o)
	}
	cs.ops[r.Handle] = e
	cs.opOrder = append(cs.opOrder, e)
}

// endMoved runs when a child's stop moved an operation's end: past its threshold, it is
// reported slow at once, not QuietNs later when it completes.
func (a *Aggregator) endMoved(e *opEntry) {
	if e.slowNs > 0 && !e.op.Slow && e.op.End > e.op.Start && a.ns(e.op.End-e.op.Start) > e.slowNs {
		e.op.Slow = true
		a.OnSlow(&e.op)
	}
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

// Phase 2: a ProxyOp attaches to its operation. A stopped one (the common case: the plugin
// completes its record at the stop) is applied at once; an open one is carried to its stop.
func (a *Aggregator) proxyOp(cs *commState, r *event.Record) {
	var op *opEntry
	if r.Flags&event.Foreign != 0 {
		cs.res.Health.Foreign++
	} else if op = a.opFor(r.Parent); op == nil {
		a.noParent(cs, r.Parent, &cs.res.Health.OrphanProxy)
	}
	if op != nil && !op.hadProxy {
		op.hadProxy = true
		cs.netKinds[kindOf(&op.op)] = true
	}
	if r.Flags&event.Open == 0 {
		if op != nil {
			op.last = max(op.last, r.Start)
			a.proxyDone(op, r)
		}
		return
	}
	if op != nil {
		op.open++
		op.last = max(op.last, r.Start)
	}
	cs.proxies[r.Handle] = &proxyEntry{rec: *r, op: op, born: r.Start}
	cs.qProxies.push(r.Start, r.Handle)
}

// proxyDone applies a stopped ProxyOp to its operation: the last child's stop ends it.
func (a *Aggregator) proxyDone(o *opEntry, r *event.Record) {
	o.last = max(o.last, r.Stop)
	o.op.End = max(o.op.End, r.Stop)
	o.op.addTransfers(r, a.TicksPerNs)
	o.proxies = append(o.proxies, ProxySeen{Channel: int(r.Channel), Peer: int(r.Peer), IsSend: r.IsSend,
		NSteps: int(r.NSteps), StepsDone: int(r.StepsDone), Start: r.Start})
	a.endMoved(o)
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
	k.op.kernels = append(k.op.kernels, KernelSeen{Handle: r.Handle, Channel: int(r.Channel),
		Start: r.Start, GPUStart: r.PTimerStart})
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
		a.endMoved(o)
	}
	o.last = max(o.last, end)
	for i := range o.kernels {
		if o.kernels[i].Handle == r.Handle {
			o.kernels[i].Stopped, o.kernels[i].GPUStop = true, r.PTimerStop
		}
	}
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

func (a *Aggregator) proxyFor(h uint64) *proxyEntry {
	if !event.IsHandle(h) {
		return nil
	}
	if cs := a.comms[event.HandleComm(h)]; cs != nil {
		return cs.proxies[h]
	}
	return nil
}

// late applies a stop or state that arrived after its event's window was read.
func (a *Aggregator) late(cs *commState, r *event.Record) {
	h := r.LateTarget
	stop := r.LateState == event.LateStop
	switch {
	case cs.proxies[h] != nil:
		if stop {
			p := cs.proxies[h]
			p.rec.ApplyLate(r) // the stop and the progress its cell gathered
			if p.op != nil {
				p.op.open--
				a.proxyDone(p.op, &p.rec)
			}
			delete(cs.proxies, h)
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
		// Only its first stop: NCCL stops a CollApi handle again at every collective whose
		// CollApi the mask no longer starts (docs/nccl-api-patterns.md).
		if e := cs.apis[h]; stop && e.open {
			e.stop, e.open = r.Start, false
		}
	case cs.groups[h] != nil:
		if stop {
			cs.groups[h].open, cs.groups[h].stop = false, r.Start
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

func opKey(o *Op) OpKey {
	return OpKey{CommHash: o.Comm.Hash, Rank: o.Comm.Rank, Func: o.Func, Algo: o.Algo,
		Proto: o.Proto, NChannels: o.NChannels}
}

// sweep completes operations that are done (stopped, no open children, and one window has
// passed without new children) and expires what waited too long. With all set (finalize)
// everything pending completes now.
func (a *Aggregator) sweep(cs *commState, all bool) {
	old := func(born event.Ticks) bool { return all || a.since(cs, born, a.MaxAgeNs) }
	// Operations and their open children are held longer while a hang watchdog wants them, up
	// to HoldMax operations.
	over := a.HoldMax > 0 && len(cs.ops) > a.HoldMax
	held := func(born event.Ticks) bool {
		return all || a.since(cs, born, a.MaxAgeNs) && (over || a.since(cs, born, a.HoldNs))
	}
	quiet := func(t event.Ticks) bool { return all || a.since(cs, t, a.QuietNs) }
	for h, ok := cs.qProxies.pop(held); ok; h, ok = cs.qProxies.pop(held) {
		if p := cs.proxies[h]; p != nil {
			a.expire(cs, p.op, all)
			delete(cs.proxies, h)
		}
	}
	for h, ok := cs.qKernels.pop(held); ok; h, ok = cs.qKernels.pop(held) {
		if k := cs.kernels[h]; k != nil {
			a.expire(cs, k.op, all)
			delete(cs.kernels, h)
		}
	}
	now := max(cs.frontier, cs.read)
	if all || now < cs.scanned || now-cs.scanned >= a.ticks(a.QuietNs/4) {
		cs.scanned = now
		a.completeQuiet(cs, quiet, held, over && !all)
		cs.grOrder = due(cs.grOrder, func(g *groupEntry) bool { return quiet(g.born) }, func(g *groupEntry) bool {
			if g.linked == g.p2pAPIs && g.pending == 0 && !g.open || old(g.born) {
				a.finishGroup(cs, g)
				a.forgetGroup(cs, g)
				return true
			}
			return false
		})
		a.decideAPIs(cs, quiet, old)
	}
	a.expireAPIs(cs, old)
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
// quiet for QuietNs (or are too old), in start order. Only operations born QuietNs ago can be
// quiet, so the scan stops at the first younger one: its cost is what is due, not what is
// pending. With over (more than HoldMax pending) pins do not hold, and an operation given up
// before the watchdog's hold ended is counted.
func (a *Aggregator) completeQuiet(cs *commState, quiet, old func(event.Ticks) bool, over bool) {
	var done []*opEntry
	cs.opOrder = due(cs.opOrder, func(e *opEntry) bool { return quiet(e.born) || old(e.born) }, func(e *opEntry) bool {
		finished := e.stopped && e.open <= 0 && quiet(e.last) && !a.awaitsKernel(cs, e) && !a.awaitsProxy(cs, e)
		if finished || (old(e.born) && (!e.pinned || over)) {
			if !finished && over && (e.pinned || !a.since(cs, e.born, a.HoldNs)) {
				cs.res.Health.NotHeld++
			}
			done = append(done, e)
			return true
		}
		return false
	})
	slices.SortFunc(done, func(x, y *opEntry) int { return cmpTicks(x.op.Start, y.op.Start) })
	for _, e := range done {
		delete(cs.ops, e.handle)
		cs.done[e.handle] = e.op.Start
		cs.qDone.push(e.op.Start, e.handle)
		a.complete(cs, e)
		// Reused only when no carried child still points at it (an operation given up with
		// children open keeps its entry until the garbage collector takes it).
		if e.open <= 0 && len(a.free) < maxFree {
			a.free = append(a.free, e)
		}
	}
}

// due walks a queue in arrival order while ripe says an entry is old enough to be decided,
// and drops the entries take says are finished; younger entries are not looked at (arrival
// order is time order up to the interleaving of a window's threads, so an entry a little out
// of order is simply decided at the next scan). Returns the queue without the finished ones.
func due[T any](q []T, ripe func(T) bool, take func(T) bool) []T {
	n := 0
	for i, e := range q {
		if !ripe(e) {
			n += copy(q[n:], q[i:])
			break
		}
		if !take(e) {
			q[n] = e
			n++
		}
	}
	clear(q[n:])
	return q[:n]
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
	o.GraphReplay = e.replay
	// A graph replay's API call was the capture, long before: its time is not this replay's.
	if api := e.api; api != nil && !api.graph && !api.open && api.stop >= api.start {
		o.APINs = a.ns(api.stop - api.start)
	}
	if e.group != nil {
		e.group.pending-- // every member counts, or the group would wait out MaxAgeNs
	}
	cs.progress.done(o, e.repeat)
	if g := a.rebuildGroup(e); g != nil {
		g.members = append(g.members, *o)
		return
	}
	a.emit(cs, o)
}

// rebuildGroup is the group an operation belongs to when its API call was one AlltoAll,
// Gather or Scatter that NCCL expanded into P2P tasks.
func (a *Aggregator) rebuildGroup(e *opEntry) *groupEntry {
	g := e.group
	if g == nil || g.finished || g.depth != 1 || g.p2pAPIs < 2 || g.collAPIs > 0 {
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
	r := g.members[0]
	r.Rebuilt, r.Members = true, len(g.members)
	r.Transfers, r.TransferBytes, r.HasGPU, r.HasCompletion, r.Incomplete = 0, 0, false, false, false
	r.TransferNs, r.APINs = 0, 0
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
		r.TransferNs += m.TransferNs
		r.Incomplete = r.Incomplete || m.Incomplete
		r.Slow = r.Slow || m.Slow
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
	if o.APIOnly {
		s.APIOnly++
	}
	if o.AlgBWGBps > 0 {
		s.AlgBW.add(finite(o.AlgBWGBps))
		s.BusBW.add(finite(o.BusBWGBps))
	}
	s.Transfers += o.Transfers
	s.TransferBytes += o.TransferBytes
	s.TransferNs += o.TransferNs
	if a.OnOp != nil {
		a.OnOp(o)
	}
}

// Fits returns the rank-pair fit in both modes.
func (p *PairStats) Fits() (avg, mn linfit.Result) {
	return p.Fit.Fit(linfit.AVG), p.Fit.Fit(linfit.MIN)
}

// netKind is what decides whether an operation goes over the network: for a Send or Recv its
// peer; for a collective only its algorithm family, since every ring, tree or PAT collective of
// a communicator that spans nodes crosses them, while CollNet and NVLS ones report no ProxyOp
// of their own (docs/nccl-patterns.md) and are learned apart. Real NCCL 2.30.7 queued a burst
// of small AllReduce behind 200 large ones for 10 s: learned per function and protocol, that
// first burst of a new kind completed without its ProxyOps.
type netKind struct {
	fn, algo string
	peer     int
}

func kindOf(o *Op) netKind {
	switch {
	case o.Func == "Send" || o.Func == "Recv":
		return netKind{fn: o.Func, peer: o.Peer}
	case strings.HasPrefix(o.Algo, "COLLNET") || strings.HasPrefix(o.Algo, "NVLS"):
		return netKind{fn: "collective", algo: o.Algo, peer: -1}
	}
	return netKind{fn: "collective", peer: -1}
}

// awaitsProxy: operations of its kind have had ProxyOps on this communicator, it has none yet,
// and it is younger than ProxyWaitNs. NCCL's proxy thread appends an operation's ProxyOps when
// it gets to them, which under a burst of queued work is long after the operation's Coll
// stopped (proxy.cc ncclProxyGetPostedOps); completed without them, the operation would lose
// its completion and transfers to "late children". A kind that never had ProxyOps here (a
// Send to a peer on the same node, or to itself) is never waited for.
func (a *Aggregator) awaitsProxy(cs *commState, e *opEntry) bool {
	if e.hadProxy || a.ProxyWaitNs <= 0 || len(cs.netKinds) == 0 || !cs.netKinds[kindOf(&e.op)] {
		return false
	}
	return !a.since(cs, e.born, a.ProxyWaitNs)
}
