package traceevent

import (
	"os"
	"testing"
)

// BenchmarkReadFile reads $TRACEEVENT_BENCH_FILE with Read (validating every event), for
// measuring the scanner on a real or synthesized trace: go test -bench ReadFile -cpu 1.
func BenchmarkReadFile(b *testing.B) {
	path := os.Getenv("TRACEEVENT_BENCH_FILE")
	if path == "" {
		b.Skip("set TRACEEVENT_BENCH_FILE to a trace")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := Read(path, data, Options{}, func(*Event) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
}
