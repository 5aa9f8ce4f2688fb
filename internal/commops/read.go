package commops

import (
	"fmt"
	"strings"
	"time"

	"github.com/ncclprof/ncclprof/internal/collective"
	"github.com/ncclprof/ncclprof/internal/jsonscan"
	"github.com/ncclprof/ncclprof/internal/kineto"
	"github.com/ncclprof/ncclprof/internal/ptrace"
	"github.com/ncclprof/ncclprof/internal/traceevent"
	"github.com/ncclprof/ncclprof/internal/tracefile"
	"github.com/tidwall/gjson"
)

// A process is found by its group: ncclmerge's timeline renumbers rank i's processes to
// (i+1)·2^22 + pid (docs/ncclmerge.md), and real pids stay below 2^22 (Linux's pid_max), so
// pid>>22 is 0 for every event of a plugin trace or of a merged rank and i+1 in a timeline.
const timelineShift = 22

// opKey names an operation inside one file: handles are unique within a process only.
type opKey struct {
	group  int64
	handle uint64
}

// stepMark is a step label set at a time on a process.
type stepMark struct {
	proc  int32
	at    int64
	label string
}

// part is what one file holds, with indices local to it.
type part struct {
	procs  []Proc
	comms  []Comm
	steps  []stepMark
	ops    []Op
	notes  []string
	others Others
	// members[i] is the handles the operation standing for a kernel's group took in (its own
	// Handle is 0): with each operation's Handle, what dedupe matches across files.
	members map[int32][]uint64
}

// reader reads one file.
type reader struct {
	file    int32
	path    string
	opt     Options
	p       part
	groups  map[int64]int32  // pid>>22 → local proc
	comms   map[uint64]int32 // hash → local comm
	keys    map[opKey]int32  // operation handle → index in p.ops
	arrive  []bool           // p.ops[i].Arrive was set from its Coll/P2p or completion
	groupOf map[int32]int32  // an operation that a kernel's group took in → the group's operation
	legs    map[opKey][]Leg
	kerns   []kernelLink
	gpu     gpuArrivals
	strs    map[string]string // interned: nothing kept may point into the file's buffer
	ev      ptrace.Event
	decoded *ptrace.Event // &ev where the event visited was decoded into it (for Options.Also)
	last    time.Time
}

// kernelLink is a GPU kernel ncclmerge linked to plugin operations (its args.nccl).
type kernelLink struct {
	group      int64
	handles    []uint64
	start, dur int64
	ref        Ref
	name       string
	nccl       gjson.Result
}

func readFile(fi int32, path string, opt Options) (*part, error) {
	// One pass, its pages given back behind it: nothing kept points into the file (intern).
	in, err := tracefile.ReadPass(path)
	if err != nil {
		return nil, err
	}
	defer in.Done()
	data := in.Data
	r := &reader{file: fi, path: path, opt: opt, groups: map[int64]int32{}, comms: map[uint64]int32{},
		keys: map[opKey]int32{}, legs: map[opKey][]Leg{}, strs: map[string]string{}, groupOf: map[int32]int32{}, last: time.Now()}
	visit := r.visit
	var also EventVisitor
	if opt.Also != nil {
		also = opt.Also(fi)
		visit = func(t *ptrace.Trace, e *traceevent.Event) error {
			r.decoded = nil
			if err := r.visit(t, e); err != nil {
				return err
			}
			if dv, ok := also.(DecodedVisitor); ok {
				return dv.VisitDecoded(t, e, r.decoded)
			}
			return also.Visit(t, e)
		}
	}
	t, err := ptrace.Stream(path, data, traceevent.Options{Progress: r.progress, Release: in.Release}, visit)
	if err != nil {
		return nil, err
	}
	if also != nil {
		also.Done(t)
	}
	if err := r.finish(t); err != nil {
		return nil, err
	}
	if ov, ok := also.(OpsVisitor); ok {
		ov.Ops(r.p.ops)
	}
	// A copy: a pointer into the reader would keep it alive, and with it (through its last
	// event) the whole file's buffer until every file is read.
	p := r.p
	return &p, nil
}

// progress reports a large file every few seconds.
func (r *reader) progress(done, total int64) {
	if r.opt.Log == nil || time.Since(r.last) < 3*time.Second {
		return
	}
	r.last = time.Now()
	fmt.Fprintf(r.opt.Log, "reading %s: %d%% of %d MB\n", r.path, 100*done/max(total, 1), total>>20)
}

func (r *reader) intern(s string) string {
	if v, ok := r.strs[s]; ok {
		return v
	}
	v := strings.Clone(s)
	r.strs[v] = v
	return v
}

func (r *reader) visit(t *ptrace.Trace, e *traceevent.Event) error {
	if e.Ph == "i" && e.Name == "ncclprof_step" {
		r.p.steps = append(r.p.steps, stepMark{proc: r.proc(e.Pid.Num), at: e.Ts, label: r.intern(e.Arg("step").String())})
		return nil
	}
	if e.Ph != "X" {
		return nil
	}
	switch k := ptrace.KindOf(e.Cat, e.Name); k {
	case ptrace.Coll, ptrace.P2p, ptrace.Completion:
		if err := t.Decode(e, &r.ev); err != nil {
			return err
		}
		r.decoded = &r.ev
		r.op(&r.ev)
	case ptrace.KernelCh, ptrace.ProxyOp:
		if err := t.Decode(e, &r.ev); err != nil {
			return err
		}
		r.decoded = &r.ev
		r.gpu.see(&r.ev)
		if r.opt.Legs {
			r.leg(&r.ev)
		}
	case ptrace.ProxyStep:
		if e.Name == "Step 0" { // the first step: its SendGPUWait release is the GPU's arrival
			if err := t.Decode(e, &r.ev); err != nil {
				return err
			}
			r.decoded = &r.ev
			r.gpu.see(&r.ev)
		}
	case ptrace.StepState:
		if e.Name == "SendGPUWait" {
			r.gpu.release(e.Pid.Num>>timelineShift, e.Ts, e.Ts+e.Dur)
		}
	case ptrace.KindOther:
		if strings.EqualFold(e.Cat, "kernel") {
			r.kernel(e)
		} else if strings.HasPrefix(e.Name, "gloo:") {
			r.p.others.Gloo++
		}
	}
	return nil
}

