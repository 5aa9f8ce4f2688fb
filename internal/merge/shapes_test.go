package merge

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/ncclprof/ncclprof/internal/synth"
	"github.com/ncclprof/ncclprof/internal/tracecheck"
)

// The synthesized shapes the benchmark measures are traces the merge reads like real ones:
// every era, ROCm's launch calls, memory events. Each NCCL kernel is linked by its launch, the
// output passes check, and the same shape and size give the same bytes.
func TestSynthesizedShapesLink(t *testing.T) {
	for _, name := range synth.ShapeNames() {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			kp := filepath.Join(dir, "k.json")
			if err := synth.KinetoShape(kp, synth.Shapes[name], 400); err != nil {
				t.Fatal(err)
			}
			again := filepath.Join(dir, "k2.json")
			synth.KinetoShape(again, synth.Shapes[name], 400)
			a, _ := os.ReadFile(kp)
			b, _ := os.ReadFile(again)
			if !bytes.Equal(a, b) {
				t.Fatal("the same shape and size gave different bytes")
			}
			data, truth, err := synth.PluginFromKineto(kp, synth.PluginOptions{Seed: 1, Host: "h"})
			if err != nil {
				t.Fatal(err)
			}
			np := filepath.Join(dir, "ncclprof-h-1-0.trace.json")
			os.WriteFile(np, data, 0o644)
			out := filepath.Join(dir, "m.json")
			sum, err := Run([]string{kp}, []string{np}, out, Options{})
			if err != nil {
				t.Fatal(err)
			}
			r := sum.Ranks[0]
			want := 400 / synth.Shapes[name].KernelsPerNCCL
			if len(truth.Kernels) < want-1 || r.Linked[RuleLaunch] != len(truth.Kernels) || r.NCCLKernels != len(truth.Kernels) {
				t.Errorf("%d NCCL kernels (about %d expected), linked %v, unlinked %v", r.NCCLKernels, want, r.Linked, r.UnlinkedKernels)
			}
			if rep, _ := tracecheck.File(out); !rep.OK() || rep.Total(tracecheck.Warning) > 0 {
				var w bytes.Buffer
				rep.WriteText(&w)
				t.Errorf("check:\n%s", w.String())
			}
		})
	}
}
