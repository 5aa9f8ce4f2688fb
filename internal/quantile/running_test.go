package quantile

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// Against the exact quantile of what was added (no decay yet): never below it, and above it by
// at most the bucket width (1/16 of a power of two: 6.25 %), over distributions of very
// different shape.
func TestRunningQuantileWithinBucketOfExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	dists := map[string]func() float64{
		"uniform 1–100000 ns":   func() float64 { return 1 + rng.Float64()*99999 },
		"lognormal around 1 ms": func() float64 { return math.Exp(rng.NormFloat64()*0.5) * 1e6 },
		"bimodal 50 µs / 5 ms": func() float64 {
			return map[bool]float64{true: 5e6, false: 5e4}[rng.IntN(100) < 3] * (1 + rng.Float64()/10)
		},
		"small integers": func() float64 { return float64(rng.IntN(12)) },
	}
	for name, draw := range dists {
		r := NewRunning(1 << 30) // no halving in this test
		var v []float64
		for i := 0; i < 20000; i++ {
			x := draw()
			r.Add(x)
			v = append(v, math.Floor(x)) // the estimator counts whole ns
		}
		slices.Sort(v)
		for _, p := range []float64{0.5, 0.9, 0.99, 0.999} {
			exact, got := Of(v, p), r.Quantile(p)
			if got < exact || got > exact*1.0625+1 {
				t.Errorf("%s: p%g = %.0f, exact %.0f (want within one bucket above)", name, p*100, got, exact)
			}
		}
		if r.Seen() != 20000 {
			t.Errorf("%s: Seen %d, want 20000", name, r.Seen())
		}
	}
}

// Counts halve every halfLife values, so after a level shift the p99 follows the new level
// within a few half-lives, where a histogram of all time would still answer the old one.
func TestRunningFollowsALevelShift(t *testing.T) {
	r := NewRunning(1000)
	for i := 0; i < 20000; i++ {
		r.Add(1000 + float64(i%100)) // 1000–1099 ns
	}
	if q := r.Quantile(0.99); q < 1099 || q > 1099*1.0625+1 {
		t.Fatalf("p99 before the shift %.0f, want ≈ 1099", q)
	}
	for i := 0; i < 5000; i++ { // five half-lives at 10× the level
		r.Add(10000 + float64(i%100))
	}
	if q := r.Quantile(0.5); q < 10000 {
		t.Errorf("median after five half-lives at 10000 ns is %.0f: the old level still dominates", q)
	}
	if q := r.Quantile(0.99); q < 10099 || q > 10099*1.0625+1 {
		t.Errorf("p99 after the shift %.0f, want ≈ 10099", q)
	}
}

func TestRunningEmptyAndExtremes(t *testing.T) {
	r := NewRunning(0)
	if q := r.Quantile(0.99); q != 0 {
		t.Errorf("empty: p99 %g, want 0", q)
	}
	r.Add(-5)
	r.Add(math.Inf(1))
	r.Add(math.MaxUint64)
	if q := r.Quantile(0.1); q != 1 {
		t.Errorf("a negative value counts as 0 (bucket [0,1)): p10 %g, want 1", q)
	}
	if q := r.Quantile(1); q < math.MaxInt64 {
		t.Errorf("huge values land in the top bucket: p100 %g", q)
	}
}
