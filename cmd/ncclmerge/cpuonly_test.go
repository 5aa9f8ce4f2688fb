package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ncclprof/ncclprof/internal/testtraces"
)

// cpuRunDir lays out what examples/ddp_train.py --cpu leaves in its trace directory: torch's
// trace of a gloo run (a real one: 10 gloo collectives, no GPU events) and no plugin trace,
// since NCCL never ran; then the merge the README gives, without --nccl.
func cpuRunDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	data, err := os.ReadFile(testtraces.Kineto(t, "cpu_only_rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rank0.pt.trace.json.gz"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// The merge command a user copies from the README, on a CPU run: with --nccl it says why no
// plugin trace exists and what to run; without, it gives the timeline.
func TestCPURunMerge(t *testing.T) {
	dir := cpuRunDir(t)
	kin := filepath.Join(dir, "rank*.pt.trace.json.gz")
	_, err := run(t, "merge", "-q", "--kineto", kin, "--nccl", filepath.Join(dir, "ncclprof-*.trace.json"),
		"--timeline", "--align", "ends", "-o", filepath.Join(dir, "job.json.gz"))
	if err == nil || !strings.Contains(err.Error(), "gloo has none, so leave --nccl out") {
		t.Fatalf("merge --nccl on a CPU run: want the reason and the remedy, got %v", err)
	}
	if _, err := run(t, "merge", "-q", "--kineto", kin, "--timeline", "--align", "ends",
		"-o", filepath.Join(dir, "job.json.gz")); err != nil {
		t.Fatalf("merge without --nccl: %v", err)
	}
	if st, err := os.Stat(filepath.Join(dir, "job.json.gz")); err != nil || st.Size() == 0 {
		t.Fatalf("no timeline written: %v", err)
	}
}

// stats, skew, pprof and report on a CPU run's outputs: one message that says what kind of run
// it was, with the count of its gloo collectives, and not the hint to trace NCCL (which cannot
// help where NCCL never ran).
func TestCPURunAnalyses(t *testing.T) {
	dir := cpuRunDir(t)
	for _, c := range [][]string{
		{"stats", "-q", dir},
		{"skew", "-q", dir},
		{"pprof", "-q", dir, "-o", filepath.Join(t.TempDir(), "p.pb.gz")},
		{"report", "-q", dir, "-o", filepath.Join(t.TempDir(), "r.html")},
	} {
		_, err := run(t, c...)
		if err == nil {
			t.Fatalf("%s on a CPU run succeeded", c[0])
		}
		msg := err.Error()
		for _, want := range []string{c[0] + " has nothing to analyse", "run without NCCL", "10 gloo collectives", "--timeline"} {
			if !strings.Contains(msg, want) {
				t.Errorf("%s: the message lacks %q:\n%s", c[0], want, msg)
			}
		}
		if strings.Contains(msg, "NCCLPROF_TRACE") {
			t.Errorf("%s: the message suggests NCCLPROF_TRACE, which cannot help under gloo:\n%s", c[0], msg)
		}
	}
}

// A GPU run's torch.profiler trace without the plugin's: the message counts its NCCL kernels and
// asks for the plugin traces.
func TestNCCLKernelsWithoutPluginTrace(t *testing.T) {
	_, err := run(t, "stats", "-q", testtraces.Kineto(t, "trace_filter_sampled_rank-0.json.gz"))
	if err == nil || !strings.Contains(err.Error(), "10 NCCL kernels but none of the plugin's events") {
		t.Fatalf("want the NCCL kernels counted and the plugin traces asked for, got %v", err)
	}
}
