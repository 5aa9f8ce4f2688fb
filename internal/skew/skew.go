// Package skew finds the ranks that make everyone wait. It matches the same collective across
// ranks by NCCL's (communicator, function, seq), measures how late each rank arrived against the
// median arrival of that collective, and flags as late the arrivals above
// median + k·MAD of all arrivals of the communicator. The median absolute deviation is used rather
// than the standard deviation because stragglers are exactly the outliers: a few very late arrivals
// inflate a standard deviation until it hides them, while they move the median and MAD hardly at
// all. A rank is slow when it is late on clearly more of its operations than the typical rank.
// Hosts whose clocks differ are aligned first on collective ends (internal/align).
//
// A rank's arrival is taken where the waiting happens, on the GPU, when every rank's GPU-side
// arrival of the collective is known (commops.Op.GPUArrive: its NCCL kernel's start), else its
// Coll start (when the CPU call reached NCCL). In a PyTorch job the CPU enqueues collectives
// ahead of the GPU: a rank whose GPU is slow calls NCCL on time while every other rank's kernel
// waits for its kernel.
//
// It also measures each rank's completion against the collective's median completion. The verdict
// stays on arrivals: a rank that arrives late makes the others wait, while a spread of completions
// says the collective itself ended unevenly (one rank's kernel or network leg took longer).
package skew

import (
	"fmt"
	"math"
	"slices"

	"github.com/ncclprof/ncclprof/internal/align"
	"github.com/ncclprof/ncclprof/internal/commops"
	"github.com/ncclprof/ncclprof/internal/quantile"
)

// Options are the thresholds.
type Options struct {
	// K: an arrival is late above median + K·MAD of its communicator's lateness.
	K float64
	// MinLateNs: and at least this far after the median, so that ranks arriving within the clock's
	// error of each other (a MAD of a few hundred ns) are not called late.
	MinLateNs int64
	// Alpha: a rank is slow when it is late more often than chance allows: if it were late at the
	// rate of the other ranks of its communicator, it would be late this often with a probability
	// below Alpha …
	Alpha float64
	// MinLate: … and it is late on at least this many collectives.
	MinLate int
	// Align hosts on collective ends before comparing arrivals.
	Align bool
	// Top: how many of the most skewed operations to list.
	Top int
	// Each: list every rank's arrival and completion on every matched collective (Result.Each).
	Each bool
	// Arrival: "auto" (the GPU-side arrival where every rank of a collective has one, else the
	// CPU's), "gpu" (only collectives whose GPU-side arrivals are all known) or "cpu".
	Arrival string
}

// Arrivals Options.Arrival accepts.
var Arrivals = []string{"auto", "gpu", "cpu"}

// Defaults: K = 5 with the raw MAD is a modified z-score of 3.4 (Iglewicz and Hoaglin's outlier
// cut is 3.5): about 1 in 3,000 arrivals of a normal spread is late by chance.
var Defaults = Options{K: 5, MinLateNs: 10_000, Alpha: 1e-3, MinLate: 3, Align: true, Top: 20, Arrival: "auto"}

// RankRow is one rank of one communicator.
type RankRow struct {
	Comm       string `json:"comm"`
	CommHash   string `json:"comm_hash"`
	Rank       int    `json:"rank"`
	GlobalRank int    `json:"global_rank"`
	Host       string `json:"host"`
	Pid        int64  `json:"pid"`
	Matched    int    `json:"matched_ops"`
	Late       int    `json:"late_ops"`
	Last       int    `json:"arrived_last"`
	// Lateness beyond the median arrival, over the late operations: total, median and largest.
	LateTotalNs  int64 `json:"late_total_ns"`
	LateMedianNs int64 `json:"late_median_ns"`
	LateMaxNs    int64 `json:"late_max_ns"`
	Slow         bool  `json:"slow"`
	// Chance: the probability of being late this often at the other ranks' rate.
	Chance float64 `json:"chance"`
	// Steps: the training steps it was late in, in order of time, with how late.
	Steps []StepLate `json:"late_steps,omitempty"`
	// Completion, over the matched collectives whose completion is known on two ranks or more
	// (Completed of them): the rank's completion minus the collective's median completion, hosts'
	// clocks aligned; its median and largest value, and how often it completed strictly last (a
	// tie for last counts for no one).
	Completed    int   `json:"completed_ops"`
	DoneLast     int   `json:"completed_last"`
	DoneMedianNs int64 `json:"completion_median_ns"`
	DoneMaxNs    int64 `json:"completion_max_ns"`

	late []int64
	done []int64
}

