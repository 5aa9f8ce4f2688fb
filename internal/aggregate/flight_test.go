package aggregate

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ncclprof/ncclprof/internal/collective"
	"github.com/ncclprof/ncclprof/internal/event"
)

// The flight record keeps the last FlightRecord operations completed, oldest first, collectives
// with their root and P2P with their peer.
func TestFlightRecordKeepsTheLast(t *testing.T) {
	var p progress
	if got := p.flight(); len(got) != 0 {
		t.Fatalf("empty progress: %v", got)
	}
	for i := 0; i < FlightRecord+4; i++ {
		o := &Op{Func: "AllReduce", Dtype: "ncclFloat32", Seq: uint64(i), Count: 100, Peer: -1, Root: 0}
		if i%5 == 4 {
			o = &Op{Func: "Send", Dtype: "ncclInt8", Seq: uint64(i / 5), Count: 7, Peer: 3, Root: -1}
		}
		p.done(o, 0)
	}
	got := p.flight()
	if len(got) != FlightRecord || p.ops != FlightRecord+4 {
		t.Fatalf("%d kept of %d done", len(got), p.ops)
	}
	for k, c := range got {
		i := k + 4 // the first four gave way
		want := Called{Func: "AllReduce", Dtype: "ncclFloat32", Seq: int64(i), Count: 100, Peer: -1, Root: 0}
		if i%5 == 4 {
			want = Called{P2p: true, Func: "Send", Dtype: "ncclInt8", Seq: int64(i / 5), Count: 7, Peer: 3, Root: -1}
		}
		if c != want {
			t.Errorf("record %d: %+v, want %+v", k, c, want)
		}
	}
}

// A CUDA graph's replays share one seq (NCCL 2.26+): the aggregator numbers them by repeat, in
// flight and in the progress a hang dump shows, so a rank at one replay and a rank at the next
// differ. Here without their captured API call (ABI v4 and earlier have none), so replays and
// eager collectives are numbered in one run: three collectives of seq 5 complete, a fourth
// and two of seq 6 stay open.
func TestGraphReplaysNumberedByRepeat(t *testing.T) {
	a := newAgg()
	var b builder
	var recs []event.Record
	seqs := []uint64{5, 5, 5, 5, 6, 6}
	for i, seq := range seqs {
		r := coll(b.id(), "AllReduce", 1024, event.Ticks(100*(i+1)), event.Ticks(100*(i+1)+10))
		r.Seq = seq
		if i >= 3 { // enqueued, no child yet: in flight
			r.Stop, r.Flags = 0, event.Open
		}
		recs = append(recs, r)
	}
	a.Window(comm1, recs)
	a.Advance(comm1, 1e5)
	prog, open, _ := a.InFlight(comm1, 0)
	var got [][2]int64
	for _, o := range open {
		got = append(got, [2]int64{o.Seq, o.Repeat})
	}
	if want := [][2]int64{{5, 3}, {6, 0}, {6, 1}}; !slices.Equal(got, want) {
		t.Errorf("open (seq, repeat): %v, want %v", got, want)
	}
	if d := prog.ByFunc["AllReduce"]; d.Ops != 3 || d.Last.Seq != 5 || d.Last.Repeat != 2 {
		t.Errorf("completed: %+v, want 3 ops, last seq 5 repeat 2", d)
	}
	var reps []int64
	for _, c := range prog.Recent {
		reps = append(reps, c.Repeat)
	}
	if !slices.Equal(reps, []int64{0, 1, 2}) {
		t.Errorf("flight record repeats %v, want [0 1 2]", reps)
	}
}

// In a window the eager collective (the application's thread) can come before the replays that
// share its seq (CUDA's callback thread), each thread filling its own block of slots: they are
// numbered in the order they started, as every rank numbers them. Three collectives of seq 5,
// then a fourth listed first in the window (unmarked, as below ABI v5): the fourth is repeat 3.
func TestRepeatsNumberedInStartOrder(t *testing.T) {
	a := newAgg()
	var b builder
	var replays []event.Record
	for i := range 3 {
		r := coll(b.id(), "AllReduce", 1024, event.Ticks(100*(i+1)), event.Ticks(100*(i+1)+10))
		r.Seq = 5
		replays = append(replays, r)
	}
	eager := coll(b.id(), "AllReduce", 1024, 400, 0)
	eager.Seq, eager.Flags = 5, event.Open
	a.Window(comm1, append([]event.Record{eager}, replays...))
	_, open, _ := a.InFlight(comm1, 0)
	if len(open) != 1 || open[0].Seq != 5 || open[0].Repeat != 3 {
		t.Errorf("open: %+v, want the eager AllReduce seq 5 as repeat 3", open)
	}
}

