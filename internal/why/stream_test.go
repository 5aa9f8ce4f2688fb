package why

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/ncclprof/ncclprof/internal/commops"
	"github.com/ncclprof/ncclprof/internal/synth"
	"github.com/ncclprof/ncclprof/internal/traceevent"
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
	onePass := canonical(t, whyOf(t, files, Defaults))
	s, err := commops.Read(files, commops.Options{})
	if err != nil {
		t.Fatal(err)
	}
	acts, err := ReadAll(s)
	if err != nil {
		t.Fatal(err)
	}
	readAll := canonical(t, Analyze(s, acts, Defaults))
	golden := filepath.Join("testdata", "many_causes.json")
	want, err := os.ReadFile(golden)
	if *update {
		want, err = onePass, os.WriteFile(golden, onePass, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, got := range []struct {
		how    string
		answer []byte
	}{{"one pass", onePass}, {"ReadAll", readAll}} {
		if !bytes.Equal(got.answer, want) {
			t.Errorf("%s: the answer differs from %s:\n%s", got.how, golden, got.answer)
		}
	}
}

// keptBy is the heap the activities of a job of 8 ranks × n collectives hold once read in one
// pass (as ncclmerge why reads), and how many operations it has; it checks every span was
// dropped.
func keptBy(t *testing.T, n int) (uint64, int) {
	t.Helper()
	o := synth.DefaultJob(8, n)
	o.Detail = true
	files := mergedRanks(t, t.TempDir(), o, func(int) *synth.Work { return synth.DefaultWork() })
	col := NewCollector()
	s, err := commops.Read(files, commops.Options{Also: col.Hook})
	if err != nil {
		t.Fatal(err)
	}
	acts := col.Activities(s)
	for f, a := range acts {
		for _, act := range a.groups {
			if len(act.kernels)+len(act.calls)+len(act.cpu) > 0 || !act.Kineto() || len(act.digests) == 0 {
				t.Fatalf("file %d: %d kernels, %d calls, %d CPU slices kept, %d digests", f, len(act.kernels), len(act.calls), len(act.cpu), len(act.digests))
			}
		}
	}
	var nd, na, ns, nn int
	for _, a := range acts {
		for _, act := range a.groups {
			nd, na, ns, nn = nd+len(act.digests), na+len(act.arena), ns+len(act.sent), nn+len(act.names)
		}
	}
	t.Logf("%d digests, %d arena entries, %d sent, %d names", nd, na, ns, nn)
	held := heapInUse()
	runtime.KeepAlive(acts)
	runtime.KeepAlive(col)
	freed := heapInUse() // without the activities
	runtime.KeepAlive(s)
	return held - freed, len(s.Ops)
}

// What why holds until every file is read is each operation's digest and what it sent, not its
// spans: per operation it is no more after 16 steps than after 4, and under 360 bytes with
// synth.DefaultWork's 3 compute kernels before each collective (at 99f2be3, which kept the
// spans, the same measure gave 693 and 677 bytes per operation).
func TestKeptPerOperation(t *testing.T) {
	small, nSmall := keptBy(t, 40)
	large, nLarge := keptBy(t, 160)
	per := func(b uint64, n int) float64 { return float64(b) / float64(n) }
	t.Logf("kept %d bytes for %d operations (%.0f B each), %d for %d (%.0f B each)", small, nSmall, per(small, nSmall), large, nLarge, per(large, nLarge))
	if per(large, nLarge) > 360 {
		t.Errorf("%.0f bytes kept per operation, want under 360", per(large, nLarge))
	}
	if per(large, nLarge) > 1.15*per(small, nSmall) {
		t.Errorf("per operation, %.0f bytes kept after 16 steps against %.0f after 4: more than what is kept per operation", per(large, nLarge), per(small, nSmall))
	}
}

// launchArgs finds what gjson's lookups found: the first correlation, as a number or quoted,
// and an nccl member of any value.
func TestLaunchArgsAsGjson(t *testing.T) {
	for _, args := range []string{
		`{"correlation": 123, "nccl": {"coll": "0x1"}}`,
		`{"External id": 7, "correlation": "456"}`,
		`{"correlation": 9, "correlation": 10, "nccl": null}`,
		`{"stream": 7, "device": 0}`,
		`{"correlation": 1.5e3, "grid": [1, 2, 3]}`,
		`{}`,
	} {
		raw := `{"args": ` + args + `}`
		e := &traceevent.Event{Raw: raw, ArgsSpan: traceevent.Span{Start: int32(len(`{"args": `)), End: int32(len(raw) - 1)}}
		corr, nccl := launchArgs(e)
		if corr != e.Arg("correlation").Int() || nccl != e.Arg("nccl").Exists() {
			t.Errorf("%s: correlation %d, nccl %v; gjson: %d, %v", args, corr, nccl, e.Arg("correlation").Int(), e.Arg("nccl").Exists())
		}
	}
}