// StepLate is how late a rank was in one training step (ncclprof_set_step label).
type StepLate struct {
	Step  string `json:"step"`
	Late  int    `json:"late_ops"`
	MaxNs int64  `json:"late_max_ns"`
}

// LateFraction is the share of the rank's matched operations on which it was late.
func (r *RankRow) LateFraction() float64 { return float64(r.Late) / float64(max(r.Matched, 1)) }

// CommRow is what was found for one communicator.
type CommRow struct {
	Comm     string `json:"comm"`
	CommHash string `json:"comm_hash"`
	NRanks   int    `json:"nranks"`
	Present  int    `json:"ranks_present"`
	// Missing lists the ranks without a trace (the first maxMissingListed of them): NRanks −
	// Present in all.
	Missing []int `json:"ranks_missing,omitempty"`
	Matched int   `json:"matched_ops"`
	// Lateness statistics over all arrivals of the communicator, and the threshold they give.
	MedianNs    int64 `json:"lateness_median_ns"`
	MADNs       int64 `json:"lateness_mad_ns"`
	ThresholdNs int64 `json:"threshold_ns"`
	// Completion spread (last − first completion) over its collectives: median and p90.
	DoneSpreadMedianNs int64 `json:"completion_spread_median_ns"`
	DoneSpreadP90Ns    int64 `json:"completion_spread_p90_ns"`

	spreads []int64
}

// Collective names a matched collective in the rows below: its communicator, function, seq,
// which of that seq's repeats it is, and the training step it fell in.
type Collective struct {
	Comm   string `json:"comm"`
	Func   string `json:"func"`
	Seq    int64  `json:"seq"`
	Repeat int32  `json:"repeat,omitempty"` // the n-th in a row with this seq (matchKey.nth)
	// GraphReplay: a CUDA graph's replay (matchKey.graph); Repeat counts the replays of the seq.
	GraphReplay bool   `json:"graph_replay,omitempty"`
	Step        string `json:"step,omitempty"`
}

// SeqText is its seq as the tables write it: "12", "12+1", "12 replay 3" (commops.SeqText).
func (c Collective) SeqText() string { return commops.SeqText(c.Seq, int64(c.Repeat), c.GraphReplay) }

// Same says whether c and d name the same collective (their step aside: ranks label steps alone).
func (c *Collective) Same(d *Collective) bool {
	return c.Comm == d.Comm && c.Func == d.Func && c.Seq == d.Seq && c.Repeat == d.Repeat && c.GraphReplay == d.GraphReplay
}

// collective names operation i of the group matched under key k.
func (a *analysis) collective(i int32, k matchKey) Collective {
	o := &a.s.Ops[i]
	c := Collective{Comm: a.s.Comms[o.Comm].Label(), Func: o.Func, Seq: o.Seq, Repeat: k.nth, GraphReplay: k.graph}
	if o.Step >= 0 {
		c.Step = a.s.Steps[o.Step]
	}
	return c
}

// OpRow is one collective as all ranks ran it.
type OpRow struct {
	Collective
	Bytes    uint64 `json:"bytes"`
	Ranks    int    `json:"ranks"`
	SkewNs   int64  `json:"skew_ns"` // last arrival − first arrival
	Last     int    `json:"last_rank"`
	LateNs   int64  `json:"last_late_ns"` // last arrival − median arrival
	ArriveNs int64  `json:"median_arrival_unix_ns"`
	// Arrival: which arrival was compared: "gpu" (the NCCL kernels' starts) or "cpu" (Coll starts).
	Arrival string `json:"arrival"`
	// Completion: last − first completion, the rank that completed strictly last (-1: a tie, or
	// fewer than two completions known) and its completion − the median completion.
	DoneSpreadNs int64 `json:"completion_spread_ns"`
	DoneLast     int   `json:"completion_last_rank"`
	DoneLateNs   int64 `json:"completion_last_late_ns"`
	// Where the last rank's slice is in its trace.
	File string  `json:"file"`
	Pid  int64   `json:"pid"`
	Tid  int64   `json:"tid"`
	TsUs float64 `json:"ts_us"`
	// Every rank present, in rank order.
	PerRank []RankAt `json:"per_rank"`
}

