package merge

import (
	"sort"

	"github.com/ncclprof/ncclprof/internal/collective"
	"github.com/ncclprof/ncclprof/internal/kineto"
	"github.com/ncclprof/ncclprof/internal/traceevent"
)

// launchCall is a Kineto runtime/driver call that launches a kernel. Traces have one per
// kernel, so it is kept small (24 bytes, in one flat slice): its thread is an index into the
// index's thread table, its end a duration.
type launchCall struct {
	start  int64 // Unix ns
	corr   uint64
	dur    uint32 // ns (capped)
	thread uint32
}

func (c *launchCall) end() int64 { return c.start + int64(c.dur) }

// kernel is an NCCL kernel of the Kineto trace.
type kernel struct {
	off        int64 // offset of the event in the document
	size       int   // length of the event text
	name       string
	corr       uint64
	pid, tid   kineto.ID // device, stream
	start, end int64     // Unix ns
	spec       collective.Kernel
	comms      kineto.CommsArgs
	launch     *launchCall
	link       *link
	why        string // why it stayed unlinked
	seq        string // seqKey, once named
}

// seqKey names the sequence a kernel belongs to for the order rule: its stream, with the c10d
// process group where Kineto recorded the collective args (a communicator launches on one
// stream, and the stream runs its kernels in launch order). It is named once per kernel (the
// rules ask several times).
func (k *kernel) seqKey() string {
	if k.seq == "" {
		if k.comms.PGName != "" {
			k.seq = "pg " + k.comms.PGName + " stream " + k.tid.String()
		} else {
			k.seq = "stream " + k.tid.String()
		}
	}
	return k.seq
}

// ref is the kernel's time for matching in time: its launch call (CPU side, right after NCCL
// enqueued the operation) when the trace has it, else the kernel's own start. (Never for
// ordering a sequence: the two kinds of time do not interleave.)
func (k *kernel) ref() int64 {
	if k.launch != nil {
		return k.launch.start
	}
	return k.start
}

// kinetoIndex is what the first pass over a Kineto trace keeps.
type kinetoIndex struct {
	// calls are the launch calls, sorted by (thread, start) once read; threadAt[t] is where
	// thread t's run of calls begins (threadAt[t+1] where it ends).
	calls      []launchCall
	read       blocks[launchCall] // the calls as read (copied once into calls)
	threads    map[[2]int64]uint32
	threadKeys [][2]int64
	threadAt   []int
	maxCallDur int64 // the longest launch call, ns: how far back an overlapping one can start
	// ncclCalls are the calls that launch NCCL kernels, likewise (copies: the clock offset
	// search looks ms around each plugin launch, and most calls launch other kernels).
	ncclCalls []launchCall
	ncclAt    []int
	used      map[*launchCall]bool // launch calls the launch rule took
	annots    kineto.Annotations   // collective record_functions
	byCorr    map[uint64]*launchCall
	kernels   []*kernel
	kernelAt  map[int64]*kernel // by event offset
	flows     flowTable
	dangling  []int64 // offsets of flow starts with no end
	keys      flowKeys
	minTs     int64 // Unix ns, over events with ts (not metadata)
	maxTs     int64
	gpuPids   map[int64]bool
	labels    map[string]string // pid → process_labels
	// absTs locates the ts values that are absolute Unix µs (PyTorch ≤ 2.3), which the
	// output rebases: the write copies everything between them as it is.
	absTs blocks[tsAt]
}

// tsAt is where a ts value is in the document (high 56 bits) and how long its text is (low
// 8): one word per event.
type tsAt uint64

func (t tsAt) off() int64 { return int64(t >> 8) }
func (t tsAt) n() int64   { return int64(t & 0xff) }

func newKinetoIndex() *kinetoIndex {
	return &kinetoIndex{
		threads: map[[2]int64]uint32{}, used: map[*launchCall]bool{}, byCorr: map[uint64]*launchCall{},
		kernelAt: map[int64]*kernel{}, gpuPids: map[int64]bool{},
		labels: map[string]string{},
		minTs:  1<<63 - 1, maxTs: -1 << 63,
	}
}

