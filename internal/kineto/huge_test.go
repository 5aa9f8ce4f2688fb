package kineto

import (
	"runtime"
	"strings"
	"testing"
)

// A 100 MB string (a runaway kernel name or an args blob) is read like any other, without a
// copy per use: memory held after parsing stays within a small multiple of the input.
func TestHundredMegabyteString(t *testing.T) {
	const n = 100 << 20
	doc := []byte(`{"baseTimeNanoseconds":1700000000000000000,"traceEvents":[{"ph":"X","cat":"kernel","name":"` + strings.Repeat("a", n) +
		`","pid":0,"tid":7,"ts":1,"dur":2,"args":{"blob":"` + strings.Repeat("b", n) + `"}},` +
		`{"ph":"X","cat":"cpu_op","name":"after","pid":1,"tid":1,"ts":3,"dur":1}]}`)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var names []int
	_, err := Parse("huge.json", doc, Options{}, func(e *Event) error {
		names = append(names, len(e.Name))
		return nil
	})
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if len(names) != 2 || names[0] != n || names[1] != len("after") {
		t.Fatalf("event name lengths %v, want [%d 5]", names, n)
	}
	// TotalAlloc counts every allocation made while parsing, freed or not.
	t.Logf("a %d MB document: %d MB allocated while parsing", len(doc)>>20, (after.TotalAlloc-before.TotalAlloc)>>20)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > uint64(len(doc)/10) {
		t.Errorf("parsing a %d MB document allocated %d MB", len(doc)>>20, grew>>20)
	}
	runtime.KeepAlive(doc)
}
