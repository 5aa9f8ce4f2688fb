package aggregate

import (
	"testing"

	"github.com/ncclprof/ncclprof/internal/event"
)

// A window of 1000 AllReduces as NCCL emits them with the default mask: API events, Group,
// Coll, and per channel (2) a send and a receive ProxyOp of 4 steps each.
func benchWindow(b *builder, t0 event.Ticks) []event.Record {
	var recs []event.Record
	for i := 0; i < 1000; i++ {
		ts := t0 + event.Ticks(i)*10000
		g, ca, c := b.id(), b.id(), b.id()
		recs = append(recs,
			event.Record{Handle: g, Type: event.GroupAPI, N: 1, Start: ts, Stop: ts + 100},
			event.Record{Handle: ca, Parent: g, Type: event.CollAPI, Func: "AllReduce", Start: ts + 10, Stop: ts + 20},
			event.Record{Handle: b.id(), Type: event.Group, Start: ts + 30, Stop: ts + 90},
			coll(c, "AllReduce", 1<<20, ts+40, ts+80))
		recs[len(recs)-1].Parent = ca
		for ch := 0; ch < 2; ch++ {
			for _, send := range []bool{true, false} {
				p := b.id()
				op := proxyOp(p, c, 1, send, ts+100, ts+5000)
				op.Channel = uint8(ch)
				recs = append(recs, op)
				for s := 0; s < 4; s++ {
					st := sendStep(b.id(), p, 1<<19, ts+200+event.Ticks(s)*1000, ts+900+event.Ticks(s)*1000)
					recs = append(recs, st)
				}
			}
		}
	}
	return recs
}

func BenchmarkWindow(bm *testing.B) {
	a := New(1)
	var b builder
	tmpl := benchWindow(&b, 0)
	recs := make([]event.Record, len(tmpl))
	bm.ReportAllocs()
	bm.ResetTimer()
	for i := 0; i < bm.N; i++ {
		// The same window, 20 ms later each time, with fresh handles.
		shift, hs := event.Ticks(i)*20_000_000, uint64(i)<<24
		for k := range tmpl {
			r := &recs[k]
			*r = tmpl[k]
			r.Handle += hs << 1
			if r.Parent != 0 {
				r.Parent += hs << 1
			}
			r.Start += shift
			if r.Stop != 0 {
				r.Stop += shift
			}
			if r.States[event.SendWait] != 0 {
				r.States[event.SendWait] += shift
			}
		}
		a.Window(comm1, recs)
	}
	bm.ReportMetric(float64(bm.Elapsed().Nanoseconds())/float64(bm.N*len(tmpl)), "ns/record")
}
