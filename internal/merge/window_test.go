package merge

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/ncclprof/ncclprof/internal/kineto"
	"github.com/ncclprof/ncclprof/internal/synth"
)

// cutWindow writes the Kineto trace src as a profiler started at cut (ns after its base)
// would have recorded it: CPU events before cut are gone, GPU events that ended before it
// too, but a kernel launched before cut that runs after it is kept (CUPTI records it, its
// launch call it does not). The launch calls (and their flow starts) of the correlations in
// lost are dropped as well: launches Kineto did not keep inside the window.
func cutWindow(t *testing.T, src, dst string, cut int64, lost map[uint64]bool) {
	t.Helper()
	var keep []string
	kt, err := kineto.Read(src, kineto.Options{}, func(e *kineto.Event) error {
		gpu := !e.Pid.IsStr && e.Pid.Num == 0
		switch {
		case e.Ph == "M":
		case gpu && e.Ts+e.Dur < cut, !gpu && e.Ts < cut:
			return nil
		case !gpu && e.Cat == kineto.CatRuntime && lost[e.Correlation()]:
			return nil
		case !gpu && e.Ph == "s" && lost[flowID(e.IDRaw)]:
			return nil
		}
		keep = append(keep, e.Raw)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	w.WriteString("{\n  \"schemaVersion\": 1,\n")
	for _, m := range kt.Members {
		if m.Key != "schemaVersion" {
			fmt.Fprintf(w, "  %q: %s,\n", m.Key, m.Raw)
		}
	}
	w.WriteString("  \"traceEvents\": [\n  ")
	for i, raw := range keep {
		if i > 0 {
			w.WriteString(",\n  ")
		}
		w.WriteString(raw)
	}
	w.WriteString("\n  ]\n}\n")
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// ncclKernel is an NCCL kernel of a Kineto trace: its correlation, GPU start and end and the
// start of its launch call (ns after the base).
type ncclKernel struct {
	corr             uint64
	start, end, call int64
}

// ncclKernels lists a Kineto trace's NCCL kernels by GPU start.
func ncclKernels(t *testing.T, path string) []ncclKernel {
	t.Helper()
	var ks []ncclKernel
	launch := map[uint64]int64{}
	_, err := kineto.Read(path, kineto.Options{}, func(e *kineto.Event) error {
		switch {
		case e.Cat == kineto.CatKernel && kineto.IsNCCLKernel(e.Name):
			ks = append(ks, ncclKernel{corr: e.Correlation(), start: e.Ts, end: e.Ts + e.Dur})
		case e.Cat == kineto.CatRuntime && kineto.IsLaunch(e.Name):
			launch[e.Correlation()] = e.Ts
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range ks {
		ks[i].call = launch[ks[i].corr]
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i].start < ks[j].start })
	return ks
}

// Issue 26: kernels whose launch call Kineto lacks — launched just before torch.profiler
// started, or not kept inside its window — are linked by the order rule to the operations
// enqueued for them, on traces whose kernels carry no process group (PyTorch before 2023-10
// put the collective's args on record_param_comms only, so the kernel's sequence is known by
// its stream alone). Two windows: the v100-memory shape cut 1 µs after an NCCL launch (one
// kernel launched before the window), and every operator a collective, so that the
// communication stream falls behind (kernels 95 µs long launched every 33 µs) and dozens of
// kernels launched before the window run inside it, as in the issue (34 ms later; the
// collectives' spacing jitters by up to 8 µs, as a real launch loop's does). Two launch
// calls inside each window are lost as well. Every kernel in the window must be linked to
// exactly its planted operations, and the operations whose kernels ran before the window must
// be reported outside it (they were reported as a launch call missing from their thread).
func TestLaunchBeforeWindowLinked(t *testing.T) {
	backlog := synth.Shapes["v100-memory"]
	backlog.KernelsPerNCCL, backlog.MemoryPerOp, backlog.JitterNs = 1, 0, 8_000
	for _, c := range []struct {
		name      string
		shape     synth.Shape
		kernels   int
		cutAfter  int   // the window starts 1 µs after this NCCL kernel's launch call
		cpuOffset int64 // the plugin clock's lag
	}{
		{"one-before", synth.Shapes["v100-memory"], 3000, 5, 40_000},
		{"backlog", backlog, 400, 200, 12_000},
	} {
		t.Run(c.name, func(t *testing.T) {
			linksAcrossWindow(t, c.shape, c.kernels, c.cutAfter, c.cpuOffset)
		})
	}
}

func linksAcrossWindow(t *testing.T, shape synth.Shape, kernels, cutAfter int, cpuOffset int64) {
	dir := t.TempDir()
	full := filepath.Join(dir, "full.json")
	if err := synth.KinetoShape(full, shape, kernels); err != nil {
		t.Fatal(err)
	}
	data, truth, err := synth.PluginFromKineto(full, synth.PluginOptions{Seed: 3, Host: "h", CPUOffsetNs: cpuOffset})
	if err != nil {
		t.Fatal(err)
	}
	np := filepath.Join(dir, "ncclprof-h-1-0.trace.json")
	os.WriteFile(np, data, 0o644)
	ks := ncclKernels(t, full)
	cut := ks[cutAfter].call + 1_000
	var inWindow []ncclKernel
	launchedBefore := 0
	for _, k := range ks {
		if k.end >= cut {
			inWindow = append(inWindow, k)
			if k.call < cut {
				launchedBefore++
			}
		}
	}
	lost := map[uint64]bool{inWindow[len(inWindow)/2].corr: true, inWindow[len(inWindow)/2+1].corr: true}
	kp := filepath.Join(dir, "window.json")
	cutWindow(t, full, kp, cut, lost)

	out := filepath.Join(dir, "merged.json")
	sum, err := Run([]string{kp}, []string{np}, out, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, got := readOutput(t, out)
	want := map[uint64][]string{}
	for _, k := range truth.Kernels {
		want[k.Corr] = k.Ops
	}
	byOrder := 0
	for _, w := range inWindow {
		k, ok := got[w.corr]
		if !ok {
			t.Fatalf("kernel %d missing from the output", w.corr)
		}
		if fmt.Sprint(k.ops) != fmt.Sprint(want[w.corr]) {
			t.Errorf("kernel %d linked to %v (rule %q), planted %v", w.corr, k.ops, k.rule, want[w.corr])
		}
		if w.call < cut || lost[w.corr] {
			byOrder++
			if k.rule != RuleOrder {
				t.Errorf("kernel %d (no launch call in the trace) linked by %q, want the order rule", w.corr, k.rule)
			}
		}
	}
	r := sum.Ranks[0]
	if r.NCCLKernels != len(inWindow) || r.Linked[RuleLaunch]+r.Linked[RuleOrder] != len(inWindow) || r.Linked[RuleOrder] != byOrder {
		t.Errorf("%d NCCL kernels (want %d), linked %v (want %d by order), unlinked %v", r.NCCLKernels, len(inWindow), r.Linked, byOrder, r.UnlinkedKernels)
	}
	if n := r.UnlinkedOps[whyOutsideWindow]; n != len(ks)-len(inWindow) {
		t.Errorf("%d operation groups outside the window, want %d (unlinked: %v)", n, len(ks)-len(inWindow), r.UnlinkedOps)
	}
	t.Logf("%d kernels in the window, %d launched before it, %d linked by order; CPU offset %d ns over %d launches", len(inWindow), launchedBefore, byOrder, r.Clock.CPUOffsetNs, r.Clock.CPUOffsetSamples)
}

func flowID(raw string) uint64 {
	n, _ := strconv.ParseUint(strings.Trim(raw, `"`), 10, 64)
	return n
}
