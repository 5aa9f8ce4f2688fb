// Package collective knows what an NCCL operation is called in each place it shows up (NCCL's
// function and datatype names, its kernel names in every NCCL era, PyTorch's c10d names and
// dtypes) and how nccl-tests defines its size and bandwidth.
package collective

import (
	"cmp"
	"strings"
)

// Function names as NCCL's profiler reports them (func of CollApi/Coll, P2p).
var funcs = []string{
	// Longer names first, so that prefix matching picks ReduceScatter over Reduce.
	"ReduceScatter", "AllReduce", "AllGather", "AlltoAll", "AllToAll", "Broadcast", "SendRecv",
	"Reduce", "Gather", "Scatter", "Generic", "Send", "Recv",
}

// Kernel is what an NCCL kernel's name says about it. The algorithm and protocol in a name are
// the kernel's specialization, not necessarily what ran (NCCL dispatches inside the kernel);
// the plugin's Coll event is authoritative for those.
type Kernel struct {
	Func, Algo, Proto string
	// Datatype is NCCL's canonical name of the type the kernel is specialized for ("" when
	// the name says none).
	Datatype string
}

// kernelTypes are the datatype words of kernel names (2.9+: "float", "half", "int8_t"…;
// 2.19+: "f32", "bf16"…; ≤ 2.8: "f32", "i8"…).
var kernelTypes = map[string]string{
	"int8_t": "ncclInt8", "i8": "ncclInt8", "uint8_t": "ncclUint8", "u8": "ncclUint8",
	"int32_t": "ncclInt32", "i32": "ncclInt32", "uint32_t": "ncclUint32", "u32": "ncclUint32",
	"int64_t": "ncclInt64", "i64": "ncclInt64", "uint64_t": "ncclUint64", "u64": "ncclUint64",
	"half": "ncclFloat16", "f16": "ncclFloat16", "float": "ncclFloat32", "f32": "ncclFloat32",
	"double": "ncclFloat64", "f64": "ncclFloat64", "__nv_bfloat16": "ncclBfloat16", "bf16": "ncclBfloat16",
	"__nv_fp8_e4m3": "ncclFloat8e4m3", "f8e4m3": "ncclFloat8e4m3", "__nv_fp8_e5m2": "ncclFloat8e5m2", "f8e5m2": "ncclFloat8e5m2",
}

// Reduces reports whether a function reduces values (its kernels are specialized for the
// datatype); the others copy bytes.
func Reduces(fn string) bool {
	switch NormFunc(fn) {
	case "AllReduce", "Reduce", "ReduceScatter":
		return true
	}
	return false
}

// ParseKernel reads an NCCL kernel name of any era:
//
//	ncclAllReduceRingLLKernel_sum_f32(ncclColl)                              NCCL ≤ 2.8
//	ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, …)  2.9–2.18
//	ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)  2.19+
func ParseKernel(name string) (Kernel, bool) {
	if p := strings.IndexByte(name, '('); p >= 0 {
		name = name[:p]
	}
	var rest string
	switch {
	case strings.HasPrefix(name, "ncclDevKernel_"):
		rest = name[len("ncclDevKernel_"):]
	case strings.HasPrefix(name, "ncclKernel_"):
		rest = name[len("ncclKernel_"):]
	case strings.HasPrefix(name, "nccl"):
		k := strings.Index(name, "Kernel_")
		if k < 0 {
			return Kernel{}, false
		}
		return parseOldKernel(name[4:k], oldKernelType(name[k+len("Kernel_"):]))
	default:
		return Kernel{}, false
	}
	parts := strings.Split(rest, "_")
	k := Kernel{Func: parts[0]}
	if !knownFunc(k.Func) {
		return Kernel{}, false
	}
	k.Datatype = typeWord(rest)
	for _, p := range parts[1:] {
		switch p {
		case "RING", "TREE", "COLLNET", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT":
			k.Algo = p
		case "LL", "LL128", "SIMPLE":
			k.Proto = p
		}
	}
	return k, true
}

// parseOldKernel reads the NCCL ≤ 2.8 form "AllReduceRingLL".
func parseOldKernel(s, oldType string) (Kernel, bool) {
	for _, f := range funcs {
		if strings.HasPrefix(s, f) {
			k := Kernel{Func: f, Datatype: kernelTypes[oldType]}
			rest := s[len(f):]
			for _, a := range []string{"CollNet", "Ring", "Tree"} {
				if strings.HasPrefix(rest, a) {
					k.Algo = strings.ToUpper(a)
					rest = rest[len(a):]
				}
			}
			switch rest {
			case "LL", "LL128":
				k.Proto = rest
			case "Simple":
				k.Proto = "SIMPLE"
			}
			return k, true
		}
	}
	return Kernel{}, false
}

