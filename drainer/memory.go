package main

/*
#include "core.h"
*/
import "C"

import (
	"math"
	"runtime/debug"
	"time"
)

// The Go part lives in whatever address space the process has left. Under RLIMIT_AS an
// allocation the runtime cannot map is fatal for the whole process, so the C library starts
// this library only when enough is left (loader.c), the heap gets a soft limit from what was
// left then, and the drainer gives up tracing (its one part that grows with what it is asked
// to write) rather than grow into the limit. Numbers measured: docs/loading.md.
const (
	// runtimeReserve is the address space the Go part takes besides its heap: the runtime's
	// reservations, its threads' stacks and their malloc arenas (measured: 1.1 GiB at start,
	// 1.76 GiB at the most with the heap).
	runtimeReserve = 1536 << 20
	// lowWater: below this much address space left, the drainer stops tracing (a new heap
	// arena is 64 MiB of address space, a new thread's stack 8 MiB, its malloc arena 64 MiB).
	lowWater = 256 << 20
	// minHeapLimit keeps the garbage collector from running constantly when little is left.
	minHeapLimit = 64 << 20
)

// memBounded: the process has an RLIMIT_AS, so the drainer watches what is left.
var memBounded bool

// setMemoryBudget bounds the Go heap by the address space left when the drainer was started
// (room, bytes; math.MaxInt64 when unlimited, negative when unknown).
func setMemoryBudget(room int64) {
	if room < 0 || room == math.MaxInt64 {
		return
	}
	memBounded = true
	debug.SetMemoryLimit(max((room-runtimeReserve)/2, minHeapLimit))
}

// memoryWatch looks at the address space left at most once a second and, when it is short,
// stops tracing for the rest of the process: one warning, and NP_S_MEM_DEGRADED set.
type memoryWatch struct {
	last     time.Time
	degraded bool
}

func (m *memoryWatch) check(trace *traceSink) {
	if !memBounded || m.degraded || time.Since(m.last) < time.Second {
		return
	}
	m.last = time.Now()
	room := int64(C.np_as_headroom())
	if room < 0 || room >= lowWater {
		return
	}
	m.degraded = true
	trace.stopForMemory()
	C.np_stat_set(C.NP_S_MEM_DEGRADED, 1)
	warnf("address space is short (%d MiB left under RLIMIT_AS): tracing is off for the rest "+
		"of this process so the plugin cannot grow into the limit; summaries and metrics "+
		"continue. Raise or remove the limit (ulimit -v) to trace.", room>>20)
}
