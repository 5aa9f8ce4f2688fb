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

import "runtime"

func main() {}

func init() {
	runtime.GOMAXPROCS(goMaxProcs()) // again after syncEnv, at the first communicator
	go drainer.run()
}
