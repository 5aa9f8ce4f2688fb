package synth

import (
	"fmt"
	"sort"
	"strings"

	"github.com/ncclprof/ncclprof/internal/ptrace"
	"github.com/ncclprof/ncclprof/internal/traceevent"
	"github.com/ncclprof/ncclprof/internal/tracefile"
)

// Work is the compute a synthesized Kineto trace adds before each collective, and the causes of
// lateness planted in it (ncclmerge why's ground truth). Before every collective the launching
// thread runs one CPU operator per kernel, right after the previous collective's launch, and the
// GPU runs the kernels back to back on the compute stream, ending just before the collective's
// launch; each kernel's time varies by up to ±Jitter from collective to collective.
type Work struct {
	Kernels []WorkKernel
	Jitter  float64
	Plants  []Plant
}

// WorkKernel is one compute kernel and the CPU operator that launches it.
type WorkKernel struct {
	Op, Kernel string
	Ns         int64
}

// Causes a Plant can plant in the Kineto trace (network and a late GPU are the plugin trace's).
const (
	PlantGPUCompute = "gpu_compute" // the compute kernels before it run until its (late) kernel
	PlantDependency = "dependency"  // its kernel waits for a copy on another stream
	PlantHost       = "host"        // data loading on the launching thread delays its launch
)

// Plant is a cause planted before the collective of sequence number Seq, Ns long.
type Plant struct {
	Cause string
	Seq   int64
	Ns    int64
}

func (w *Work) plant(seq int64) (Plant, bool) {
	for _, p := range w.Plants {
		if p.Seq == seq {
			return p, true
		}
	}
	return Plant{}, false
}

// DefaultWork is a forward and backward pass of linear layers, as a small model's trace shows it.
func DefaultWork() *Work {
	return &Work{Jitter: 0.05, Kernels: []WorkKernel{
		{"aten::linear", "ampere_sgemm_128x64_tn", 400_000},
		{"aten::relu", "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2> >(int, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2>)", 60_000},
		{"aten::mm", "ampere_sgemm_128x64_nn", 500_000},
	}}
}

