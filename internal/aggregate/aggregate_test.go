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

// capturedID is the handle of an API call captured in a CUDA graph, as the plugin gives it: a
// window record's (bit 1 clear) with the mark (bit 30, NP_F_MARK) its replays show.
func (b *builder) capturedID() uint64 {
	b.next++
	return 1 | b.next<<33 | 1<<30 | uint64(comm1.Index)<<54
}

func coll(id uint64, fn string, count uint64, start, stop event.Ticks) event.Record {
	return event.Record{Handle: id, Type: event.Coll, Func: fn, Algo: "RING", Proto: "SIMPLE",
		NChannels: 1, Count: count, Dtype: "ncclFloat32", Start: start, Stop: stop}
}

func proxyOp(id, parent uint64, peer int32, send bool, start, stop event.Ticks) event.Record {
	return event.Record{Handle: id, Parent: parent, Type: event.ProxyOp, Peer: peer, IsSend: send,
		Channel: 0, Start: start, Stop: stop}
}

// withTransfers is a ProxyOp record as the plugin completes it: its steps' transfers folded in.
func withTransfers(r event.Record, n uint32, bytes, ticks uint64) event.Record {
	r.XferN, r.XferBytes, r.XferTime, r.StepsDone = n, bytes, ticks, n
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

// One AllReduce with one send op, all in one window: completion is Coll start → last ProxyOp
// stop; the op's transfers are what its ProxyOp carries; bytes follow nccl-tests. Step records
// (a trace's) change nothing: the plugin folded them already.
func TestOneWindowCollective(t *testing.T) {
	a := newAgg()
	ops := collect(a)
	var b builder
	c, p, s1 := b.id(), b.id(), b.id()
	step := event.Record{Handle: s1, Parent: p, Type: event.ProxyStep, Bytes: 8192, Start: 1300, Stop: 1900}
	recs := []event.Record{
		step, // out of order: a step before its op
		coll(c, "AllReduce", 1024, 1000, 1100),
		withTransfers(proxyOp(p, c, 1, true, 1200, 2500), 2, 12288, 1200),
	}
	a.Window(comm1, recs)
	if len(*ops) != 0 {
		t.Fatal("completed before being quiet for QuietNs")
	}
	a.Advance(comm1, 2500+999)
	if len(*ops) != 0 {
		t.Fatal("completed before QuietNs had passed after its last child")
	}
	// Everything read up to QuietNs after its last child stopped (pending operations are scanned
	// every QuietNs/4, so completion comes within that of being due).
	a.Advance(comm1, 2500+1000+250)
	if len(*ops) != 1 {
		t.Fatalf("%d ops completed, want 1", len(*ops))
	}
	o := (*ops)[0]
	if o.Bytes != 4096 || o.EnqueueNs != 100 || o.CompletionNs != 1500 || o.Transfers != 2 ||
		o.TransferBytes != 12288 || o.TransferNs != 1200 || o.Incomplete {
		t.Errorf("op %+v", o)
	}
	// algbw = 4096 B / 1500 ns; busbw × 2(n−1)/n with n = 4.
	if math.Abs(o.AlgBWGBps-4096.0/1500) > 1e-12 || math.Abs(o.BusBWGBps-4096.0/1500*1.5) > 1e-12 {
		t.Errorf("bandwidths %v %v", o.AlgBWGBps, o.BusBWGBps)
	}
	r := a.Finalize(comm1)
	if st := r.Ops[opKey(&o)]; st.Transfers != 2 || st.TransferBytes != 12288 || st.TransferNs != 1200 {
		t.Errorf("op stats %+v", st)
	}
}

// A ProxyOp open when its window was read is carried over; its stop arrives in the next window
// as a Late record carrying what its steps moved meanwhile.
func TestCarryOverAndLateStop(t *testing.T) {
	a := newAgg()
	ops := collect(a)
	var b builder
	c, p := b.id(), b.id()
	open := proxyOp(p, c, 2, true, 1200, 0)
	open.Flags = event.Open
	a.Window(comm1, []event.Record{coll(c, "Broadcast", 256, 1000, 1050), open})
	if len(*ops) != 0 {
		t.Fatal("op completed while its ProxyOp is open")
	}
	a.Advance(comm1, 4500) // quiet long enough, but a child is open: not complete
	if len(*ops) != 0 {
		t.Fatal("op completed while its ProxyOp is open")
	}
	late := withTransfers(event.Record{Type: event.Late, LateTarget: p, LateState: event.LateStop, Start: 5000}, 1, 256, 1000)
	a.Window(comm1, []event.Record{late})
	a.Advance(comm1, 10000)
	if len(*ops) != 1 || (*ops)[0].CompletionNs != 4000 || (*ops)[0].Transfers != 1 || (*ops)[0].TransferNs != 1000 {
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
	a.Advance(comm1, 500000)
	if len(*ops) != 0 {
		t.Fatal("gave up before MaxAgeNs")
	}
	a.Advance(comm1, 2000+1e6)
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

// The proxy thread may start an operation's ProxyOps long after the operation was enqueued
// (a backlog of earlier work; real NCCL 2.30.7 did by seconds, testdata/nccl/2.30.7-net-burst).
// An operation of a kind that has had ProxyOps on its communicator waits ProxyWaitNs for its
// own before it completes; after that they are late children, counted, not orphans. A kind
// that never had ProxyOps is not waited for.
func TestLateProxyOps(t *testing.T) {
	run := func(waitNs float64) ([]Op, Health) {
		a := newAgg()
		a.ProxyWaitNs = waitNs
		ops := collect(a)
		var b builder
		c1, c2, p1, p2 := b.id(), b.id(), b.id(), b.id()
		a.Window(comm1, []event.Record{coll(c1, "AllReduce", 8, 1000, 1010), coll(c2, "AllReduce", 8, 1020, 1030)})
		a.Window(comm1, []event.Record{proxyOp(p1, c1, 1, true, 1900, 1950)}) // 900 ns later: attaches
		a.Window(comm1, []event.Record{{Handle: b.id(), Type: event.Group, Start: 8000, Stop: 8001}})
		a.Window(comm1, []event.Record{proxyOp(p2, c2, 1, true, 9000, 9100)}) // 8 µs after c2
		a.Advance(comm1, 20000)
		res := a.Finalize(comm1)
		return *ops, res.Health
	}
	ops, h := run(1e6)
	if len(ops) != 2 || ops[0].CompletionNs != 950 || ops[1].CompletionNs != 8080 || h.LateChildren != 0 {
		t.Errorf("waiting 1 ms for a ProxyOp: ops %+v, health %+v", ops, h)
	}
	ops, h = run(3000)
	if len(ops) != 2 || ops[0].CompletionNs != 950 || ops[1].HasCompletion || h.LateChildren != 1 || h.OrphanProxy != 0 {
		t.Errorf("waiting 3 µs: ops %+v, health %+v", ops, h)
	}

	// Learned per kind: after one AllReduce had a ProxyOp, a Broadcast (another collective of
	// the same algorithm family) waits for its own; a Send to a peer that never had ProxyOps
	// (on the same node, or itself) completes QuietNs after its stop, not ProxyWaitNs.
	a := newAgg()
	a.ProxyWaitNs = 1e6
	ops2 := collect(a)
	var b builder
	c1, p1, c3, s4 := b.id(), b.id(), b.id(), b.id()
	a.Window(comm1, []event.Record{coll(c1, "AllReduce", 8, 1000, 1010), proxyOp(p1, c1, 1, true, 1100, 1200)})
	a.Window(comm1, []event.Record{coll(c3, "Broadcast", 8, 2000, 2010),
		{Handle: s4, Type: event.P2p, Func: "Send", Peer: 2, Count: 16, Dtype: "ncclFloat32", Start: 2020, Stop: 2030}})
	a.Advance(comm1, 5000)
	if len(*ops2) != 2 || (*ops2)[0].Func != "AllReduce" || (*ops2)[1].Func != "Send" {
		t.Errorf("before finalize, want the AllReduce and the Send completed (the Broadcast waiting), got %+v", *ops2)
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
		a.Advance(comm1, 1e5)
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

// A collective called inside a GroupApi (every NCCL 2.28+ collective) lets its group go once
// the group is quiet: group entries do not pile up for MaxAgeNs.
func TestGroupsOfCollectivesAreReleased(t *testing.T) {
	a := newAgg()
	var b builder
	for i := 0; i < 100; i++ {
		ts := event.Ticks(i) * 100
		g, ca, c := b.id(), b.id(), b.id()
		cr := coll(c, "AllReduce", 8, ts+3, ts+4)
		cr.Parent = ca
		a.Window(comm1, []event.Record{{Handle: g, Type: event.GroupAPI, N: 1, Start: ts, Stop: ts + 5},
			{Handle: ca, Parent: g, Type: event.CollAPI, Func: "AllReduce", Start: ts + 1, Stop: ts + 2}, cr})
	}
	a.Advance(comm1, 100*100+5000) // QuietNs (1 µs) and a scan later, far short of MaxAgeNs
	if n := len(a.comms[comm1.Index].groups); n != 0 {
		t.Errorf("%d group entries left after every operation completed", n)
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
		a.Advance(comm1, 1e7)
		if len(*ops) != 1 || !(*ops)[0].HasGPU || (*ops)[0].GPUNs != 700 {
			t.Errorf("stop %#x: ops %+v, want GPU time 700 ns from channel 0", bad, *ops)
		}
	}
}

// A P2P operation's seq is the ordinal the plugin's hot path counted (np_p2p_next), carried in
// its record: in flight (hang dumps) and completed, whatever the aggregator itself saw — a P2p
// the plugin could not record still advanced the ordinal, and the next one must say so. Its
// sample mark travels with it too.
func TestP2PSeqIsThePluginsOrdinal(t *testing.T) {
	var b builder
	s1, s2 := b.id(), b.id()
	send := func(id uint64, ord uint64, start event.Ticks, open bool) event.Record {
		r := event.Record{Handle: id, Type: event.P2p, Func: "Send", Peer: 2, Count: 16, Dtype: "ncclFloat32",
			NChannels: 1, Seq: ord, Start: start, Stop: start + 10, Flags: event.Sampled}
		if open { // still enqueuing: in flight
			r.Stop, r.Flags = 0, r.Flags|event.Open
		}
		return r
	}
	// Ordinal 7, then 9: ordinal 8 found no slot in the plugin (counted in its lost table).
	a := newAgg()
	a.Window(comm1, []event.Record{send(s1, 7, 100, true), send(s2, 9, 200, true)})
	_, open, _ := a.InFlight(comm1, 0)
	if len(open) != 2 || open[0].Seq != 7 || open[1].Seq != 9 || open[0].Kind != event.P2p {
		t.Fatalf("in flight: %+v, want P2P seqs 7 and 9", open)
	}
	a = newAgg()
	ops := collect(a)
	a.Window(comm1, []event.Record{send(s1, 7, 100, false), send(s2, 9, 200, false)})
	a.Finalize(comm1)
	if len(*ops) != 2 || (*ops)[0].Seq != 7 || (*ops)[1].Seq != 9 || (*ops)[0].Sample != event.Sampled {
		t.Errorf("completed: %+v, want seqs 7 and 9 marked sampled", *ops)
	}
}

// A watcher's threshold (SlowNs, read when the operation is) is checked as each child's stop
// moves the operation's end: OnSlow fires once, at the first stop past it, before the operation
// completes (QuietNs later); the completed Op says Slow. An operation that stays under its
// threshold, or has none, never fires.
func TestSlowReportedBeforeCompletion(t *testing.T) {
	a := newAgg()
	ops := collect(a)
	a.SlowNs = func(o *Op) float64 {
		if o.Func == "Broadcast" {
			return 0 // no threshold yet (a watcher still warming up)
		}
		return 3000
	}
	type fired struct {
		seq       uint64
		end       event.Ticks
		completed int
	}
	var slow []fired
	a.OnSlow = func(o *Op) { slow = append(slow, fired{o.Seq, o.End, len(*ops)}) }
	var b builder
	c1, c2, c3 := b.id(), b.id(), b.id()
	r1, r2, r3 := coll(c1, "AllReduce", 1, 1000, 1100), coll(c2, "AllReduce", 1, 1000, 1100), coll(c3, "Broadcast", 1, 1000, 1100)
	r1.Seq, r2.Seq, r3.Seq = 1, 2, 3
	a.Window(comm1, []event.Record{r1, r2, r3,
		proxyOp(b.id(), c1, 1, true, 1200, 3500),  // 2500 ns so far: under 3000
		proxyOp(b.id(), c1, 1, false, 1300, 4500), // 3500 ns: past it
		proxyOp(b.id(), c1, 2, true, 1300, 5000),  // later still: reported once only
		proxyOp(b.id(), c2, 1, true, 1200, 2000),
		proxyOp(b.id(), c3, 1, true, 1200, 9000)})
	if len(slow) != 1 || slow[0].seq != 1 || slow[0].end != 4500 || slow[0].completed != 0 {
		t.Fatalf("slow reported %+v, want seq 1 once, at its end 4500, before any operation completed", slow)
	}
	a.Advance(comm1, 20000)
	if len(*ops) != 3 {
		t.Fatalf("%d operations completed", len(*ops))
	}
	for _, o := range *ops {
		if o.Slow != (o.Seq == 1) {
			t.Errorf("seq %d (%s, %.0f ns): Slow %v", o.Seq, o.Func, o.CompletionNs, o.Slow)
		}
	}
}

// A ProxyOp and a KernelCh whose operation was never tracked (their Coll found no slot: a
// sentinel parent), beside a whole operation: the summary says its figures are partial, naming
// both (before, it called itself complete while their transfers and GPU time were in no
// operation's figures).
func TestChildrenWithoutTheirOperationMakeItPartial(t *testing.T) {
	a := newAgg()
	ops := collect(a)
	var b builder
	c, p, lostP, lostK := b.id(), b.id(), b.id(), b.id()
	const dropped = 0x2 // the plugin's NP_H_DROPPED
	recs := []event.Record{
		coll(c, "AllReduce", 1024, 1000, 1100),
		withTransfers(proxyOp(p, c, 1, true, 1200, 2500), 2, 12288, 1200),
		withTransfers(proxyOp(lostP, dropped, 1, true, 1300, 2600), 1, 4096, 600),
		{Handle: lostK, Parent: dropped, Type: event.KernelCh, Start: 1250, Stop: 2400},
	}
	a.Window(comm1, recs)
	a.Advance(comm1, 10000)
	if len(*ops) != 1 {
		t.Fatalf("%d operations, want the one whose Coll was recorded", len(*ops))
	}
	res := a.Finalize(comm1)
	if res.Health.OrphanProxy != 1 || res.Health.OrphanKernel != 1 {
		t.Errorf("health %+v, want one orphan ProxyOp and one orphan KernelCh", res.Health)
	}
	if p := res.Partial(); len(p) != 2 {
		t.Errorf("partial %q, want the ProxyOp and the KernelCh named", p)
	}
}
