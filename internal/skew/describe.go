package skew

import (
	"fmt"
	"sort"
	"strings"
)

// describe orders what was found and says what was missing.
func (a *analysis) describe() {
	res := a.res
	for _, r := range a.ranks {
		res.Ranks = append(res.Ranks, r)
	}
	// The ranks that make the others wait first: late most often, then for longest.
	sort.Slice(res.Ranks, func(i, j int) bool {
		x, y := res.Ranks[i], res.Ranks[j]
		if x.Late != y.Late {
			return x.Late > y.Late
		}
		if x.Last != y.Last {
			return x.Last > y.Last
		}
		if x.LateTotalNs != y.LateTotalNs {
			return x.LateTotalNs > y.LateTotalNs
		}
		return x.Comm < y.Comm || x.Comm == y.Comm && x.Rank < y.Rank
	})
	for _, r := range res.Ranks {
		if r.Slow {
			res.Slow = append(res.Slow, r)
		}
	}
	a.commRows()
	a.top()
}

// commRows lists the communicators with their missing ranks, and notes ranks that have far
// fewer matched operations than the others (a trace cut short, a rank that left).
func (a *analysis) commRows() {
	seen := map[string]map[int]int{}
	for _, r := range a.ranks {
		if seen[r.CommHash] == nil {
			seen[r.CommHash] = map[int]int{}
		}
		seen[r.CommHash][r.Rank] = r.Matched
	}
	for _, c := range a.comms {
		a.res.Comms = append(a.res.Comms, c)
		ranks := seen[c.CommHash]
		c.Present = len(ranks)
		// At most the ranks present plus the listed ones are visited, whatever size is claimed.
		for r := 0; r < c.NRanks && len(c.Missing) < maxMissingListed; r++ {
			if _, ok := ranks[r]; !ok {
				c.Missing = append(c.Missing, r)
			}
		}
		if missing := c.NRanks - c.Present; missing > 0 {
			list := joinInts(c.Missing)
			if missing > len(c.Missing) {
				list += fmt.Sprintf(" and %d more", missing-len(c.Missing))
			}
			a.res.Notes = append(a.res.Notes, fmt.Sprintf("communicator %s: no trace of rank %s (%d of %d ranks present); its collectives are compared over the ranks present",
				c.Comm, list, c.Present, c.NRanks))
		}
		most := 0
		for _, n := range ranks {
			most = max(most, n)
		}
		for r, n := range ranks {
			if n < most*9/10 {
				a.res.Notes = append(a.res.Notes, fmt.Sprintf("communicator %s: rank %d has %d of %d collectives (its trace ends early or starts late); it is judged on those", c.Comm, r, n, most))
			}
		}
	}
	sort.Slice(a.res.Comms, func(i, j int) bool { return a.res.Comms[i].Comm < a.res.Comms[j].Comm })
	sort.Strings(a.res.Notes)
}

// maxMissingListed: how many missing ranks of a communicator are named.
const maxMissingListed = 64

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ", ")
}

// top lists the collectives with the largest skew.
func (a *analysis) top() {
	pts := make([]int, len(a.res.Points))
	for i := range pts {
		pts[i] = i
	}
	sort.SliceStable(pts, func(i, j int) bool { return a.res.Points[pts[i]].SkewNs > a.res.Points[pts[j]].SkewNs })
	for _, i := range pts[:min(len(pts), a.opt.Top)] {
		p := a.res.Points[i]
		o := &a.s.Ops[p.op]
		row := OpRow{Collective: a.collective(p.op, a.keys[p.group]), Bytes: o.Bytes, SkewNs: p.SkewNs,
			Last: int(o.Rank), LateNs: a.arrive(p.op) - p.AtNs, ArriveNs: p.AtNs, File: a.s.Files[o.Ref.File],
			Pid: o.Ref.Pid, Tid: o.Ref.Tid, TsUs: float64(o.Ref.TsNs) / 1e3, Ranks: p.ranks,
			Arrival: arrivalName(a.onGPU[p.group])}
		row.DoneSpreadNs, row.DoneLast = p.DoneSpreadNs, -1
		if p.doneLast >= 0 {
			row.DoneLast, row.DoneLateNs = int(a.s.Ops[p.doneLast].Rank), *a.doneOffset(&p, p.doneLast)
		}
		for _, i := range a.groups[p.group] {
			row.PerRank = append(row.PerRank, RankAt{Rank: int(a.s.Ops[i].Rank), ArriveNs: a.arrive(i) - p.AtNs, DoneNs: a.doneOffset(&p, i)})
		}
		sort.Slice(row.PerRank, func(i, j int) bool { return row.PerRank[i].Rank < row.PerRank[j].Rank })
		a.res.Top = append(a.res.Top, row)
	}
}
