package traceevent

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ncclprof/ncclprof/internal/tracefile"
)

// residentKB is this process's resident memory (tracefile.ResidentKB).
func residentKB(t *testing.T) int64 {
	kb, err := tracefile.ResidentKB()
	if err != nil {
		t.Skip(err)
	}
	return kb
}

// A one-pass read of a mapped file (tracefile.ReadPass) with Release never holds much of the
// file at once: the UTF-8 check and the parallel walk both give its pages back behind them, and
// the walk's chunks are cut as it goes (cut up front, every MiB was touched before the first
// event and the whole file came in at once).
func TestReadReleasesAsItGoes(t *testing.T) {
	var b strings.Builder
	b.WriteString("{\"traceEvents\": [\n")
	for i := 0; b.Len() < 128<<20; i++ {
		if i > 0 {
			b.WriteString(",\n")
		}
		b.WriteString(`{"ph": "X", "name": "kernel", "ts": ` + strconv.Itoa(i) + `, "dur": 1, "pid": 1, "tid": 2, "args": {"a": "` + strings.Repeat("x", 200) + `"}}`)
	}
	b.WriteString("\n]}\n")
	path := filepath.Join(t.TempDir(), "big.json")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	size := int64(b.Len())
	b.Reset()
	in, err := tracefile.ReadPass(path)
	if err != nil {
		t.Fatal(err)
	}
	base := residentKB(t)
	peak, n := int64(0), 0
	_, err = Read(path, in.Data, Options{Release: func(upTo int64) {
		in.Release(upTo)
		peak = max(peak, residentKB(t)-base)
	}}, func(e *Event) error {
		n++
		if n%20000 == 0 {
			peak = max(peak, residentKB(t)-base)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if peak > size/1024/4 {
		t.Errorf("the read held up to %d KB of a %d KB file at once: want a window of it, not a quarter", peak, size/1024)
	}
	t.Logf("%d events, %d KB file, at most %d KB resident beyond the start", n, size/1024, peak)
}
