package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
)

// The ratios are each run's own (its merge against the floors measured just before it), then
// their median: a run slowed as a whole by the machine keeps its ratio.
func TestMedianRunRatios(t *testing.T) {
	runs := []mergeRun{
		{read: 1, copy: 2, merge: 4, cpu: 5, rss: 100},   // ratios 0.25, 0.5
		{read: 3, copy: 6, merge: 6, cpu: 7, rss: 300},   // 0.5, 1
		{read: 0.5, copy: 1, merge: 5, cpu: 6, rss: 200}, // 0.1, 0.2
	}
	m := medianRun(runs)
	if m.readRatio != 0.25 || m.copyRatio != 0.5 {
		t.Errorf("ratios %.3f, %.3f; want the median of each run's: 0.25, 0.5", m.readRatio, m.copyRatio)
	}
	if m.read != 1 || m.copy != 2 || m.merge != 5 || m.cpu != 6 || m.rss != 300 {
		t.Errorf("medians read %v copy %v merge %v cpu %v, peak %v; want 1 2 5 6 and the largest peak 300", m.read, m.copy, m.merge, m.cpu, m.rss)
	}
}

// The plain copy writes every input, in order, into one file.
func TestPlainCopy(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	os.WriteFile(a, []byte("first,"), 0o644)
	os.WriteFile(b, []byte("second"), 0o644)
	out := filepath.Join(dir, "out")
	if _, err := plainCopy(out, []string{a, "", b}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(out); string(got) != "first,second" {
		t.Errorf("copied %q", got)
	}
	if _, err := plainRead([]string{a, "", b}); err != nil {
		t.Fatal(err)
	}
}

// bench --keep leaves each synthesized job where it says, for skew and why too (they removed
// theirs whatever --keep said).
func TestBenchKeepsWhatItSays(t *testing.T) {
	for _, what := range []string{"skew", "why"} {
		dir := t.TempDir()
		// The built binary: the bench times ncclmerge as a child of itself, which in-process
		// would be this test binary.
		b, err := exec.Command("../../build/ncclmerge", "bench", "--what", what, "--ranks", "4", "--ops", "20", "--reps", "1",
			"--keep", "--dir", dir).CombinedOutput()
		out := string(b)
		if err != nil {
			t.Fatalf("%s: %v\n%s", what, err, out)
		}
		for _, job := range []string{what + "-2x10", what + "-4x20"} {
			kept, _ := filepath.Glob(filepath.Join(dir, "ncclmerge-bench-*", job))
			if len(kept) != 1 || !strings.Contains(out, "the bench's files are kept in "+filepath.Dir(kept[0])) {
				t.Errorf("%s: %s not kept, or not said where (%v):\n%s", what, job, kept, out)
			}
		}
	}
}

// NCCLMERGE_CPUPROFILE=FILE leaves a Go CPU profile of the run in FILE (how the benchmarks'
// figures are taken apart, docs/ncclmerge.md#benchmark); a path it cannot create is said and
// the command still runs.
func TestCPUProfileWritten(t *testing.T) {
	dir := t.TempDir()
	prof := filepath.Join(dir, "cpu.pb")
	cmd := exec.Command("../../build/ncclmerge", "stats", "-q", "../../internal/merge/testdata/tiny_nccl.trace.json")
	cmd.Env = append(os.Environ(), "NCCLMERGE_CPUPROFILE="+prof)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("stats: %v\n%s", err, b)
	}
	f, err := os.Open(prof)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatalf("%s is not a profile: %v", prof, err)
	}
	if len(p.SampleType) == 0 || p.SampleType[len(p.SampleType)-1].Type != "cpu" {
		t.Errorf("sample types %v, want cpu", p.SampleType)
	}
	cmd = exec.Command("../../build/ncclmerge", "stats", "-q", "../../internal/merge/testdata/tiny_nccl.trace.json")
	cmd.Env = append(os.Environ(), "NCCLMERGE_CPUPROFILE="+filepath.Join(dir, "no", "such", "dir", "cpu.pb"))
	b, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(b), "NCCLMERGE_CPUPROFILE") {
		t.Errorf("an uncreatable profile path: %v, want exit 0 and a message naming NCCLMERGE_CPUPROFILE:\n%s", err, b)
	}
}
