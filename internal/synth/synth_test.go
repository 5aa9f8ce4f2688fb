package synth

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ncclprof/ncclprof/internal/kineto"
	"github.com/ncclprof/ncclprof/internal/ptrace"
	"github.com/ncclprof/ncclprof/internal/testtraces"
	"github.com/ncclprof/ncclprof/internal/tracecheck"
)

func src(t *testing.T) string { return testtraces.Kineto(t, "trace_filter_sampled_rank-0.json.gz") }

// A repeated trace is a valid trace with n times the events, later copies later in time, and
// no new check findings beyond n times the source's.
func TestRepeatKineto(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "big.json")
	n, err := RepeatKineto(src(t), dst, 5<<20)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(dst)
	if n != 3 || st.Size() < 5<<20 {
		t.Fatalf("%d copies, %d bytes", n, st.Size())
	}
	var kernels int
	kt, err := kineto.Read(dst, kineto.Options{}, func(e *kineto.Event) error {
		if e.Cat == kineto.CatKernel && kineto.IsNCCLKernel(e.Name) {
			kernels++
		}
		return nil
	})
	if err != nil || kt.Events != 3*4855 || kernels != 30 || !kt.Absolute {
		t.Fatalf("%v events %d kernels %d", err, kt.Events, kernels)
	}
	if r, _ := tracecheck.File(dst); !r.OK() || r.Count(tracecheck.CodeOverlap) != 0 {
		t.Fatalf("check: %+v", r.Findings)
	}
}

// A plugin trace synthesized from a Kineto trace reads back with one operation per kernel.
func TestPluginFromKineto(t *testing.T) {
	data, truth, err := PluginFromKineto(src(t), PluginOptions{Seed: 1, Host: "h"})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := ptrace.Parse("p.json", data)
	if err != nil {
		t.Fatal(err)
	}
	launches := 0
	for _, e := range tr.Events {
		if e.Kind == ptrace.KernelLaunch {
			launches++
		}
	}
	if tr.Pid != 4037 || len(truth.Kernels) != 10 || launches != 10 || len(tr.Events) != truth.Events {
		t.Fatalf("pid %d kernels %d launches %d events %d/%d", tr.Pid, len(truth.Kernels), launches, len(tr.Events), truth.Events)
	}
	if r := tracecheck.Check("p.json", data); !r.OK() || r.Total(tracecheck.Warning) != 0 {
		t.Fatalf("the synthesized plugin trace has findings: %+v", r.Findings)
	}
}
