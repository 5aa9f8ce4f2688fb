package ptrace

import (
	"bytes"
	"runtime"
	"testing"
)

// A 100 MB communicator name (NCCL copies whatever the application passes) is read without
// being copied, and every event around it still is.
func TestHundredMegabyteString(t *testing.T) {
	const n = 100 << 20
	small := readFixture(t, "small.trace.json")
	doc := bytes.ReplaceAll(small, []byte(`"world"`), append(append([]byte(`"`), bytes.Repeat([]byte("w"), n)...), '"'))
	want, err := Parse("small.trace.json", small)
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	tr, err := Parse("huge.trace.json", doc)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if len(tr.Comms) != 1 || len(tr.Comms[0].Name) != n || len(tr.Events) != len(want.Events) {
		t.Fatalf("%d comms, %d events (want 1 comm named by %d bytes, %d events)",
			len(tr.Comms), len(tr.Events), n, len(want.Events))
	}
	grew := after.TotalAlloc - before.TotalAlloc
	t.Logf("a %d MB document: %d MB allocated while parsing", len(doc)>>20, grew>>20)
	if grew > uint64(len(doc))/10 {
		t.Errorf("parsing a %d MB document allocated %d MB", len(doc)>>20, grew>>20)
	}
}
