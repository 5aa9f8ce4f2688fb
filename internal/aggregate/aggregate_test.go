package aggregate

import (
	"math"
	"testing"

	"github.com/ncclprof/ncclprof/internal/event"
)

// handles are encoded like the plugin's: bit 0 set, communicator index in the top 10 bits.
func h(comm uint32, n uint64) uint64 { return 1 | n<<1 | uint64(comm)<<54 }

var comm1 = Comm{Index: 1, Incarnation: 1, Hash: 0xabc, Name: "tp", Rank: 0, NRanks: 4, ABI: 6}

// builder makes records for one communicator, with 1 tick = 1 ns.
type builder struct{ next uint64 }

func (b *builder) id() uint64 { b.next++; return h(comm1.Index, b.next) }

func coll(id uint64, fn string, count uint64, start, stop event.Ticks) event.Record {
	return event.Record{Handle: id, Type: event.Coll, Func: fn, Algo: "RING", Proto: "SIMPLE",
		NChannels: 1, Count: count, Dtype: "ncclFloat32", Start: start, Stop: stop}
}

func proxyOp(id, parent uint64, peer int32, send bool, start, stop event.Ticks) event.Record {
	return event.Record{Handle: id, Parent: parent, Type: event.ProxyOp, Peer: peer, IsSend: send,
		Channel: 0, Start: start, Stop: stop}
}

func sendStep(id, parent uint64, bytes uint64, sendWait, stop event.Ticks) event.Record {
	r := event.Record{Handle: id, Parent: parent, Type: event.ProxyStep, Bytes: bytes, Start: sendWait - 10, Stop: stop}
	r.States[event.SendWait] = sendWait
	return r
}

// newAgg is an aggregator with short limits for tests: 1 tick = 1 ns, quiet after 1 µs, given
// up after 1 ms, and no allowance for events still in open windows.
func newAgg() *Aggregator {
	a := New(1)
	a.QuietNs, a.MaxAgeNs, a.WindowDelayNs = 1000, 1e6, 0
	return a
}

func collect(a *Aggregator) *[]Op {
	var ops []Op
	a.OnOp = func(o *Op) { ops = append(ops, *o) }
	return &ops
}

// One AllReduce with one send op of two steps, all in one window: completion is Coll start →
// last ProxyOp stop; transfers are stop − SendWait; bytes follow nccl-tests.
func TestOneWindowCollective(t *testing.T) {
	a := newAgg()
	ops := collect(a)
	var b builder
	c, p, s1, s2 := b.id(), b.id(), b.id(), b.id()
	recs := []event.Record{
		sendStep(s2, p, 4096, 1500, 2100), // out of order: steps before their op
		coll(c, "AllReduce", 1024, 1000, 1100),
		proxyOp(p, c, 1, true, 1200, 2500),
		sendStep(s1, p, 8192, 1300, 1900),
	}
	a.Window(comm1, recs)
	if len(*ops) != 0 {
		t.Fatal("completed before being quiet for QuietNs")
	}
	a.Advance(2500 + 1000) // quiet for QuietNs after its last child stopped
	if len(*ops) != 1 {
		t.Fatalf("%d ops completed, want 1", len(*ops))
	}
	o := (*ops)[0]
	if o.Bytes != 4096 || o.EnqueueNs != 100 || o.CompletionNs != 1500 || o.Transfers != 2 ||
		o.TransferBytes != 12288 || o.Incomplete {
		t.Errorf("op %+v", o)
	}
	// algbw = 4096 B / 1500 ns; busbw × 2(n−1)/n with n = 4.
	if math.Abs(o.AlgBWGBps-4096.0/1500) > 1e-12 || math.Abs(o.BusBWGBps-4096.0/1500*1.5) > 1e-12 {
		t.Errorf("bandwidths %v %v", o.AlgBWGBps, o.BusBWGBps)
	}
	r := a.Finalize(comm1)
	pair := r.Pairs[PairKey{CommHash: 0xabc, Rank: 0, Peer: 1}]
	if pair == nil || pair.SentBytes != 12288 || pair.SendTransfers != 2 {
		t.Fatalf("pair %+v", pair)
	}
	if tt := r.Ops[opKey(&o)].TransferTime; tt.N != 2 || tt.Sum != 600+600 {
		t.Errorf("transfer times %+v", tt)
	}
}

