package synth

import (
	"fmt"
	"sort"
	"strings"

	"github.com/ncclprof/ncclprof/internal/jsonscan"
	"github.com/ncclprof/ncclprof/internal/ptrace"
)

// SimulatedNote marks Kineto traces made by KinetoFromPlugin.
const SimulatedNote = "SIMULATED: written by ncclmerge demo from an ncclprof plugin trace of the C test host; not recorded by torch.profiler"

// firstCorrelation is the first CUPTI correlation id of a synthesized Kineto trace.
const firstCorrelation = 600000

// KinetoOptions describe the simulated rank.
type KinetoOptions struct {
	Rank, WorldSize int
	Device          int
	// Work: compute before each collective and planted causes (nil: the NCCL kernels alone).
	Work *Work
}

// KinetoFromPlugin writes the torch.profiler trace that would go with a plugin trace: for every
// KernelLaunch, a record_param_comms op and a cudaLaunchKernelExC call inside it on the same
// thread, and the NCCL kernel it starts on the GPU (timed from the plugin's kernel channels or
// completion span), with Kineto's collective args and ac2g flow. It returns the trace and the
// number of kernels.
func KinetoFromPlugin(t *ptrace.Trace, opt KinetoOptions) ([]byte, int) {
	// Correlation ids as CUPTI numbers them in a profiled window of a real job (it counts every
	// runtime call since the process started: hundreds of thousands). Small ids made HTA 0.5.0
	// with pandas 3 fail on the merged demo: it stores them in an int8 column and then writes
	// row numbers of the (larger) merged trace into it.
	k := &kgen{corr: firstCorrelation, t: t, opt: opt, byID: map[uint64]*ptrace.Event{}, children: map[uint64][]*ptrace.Event{},
		streamEnd: map[int64]int64{}, threads: map[int64]bool{}, streams: map[int64]bool{}, lastLaunch: map[int64]int64{}}
	for i := range t.Events {
		e := &t.Events[i]
		if !e.IsSlice() {
			continue
		}
		k.byID[e.ID] = e
		parent := e.Parent
		if (e.Kind == ptrace.KernelCh || e.Kind == ptrace.Completion) && e.Op != 0 {
			parent = e.Op
		}
		k.children[parent] = append(k.children[parent], e)
		if e.Kind == ptrace.KernelLaunch {
			k.launches = append(k.launches, e)
		}
	}
	sort.SliceStable(k.launches, func(i, j int) bool { return k.launches[i].Start < k.launches[j].Start })
	for _, l := range k.launches {
		k.launch(l)
	}
	return k.finish(), k.kernels
}

type kgen struct {
	t         *ptrace.Trace
	opt       KinetoOptions
	byID      map[uint64]*ptrace.Event
	children  map[uint64][]*ptrace.Event
	launches  []*ptrace.Event
	events    []string
	corr      int
	kernels   int
	streamEnd map[int64]int64
	threads   map[int64]bool
	streams   map[int64]bool
	// lastLaunch: per thread, the end of its previous collective's launch (Work starts after it)
	lastLaunch map[int64]int64
}

func (k *kgen) ts(unix int64) string { return string(jsonscan.AppendMicros(nil, unix-k.t.Base)) }

func (k *kgen) dur(ns int64) string { return string(jsonscan.AppendMicros(nil, max(ns, 1))) }

// ops returns the operations a launch started (GroupApi → CollApi/P2pApi → Coll/P2p).
func (k *kgen) ops(l *ptrace.Event) (api, op []*ptrace.Event) {
	for _, a := range k.children[l.GroupAPI] {
		if a.Kind != ptrace.CollAPI && a.Kind != ptrace.P2pAPI {
			continue
		}
		for _, c := range k.children[a.ID] {
			if (c.Kind == ptrace.Coll || c.Kind == ptrace.P2p) && (l.Comm == 0 || c.Comm == l.Comm) {
				api, op = append(api, a), append(op, c)
			}
		}
	}
	return api, op
}

