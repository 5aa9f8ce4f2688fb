package merge

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkMergeFiles merges the Kineto and plugin traces named by NCCLMERGE_BENCH_KINETO and
// NCCLMERGE_BENCH_NCCL (for example those `ncclmerge bench --keep` leaves), to profile the
// merge on a trace shape: go test -run - -bench MergeFiles -cpuprofile cpu.out ./internal/merge
func BenchmarkMergeFiles(b *testing.B) {
	k, n := os.Getenv("NCCLMERGE_BENCH_KINETO"), os.Getenv("NCCLMERGE_BENCH_NCCL")
	if k == "" {
		b.Skip("set NCCLMERGE_BENCH_KINETO (and NCCLMERGE_BENCH_NCCL) to the traces to merge")
	}
	var in int64
	for _, p := range []string{k, n} {
		if st, err := os.Stat(p); err == nil {
			in += st.Size()
		}
	}
	var nccl []string
	if n != "" {
		nccl = []string{n}
	}
	out := filepath.Join(b.TempDir(), "merged.json")
	b.SetBytes(in)
	for i := 0; i < b.N; i++ {
		if _, err := Run([]string{k}, nccl, out, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
