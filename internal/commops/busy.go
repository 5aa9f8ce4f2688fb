package commops

import "sort"

// Busy is how long a group of operations (one rank's, or one rank's on one communicator) kept
// NCCL busy. Operations run concurrently (a proxy thread serves several at once, communicators
// overlap), so the sum of their times can exceed the wall time they took: BusyNs is the length
// of the union of their timed intervals, where operations in flight together count once.
type Busy struct {
	Ops    int   // timed operations
	BusyNs int64 // union of [Done − Time, Done] over them
	SumNs  int64 // sum of their times (each overlap counted as often as operations share it)
	SpanNs int64 // first start to last end
}

// interval is a timed operation's [start, end] on the Unix clock.
func (o *Op) interval() (start, end int64, ok bool) {
	if o.Source == NoTime || o.Time <= 0 || o.Done <= 0 {
		return 0, 0, false
	}
	return o.Done - o.Time, o.Done, true
}

// BusyBy groups the timed operations by key (0 ≤ key < n; a negative key leaves an operation
// out) and measures each group. From a sampled trace each operation counts for the N it was
// sampled from (Weight): Ops and SumNs are scaled by it, and BusyNs, the union of the operations
// read, by their mean weight — an estimate that assumes the operations sampled away kept NCCL
// busy as the ones read did; what the trigger added is left out.
func (s *Set) BusyBy(n int, key func(*Op) int) []Busy {
	type iv struct{ start, end, w int64 }
	groups := make([][]iv, n)
	for i := range s.Ops {
		o := &s.Ops[i]
		k := key(o)
		if start, end, ok := o.interval(); ok && k >= 0 && k < n && o.Weight() > 0 {
			groups[k] = append(groups[k], iv{start, end, o.Weight()})
		}
	}
	out := make([]Busy, n)
	for k, g := range groups {
		if len(g) == 0 {
			continue
		}
		sort.Slice(g, func(i, j int) bool { return g[i].start < g[j].start })
		b := &out[k]
		curS, curE := g[0].start, g[0].end
		last := g[0].end
		for _, v := range g {
			b.Ops += int(v.w)
			b.SumNs += (v.end - v.start) * v.w
			last = max(last, v.end)
			if v.start > curE { // a gap: the current busy stretch is over
				b.BusyNs += curE - curS
				curS, curE = v.start, v.end
				continue
			}
			curE = max(curE, v.end)
		}
		b.BusyNs += curE - curS
		b.SpanNs = last - g[0].start
		// Scaled by the mean weight (1 in a full trace); never beyond the span it lies in.
		b.BusyNs = min(b.BusyNs*int64(b.Ops)/int64(len(g)), b.SpanNs)
	}
	return out
}

// BusyByProc measures each process's operations (index as in s.Procs).
func (s *Set) BusyByProc() []Busy {
	return s.BusyBy(len(s.Procs), func(o *Op) int { return int(o.Proc) })
}