var c10dNames = map[string]string{"AllReduce": "allreduce", "AllGather": "_allgather_base",
	"ReduceScatter": "_reduce_scatter_base", "Broadcast": "broadcast", "Reduce": "reduce"}

var torchDtypes = map[string]string{"ncclFloat32": "Float", "ncclFloat": "Float", "ncclBfloat16": "BFloat16",
	"ncclFloat16": "Half", "ncclHalf": "Half", "ncclFloat64": "Double", "ncclInt64": "Long", "ncclInt32": "Int",
	"ncclInt8": "Char", "ncclUint8": "Byte"}

var shortTypes = map[string]string{"Float": "f32", "BFloat16": "bf16", "Half": "f16", "Double": "f64",
	"Long": "i64", "Int": "i32", "Char": "i8", "Byte": "u8"}

func (k *kgen) launch(l *ptrace.Event) {
	apis, ops := k.ops(l)
	if len(ops) == 0 {
		return
	}
	k.corr++
	corr := k.corr
	pid, tid := l.Pid.Num, l.Tid.Num
	k.threads[tid] = true
	comm, _ := k.t.Comm(l.Comm)
	stream := int64(20 + comm.LocalIndex)
	k.streams[stream] = true
	// CPU: record_param_comms over the launch interval, the launch call inside it.
	d := l.End - l.Start
	callStart, callDur := l.Start+d/4, max(d/2, 1)
	fn, algo, proto := ops[0].Func, ops[0].Algo, ops[0].Proto
	p2p := ops[0].Kind == ptrace.P2p
	dtype := torchDtypes[apis[0].Datatype]
	name := "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
	if !p2p {
		name = fmt.Sprintf("ncclDevKernel_%s_Sum_%s_%s_%s(ncclDevKernelArgsStorage<4096ul>)", fn, shortTypes[dtype], algo, proto)
	}
	var args []string
	if c, ok := c10dNames[fn]; ok && len(ops) == 1 && !p2p {
		args = append(args,
			fmt.Sprintf(`"Collective name": %q, "In msg nelems": %d, "Out msg nelems": %d, "Group size": %d, "dtype": %q`,
				c, apis[0].Count, apis[0].Count, comm.NRanks, dtype),
			fmt.Sprintf(`"Process Group Name": "%d", "Process Group Description": %q`, comm.LocalIndex, comm.Name))
	}
	extra := ""
	if len(args) > 0 {
		extra = ", " + strings.Join(args, ", ")
	}
	k.events = append(k.events,
		fmt.Sprintf(`{"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": %d, "tid": %d, "ts": %s, "dur": %s, "args": {"External id": %d%s}}`,
			pid, tid, k.ts(l.Start), k.dur(d), corr, extra),
		fmt.Sprintf(`{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernelExC", "pid": %d, "tid": %d, "ts": %s, "dur": %s, "args": {"External id": %d, "cbid": 430, "correlation": %d}}`,
			pid, tid, k.ts(callStart), k.dur(callDur), corr, corr),
		fmt.Sprintf(`{"ph": "s", "id": %d, "pid": %d, "tid": %d, "ts": %s, "cat": "ac2g", "name": "ac2g"}`, corr, pid, tid, k.ts(callStart)))
	start, end := k.kernelTime(l, ops)
	// A kernel runs after the call that launched it (its ac2g flow must not go back in time) and
	// after the stream's previous kernel.
	start = max(start, callStart, k.streamEnd[stream]+1000)
	end = max(end, start+1000)
	k.streamEnd[stream] = end
	if w := k.opt.Work; w != nil {
		k.work(w, l, ops[0].Seq, start)
	}
	dev := k.opt.Device
	k.events = append(k.events,
		fmt.Sprintf(`{"ph": "X", "cat": "kernel", "name": %q, "pid": %d, "tid": %d, "ts": %s, "dur": %s, "args": {"External id": %d, "device": %d, "stream": %d, "correlation": %d, "grid": [%d, 1, 1], "block": [544, 1, 1]%s}}`,
			name, dev, stream, k.ts(start), k.dur(end-start), corr, dev, stream, corr, max(ops[0].NChannels, 1), extra),
		fmt.Sprintf(`{"ph": "f", "id": %d, "pid": %d, "tid": %d, "ts": %s, "cat": "ac2g", "name": "ac2g", "bp": "e"}`, corr, dev, stream, k.ts(start)))
	k.kernels++
}

