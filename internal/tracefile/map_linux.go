package tracefile

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// mapMin is the smallest plain file MapFile maps: below it a copy costs nothing worth saving.
const mapMin = 16 << 20

// madvPopulateRead (MADV_POPULATE_READ, Linux 5.14) fills the page tables from the page cache
// without copying: a private writable mapping populated by MAP_POPULATE would copy every page.
const madvPopulateRead = 22

// MapFile returns the content of path like ReadFile, but a large plain (not gzip) file is
// mapped into memory instead of copied into a buffer: the kernel's copy of the file is the
// content, which saves a copy of it (a third of the system time of merging a 600 MB trace,
// 1.1 → 0.5 s on this project's VM). The mapping is private and writable: a write (the UTF-8
// repair) changes this process's view only. It is never unmapped: map only a file held to the
// end of the process. A file truncated while mapped makes a read past its new end fault (SIGBUS):
// every goroutine that reads mapped bytes defers GuardFaults, which says so and exits; growing
// is harmless (only the size at open is mapped).
// Everything else is as ReadFile: gzip files are inflated into a buffer, FIFOs and devices
// refused, a file too large for the machine refused; where the kernel will not map the file,
// it is read into a buffer.
func MapFile(path string) ([]byte, error) { return read(path, mapPlain, false) }

// mapPrivate maps an open plain file of size bytes, private, with protection prot; false where
// it is too small to be worth it or the kernel refuses.
func mapPrivate(f *os.File, size int64, prot int) ([]byte, bool) {
	if size < mapMin || int64(int(size)) != size {
		return nil, false
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, int(size), prot, syscall.MAP_PRIVATE)
	if err != nil {
		return nil, false
	}
	mapped(f.Name(), b)
	return b, true
}

// mapPlain maps an open plain file of size bytes, writable, populated from the page cache;
// false where mapPrivate declines.
func mapPlain(f *os.File, size int64) ([]byte, bool) {
	b, ok := mapPrivate(f, size, syscall.PROT_READ|syscall.PROT_WRITE)
	if !ok {
		return nil, false
	}
	if syscall.Madvise(b, madvPopulateRead) != nil {
		syscall.Madvise(b, syscall.MADV_WILLNEED) // an older kernel: read ahead, fault lazily
	}
	return b, true
}

// ReadPass returns path's content for one pass from its start to its end, as commops and
// `why` read a trace: a large plain file is mapped read-only, unpopulated, and Pass.Release gives
// the pages the reader has passed back to the kernel, so the process holds a window of the file
// instead of all of it (a job's 64 traces of 200 MB each were read into buffers of their size,
// two at once, and the garbage collector's headroom doubled them). The mapping stays: a string
// that still points into the file reads it again from the page cache. A mapped file may be larger
// than the memory this process may use (ReadFile refuses those). Anything else is read as
// ReadFile reads it, and Release does nothing.
func ReadPass(path string) (*Pass, error) {
	p := &Pass{}
	data, err := read(path, func(f *os.File, size int64) ([]byte, bool) {
		b, ok := mapPrivate(f, size, syscall.PROT_READ)
		if ok {
			syscall.Madvise(b, syscall.MADV_SEQUENTIAL) // read ahead, and drop behind early
			p.mapped = true
		}
		return b, ok
	}, true)
	p.Data = data
	return p, err
}

// Release gives back the whole pages of the mapping below upTo (less a margin: the reader's
// current event may have begun before it). A page given back and read again is read from the
// page cache: the content never changes. An offset below an earlier one says the reader starts
// over (the UTF-8 check, then the walk): pages are given back from the start again.
func (p *Pass) Release(upTo int64) {
	const margin = 1 << 20
	end := (upTo - margin) &^ (int64(os.Getpagesize()) - 1)
	if end < p.released {
		p.released = 0
	}
	if !p.mapped || end <= p.released {
		return
	}
	syscall.Madvise(p.Data[p.released:end], syscall.MADV_DONTNEED)
	p.released = end
}

// Done gives back every page of the mapping.
func (p *Pass) Done() {
	if p.mapped {
		syscall.Madvise(p.Data, syscall.MADV_DONTNEED)
		p.released = int64(len(p.Data))
	}
}

// ResidentKB is this process's resident memory as its page tables say (/proc/self/smaps_rollup:
// exact, where /proc/self/status's counters lag): what the tests of ReadPass and of the readers
// that give its pages back (Pass.Release) measure.
func ResidentKB() (int64, error) {
	b, err := os.ReadFile("/proc/self/smaps_rollup")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "Rss:" {
			return strconv.ParseInt(f[1], 10, 64)
		}
	}
	return 0, errors.New("no Rss in /proc/self/smaps_rollup")
}