// flowKey is Perfetto's v1 flow identity (id, cat, name), with (cat, name) — and the text of
// an id that is no number — interned into kind: hashing two strings per flow event was a fifth
// of the first pass.
type flowKey struct {
	id   uint64
	kind uint32
}

// flowKeys interns flow kinds. Traces use one or two (cat, name) pairs, so the last one is
// remembered.
type flowKeys struct {
	kinds    map[[3]string]uint32
	last     [3]string
	lastKind uint32
}

// flowKind names the kind of a flow: its (cat, name), and the id's text where it is no number.
func flowKind(id uint64, ok bool, idRaw, cat, name string) (uint64, [3]string) {
	k := [3]string{cat, name}
	if !ok {
		id, k[2] = 0, idRaw
	}
	return id, k
}

// find is key for an event whose kind was seen while reading, without interning: safe for
// concurrent use once reading is done. ok is false for a kind never seen.
func (f *flowKeys) find(idRaw, cat, name string) (flowKey, bool) {
	id, valid := traceevent.FlowID(idRaw)
	id, k := flowKind(id, valid, idRaw, cat, name)
	kind, ok := f.kinds[k]
	return flowKey{id, kind}, ok
}

// key returns the flow key of an event.
func (f *flowKeys) key(idRaw, cat, name string) flowKey {
	id, ok := traceevent.FlowID(idRaw)
	return f.keyOf(id, ok, idRaw, cat, name)
}

// keyOf is key for an id read already (traceevent.FlowID).
func (f *flowKeys) keyOf(id uint64, ok bool, idRaw, cat, name string) flowKey {
	id, k := flowKind(id, ok, idRaw, cat, name)
	if k != f.last || f.kinds == nil {
		if f.kinds == nil {
			f.kinds = map[[3]string]uint32{}
		}
		kind, ok := f.kinds[k]
		if !ok {
			kind = uint32(len(f.kinds))
			f.kinds[k] = kind
		}
		f.last, f.lastKind = k, kind
	}
	return flowKey{id, f.lastKind}
}

// visit is the first-pass callback. Times are on the file's scale here (the base may come
// after traceEvents); finish converts them.
func (x *kinetoIndex) visit(e *kineto.Event) error {
	if e.HasTs && e.Ph != "M" {
		x.minTs = min(x.minTs, e.Ts)
		x.maxTs = max(x.maxTs, e.Ts+max(e.Dur, 0))
	}
	if n := e.TsSpan.End - e.TsSpan.Start; e.HasTs && e.Ts >= kineto.AbsoluteMinNs && n > 0 && n < 256 {
		x.absTs.add(tsAt(uint64(e.Off+int64(e.TsSpan.Start))<<8 | uint64(n)))
	}
	switch e.Ph {
	case "X":
		x.slice(e)
	case "s", "t", "f":
		x.flows.add(x.keys.keyOf(e.Decoded.FlowID, e.Decoded.FlowIDOK, e.IDRaw, e.Event.Cat, e.Name), e.Ph == "s", e.Off)
	case "M":
		switch e.Name {
		case "process_labels":
			x.labels[e.Pid.String()] = e.Arg("labels").String()
		}
	}
	return nil
}

func (x *kinetoIndex) slice(e *kineto.Event) {
	switch e.Cat {
	case kineto.CatUserAnnotation, kineto.CatCPUOp:
		x.annots.Add(e)
	case kineto.CatRuntime, kineto.CatDriver:
		if !e.Decoded.Launch {
			return
		}
		corr := e.Decoded.Corr
		if corr == 0 || e.Pid.IsStr || e.Tid.IsStr {
			return
		}
		key := [2]int64{e.Pid.Num, e.Tid.Num}
		t, ok := x.threads[key]
		if !ok {
			t = uint32(len(x.threadKeys))
			x.threads[key] = t
			x.threadKeys = append(x.threadKeys, key)
		}
		c := launchCall{start: e.Ts, corr: corr, dur: uint32(min(max(e.Dur, 0), 1<<32-1)), thread: t}
		x.read.add(c)
		x.maxCallDur = max(x.maxCallDur, int64(c.dur))
	case kineto.CatKernel:
		if !e.Pid.IsStr && !x.gpuPids[e.Pid.Num] {
			x.gpuPids[e.Pid.Num] = true
		}
		if !e.Decoded.NCCL {
			return
		}
		spec, _ := collective.ParseKernel(e.Name)
		k := &kernel{off: e.Off, size: len(e.Raw), name: e.Name, corr: e.Decoded.Corr, pid: e.Pid, tid: e.Tid,
			start: e.Ts, end: e.Ts + e.Dur, spec: spec, comms: e.Decoded.Comms}
		x.kernels = append(x.kernels, k)
		x.kernelAt[k.off] = k
	}
}

