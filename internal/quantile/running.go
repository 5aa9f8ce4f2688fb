package quantile

import (
	"math"
	"math/bits"
)

// Running estimates a quantile of a stream of non-negative values (durations in ns) that goes
// on for as long as a job runs, in fixed memory and O(1) per value: a histogram with 16 buckets
// per power of two (each bucket at most 1/16 = 6.25 % of its lower edge wide), with counts that
// halve every halfLife values, so the estimate follows a stream whose level drifts (a job that
// slows down after a checkpoint) rather than being pinned by the first hours.
//
// Quantile answers with the upper edge of the bucket that holds the quantile: never below the
// exact value of the histogram's content, so a threshold built on it errs on the side of not
// firing.
type Running struct {
	counts   [runningBuckets]uint32
	total    uint64 // sum of counts
	hi       int    // highest non-empty bucket (-1: none)
	seen     uint64 // values ever added
	sinceCut int
	halfLife int
}

const (
	subBits        = 4 // 16 buckets per power of two
	sub            = 1 << subBits
	runningBuckets = (64 - subBits + 1) * sub
)

// NewRunning returns an empty estimator whose counts halve every halfLife values (at least 16).
func NewRunning(halfLife int) *Running {
	return &Running{hi: -1, halfLife: max(halfLife, 16)}
}

// bucketOf is the bucket of v: v itself below 16, else 16 buckets per power of two, by the 4
// bits below the leading one.
func bucketOf(v uint64) int {
	if v < sub {
		return int(v)
	}
	e := bits.Len64(v) - 1 // v in [2^e, 2^(e+1)), e ≥ subBits
	m := int(v>>(e-subBits)) & (sub - 1)
	return (e-subBits+1)*sub + m
}

// upperEdge is the smallest value above every value of bucket b.
func upperEdge(b int) float64 {
	if b < sub {
		return float64(b + 1)
	}
	e := b/sub + subBits - 1
	m := b % sub
	return math.Ldexp(float64(sub+m+1), e-subBits)
}

// Add counts one value (negative values count as 0).
func (r *Running) Add(v float64) {
	u := uint64(0)
	if v > 0 {
		u = uint64(min(v, math.MaxInt64))
	}
	b := bucketOf(u)
	r.counts[b]++
	r.total++
	r.seen++
	r.hi = max(r.hi, b)
	if r.sinceCut++; r.sinceCut >= r.halfLife {
		r.halve()
	}
}

// halve halves every count (rounding down), so older values weigh half as much as newer ones.
func (r *Running) halve() {
	r.sinceCut = 0
	r.total = 0
	top := -1
	for b := 0; b <= r.hi; b++ {
		r.counts[b] >>= 1
		r.total += uint64(r.counts[b])
		if r.counts[b] > 0 {
			top = b
		}
	}
	r.hi = top
}

// Seen is how many values were ever added.
func (r *Running) Seen() uint64 { return r.seen }

// Quantile is the p-quantile (0 < p ≤ 1) of the values the histogram holds, by the
// nearest-rank method on buckets, as the upper edge of its bucket; 0 when empty. The walk starts
// at the top, where high quantiles are, so p99 costs a few buckets.
func (r *Running) Quantile(p float64) float64 {
	if r.total == 0 {
		return 0
	}
	// The nearest rank counted from the bottom is ceil(p·n); from the top, the values above
	// it number n − ceil(p·n).
	above := r.total - uint64(math.Ceil(p*float64(r.total)))
	var acc uint64
	for b := r.hi; b >= 0; b-- {
		acc += uint64(r.counts[b])
		if acc > above {
			return upperEdge(b)
		}
	}
	return upperEdge(0)
}
