package merge

import (
	"sort"

	"github.com/ncclprof/ncclprof/internal/collective"
	"github.com/ncclprof/ncclprof/internal/ptrace"
)

// op is one NCCL operation (a Coll or P2p event) with everything the plugin recorded under it.
type op struct {
	ev         *plEvent // Coll or P2p
	api        *plEvent // CollApi/P2pApi, when the ABI has them
	comm       ptrace.Comm
	proxies    int
	steps      int
	net        int
	channels   []channelRec // KernelCh
	completion *plEvent
	group      *opGroup
}

// bytes is nccl-tests' size of the operation: what the plugin computed, else from its count.
func (o *op) bytes() uint64 {
	if o.ev.Bytes > 0 {
		return o.ev.Bytes
	}
	return collective.Size(o.ev.Func, o.ev.Count, o.ev.Datatype, o.comm.NRanks)
}

// opGroup is the share of one ncclGroupEnd that one communicator runs as one kernel: the unit
// the linker ties to a GPU kernel.
type opGroup struct {
	src    *pluginIndex
	ops    []*op
	comm   ptrace.Comm
	start  int64    // first operation's start (Unix ns on the plugin's clock; see at)
	launch *plEvent // the KernelLaunch, when linked through it
	kfunc  string   // the kernel function that runs it (SendRecv for P2P groups)
	link   *link
	why    string
	// refused: the launch rule found this group's kernel and it contradicts the group, so no
	// other rule may link it.
	refused bool
}

// pluginIndex indexes one plugin trace by handle.
type pluginIndex struct {
	t        *ptrace.Trace
	byID     map[uint64]*plEvent
	children map[uint64][]*plEvent
	launches []*plEvent
	groups   []*opGroup
	ops      map[uint64]*op // by Coll/P2p handle
	// shift is added to the trace's times to put them on Kineto's clock: the CPU offset
	// measured from launches, or the whole offset of an unanchored (example-plugin) trace.
	shift        int64
	shiftSamples int
	shiftApplied bool
	// dupIDs counts slices whose handle an earlier slice already had (a damaged or hostile
	// file): they are kept in the output but link nothing, and nothing hangs under them.
	dupIDs int
	// launchGroups memoizes groupsOfLaunch per (GroupApi handle, communicator).
	launchGroups map[[2]uint64][]*opGroup
	// launchLink is the link made through each KernelLaunch.
	launchLink map[*plEvent]*link
	// lean holds what was read as records rather than events; counts tallies its proxy
	// records per operation.
	lean     *leanPlugin
	counts   map[uint64]proxyCounts
	channels map[uint64][]channelRec // by operation handle
}

func newPluginIndex(t *ptrace.Trace, lp *leanPlugin) *pluginIndex {
	if lp == nil {
		lp = &leanPlugin{keys: &flowKeys{}, realThreads: map[[2]int64]bool{}}
	}
	x := &pluginIndex{t: t, byID: map[uint64]*plEvent{}, children: map[uint64][]*plEvent{}, ops: map[uint64]*op{},
		launchGroups: map[[2]uint64][]*opGroup{}, launchLink: map[*plEvent]*link{}, lean: lp}
	var dups int
	x.counts, dups = lp.countProxies()
	x.channels = lp.channelsByOp()
	x.dupIDs += dups
	for i := 0; i < lp.events.len(); i++ {
		e := lp.events.ptr(i)
		if e.ID != 0 {
			if _, dup := x.byID[e.ID]; dup {
				x.dupIDs++
			} else {
				x.byID[e.ID] = e
			}
		}
		parent := e.Parent
		if e.Kind == ptrace.Completion {
			if e.Op != 0 {
				parent = e.Op
			}
		}
		if parent != 0 {
			x.children[parent] = append(x.children[parent], e)
		}
		if e.Kind == ptrace.KernelLaunch {
			x.launches = append(x.launches, e)
		}
	}
	sort.SliceStable(x.launches, func(i, j int) bool { return x.launches[i].Start < x.launches[j].Start })
	x.buildGroups()
	return x
}

