package why

import (
	"cmp"
	"slices"
	"sort"
	"strings"

	"github.com/ncclprof/ncclprof/internal/jsonscan"
	"github.com/ncclprof/ncclprof/internal/ptrace"
	"github.com/ncclprof/ncclprof/internal/traceevent"
	"github.com/tidwall/gjson"
)

// timelineShift: ncclmerge's timeline numbers rank i's processes (i+1)·2^22 + pid, as commops
// reads them (docs/ncclmerge.md); pid>>22 is 0 in a plugin trace or a merged rank.
const timelineShift = 22

// span is one slice on the Unix clock. Its fields are in this order so that it packs in 40 bytes
// (48 with name before tid): a file holds about 40 of them per operation until its operations
// are digested.
type span struct {
	start, end int64
	tid        int64 // CPU thread, or GPU stream
	corr       int64 // CUDA correlation (kernels, runtime calls); 0: none
	name       int32 // index in activity.names
	nccl       bool  // kernels: an NCCL kernel
	python     bool  // CPU: a python_function slice
}

// sent is what a collective sent to one peer, over all its channels: what is kept of its sends.
type sent struct {
	coll      uint64 // the Coll's handle (commops.Op.Handle)
	peer      int32
	bytes, ns int64
}

// send is one send ProxyOp of a collective: its peer, the bytes of its steps, and the span from
// its first step's start to its last step's end (the transfers, not the wait for peers before).
type send struct {
	coll       uint64 // the Coll's handle (commops.Op.Handle)
	peer       int32
	stepped    bool // a step was added
	bytes      int64
	start, end int64
}

// ns is how long its transfers took.
func (s *send) ns() int64 { return s.end - s.start }

// step adds one of its steps.
func (s *send) step(st stepOf) {
	s.bytes += st.bytes
	if !s.stepped {
		s.stepped, s.start, s.end = true, st.start, st.end
		return
	}
	s.start, s.end = min(s.start, st.start), max(s.end, st.end)
}

// activity is what one rank (a process group of one file) recorded: from torch.profiler its GPU
// kernels, CUDA runtime calls and CPU operators; from the plugin its send transfers.
type activity struct {
	names   []string
	nameID  map[string]int32
	kernels []span // by start
	calls   []span
	cpu     []span // cpu_op, python_function, user_annotation: by start
	// calls: the runtime calls that launched a kernel recorded, by correlation (finish drops the
	// others: cudaGetDevice, cudaStreamIsCapturing and their kind are most of a real trace's)
	// the longest kernel and CPU operator: how far before a window a span may start
	longestKernel, longestCPU int64
	// compute: the stream where most of its non-NCCL kernels ran (counted, not timed: one long
	// copy on a side stream must not make it the compute stream); busiest: the thread with the
	// most CPU slices (the launching thread where a launch is not recorded); python: the names
	// of python_function slices; hasKineto: torch.profiler's side was read. All kept once the
	// spans are dropped, with each operation's digest (digest.go).
	compute, busiest int64
	python           map[int32]bool
	hasKineto        bool
	digests          []digest
	arena            []nameNs
	sent             []sent
	// while reading: the sends, and plugin handles → what they stand for
	sends []send
	colls map[uint64]bool // the Colls in the file, by handle
	proxy map[uint64]int  // ProxyOp id → index in sends; -1: a receive, whose steps are not kept
	steps []stepOf        // steps read before their ProxyOp
}

type stepOf struct {
	proxy      uint64
	bytes      int64
	start, end int64
}

// Kineto reports whether torch.profiler's side was read for this rank.
func (a *activity) Kineto() bool { return a.hasKineto }

func (a *activity) name(s string) int32 {
	if id, ok := a.nameID[s]; ok {
		return id
	}
	id := int32(len(a.names))
	a.names = append(a.names, strings.Clone(s))
	a.nameID[a.names[id]] = id
	return id
}

// fileActivity is what one file holds, per process group.
type fileActivity map[int64]*activity

func (f fileActivity) group(pid int64) *activity {
	g := pid >> timelineShift
	a := f[g]
	if a == nil {
		a = &activity{nameID: map[string]int32{}, colls: map[uint64]bool{}, proxy: map[uint64]int{}}
		f[g] = a
	}
	return a
}

// kineto keeps a torch.profiler slice.
func (a *activity) kineto(e *traceevent.Event, sp span) {
	switch cat := e.Cat; {
	case strings.EqualFold(cat, "kernel"), strings.EqualFold(cat, "gpu_memcpy"), strings.EqualFold(cat, "gpu_memset"):
		var linked bool
		sp.corr, linked = launchArgs(e)
		sp.nccl = linked || strings.HasPrefix(e.Name, "ncclDevKernel") || strings.HasPrefix(e.Name, "ncclKernel")
		sp.name = a.name(e.Name)
		a.kernels = append(a.kernels, sp)
	case strings.EqualFold(cat, "cuda_runtime"), strings.EqualFold(cat, "cuda_driver"):
		sp.corr, _ = launchArgs(e)
		sp.name = a.name(e.Name)
		a.calls = append(a.calls, sp)
	case strings.EqualFold(cat, "cpu_op"), strings.EqualFold(cat, "python_function"), strings.EqualFold(cat, "user_annotation"):
		sp.name = a.name(e.Name)
		sp.python = strings.EqualFold(cat, "python_function")
		a.cpu = append(a.cpu, sp)
	}
}