// RankAt is one rank on one collective: its arrival after the collective's median arrival, and its
// completion after the median completion (nil: not known), in ns, hosts' clocks aligned.
type RankAt struct {
	Rank     int    `json:"rank"`
	ArriveNs int64  `json:"arrival_ns"`
	DoneNs   *int64 `json:"completion_ns"`
}

// EachRow is one rank on one matched collective (Options.Each).
type EachRow struct {
	Collective
	Rank       int `json:"rank"`
	GlobalRank int `json:"global_rank"`
	// ArriveNs: arrival − the collective's median arrival; Late: above the communicator's threshold.
	ArriveNs int64 `json:"arrival_ns"`
	Late     bool  `json:"late"`
	// Arrival: which arrival ArriveNs is of ("gpu" or "cpu"); CPUArriveNs: where it is "gpu", the
	// Coll start − the collective's median Coll start (a GPU late while its CPU was on time).
	Arrival     string `json:"arrival"`
	CPUArriveNs *int64 `json:"cpu_arrival_ns,omitempty"`
	// DoneNs: completion − the collective's median completion (nil: not known); DoneLast: it
	// completed strictly last.
	DoneNs   *int64 `json:"completion_ns"`
	DoneLast bool   `json:"completed_last"`

	op int32
}

// Alignment reports the clock alignment of hosts on collective ends.
type Alignment struct {
	Hosts            int              `json:"hosts"`
	Reference        string           `json:"reference_host"`
	ShiftNs          map[string]int64 `json:"host_shift_ns"`
	Collectives      int              `json:"collectives"`
	BeforeMedianNs   int64            `json:"end_spread_before_median_ns"`
	ResidualMedianNs int64            `json:"end_spread_after_median_ns"`
	ResidualP90Ns    int64            `json:"end_spread_after_p90_ns"`
}

// Point is one matched collective over time (the report's skew plot).
type Point struct {
	AtNs   int64 `json:"at_unix_ns"`
	SkewNs int64 `json:"skew_ns"`
	Comm   int   `json:"comm"`
	Last   int   `json:"last_rank"`
	Late   bool  `json:"last_is_late"`
	// DoneSpreadNs: last − first completion (0: fewer than two known).
	DoneSpreadNs int64 `json:"completion_spread_ns"`
	op           int32 // the last rank's operation
	ranks        int
	group        int32
	doneMed      int64 // the median completion; valid when doneKnown
	doneKnown    bool
	doneLast     int32 // the operation that completed strictly last; -1: none
}

// Result is the whole answer.
type Result struct {
	Options   Options    `json:"options"`
	Comms     []*CommRow `json:"comms"`
	Ranks     []*RankRow `json:"ranks"`
	Slow      []*RankRow `json:"slow_ranks"`
	Top       []OpRow    `json:"most_skewed"`
	Each      []EachRow  `json:"each,omitempty"`
	Alignment *Alignment `json:"alignment,omitempty"`
	Notes     []string   `json:"notes,omitempty"`
	Points    []Point    `json:"-"`
	// Arrivals counts the collectives compared on each arrival: "gpu" (kernel, kernelch or
	// send_gpu_wait: the weakest source among its ranks) and "cpu"; Skipped those left out by
	// Options.Arrival "gpu".
	Arrivals map[string]int `json:"arrivals"`
	Skipped  int            `json:"skipped_no_gpu_arrival,omitempty"`
	// Sampled: "sampled 1/N" when the traces are sampled: the collectives matched are those
	// every rank chose (1 in N by seq), and the counts of late collectives are of those.
	Sampled string `json:"sampled,omitempty"`
}

