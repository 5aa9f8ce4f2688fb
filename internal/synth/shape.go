package synth

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"

	"github.com/ncclprof/ncclprof/internal/jsonscan"
)

// Shape is a kind of torch.profiler trace the benchmark measures and the real traces in the
// tests do not cover: how many kernels per NCCL kernel, memory events, the ROCm runtime, and
// the time format of each PyTorch era.
type Shape struct {
	Name string
	// KernelsPerNCCL: one NCCL collective per this many kernels.
	KernelsPerNCCL int
	// MemoryPerOp: [memory] instant events per CPU operator (profile_memory=True).
	MemoryPerOp int
	// ROCm: hipLaunchKernel / hipExtLaunchKernel calls and RCCL's kernel names.
	ROCm bool
	// Era: "relative" (baseTimeNanoseconds + µs with ns decimals, PyTorch ≥ 2.4), "absolute"
	// (integer Unix µs, ≤ 2.3) or "ns" (displayTimeUnit "ns", as Kineto writes for ns clocks).
	Era string
	// Kernels: kernels in the unit the benchmark repeats (20,000 when 0).
	Kernels int
	// LegacyNames: NCCL 2.9–2.18's kernel names (ncclKernel_AllReduce_RING_LL_Sum_float), as
	// a V100-era job and RCCL write them.
	LegacyNames bool
	// AnnotationComms: the collective's args (count, dtype, process group) only on its
	// record_param_comms, not on the kernel, as PyTorch wrote them before 2023-10.
	AnnotationComms bool
	// NCCLCount: elements of each collective (1 Mi when 0); small collectives run short kernels.
	NCCLCount int
	// ProcessGroups: collectives cycle over this many process groups (one when 0), each on a
	// communication stream of its own; ComputeStreams: compute kernels cycle over this many.
	ProcessGroups, ComputeStreams int
	// StackDepth: python_function events (with_stack=True) nested around each operator.
	StackDepth int
	// JitterNs lengthens each collective's CPU side by a deterministic 0 to JitterNs ns, as a
	// real launch loop varies: strictly periodic launches let any whole number of periods
	// line the plugin's launches up with Kineto's.
	JitterNs int64
}

// Shapes are the synthesized shapes, by name.
var Shapes = map[string]Shape{
	"kernel-heavy": {Name: "kernel-heavy", KernelsPerNCCL: 200, Era: "relative"},
	"nccl-heavy":   {Name: "nccl-heavy", KernelsPerNCCL: 10, Era: "relative"},
	"memory":       {Name: "memory", KernelsPerNCCL: 50, MemoryPerOp: 4, Era: "relative"},
	"rocm":         {Name: "rocm", KernelsPerNCCL: 20, ROCm: true, Era: "relative"},
	"absolute-us":  {Name: "absolute-us", KernelsPerNCCL: 20, Era: "absolute"},
	"ns":           {Name: "ns", KernelsPerNCCL: 20, Era: "ns"},
	// A V100 data-parallel job with profile_memory (the shape of issue 26): many [memory]
	// events, ~2,000 NCCL kernels per unit, one process group, integer µs, NCCL 2.1x names,
	// the collective's args on record_param_comms only.
	"v100-memory": {Name: "v100-memory", KernelsPerNCCL: 20, MemoryPerOp: 12, Era: "absolute", Kernels: 40000, LegacyNames: true, AnnotationComms: true},
	// Thousands of small NCCL kernels per step: every other kernel is a 2,048-element collective.
	"small-nccl": {Name: "small-nccl", KernelsPerNCCL: 2, NCCLCount: 2048, Era: "relative"},
	// Many process groups and streams (FSDP/pipeline jobs): 64 groups, 8 compute streams.
	"many-pg": {Name: "many-pg", KernelsPerNCCL: 10, ProcessGroups: 64, ComputeStreams: 8, Era: "relative"},
	// with_stack=True: 40 Python frames around every operator.
	"stack": {Name: "stack", KernelsPerNCCL: 50, StackDepth: 40, Era: "relative"},
}

