package main

/*
#include <stdlib.h>
extern char** environ;
static char* np_environ_at(int i) { return environ[i]; }
*/
import "C"

import (
	"os"
	"runtime"
	"strings"

	"github.com/ncclprof/ncclprof/internal/envnum"
)

// syncEnv makes Go's view of the environment match the process's. A Go c-shared runtime copies
// the environment once, when the library is loaded; a Python program that loads the library
// (ncclprof's control calls) and then sets NCCLPROF_* or OTEL_* variables before its first
// communicator would otherwise not be heard. It runs once, on the drainer goroutine, when the
// first communicator starts the plugin, before any setting is read.
//
// Variables that already exist in the C environment are set again with the same value, which
// glibc does by swapping one pointer: the array other threads may be reading never moves.
func syncEnv() {
	seen := map[string]bool{}
	for i := 0; ; i++ {
		p := C.np_environ_at(C.int(i))
		if p == nil {
			break
		}
		k, v, ok := strings.Cut(C.GoString(p), "=")
		if !ok || k == "" {
			continue
		}
		seen[k] = true
		if cur, found := os.LookupEnv(k); !found || cur != v {
			os.Setenv(k, v)
		}
	}
	for _, kv := range os.Environ() { // ours alone: unset since the library was loaded
		if k, _, _ := strings.Cut(kv, "="); !seen[k] && isPluginSetting(k) {
			os.Unsetenv(k)
		}
	}
	runtime.GOMAXPROCS(goMaxProcs())
}

func isPluginSetting(k string) bool {
	return strings.HasPrefix(k, "NCCLPROF_") || strings.HasPrefix(k, "OTEL_")
}

// goMaxProcs is NCCLPROF_GOMAXPROCS, default 2, at most 256: with 8 ranks per node each rank's
// Go runtime would size itself to the whole node; the drainer needs little. Setting it also
// stops the runtime's periodic re-sizing.
func goMaxProcs() int {
	n, msg := envnum.Int("NCCLPROF_GOMAXPROCS", os.Getenv("NCCLPROF_GOMAXPROCS"), 2, 1, 256)
	if msg != "" {
		warnf("%s", msg)
	}
	return int(n)
}
