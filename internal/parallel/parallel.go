// Package parallel runs independent pieces of work (one per input file, mostly) on every CPU.
package parallel

import (
	"runtime"
	"sync"

	"github.com/ncclprof/ncclprof/internal/tracefile"
)

// Each runs f(0), …, f(n-1), at most GOMAXPROCS at a time, and returns when all have.
func Each(n int, f func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < min(n, runtime.GOMAXPROCS(0)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer tracefile.GuardFaults()() // the work reads mapped traces
			for i := range next {
				f(i)
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
}
