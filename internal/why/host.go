package why

import (
	"fmt"
	"sort"
	"strings"

	"github.com/ncclprof/ncclprof/internal/skew"
)

// gapName is the time the launching thread recorded nothing.
const gapName = "(nothing recorded)"

// hostSide explains a CPU call that reached NCCL late: what the launching thread did since the
// previous operation, against the median rank's thread.
func (a *analyzer) hostSide(r Row, e *skew.EachRow, all []skew.EachRow) Row {
	i := e.Op()
	act := a.activity(i)
	late := r.LateNs
	if e.CPUArriveNs != nil {
		late = *e.CPUArriveNs
	}
	if act == nil || !act.Kineto() {
		return unknown(r, fmt.Sprintf("no Kineto trace for rank %d: its CPU called NCCL %s late, and what its thread did before is not recorded (merge its torch.profiler trace: ncclmerge merge)", r.Rank, fmtNs(late)))
	}
	mine := a.threadTime(i)
	peers := others(e, all)
	theirs := map[string][]int64{}
	for _, p := range peers {
		for name, ns := range a.threadTime(p) {
			theirs[name] = append(theirs[name], ns)
		}
	}
	best, bestEx, bestMed := "", int64(0), int64(0)
	for name, ns := range mine {
		med := medianPadded(theirs[name], len(peers))
		if ex := ns - med; ex > bestEx || ex == bestEx && name < best {
			best, bestEx, bestMed = name, ex, med
		}
	}
	if float64(bestEx) < float64(late)*a.opt.Explained {
		return unknown(r, fmt.Sprintf("rank %d's CPU called NCCL %s late, and nothing its launching thread recorded took that much longer than on the median rank (at most %s: %s)", r.Rank, fmtNs(late), fmtNs(bestEx), best))
	}
	r.Cause = Host
	kind := hostKind(best, act)
	r.Evidence = []Evidence{{What: kind + ": " + best, Ns: mine[best], MedianNs: bestMed}}
	if best == gapName {
		r.Summary = fmt.Sprintf("host: its CPU called NCCL %s late; the launching thread recorded nothing for %s before the launch (median rank %s): a gap outside what the profiler records (data loading in a process of its own, I/O, another thread holding the GIL)",
			fmtNs(late), fmtNs(mine[best]), fmtNs(bestMed))
		return r
	}
	r.Summary = fmt.Sprintf("host: its CPU called NCCL %s late; the launching thread was busy in %s (%s) for %s before the launch, against %s on the median rank",
		fmtNs(late), kind, best, fmtNs(mine[best]), fmtNs(bestMed))
	return r
}

// hostKind sorts what a thread did into what a person fixes differently.
func hostKind(name string, act *activity) string {
	l := strings.ToLower(name)
	switch {
	case name == gapName:
		return "a gap"
	case strings.Contains(l, "dataloader") || strings.Contains(l, "data_loader"):
		return "data loading"
	case strings.Contains(l, "synchronize") || strings.Contains(l, "aten::item") || strings.Contains(l, "_local_scalar_dense") || strings.Contains(l, "wait"):
		return "synchronisation"
	}
	if id, ok := act.nameID[name]; ok {
		for _, c := range act.cpu {
			if c.name == id && c.python {
				return "Python"
			}
		}
	}
	return "CPU operator"
}

// threadTime is what operation i's launching thread did between its previous operation's Coll
// start and its own: time per top-level slice name (clipped), and the time nothing was recorded.
func (a *analyzer) threadTime(i int32) map[string]int64 {
	act := a.activity(i)
	out := map[string]int64{}
	if act == nil {
		return out
	}
	o := &a.s.Ops[i]
	from := o.Arrive
	if p := a.prev(i); p >= 0 {
		from = a.s.Ops[p].Arrive
	}
	to, tid := o.Arrive, a.launchThread(act, i)
	covered, end := int64(0), from
	for _, s := range window(act.cpu, act.longestCPU, from, to) {
		if s.tid != tid || s.start < end && s.end <= end {
			continue // another thread, or nested in what is counted
		}
		st, en := max(s.start, end, from), min(s.end, to)
		if en <= st {
			continue
		}
		out[act.names[s.name]] += en - st
		covered += en - st
		end = en
	}
	out[gapName] = to - from - covered
	return out
}

// launchThread is the thread that launched operation i's kernel (its runtime call), else the
// thread with the most CPU operators.
func (a *analyzer) launchThread(act *activity, i int32) int64 {
	if k := act.kernelAt(a.s.Ops[i].GPUArrive); k >= 0 {
		if c, ok := act.launch(&act.kernels[k]); ok {
			return c.tid
		}
	}
	n := map[int64]int{}
	for _, c := range act.cpu {
		n[c.tid]++
	}
	tids := make([]int64, 0, len(n))
	for t := range n {
		tids = append(tids, t)
	}
	sort.Slice(tids, func(x, y int) bool { return n[tids[x]] > n[tids[y]] || n[tids[x]] == n[tids[y]] && tids[x] < tids[y] })
	if len(tids) == 0 {
		return -1
	}
	return tids[0]
}
