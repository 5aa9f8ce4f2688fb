// Package tracefile reads and writes trace files: JSON, plain or gzip-compressed, recognized by
// content when read and by name when written.
package tracefile

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"syscall"
)

// gzipMagic starts every gzip stream; files are recognized by content, not by name.
var gzipMagic = []byte{0x1f, 0x8b}

// ReadFile returns the whole content of path, decompressed if it is gzip. The buffer is sized
// up front (the file size, or gzip's recorded length) so a large trace is held once, without
// the doubling copies of a growing buffer.
func ReadFile(path string) ([]byte, error) { return read(path, nil, false) }

// read is ReadFile; where mapPlain is given, it may provide a plain file's content instead of
// a buffer (MapFile's mapping; false: read it into a buffer after all). passed: the mapping is
// read once with its pages given back (ReadPass), so it needs no memory of the file's size.
func read(path string, mapPlain func(f *os.File, size int64) ([]byte, bool), passed bool) ([]byte, error) {
	f, st, err := OpenRegular(path, "a trace file")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size := st.Size()
	var head [2]byte
	n, _ := io.ReadFull(f, head[:])
	if n == 2 && bytes.Equal(head[:], gzipMagic) {
		return readGzip(f, path, size)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	if passed {
		if b, ok := mapPlain(f, size); ok {
			return b, nil
		}
	}
	if limit := decompressLimit(); MaxDecompressed <= 0 && size > limit {
		return nil, fmt.Errorf("%s: %s, more than this machine can merge (a trace needs about 1.5× its size in memory; %s available to this process)", path, fmtGB(size), fmtGB(availableMemory()))
	}
	if mapPlain != nil && !passed {
		if b, ok := mapPlain(f, size); ok {
			return b, nil
		}
	}
	buf := make([]byte, size)
	if _, err := io.ReadFull(f, buf); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return buf, nil
}

// OpenRegular opens path (symlinks followed) for reading if it is a regular file, and says what it
// is otherwise (what names what was expected, "a trace file"). It never blocks: a FIFO or a
// device among the inputs (a named pipe, a link to /dev/zero) is refused, not read forever.
func OpenRegular(path, what string) (*os.File, os.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		kind := "not a regular file"
		switch {
		case st.IsDir():
			kind = "a directory"
		case st.Mode()&os.ModeNamedPipe != 0:
			kind = "a named pipe (FIFO)"
		case st.Mode()&os.ModeDevice != 0:
			kind = "a device"
		}
		err = fmt.Errorf("%s is %s, not %s: only regular files are read", path, kind, what)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, st, nil
}

func readGzip(f *os.File, path string, compressed int64) ([]byte, error) {
	hint := gzipSizeHint(f, compressed)
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: not a readable gzip file (%v); check that the file is complete", path, err)
	}
	defer zr.Close()
	machine := MaxDecompressed
	if machine <= 0 {
		machine = decompressLimit()
	}
	limit := machine
	// A trace inflates some 7-18 times (the Kineto traces of testdata); a stream that inflates
	// past InflationFloor and more than MaxInflation times its file is a bomb, refused before it
	// is held.
	byInput := max(compressed*MaxInflation, InflationFloor)
	if byInput < limit {
		limit = byInput
	}
	held := int64(0) // what this read counts in inflating
	defer func() { inflating.Add(-held) }()
	// One byte more than the hint, so a correct hint ends with room to spare and no regrowth.
	buf := make([]byte, 0, min(int64(hint), limit)+1)
	for {
		// Reads in parallel share the machine's room: all of them together stay within it.
		inflating.Add(int64(len(buf)) - held)
		held = int64(len(buf))
		if int64(len(buf)) > limit || inflating.Load() > machine {
			if limit == byInput && int64(len(buf)) > limit {
				return nil, fmt.Errorf("%s: decompresses to more than %d times its size (%s from %s): no trace compresses that well, so it is refused as a gzip bomb; if it is a real trace, decompress it with `gzip -dc` and give the JSON", path, MaxInflation, fmtGB(limit), fmtGB(compressed))
			}
			return nil, fmt.Errorf("%s: decompresses to more than %s, more than this machine can merge (a trace needs about 1.5× its size in memory; %s available to this process: the least of MemAvailable, the cgroup's memory.max and ulimit -v); if the file is a real trace, decompress it with `gzip -dc` and check its content", path, fmtGB(limit), fmtGB(availableMemory()))
		}
		if len(buf) >= sniffAt && !jsonStart(buf) {
			// Not a trace: stop before inflating the rest (a gzip bomb of zeros would
			// otherwise fill memory before the parser saw its first byte).
			return buf, nil
		}
		if len(buf) == cap(buf) {
			// The hint was short (a stream over 4 GiB wraps gzip's length field): grow by a
			// quarter rather than double, to keep the transient copy small.
			nb := make([]byte, len(buf), min(int64(cap(buf)+cap(buf)/4+1<<20), limit+1))
			copy(nb, buf)
			buf = nb
		}
		n, err := zr.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, fmt.Errorf("%s: the gzip stream is truncated after %d bytes of data (the file was cut while being written or copied); copy it again, or salvage it with `gzip -dc %s > out.json`", path, len(buf), path)
			}
			return nil, fmt.Errorf("%s: corrupt gzip data after %d bytes of data: %v", path, len(buf), err)
		}
	}
}

