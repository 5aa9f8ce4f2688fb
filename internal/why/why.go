// Package why names the cause of each late arrival that skew finds, and of the slowest
// collectives, from both sides of a merged trace: torch.profiler's CPU and GPU activity of every
// rank, and the plugin's operations and transfers. For a late arrival it compares the late rank's
// interval since its previous NCCL operation with the other ranks' intervals (their median):
//
//   - gpu_compute: the GPU-side arrival was late while the CPU called on time, and the kernel
//     started when a compute kernel before it ended: the compute kernels ran longer (which, by
//     how much, launched by which operator);
//   - dependency: the same, but what it waited for was another collective's kernel or another
//     stream's work (the kernel sat queued after its launch);
//   - host: the CPU called NCCL late: the launching thread was busy elsewhere or idle (operators,
//     data loading, Python, synchronisation, a gap with nothing recorded);
//   - network: a collective whose transfers took far longer than usual: the link whose send
//     bandwidth fell furthest below that link's usual, against the other links;
//   - unknown: what was missing to decide (no Kineto trace for the rank, a sampled trace, clocks
//     aligned too loosely for a gap this small, nothing recorded that explains it).
//
// A cause is named only when what it points at explains at least half of the lateness.
package why

import (
	"fmt"
	"sort"

	"github.com/ncclprof/ncclprof/internal/commops"
	"github.com/ncclprof/ncclprof/internal/quantile"
	"github.com/ncclprof/ncclprof/internal/skew"
)

// Causes, as JSON and the table name them.
const (
	GPUCompute = "gpu_compute"
	Dependency = "dependency"
	Host       = "host"
	Network    = "network"
	Unknown    = "unknown"
)

// Options tune the analysis.
type Options struct {
	// Skew finds the late arrivals (its Each is set by Analyze).
	Skew skew.Options
	// Explained: a cause is named when its excess over the median rank is at least this share of
	// the lateness.
	Explained float64
	// SlowFactor: a collective is slow when its longest transfer took more than SlowFactor × the
	// usual for its (communicator, function, size), and more than median + SlowK·MAD; the link
	// named ran below 1/SlowFactor of its usual bandwidth.
	SlowFactor, SlowK float64
}

// Defaults are the thresholds ncclmerge why uses.
var Defaults = Options{Skew: skew.Defaults, Explained: 0.5, SlowFactor: 2, SlowK: 5}

// Row is one answer: a late arrival, or a slow collective, and its cause.
type Row struct {
	Rank       int    `json:"rank"`
	GlobalRank int    `json:"global_rank"`
	Comm       string `json:"comm"`
	Func       string `json:"func"`
	Seq        int64  `json:"seq"`
	// Repeat and GraphReplay tell apart collectives that share a seq (a CUDA graph's replays:
	// commops.Op).
	Repeat      int32  `json:"repeat,omitempty"`
	GraphReplay bool   `json:"graph_replay,omitempty"`
	Step        string `json:"step,omitempty"`
	// LateNs: how late it arrived after the collective's median arrival (Arrival "gpu" or
	// "cpu"), or for a slow collective (Arrival "") how much longer its slowest transfer took
	// than usual.
	LateNs  int64  `json:"late_ns"`
	Arrival string `json:"arrival,omitempty"`
	Cause   string `json:"cause"`
	// CarriedFrom: the seq of the rank's previous operation, when the lateness was already there
	// and the cause is that one's.
	CarriedFrom *int64 `json:"carried_from_seq,omitempty"`
	// Summary says the cause in a sentence with its numbers; Evidence gives them one by one.
	Summary  string     `json:"summary"`
	Evidence []Evidence `json:"evidence,omitempty"`
	// Where the operation is in its trace, as skew and report show it.
	File string  `json:"file"`
	Pid  int64   `json:"pid"`
	Tid  int64   `json:"tid"`
	TsUs float64 `json:"ts_us"`
}

// Evidence is one number behind a cause: what, this rank's value and the median rank's.
type Evidence struct {
	What     string `json:"what"`
	Ns       int64  `json:"ns"`
	MedianNs int64  `json:"median_ns"`
	// Detail: the kernel's launching operator, the link's bandwidths.
	Detail string `json:"detail,omitempty"`
}

