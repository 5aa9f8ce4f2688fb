package merge

import (
	"sort"

	"github.com/ncclprof/ncclprof/internal/ptrace"
	"github.com/ncclprof/ncclprof/internal/traceevent"
)

// The plugin's traces are mostly proxy ops, steps, their states and network events (a dozen
// per operation), which the merge only counts per operation, and flows, which it only
// renumbers: holding each as a decoded event took twice the file's size in memory. They are
// read into small records instead; the writer walks the file again for their text.

// proxyRec is a proxy-side slice: enough to count it under its operation.
type proxyRec struct {
	id, parent uint64
	kind       ptrace.Kind
}

// channelRec is a kernel channel (KernelCh) slice: what placing it on the GPU timeline needs.
type channelRec struct {
	id, op            uint64
	gpuStart, gpuStop int64 // raw %globaltimer ns
	channel           int
	name              string
}

func channelOf(e *ptrace.Event) channelRec {
	op := e.Op
	if op == 0 {
		op = e.Parent
	}
	return channelRec{id: e.ID, op: op, gpuStart: e.GPUStart, gpuStop: e.GPUStop, channel: e.Channel, name: e.Name}
}

// groupRec is a Group slice (ncclGroupLaunch): the interval on its thread that holds the
// enqueues of the operations it launches.
type groupRec struct {
	id                   uint64
	pid, tid, start, end int64 // start, end: Unix ns
}

// flowRec is one flow event of a plugin trace.
type flowRec struct {
	key   flowKey
	start bool
}

// leanPlugin is what the merge keeps of a plugin trace's slices and flows (ptrace.Trace.Events
// keeps the rest: metadata). The lists of a record per event are kept in blocks (a slice
// grown by doubling copied them, and left garbage that cost collection cycles).
type leanPlugin struct {
	// events are the slices the linker indexes, in file order (ptrace.Trace's Events keep
	// only what is not a slice: metadata).
	events   blocks[plEvent]
	proxies  blocks[proxyRec]
	channels blocks[channelRec]
	groups   []groupRec
	flows    blocks[flowRec]
	keys     *flowKeys
	// realThreads are the real (pid, tid) that dropped slices were on (normally none:
	// proxy threads are the plugin's synthetic tracks).
	realThreads map[[2]int64]bool
	// groupAPIs are the GroupApi handles seen, to count the repeated ones.
	groupAPIs    map[uint64]struct{}
	dupGroupAPIs int
}

// counted reports whether the merge reads a slice of this kind only to count it.
func counted(k ptrace.Kind) bool {
	switch k {
	case ptrace.ProxyOp, ptrace.ProxyStep, ptrace.StepState, ptrace.ProxyCtrl, ptrace.Net:
		return true
	}
	return false
}

