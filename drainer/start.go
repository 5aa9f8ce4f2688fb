package main

/*
#include "core.h"
extern int np_go_metrics_flush(int);
*/
import "C"

import (
	"unsafe"
)

// np_drain_start is what the C library calls (loader.c, on a thread of its own) once this
// library is loaded: it takes the table of C functions, registers the Go functions C may
// call, bounds the Go heap by the address space the process has left (budget, bytes;
// math.MaxInt64 when unlimited, -1 when unknown) and starts the drainer. A table of another
// build is refused (non-zero): the C library then says so and turns the plugin off.
//
//export np_drain_start
func np_drain_start(api *C.np_drain_api, budget C.int64_t) C.int {
	if api == nil || api.version != C.NP_DRAIN_API_VERSION || uintptr(api.size) != unsafe.Sizeof(*api) {
		return 1
	}
	C.np_api = api
	C.np_set_go_hooks(C.np_go_flush_fn(C.np_go_metrics_flush))
	setMemoryBudget(int64(budget))
	go drainer.run()
	return 0
}