// WorkFrom takes the first n compute kernels of a real torch.profiler trace, with the operator
// that launched each (the innermost cpu_op around its runtime call) and its duration.
func WorkFrom(path string, n int) (*Work, error) {
	data, err := tracefile.ReadFile(path)
	if err != nil {
		return nil, err
	}
	type sp struct {
		name       string
		tid        int64
		start, end int64
	}
	var ops []sp
	calls := map[int64]sp{}
	var kernels []struct {
		sp
		corr int64
	}
	_, err = traceevent.Read(path, data, traceevent.Options{}, func(e *traceevent.Event) error {
		if e.Ph != "X" {
			return nil
		}
		s := sp{strings.Clone(e.Name), e.Tid.Num, e.Ts, e.Ts + e.Dur}
		switch e.Cat {
		case "cpu_op":
			ops = append(ops, s)
		case "cuda_runtime", "cuda_driver":
			calls[e.Arg("correlation").Int()] = s
		case "kernel":
			if !strings.HasPrefix(e.Name, "nccl") {
				kernels = append(kernels, struct {
					sp
					corr int64
				}{s, e.Arg("correlation").Int()})
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(kernels, func(i, j int) bool { return kernels[i].start < kernels[j].start })
	w := &Work{Jitter: 0.05}
	for _, k := range kernels {
		c, ok := calls[k.corr]
		if !ok {
			continue
		}
		op, at := "", int64(0)
		for _, o := range ops { // the innermost: the latest start that contains the call
			if o.tid == c.tid && o.start <= c.start && o.end >= c.end && (op == "" || o.start >= at) {
				op, at = o.name, o.start
			}
		}
		if op == "" {
			continue
		}
		w.Kernels = append(w.Kernels, WorkKernel{op, k.name, max(k.end-k.start, 1000)})
		if len(w.Kernels) == n {
			break
		}
	}
	if len(w.Kernels) == 0 {
		return nil, fmt.Errorf("%s: no compute kernel with its launching operator", path)
	}
	return w, nil
}

// copyStream is where a dependency plant's copy runs (the work's kernels run on computeStream).
const copyStream = 22

// work writes the compute before the collective launched by l (its kernel starts at gpuStart),
// with the cause planted before it if any.
func (k *kgen) work(w *Work, l *ptrace.Event, seq, gpuStart int64) {
	tid := l.Tid.Num
	p, planted := w.plant(seq)
	cpuAt, ok := k.lastLaunch[tid]
	if !ok {
		cpuAt = l.Start - 200_000 - int64(len(w.Kernels))*80_000
	}
	cpuAt += 100_000
	k.lastLaunch[tid] = l.End
	// The kernels back to back, ending 20 µs before the launch; the planted compute runs until
	// 5 µs before the collective's (late) kernel, its extra time on the first kernel.
	durs := make([]int64, len(w.Kernels))
	gpuAt := l.Start - 20_000
	for i, wk := range w.Kernels {
		durs[i] = k.jitter(wk.Ns, w.Jitter, seq, i)
		gpuAt -= durs[i]
	}
	if planted && p.Cause == PlantGPUCompute {
		durs[0] += gpuStart - 5_000 - (l.Start - 20_000)
	}
	gpuAt = max(gpuAt, k.streamEnd[computeStream]) // after the previous collective's compute
	for i, wk := range w.Kernels {
		call := k.cpuWithCall(wk.Op, "cudaLaunchKernel", tid, cpuAt)
		cpuAt += 80_000
		gpuAt = max(gpuAt, call+5_000) // a kernel runs after its launch
		k.gpuEvent("kernel", wk.Kernel, computeStream, gpuAt, durs[i])
		gpuAt += durs[i]
		k.streamEnd[computeStream] = gpuAt
	}
	if !planted {
		return
	}
	switch p.Cause {
	case PlantDependency:
		// A copy on another stream that the collective's stream waits for (cudaStreamWaitEvent).
		k.cpuWithCall("aten::copy_", "cudaMemcpyAsync", tid, cpuAt)
		k.gpuEvent("gpu_memcpy", "Memcpy DtoD (Device -> Device)", copyStream, gpuStart-3_000-p.Ns, p.Ns)
		k.cpuEvent("cuda_runtime", "cudaStreamWaitEvent", tid, l.Start-15_000, 3_000, 0)
	case PlantHost:
		k.cpuEvent("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", tid, l.Start-50_000-p.Ns, p.Ns, 0)
	}
}

// jitter varies ns by up to ±f, the same for the same (rank, collective, kernel) in every run.
func (k *kgen) jitter(ns int64, f float64, seq int64, i int) int64 {
	u := float64(mix(uint64(k.opt.Rank)<<40^uint64(seq)<<8^uint64(i))>>11) / (1 << 53)
	return ns + int64(float64(ns)*f*(2*u-1))
}

// cpuWithCall writes a CPU operator at `at` with a runtime call inside it; it returns the call's
// end (the kernel starts after it).
func (k *kgen) cpuWithCall(op, call string, tid, at int64) int64 {
	k.cpuEvent("cpu_op", op, tid, at, 60_000, 0)
	k.corr++
	k.cpuEvent("cuda_runtime", call, tid, at+20_000, 15_000, k.corr)
	return at + 35_000
}

func (k *kgen) cpuEvent(cat, name string, tid, at, dur int64, corr int) {
	corrArg := ""
	if corr != 0 {
		corrArg = fmt.Sprintf(`, "correlation": %d`, corr)
	}
	k.threads[tid] = true
	k.events = append(k.events, fmt.Sprintf(`{"ph": "X", "cat": %q, "name": %q, "pid": %d, "tid": %d, "ts": %s, "dur": %s, "args": {"External id": %d%s}}`,
		cat, name, k.t.Pid, tid, k.ts(at), k.dur(dur), k.corr, corrArg))
}

// gpuEvent writes a kernel or copy of the last runtime call (its correlation) on a stream.
func (k *kgen) gpuEvent(cat, name string, stream, at, dur int64) {
	k.streams[stream] = true
	dev := k.opt.Device
	k.events = append(k.events, fmt.Sprintf(`{"ph": "X", "cat": %q, "name": %q, "pid": %d, "tid": %d, "ts": %s, "dur": %s, "args": {"External id": %d, "device": %d, "stream": %d, "correlation": %d}}`,
		cat, name, dev, stream, k.ts(at), k.dur(dur), k.corr, dev, stream, k.corr))
}
