package align

import (
	"math"

	"github.com/ncclprof/ncclprof/internal/quantile"
)

// EndsResult is what aligning hosts on collective ends found.
type EndsResult struct {
	// Shift is the ns to add to each host's times to put them on the reference host's clock
	// (the reference host's shift is 0).
	Shift map[string]int64
	// Collectives counts the collectives seen on two ranks or more.
	Collectives int
	// Spread of a collective's end across ranks (max − min), median and 90th percentile over
	// collectives, before and after the shifts: the residual is what alignment cannot remove.
	BeforeMedian, ResidualMedian, ResidualP90 int64
}

// Ends aligns the clocks of several hosts on the ends of collectives. Every rank leaves a blocking
// collective at nearly the same instant, so for each collective the difference between the
// reference host's median end and another host's median end is an estimate of the offset between
// their clocks; the median over collectives is the shift. ends maps a collective (any key naming
// it on every rank: NCCL's communicator, function and seq) to the end time of each rank R that
// ran it; host names the host of a rank (ranks of one host share its clock).
func Ends[K comparable, R comparable](ends map[K]map[R]int64, host func(R) string, ref string) EndsResult {
	res := EndsResult{Shift: map[string]int64{ref: 0}}
	res.BeforeMedian, _, _ = endSpread(ends, host, nil)
	diffs := map[string][]int64{}
	for _, byRank := range ends {
		var refEnds []int64
		perHost := map[string][]int64{}
		for r, end := range byRank {
			if h := host(r); h == ref {
				refEnds = append(refEnds, end)
			} else {
				perHost[h] = append(perHost[h], end)
			}
		}
		if len(refEnds) == 0 {
			continue
		}
		for h, e := range perHost {
			diffs[h] = append(diffs[h], quantile.Median(refEnds)-quantile.Median(e))
		}
	}
	for h, d := range diffs {
		res.Shift[h] = quantile.Median(d)
	}
	res.ResidualMedian, res.ResidualP90, res.Collectives = endSpread(ends, host, res.Shift)
	return res
}

// endSpread returns the median and 90th percentile over collectives (seen on 2+ ranks) of the
// spread of their ends, with the given host shifts applied.
func endSpread[K comparable, R comparable](ends map[K]map[R]int64, host func(R) string, shift map[string]int64) (med, p90 int64, n int) {
	var s []int64
	for _, byRank := range ends {
		if len(byRank) < 2 {
			continue
		}
		lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
		for r, e := range byRank {
			e += shift[host(r)]
			lo, hi = min(lo, e), max(hi, e)
		}
		s = append(s, hi-lo)
	}
	s = quantile.Sorted(s)
	return quantile.MedianSorted(s), quantile.Of(s, 0.9), len(s)
}