// gzipSizeHint reads the length gzip records at the end of the stream (ISIZE, modulo 2^32),
// trusting it only where it is plausible for JSON (compression ratios up to 100:1).
func gzipSizeHint(f *os.File, compressed int64) int {
	const minHint = 1 << 16
	if compressed < 18 {
		return minHint
	}
	var tail [4]byte
	if _, err := f.ReadAt(tail[:], compressed-4); err != nil {
		return minHint
	}
	isize := int64(binary.LittleEndian.Uint32(tail[:]))
	if isize < compressed/2 || isize > compressed*100 {
		return int(min(compressed*8, 1<<30))
	}
	return int(isize)
}

// MaxInflation is how many times its compressed size a gzip input may inflate to, past
// InflationFloor (small, very repetitive files inflate more and are harmless).
// InflationFloor is a variable for tests.
const MaxInflation = 100

var InflationFloor int64 = 256 << 20

// inflating is what the gzip reads in progress hold, together.
var inflating atomic.Int64

// MaxDecompressed caps the size a gzip trace may decompress to (0: from the memory available,
// see decompressLimit). Tests set it.
var MaxDecompressed int64

// sniffAt: after this many decompressed bytes a trace must have shown its first JSON byte.
const sniffAt = 1 << 20

// jsonStart reports whether the data so far can start a JSON trace: whitespace, then '{' or
// '[' (or only whitespace so far).
func jsonStart(b []byte) bool {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		case '{', '[':
			return true
		}
		return false
	}
	return true
}

// decompressLimit is the most a decompressed trace may take: two thirds of the memory
// available to this process now (the merge holds the text once, and its indexes and output
// buffers need about half as much again).
func decompressLimit() int64 {
	if a := availableMemory(); a > 0 {
		return a * 2 / 3
	}
	return 16 << 30
}

// availableMemory is the memory this process may still take, in bytes (0 if unknown): the
// least of the machine's MemAvailable, the room left under its cgroup's memory.max and the
// address space left under ulimit -v, since whichever is tightest ends the process first.
func availableMemory() int64 {
	avail := int64(0)
	for _, v := range []int64{procValue("/proc/meminfo", "MemAvailable:"), cgroupRoom(), addressSpaceRoom()} {
		if v > 0 && (avail == 0 || v < avail) {
			avail = v
		}
	}
	return avail
}

// procValue reads a "Name:  N kB" line of a /proc file, in bytes (0 if absent).
func procValue(path, name string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, l := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(l, []byte(name)); ok {
			var kb int64
			fmt.Sscanf(string(bytes.TrimSpace(v)), "%d", &kb)
			return kb << 10
		}
	}
	return 0
}

// cgroupRoom is memory.max less memory.current of this process's cgroup (v2), 0 when unlimited
// or unknown.
func cgroupRoom() int64 {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0
	}
	_, rel, ok := bytes.Cut(bytes.TrimSpace(b), []byte("0::"))
	if !ok {
		return 0
	}
	dir := "/sys/fs/cgroup" + string(bytes.TrimSpace(rel))
	var limit, used int64
	if m, err := os.ReadFile(dir + "/memory.max"); err == nil {
		fmt.Sscanf(string(m), "%d", &limit)
	}
	if limit <= 0 {
		return 0 // "max": unlimited
	}
	if c, err := os.ReadFile(dir + "/memory.current"); err == nil {
		fmt.Sscanf(string(c), "%d", &used)
	}
	return max(limit-used, 1)
}

// addressSpaceRoom is RLIMIT_AS (ulimit -v) less the address space in use, 0 when unlimited.
func addressSpaceRoom() int64 {
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_AS, &rl) != nil || rl.Cur == ^uint64(0) || rl.Cur > 1<<62 {
		return 0
	}
	return max(int64(rl.Cur)-procValue("/proc/self/status", "VmSize:"), 1)
}

func fmtGB(n int64) string { return fmt.Sprintf("%.1f GB", float64(n)/1e9) }

// Pass is a file's content for one pass (ReadPass).
type Pass struct {
	Data     []byte
	mapped   bool
	released int64 // the pages below it were given back
}