// Result is the whole answer.
type Result struct {
	Rows []Row `json:"rows"`
	// LateArrivals: how many late arrivals skew found (each has a row); SlowCollectives: how many
	// collectives' transfers were slow (each has a network row where a link explains it).
	LateArrivals    int            `json:"late_arrivals"`
	SlowCollectives int            `json:"slow_collectives"`
	Causes          map[string]int `json:"causes"`
	// KinetoRanks: how many ranks' torch.profiler activity was read (0: plugin traces alone, which
	// can name network causes only).
	KinetoRanks int            `json:"kineto_ranks"`
	Arrivals    map[string]int `json:"arrivals"`
	Notes       []string       `json:"notes,omitempty"`
}

// ranksKey names a rank's activity: a file and a process group in it.
type ranksKey struct {
	file  int32
	group int64
}

// analyzer carries one Analyze.
type analyzer struct {
	s     *commops.Set
	opt   Options
	sk    *skew.Result
	acts  map[ranksKey]*activity
	res   *Result
	slack int64 // the clocks' residual misalignment (p90), 0 on one host
	// lateBy: every compared operation's arrival after its collective's median; rowOf: the row
	// of each late one explained so far.
	lateBy map[int32]int64
	rowOf  map[int32]int
	// hadLate: the collectives with a late arrival
	hadLate map[collKey]bool
}

// Analyze names the causes. acts holds what was read from each file of s beside its operations,
// in order (a Collector's Activities, or ReadAll).
func Analyze(s *commops.Set, acts []Activity, opt Options) *Result {
	so := opt.Skew
	so.Each = true
	sk := skew.Analyze(s, so)
	a := &analyzer{s: s, opt: opt, sk: sk, acts: map[ranksKey]*activity{},
		res: &Result{Causes: map[string]int{}, Arrivals: sk.Arrivals, Notes: sk.Notes}}
	for f, m := range acts {
		for g, act := range m.groups {
			a.acts[ranksKey{int32(f), g}] = act
			if act.Kineto() {
				a.res.KinetoRanks++
			}
		}
	}
	if al := sk.Alignment; al != nil {
		a.slack = al.ResidualP90Ns
	}
	a.lateArrivals()
	a.slowCollectives()
	for _, r := range a.res.Rows {
		a.res.Causes[r.Cause]++
	}
	// Where lateness began first, most late first; then what carried it over.
	sort.SliceStable(a.res.Rows, func(i, j int) bool {
		x, y := a.res.Rows[i], a.res.Rows[j]
		if (x.CarriedFrom == nil) != (y.CarriedFrom == nil) {
			return x.CarriedFrom == nil
		}
		return x.LateNs > y.LateNs
	})
	return a.res
}

// lateArrivals explains every late arrival skew found, each rank's in the order it ran them, so
// that a lateness carried over from the previous operation takes that one's cause. skew lists
// the ranks of one collective together (Result.Each).
func (a *analyzer) lateArrivals() {
	each := a.sk.Each
	type lateOne struct {
		e   *skew.EachRow
		all []skew.EachRow
	}
	var todo []lateOne
	a.lateBy = map[int32]int64{}
	for lo := 0; lo < len(each); {
		hi := lo + 1
		for hi < len(each) && each[hi].Same(&each[lo].Collective) {
			hi++
		}
		for i := lo; i < hi; i++ {
			a.lateBy[each[i].Op()] = each[i].ArriveNs
			if each[i].Late {
				todo = append(todo, lateOne{&each[i], each[lo:hi]})
			}
		}
		lo = hi
	}
	sort.Slice(todo, func(i, j int) bool { return todo[i].e.Op() < todo[j].e.Op() }) // by process, then time
	a.rowOf = map[int32]int{}
	a.hadLate = map[collKey]bool{}
	for _, t := range todo {
		o := &a.s.Ops[t.e.Op()]
		a.hadLate[a.collOf(o)] = true
		a.res.LateArrivals++
		a.rowOf[t.e.Op()] = len(a.res.Rows)
		a.res.Rows = append(a.res.Rows, a.explain(t.e, t.all))
	}
}

