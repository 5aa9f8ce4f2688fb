package tracefile

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A .gz name is written compressed and reads back the same; nothing appears under the name
// until Close, and Abort leaves nothing behind.
func TestWriteReadBack(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"a.json", "a.json.gz"} {
		p := filepath.Join(dir, name)
		w, err := Create(p)
		if err != nil {
			t.Fatal(err)
		}
		body := strings.Repeat(`{"ph":"X"},`, 10000)
		w.WriteString(body)
		if _, err := os.Stat(p); err == nil {
			t.Fatalf("%s exists before Close", name)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		got, err := ReadFile(p)
		if err != nil || string(got) != body {
			t.Fatalf("%s: read back %d bytes, %v", name, len(got), err)
		}
		raw, _ := os.ReadFile(p)
		if IsGzipName(name) != (len(raw) < len(body)) {
			t.Errorf("%s: %d bytes on disk for %d", name, len(raw), len(body))
		}
	}
	w, _ := Create(filepath.Join(dir, "b.json"))
	w.WriteString("partial")
	w.Abort()
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Fatalf("Abort left files: %v", ents)
	}
}

func TestReadErrors(t *testing.T) {
	if _, err := ReadFile(t.TempDir()); err == nil || !strings.Contains(err.Error(), "directory") {
		t.Errorf("directory: %v", err)
	}
	p := filepath.Join(t.TempDir(), "bad.gz")
	os.WriteFile(p, []byte{0x1f, 0x8b, 0x08, 0, 0, 0, 0, 0, 0, 0xff, 1, 2, 3}, 0o644)
	if _, err := ReadFile(p); err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("corrupt gzip: %v", err)
	}
}

// An output in a directory that does not exist yet is written there, with the usual mode.
func TestCreateMakesDirAndUsualMode(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	path := filepath.Join(t.TempDir(), "new", "dir", "merged.json.gz")
	w, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w.WriteString(`{"traceEvents":[]}`)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644 (0644 less umask 022)", st.Mode().Perm())
	}
	b, err := ReadFile(path)
	if err != nil || string(b) != `{"traceEvents":[]}` {
		t.Errorf("read back %q, %v", b, err)
	}
}

func gzipFile(t *testing.T, parts ...[]byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "bomb.json.gz")
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
	for _, part := range parts {
		zw.Write(part)
	}
	zw.Close()
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// A gzip bomb of zeros is not inflated whole: reading stops once the data cannot be a trace
// (it inflated 2.8 GB from 1 MB before the parser saw byte 0).
func TestGzipBombOfZerosStopsEarly(t *testing.T) {
	p := gzipFile(t, make([]byte, 256<<20))
	data, err := ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 4<<20 {
		t.Fatalf("inflated %d bytes of zeros; want it to stop within the first MiBs", len(data))
	}
}

// Valid JSON that inflates past what the merge can hold (whitespace) is refused with a clear
// error, without inflating it.
func TestGzipBombOfSpacesCapped(t *testing.T) {
	MaxDecompressed = 8 << 20
	defer func() { MaxDecompressed = 0 }()
	p := gzipFile(t, []byte(`{"traceEvents": [`), bytes.Repeat([]byte(" "), 64<<20), []byte(`]}`))
	_, err := ReadFile(p)
	if err == nil || !strings.Contains(err.Error(), "decompresses to more than") {
		t.Fatalf("want a refusal, got %v", err)
	}
	if !strings.Contains(err.Error(), "available") {
		t.Errorf("the error should say what memory is available: %v", err)
	}
	// The limit from the machine's memory is below what is available.
	if l := decompressLimit(); l <= 0 || (availableMemory() > 0 && l >= availableMemory()) {
		t.Errorf("decompressLimit %d, available %d", l, availableMemory())
	}
}

