package telemetry

import (
	"context"
	"testing"

	"github.com/ncclprof/ncclprof/internal/aggregate"
)

// BenchmarkRecordOp is the drainer's cost per completed operation (an AllReduce with
// transfers, 4 histograms and 3 counters touched plus bandwidths).
func BenchmarkRecordOp(b *testing.B) {
	r, ops := benchRecorder(b), benchOps()
	defer r.Shutdown(context.Background())
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.RecordOp(ops[i%len(ops)])
		if i%256 == 255 {
			r.Pass() // the drainer hands counters over once per pass
		}
	}
	b.StopTimer()
	_ = r.Sync(context.Background())
	b.ReportMetric(float64(r.rec.dropped.Load())/float64(b.N), "skipped/op")
}

// BenchmarkRecordOpWorker is the worker's cost per operation (histogram recording in the SDK),
// measured by waiting for it after every batch so nothing is skipped.
func BenchmarkRecordOpWorker(b *testing.B) {
	r, ops := benchRecorder(b), benchOps()
	defer r.Shutdown(context.Background())
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.RecordOp(ops[i%len(ops)])
		if i%1024 == 1023 {
			_ = r.Sync(context.Background())
		}
	}
	_ = r.Sync(context.Background())
}

// BenchmarkObserveResults is the drainer's cost of copying a communicator with 8 peers and 8
// channels for export (done at most once a second).
func BenchmarkObserveResults(b *testing.B) {
	r := benchRecorder(b)
	defer r.Shutdown(context.Background())
	res := testResult(tpComm)
	for p := 4; p < 8; p++ {
		res.Pairs[aggregate.PairKey{CommHash: tpComm.Hash, Rank: 2, Peer: p}] = res.Pairs[aggregate.PairKey{CommHash: tpComm.Hash, Rank: 2, Peer: 1}]
	}
	all := []*aggregate.Result{res}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.ObserveResults(all)
	}
}

// benchRecorder is a Recorder with a manual reader: nothing is exported while measuring.
func benchRecorder(b *testing.B) *Recorder {
	r, err := New(context.Background(), Options{Config: Config{Exporter: "test", Histogram: HistogramExponential, MaxLabels: 8},
		Reader: newManual(), Host: Host{Name: "h", PID: 1, LocalRank: -1}})
	if err != nil {
		b.Fatal(err)
	}
	return r
}

// benchOps are 64 AllReduces of 7 sizes and 3 protocols, with two transfers each.
func benchOps() []*aggregate.Op {
	ops := make([]*aggregate.Op, 64)
	for i := range ops {
		ops[i] = allReduce(0, uint64(1+i%7)<<20, float64(1e6+i*1000), 2e4, 0, 3e3, []float64{1 << 20, 1 << 19}, []float64{5e4, 3e4})
		ops[i].Proto = []string{"SIMPLE", "LL", "LL128"}[i%3]
	}
	return ops
}