// matchKey names one collective across ranks: nth and graph tell apart the collectives of one
// seq, a CUDA graph's replays and the eager collective that shares their seq (commops.Op's
// Repeat and GraphReplay).
type matchKey struct {
	comm  int32
	fn    string
	seq   int64
	nth   int32
	graph bool
}

// Analyze finds the slow ranks of s.
func Analyze(s *commops.Set, opt Options) *Result {
	res := &Result{Options: opt, Notes: slices.Clone(s.Notes), Sampled: s.Sampling.Label(), Arrivals: map[string]int{}}
	keys, groups := match(s)
	shift := map[string]int64{}
	if opt.Align {
		res.Alignment, shift = alignHosts(s, keys, groups)
	}
	a := &analysis{s: s, opt: opt, res: res, shift: shift, ranks: map[[2]int32]*RankRow{}}
	a.measure(keys, groups)
	a.flag()
	a.describe()
	return res
}

// match groups the collectives (seq ≥ 0) by (communicator, function, seq, nth), one operation per rank
// (a rank whose operation appears twice, in two overlapping files, counts once). It costs O(1) per
// operation, so that a job's analysis grows linearly with ranks × operations. Everything is sized
// by the ranks the traces contain, never by the size a file claims for a communicator.
func match(s *commops.Set) ([]matchKey, [][]int32) {
	dense, present := denseRanks(s)
	index := map[matchKey]int32{}
	var keys []matchKey
	var groups [][]int32
	var seen [][]uint64 // per group, a bit per rank present
	for i := range s.Ops {
		o := &s.Ops[i]
		// What the trigger traced around a slow operation is that rank's alone (each rank's
		// trigger fires on what it saw): only the sampled collectives line up across ranks.
		if o.Seq < 0 || o.Rank < 0 || o.Traced == commops.Triggered || o.Traced == commops.Trigger {
			continue
		}
		k := matchKey{o.Comm, o.Func, o.Seq, o.Repeat, o.GraphReplay}
		g, ok := index[k]
		if !ok {
			g = int32(len(groups))
			index[k] = g
			keys = append(keys, k)
			n := present[o.Comm]
			groups = append(groups, make([]int32, 0, n))
			seen = append(seen, make([]uint64, (n+63)/64))
		}
		r := dense[i]
		w, bit := int(r/64), uint64(1)<<(r%64)
		for w >= len(seen[g]) {
			seen[g] = append(seen[g], 0)
		}
		if seen[g][w]&bit == 0 {
			seen[g][w] |= bit
			groups[g] = append(groups[g], int32(i))
		}
	}
	return keys, groups
}

// denseRanks numbers each communicator's ranks in the order they appear (dense[i] for operation
// i; -1 without a rank) and counts them (present, per communicator).
func denseRanks(s *commops.Set) (dense []int32, present []int) {
	dense = make([]int32, len(s.Ops))
	present = make([]int, len(s.Comms))
	ids := map[[2]int32]int32{}
	for i := range s.Ops {
		o := &s.Ops[i]
		if o.Rank < 0 {
			dense[i] = -1
			continue
		}
		id, ok := ids[[2]int32{o.Comm, o.Rank}]
		if !ok {
			id = int32(present[o.Comm])
			present[o.Comm]++
			ids[[2]int32{o.Comm, o.Rank}] = id
		}
		dense[i] = id
	}
	return dense, present
}

// alignHosts measures each host's clock offset on the ends of the matched collectives.
func alignHosts(s *commops.Set, keys []matchKey, groups [][]int32) (*Alignment, map[string]int64) {
	hosts := map[string]bool{}
	for _, p := range s.Procs {
		hosts[p.Host] = true
	}
	if len(hosts) < 2 {
		return nil, map[string]int64{}
	}
	ends := make(map[matchKey]map[int32]int64, len(keys))
	for g, k := range keys {
		m := make(map[int32]int64, len(groups[g]))
		for _, i := range groups[g] {
			if o := &s.Ops[i]; o.Done != 0 {
				m[o.Proc] = o.Done
			}
		}
		ends[k] = m
	}
	ref := referenceHost(s)
	r := align.Ends(ends, func(p int32) string { return s.Procs[p].Host }, ref)
	return &Alignment{Hosts: len(hosts), Reference: ref, ShiftNs: r.Shift, Collectives: r.Collectives,
		BeforeMedianNs: r.BeforeMedian, ResidualMedianNs: r.ResidualMedian, ResidualP90Ns: r.ResidualP90}, r.Shift
}