// UnitKernels is the number of kernels of the unit the benchmark repeats to its size.
func (sh Shape) UnitKernels() int {
	if sh.Kernels > 0 {
		return sh.Kernels
	}
	return 20000
}

// ShapeNames lists the synthesized shapes in a fixed order.
func ShapeNames() []string { return slices.Sorted(maps.Keys(Shapes)) }

// KinetoShape writes a Kineto trace of the shape with about `kernels` kernels: one rank's
// training steps with CPU operators launching kernels on a compute stream and NCCL collectives
// (record_param_comms, nccl:* annotation, the launch, the kernel with its collective args) on
// a communication stream, with ac2g flows. Deterministic: the same shape and size give the
// same bytes. PluginFromKineto derives its plugin trace.
func KinetoShape(path string, sh Shape, kernels int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	g := &shapeGen{sh: sh, w: w, pid: 4242, tid: 4242, base: 1711964646000000000, gpuFree: map[int]int64{}}
	g.header()
	t := int64(1_000_000_000) // 1 s after the base
	for k := 0; k < kernels; {
		t, k = g.op(t, k)
	}
	g.footer()
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

type shapeGen struct {
	sh        Shape
	w         *bufio.Writer
	pid, tid  int64
	base      int64
	corr      int64
	ext       int64
	first     bool
	gpuFree   map[int]int64 // when each stream is next free
	allocated int64
	pyID      int64 // the last python_function's Python id
}

const (
	computeStream = 7
	commStream    = 20
)

func (g *shapeGen) header() {
	fmt.Fprintf(g.w, "{\n  \"schemaVersion\": 1,\n  \"distributedInfo\": {\"backend\": \"nccl\", \"rank\": 0, \"world_size\": 8},\n")
	switch g.sh.Era {
	case "relative":
		fmt.Fprintf(g.w, "  \"displayTimeUnit\": \"ms\",\n  \"baseTimeNanoseconds\": %d,\n", g.base)
	case "ns":
		fmt.Fprintf(g.w, "  \"displayTimeUnit\": \"ns\",\n  \"baseTimeNanoseconds\": %d,\n", g.base)
	}
	g.w.WriteString("  \"traceEvents\": [\n")
	g.first = true
	g.event(fmt.Sprintf(`{"name": "process_name", "ph": "M", "ts": 0, "pid": %d, "tid": 0, "args": {"name": "python"}}`, g.pid))
	g.event(`{"name": "process_name", "ph": "M", "ts": 0, "pid": 0, "tid": 0, "args": {"name": "python"}}`)
	g.event(`{"name": "process_labels", "ph": "M", "ts": 0, "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}}`)
}

func (g *shapeGen) footer() {
	g.w.WriteString("\n  ],\n  \"traceName\": \"synthesized-" + g.sh.Name + ".json\"\n}\n")
}

func (g *shapeGen) event(s string) {
	if !g.first {
		g.w.WriteString(",\n  ")
	} else {
		g.w.WriteString("  ")
	}
	g.first = false
	g.w.WriteString(s)
}

// ts writes a time (ns since the base) in the shape's era.
func (g *shapeGen) ts(ns int64) string {
	if g.sh.Era == "absolute" {
		return strconv.FormatInt((g.base+ns)/1000, 10)
	}
	return string(jsonscan.AppendMicros(nil, ns))
}

func (g *shapeGen) dur(ns int64) string {
	if g.sh.Era == "absolute" {
		return strconv.FormatInt(max(ns/1000, 1), 10)
	}
	return string(jsonscan.AppendMicros(nil, ns))
}

var shapeOps = []string{"aten::linear", "aten::layer_norm", "aten::gelu", "aten::softmax", "aten::add_"}

// op writes one CPU operator at t with the kernels it launches; every KernelsPerNCCL-th
// kernel is a collective instead. It returns the next free time and kernel count.
func (g *shapeGen) op(t int64, k int) (int64, int) {
	g.ext++
	name := shapeOps[int(g.ext)%len(shapeOps)]
	nccl := g.sh.KernelsPerNCCL > 0 && (k+1)%g.sh.KernelsPerNCCL == 0
	if nccl {
		return g.collective(t, k)
	}
	launches := 3
	dur := int64(launches)*7_000 + 4_321
	g.stack(t, dur)
	g.event(fmt.Sprintf(`{"ph": "X", "cat": "cpu_op", "name": %q, "pid": %d, "tid": %d, "ts": %s, "dur": %s, "args": {"External id": %d, "Record function id": 0, "Ev Idx": %d}}`,
		name, g.pid, g.tid, g.ts(t), g.dur(dur), g.ext, g.ext))
	g.memory(t + 500)
	stream := computeStream
	if g.sh.ComputeStreams > 1 {
		stream += int(g.ext) % g.sh.ComputeStreams
	}
	for i := 0; i < launches && k < 1<<62; i++ {
		at := t + 1_000 + int64(i)*7_000
		g.launch(at, fmt.Sprintf("void at::native::elementwise_kernel<128, 4>(int, %s_%d)", name, i), stream, "", 18_765)
		k++
		if g.sh.KernelsPerNCCL > 0 && (k+1)%g.sh.KernelsPerNCCL == 0 {
			break
		}
	}
	return t + dur + 2_137, k
}

// stack writes the Python frames (with_stack) around an operator at t lasting dur: frame i
// of StackDepth encloses frame i+1 by 25 ns each side, so the outermost reaches 1 µs (40
// frames) beyond the operator and stays clear of the next one, 2.1 µs later.
func (g *shapeGen) stack(t, dur int64) {
	parent := int64(0)
	for i := 0; i < g.sh.StackDepth; i++ {
		g.pyID++
		pad := int64(g.sh.StackDepth-i) * 25
		g.event(fmt.Sprintf(`{"ph": "X", "cat": "python_function", "name": "%s", "pid": %d, "tid": %d, "ts": %s, "dur": %s, "args": {"Python parent id": %d, "Python id": %d, "Python thread": 0}}`,
			pyFrames[i%len(pyFrames)], g.pid, g.tid, g.ts(t-pad), g.dur(dur+2*pad), parent, g.pyID))
		parent = g.pyID
	}
}

var pyFrames = []string{
	"train.py(212): <module>",
	"train.py(187): main",
	"train.py(143): train_one_epoch",
	"torch/nn/modules/module.py(1736): _wrapped_call_impl",
	"torch/nn/modules/module.py(1747): _call_impl",
	"torch/nn/parallel/distributed.py(1643): forward",
	"torch/nn/parallel/distributed.py(1454): _run_ddp_forward",
	"transformers/models/llama/modeling_llama.py(1189): forward",
	"transformers/models/llama/modeling_llama.py(977): forward",
	"transformers/models/llama/modeling_llama.py(718): forward",
	"torch/nn/modules/linear.py(125): forward",
	"<built-in function linear>",
}

// memory writes the allocator's instant events of an operator (profile_memory).
func (g *shapeGen) memory(t int64) {
	for i := 0; i < g.sh.MemoryPerOp; i++ {
		bytes := int64(4096 << (i % 8))
		if i%2 == 1 {
			bytes = -bytes
		}
		g.allocated += bytes
		g.event(fmt.Sprintf(`{"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": %d, "tid": %d, "ts": %s, "args": {"Total Reserved": 2147483648, "Total Allocated": %d, "Bytes": %d, "Addr": %d, "Device Id": 0, "Device Type": 1}}`,
			g.pid, g.tid, g.ts(t+int64(i)*100), 1<<30+g.allocated, bytes, 139852000000000+g.ext*4096))
	}
}

// collective writes record_param_comms, its nccl:* annotation and the NCCL kernel's launch,
// on process group ext mod ProcessGroups (group 0 on commStream, group p on commStream+80+p).
func (g *shapeGen) collective(t int64, k int) (int64, int) {
	n := 1 << 20
	kdur := int64(95_432)
	if g.sh.NCCLCount > 0 {
		n, kdur = g.sh.NCCLCount, 12_345
	}
	pg, stream, desc := 0, commStream, "default_pg"
	if g.sh.ProcessGroups > 1 {
		if pg = int(g.ext) % g.sh.ProcessGroups; pg > 0 {
			stream, desc = commStream+80+pg, fmt.Sprintf("pg_%d", pg)
		}
	}
	dur := int64(31_234)
	if g.sh.JitterNs > 0 {
		dur += int64(mix(uint64(g.ext)) % uint64(g.sh.JitterNs+1))
	}
	args := fmt.Sprintf(`"Collective name": "allreduce", "In msg nelems": %d, "Out msg nelems": %d, "Group size": 8, "dtype": "Float", "In split size": "[]", "Out split size": "[]", "Process Group Name": "%d", "Process Group Description": "%s", "Process Group Ranks": "[0, 1, 2, 3, 4, 5, 6, 7]"`, n, n, pg, desc)
	g.event(fmt.Sprintf(`{"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": %d, "tid": %d, "ts": %s, "dur": %s, "args": {"External id": %d, "Record function id": 0, %s}}`,
		g.pid, g.tid, g.ts(t), g.dur(dur), g.ext, args))
	g.event(fmt.Sprintf(`{"ph": "X", "cat": "user_annotation", "name": "nccl:all_reduce", "pid": %d, "tid": %d, "ts": %s, "dur": %s, "args": {"External id": %d, "Record function id": 0}}`,
		g.pid, g.tid, g.ts(t+1_000), g.dur(dur-2_000), g.ext))
	kname := "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
	if g.sh.ROCm || g.sh.LegacyNames {
		kname = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)" // RCCL keeps NCCL 2.9–2.18's names
	}
	kargs := ", " + args
	if g.sh.AnnotationComms {
		kargs = ""
	}
	g.launch(t+3_000, kname, stream, kargs, kdur)
	return t + dur + 1_873, k + 1
}

