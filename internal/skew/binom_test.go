package skew

import (
	"math"
	"testing"
)

// The binomial tail against values computed by hand: P(X ≥ k) = 1 − Σ_{i<k} C(n,i) pⁱ (1−p)ⁿ⁻ⁱ.
func TestBinomTail(t *testing.T) {
	for _, c := range []struct {
		k, n int
		p    float64
		want float64
	}{
		{0, 10, 0.3, 1},
		{1, 10, 0.5, 1 - math.Pow(0.5, 10)},
		{10, 10, 0.5, math.Pow(0.5, 10)},
		{2, 3, 0.5, 0.5},           // 3/8 + 1/8
		{5, 72, 0.0119, 0.0017238}, // 1 − Σ_{i<5} (computed with Python's math.comb)
	} {
		if got := binomTail(c.k, c.n, c.p); math.Abs(got-c.want) > 1e-6*math.Max(1, c.want*1e3) {
			t.Errorf("P(X ≥ %d | n=%d, p=%g) = %.7g, want %.7g", c.k, c.n, c.p, got, c.want)
		}
	}
}
