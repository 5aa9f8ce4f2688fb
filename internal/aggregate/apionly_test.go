package aggregate

import (
	"testing"

	"github.com/ncclprof/ncclprof/internal/event"
)

// apiCall is a GroupApi (depth 1) and one CollApi in it, as NCCL 2.28+ starts for every
// collective call, from ts.
func apiCall(b *builder, fn string, count uint64, ts event.Ticks) (recs []event.Record, capi uint64) {
	g, ca := b.id(), b.id()
	return []event.Record{{Handle: g, Type: event.GroupAPI, N: 1, Start: ts, Stop: ts + 50},
		{Handle: ca, Parent: g, Type: event.CollAPI, Func: fn, Count: count, Dtype: "ncclFloat32",
			Start: ts + 1, Stop: ts + 11}}, ca
}

// Half of the calls get a Coll (ordinary kernels), half are symmetric kernels that NCCL reports
// only by GroupApi + CollApi: every call counts once, the API-only ones marked, with bytes
// (nccl-tests' size) and API time; none is counted beside its Coll.
func TestAPIOnlyCountedOnce(t *testing.T) {
	a := newAgg()
	ops := collect(a)
	var b builder
	for i := 0; i < 200; i++ {
		ts := event.Ticks(i) * 100
		recs, ca := apiCall(&b, "AllGather", 256, ts)
		if i%2 == 0 {
			c := coll(b.id(), "AllGather", 1024, ts+20, ts+30) // count × 4 bytes of ncclInt8
			c.Parent, c.Dtype = ca, "ncclInt8"
			recs = append(recs, c)
		}
		a.Window(comm1, recs)
	}
	a.Advance(comm1, 200*100+5000)
	res := a.Finalize(comm1)
	ring := res.Ops[OpKey{CommHash: comm1.Hash, Func: "AllGather", Algo: "RING", Proto: "SIMPLE", NChannels: 1}]
	api := res.Ops[OpKey{CommHash: comm1.Hash, Func: "AllGather"}]
	if ring == nil || api == nil || len(res.Ops) != 2 {
		t.Fatalf("operations %v, want AllGather with and without a Coll", res.Ops)
	}
	if ring.Count != 100 || ring.APIOnly != 0 || ring.Bytes != 100*4096 {
		t.Errorf("with a Coll: %+v, want 100 ops of 4096 B, none API-only", ring)
	}
	if api.Count != 100 || api.APIOnly != 100 || api.Bytes != 100*4096 || api.API.N != 100 ||
		api.API.Min != 10 || api.NoCompletion != 100 {
		t.Errorf("API only: %+v, want 100 ops of 4096 B, API-only, API time 10 ns", api)
	}
	if len(*ops) != 200 || !(*ops)[1].APIOnly || (*ops)[1].End != (*ops)[1].Start+10 {
		t.Errorf("%d operations handed on, want 200; second %+v", len(*ops), (*ops)[1])
	}
}

// A Coll that comes long after its group ended (past QuietNs, when its call was already counted
// from the API events alone) takes the count back: the summary counts the operation once, and
// says that metrics exported before have it twice.
func TestAPIOnlyRecountedWhenItsCollComes(t *testing.T) {
	a := newAgg()
	var b builder
	recs, ca := apiCall(&b, "AllReduce", 64, 0)
	a.Window(comm1, recs)
	a.Advance(comm1, 5000)
	c := coll(b.id(), "AllReduce", 64, 6000, 6010)
	c.Parent = ca
	a.Window(comm1, []event.Record{c})
	res := a.Finalize(comm1)
	if s := res.Ops[OpKey{CommHash: comm1.Hash, Func: "AllReduce"}]; s == nil || s.Count != 0 || s.Bytes != 0 {
		t.Errorf("API-only entry after its Coll came: %+v, want count 0", s)
	}
	if s := res.Ops[OpKey{CommHash: comm1.Hash, Func: "AllReduce", Algo: "RING", Proto: "SIMPLE", NChannels: 1}]; s == nil || s.Count != 1 {
		t.Errorf("the Coll: %+v, want count 1", s)
	}
	if res.Health.APIOnlyRecounted != 1 || len(res.Partial()) != 1 {
		t.Errorf("recounted %d, partial %q", res.Health.APIOnlyRecounted, res.Partial())
	}
}