// launch writes a launch call at t, its kernel of kdur on the stream, and the ac2g flow
// between them.
func (g *shapeGen) launch(t int64, kernel string, stream int, kargs string, kdur int64) {
	g.corr++
	call := "cudaLaunchKernel"
	if g.sh.ROCm {
		call = "hipLaunchKernel"
		if stream != computeStream {
			call = "hipExtLaunchKernel"
		}
	}
	callDur := int64(4_567)
	g.event(fmt.Sprintf(`{"ph": "X", "cat": "cuda_runtime", "name": %q, "pid": %d, "tid": %d, "ts": %s, "dur": %s, "args": {"External id": %d, "cbid": 211, "correlation": %d}}`,
		call, g.pid, g.tid, g.ts(t), g.dur(callDur), g.ext, g.corr))
	g.event(fmt.Sprintf(`{"ph": "s", "id": %d, "pid": %d, "tid": %d, "ts": %s, "cat": "ac2g", "name": "ac2g"}`, g.corr, g.pid, g.tid, g.ts(t)))
	start := max(t+9_000, g.gpuFree[stream]+1_000)
	g.gpuFree[stream] = start + kdur
	device := fmt.Sprintf(`"External id": %d, "queued": 0, "device": 0, "context": 1, "stream": %d, "correlation": %d, "registers per thread": 32, "shared memory": 0, "blocks per SM": 12.5, "warps per SM": 50, "grid": [1024, 1, 1], "block": [128, 1, 1], "est. achieved occupancy %%": 100`,
		g.ext, stream, g.corr)
	g.event(fmt.Sprintf(`{"ph": "X", "cat": "kernel", "name": %q, "pid": 0, "tid": %d, "ts": %s, "dur": %s, "args": {%s%s}}`,
		kernel, stream, g.ts(start), g.dur(kdur), device, kargs))
	g.event(fmt.Sprintf(`{"ph": "f", "id": %d, "pid": 0, "tid": %d, "ts": %s, "cat": "ac2g", "name": "ac2g", "bp": "e"}`, g.corr, stream, g.ts(start)))
}
