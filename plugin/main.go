// Command plugin is the NCCL profiler plugin, built with -buildmode=c-shared into
// libnccl-profiler-ncclprof.so.
//
// NCCL's callbacks never enter Go: they run the C hot path (core.c, adapters.c). Go runs one
// background goroutine that drains closed event windows, aggregates them and writes results.
// The Go runtime of a c-shared library cannot be unloaded (it is linked -z nodelete), so all
// state here survives NCCL's dlclose/dlopen between communicator lifetimes.
package main

/*
#cgo CFLAGS: -O2 -std=gnu11 -Wall -Wno-unused-parameter -fvisibility=hidden
#cgo LDFLAGS: -lpthread
#include "core.h"
*/
import "C"

import (
	"os"
	"runtime"
	"strconv"
)

func main() {}

func init() {
	// With 8 ranks per node each rank's Go runtime would size itself to the whole node; the
	// drainer needs little. Setting it also stops the runtime's periodic re-sizing.
	procs := 2
	if v, err := strconv.Atoi(os.Getenv("NCCLPROF_GOMAXPROCS")); err == nil && v > 0 {
		procs = v
	}
	runtime.GOMAXPROCS(procs)
	go drainer.run()
}