// A CUDA graph captures an all-to-all once (a depth-1 GroupApi of 8 P2pApi, graph-captured, no
// tasks); each replay starts a Group and the 8 P2p again, their parents the capture-time
// P2pApi handles. Each replay is one AlltoAll, without the capture's API time, also replays
// long after the capture (past MaxAgeNs), and the captured calls are never counted on their own.
func TestGraphReplayEachOneOperation(t *testing.T) {
	a := newAgg()
	ops := collect(a)
	var b builder
	g := b.id()
	capture := []event.Record{{Handle: g, Type: event.GroupAPI, N: 1, Graph: true, Start: 0, Stop: 100}}
	var apis []uint64
	for peer := int32(0); peer < 4; peer++ {
		for _, fn := range []string{"Send", "Recv"} {
			api := b.capturedID()
			apis = append(apis, api)
			capture = append(capture, event.Record{Handle: api, Parent: g, Type: event.P2pAPI, Func: fn,
				Count: 100, Dtype: "ncclFloat32", Peer: peer, Graph: true, Start: 10, Stop: 20})
		}
	}
	a.Window(comm1, capture)
	const replays = 50
	for i := 0; i < replays; i++ {
		ts := event.Ticks(1000+i*100) * 1000 // 100 µs apart: 5 ms in all, past MaxAgeNs (1 ms)
		grp := b.id()
		recs := []event.Record{{Handle: grp, Type: event.Group, Start: ts, Stop: ts + 90}}
		for k, api := range apis {
			fn := "Send"
			if k%2 == 1 {
				fn = "Recv"
			}
			recs = append(recs, event.Record{Handle: b.id(), Parent: api, ParentGroup: grp, Type: event.P2p,
				Func: fn, Peer: int32(k / 2), Count: 100, Dtype: "ncclFloat32", NChannels: 2,
				Start: ts + event.Ticks(k), Stop: ts + 50})
		}
		a.Window(comm1, recs)
		a.Advance(comm1, ts+90)
	}
	res := a.Finalize(comm1)
	s := res.Ops[OpKey{CommHash: comm1.Hash, Func: "AlltoAll", NChannels: 2}]
	if s == nil || s.Count != replays || s.Bytes != replays*1600 || s.API.N != 0 || len(res.Ops) != 1 {
		t.Fatalf("operations %v (AlltoAll %+v), want %d AlltoAll of 1600 B without API time", res.Ops, s, replays)
	}
	for _, o := range *ops {
		if o.Members != 8 || !o.Rebuilt {
			t.Fatalf("a replay rebuilt from %d tasks, want 8: %+v", o.Members, o)
		}
	}
}

// A graph-captured collective that is never replayed while profiled is not an operation.
func TestCapturedCallAloneIsNotAnOperation(t *testing.T) {
	a := newAgg()
	var b builder
	recs, _ := apiCall(&b, "AllReduce", 64, 0)
	recs[0].Graph, recs[1].Graph = true, true
	a.Window(comm1, recs)
	if res := a.Finalize(comm1); len(res.Ops) != 0 {
		t.Errorf("a captured call alone became %v", res.Ops)
	}
}

// KernelCh asked for at run time: an operation enqueued before gets no kernel channels (NCCL
// fixed its mask then) and completes; one enqueued after waits for its kernel, as before.
func TestKernelChAskedForMidRun(t *testing.T) {
	a := newAgg()
	ops := collect(a)
	var b builder
	a.RecordingKernels(false, 0)
	before, after := b.id(), b.id()
	a.Window(comm1, []event.Record{coll(before, "AllReduce", 8, 1000, 1100)})
	a.RecordingKernels(true, 5000)
	a.Window(comm1, []event.Record{coll(after, "AllReduce", 8, 6000, 6100)})
	a.Advance(comm1, 20000)
	if len(*ops) != 1 || (*ops)[0].Handle != before {
		t.Fatalf("completed %+v, want only the operation enqueued before KernelCh was asked for", *ops)
	}
}

// Records lost to full windows: 3 AllReduce CollApi calls lost, of which one had its Coll
// recorded (its parent reads dropped) and one had its Coll lost too: 1 API-only operation,
// untimed. A Coll lost whose CollApi was recorded: that call is not counted again.
func TestAPIOnlyWhenRecordsAreLost(t *testing.T) {
	a := newAgg()
	var b builder
	a.SetLost(comm1, []LostOp{
		{Type: event.CollAPI, Func: "AllReduce", Dtype: "ncclFloat32", N: 3, SumCount: 3 * 64},
		{Type: event.Coll, API: LostAPIDropped, Func: "AllReduce", Dtype: "ncclFloat32", Algo: "RING",
			Proto: "LL", NChannels: 1, N: 1, SumCount: 64},
		{Type: event.Coll, API: LostAPIKept, Func: "AllGather", Dtype: "ncclInt8", Algo: "RING",
			Proto: "LL", NChannels: 1, N: 1, SumCount: 1024},
	})
	c := coll(b.id(), "AllReduce", 64, 10, 20)
	c.Flags |= event.ParentDropped
	recs, _ := apiCall(&b, "AllGather", 256, 100) // the call whose Coll was lost
	a.Window(comm1, append([]event.Record{c}, recs...))
	res := a.Finalize(comm1)
	api := res.Ops[OpKey{CommHash: comm1.Hash, Func: "AllReduce"}]
	if api == nil || api.Count != 1 || api.APIOnly != 1 || api.Untimed != 1 || api.Bytes != 256 {
		t.Errorf("lost API-only AllReduce: %+v, want 1 untimed of 256 B", api)
	}
	if ag := res.Ops[OpKey{CommHash: comm1.Hash, Func: "AllGather"}]; ag != nil {
		t.Errorf("an AllGather whose Coll was lost counted again from its CollApi: %+v", ag)
	}
	ring := res.Ops[OpKey{CommHash: comm1.Hash, Func: "AllGather", Algo: "RING", Proto: "LL", NChannels: 1}]
	if ring == nil || ring.Count != 1 || ring.Bytes != 4096 {
		t.Errorf("the lost AllGather Coll: %+v, want 1 of 4096 B", ring)
	}
}
