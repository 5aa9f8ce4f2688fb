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

// ncclLaunches lists a Kineto trace's NCCL kernels by GPU start: correlation, start and the
// start of its launch call (ns after the base).
func ncclLaunches(t *testing.T, path string) (corr []uint64, launch map[uint64]int64) {
	t.Helper()
	type k struct {
		corr  uint64
		start int64
	}
	var ks []k
	launch = map[uint64]int64{}
	_, err := kineto.Read(path, kineto.Options{}, func(e *kineto.Event) error {
		switch {
		case e.Cat == kineto.CatKernel && kineto.IsNCCLKernel(e.Name):
			ks = append(ks, k{e.Correlation(), e.Ts})
		case e.Cat == kineto.CatRuntime && kineto.IsLaunch(e.Name):
			launch[e.Correlation()] = e.Ts
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i].start < ks[j].start })
	for _, x := range ks {
		corr = append(corr, x.corr)
	}
	return corr, launch
}

// Issue 26: in traces whose kernels carry no process group (PyTorch before 2023-10 put the
// collective's args on record_param_comms only), a kernel whose launch call Kineto lacks —
// launched just before the window began, or not kept inside it — was put in a sequence of
// its own ("stream N") apart from its stream's launch-linked kernels ("pg 0 stream N"), so
// the order rule never paired it: its operation was reported "outside the Kineto trace's
// time window" or a pairing in order met the wrong kernel. Every kernel must be linked to
// exactly its planted operations.
func TestLaunchBeforeWindowLinked(t *testing.T) {
	dir := t.TempDir()
	full := filepath.Join(dir, "full.json")
	if err := synth.KinetoShape(full, synth.Shapes["v100-memory"], 3000); err != nil {
		t.Fatal(err)
	}
	data, truth, err := synth.PluginFromKineto(full, synth.PluginOptions{Seed: 3, Host: "h", CPUOffsetNs: 40_000})
	if err != nil {
		t.Fatal(err)
	}
	np := filepath.Join(dir, "ncclprof-h-1-0.trace.json")
	os.WriteFile(np, data, 0o644)
	corrs, launch := ncclLaunches(t, full)
	// The window starts 1 µs after the 6th NCCL kernel's launch call (its kernel starts 9 µs
	// after the call); the 40th and 41st lose their launch calls inside it.
	before := corrs[5]
	cut := launch[before] + 1_000
	lost := map[uint64]bool{corrs[39]: true, corrs[40]: true}
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
	inWindow := corrs[5:]
	for _, c := range inWindow {
		k, ok := got[c]
		if !ok {
			t.Fatalf("kernel %d missing from the output", c)
		}
		if fmt.Sprint(k.ops) != fmt.Sprint(want[c]) {
			t.Errorf("kernel %d linked to %v (rule %q), planted %v", c, k.ops, k.rule, want[c])
		}
		if (c == before || lost[c]) && k.rule != RuleOrder {
			t.Errorf("kernel %d (no launch call in the trace) linked by %q, want the order rule", c, k.rule)
		}
	}
	r := sum.Ranks[0]
	if r.NCCLKernels != len(inWindow) || r.Linked[RuleLaunch]+r.Linked[RuleOrder] != len(inWindow) {
		t.Errorf("%d NCCL kernels (want %d), linked %v, unlinked %v", r.NCCLKernels, len(inWindow), r.Linked, r.UnlinkedKernels)
	}
	// The five operations whose kernels ran before the window stay unlinked, and say so.
	if n := r.UnlinkedOps["outside the Kineto trace's time window"]; n != 5 {
		t.Errorf("%d operation groups outside the window, want 5 (unlinked: %v)", n, r.UnlinkedOps)
	}
}

func flowID(raw string) uint64 {
	n, _ := strconv.ParseUint(strings.Trim(raw, `"`), 10, 64)
	return n
}
