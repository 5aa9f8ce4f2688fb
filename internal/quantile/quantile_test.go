package quantile

import "testing"

func TestMedianMADAndPercentiles(t *testing.T) {
	if m := Median([]int64{5, 1, 3}); m != 3 {
		t.Errorf("median of 3 = %d", m)
	}
	if m := Median([]int64{10, 20}); m != 15 {
		t.Errorf("median of 2 = %d, want the mean of both", m)
	}
	if m := Median([]float64{}); m != 0 {
		t.Errorf("median of none = %g", m)
	}
	// One straggler moves neither the median nor the MAD.
	v := []int64{100, 102, 98, 101, 99, 5000}
	med := Median(v)
	if med != 100 {
		t.Errorf("median %d", med)
	}
	if d := MAD(v, med); d != 1 {
		t.Errorf("MAD %d, want 1", d)
	}
	s := Sorted([]int64{10, 1, 9, 2, 8, 3, 7, 4, 6, 5})
	for _, c := range []struct {
		p    float64
		want int64
	}{{0.5, 5}, {0.9, 9}, {0.99, 10}, {0.1, 1}, {1, 10}, {0.01, 1}} {
		if got := Of(s, c.p); got != c.want {
			t.Errorf("p%g = %d, want %d", c.p*100, got, c.want)
		}
	}
}

// The selection gives the sorted median on every arrangement, duplicates included.
func TestMedianInPlace(t *testing.T) {
	x := uint64(7)
	for n := 1; n < 200; n++ {
		v := make([]int64, n)
		for i := range v {
			x = x*6364136223846793005 + 1442695040888963407
			v[i] = int64(x>>40) % 50
		}
		want := Median(v)
		if got := MedianInPlace(v); got != want {
			t.Fatalf("n=%d: %d, want %d", n, got, want)
		}
	}
}

// Every order statistic KthInPlace selects is the one a sort puts at k, duplicates included.
func TestKthInPlace(t *testing.T) {
	x := uint64(11)
	for n := 1; n < 100; n++ {
		v := make([]int64, n)
		for i := range v {
			x = x*6364136223846793005 + 1442695040888963407
			v[i] = int64(x>>40) % 30
		}
		sorted := Sorted(v)
		for k := 0; k < n; k++ {
			w := append([]int64(nil), v...)
			if got := KthInPlace(w, k); got != sorted[k] {
				t.Fatalf("n=%d k=%d: %d, want %d", n, k, got, sorted[k])
			}
		}
	}
}