// typeWord finds a datatype word between underscores in a kernel name's tail (some words,
// like int8_t, hold underscores themselves).
func typeWord(rest string) string {
	padded := "_" + rest + "_"
	for word, dt := range kernelTypes {
		if strings.Contains(padded, "_"+word+"_") {
			return dt
		}
	}
	return ""
}

// oldKernelType is the datatype word of an NCCL ≤ 2.8 name's tail ("sum_f32").
func oldKernelType(tail string) string {
	if i := strings.LastIndexByte(tail, '_'); i >= 0 {
		return tail[i+1:]
	}
	return tail
}

func knownFunc(f string) bool {
	for _, g := range funcs {
		if f == g {
			return true
		}
	}
	return false
}

// NormFunc folds the spellings of a function name (AllToAll vs AlltoAll).
func NormFunc(f string) string {
	if f == "AllToAll" {
		return "AlltoAll"
	}
	return f
}

// KernelRuns reports whether a kernel specialized for kernelFunc can carry an operation of
// function op: SendRecv kernels run Send, Recv and the P2P expansions of AlltoAll, Gather and
// Scatter; Generic kernels run anything (mixed groups, NCCL 2.19+).
func KernelRuns(kernelFunc, op string) bool {
	kernelFunc, op = NormFunc(kernelFunc), NormFunc(op)
	switch {
	case kernelFunc == op, kernelFunc == "Generic":
		return true
	case kernelFunc == "SendRecv":
		return op == "Send" || op == "Recv" || op == "SendRecv" || op == "AlltoAll" || op == "Gather" || op == "Scatter"
	}
	return false
}

// FromC10d maps PyTorch's c10d collective name (record_param_comms "Collective name") to the
// NCCL function that runs it. ok is false for names that launch no NCCL kernel ("wait") or
// that are unknown.
func FromC10d(name string) (string, bool) {
	n := strings.TrimPrefix(strings.ToLower(name), "_")
	switch {
	case n == "wait" || n == "":
		return "", false
	case strings.HasPrefix(n, "allreduce"), strings.HasPrefix(n, "all_reduce"), n == "barrier":
		return "AllReduce", true
	case strings.HasPrefix(n, "allgather"), strings.HasPrefix(n, "all_gather"):
		return "AllGather", true
	case strings.HasPrefix(n, "reduce_scatter"), strings.HasPrefix(n, "reducescatter"):
		return "ReduceScatter", true
	case strings.HasPrefix(n, "alltoall"), strings.HasPrefix(n, "all_to_all"):
		return "AlltoAll", true
	case strings.HasPrefix(n, "broadcast"):
		return "Broadcast", true
	case strings.HasPrefix(n, "reduce"):
		return "Reduce", true
	case n == "send", n == "isend":
		return "Send", true
	case n == "recv", n == "irecv", n == "recv_any_source":
		return "Recv", true
	case strings.HasPrefix(n, "gather"):
		return "Gather", true
	case strings.HasPrefix(n, "scatter"):
		return "Scatter", true
	}
	return "", false
}

// Datatypes: NCCL's canonical names and sizes, with their aliases and PyTorch's names.
var dtypes = map[string]struct {
	canon string
	size  int
}{
	"ncclInt8": {"ncclInt8", 1}, "ncclChar": {"ncclInt8", 1},
	"ncclUint8": {"ncclUint8", 1},
	"ncclInt32": {"ncclInt32", 4}, "ncclInt": {"ncclInt32", 4},
	"ncclUint32": {"ncclUint32", 4},
	"ncclInt64":  {"ncclInt64", 8}, "ncclUint64": {"ncclUint64", 8},
	"ncclFloat16": {"ncclFloat16", 2}, "ncclHalf": {"ncclFloat16", 2},
	"ncclFloat32": {"ncclFloat32", 4}, "ncclFloat": {"ncclFloat32", 4},
	"ncclFloat64": {"ncclFloat64", 8}, "ncclDouble": {"ncclFloat64", 8},
	"ncclBfloat16":   {"ncclBfloat16", 2},
	"ncclFloat8e4m3": {"ncclFloat8e4m3", 1}, "ncclFloat8e5m2": {"ncclFloat8e5m2", 1},
	// PyTorch (c10::toString(ScalarType)).
	"Float": {"ncclFloat32", 4}, "Double": {"ncclFloat64", 8}, "Half": {"ncclFloat16", 2},
	"BFloat16": {"ncclBfloat16", 2}, "Int": {"ncclInt32", 4}, "Long": {"ncclInt64", 8},
	"Char": {"ncclInt8", 1}, "Byte": {"ncclUint8", 1}, "Bool": {"ncclUint8", 1},
	"UInt32": {"ncclUint32", 4}, "UInt64": {"ncclUint64", 8},
	"Float8_e4m3fn": {"ncclFloat8e4m3", 1}, "Float8_e5m2": {"ncclFloat8e5m2", 1},
}

