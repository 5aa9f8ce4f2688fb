package aggregate

import (
	"math"
	"testing"

	"github.com/ncclprof/ncclprof/internal/event"
	"github.com/ncclprof/ncclprof/internal/linfit"
)

// bucketsOf groups transfers per size as the plugin's hot path does (profiler/hot.h np_xfer_add),
// with times in ticks at 2 ticks per ns.
func bucketsOf(kind, rank, id int, sizes []uint64, timesNs []float64) []Bucket {
	by := map[uint64]*Bucket{}
	var order []uint64
	for i, sz := range sizes {
		b := by[sz]
		if b == nil {
			b = &Bucket{Kind: kind, Rank: rank, ID: id, Size: sz}
			by[sz] = b
			order = append(order, sz)
		}
		t := uint64(timesNs[i] * 2)
		if b.N == 0 || t < b.TMin {
			b.TMin = t
		}
		b.TMax = max(b.TMax, t)
		b.N++
		b.Bytes += sz
		b.SumT += t
		b.SumT2 += float64(t) * float64(t)
	}
	out := make([]Bucket, 0, len(order))
	for _, sz := range order {
		out = append(out, *by[sz])
	}
	return out
}

// Pair and channel figures from the plugin's per-size sums equal those of every transfer
// added one by one: bytes and counts exactly, both fits to rounding, and the MIN fit recovers
// the model (latency 2 µs, 10 GB/s) under noise that only ever adds time.
func TestTransferSumsGiveTheSameFits(t *testing.T) {
	var sizes []uint64
	var times []float64
	var want linfit.Acc
	for i := 0; i < 4000; i++ {
		sz := uint64(1024) << (i % 7)
		ns := 2000 + float64(sz)/10 + float64((i*7919)%500) // latency + size/bw + queueing
		if i%97 == 0 {
			ns = 2000 + float64(sz)/10 // an unqueued transfer of each size, now and then
		}
		ns = math.Round(ns*2) / 2 // what 2 ticks per ns can express
		sizes, times = append(sizes, sz), append(times, ns)
		want.Add(sz, ns)
	}
	a := New(2)
	send := bucketsOf(BucketSend, 0, 3, sizes, times)
	ch := bucketsOf(BucketChannel, 0, 1, sizes, times)
	recv := bucketsOf(BucketRecv, 0, 3, sizes[:10], make([]float64, 10))
	a.SetTransfers(comm1, append(append(send, ch...), recv...), Unkeyed{})
	r := a.Finalize(comm1)
	p := r.Pairs[PairKey{CommHash: comm1.Hash, Rank: 0, Peer: 3}]
	var bytes uint64
	for _, s := range sizes {
		bytes += s
	}
	if p == nil || p.SentBytes != bytes || p.SendTransfers != 4000 || p.RecvTransfers != 10 {
		t.Fatalf("pair %+v, want %d bytes in 4000 transfers and 10 received", p, bytes)
	}
	for _, mode := range []linfit.Mode{linfit.AVG, linfit.MIN} {
		got, exp := p.Fit.Fit(mode), want.Fit(mode)
		if math.Abs(got.SlopeNsPerB-exp.SlopeNsPerB) > 1e-9*math.Abs(exp.SlopeNsPerB) ||
			math.Abs(got.InterceptNs-exp.InterceptNs) > 1e-6 || math.Abs(got.R2-exp.R2) > 1e-9 ||
			got.Points != exp.Points || got.Trusted != exp.Trusted {
			t.Errorf("%v fit from sums %+v, from every point %+v", mode, got, exp)
		}
	}
	mn := p.Fit.Fit(linfit.MIN)
	// Times were rounded to what 2 ticks per ns express, so the minima sit within 0.25 ns of
	// the model line.
	if math.Abs(mn.LatencyNs-2000) > 1 || math.Abs(mn.BandwidthBps-10e9)/10e9 > 1e-4 {
		t.Errorf("MIN fit %+v, model 2000 ns, 10 GB/s", mn)
	}
	c := r.Channels[ChannelKey{CommHash: comm1.Hash, Rank: 0, Channel: 1}]
	if c == nil || c.Transfers != 4000 || c.Bytes != bytes || c.TransferSize.Min != 1024 ||
		c.TransferSize.Max != 65536 || c.TransferTime.Min != math.Round((2000+1024.0/10)*2)/2 {
		t.Errorf("channel %+v", c)
	}
}

// Operations whose records found no room come from the plugin's lost-operation table: counted
// in counts and bytes (as untimed operations) exactly once, however often the table is read.
func TestLostOperationsCountOnce(t *testing.T) {
	a := newAgg()
	ops := collect(a)
	lost := []LostOp{{Type: event.Coll, Func: "AllGather", Dtype: "ncclFloat16", Algo: "RING",
		Proto: "LL", NChannels: 2, N: 3, SumCount: 300}}
	a.SetLost(comm1, lost)
	a.SetLost(comm1, lost) // nothing new
	lost[0].N, lost[0].SumCount = 5, 500
	a.SetLost(comm1, lost)
	r := a.Finalize(comm1)
	st := r.Ops[OpKey{CommHash: comm1.Hash, Rank: 0, Func: "AllGather", Algo: "RING", Proto: "LL", NChannels: 2}]
	// 500 halves × 2 bytes × 4 ranks (AllGather's size is the whole output).
	if st == nil || st.Count != 5 || st.Untimed != 5 || st.Bytes != 4000 || st.Completion.N != 0 {
		t.Fatalf("stats %+v", st)
	}
	if len(*ops) != 2 || (*ops)[0].Untimed != 3 || (*ops)[1].Untimed != 2 || (*ops)[1].Bytes != 1600 {
		t.Errorf("OnOp got %+v", *ops)
	}
	if r.Health.UntimedOps != 5 || len(r.Partial()) != 1 {
		t.Errorf("health %+v, partial %v", r.Health, r.Partial())
	}
}