// buildGroups gathers operations into per-launch groups. An operation belongs to the Group
// slice (ncclGroupLaunch) that contains its enqueue on the same thread, with its communicator;
// without one (a foreign trace), to its API parent's group; else it stands alone.
func (x *pluginIndex) buildGroups() {
	type gkey struct {
		group      uint64
		comm       uint64
		aloneGroup *groupRec // a Group slice without a handle
		aloneOp    *plEvent  // an operation in no group
	}
	containers := x.groupSlices()
	byKey := map[gkey]*opGroup{}
	for i := 0; i < x.lean.events.len(); i++ {
		e := x.lean.events.ptr(i)
		if e.Kind != ptrace.Coll && e.Kind != ptrace.P2p {
			continue
		}
		o := x.newOp(e)
		k := gkey{comm: e.Comm}
		switch g := containers.find(e); {
		case e.Group != 0:
			k.group = e.Group
		case g != nil:
			k.group = g.id
			if k.group == 0 {
				k.aloneGroup = g
			}
		case o.api != nil && o.api.Parent != 0:
			k.group = o.api.Parent
		default:
			k.aloneOp = e
		}
		grp := byKey[k]
		if grp == nil {
			grp = &opGroup{src: x, comm: o.comm, start: e.Start}
			byKey[k] = grp
			x.groups = append(x.groups, grp)
		}
		grp.ops = append(grp.ops, o)
		grp.start = min(grp.start, e.Start)
		o.group = grp
	}
	for _, g := range x.groups {
		g.kfunc = kernelFuncOf(g.ops)
	}
	sort.SliceStable(x.groups, func(i, j int) bool { return x.groups[i].start < x.groups[j].start })
}

// newOp collects an operation's API parent and children.
func (x *pluginIndex) newOp(e *plEvent) *op {
	o := &op{ev: e}
	if p := x.byID[e.Parent]; p != nil && (p.Kind == ptrace.CollAPI || p.Kind == ptrace.P2pAPI) {
		o.api = p
	}
	o.comm, _ = x.t.Comm(e.Comm)
	if o.comm.Hash == 0 {
		o.comm = ptrace.Comm{Hash: e.Comm, Rank: e.Rank}
	}
	if x.byID[e.ID] == e {
		c := x.counts[e.ID]
		o.proxies, o.steps, o.net = c.proxies, c.steps, c.net
		o.channels = x.channels[e.ID]
	}
	for _, c := range x.childrenOf(e) {
		switch c.Kind {
		case ptrace.Completion:
			o.completion = c
		}
	}
	if e.ID != 0 && x.byID[e.ID] == e {
		x.ops[e.ID] = o
	}
	return o
}

// childrenOf returns the slices under e: none when e's handle belongs to an earlier slice
// (each child list is then walked once, by its owner, whatever a file repeats).
func (x *pluginIndex) childrenOf(e *plEvent) []*plEvent {
	if e.ID == 0 || x.byID[e.ID] != e {
		return nil
	}
	return x.children[e.ID]
}

// kernelFuncOf is the kernel function a group runs as: its collective, or SendRecv for P2P.
func kernelFuncOf(ops []*op) string {
	f := ""
	for _, o := range ops {
		g := collective.NormFunc(o.ev.Func)
		if o.ev.Kind == ptrace.P2p {
			g = "SendRecv"
		}
		switch {
		case f == "":
			f = g
		case f != g:
			return "Generic"
		}
	}
	return f
}

// groupIndex finds the Group slice containing an event on its thread.
type groupIndex map[[2]int64][]*groupRec

func (x *pluginIndex) groupSlices() groupIndex {
	gi := groupIndex{}
	if x.t.Unanchored {
		return gi // the example plugin's threads are not real
	}
	for i := range x.lean.groups {
		g := &x.lean.groups[i]
		k := [2]int64{g.pid, g.tid}
		gi[k] = append(gi[k], g)
	}
	for _, l := range gi {
		sort.Slice(l, func(i, j int) bool { return l[i].start < l[j].start })
	}
	return gi
}

func (gi groupIndex) find(e *plEvent) *groupRec {
	l := gi[[2]int64{e.Pid.Num, e.Tid}]
	i := sort.Search(len(l), func(i int) bool { return l[i].start > e.Start }) - 1
	// Group slices on a thread follow one another; look back a few in case of nesting.
	for k := i; k >= 0 && k > i-4; k-- {
		if l[k].start <= e.Start && e.End <= l[k].end {
			return l[k]
		}
	}
	return nil
}

// groupsOfLaunch returns the groups of the operations a KernelLaunch launched: the operations
// under its GroupApi (through their CollApi/P2pApi), of the launch's communicator.
func (x *pluginIndex) groupsOfLaunch(l *plEvent) []*opGroup {
	key := [2]uint64{l.GroupAPI, l.Comm}
	if out, ok := x.launchGroups[key]; ok {
		return out
	}
	var out []*opGroup
	seen := map[*opGroup]bool{}
	for _, api := range x.children[l.GroupAPI] {
		if api.Kind != ptrace.CollAPI && api.Kind != ptrace.P2pAPI {
			continue
		}
		for _, c := range x.childrenOf(api) {
			o := x.ops[c.ID]
			if o == nil || (l.Comm != 0 && c.Comm != l.Comm) || seen[o.group] {
				continue
			}
			seen[o.group] = true
			out = append(out, o.group)
		}
	}
	x.launchGroups[key] = out
	return out
}

// at is the group's start on Kineto's clock.
func (g *opGroup) at() int64 { return g.start + g.src.shift }
