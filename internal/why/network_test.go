package why

import (
	"fmt"
	"testing"
	"time"

	"github.com/ncclprof/ncclprof/internal/commops"
)

// ringJob is 4 ranks × n AllReduces of 1 MiB in memory, each rank sending to the next in
// 100-106 µs, rank 2's send of collective n/2 taking 10× that: what slowCollectives reads.
func ringJob(n int) *analyzer { return ring(n, false) }

// ring is ringJob; replays: the n AllReduces are a CUDA graph's replays, all with seq 0.
func ring(n int, replays bool) *analyzer {
	const ranks = 4
	s := &commops.Set{Comms: []commops.Comm{{Hash: 1, NRanks: ranks}}}
	a := &analyzer{s: s, opt: Defaults, acts: map[ranksKey]*activity{}, hadLate: map[collKey]bool{}, res: &Result{}}
	for r := range ranks {
		s.Files = append(s.Files, fmt.Sprintf("rank%d.json", r))
		s.Procs = append(s.Procs, commops.Proc{Rank: r})
		act := &activity{}
		a.acts[ranksKey{int32(r), 0}] = act
		for q := range n {
			o := commops.Op{Proc: int32(r), Rank: int32(r), Func: "AllReduce", Seq: int64(q), Step: -1, Ref: commops.Ref{File: int32(r)},
				Handle: uint64(q + 1)}
			if replays {
				o.Seq, o.Repeat, o.GraphReplay = 0, int32(q), true
			}
			s.Ops = append(s.Ops, o)
			ns := 100_000 + int64(q%7)*1000
			if r == 2 && q == n/2 {
				ns *= 10
			}
			act.sent = append(act.sent, sent{coll: uint64(q + 1), peer: int32((r + 1) % ranks), bytes: 1 << 20, ns: ns})
		}
	}
	return a
}

// fastest is the shortest of 3 runs of slowCollectives on a fresh ringJob(n), checking that it
// names the planted link.
func fastest(t *testing.T, n int) time.Duration {
	best := time.Duration(1 << 62)
	for range 3 {
		a := ringJob(n)
		start := time.Now()
		a.slowCollectives()
		best = min(best, time.Since(start))
		if len(a.res.Rows) != 1 || a.res.Rows[0].Rank != 2 || a.res.Rows[0].Seq != int64(n/2) || a.res.Rows[0].Cause != Network {
			t.Fatalf("%d collectives: rows %+v, want rank 2's link at seq %d", n, a.res.Rows, n/2)
		}
	}
	return best
}

// 16× the collectives take about 16× the time, not 256×: each kind's usual time is taken once,
// not sorted again for every collective (which took 79 CPU s for 64 ranks × 10,000 where reading
// took 54).
func TestSlowCollectivesLinear(t *testing.T) {
	short, long := fastest(t, 500), fastest(t, 8000)
	t.Logf("500 collectives: %v; 8,000: %v (%.0f×)", short, long, float64(long)/float64(short))
	if long > 64*short {
		t.Errorf("16× the collectives took %.0f× the time: more than linear", float64(long)/float64(short))
	}
}

// A CUDA graph replayed: its replays share a seq (NCCL 2.26+) and are told apart by repeat; the
// slow link is named on its replay. Keyed by seq, every replay's sends were one collective's.
func TestSlowLinkOnAReplay(t *testing.T) {
	a := ring(200, true)
	a.slowCollectives()
	if len(a.res.Rows) != 1 || a.res.Rows[0].Rank != 2 || a.res.Rows[0].Repeat != 100 || !a.res.Rows[0].GraphReplay || a.res.Rows[0].Cause != Network {
		t.Fatalf("rows %+v, want rank 2's link on replay 100", a.res.Rows)
	}
	if c := a.res.Rows[0].Collective(); c != "0x0000000000000001 AllReduce #0 replay 100" {
		t.Errorf("collective %q", c)
	}
}
