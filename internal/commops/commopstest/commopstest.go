// Package commopstest gives the analyses' tests their inputs: synthesized jobs read as operation
// sets, and trace totals computed without the readers under test.
package commopstest

import (
	"encoding/json"
	"math"
	"os"
	"testing"

	"github.com/ncclprof/ncclprof/internal/commops"
	"github.com/ncclprof/ncclprof/internal/synth"
)

// Job writes the plugin traces of a synthesized job into a temporary directory and reads them.
func Job(t testing.TB, o synth.JobOptions, opt commops.Options) (*commops.Set, []string) {
	t.Helper()
	paths, err := synth.Job(t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	s, err := commops.Read(paths, opt)
	if err != nil {
		t.Fatal(err)
	}
	return s, paths
}

// CompletionTotals adds up the completion spans (nccl_op slices) of plugin traces read as plain
// JSON with encoding/json: their time (ns), bytes and number.
func CompletionTotals(t testing.TB, paths []string) (ns, bytes, n int64) {
	t.Helper()
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			TraceEvents []struct {
				Cat  string      `json:"cat"`
				Dur  json.Number `json:"dur"`
				Args struct {
					Bytes int64 `json:"bytes"`
				} `json:"args"`
			} `json:"traceEvents"`
		}
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		for _, e := range doc.TraceEvents {
			if e.Cat == "nccl_op" {
				d, _ := e.Dur.Float64()
				ns += int64(math.Round(d * 1000))
				bytes += e.Args.Bytes
				n++
			}
		}
	}
	return
}
