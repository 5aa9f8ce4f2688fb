package why

import (
	"fmt"
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
	if id, ok := act.nameID[name]; ok && act.python[id] {
		return "Python"
	}
	return "CPU operator"
}

// threadTime is what operation i's launching thread did between its previous operation's Coll
// start and its own: time per top-level slice name (clipped), and the time nothing was recorded.
func (a *analyzer) threadTime(i int32) map[string]int64 {
	act, d := a.digest(i)
	if act == nil {
		return map[string]int64{}
	}
	return act.times(d.threadAt, d.threadN)
}
