package kineto

import (
	"testing"

	"github.com/ncclprof/ncclprof/internal/tracefile"
)

// BenchmarkRead measures validating and walking a real trace held in memory.
func BenchmarkRead(b *testing.B) {
	data, err := tracefile.ReadFile(realTrace(b, "negative_queue_length_values_check_rank0.json.gz"))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n := 0
		if _, err := Parse("bench", data, Options{}, func(e *Event) error { n++; return nil }); err != nil {
			b.Fatal(err)
		}
	}
}
