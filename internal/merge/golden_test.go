package merge

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/ncclprof/ncclprof/internal/tracecheck"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// The golden output was checked by hand: kernel 11 is
// linked by the launch rule (its call at 1010–1015 µs lies in the KernelLaunch 1008–1017 µs),
// kernel 12 by the order rule (its KernelLaunch was dropped; it is the next AllReduce of the
// communicator after the anchor); the dangling flow start 99 is left out; the GPU offset
// (%globaltimer − Kineto time, the plugin's sign) is the lower median of the two kernels' first
// channel start − kernel start (250 − G, 300 − G → 250 − G, G = 1699999995000000000 ns: the GPU
// timer counts from near 0), so channel 0 of kernel 11 is placed 50 ns after its start.
func TestGolden(t *testing.T) {
	out := filepath.Join(t.TempDir(), "tiny.merged.json")
	_, err := Run([]string{"testdata/tiny_kineto.json"}, []string{"testdata/tiny_nccl.trace.json"}, out, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	golden := "testdata/tiny.merged.golden.json"
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
		t.Fatalf("output differs from %s (run go test -run TestGolden -update and review the diff):\n%s", golden, got)
	}
	rep := tracecheck.Check(golden, want)
	if !rep.OK() || rep.Total(tracecheck.Warning) != 0 {
		var b bytes.Buffer
		rep.WriteText(&b)
		t.Fatalf("the golden output does not pass check:\n%s", b.String())
	}
}