// referenceHost is the host of global rank 0 (else the first process's).
func referenceHost(s *commops.Set) string {
	for _, p := range s.Procs {
		if p.Rank == 0 {
			return p.Host
		}
	}
	return s.Procs[0].Host
}

// analysis carries one Analyze.
type analysis struct {
	s     *commops.Set
	opt   Options
	res   *Result
	shift map[string]int64
	ranks map[[2]int32]*RankRow // (comm, rank)
	comms map[int32]*CommRow
	// lateness of every arrival, per communicator, with its op
	samples map[int32][]sample
	keys    []matchKey
	groups  [][]int32
	onGPU   []bool  // per group: compared on GPU-side arrivals
	group   []int32 // per operation: its group (-1: none)
}

type sample struct {
	late  int64
	op    int32
	group int32
}

// measure computes every arrival's lateness against its collective's median arrival, and every
// completion's against its median completion.
func (a *analysis) measure(keys []matchKey, groups [][]int32) {
	a.keys, a.groups = keys, groups
	a.samples = map[int32][]sample{}
	a.comms = map[int32]*CommRow{}
	a.onGPU = make([]bool, len(groups))
	a.group = make([]int32, len(a.s.Ops))
	for i := range a.group {
		a.group[i] = -1
	}
	for g, idx := range groups {
		for _, i := range idx {
			a.group[i] = int32(g)
		}
	}
	arr := make([]int64, 0, 64)
	done := make([]int64, 0, 64)
	for g, idx := range groups {
		if len(idx) < 2 || !a.chooseArrival(g, idx) {
			continue
		}
		arr = arr[:0]
		for _, i := range idx {
			arr = append(arr, a.arrive(i))
		}
		med := quantile.MedianInPlace(arr)
		comm := keys[g].comm
		for _, i := range idx {
			a.samples[comm] = append(a.samples[comm], sample{a.arrive(i) - med, i, int32(g)})
			a.rank(i).Matched++
		}
		a.comm(comm).Matched++
		a.point(g, idx, med)
		a.completion(&a.res.Points[len(a.res.Points)-1], idx, done)
		if a.opt.Each {
			a.each(&a.res.Points[len(a.res.Points)-1], idx, med)
		}
	}
}

func (a *analysis) done(i int32) int64 {
	o := &a.s.Ops[i]
	return o.Done + a.shift[a.s.Procs[o.Proc].Host]
}

// completion measures the collective's completions, where two ranks or more have one: its median,
// each rank's offset from it, the spread, and who completed strictly last.
func (a *analysis) completion(p *Point, idx []int32, buf []int64) {
	p.doneLast = -1
	buf = buf[:0]
	for _, i := range idx {
		if a.s.Ops[i].Done != 0 {
			buf = append(buf, a.done(i))
		}
	}
	if len(buf) < 2 {
		return
	}
	med := quantile.MedianInPlace(buf)
	last, tie := int32(-1), false
	var lo, hi int64
	for _, i := range idx {
		if a.s.Ops[i].Done == 0 {
			continue
		}
		d := a.done(i)
		r := a.rank(i)
		r.Completed++
		r.done = append(r.done, d-med)
		if last < 0 {
			lo = d
		}
		lo = min(lo, d)
		switch {
		case last < 0 || d > hi:
			last, hi, tie = i, d, false
		case d == hi:
			tie = true
		}
	}
	p.doneMed, p.doneKnown = med, true
	p.DoneSpreadNs = hi - lo
	if !tie {
		p.doneLast = last
		a.rank(last).DoneLast++
	}
	c := a.comm(a.keys[p.group].comm)
	c.spreads = append(c.spreads, p.DoneSpreadNs)
}

// doneOffset is operation i's completion after its collective's median completion.
func (a *analysis) doneOffset(p *Point, i int32) *int64 {
	if !p.doneKnown || a.s.Ops[i].Done == 0 {
		return nil
	}
	d := a.done(i) - p.doneMed
	return &d
}

