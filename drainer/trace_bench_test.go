package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ncclprof/ncclprof/internal/aggregate"
	"github.com/ncclprof/ncclprof/internal/align"
	"github.com/ncclprof/ncclprof/internal/event"
)

// fixedClock is a tick counter that runs at 1 tick per ns from a fixed Unix time.
type fixedClock struct{ tick uint64 }

func (c *fixedClock) Sample() align.Sample {
	c.tick += 1000
	return align.Sample{Before: c.tick, After: c.tick, MonoNs: c.tick, RealNs: 1_700_000_000_000_000_000 + c.tick}
}

// opRecords are the records NCCL reports for one AllReduce on 2 channels: API calls, the
// group, the launch, the operation, a send and a receive proxy op per channel with two steps
// each (three states per step), and a kernel channel per channel.
func opRecords(at uint64, h *uint64) []event.Record {
	next := func() uint64 { *h += 2; return *h | 1 }
	gapi, api, grp, op := next(), next(), next(), next()
	recs := []event.Record{
		{Handle: gapi, Type: event.GroupAPI, Start: event.Ticks(at), Stop: event.Ticks(at + 9000), TID: 101, N: 1},
		{Handle: api, Parent: gapi, Type: event.CollAPI, Start: event.Ticks(at + 100), Stop: event.Ticks(at + 900), TID: 101,
			Func: "AllReduce", Count: 1 << 20, Dtype: "ncclFloat32", Stream: 0x5000},
		{Handle: grp, Type: event.Group, Start: event.Ticks(at + 1000), Stop: event.Ticks(at + 8000), TID: 101},
		{Handle: op, Parent: api, ParentGroup: grp, Type: event.Coll, Start: event.Ticks(at + 1100), Stop: event.Ticks(at + 1900), TID: 101,
			Func: "AllReduce", Count: 1 << 20, Dtype: "ncclFloat32", Algo: "RING", Proto: "LL", NChannels: 2, NWarps: 16},
		{Handle: next(), Parent: gapi, Type: event.KernelLaunch, Start: event.Ticks(at + 7000), Stop: event.Ticks(at + 7800), TID: 101, Stream: 0x5000},
	}
	for ch := 0; ch < 2; ch++ {
		for _, send := range []bool{true, false} {
			p := next()
			s := at + 20000 + uint64(ch)*50000
			recs = append(recs, event.Record{Handle: p, Parent: op, Type: event.ProxyOp, Start: event.Ticks(s), Stop: event.Ticks(s + 40000),
				TID: 202, Channel: uint8(ch), Peer: 1, NSteps: 2, Chunk: 131072, IsSend: send, PID: 77})
			for st := 0; st < 2; st++ {
				b := s + 100 + uint64(st)*20000
				recs = append(recs, event.Record{Handle: next(), Parent: p, Type: event.ProxyStep, Start: event.Ticks(b), Stop: event.Ticks(b + 19000),
					TID: 202, Step: int32(st), Bytes: 131072, States: [6]event.Ticks{event.Ticks(b + 100), event.Ticks(b + 5000), event.Ticks(b + 9000)}})
			}
		}
		recs = append(recs, event.Record{Handle: next(), Parent: op, Type: event.KernelCh, Start: event.Ticks(at + 15000), Stop: event.Ticks(at + 90000),
			TID: 101, Channel: uint8(ch), PTimerStart: 5_000_000_000 + at, PTimerStop: 5_000_070_000 + at})
	}
	return recs
}

// BenchmarkTraceWriter measures the trace writer alone (records to JSON on disk): events per
// second, and bytes per event of the file it writes.
func BenchmarkTraceWriter(b *testing.B) {
	clock := &fixedClock{}
	cpu := align.NewCPU(clock, 1)
	clock.tick += 1 << 40 // events come after the first anchor
	cpu.Refresh()
	t := newTraceSink(cpu)
	t.want, t.dir, t.ctlSeq, t.from = true, b.TempDir(), 1, cpu.UnixNs(0)
	c := aggregate.Comm{Index: 1, Incarnation: 1, Hash: 0xa11edce000000008, Name: "world", Rank: 0, NRanks: 2, NNodes: 1, ABI: 6}
	var h uint64
	at := uint64(1<<40) + 1_000_000
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t.window(c, opRecords(at, &h))
		at += 200_000
	}
	b.StopTimer()
	ev, bytes := t.w.Events(), t.w.Bytes()+int64(t.w.Pending())
	t.close()
	matches, _ := filepath.Glob(filepath.Join(t.dir, "*.trace.json"))
	if len(matches) == 1 {
		if st, err := os.Stat(matches[0]); err == nil {
			bytes = st.Size()
		}
	}
	b.ReportMetric(float64(ev)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(bytes)/float64(ev), "B/event")
}
