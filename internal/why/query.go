package why

import "sort"

// Queries on one rank's activity, its spans sorted by start.

// kernelAt is the index of the NCCL kernel that starts at t (-1: none).
func (a *activity) kernelAt(t int64) int {
	k := sort.Search(len(a.kernels), func(j int) bool { return a.kernels[j].start >= t })
	for ; k < len(a.kernels) && a.kernels[k].start == t; k++ {
		if a.kernels[k].nccl {
			return k
		}
	}
	return -1
}

// blocker is the kernel (not skip) that ended last before t, no earlier than from, and within
// startTolNs of t: what the kernel starting at t waited for (-1: none).
func (a *activity) blocker(t, from int64, skip int) int {
	best := -1
	// It ends after both from and t − startTolNs, so it starts no earlier than the longest
	// kernel before that.
	lo := sort.Search(len(a.kernels), func(j int) bool { return a.kernels[j].start >= max(from, t-startTolNs)-a.longestKernel })
	end := sort.Search(len(a.kernels), func(j int) bool { return a.kernels[j].start > t })
	for j := lo; j < end; j++ {
		k := &a.kernels[j]
		if j == skip || k.end > t+startTolNs/10 || k.end < from || k.end < t-startTolNs {
			continue
		}
		if best < 0 || k.end > a.kernels[best].end {
			best = j
		}
	}
	return best
}

// window is the spans of v (sorted by start, none longer than longest) that may overlap
// [from, to]: those of them that end after from do. (A sub-slice, not a copy: it is taken for
// every operation.)
func window(v []span, longest, from, to int64) []span {
	lo := sort.Search(len(v), func(j int) bool { return v[j].start >= from-longest })
	hi := sort.Search(len(v), func(j int) bool { return v[j].start >= to })
	return v[lo:max(hi, lo)]
}

// enclosing is the innermost CPU operator on the call's thread that contains it (-1: none).
func (a *activity) enclosing(c span) int {
	end := sort.Search(len(a.cpu), func(j int) bool { return a.cpu[j].start > c.start })
	best := -1
	// One that contains it starts no earlier than the longest operator before its end.
	for j := end - 1; j >= 0 && a.cpu[j].start >= c.end-a.longestCPU; j-- {
		s := &a.cpu[j]
		if s.tid == c.tid && s.end >= c.end {
			best = j
			break // the latest start that contains it is the innermost
		}
	}
	return best
}