// each lists every rank of the collective (Options.Each).
func (a *analysis) each(p *Point, idx []int32, med int64) {
	gpu := a.onGPU[p.group]
	var cpuMed int64
	if gpu {
		cpu := make([]int64, len(idx))
		for n, i := range idx {
			cpu[n] = a.cpuArrive(i)
		}
		cpuMed = quantile.MedianInPlace(cpu)
	}
	for _, i := range idx {
		o := &a.s.Ops[i]
		row := EachRow{Collective: a.collective(i, a.keys[p.group]), Rank: int(o.Rank),
			GlobalRank: a.s.Procs[o.Proc].Rank, ArriveNs: a.arrive(i) - med, DoneNs: a.doneOffset(p, i),
			DoneLast: p.doneLast == i, Arrival: arrivalName(gpu), op: i}
		if gpu {
			c := a.cpuArrive(i) - cpuMed
			row.CPUArriveNs = &c
		}
		a.res.Each = append(a.res.Each, row)
	}
}

// chooseArrival decides which arrival group g is compared on (a.onGPU) and counts it; false: the
// group is left out (Options.Arrival "gpu" and a rank's GPU-side arrival unknown).
func (a *analysis) chooseArrival(g int, idx []int32) bool {
	worst := commops.NoGPU
	for _, i := range idx {
		from := a.s.Ops[i].GPUFrom
		if from == commops.NoGPU {
			worst = commops.NoGPU
			break
		}
		worst = max(worst, from)
	}
	switch {
	case worst != commops.NoGPU && a.opt.Arrival != "cpu":
		a.onGPU[g] = true
		a.res.Arrivals["gpu ("+worst.String()+")"]++
	case a.opt.Arrival == "gpu":
		a.res.Skipped++
		return false
	default:
		a.res.Arrivals["cpu"]++
	}
	return true
}

// arrive is operation i's arrival as its collective is compared (a.onGPU), clocks aligned.
func (a *analysis) arrive(i int32) int64 {
	o := &a.s.Ops[i]
	at := o.Arrive
	if g := a.group[i]; g >= 0 && a.onGPU[g] {
		at = o.GPUArrive
	}
	return at + a.shift[a.s.Procs[o.Proc].Host]
}

// cpuArrive is operation i's Coll start, clocks aligned.
func (a *analysis) cpuArrive(i int32) int64 {
	o := &a.s.Ops[i]
	return o.Arrive + a.shift[a.s.Procs[o.Proc].Host]
}

// point records the collective for the skew-over-time plot and marks who arrived last.
func (a *analysis) point(g int, idx []int32, med int64) {
	last, first := idx[0], idx[0]
	for _, i := range idx {
		if a.arrive(i) > a.arrive(last) {
			last = i
		}
		if a.arrive(i) < a.arrive(first) {
			first = i
		}
	}
	a.rank(last).Last++
	a.res.Points = append(a.res.Points, Point{AtNs: med, SkewNs: a.arrive(last) - a.arrive(first),
		Comm: int(a.keys[g].comm), Last: int(a.s.Ops[last].Rank), op: last, ranks: len(idx), group: int32(g)})
}

func arrivalName(gpu bool) string {
	if gpu {
		return "gpu"
	}
	return "cpu"
}

func (a *analysis) rank(i int32) *RankRow {
	o := &a.s.Ops[i]
	k := [2]int32{o.Comm, o.Rank}
	if r := a.ranks[k]; r != nil {
		return r
	}
	c, p := a.s.Comms[o.Comm], a.s.Procs[o.Proc]
	r := &RankRow{Comm: c.Label(), CommHash: fmt.Sprintf("0x%016x", c.Hash), Rank: int(o.Rank), GlobalRank: p.Rank,
		Host: p.Host, Pid: p.Pid}
	a.ranks[k] = r
	return r
}

func (a *analysis) comm(c int32) *CommRow {
	if r := a.comms[c]; r != nil {
		return r
	}
	cm := a.s.Comms[c]
	r := &CommRow{Comm: cm.Label(), CommHash: fmt.Sprintf("0x%016x", cm.Hash), NRanks: cm.NRanks}
	a.comms[c] = r
	return r
}

