package why

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/ncclprof/ncclprof/internal/commops"
	"github.com/ncclprof/ncclprof/internal/merge"
	"github.com/ncclprof/ncclprof/internal/ptrace"
	"github.com/ncclprof/ncclprof/internal/synth"
)

// kinetoTraces writes the torch.profiler trace of each rank of a synthesized job (its plugin
// traces), with work(rank) before every collective, into dir.
func kinetoTraces(tb testing.TB, dir string, traces []string, work func(rank int) *synth.Work) []string {
	tb.Helper()
	var out []string
	for r, p := range traces {
		tr, err := ptrace.Read(p)
		if err != nil {
			tb.Fatal(err)
		}
		data, _ := synth.KinetoFromPlugin(tr, synth.KinetoOptions{Rank: r, WorldSize: len(traces), Work: work(r)})
		kp := filepath.Join(dir, fmt.Sprintf("rank%d.pt.trace.json", r))
		if err := os.WriteFile(kp, data, 0o644); err != nil {
			tb.Fatal(err)
		}
		out = append(out, kp)
	}
	return out
}

// mergedRanks writes a job with work before every collective, merged one file per rank (as
// ncclmerge bench --what why does), and returns the merged files.
func mergedRanks(tb testing.TB, dir string, o synth.JobOptions, work func(rank int) *synth.Work) []string {
	tb.Helper()
	traces, err := synth.Job(filepath.Join(dir, "nccl"), o)
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	for r, kp := range kinetoTraces(tb, dir, traces, work) {
		m := filepath.Join(dir, fmt.Sprintf("rank%d.merged.json", r))
		if _, err := merge.Run([]string{kp}, []string{traces[r]}, m, merge.Options{}); err != nil {
			tb.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// whyOf reads the files in one pass and analyzes them, as ncclmerge why does.
func whyOf(tb testing.TB, files []string, opt Options) *Result {
	tb.Helper()
	col := NewCollector()
	s, err := commops.Read(files, commops.Options{Also: col.Hook})
	if err != nil {
		tb.Fatal(err)
	}
	return Analyze(s, col.Activities(s), opt)
}

// BenchmarkWhy: reading and analyzing 8 merged ranks × 500 collectives, rank 1 late on every
// 10th (go test -run - -bench Why -cpuprofile cpu.out ./internal/why/).
func BenchmarkWhy(b *testing.B) {
	o := synth.DefaultJob(8, 500)
	o.Detail = true
	files := mergedRanks(b, b.TempDir(), o, func(int) *synth.Work { return synth.DefaultWork() })
	b.ResetTimer()
	for range b.N {
		whyOf(b, files, Defaults)
	}
}