// A ProxyOp open when its window was read is carried over; its steps and its stop arrive in
// the next window (the stop as a Late record).
func TestCarryOverAndLateStop(t *testing.T) {
	a := newAgg()
	ops := collect(a)
	var b builder
	c, p, s1 := b.id(), b.id(), b.id()
	open := proxyOp(p, c, 2, true, 1200, 0)
	open.Flags = event.Open
	a.Window(comm1, []event.Record{coll(c, "Broadcast", 256, 1000, 1050), open})
	if len(*ops) != 0 {
		t.Fatal("op completed while its ProxyOp is open")
	}
	late := event.Record{Type: event.Late, LateTarget: p, LateState: event.LateStop, Start: 5000}
	a.Window(comm1, []event.Record{sendStep(s1, p, 256, 3000, 4000), late})
	a.Advance(10000)
	if len(*ops) != 1 || (*ops)[0].CompletionNs != 4000 || (*ops)[0].Transfers != 1 {
		t.Fatalf("ops %+v", *ops)
	}
	res := a.Finalize(comm1)
	if res.Health.LateApplied != 1 || res.Health.LateUnmatched != 0 {
		t.Errorf("health %+v", res.Health)
	}
}

// CollNet-style ghost: a ProxyOp NCCL starts and never stops. The operation completes after
// MaxAgeNs, flagged incomplete, and memory is given back.
func TestGhostProxyOpExpires(t *testing.T) {
	a := newAgg()
	ops := collect(a)
	var b builder
	c, p := b.id(), b.id()
	ghost := proxyOp(p, c, 1, true, 1200, 0)
	ghost.Flags = event.Open
	a.Window(comm1, []event.Record{coll(c, "AllReduce", 64, 1000, 1010), ghost})
	a.Advance(500000)
	if len(*ops) != 0 {
		t.Fatal("gave up before MaxAgeNs")
	}
	a.Advance(2000 + 1e6)
	if len(*ops) != 1 || !(*ops)[0].Incomplete || (*ops)[0].HasCompletion {
		t.Fatalf("ops %+v", *ops)
	}
	cs := a.comms[comm1.Index]
	if len(cs.ops) != 0 || len(cs.proxies) != 0 {
		t.Errorf("pending state left: %d ops, %d proxies", len(cs.ops), len(cs.proxies))
	}
	if cs.res.Health.Expired != 1 {
		t.Errorf("expired %d", cs.res.Health.Expired)
	}
}

// ABI v1–v3 steps carry their op's running total; sizes are the differences, whatever window
// and order the steps arrive in.
func TestCumulativeStepSizes(t *testing.T) {
	a := newAgg()
	var b builder
	c, p := b.id(), b.id()
	step := func(total uint64, sw event.Ticks) event.Record {
		r := sendStep(b.id(), p, total, sw, sw+100)
		r.Flags |= event.Cumulative
		return r
	}
	op := proxyOp(p, c, 1, true, 1100, 0)
	op.Flags = event.Open
	a.Window(comm1, []event.Record{coll(c, "AllReduce", 1, 1000, 1001), op, step(100, 2000)})
	a.Window(comm1, []event.Record{step(350, 3000), step(150, 2500),
		{Type: event.Late, LateTarget: p, LateState: event.LateStop, Start: 4000}})
	res := a.Finalize(comm1)
	ch := res.Channels[ChannelKey{CommHash: 0xabc, Rank: 0, Channel: 0}]
	if ch == nil || ch.Bytes != 350 || ch.TransferSize.Min != 50 || ch.TransferSize.Max != 200 {
		t.Fatalf("channel %+v; want sizes 100, 50, 200", ch)
	}
}

// The proxy thread may start an operation's ProxyOps long after the operation was enqueued
// (a backlog of earlier work): until QuietNs has passed they still attach to it; after, they
// are late children, counted, not orphans.
func TestLateProxyOps(t *testing.T) {
	a := newAgg()
	ops := collect(a)
	var b builder
	c1, c2, p1, p2 := b.id(), b.id(), b.id(), b.id()
	a.Window(comm1, []event.Record{coll(c1, "AllReduce", 8, 1000, 1010), coll(c2, "AllReduce", 8, 1020, 1030)})
	a.Window(comm1, []event.Record{proxyOp(p1, c1, 1, true, 1900, 1950)}) // 900 ns later: attaches
	a.Window(comm1, []event.Record{{Handle: b.id(), Type: event.Group, Start: 8000, Stop: 8001}})
	a.Window(comm1, []event.Record{proxyOp(p2, c2, 1, true, 9000, 9100)}) // after c2 completed
	a.Advance(20000)
	res := a.Finalize(comm1)
	if len(*ops) != 2 || (*ops)[0].CompletionNs != 950 || (*ops)[1].HasCompletion {
		t.Errorf("ops %+v", *ops)
	}
	if res.Health.LateChildren != 1 || res.Health.OrphanProxy != 0 {
		t.Errorf("health %+v", res.Health)
	}
}

