package why

import (
	"fmt"
	"sort"
	"strings"

	"github.com/ncclprof/ncclprof/internal/commops"
	"github.com/ncclprof/ncclprof/internal/quantile"
	"github.com/ncclprof/ncclprof/internal/skew"
)

// startTolNs: a kernel that starts within this of another kernel's end on the same GPU started
// because that one ended (a GPU's launch latency is a few µs).
const startTolNs = 20_000

// gpuSide explains a GPU-side arrival that was late while the CPU called on time: what the NCCL
// kernel waited for on its GPU.
func (a *analyzer) gpuSide(r Row, e *skew.EachRow, all []skew.EachRow) Row {
	i := e.Op()
	act := a.activity(i)
	if act == nil || !act.Kineto() {
		return unknown(r, fmt.Sprintf("no Kineto trace for rank %d: its GPU started the collective %s late while its CPU called on time, and what ran before it on the GPU is not recorded (merge its torch.profiler trace: ncclmerge merge)", r.Rank, fmtNs(r.LateNs)))
	}
	o := &a.s.Ops[i]
	d := act.digestOf(o)
	if !d.blocked {
		return unknown(r, fmt.Sprintf("rank %d's GPU was idle for up to %s before the collective's kernel started %s late, and nothing recorded on it ended just before: the kernel waited for something the trace does not show", r.Rank, fmtNs(o.GPUArrive-a.gpuFrom(i)), fmtNs(r.LateNs)))
	}
	if d.blocker.nccl || d.blocker.tid != act.compute {
		return a.dependency(r, i, act, d.blocker, others(e, all))
	}
	return a.compute(r, i, act, others(e, all))
}

// gpuFrom is where operation i's GPU interval starts (gpuFrom of it and its previous operation).
func (a *analyzer) gpuFrom(i int32) int64 {
	var p *commops.Op
	if j := a.prev(i); j >= 0 {
		p = &a.s.Ops[j]
	}
	return gpuFrom(&a.s.Ops[i], p)
}

// compute names the compute kernels that ran longer before the collective than on the median
// rank, with the operators that launched them.
func (a *analyzer) compute(r Row, i int32, act *activity, peers []int32) Row {
	mine := a.kernelTime(i)
	theirs := map[string][]int64{}
	var totals []int64
	for _, p := range peers {
		t := a.kernelTime(p)
		var sum int64
		for name, ns := range t {
			theirs[name] = append(theirs[name], ns)
			sum += ns
		}
		totals = append(totals, sum)
	}
	var sum int64
	type excess struct {
		name    string
		ns, med int64
	}
	var ex []excess
	for name, ns := range mine {
		sum += ns
		med := medianPadded(theirs[name], len(peers))
		if ns > med {
			ex = append(ex, excess{name, ns, med})
		}
	}
	sort.Slice(ex, func(x, y int) bool { return ex[x].ns-ex[x].med > ex[y].ns-ex[y].med })
	medTotal := medianPadded(totals, len(peers))
	if float64(sum-medTotal) < float64(r.LateNs)*a.opt.Explained {
		return unknown(r, fmt.Sprintf("rank %d's GPU started the collective %s late, after compute kernels that took %s against the median rank's %s: not enough to explain it", r.Rank, fmtNs(r.LateNs), fmtNs(sum), fmtNs(medTotal)))
	}
	r.Cause = GPUCompute
	r.Evidence = append(r.Evidence, Evidence{What: "compute kernels before the collective", Ns: sum, MedianNs: medTotal})
	var named []string
	for _, x := range ex[:min(len(ex), 3)] {
		op := a.launcher(i, x.name)
		r.Evidence = append(r.Evidence, Evidence{What: "kernel " + x.name, Ns: x.ns, MedianNs: x.med, Detail: "launched by " + op})
		named = append(named, fmt.Sprintf("%s (launched by %s) %s against %s", shortName(x.name), op, fmtNs(x.ns), fmtNs(x.med)))
	}
	r.Summary = fmt.Sprintf("GPU compute: its CPU called on time, but its kernels before the collective ran %s longer than the median rank's: %s",
		fmtNs(sum-medTotal), strings.Join(named, "; "))
	return r
}

// medianPadded is the median of v with zeros for the n − len(v) ranks that had none.
func medianPadded(v []int64, n int) int64 {
	padded := make([]int64, max(n, len(v)))
	copy(padded, v)
	if len(padded) == 0 {
		return 0
	}
	return quantile.MedianInPlace(padded)
}

// kernelTime is the time each non-NCCL kernel name ran on the compute stream of operation i's
// rank in its GPU interval.
func (a *analyzer) kernelTime(i int32) map[string]int64 {
	act, d := a.digest(i)
	if act == nil {
		return map[string]int64{}
	}
	return act.times(d.kernelsAt, d.kernelsN)
}

// launcher names the CPU operator that launched the first kernel of that name in operation i's
// GPU interval: the innermost cpu_op around the runtime call of the kernel's correlation.
func (a *analyzer) launcher(i int32, name string) string {
	act, d := a.digest(i)
	return act.launcherOf(d, name)
}

// dependency says what the collective's kernel waited for on the GPU: another collective's kernel
// or another stream's work, and how long it sat queued after its launch.
func (a *analyzer) dependency(r Row, i int32, act *activity, b span, peers []int32) Row {
	queued := func(j int32) int64 {
		if _, d := a.digest(j); d != nil {
			return d.queued
		}
		return 0
	}
	mine, med := queued(i), medianOf(peers, queued)
	what := "another stream's work"
	if b.nccl {
		what = "another collective's kernel"
	}
	r.Cause = Dependency
	r.Evidence = []Evidence{
		{What: "kernel queued after its launch", Ns: mine, MedianNs: med},
		{What: fmt.Sprintf("waited for %s on stream %d", act.names[b.name], b.tid), Ns: b.end - b.start,
			Detail: fmt.Sprintf("ended %s before the collective's kernel started", fmtNs(a.s.Ops[i].GPUArrive-b.end))},
	}
	r.Summary = fmt.Sprintf("waiting on %s: its kernel sat %s queued after its launch (median rank %s) until %s on stream %d ended (it ran %s)",
		what, fmtNs(mine), fmtNs(med), shortName(act.names[b.name]), b.tid, fmtNs(b.end-b.start))
	return r
}

// shortName cuts a long C++ kernel name before its arguments: "void at::native::{anon}::
// CatArrayBatchedCopy…"; other names (operators, Python) stay whole.
func shortName(s string) string {
	if len(s) <= 48 || !strings.Contains(s, "::") && !strings.HasPrefix(s, "void ") {
		return s
	}
	t := strings.ReplaceAll(s, "(anonymous namespace)", "{anon}")
	if i := strings.IndexAny(t, "(<"); i > 0 {
		return t[:i] + "…"
	}
	return t[:48] + "…"
}
