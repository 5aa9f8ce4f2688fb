package parallel

import (
	"sync/atomic"
	"testing"
)

// Every index is run exactly once, whatever n is against the number of CPUs.
func TestEachRunsEveryIndexOnce(t *testing.T) {
	for _, n := range []int{0, 1, 7, 1000} {
		runs := make([]int32, n)
		Each(n, func(i int) { atomic.AddInt32(&runs[i], 1) })
		for i, r := range runs {
			if r != 1 {
				t.Fatalf("n=%d: index %d ran %d times", n, i, r)
			}
		}
	}
}