// ncclAlltoAll, Gather and Scatter as NCCL expands them (v5+): one GroupApi of depth 1 with
// several P2pApi calls; a user's own group (depth 2) stays separate sends and receives.
func TestRebuildFromP2P(t *testing.T) {
	type task struct {
		send bool
		peer int32
	}
	run := func(depth int32, tasks []task) []Op {
		a := newAgg()
		ops := collect(a)
		var b builder
		g := b.id()
		recs := []event.Record{{Handle: g, Type: event.GroupAPI, N: depth, Start: 1, Stop: 2}}
		for i, tk := range tasks {
			api, p2p := b.id(), b.id()
			fn := "Recv"
			if tk.send {
				fn = "Send"
			}
			ts := event.Ticks(10 + i)
			recs = append(recs,
				event.Record{Handle: api, Parent: g, Type: event.P2pAPI, Func: fn, Start: ts, Stop: ts + 1},
				event.Record{Handle: p2p, Parent: api, Type: event.P2p, Func: fn, Peer: tk.peer, Count: 100,
					Dtype: "ncclFloat32", NChannels: 2, Start: ts + 50, Stop: ts + 60})
		}
		a.Window(comm1, recs)
		a.Advance(1e5)
		a.Finalize(comm1)
		return *ops
	}
	all := func(send bool) (ts []task) {
		for p := int32(0); p < 4; p++ {
			ts = append(ts, task{send, p})
		}
		return ts
	}
	a2a := run(1, append(all(true), all(false)...))
	if len(a2a) != 1 || a2a[0].Func != "AlltoAll" || a2a[0].Bytes != 1600 || a2a[0].Members != 8 {
		t.Errorf("alltoall: %+v", a2a)
	}
	gather := run(1, append([]task{{true, 2}}, all(false)...)) // on the root, rank 2
	if len(gather) != 1 || gather[0].Func != "Gather" || gather[0].Root != 2 {
		t.Errorf("gather: %+v", gather)
	}
	scatter := run(1, append(all(true), task{false, 3}))
	if len(scatter) != 1 || scatter[0].Func != "Scatter" || scatter[0].Root != 3 {
		t.Errorf("scatter: %+v", scatter)
	}
	user := run(2, append(all(true), all(false)...))
	if len(user) != 8 {
		t.Errorf("a user's group of 8 P2P calls became %d ops: %+v", len(user), user)
	}
}

// nccl-tests' definitions of size and bus bandwidth.
func TestFactor(t *testing.T) {
	cases := []struct {
		fn      string
		n       int
		bus     float64
		sizeMul uint64
	}{
		{"AllReduce", 8, 2.0 * 7 / 8, 1},
		{"AllGather", 8, 7.0 / 8, 8},
		{"ReduceScatter", 4, 3.0 / 4, 4},
		{"AlltoAll", 2, 0.5, 2},
		{"Broadcast", 8, 1, 1},
		{"Send", 8, 1, 1},
		{"AllReduce", 0, 0, 1}, // size unknown (ABI v1–v3): no bus bandwidth
	}
	for _, c := range cases {
		bus, mul := Factor(c.fn, c.n)
		if math.Abs(bus-c.bus) > 1e-12 || mul != c.sizeMul {
			t.Errorf("Factor(%s, %d) = %v, %d; want %v, %d", c.fn, c.n, bus, mul, c.bus, c.sizeMul)
		}
	}
}

// An operation whose KernelCh carries an impossible GPU timestamp (the audit planted UINT64_MAX
// and INT64_MAX) gets its GPU time from the channels with real readings only.
func TestImpossibleGPUTimeIgnored(t *testing.T) {
	for _, bad := range []uint64{math.MaxUint64, math.MaxInt64} {
		a := newAgg()
		ops := collect(a)
		var b builder
		c, k0, k1 := b.id(), b.id(), b.id()
		kch := func(id uint64, ch uint8, start, stop uint64) event.Record {
			return event.Record{Handle: id, Parent: c, Type: event.KernelCh, Channel: ch, Start: 1200,
				Stop: 1900, Aux: 1800, PTimerStart: start, PTimerStop: stop}
		}
		a.Window(comm1, []event.Record{coll(c, "AllReduce", 1024, 1000, 1100),
			kch(k0, 0, 5_000_000, 5_000_700), kch(k1, 1, 5_000_100, bad)})
		a.Advance(1e7)
		if len(*ops) != 1 || !(*ops)[0].HasGPU || (*ops)[0].GPUNs != 700 {
			t.Errorf("stop %#x: ops %+v, want GPU time 700 ns from channel 0", bad, *ops)
		}
	}
}