// Replays (their Coll's parent a captured API call, its handle marked) are numbered apart from eager
// collectives: NCCL starts replays only on ranks with proxy work in the graph, so the eager
// AllReduce that shares their seq must be repeat 0 on every rank, whether it saw them or not.
// Three replays of seq 5 and the eager seq 5 complete; the progress counts the replays and
// ends at the eager one (a seq's replays come before it).
func TestReplaysNumberedApartFromEager(t *testing.T) {
	a := newAgg()
	var b builder
	capture := b.capturedID()
	api := event.Record{Handle: capture, Type: event.CollAPI, Func: "AllReduce", Count: 1024, Dtype: "ncclFloat32",
		Start: 10, Stop: 20, Graph: true}
	recs := append([]event.Record{api}, seqColls(&b, 5, 4, 3, capture)...)
	eagerNext := coll(b.id(), "AllReduce", 1024, 600, 0)
	eagerNext.Seq, eagerNext.Flags = 6, event.Open
	replayOpen := coll(b.id(), "AllReduce", 1024, 700, 0)
	replayOpen.Seq, replayOpen.Parent, replayOpen.Flags = 7, capture, event.Open
	a.Window(comm1, append(recs, eagerNext, replayOpen))
	a.Advance(comm1, 1e5)
	prog, open, _ := a.InFlight(comm1, 0)
	d := prog.ByFunc["AllReduce"]
	if d.Ops != 4 || d.Replays != 3 || d.Last != (collective.Place{Seq: 5}) {
		t.Errorf("completed %+v, want 4 (3 replays), the last the eager seq 5", d)
	}
	if got, want := recentPlaces(prog), "5/true/0 5/true/1 5/true/2 5/false/0"; got != want {
		t.Errorf("flight record %s, want %s", got, want)
	}
	if len(open) != 2 || open[0].Replay || open[1].Seq != 7 || !open[1].Replay || open[1].Repeat != 0 {
		t.Errorf("open %+v, want the eager seq 6, then the replay seq 7 (repeat 0)", open)
	}
}

// A replay whose captured API call is long gone (the graph was captured at start, its CollApi
// forgotten MaxAgeNs after its last replay, then replayed again after a pause) is still a replay:
// the plugin marks a captured call's handle (bit 30), which its replays name as parent.
func TestReplayKnownFromItsParentHandle(t *testing.T) {
	a := newAgg()
	var b builder
	captured := b.capturedID() // its record is in no window
	a.Window(comm1, seqColls(&b, 5, 3, 2, captured))
	a.Advance(comm1, 1e5)
	prog, _, _ := a.InFlight(comm1, 0)
	if got, want := recentPlaces(prog), "5/true/0 5/true/1 5/false/0"; got != want {
		t.Errorf("flight record %s, want %s (two replays, then the eager collective)", got, want)
	}
}

// seqColls: n completed AllReduces of one seq, 100 ticks apart, the first `replays` of them
// with the captured API call `parent` as parent.
func seqColls(b *builder, seq uint64, n, replays int, parent uint64) []event.Record {
	var recs []event.Record
	for i := range n {
		r := coll(b.id(), "AllReduce", 1024, event.Ticks(100*(i+1)), event.Ticks(100*(i+1)+10))
		r.Seq = seq
		if i < replays {
			r.Parent = parent
		}
		recs = append(recs, r)
	}
	return recs
}

// recentPlaces: the flight record's collectives as seq/replay/repeat.
func recentPlaces(p Progress) string {
	var out []string
	for _, c := range p.Recent {
		out = append(out, fmt.Sprintf("%d/%v/%d", c.Seq, c.Replay, c.Repeat))
	}
	return strings.Join(out, " ")
}
