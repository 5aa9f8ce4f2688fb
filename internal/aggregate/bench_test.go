package aggregate

import (
	"syscall"
	"testing"
	"time"

	"github.com/ncclprof/ncclprof/internal/event"
)

// A window of 1000 AllReduces as the drainer reads them with the default mask: API events,
// Group, Coll, and per channel (2) a send and a receive ProxyOp carrying its 4 steps'
// transfers (the plugin folds steps itself; their records reach the drainer only for a trace).
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
				op := withTransfers(proxyOp(b.id(), c, 1, send, ts+100, ts+5000), 4, 4<<19, 2800)
				op.Channel = uint8(ch)
				recs = append(recs, op)
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
	cpu0 := cpuTime()
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
		}
		a.Window(comm1, recs)
	}
	bm.ReportMetric(float64(bm.Elapsed().Nanoseconds())/float64(bm.N*len(tmpl)), "ns/record")
	// CPU time is what the drainer's core spends: on a loaded machine, wall time is not.
	bm.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(bm.N*len(tmpl)), "cpu-ns/record")
}

// cpuTime is the process's user + system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