// carried says whether the lateness of late arrival e was already there at its rank's previous
// operation, the interval since adding less than the share a cause must explain; if so, r takes
// the previous one's cause.
func (a *analyzer) carried(r *Row, e *skew.EachRow) bool {
	p := a.prev(e.Op())
	if p < 0 {
		return false
	}
	before, ok := a.lateBy[p]
	if !ok || float64(e.ArriveNs-before) >= float64(e.ArriveNs)*a.opt.Explained {
		return false
	}
	po := &a.s.Ops[p]
	if j, ok := a.rowOf[p]; ok {
		pr := a.res.Rows[j]
		from := pr.Seq // the operation where the lateness began
		if pr.CarriedFrom != nil {
			from = *pr.CarriedFrom
		}
		r.Cause, r.Evidence, r.CarriedFrom = pr.Cause, pr.Evidence, &from
		r.Summary = fmt.Sprintf("carried over: already %s late at its previous operation (%s #%d; late since #%d, cause %s); the interval since took only %s longer than on the median rank",
			fmtNs(before), pr.Func, pr.Seq, from, pr.Cause, fmtNs(e.ArriveNs-before))
		return true
	}
	*r = unknown(*r, fmt.Sprintf("already %s late at its previous operation (%s #%d), which was not called late; the interval since took only %s longer than on the median rank",
		fmtNs(before), po.Func, po.Seq, fmtNs(e.ArriveNs-before)))
	return true
}

// row starts the answer for operation i.
func (a *analyzer) row(i int32, late int64, arrival string) Row {
	o := &a.s.Ops[i]
	r := Row{Rank: int(o.Rank), GlobalRank: a.s.Procs[o.Proc].Rank, Comm: a.s.Comms[o.Comm].Label(), Func: o.Func, Seq: o.Seq,
		Repeat: o.Repeat, GraphReplay: o.GraphReplay, LateNs: late, Arrival: arrival, File: a.s.Files[o.Ref.File], Pid: o.Ref.Pid, Tid: o.Ref.Tid, TsUs: float64(o.Ref.TsNs) / 1e3}
	if o.Step >= 0 {
		r.Step = a.s.Steps[o.Step]
	}
	return r
}

// activity is the torch.profiler and plugin activity of operation i's rank (nil: none read).
func (a *analyzer) activity(i int32) *activity {
	o := &a.s.Ops[i]
	return a.acts[ranksKey{o.Ref.File, o.Ref.Pid >> timelineShift}]
}

// digest is operation i's digest in its rank's activity (nil: no activity read).
func (a *analyzer) digest(i int32) (*activity, *digest) {
	act := a.activity(i)
	if act == nil {
		return nil, nil
	}
	return act, act.digestOf(&a.s.Ops[i])
}

// explain names the cause of one late arrival e among its collective's ranks.
func (a *analyzer) explain(e *skew.EachRow, all []skew.EachRow) Row {
	r := a.row(e.Op(), e.ArriveNs, e.Arrival)
	late := e.ArriveNs
	switch {
	case a.sk.Sampled != "":
		return unknown(r, fmt.Sprintf("%s trace: the operations before this one on rank %d are not all in it, so its interval cannot be compared", a.sk.Sampled, r.Rank))
	case 2*a.slack > late:
		return unknown(r, fmt.Sprintf("clocks aligned within %s (p90 of the residual) across hosts: too loose for a lateness of %s", fmtNs(a.slack), fmtNs(late)))
	}
	if a.carried(&r, e) {
		return r
	}
	if e.Arrival == "gpu" && e.CPUArriveNs != nil && float64(*e.CPUArriveNs) < float64(late)*a.opt.Explained {
		return a.gpuSide(r, e, all)
	}
	return a.hostSide(r, e, all)
}

func unknown(r Row, why string) Row {
	r.Cause, r.Summary = Unknown, why
	return r
}

// others are the ranks of the collective other than e's.
func others(e *skew.EachRow, all []skew.EachRow) []int32 {
	var out []int32
	for i := range all {
		if all[i].Op() != e.Op() {
			out = append(out, all[i].Op())
		}
	}
	return out
}

// prev is the operation before i on its process (-1: none): the interval compared is from it.
func (a *analyzer) prev(i int32) int32 {
	if i > 0 && a.s.Ops[i-1].Proc == a.s.Ops[i].Proc {
		return i - 1
	}
	return -1
}

// medianOf is the median of f over the operations (0 without any).
func medianOf(ops []int32, f func(int32) int64) int64 {
	v := make([]int64, 0, len(ops))
	for _, i := range ops {
		v = append(v, f(i))
	}
	if len(v) == 0 {
		return 0
	}
	return quantile.MedianInPlace(v)
}