// readLean reads a plugin trace into records: plEvents for the slices the linker indexes,
// smaller ones for those it counts or places (ptrace.Trace.Events keeps only the rest).
func readLean(path string) (*ptrace.Trace, *leanPlugin, error) {
	lp := &leanPlugin{keys: &flowKeys{}, realThreads: map[[2]int64]bool{}, groupAPIs: map[uint64]struct{}{}}
	t, err := ptrace.ReadLean(path, func(e *ptrace.Event) bool {
		switch {
		case isFlow(e.Ph):
			lp.flows.add(flowRec{lp.keys.key(e.IDRaw, e.Cat, e.Name), e.Ph == "s"})
			return true
		case e.IsSlice() && e.Kind == ptrace.KernelCh:
			lp.channels.add(channelOf(e))
			return true
		case e.IsSlice() && e.Kind == ptrace.Group && !e.Pid.IsStr && !e.Tid.IsStr:
			// Times relative to the base until the read is done (see below).
			lp.groups = append(lp.groups, groupRec{e.ID, e.Pid.Num, e.Tid.Num, e.Start, e.End})
			if isRealTid(e.Tid.Num) {
				lp.realThreads[[2]int64{e.Pid.Num, e.Tid.Num}] = true
			}
			return true
		case e.IsSlice() && (counted(e.Kind) || e.Kind == ptrace.GroupAPI):
			// A GroupApi is only ever looked up by its handle, as its calls' parent.
			if e.Kind != ptrace.GroupAPI {
				lp.proxies.add(proxyRec{e.ID, e.Parent, e.Kind})
			} else if _, dup := lp.groupAPIs[e.ID]; dup && e.ID != 0 {
				lp.dupGroupAPIs++
			} else {
				lp.groupAPIs[e.ID] = struct{}{}
			}
			if !e.Tid.IsStr && isRealTid(e.Tid.Num) {
				lp.realThreads[[2]int64{e.Pid.Num, e.Tid.Num}] = true
			}
			return true
		case e.IsSlice():
			lp.events.add(plEventOf(e))
			return true
		}
		return false
	})
	if err == nil {
		for i := range lp.groups {
			lp.groups[i].start += t.Base
			lp.groups[i].end += t.Base
		}
		for i := 0; i < lp.events.len(); i++ {
			e := lp.events.ptr(i)
			e.Start, e.End = e.Start+t.Base, e.End+t.Base
		}
	}
	if err == nil && t.Unanchored {
		// NCCL's example plugin is parsed whole (it is small): take the records from it, and
		// index every slice (its times are already absolute).
		for i := range t.Events {
			e := &t.Events[i]
			if e.IsSlice() {
				lp.events.add(plEventOf(e))
			}
			switch {
			case isFlow(e.Ph):
				lp.flows.add(flowRec{lp.keys.key(e.IDRaw, e.Cat, e.Name), e.Ph == "s"})
			case e.IsSlice() && counted(e.Kind):
				lp.proxies.add(proxyRec{e.ID, e.Parent, e.Kind})
			case e.IsSlice() && e.Kind == ptrace.KernelCh:
				lp.channels.add(channelOf(e))
			}
		}
	}
	return t, lp, err
}

// proxyCounts are an operation's proxy ops, steps and what happened under its steps.
type proxyCounts struct{ proxies, steps, net int }

// countProxies tallies the proxy records under each operation handle. A handle an earlier
// record already had is counted once (a damaged file), like duplicated slices elsewhere.
func (lp *leanPlugin) countProxies() (map[uint64]proxyCounts, int) {
	// One map of a handle's parent and kind (two maps were a tenth of a merge of an
	// NCCL-heavy trace), sized up front.
	nodes := make(map[uint64]proxyNode, lp.proxies.len()+lp.channels.len()+len(lp.groups))
	dups := 0
	for i := 0; i < lp.proxies.len(); i++ {
		p := lp.proxies.at(i)
		if p.id == 0 {
			continue
		}
		if _, ok := nodes[p.id]; ok {
			dups++
			continue
		}
		nodes[p.id] = proxyNode{p.parent, p.kind}
	}
	for i := 0; i < lp.channels.len(); i++ {
		c := lp.channels.at(i)
		if _, ok := nodes[c.id]; ok && c.id != 0 {
			dups++
		} else if c.id != 0 {
			nodes[c.id] = proxyNode{parent: c.op}
		}
	}
	for _, g := range lp.groups {
		if _, ok := nodes[g.id]; ok && g.id != 0 {
			dups++
		} else if g.id != 0 {
			nodes[g.id] = proxyNode{}
		}
	}
	dups += lp.dupGroupAPIs
	lp.groupAPIs = nil // only needed while reading
	counts := tallyProxies(&lp.proxies, func(id uint64) proxyNode { return nodes[id] })
	// The records are read once, here: free them before the Kineto trace's index grows (a
	// plugin-heavy trace's proxy records were a tenth of the heap while linking).
	lp.proxies = blocks[proxyRec]{}
	return counts, dups
}

// proxyNode is what tallying needs of a handle: its parent's handle and its kind.
type proxyNode struct {
	parent uint64
	kind   ptrace.Kind
}

