package merge

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ncclprof/ncclprof/internal/ptrace"
	"github.com/ncclprof/ncclprof/internal/synth"
)

// htaPython is the Python of the HTA environment for a pandas major (made by make test, or
// tools/hta/venv.sh build).
func htaPython(t *testing.T, pandas int) string {
	p, _ := filepath.Abs(fmt.Sprintf("../../build/hta-pandas%d/bin/python", pandas))
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("HTA with pandas %d is not installed (%v): run make test, or tools/hta/venv.sh build from the repository root", pandas, err)
	}
	return p
}

// What ncclmerge writes per rank loads in HTA (HolisticTraceAnalysis 0.5.0) with pandas 2 and
// with pandas 3, and every HTA analysis of it is identical to the analysis of the Kineto
// traces alone: temporal breakdown, communication/computation overlap, kernel breakdowns, idle
// time, queue length. Real traces of three eras, one of them two ranks of one job.
func TestHTASeesKinetoPartUnchanged(t *testing.T) {
	dir := t.TempDir()
	var args []string
	for i, ranks := range [][]string{
		{"nccl_parser_config_nccl_data.json.gz"},
		{"negative_queue_length_values_check_rank0.json.gz"},
		{"trace_filter_sampled_rank-0.json.gz", "trace_filter_sampled_rank-1.json.gz"},
	} {
		in, out := filepath.Join(dir, fmt.Sprint(i), "in"), filepath.Join(dir, fmt.Sprint(i), "out")
		os.MkdirAll(in, 0o755)
		var ks, ns []string
		for j, name := range ranks {
			src := realTrace(t, name)
			data, _, err := synth.PluginFromKineto(src, synth.PluginOptions{Seed: int64(20 + j), CPUOffsetNs: 25_000, DropLaunchEvery: 4})
			if err != nil {
				t.Fatal(err)
			}
			np := filepath.Join(dir, fmt.Sprint(i), fmt.Sprintf("ncclprof-h-%d-0.trace.json", j))
			if err := os.WriteFile(np, data, 0o644); err != nil {
				t.Fatal(err)
			}
			k := filepath.Join(in, name)
			b, _ := os.ReadFile(src)
			os.WriteFile(k, b, 0o644)
			ks, ns = append(ks, k), append(ns, np)
		}
		if _, err := Run(ks, ns, out+"/", Options{}); err != nil {
			t.Fatal(err)
		}
		args = append(args, in, out)
	}
	for _, pandas := range []int{2, 3} {
		t.Run(fmt.Sprintf("pandas%d", pandas), func(t *testing.T) {
			cmd := exec.Command(htaPython(t, pandas), append([]string{"testdata/hta_compare.py"}, args...)...)
			outb, err := cmd.CombinedOutput()
			var lines []string
			for _, l := range strings.Split(string(outb), "\n") {
				if strings.Contains(l, " SAME") || strings.Contains(l, " DIFF") || strings.Contains(l, " FAILED") || strings.HasPrefix(l, "pandas") {
					lines = append(lines, l)
				}
			}
			if err != nil {
				t.Fatalf("HTA found differences or failed (%v):\n%s\n%s", err, strings.Join(lines, "\n"), lastLines(string(outb), 15))
			}
			if !strings.HasPrefix(lines[0], fmt.Sprintf("pandas %d.", pandas)) {
				t.Fatalf("the environment has %s, want pandas %d", lines[0], pandas)
			}
			if same := strings.Count(string(outb), " SAME"); same != 3*6 {
				t.Fatalf("%d analyses compared, want 18:\n%s", same, strings.Join(lines, "\n"))
			}
		})
	}
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}

// What `ncclmerge demo` does, without the C test host: a synthesized job's plugin traces, the
// Kineto traces the demo derives from them, merged per rank, load in HTA with pandas 3 (the
// demo's traces had correlation ids 1…20: HTA put them in an int8 column and failed writing
// the merged trace's row numbers into it, "Invalid value … for dtype 'int8'").
func TestHTALoadsMergedDemoJob(t *testing.T) {
	dir := t.TempDir()
	job := synth.DefaultJob(2, 40)
	job.Detail = true // API calls and launches, as the test host writes them
	paths, err := synth.Job(filepath.Join(dir, "nccl"), job)
	if err != nil {
		t.Fatal(err)
	}
	in, out := filepath.Join(dir, "in"), filepath.Join(dir, "out")
	os.MkdirAll(in, 0o755)
	var ks []string
	for rank, p := range paths {
		pt, err := ptrace.Read(p)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := synth.KinetoFromPlugin(pt, synth.KinetoOptions{Rank: rank, WorldSize: len(paths)})
		k := filepath.Join(in, fmt.Sprintf("rank%d.pt.trace.json", rank))
		if err := os.WriteFile(k, data, 0o644); err != nil {
			t.Fatal(err)
		}
		ks = append(ks, k)
	}
	if _, err := Run(ks, paths, out+"/", Options{}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(htaPython(t, 3), "testdata/hta_compare.py", in, out)
	outb, err := cmd.CombinedOutput()
	if err != nil || strings.Count(string(outb), " SAME") != 6 {
		t.Fatalf("HTA with pandas 3 on the merged demo job (%v):\n%s", err, lastLines(string(outb), 15))
	}
}
