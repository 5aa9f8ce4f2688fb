// Package quantile holds the order statistics the analyses share: medians, percentiles and the
// median absolute deviation, over integer nanoseconds or floating-point rates.
package quantile

import (
	"math"
	"slices"
)

// Number is what the statistics are taken over.
type Number interface {
	~int | ~int64 | ~float64
}

// Sorted returns a sorted copy of v (v is left as it is: callers keep their order).
func Sorted[T Number](v []T) []T {
	w := slices.Clone(v)
	slices.Sort(w)
	return w
}

// Median of v: the middle value, or the mean of the two middle values of an even count (with two
// ranks, the upper of two would make the later one never late). Zero for an empty v.
func Median[T Number](v []T) T {
	return MedianSorted(Sorted(v))
}

// MedianSorted is Median of values already sorted.
func MedianSorted[T Number](s []T) T {
	n := len(s)
	switch {
	case n == 0:
		return 0
	case n%2 == 1:
		return s[n/2]
	}
	return s[n/2-1] + (s[n/2]-s[n/2-1])/2
}

// MedianInPlace is Median without the copy and the sort: it reorders v (a selection in linear
// expected time, so that taking the median of n values costs O(n), not O(n log n)).
func MedianInPlace[T Number](v []T) T {
	n := len(v)
	switch {
	case n == 0:
		return 0
	case n%2 == 1:
		return selectK(v, n/2)
	}
	hi := selectK(v, n/2)
	lo := slices.Max(v[:n/2]) // after the selection, the lower half holds the values ≤ hi
	return lo + (hi-lo)/2
}

// KthInPlace is the k-th smallest value of v (0-based), found by selection in linear expected
// time: it reorders v. An order statistic other than the median (a lower median, say) without
// sorting.
func KthInPlace[T Number](v []T, k int) T { return selectK(v, k) }

// selectK puts the k-th smallest value at v[k], smaller ones before it, and returns it
// (Hoare's quickselect with a median-of-three pivot).
func selectK[T Number](v []T, k int) T {
	lo, hi := 0, len(v)-1
	for lo < hi {
		mid := lo + (hi-lo)/2
		if v[mid] < v[lo] {
			v[mid], v[lo] = v[lo], v[mid]
		}
		if v[hi] < v[lo] {
			v[hi], v[lo] = v[lo], v[hi]
		}
		if v[mid] < v[hi] {
			v[mid], v[hi] = v[hi], v[mid]
		}
		pivot := v[hi]
		i := lo
		for j := lo; j < hi; j++ {
			if v[j] < pivot {
				v[i], v[j] = v[j], v[i]
				i++
			}
		}
		v[i], v[hi] = v[hi], v[i]
		switch {
		case k < i:
			hi = i - 1
		case k > i:
			lo = i + 1
		default:
			return v[k]
		}
	}
	return v[k]
}

// MAD is the median absolute deviation of v from med: the spread that a few outliers cannot move,
// unlike the standard deviation (one straggler inflates that until it hides itself).
func MAD[T Number](v []T, med T) T {
	d := make([]T, len(v))
	for i, x := range v {
		d[i] = x - med
		if d[i] < 0 {
			d[i] = -d[i]
		}
	}
	return MedianInPlace(d)
}

// Of returns the p-quantile (0 < p ≤ 1) of sorted values by the nearest-rank method: the smallest
// value with at least p of the values at or below it, so p99 of 50 values is the largest and every
// reported value is one that was measured.
func Of[T Number](sorted []T, p float64) T {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(n))) - 1
	return sorted[min(max(i, 0), n-1)]
}