// tallyProxies counts each proxy record under its operation. A ProxyOp's steps and a step's
// states and network events follow each other in a trace, so the last parent resolved and the
// counts of the last operation are kept aside: most records then touch no map (the lookups were
// a tenth of a merge of a plugin-heavy trace). The result is the same whatever the order.
func tallyProxies(proxies *blocks[proxyRec], node func(uint64) proxyNode) map[uint64]proxyCounts {
	t := opTally{out: map[uint64]proxyCounts{}}
	var last struct {
		id            uint64
		parent, grand proxyNode
	}
	last.parent = node(0)
	last.grand = node(last.parent.parent)
	for i := 0; i < proxies.len(); i++ {
		p := proxies.at(i)
		if p.parent != last.id {
			last.id, last.parent = p.parent, node(p.parent)
			last.grand = node(last.parent.parent)
		}
		parent := last.parent
		switch p.kind {
		case ptrace.ProxyOp:
			t.add(p.parent, proxyCounts{proxies: 1})
		case ptrace.ProxyStep:
			if parent.kind == ptrace.ProxyOp {
				t.add(parent.parent, proxyCounts{steps: 1})
			}
		}
		// Anything under a step (its states, network events) counts as net, as NCCL reports
		// network activity under the step it serves.
		if parent.kind == ptrace.ProxyStep && last.grand.kind == ptrace.ProxyOp {
			t.add(last.grand.parent, proxyCounts{net: 1})
		}
	}
	t.flush()
	return t.out
}

// opTally sums counts per operation, holding the current operation's aside until another's come.
type opTally struct {
	out map[uint64]proxyCounts
	op  uint64
	cur proxyCounts
}

func (t *opTally) add(op uint64, d proxyCounts) {
	if op != t.op {
		t.flush()
		t.op = op
	}
	t.cur = t.cur.plus(d)
}

// flush adds the current operation's counts to the map; an operation with none gets no entry.
func (t *opTally) flush() {
	if t.cur != (proxyCounts{}) {
		t.out[t.op] = t.out[t.op].plus(t.cur)
		t.cur = proxyCounts{}
	}
}

func (c proxyCounts) plus(d proxyCounts) proxyCounts {
	return proxyCounts{c.proxies + d.proxies, c.steps + d.steps, c.net + d.net}
}

// channelsByOp groups the kernel channels under their operation handle: one slice of them all,
// in file order within each operation, and each operation's part of it.
func (lp *leanPlugin) channelsByOp() map[uint64][]channelRec {
	all := make([]channelRec, lp.channels.len())
	for i := range all {
		all[i] = lp.channels.at(i)
	}
	lp.channels = blocks[channelRec]{} // read once, here: all holds them now
	sort.SliceStable(all, func(i, j int) bool { return all[i].op < all[j].op })
	out := make(map[uint64][]channelRec)
	for i := 0; i < len(all); {
		j := i + 1
		for j < len(all) && all[j].op == all[i].op {
			j++
		}
		out[all[i].op] = all[i:j:j]
		i = j
	}
	return out
}

// plEvent is what the merge keeps of a plugin slice it indexes (API calls, launches,
// operations, completions): the handles and arguments linking compares and the output
// quotes, and its offset, by which the writer finds it again: 232 bytes, under half a decoded
// ptrace.Event's 488; its strings point into the input.
type plEvent struct {
	Off                         int64
	Start, End                  int64 // Unix ns (relative to the base while reading)
	ID, Parent, Comm, Op, Group uint64
	GroupAPI                    uint64
	Count, Bytes                uint64
	Seq                         int64
	Pid                         traceevent.ID
	Tid                         int64
	Func, Datatype, Algo, Proto string
	Rank, NChannels, Peer       int // as read (int32 would wrap a hostile file's values)
	Kind                        ptrace.Kind
	tidStr                      bool // the tid was a string (Tid is then 0)
}

func plEventOf(e *ptrace.Event) plEvent {
	return plEvent{Off: e.Off, Start: e.Start, End: e.End, ID: e.ID, Parent: e.Parent, Comm: e.Comm, Op: e.Op,
		Group: e.Group, GroupAPI: e.GroupAPI, Count: e.Count, Bytes: e.Bytes, Seq: e.Seq, Pid: e.Pid,
		Tid: e.Tid.Num, Func: e.Func, Datatype: e.Datatype, Algo: e.Algo, Proto: e.Proto,
		Rank: e.Rank, NChannels: e.NChannels, Peer: e.Peer, Kind: e.Kind, tidStr: e.Tid.IsStr}
}
