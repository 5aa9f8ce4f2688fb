package merge

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// A directory where the plugin, torch.profiler and earlier merges all wrote: each side of a
// merge takes only its own files.
func TestExpandPicksEachSide(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"ncclprof-node7-4242-0.trace.json", "ncclprof-node7-4242-1.1.trace.json.gz",
		"ncclprof-summary-node7-4242-00000000000000aa-r0.json", "ncclprof-metrics-node7-4242.jsonl",
		"node7_4242.1716423323009.pt.trace.json", "rank0.pt.trace.json.gz", "rank0.merged.json.gz",
		"node7_4242.merged.json"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	base := func(ps []string) []string {
		var out []string
		for _, p := range ps {
			out = append(out, filepath.Base(p))
		}
		return out
	}
	nccl, err := ExpandFor([]string{dir}, PluginTrace)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"ncclprof-node7-4242-0.trace.json", "ncclprof-node7-4242-1.1.trace.json.gz"}; !reflect.DeepEqual(base(nccl), want) {
		t.Errorf("plugin side %v, want %v", base(nccl), want)
	}
	kin, err := ExpandFor([]string{dir}, KinetoTrace)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"node7_4242.1716423323009.pt.trace.json", "rank0.pt.trace.json.gz"}; !reflect.DeepEqual(base(kin), want) {
		t.Errorf("Kineto side %v, want %v", base(kin), want)
	}
	// Named explicitly, a file is taken as given.
	if got, _ := ExpandFor([]string{filepath.Join(dir, "rank0.merged.json.gz")}, KinetoTrace); len(got) != 1 {
		t.Errorf("an explicit file was filtered out: %v", got)
	}
}
