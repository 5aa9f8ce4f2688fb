// Command drainer is the Go part of the NCCL profiler plugin, built with -buildmode=c-shared
// into libncclprof-drain.so: the drainer, aggregation, metrics and trace.
//
// NCCL loads the C library (libnccl-profiler-ncclprof.so, built from ../profiler: the hot path,
// the ABI adapters, the control API, the loader). At the first communicator that library checks
// that the process can afford a Go runtime and loads this one beside it, which starts the
// drainer (np_drain_start, start.go).
// NCCL's callbacks never enter Go, and Go never names a C symbol: it calls the C core through
// the table it is handed at start (drainapi.h, which makes C.np_poll(...) and the rest work
// as plain cgo calls). The Go runtime of a c-shared library cannot be unloaded, and neither
// can the C library (linked -z nodelete), so all state survives NCCL's dlclose/dlopen between
// communicator lifetimes.
package main

/*
#cgo CFLAGS: -O2 -std=gnu11 -Wall -Wno-unused-parameter -DNP_GO_SIDE -I${SRCDIR}/../profiler
#cgo LDFLAGS: -lpthread
#include "core.h"
const np_drain_api* np_api; // drainapi.h: the one definition
*/
import "C"

import "runtime"

func main() {}

func init() {
	// Nothing here may call C: the table arrives with np_drain_start.
	runtime.GOMAXPROCS(goMaxProcs()) // again after syncEnv, at the first communicator
}
