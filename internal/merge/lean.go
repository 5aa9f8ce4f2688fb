package merge

import (
	"github.com/ncclprof/ncclprof/internal/ptrace"
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

// leanPlugin is what the merge keeps of a plugin trace besides its decoded events.
type leanPlugin struct {
	proxies  []proxyRec
	channels []channelRec
	groups   []groupRec
	flows    []flowRec
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

// readLean reads a plugin trace keeping decoded only the events the linker indexes.
func readLean(path string) (*ptrace.Trace, *leanPlugin, error) {
	lp := &leanPlugin{keys: &flowKeys{}, realThreads: map[[2]int64]bool{}, groupAPIs: map[uint64]struct{}{}}
	t, err := ptrace.ReadLean(path, func(e *ptrace.Event) bool {
		switch {
		case isFlow(e.Ph):
			lp.flows = append(lp.flows, flowRec{lp.keys.key(e.IDRaw, e.Cat, e.Name), e.Ph == "s"})
			return true
		case e.IsSlice() && e.Kind == ptrace.KernelCh:
			lp.channels = append(lp.channels, channelOf(e))
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
				lp.proxies = append(lp.proxies, proxyRec{e.ID, e.Parent, e.Kind})
			} else if _, dup := lp.groupAPIs[e.ID]; dup && e.ID != 0 {
				lp.dupGroupAPIs++
			} else {
				lp.groupAPIs[e.ID] = struct{}{}
			}
			if !e.Tid.IsStr && isRealTid(e.Tid.Num) {
				lp.realThreads[[2]int64{e.Pid.Num, e.Tid.Num}] = true
			}
			return true
		}
		return false
	})
	if err == nil {
		for i := range lp.groups {
			lp.groups[i].start += t.Base
			lp.groups[i].end += t.Base
		}
	}
	if err == nil && t.Unanchored {
		// NCCL's example plugin is parsed whole (it is small): take the records from it.
		for i := range t.Events {
			e := &t.Events[i]
			switch {
			case isFlow(e.Ph):
				lp.flows = append(lp.flows, flowRec{lp.keys.key(e.IDRaw, e.Cat, e.Name), e.Ph == "s"})
			case e.IsSlice() && counted(e.Kind):
				lp.proxies = append(lp.proxies, proxyRec{e.ID, e.Parent, e.Kind})
			case e.IsSlice() && e.Kind == ptrace.KernelCh:
				lp.channels = append(lp.channels, channelOf(e))
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
	parentOf := make(map[uint64]uint64, len(lp.proxies))
	kindOf := make(map[uint64]ptrace.Kind, len(lp.proxies))
	dups := 0
	for _, p := range lp.proxies {
		if p.id == 0 {
			continue
		}
		if _, ok := parentOf[p.id]; ok {
			dups++
			continue
		}
		parentOf[p.id], kindOf[p.id] = p.parent, p.kind
	}
	for _, c := range lp.channels {
		if _, ok := parentOf[c.id]; ok && c.id != 0 {
			dups++
		} else if c.id != 0 {
			parentOf[c.id] = c.op
		}
	}
	for _, g := range lp.groups {
		if _, ok := parentOf[g.id]; ok && g.id != 0 {
			dups++
		} else if g.id != 0 {
			parentOf[g.id] = 0
		}
	}
	dups += lp.dupGroupAPIs
	lp.groupAPIs = nil // only needed while reading
	out := map[uint64]proxyCounts{}
	for _, p := range lp.proxies {
		switch p.kind {
		case ptrace.ProxyOp:
			c := out[p.parent]
			c.proxies++
			out[p.parent] = c
		case ptrace.ProxyStep:
			if kindOf[p.parent] == ptrace.ProxyOp {
				op := parentOf[p.parent]
				c := out[op]
				c.steps++
				out[op] = c
			}
		}
		// Anything under a step (its states, network events) counts as net, as NCCL reports
		// network activity under the step it serves.
		if kindOf[p.parent] == ptrace.ProxyStep {
			if proxy := parentOf[p.parent]; kindOf[proxy] == ptrace.ProxyOp {
				op := parentOf[proxy]
				c := out[op]
				c.net++
				out[op] = c
			}
		}
	}
	return out, dups
}

// channelsByOp groups the kernel channels under their operation handle.
func (lp *leanPlugin) channelsByOp() map[uint64][]channelRec {
	out := make(map[uint64][]channelRec, len(lp.channels)/2+1)
	for _, c := range lp.channels {
		out[c.op] = append(out[c.op], c)
	}
	return out
}