// kernelTime puts the kernel after its launch: over its channels' GPU times where the plugin
// recorded them (where the plugin placed them: %globaltimer − its GPU clock offset, which
// follows the GPU timer's drift), never past the end of the operation, else until the operation
// completed.
func (k *kgen) kernelTime(l *ptrace.Event, ops []*ptrace.Event) (int64, int64) {
	start, end := l.End+5000, l.End+50000
	lo, hi, done := int64(1<<62), int64(0), int64(0)
	gpu := k.t.GPUClock.Method != "" && k.t.GPUClock.Method != "none"
	for _, o := range ops {
		for _, c := range k.children[o.ID] {
			switch {
			case c.Kind == ptrace.KernelCh && c.GPUStart > 0 && gpu:
				lo, hi = min(lo, c.Start-300), max(hi, c.End+300)
			case c.Kind == ptrace.Completion:
				done = max(done, c.End)
			}
		}
	}
	if lo < hi {
		if done > lo {
			hi = min(hi, done)
		}
		return lo, hi
	}
	if done > start {
		end = done
	}
	return start, end
}

func (k *kgen) finish() []byte {
	pid := k.t.Pid
	dev := k.opt.Device
	var b strings.Builder
	fmt.Fprintf(&b, "{\n  \"schemaVersion\": 1,\n  \"deviceProperties\": [{\"id\": %d, \"name\": \"simulated GPU\"}],\n", dev)
	fmt.Fprintf(&b, "  \"distributedInfo\": {\"backend\": \"nccl\", \"rank\": %d, \"world_size\": %d},\n", k.opt.Rank, k.opt.WorldSize)
	fmt.Fprintf(&b, "  \"host_name\": %q,\n  \"simulated\": %q,\n", k.t.Host, SimulatedNote)
	fmt.Fprintf(&b, "  \"displayTimeUnit\": \"ms\",\n  \"baseTimeNanoseconds\": %d,\n  \"traceEvents\": [\n", k.t.Base)
	meta := []string{
		fmt.Sprintf(`{"ph": "M", "name": "process_name", "pid": %d, "tid": 0, "args": {"name": "python (simulated rank %d)"}}`, pid, k.opt.Rank),
		fmt.Sprintf(`{"ph": "M", "name": "process_labels", "pid": %d, "tid": 0, "args": {"labels": "CPU"}}`, pid),
		fmt.Sprintf(`{"ph": "M", "name": "process_name", "pid": %d, "tid": 0, "args": {"name": "python (simulated rank %d)"}}`, dev, k.opt.Rank),
		fmt.Sprintf(`{"ph": "M", "name": "process_labels", "pid": %d, "tid": 0, "args": {"labels": "GPU %d"}}`, dev, dev),
	}
	for _, tid := range sortedKeys(k.threads) {
		meta = append(meta, fmt.Sprintf(`{"ph": "M", "name": "thread_name", "pid": %d, "tid": %d, "args": {"name": "thread %d (simulated)"}}`, pid, tid, tid))
	}
	for _, s := range sortedKeys(k.streams) {
		// Kineto itself names streams "stream 7 " (a trailing space); ncclmerge keeps real
		// traces' events as they are, but the demo's own traces need not copy the quirk.
		meta = append(meta, fmt.Sprintf(`{"ph": "M", "name": "thread_name", "pid": %d, "tid": %d, "args": {"name": "stream %d"}}`, dev, s, s))
	}
	b.WriteString("  " + strings.Join(append(meta, k.events...), ",\n  "))
	b.WriteString("\n  ],\n  \"traceName\": \"simulated\"\n}\n")
	return []byte(b.String())
}

func sortedKeys(m map[int64]bool) []int64 {
	out := make([]int64, 0, len(m))
	for v := range m {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