// proc returns the local process of an event's pid.
func (r *reader) proc(pid int64) int32 {
	g := pid >> timelineShift
	if i, ok := r.groups[g]; ok {
		return i
	}
	r.p.procs = append(r.p.procs, Proc{Files: []string{r.path}, Pid: pid, Rank: -1})
	r.groups[g] = int32(len(r.p.procs) - 1)
	return r.groups[g]
}

func (r *reader) comm(hash uint64) int32 {
	if i, ok := r.comms[hash]; ok {
		return i
	}
	r.p.comms = append(r.p.comms, Comm{Hash: hash})
	r.comms[hash] = int32(len(r.p.comms) - 1)
	return r.comms[hash]
}

func (r *reader) ref(e *traceevent.Event) Ref {
	return Ref{File: r.file, Pid: e.Pid.Num, Tid: e.Tid.Num, TsNs: e.Ts}
}

// find returns the operation with the handle, creating it.
func (r *reader) find(pid int64, handle uint64) int32 {
	k := opKey{pid >> timelineShift, handle}
	if i, ok := r.keys[k]; ok {
		return i
	}
	r.p.ops = append(r.p.ops, Op{Proc: r.proc(pid), Seq: -1, Peer: -1, Step: -1, Handle: handle})
	r.arrive = append(r.arrive, false)
	r.keys[k] = int32(len(r.p.ops) - 1)
	return r.keys[k]
}

// op takes a Coll/P2p (the enqueue: arrival and arguments) or its completion span (the same
// arguments and the end); either may come first in the file, and either may be missing.
func (r *reader) op(e *ptrace.Event) {
	handle := e.ID
	if e.Kind == ptrace.Completion {
		handle = e.Op
	}
	i := r.find(e.Pid.Num, handle)
	o := &r.p.ops[i]
	if !r.arrive[i] {
		o.Arrive, r.arrive[i] = e.Start, true
		o.Ref = r.ref(&e.Event)
	}
	if e.Kind == ptrace.Completion && o.Source != Kernel {
		o.Done, o.Time, o.Source = e.End, e.End-e.Start, Completion
		o.Ref = r.ref(&e.Event)
	}
	o.Comm, o.Rank = r.comm(e.Comm), int32(e.Rank)
	if tr := tracedOf(e.Traced); tr != Full && o.Traced == Full {
		o.Traced = tr
	}
	o.GraphReplay = o.GraphReplay || e.Kind == ptrace.Completion && e.Graph
	r.fillArgs(o, e.Func, e.Algo, e.Proto, e.Seq, e.Count, e.Bytes, e.NChannels)
	if e.Kind == ptrace.P2p {
		o.Peer = int32(e.Peer)
	}
}

// fillArgs sets the arguments an operation does not have yet.
func (r *reader) fillArgs(o *Op, fn, algo, proto string, seq int64, count, bytes uint64, nch int) {
	if o.Func == "" {
		o.Func = r.intern(collective.NormFunc(fn))
	}
	if o.Algo == "" && algo != "" {
		o.Algo = r.intern(algo)
	}
	if o.Proto == "" && proto != "" {
		o.Proto = r.intern(proto)
	}
	if o.Seq < 0 {
		o.Seq = seq
	}
	if o.Count == 0 {
		o.Count = count
	}
	if o.Bytes == 0 {
		o.Bytes = bytes
	}
	if o.NChannels == 0 {
		o.NChannels = int32(nch)
	}
}

// leg records a channel of an operation: a send ProxyOp (its peer), or a KernelCh.
func (r *reader) leg(e *ptrace.Event) {
	k := opKey{e.Pid.Num >> timelineShift, e.Parent}
	l := Leg{Channel: int32(e.Channel), Peer: -1}
	if e.Kind == ptrace.KernelCh {
		k.handle = e.Op
	} else {
		if !e.IsSend {
			return
		}
		l.Peer = int32(e.Peer)
	}
	r.legs[k] = append(r.legs[k], l)
}

// kernel records a Kineto kernel that ncclmerge linked (its args carry "nccl").
func (r *reader) kernel(e *traceevent.Event) {
	n := e.Arg("nccl")
	if !n.IsObject() {
		if kineto.IsNCCLKernel(e.Name) {
			r.p.others.NCCLKernels++
		}
		return
	}
	kl := kernelLink{group: e.Pid.Num >> timelineShift, start: e.Ts, dur: e.Dur, ref: r.ref(e),
		name: e.Name, nccl: gjson.Parse(strings.Clone(n.Raw))}
	if h, ok := handleOf(n.Get("op")); ok {
		kl.handles = []uint64{h}
	}
	n.Get("ops").ForEach(func(_, v gjson.Result) bool {
		if h, ok := handleOf(v.Get("op")); ok {
			kl.handles = append(kl.handles, h)
		}
		return true
	})
	r.kerns = append(r.kerns, kl)
}

func handleOf(v gjson.Result) (uint64, bool) {
	if !v.Exists() {
		return 0, false
	}
	h, err := jsonscan.Uint(v.Str)
	return h, err == nil
}
