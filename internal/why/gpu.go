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
	nk := act.kernelAt(o.GPUArrive)
	from := a.gpuFrom(i)
	b := act.blocker(o.GPUArrive, from, nk)
	if b < 0 {
		return unknown(r, fmt.Sprintf("rank %d's GPU was idle for up to %s before the collective's kernel started %s late, and nothing recorded on it ended just before: the kernel waited for something the trace does not show", r.Rank, fmtNs(o.GPUArrive-from), fmtNs(r.LateNs)))
	}
	bk := act.kernels[b]
	if bk.nccl || bk.tid != a.computeStream(act) {
		return a.dependency(r, i, act, nk, bk, others(e, all))
	}
	return a.compute(r, i, act, others(e, all))
}

// gpuFrom is where operation i's GPU interval starts: its previous operation's GPU arrival (the
// compute before a collective overlaps the previous one's communication), else that one's Coll
// start, else its own.
func (a *analyzer) gpuFrom(i int32) int64 {
	p := a.prev(i)
	if p < 0 {
		return a.s.Ops[i].Arrive
	}
	if po := &a.s.Ops[p]; po.GPUFrom != commops.NoGPU {
		return po.GPUArrive
	}
	return a.s.Ops[p].Arrive
}

// computeStream is the stream where most of the rank's non-NCCL kernels ran (counted, not
// timed: one long copy on a side stream must not make it the compute stream).
func (a *analyzer) computeStream(act *activity) int64 {
	if s, ok := a.comp[act]; ok {
		return s
	}
	busy := map[int64]int64{}
	for _, k := range act.kernels {
		if !k.nccl {
			busy[k.tid]++
		}
	}
	best, most := int64(-1), int64(-1)
	for s, ns := range busy {
		if ns > most || ns == most && s < best {
			best, most = s, ns
		}
	}
	a.comp[act] = best
	return best
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
		op := a.launcher(act, i, x.name)
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
	act := a.activity(i)
	out := map[string]int64{}
	if act == nil {
		return out
	}
	from, to, stream := a.gpuFrom(i), a.s.Ops[i].GPUArrive, a.computeStream(act)
	for _, k := range window(act.kernels, act.longestKernel, from, to) {
		if !k.nccl && k.tid == stream {
			out[act.names[k.name]] += min(k.end, to) - max(k.start, from)
		}
	}
	return out
}

// launcher names the CPU operator that launched the first kernel of that name in operation i's
// GPU interval: the innermost cpu_op around the runtime call of the kernel's correlation.
func (a *analyzer) launcher(act *activity, i int32, name string) string {
	from, to := a.gpuFrom(i), a.s.Ops[i].GPUArrive
	for _, k := range window(act.kernels, act.longestKernel, from, to) {
		if act.names[k.name] != name || k.corr == 0 {
			continue
		}
		c, ok := act.launch(&k)
		if !ok {
			break
		}
		if op := act.enclosing(c); op >= 0 {
			return act.names[act.cpu[op].name]
		}
		return act.names[c.name]
	}
	return "(launch not recorded)"
}

// dependency says what the collective's kernel waited for on the GPU: another collective's kernel
// or another stream's work, and how long it sat queued after its launch.
func (a *analyzer) dependency(r Row, i int32, act *activity, nk int, b span, peers []int32) Row {
	queued := func(j int32) int64 {
		ac := a.activity(j)
		if ac == nil {
			return 0
		}
		o := &a.s.Ops[j]
		k := ac.kernelAt(o.GPUArrive)
		if k < 0 {
			return 0
		}
		if c, ok := ac.launch(&ac.kernels[k]); ok {
			return o.GPUArrive - c.end
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