// launchArgs is a kernel's or runtime call's CUDA correlation, and whether it has an nccl
// member (ncclmerge linked the kernel to plugin operations), as gjson would find them, in one
// walk of its args: two lookups walked them twice, for every kernel.
func launchArgs(e *traceevent.Event) (corr int64, nccl bool) {
	if !e.ArgsSpan.Valid() {
		return 0, false
	}
	o := jsonscan.NewObject(e.Raw[e.ArgsSpan.Start:e.ArgsSpan.End])
	found := false
	for k, raw, ok := o.Next(); ok; k, raw, ok = o.Next() {
		switch {
		case k == "correlation" && !found:
			corr, found = gjson.Parse(raw).Int(), true
		case k == "nccl":
			nccl = true
		}
	}
	return corr, nccl
}

// plugin keeps what names a collective's send transfers.
func (a *activity) plugin(e *ptrace.Event) {
	switch e.Kind {
	case ptrace.Coll:
		a.colls[e.ID] = true
	case ptrace.ProxyOp:
		a.proxy[e.ID] = -1
		if e.IsSend {
			a.proxy[e.ID] = len(a.sends)
			a.sends = append(a.sends, send{coll: e.Parent, peer: int32(e.Peer)})
		}
	case ptrace.ProxyStep:
		// Added to its send as it goes by: a job's steps are most of its plugin events, and half
		// of them are receives'.
		st := stepOf{e.Parent, e.TransSize, e.Start, e.End}
		switch i, ok := a.proxy[st.proxy]; {
		case !ok:
			a.steps = append(a.steps, st)
		case i >= 0:
			a.sends[i].step(st)
		}
	}
}

// finish puts everything on the Unix clock, sorts it, and gives each send its collective and
// its steps' bytes and span.
func (a *activity) finish(base int64) {
	for _, v := range [][]span{a.kernels, a.calls, a.cpu} {
		for i := range v {
			v[i].start += base
			v[i].end += base
		}
		sort.Slice(v, func(i, j int) bool { return v[i].start < v[j].start })
	}
	a.hasKineto = len(a.kernels)+len(a.cpu) > 0
	a.python = map[int32]bool{}
	kernels, threads := map[int64]int64{}, map[int64]int{}
	for _, k := range a.kernels {
		a.longestKernel = max(a.longestKernel, k.end-k.start)
		if !k.nccl {
			kernels[k.tid]++
		}
	}
	for _, c := range a.cpu {
		a.longestCPU = max(a.longestCPU, c.end-c.start)
		threads[c.tid]++
		if c.python {
			a.python[c.name] = true
		}
	}
	a.compute, a.busiest = most(kernels), most(threads)
	a.keepLaunches()
	for _, st := range a.steps {
		if i, ok := a.proxy[st.proxy]; ok && i >= 0 {
			a.sends[i].step(st)
		}
	}
	a.keepSent()
	a.sends, a.colls, a.proxy, a.steps = nil, nil, nil, nil
}

// keepSent keeps one sent per collective and peer: its channels' sends, their bytes added and
// the longest of their times (channels run side by side), in order of first send.
func (a *activity) keepSent() {
	at := map[sent]int{} // by collective and peer
	for _, s := range a.sends {
		if !a.colls[s.coll] || !s.stepped || s.bytes <= 0 {
			continue
		}
		k := sent{coll: s.coll, peer: s.peer}
		i, ok := at[k]
		if !ok {
			i, at[k] = len(a.sent), len(a.sent)
			a.sent = append(a.sent, k)
		}
		a.sent[i].bytes += s.bytes
		a.sent[i].ns = max(a.sent[i].ns, s.ns())
	}
	// What is kept for the whole job: no room to grow (append leaves up to half of a slice's
	// room unused).
	a.sent = slices.Clone(a.sent)
}

// most is the key with the highest count, the lowest on a tie (-1: none).
func most[N int | int64](n map[int64]N) int64 {
	best, top := int64(-1), N(-1)
	for k, c := range n {
		if c > top || c == top && k < best {
			best, top = k, c
		}
	}
	return best
}

// keepLaunches keeps the runtime calls that launched a recorded kernel, sorted by correlation
// for launch.
func (a *activity) keepLaunches() {
	launched := make([]int64, 0, len(a.kernels))
	for _, k := range a.kernels {
		if k.corr != 0 {
			launched = append(launched, k.corr)
		}
	}
	slices.Sort(launched)
	kept := a.calls[:0]
	for _, c := range a.calls {
		if _, ok := slices.BinarySearch(launched, c.corr); ok && c.corr != 0 {
			kept = append(kept, c)
		}
	}
	a.calls = kept
	slices.SortStableFunc(a.calls, func(x, y span) int { return cmp.Compare(x.corr, y.corr) })
}

// launch is the runtime call that launched kernel k (false: not recorded).
func (a *activity) launch(k *span) (span, bool) {
	if k.corr == 0 {
		return span{}, false
	}
	i, ok := slices.BinarySearchFunc(a.calls, k.corr, func(c span, corr int64) int { return cmp.Compare(c.corr, corr) })
	if !ok {
		return span{}, false
	}
	for i+1 < len(a.calls) && a.calls[i+1].corr == k.corr {
		i++ // the last to start, as a map filled in order of start kept it
	}
	return a.calls[i], true
}
