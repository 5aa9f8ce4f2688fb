package why

import (
	"sort"
	"strings"

	"github.com/ncclprof/ncclprof/internal/ptrace"
	"github.com/ncclprof/ncclprof/internal/traceevent"
)

// timelineShift: ncclmerge's timeline numbers rank i's processes (i+1)·2^22 + pid, as commops
// reads them (docs/ncclmerge.md); pid>>22 is 0 in a plugin trace or a merged rank.
const timelineShift = 22

// span is one slice on the Unix clock.
type span struct {
	start, end int64
	name       int32 // index in activity.names
	tid        int64 // CPU thread, or GPU stream
	corr       int64 // CUDA correlation (kernels, runtime calls); 0: none
	nccl       bool  // kernels: an NCCL kernel
	python     bool  // CPU: a python_function slice
}

// send is one send ProxyOp of a collective: its peer, the bytes of its steps, and the span from
// its first step's start to its last step's end (the transfers, not the wait for peers before).
type send struct {
	coll      uint64 // the Coll's handle, until finish names the collective
	comm      uint64
	fn        string
	seq       int64
	peer      int32
	bytes     int64
	start, ns int64
}

// activity is what one rank (a process group of one file) recorded: from torch.profiler its GPU
// kernels, CUDA runtime calls and CPU operators; from the plugin its send transfers.
type activity struct {
	names   []string
	nameID  map[string]int32
	kernels []span          // by start
	calls   []span          // runtime calls, by start
	cpu     []span          // cpu_op, python_function, user_annotation: by start
	byCorr  map[int64]int32 // correlation → index in calls
	// the longest kernel and CPU operator: how far before a window a span may start
	longestKernel, longestCPU int64
	sends                     []send
	// while reading: plugin handles → what they stand for
	colls map[uint64]send // Coll id → (comm, fn, seq)
	proxy map[uint64]int  // send ProxyOp id → index in sends
	steps []stepOf
}

type stepOf struct {
	proxy      uint64
	bytes      int64
	start, end int64
}

// Kineto reports whether torch.profiler's side was read for this rank.
func (a *activity) Kineto() bool { return len(a.kernels)+len(a.cpu) > 0 }

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
		a = &activity{nameID: map[string]int32{}, byCorr: map[int64]int32{}, colls: map[uint64]send{}, proxy: map[uint64]int{}}
		f[g] = a
	}
	return a
}

// kineto keeps a torch.profiler slice.
func (a *activity) kineto(e *traceevent.Event, sp span) {
	switch strings.ToLower(e.Cat) {
	case "kernel", "gpu_memcpy", "gpu_memset":
		sp.corr = e.Arg("correlation").Int()
		sp.nccl = e.Arg("nccl").Exists() || strings.HasPrefix(e.Name, "ncclDevKernel") || strings.HasPrefix(e.Name, "ncclKernel")
		sp.name = a.name(e.Name)
		a.kernels = append(a.kernels, sp)
	case "cuda_runtime", "cuda_driver":
		sp.corr = e.Arg("correlation").Int()
		sp.name = a.name(e.Name)
		a.calls = append(a.calls, sp)
	case "cpu_op", "python_function", "user_annotation":
		sp.name = a.name(e.Name)
		sp.python = strings.EqualFold(e.Cat, "python_function")
		a.cpu = append(a.cpu, sp)
	}
}

// plugin keeps what names a collective's send transfers.
func (a *activity) plugin(e *ptrace.Event) {
	switch e.Kind {
	case ptrace.Coll:
		// The function's name, interned: the event's strings point into the file's buffer, which
		// a kept substring would keep whole.
		a.colls[e.ID] = send{comm: e.Comm, fn: a.names[a.name(e.Func)], seq: e.Seq}
	case ptrace.ProxyOp:
		if e.Arg("is_send").Bool() {
			a.proxy[e.ID] = len(a.sends)
			a.sends = append(a.sends, send{coll: e.Parent, peer: int32(e.Peer)})
		}
	case ptrace.ProxyStep:
		a.steps = append(a.steps, stepOf{e.Parent, e.Arg("trans_size").Int(), e.Start, e.End})
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
	for _, k := range a.kernels {
		a.longestKernel = max(a.longestKernel, k.end-k.start)
	}
	for _, c := range a.cpu {
		a.longestCPU = max(a.longestCPU, c.end-c.start)
	}
	for i, c := range a.calls {
		if c.corr != 0 {
			a.byCorr[c.corr] = int32(i)
		}
	}
	first := make([]bool, len(a.sends))
	for _, st := range a.steps {
		i, ok := a.proxy[st.proxy]
		if !ok {
			continue
		}
		s := &a.sends[i]
		s.bytes += st.bytes
		if !first[i] {
			first[i], s.start, s.ns = true, st.start+base, st.end-st.start
			continue
		}
		end := max(s.start+s.ns, st.end+base)
		s.start = min(s.start, st.start+base)
		s.ns = end - s.start
	}
	kept := a.sends[:0]
	for i, s := range a.sends {
		c, ok := a.colls[s.coll]
		if !ok || !first[i] || s.bytes <= 0 {
			continue
		}
		s.comm, s.fn, s.seq = c.comm, c.fn, c.seq
		kept = append(kept, s)
	}
	a.sends = kept
	a.colls, a.proxy, a.steps = nil, nil, nil
}
