package why

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/ncclprof/ncclprof/internal/commops"
	"github.com/ncclprof/ncclprof/internal/synth"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// manyCauses: 8 ranks × 80 AllReduces (8 steps) merged one file per rank, with a cause of each
// kind planted: host (data loading) on rank 5 at seq 33 and 67, GPU compute on rank 2 at seq 12
// and a dependency on it at seq 50, a slow link from rank 6 at seq 45.
func manyCauses(tb testing.TB, dir string) []string {
	tb.Helper()
	o := synth.DefaultJob(8, 80)
	o.Detail = true
	o.SlowRank, o.SlowNs, o.SlowEvery = 5, plantNs, 34
	o.GPUSlowRank, o.GPUSlowNs, o.GPUSlowOps = 2, plantNs, []int{12, 50}
	o.NetSlowRanks, o.NetSlowNs, o.NetSlowOps = []int{6}, plantNs, []int{45}
	w, err := synth.WorkFrom("../../testdata/kineto/nccl_parser_config_nccl_data.json.gz", 12)
	if err != nil {
		tb.Fatal(err)
	}
	return mergedRanks(tb, dir, o, func(r int) *synth.Work {
		rw := *w
		switch r {
		case 5:
			rw.Plants = []synth.Plant{{Cause: synth.PlantHost, Seq: 33, Ns: plantNs}, {Cause: synth.PlantHost, Seq: 67, Ns: plantNs}}
		case 2:
			rw.Plants = []synth.Plant{{Cause: synth.PlantGPUCompute, Seq: 12, Ns: plantNs}, {Cause: synth.PlantDependency, Seq: 50, Ns: plantNs}}
		}
		return &rw
	})
}

// canonical is a result as JSON, its files named without their (temporary) directory.
func canonical(tb testing.TB, res *Result) []byte {
	tb.Helper()
	for i := range res.Rows {
		res.Rows[i].File = filepath.Base(res.Rows[i].File)
	}
	b, err := json.MarshalIndent(res, "", " ")
	if err != nil {
		tb.Fatal(err)
	}
	return append(b, '\n')
}

// The answer on a multi-step, multi-rank job with every cause planted is the one the whole-job
// analysis gave (testdata/many_causes.json: written by the analysis that kept every rank's
// spans to the end, at 99f2be3), read in one pass with the operations (as ncclmerge why does)
// and read afterwards (ReadAll).
func TestStreamedEqualsWholeJob(t *testing.T) {
	files := manyCauses(t, t.TempDir())
	golden := filepath.Join("testdata", "many_causes.json")
	got := canonical(t, whyOf(t, files, Defaults))
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("one pass: the answer differs from %s:\n%s", golden, got)
	}
	s, err := commops.Read(files, commops.Options{})
	if err != nil {
		t.Fatal(err)
	}
	acts, err := ReadAll(s)
	if err != nil {
		t.Fatal(err)
	}
	if again := canonical(t, Analyze(s, acts, Defaults)); !bytes.Equal(again, want) {
		t.Errorf("ReadAll: the answer differs from %s:\n%s", golden, again)
	}
}