// flag applies the thresholds: late arrivals per communicator, then slow ranks.
func (a *analysis) flag() {
	lateOp := map[int32]bool{}
	for c, ss := range a.samples {
		v := make([]int64, len(ss))
		for i, x := range ss {
			v[i] = x.late
		}
		med := quantile.MedianInPlace(v)
		mad := quantile.MAD(v, med)
		thr := med + max(int64(a.opt.K*float64(mad)), a.opt.MinLateNs)
		cr := a.comm(c)
		cr.MedianNs, cr.MADNs, cr.ThresholdNs = med, mad, thr
		if len(cr.spreads) > 0 {
			sp := quantile.Sorted(cr.spreads)
			cr.DoneSpreadMedianNs, cr.DoneSpreadP90Ns = quantile.MedianSorted(sp), quantile.Of(sp, 0.9)
			cr.spreads = nil
		}
		for _, x := range ss {
			if x.late > thr {
				r := a.rank(x.op)
				r.Late++
				r.late = append(r.late, x.late)
				lateOp[x.op] = true
				if st := a.s.Ops[x.op].Step; st >= 0 {
					r.addStep(a.s.Steps[st], x.late)
				}
			}
		}
	}
	for i := range a.res.Points {
		p := &a.res.Points[i]
		p.Late = lateOp[p.op]
	}
	for i := range a.res.Each {
		e := &a.res.Each[i]
		e.Late = lateOp[e.op]
	}
	a.slowRanks()
}

func (r *RankRow) addStep(step string, late int64) {
	for i := range r.Steps {
		if s := &r.Steps[i]; s.Step == step {
			s.Late++
			s.MaxNs = max(s.MaxNs, late)
			return
		}
	}
	r.Steps = append(r.Steps, StepLate{step, 1, late})
}

// slowRanks flags the ranks late more often than the other ranks' rate of late arrivals makes
// likely. The rate is the others' (leave-one-out), so that the straggler does not raise its own
// bar; a scheduler hiccup now and then on every rank raises everyone's rate alike.
func (a *analysis) slowRanks() {
	type total struct{ late, matched int }
	byComm := map[string]*total{}
	for _, r := range a.ranks {
		if byComm[r.CommHash] == nil {
			byComm[r.CommHash] = &total{}
		}
		byComm[r.CommHash].late += r.Late
		byComm[r.CommHash].matched += r.Matched
		l := quantile.Sorted(r.late)
		r.LateMedianNs = quantile.MedianSorted(l)
		if len(l) > 0 {
			r.LateMaxNs = l[len(l)-1]
		}
		for _, x := range l {
			r.LateTotalNs += x
		}
		r.late = nil
		if len(r.done) > 0 {
			r.DoneMaxNs = slices.Max(r.done)
			r.DoneMedianNs = quantile.MedianInPlace(r.done)
		}
		r.done = nil
	}
	for _, r := range a.ranks {
		c := byComm[r.CommHash]
		others := c.matched - r.Matched
		p := math.Max(float64(c.late-r.Late), 1) / float64(others+1)
		r.Chance = binomTail(r.Late, r.Matched, p)
		r.Slow = r.Late >= a.opt.MinLate && r.Chance < a.opt.Alpha
	}
}

// binomTail is P(X ≥ k) for X ~ Binomial(n, p), summed in log space from k up until the terms
// no longer count.
func binomTail(k, n int, p float64) float64 {
	if k <= 0 {
		return 1
	}
	if p >= 1 {
		return 1
	}
	lp, lq := math.Log(p), math.Log1p(-p)
	lgN, _ := math.Lgamma(float64(n + 1))
	sum := 0.0
	for i := k; i <= n; i++ {
		li, _ := math.Lgamma(float64(i + 1))
		lni, _ := math.Lgamma(float64(n - i + 1))
		t := math.Exp(lgN - li - lni + float64(i)*lp + float64(n-i)*lq)
		sum += t
		if t < sum*1e-12 && float64(i) > float64(n)*p {
			break
		}
	}
	return math.Min(sum, 1)
}

// Op is the index in the analysed commops.Set of the operation the row is about.
func (e *EachRow) Op() int32 { return e.op }
