package hosttest

import (
	"os"
	"strings"
	"testing"
)

// TestSummaryOnFullDisk (issue 14 item 9): with the output directory's disk full, the plugin
// writes no summary rather than an empty or partial one (before: a 0-byte file), says so once,
// and the job ends normally.
func TestSummaryOnFullDisk(t *testing.T) {
	dir := SmallDisk(t, "64k")
	FillDisk(t, dir)
	r := Start(t, Options{Args: args(6, "--iters", "50", "allreduce"),
		Env: []string{"NCCLPROF_OUTPUT_DIR=" + dir, "NCCLPROF_METRICS=none"}})
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.Name() != "filler" {
			fi, _ := e.Info()
			t.Errorf("%s (%d bytes) left on the full disk", e.Name(), fi.Size())
		}
	}
	if n := strings.Count(string(r.Stderr), "cannot write the communicator summary"); n != 1 {
		t.Errorf("want one warning about the summary, got %d:\n%s", n, r.Stderr)
	}
}
