package why

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/ncclprof/ncclprof/internal/commops"
	"github.com/ncclprof/ncclprof/internal/merge"
	"github.com/ncclprof/ncclprof/internal/synth"
	"github.com/ncclprof/ncclprof/internal/tracefile"
)

// The planted rank and collective: rank 5, seq 33 (step 3: ten collectives a step).
const (
	plantRank = 5
	plantSeq  = 33
	plantNs   = 1_000_000
)

// realWork is the compute before each collective: the first 12 compute kernels of a real
// torch.profiler trace with the operators that launched them, 5 % noise on every rank.
func realWork(t *testing.T) *synth.Work {
	t.Helper()
	w, err := synth.WorkFrom("../../testdata/kineto/nccl_parser_config_nccl_data.json.gz", 12)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// plantedJob synthesizes an 8-rank job of 60 AllReduces (the plugin's full detail, 20 µs of
// arrival jitter), plants one cause on rank 5 at seq 33 with plant (nil: none), writes each
// rank's Kineto trace with the real work (and the planted Kineto side on rank 5), merges all
// into one timeline and returns what ncclmerge why reads.
func plantedJob(t *testing.T, plant func(o *synth.JobOptions) string) (*commops.Set, []Activity) {
	t.Helper()
	o := synth.DefaultJob(8, 60)
	o.SlowRank, o.Detail = -1, true
	kinetoPlant := ""
	if plant != nil {
		kinetoPlant = plant(&o)
	}
	dir := t.TempDir()
	traces, err := synth.Job(filepath.Join(dir, "nccl"), o)
	if err != nil {
		t.Fatal(err)
	}
	kin := kinetoTraces(t, dir, traces, func(r int) *synth.Work {
		w := *realWork(t)
		if r == plantRank && kinetoPlant != "" {
			w.Plants = []synth.Plant{{Cause: kinetoPlant, Seq: plantSeq, Ns: plantNs}}
		}
		return &w
	})
	out := filepath.Join(dir, "timeline.json.gz")
	if _, err := merge.Run(kin, traces, out, merge.Options{Timeline: true}); err != nil {
		t.Fatal(err)
	}
	s, err := commops.Read([]string{out}, commops.Options{})
	if err != nil {
		t.Fatal(err)
	}
	acts, err := ReadAll(s)
	if err != nil {
		t.Fatal(err)
	}
	return s, acts
}

// checkPlanted: exactly one row, the planted cause on rank 5 at seq 33 in step 3, late by the
// planted 1 ms (± the 20 µs jitter and the work's noise), its evidence naming want.
func checkPlanted(t *testing.T, res *Result, cause string, want ...string) {
	t.Helper()
	var buf bytes.Buffer
	res.WriteText(&buf)
	if len(res.Rows) != 1 {
		t.Fatalf("%d rows, want one:\n%s", len(res.Rows), buf.String())
	}
	r := res.Rows[0]
	if r.Cause != cause || r.Rank != plantRank || r.Seq != plantSeq || r.Step != "step 3" {
		t.Fatalf("rank %d seq %d %s: %s, want %s on rank %d seq %d step 3\n%s", r.Rank, r.Seq, r.Step, r.Cause, cause, plantRank, plantSeq, buf.String())
	}
	if r.LateNs < plantNs*85/100 || r.LateNs > plantNs*115/100 {
		t.Errorf("late by %d ns, planted %d ns", r.LateNs, plantNs)
	}
	for _, w := range want {
		if !strings.Contains(r.Summary, w) {
			t.Errorf("summary %q does not say %q", r.Summary, w)
		}
	}
	t.Log(buf.String())
}

// Nothing planted: skew finds no late arrival and no collective is slow, so nothing is named.
func TestNothingPlantedNothingNamed(t *testing.T) {
	s, acts := plantedJob(t, nil)
	res := Analyze(s, acts, Defaults)
	if len(res.Rows) != 0 || res.LateArrivals != 0 || res.SlowCollectives != 0 {
		var buf bytes.Buffer
		res.WriteText(&buf)
		t.Fatalf("causes named where nothing was planted:\n%s", buf.String())
	}
	if res.Arrivals["gpu (kernel)"] != 60 {
		t.Errorf("arrivals %v: want all 60 collectives compared on their linked kernels", res.Arrivals)
	}
}

// The GPU is late while the CPU is on time, after compute kernels that ran 1 ms longer.
func TestPlantedGPUCompute(t *testing.T) {
	s, acts := plantedJob(t, func(o *synth.JobOptions) string {
		o.GPUSlowRank, o.GPUSlowNs, o.GPUSlowOps = plantRank, plantNs, []int{plantSeq}
		return synth.PlantGPUCompute
	})
	w := realWork(t)
	checkPlanted(t, Analyze(s, acts, Defaults), GPUCompute, "GPU compute", "its CPU called on time",
		shortName(w.Kernels[0].Kernel), "launched by "+w.Kernels[0].Op)
}

// The GPU is late while the CPU is on time, its kernel queued behind a copy on another stream.
func TestPlantedDependency(t *testing.T) {
	s, acts := plantedJob(t, func(o *synth.JobOptions) string {
		o.GPUSlowRank, o.GPUSlowNs, o.GPUSlowOps = plantRank, plantNs, []int{plantSeq}
		return synth.PlantDependency
	})
	checkPlanted(t, Analyze(s, acts, Defaults), Dependency, "another stream's work", "Memcpy DtoD", "stream 22")
}

// The CPU calls 1 ms late, its launching thread in the data loader.
func TestPlantedHost(t *testing.T) {
	s, acts := plantedJob(t, func(o *synth.JobOptions) string {
		o.SlowRank, o.SlowNs, o.SlowEvery = plantRank, plantNs, plantSeq+1 // seq 33 alone of 60
		return synth.PlantHost
	})
	checkPlanted(t, Analyze(s, acts, Defaults), Host, "data loading", "DataLoader")
}

// The CPU calls 1 ms late and nothing on its thread shows why: a host gap, said as such.
func TestPlantedHostGap(t *testing.T) {
	s, acts := plantedJob(t, func(o *synth.JobOptions) string {
		o.SlowRank, o.SlowNs, o.SlowEvery = plantRank, plantNs, plantSeq+1
		return ""
	})
	checkPlanted(t, Analyze(s, acts, Defaults), Host, "recorded nothing")
}

// Rank 5 arrives on time but its transfers of seq 33 take 1 ms longer: the link to its ring
// peer 6 is named, slower than that link's usual and than the collective's other links.
func TestPlantedNetwork(t *testing.T) {
	s, acts := plantedJob(t, func(o *synth.JobOptions) string {
		o.NetSlowRanks, o.NetSlowNs, o.NetSlowOps = []int{plantRank}, plantNs, []int{plantSeq}
		return ""
	})
	res := Analyze(s, acts, Defaults)
	// The late completion is not a late arrival; the transfer's lateness is what it added.
	checkPlanted(t, res, Network, "peer 6", "usual on that link")
}

// Every rank's transfers of seq 33 take 1 ms longer (a busy machine, not a link): the collective
// is slow, but no link is blamed. (Before links were held to the collective's other links, the
// link that ran furthest below its usual was named.)
func TestAllLinksSlowNoLinkBlamed(t *testing.T) {
	s, acts := plantedJob(t, func(o *synth.JobOptions) string {
		o.NetSlowRanks, o.NetSlowNs, o.NetSlowOps = []int{0, 1, 2, 3, 4, 5, 6, 7}, plantNs, []int{plantSeq}
		return ""
	})
	res := Analyze(s, acts, Defaults)
	if res.SlowCollectives != 1 || len(res.Rows) != 0 {
		var buf bytes.Buffer
		res.WriteText(&buf)
		t.Errorf("%d slow collectives, want 1 and no cause named:\n%s", res.SlowCollectives, buf.String())
	}
}

// Ranks on hosts of their own whose collectives' ends scatter by up to ±0.8 ms (clocks that align
// badly): a 1 ms lateness is within the alignment's error, so the cause is not named.
func TestLooseClocksSayUnknown(t *testing.T) {
	s, acts := plantedJob(t, func(o *synth.JobOptions) string {
		o.SlowRank, o.SlowNs, o.SlowEvery = plantRank, plantNs, plantSeq+1
		return synth.PlantHost
	})
	for i := range s.Procs {
		s.Procs[i].Host = fmt.Sprintf("host%d", i)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range s.Ops {
		s.Ops[i].Done += int64(rng.IntN(1601)-800) * 1000 // ±0.8 ms, a different error on each end
	}
	res := Analyze(s, acts, Defaults)
	for _, r := range res.Rows {
		if r.Cause != Unknown || !strings.Contains(r.Summary, "clocks aligned within") {
			t.Errorf("rank %d seq %d: %s (%s), want unknown: clocks too loose", r.Rank, r.Seq, r.Cause, r.Summary)
		}
	}
	if len(res.Rows) == 0 {
		t.Error("no late arrival found")
	}
}

// What is kept of a file is its digests, not the file: no string kept may point into the file's
// buffer. (A Coll's function name, kept as read, held every merged file whole: 20 KB per
// operation, 164 MB for 8 ranks × 1,000 collectives.)
func TestActivityKeepsNoFileBuffer(t *testing.T) {
	s, _ := plantedJob(t, nil)
	data, err := tracefile.ReadFile(s.Files[0]) // as read: gunzipped
	if err != nil {
		t.Fatal(err)
	}
	size := len(data)
	data = nil
	before := heapInUse()
	acts, err := ReadAll(s)
	if err != nil {
		t.Fatal(err)
	}
	kept := heapInUse() - before
	runtime.KeepAlive(acts)
	t.Logf("kept %d bytes for a file of %d bytes (%d operations)", kept, size, len(s.Ops))
	if kept > uint64(size)/4 {
		t.Errorf("the activity of %d operations keeps %d bytes: a file of %d bytes read whole is held", len(s.Ops), kept, size)
	}
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// Sampled traces (1 in 3, seq 33 among those kept): the operations between two sampled ones are
// not in the trace, so the late rank's interval cannot be compared with the others': the planted
// host lateness is found by skew, and its cause is unknown, saying that the trace is sampled.
func TestSampledTraceSaysUnknown(t *testing.T) {
	s, acts := plantedJob(t, func(o *synth.JobOptions) string {
		o.Sample = 3
		o.SlowRank, o.SlowNs, o.SlowEvery = plantRank, plantNs, plantSeq+1
		return synth.PlantHost
	})
	checkPlanted(t, Analyze(s, acts, Defaults), Unknown, "sampled 1/3 trace", "are not all in it")
}

// A file holds about 40 spans per operation while it is read: its fields are ordered to pack in
// 40 bytes (48 with the name before the thread, 8 bytes × 40 per operation more).
func TestSpanPacks(t *testing.T) {
	if n := unsafe.Sizeof(span{}); n != 40 {
		t.Errorf("a span takes %d bytes, want 40: keep its 8-byte fields first", n)
	}
}