// finish converts times to Unix ns and ties kernels to their launch calls.
func (x *kinetoIndex) finish(t *kineto.Trace) {
	x.indexCalls(t)
	x.annots.Finish(t)
	for _, k := range x.kernels {
		k.start, k.end = t.Unix(k.start), t.Unix(k.end)
		if k.corr != 0 {
			k.launch = x.byCorr[k.corr]
		}
		if !k.comms.Present && k.launch != nil {
			th := x.threadKeys[k.launch.thread]
			if a := x.annots.Around(th[0], th[1], k.launch.start, k.launch.end()); a != nil {
				k.comms = a.Comms
			}
		}
	}
	sort.SliceStable(x.kernels, func(i, j int) bool { return x.kernels[i].start < x.kernels[j].start })
	if x.minTs <= x.maxTs {
		x.minTs, x.maxTs = t.Unix(x.minTs), t.Unix(x.maxTs)
	}
}

// indexCalls puts the launch calls on Unix ns, sorts them by thread and start, and indexes by
// correlation those whose kernel is an NCCL kernel (the only ones the rules link).
func (x *kinetoIndex) indexCalls(t *kineto.Trace) {
	x.calls = make([]launchCall, x.read.len())
	for i := range x.calls {
		x.calls[i] = x.read.at(i)
		x.calls[i].start = t.Unix(x.calls[i].start)
	}
	x.read = blocks[launchCall]{}
	sort.Slice(x.calls, func(i, j int) bool {
		a, b := &x.calls[i], &x.calls[j]
		if a.thread != b.thread {
			return a.thread < b.thread
		}
		return a.start < b.start
	})
	x.threadAt = threadStarts(x.calls, len(x.threadKeys))
	nccl := make(map[uint64]bool, len(x.kernels))
	for _, k := range x.kernels {
		if k.corr != 0 {
			nccl[k.corr] = true
		}
	}
	for i := range x.calls {
		if c := &x.calls[i]; nccl[c.corr] {
			x.byCorr[c.corr] = c
			x.ncclCalls = append(x.ncclCalls, *c)
		}
	}
	x.ncclAt = threadStarts(x.ncclCalls, len(x.threadKeys))
}

// threadStarts returns where each thread's run of calls begins in calls (sorted by thread):
// thread t's are calls[at[t]:at[t+1]].
func threadStarts(calls []launchCall, threads int) []int {
	at := make([]int, threads+1)
	for i := range calls {
		at[calls[i].thread+1] = i + 1
	}
	for th := 1; th < len(at); th++ {
		at[th] = max(at[th], at[th-1]) // threads with no call
	}
	return at
}

// threadCalls returns a thread's launch calls (only those of NCCL kernels with ncclOnly), by
// start.
func (x *kinetoIndex) threadCalls(pid, tid int64, ncclOnly bool) []launchCall {
	th, ok := x.threads[[2]int64{pid, tid}]
	if !ok {
		return nil
	}
	if ncclOnly {
		return x.ncclCalls[x.ncclAt[th]:x.ncclAt[th+1]]
	}
	return x.calls[x.threadAt[th]:x.threadAt[th+1]]
}

// danglingFlows lists the flow starts that have no end: Perfetto draws nothing for them and
// `ncclmerge check` counts them as errors, so the output leaves them out (and says so).
func (x *kinetoIndex) danglingFlows() {
	x.flows.finish()
	x.dangling = x.flows.dangling
}