// Text written through every path — copied, stable spans, buffers handed on with Submit and
// reused once written — reaches the file in the order it was given, plain and compressed.
func TestSubmitKeepsOrder(t *testing.T) {
	dir := t.TempDir()
	stable := strings.Repeat("s", 100<<10)
	for _, name := range []string{"m.json", "m.json.gz"} {
		p := filepath.Join(dir, name)
		w, err := Create(p)
		if err != nil {
			t.Fatal(err)
		}
		var want strings.Builder
		w.WriteString("[") // (a gzip stream is read back only if it starts like JSON)
		want.WriteString("[")
		for i := 0; i < 200; i++ {
			small := "copied " + strings.Repeat("c", i) + "\n"
			w.WriteString(small)
			want.WriteString(small)
			b := w.Buffer()
			if cap(b) < AsyncBuf || len(b) != 0 {
				t.Fatalf("Buffer: len %d cap %d", len(b), cap(b))
			}
			for len(b) < AsyncBuf/2+i {
				b = append(b, byte('a'+i%26))
			}
			want.Write(b)
			if err := w.Submit(b); err != nil {
				t.Fatal(err)
			}
			if i%3 == 0 {
				w.WriteStable(stable)
				want.WriteString(stable)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		got, err := ReadFile(p)
		if err != nil || string(got) != want.String() {
			t.Fatalf("%s: read back %d bytes of %d, %v", name, len(got), want.Len(), err)
		}
	}
}

// Valid JSON inflating far more than any trace compresses (here 64 MiB of spaces from 64 KiB) is
// refused from its own size, before it is held, whatever memory the machine has: under a
// ulimit -v or a cgroup limit that MemAvailable does not show, four such bombs ran ncclmerge out
// of memory (issue 23, item 8).
func TestGzipBombBoundByInputSize(t *testing.T) {
	InflationFloor = 1 << 20 // the default floor (256 MiB) would make the test hold that much
	defer func() { InflationFloor = 256 << 20 }()
	p := gzipFile(t, []byte(`{"traceEvents": [`), bytes.Repeat([]byte(" "), 64<<20), []byte(`]}`))
	st, _ := os.Stat(p)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := ReadFile(p)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "gzip bomb") || !strings.Contains(err.Error(), "gzip -dc") {
		t.Fatalf("want a refusal that says why and what to do, got %v", err)
	}
	if grown := after.TotalAlloc - before.TotalAlloc; grown > uint64(3*MaxInflation*st.Size()) {
		t.Errorf("allocated %d bytes for a %d-byte file: more than its bound (%d times its size)", grown, st.Size(), MaxInflation)
	}
}

// The memory a read may take is the tightest of the machine's, the cgroup's and ulimit -v's.
func TestAvailableMemoryTightest(t *testing.T) {
	a, m := availableMemory(), procValue("/proc/meminfo", "MemAvailable:")
	if m > 0 && (a <= 0 || a > m) {
		t.Errorf("available %d, MemAvailable %d", a, m)
	}
	for _, v := range []int64{cgroupRoom(), addressSpaceRoom()} {
		if v > 0 && a > v {
			t.Errorf("available %d above a tighter limit %d", a, v)
		}
	}
}

// An output that is a pipe or a device (ncclmerge merge -o /dev/null) is written in place, and
// one that is a symbolic link is written to the file it names: renaming the finished file onto
// the name replaced /dev/null, as root, with a regular file, and a link with its target.
func TestCreateKeepsDevicesAndLinks(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "out.fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("no named pipes here: %v", err)
	}
	got := make(chan []byte, 1)
	go func() {
		b, _ := os.ReadFile(fifo) // opens the reading end; returns once the writer closes
		got <- b
	}()
	w, err := Create(fifo)
	if err != nil {
		t.Fatal(err)
	}
	w.WriteString(`{"traceEvents":[]}`)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(fifo); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("the pipe was replaced: %v %v", st.Mode(), err) // (its reader waits on)
	}
	select {
	case b := <-got:
		if string(b) != `{"traceEvents":[]}` {
			t.Errorf("the pipe's reader got %q", b)
		}
	case <-time.After(time.Minute):
		t.Fatal("nothing was written to the pipe")
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*tmp*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}

	real := filepath.Join(dir, "real.json")
	os.WriteFile(real, []byte("old"), 0o644)
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink("real.json", link); err != nil {
		t.Fatal(err)
	}
	w, err = Create(link)
	if err != nil {
		t.Fatal(err)
	}
	w.WriteString("new")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was replaced: %v %v", st.Mode(), err)
	}
	if b, _ := os.ReadFile(real); string(b) != "new" {
		t.Errorf("the link's target holds %q, want the output", b)
	}
}

// An output written where a file already is (a merge run again) replaces it whole: the new
// content under the name, the old file gone, no temporary left. (On Linux the two are swapped
// and the old one removed, which spares ext4's write-back on a rename over a file.)
func TestCreateReplacesAnExistingFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "merged.json")
	for _, content := range []string{"first", "second, longer", "third"} {
		w, err := Create(path)
		if err != nil {
			t.Fatal(err)
		}
		w.WriteString(content)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(path); err != nil || string(b) != content {
			t.Fatalf("read back %q, %v; want %q", b, err, content)
		}
	}
	if all, _ := os.ReadDir(dir); len(all) != 1 {
		t.Errorf("files left beside the output: %v", all)
	}
}