// Datatype returns NCCL's canonical name for a datatype written by NCCL or PyTorch, and its
// size in bytes (0 when unknown).
func Datatype(name string) (string, int) {
	if d, ok := dtypes[name]; ok {
		return d.canon, d.size
	}
	return name, 0
}

// BusFactor is nccl-tests' ratio of bus bandwidth to algorithm bandwidth for a function on n
// ranks: 2(n−1)/n for AllReduce, (n−1)/n for AllGather, ReduceScatter and AlltoAll, 1 otherwise.
func BusFactor(fn string, n int) float64 {
	if n < 1 {
		return 1
	}
	switch NormFunc(fn) {
	case "AllReduce":
		return 2 * float64(n-1) / float64(n)
	case "AllGather", "ReduceScatter", "AlltoAll":
		return float64(n-1) / float64(n)
	}
	return 1
}

// Size is nccl-tests' size of an operation in bytes: the whole buffer (count × datatype), where
// for AllGather and ReduceScatter the count NCCL takes is per rank, so the size is n times it.
func Size(fn string, count uint64, dtype string, n int) uint64 {
	_, sz := Datatype(dtype)
	if sz == 0 {
		sz = 1
	}
	b := count * uint64(sz)
	switch NormFunc(fn) {
	case "AllGather", "ReduceScatter":
		if n > 1 {
			b *= uint64(n)
		}
	}
	return b
}

// Bandwidth returns algbw = size/time and busbw = algbw × BusFactor, in GB/s (10^9 B/s).
func Bandwidth(fn string, size uint64, durNs int64, n int) (algbw, busbw float64) {
	if durNs <= 0 {
		return 0, 0
	}
	algbw = float64(size) / float64(durNs) // bytes per ns = GB/s
	return algbw, algbw * BusFactor(fn, n)
}

// Place is where a collective stands among its function's collectives on a communicator: NCCL's
// seq, whether it is one of a CUDA graph's replays, and its repeat (the n-th of its kind in a row
// with that seq). NCCL gives every replay of a captured collective the seq of the next eager one
// (2.26+, unless KernelCh is on: src/plugin/profiler.cc ncclProfilerStartTaskEvents), so a seq's
// replays come before the eager collective that shares it.
type Place struct {
	Seq    int64
	Replay bool
	Repeat int64
}

// Compare orders two places as NCCL runs them: by seq, a seq's replays before its eager
// collective, then by repeat.
func (p Place) Compare(q Place) int {
	if p.Seq != q.Seq {
		return cmp.Compare(p.Seq, q.Seq)
	}
	if p.Replay != q.Replay {
		if p.Replay {
			return -1
		}
		return 1
	}
	return cmp.Compare(p.Repeat, q.Repeat)
}

// Repeats numbers collectives that repeat a seq back to back, per key (a rank's function and
// kind: a CUDA graph's replays are counted apart from eager collectives, since NCCL starts a
// replay's events only on ranks whose part of the graph has proxy work, enqueue.cc
// ncclLaunchPrepare, hasProxyOps). The n-th of a run on every rank that sees it is the same
// collective: Place.Repeat.
type Repeats[K comparable] map[K]repeatRun

type repeatRun struct{ seq, n int64 }

// Next numbers the collective of key k just met with seq: how many of k's came with that seq
// right before it (0: the first).
func (r Repeats[K]) Next(k K, seq int64) int64 {
	run, ok := r[k]
	if ok && run.seq == seq {
		run.n++
	} else {
		run = repeatRun{seq: seq}
	}
	r[k] = run
	return run.n
}
