package tracefile

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"unsafe"
)

// GuardFaults turns a fault on a mapped trace into a message and exit status 1 instead of a
// crash dump. MapFile and ReadPass map large files; one truncated or rewritten by another
// program while it is read (a trace copied over, a job's own file cut short) makes a read past
// its new end fault (SIGBUS), which Go would report as a crash of the whole program. Every
// goroutine that reads mapped bytes defers it first:
//
//	defer tracefile.GuardFaults()()
//
// Only a fault inside a file this package mapped is turned into the message (the process
// maps none unless it reads traces: the plugin's drainer never does); any other panic goes on
// as it was.
func GuardFaults() func() {
	old := debug.SetPanicOnFault(true)
	return func() {
		debug.SetPanicOnFault(old)
		r := recover()
		if r == nil {
			return
		}
		if f, ok := r.(interface{ Addr() uintptr }); ok {
			if path, ok := mappedAt(f.Addr()); ok {
				fmt.Fprintf(os.Stderr, "%s: %s changed while it was being read (cut short or replaced by another program: a read found no data at offset %d); run it again once the file is complete, or on a copy\n",
					filepath.Base(os.Args[0]), path.name, f.Addr()-path.start)
				os.Exit(1)
			}
		}
		panic(r)
	}
}

// mapping is a file mapped by this package; mappings are never undone (MapFile, ReadPass).
type mapping struct {
	name       string
	start, end uintptr
}

var mappings struct {
	sync.Mutex
	all []mapping
}

// mapped records the mapping of a file, for GuardFaults.
func mapped(name string, b []byte) {
	if len(b) == 0 {
		return
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	mappings.Lock()
	mappings.all = append(mappings.all, mapping{name, start, start + uintptr(len(b))})
	mappings.Unlock()
}

// mappedAt is the mapping addr lies in.
func mappedAt(addr uintptr) (mapping, bool) {
	mappings.Lock()
	defer mappings.Unlock()
	for _, m := range mappings.all {
		if addr >= m.start && addr < m.end {
			return m, true
		}
	}
	return mapping{}, false
}
