package hang

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ncclprof/ncclprof/internal/collective"
	"github.com/ncclprof/ncclprof/internal/commops"
)

const t0 = 1_800_000_000_000_000_000

// proc is a dump of one process, built for a test.
func proc(host string, pid int, comms ...Comm) *Dump {
	return &Dump{Host: host, PID: pid, Reason: ReasonTimeout, TimeoutS: 60, EventMask: 3871, WrittenUnixNs: t0 + 61e9, Comms: comms}
}

func comm(hash string, rank, nranks int, open ...Op) Comm {
	return Comm{Hash: hash, Name: "c" + hash[len(hash)-2:], Rank: rank, NRanks: nranks, Open: open}
}

func coll(fn string, seq int64, proxy ...ProxyOp) Op {
	return Op{Kind: KindColl, Func: fn, Seq: seq, NChannels: 1, StartUnixNs: t0, Proxy: proxy}
}

func p2p(fn string, seq int64, peer int, proxy ...ProxyOp) Op {
	return Op{Kind: KindP2p, Func: fn, Seq: seq, Peer: &peer, NChannels: 1, StartUnixNs: t0, Proxy: proxy}
}

// pop is a ProxyOp on channel 0 whose open steps are in the given states from step `done`.
func pop(dir string, peer, done int, states ...string) ProxyOp {
	p := ProxyOp{Channel: 0, Peer: peer, Direction: dir, NSteps: 8, StepsDone: done, StartUnixNs: t0 + 1000}
	for i, s := range states {
		p.Open = append(p.Open, Step{Step: done + i, State: s, SinceUnixNs: t0 + 2000})
	}
	return p
}

func run(t *testing.T, dumps []*Dump, extra map[string]string) *Result {
	t.Helper()
	dir := t.TempDir()
	for _, d := range dumps {
		if _, err := Write(dir, d); err != nil {
			t.Fatal(err)
		}
	}
	for name, body := range extra {
		os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644)
	}
	in, err := Load([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	return Analyze(in)
}

func one(t *testing.T, r *Result) Suspect {
	t.Helper()
	if len(r.Suspects) != 1 {
		t.Fatalf("%d suspects, want 1:\n%s", len(r.Suspects), r.Verdict)
	}
	return r.Suspects[0]
}

// Point-to-point: rank 1's Send #4 to rank 0 waits for a receive buffer; rank 0's dump shows it
// completed 4 receives from rank 1 and has nothing open: it never posted Recv #4.
func TestP2pNeverPosted(t *testing.T) {
	r := run(t, []*Dump{
		proc("a", 1, comm("0x00000000000000bb", 1, 2, p2p("Send", 4, 0, pop(Send, 0, 0, SendPeerWait)))),
		proc("b", 2, Comm{Hash: "0x00000000000000bb", Rank: 0, NRanks: 2, P2pCompleted: []P2pCompleted{{Peer: 1, Sends: 4, Recvs: 4}}}),
	}, nil)
	s := one(t, r)
	if s.Rank != 0 || s.Kind != StateAbsent || s.Func != "Recv" || s.Seq != 4 || s.P2pPeer == nil || *s.P2pPeer != 1 || s.Basis != BasisOwnDump {
		t.Errorf("suspect %+v", s)
	}
	if !strings.Contains(s.Why, "rank 0 (b, pid 2) never posted Recv #4 with rank 1") {
		t.Errorf("verdict %q", s.Why)
	}
}

// Point-to-point over a link: both sides are in the matching pair, the send went to the network
// and never completed while the receive waits for the same step.
func TestP2pLink(t *testing.T) {
	r := run(t, []*Dump{
		proc("a", 1, comm("0x00000000000000bb", 1, 2, p2p("Send", 4, 0, pop(Send, 0, 2, SendWait, SendWait)))),
		proc("b", 2, comm("0x00000000000000bb", 0, 2, p2p("Recv", 4, 1, pop(Recv, 1, 2, RecvWait, RecvWait)))),
	}, nil)
	s := one(t, r)
	if s.Kind != "link" || s.Rank != 1 || *s.Peer != 0 || *s.Channel != 0 || *s.Step != 2 {
		t.Errorf("suspect %+v", s)
	}
	if !strings.Contains(s.Why, "rank 0 still waits for that step (RecvWait)") {
		t.Errorf("verdict %q", s.Why)
	}
}

// A rank absent from a collective because its dump shows it stuck in another communicator's
// operation: named, with where it is, after the hang it waits in.
func TestAbsentBusyElsewhere(t *testing.T) {
	r := run(t, []*Dump{
		proc("a", 1, comm("0x00000000000000aa", 0, 2, coll("AllReduce", 5, pop(Send, 1, 0, SendPeerWait), pop(Recv, 1, 0, RecvWait)))),
		proc("b", 2, Comm{Hash: "0x00000000000000aa", Name: "dp", Rank: 1, NRanks: 2, Completed: []Completed{{Func: "AllReduce", Ops: 5, LastSeq: 4}}},
			comm("0x00000000000000cc", 0, 2, coll("AllGather", 9, pop(Recv, 1, 0, RecvWait)))),
	}, nil)
	if len(r.Suspects) != 2 {
		t.Fatalf("%d suspects:\n%s", len(r.Suspects), r.Verdict)
	}
	first, busy := r.Suspects[0], r.Suspects[1]
	if first.Comm != "0x00000000000000cc" || first.Rank != 1 || first.Basis != BasisNoDump {
		t.Errorf("first suspect %+v: want rank 1 of 0x…cc, which wrote no dump", first)
	}
	if busy.Comm != "0x00000000000000aa" || busy.Rank != 1 || busy.BusyIn == nil || busy.BusyIn.Comm != "0x00000000000000cc" || busy.BusyIn.Seq != 9 {
		t.Errorf("second suspect %+v", busy)
	}
	if !strings.HasSuffix(busy.Why, "it is in AllGather seq 9 on comm 0x00000000000000cc (ccc) instead") {
		t.Errorf("verdict %q", busy.Why)
	}
}

// A rank without a dump whose summary says it destroyed the communicator before the operation
// (it left the training loop early) is named from its summary; one whose summary counts the
// operation completed it.
func TestSummaryOfRankThatLeft(t *testing.T) {
	ring := func(rank int) *Dump {
		return proc("h", 10+rank, Comm{Hash: "0x00000000000000aa", Rank: rank, NRanks: 4, Completed: []Completed{{Func: "AllReduce", Ops: 3, LastSeq: 2}},
			Open: []Op{coll("AllReduce", 3)}})
	}
	summary := func(pid, rank int, count int) string {
		return fmt.Sprintf(`{"ncclprof_summary_version":1,"host":"h","pid":%d,"comm":{"comm_hash":"0x00000000000000aa","rank":%d,"nranks":4},"operations":[{"func":"AllReduce","count":%d}]}`, pid, rank, count)
	}
	r := run(t, []*Dump{ring(0), ring(1)}, map[string]string{
		"ncclprof-summary-h-12-00000000000000aa-r2.json": summary(12, 2, 3),
		"ncclprof-summary-h-13-00000000000000aa-r3.json": summary(13, 3, 4),
	})
	s := one(t, r)
	if s.Rank != 2 || s.Kind != StateAbsent || s.Basis != BasisSummary || s.PID != 12 {
		t.Errorf("suspect %+v", s)
	}
	if !strings.Contains(s.Why, "rank 2 (h, pid 12) destroyed comm 0x00000000000000aa after 3 AllReduce") {
		t.Errorf("verdict %q", s.Why)
	}
	if g := r.Hangs[0].Ranks[3]; g.State != StateFinished {
		t.Errorf("rank 3, whose summary counts the operation: %+v", g)
	}
}

// Dumps with nothing open (written on request in a healthy job) name nobody; the same dump
// found twice counts once.
func TestNothingInFlight(t *testing.T) {
	d := proc("a", 1, Comm{Hash: "0x00000000000000aa", Rank: 0, NRanks: 2})
	d.Reason = ReasonRequest
	dir := t.TempDir()
	if _, err := Write(dir, d); err != nil {
		t.Fatal(err)
	}
	copyDir := t.TempDir()
	b, _ := os.ReadFile(filepath.Join(dir, FileName("a", 1)))
	os.WriteFile(filepath.Join(copyDir, FileName("a", 1)), b, 0o644)
	in, err := Load([]string{dir, copyDir})
	if err != nil {
		t.Fatal(err)
	}
	r := Analyze(in)
	if len(r.Suspects) != 0 || len(r.Hangs) != 0 || r.Dumps.Read != 1 || r.Dumps.NothingInFlight != 1 || r.Dumps.Requested != 1 {
		t.Errorf("%+v", r)
	}
	if r.Verdict != "nothing in flight: no dump shows an open NCCL operation" {
		t.Errorf("verdict %q", r.Verdict)
	}
}

// Every rank in the kernel and nothing else to go on (intra-node, nobody missing): no suspect,
// and the verdict says so rather than guessing.
func TestNoSuspect(t *testing.T) {
	in := func(rank int) *Dump {
		o := coll("AllReduce", 7)
		o.Kernel = []KernelCh{{Channel: 0, Started: true, StartUnixNs: t0 + 10}}
		d := proc("h", 10+rank, Comm{Hash: "0x00000000000000aa", Rank: rank, NRanks: 2, Open: []Op{o}})
		d.EventMask |= kernelChBit
		return d
	}
	r := run(t, []*Dump{in(0), in(1)}, nil)
	if len(r.Suspects) != 0 || len(r.Hangs) != 1 || !strings.Contains(r.Verdict, "the dumps name no rank to blame") {
		t.Errorf("verdict %q, suspects %+v", r.Verdict, r.Suspects)
	}
	if g := r.Hangs[0].Groups; len(g) != 1 || g[0].Ranks != "0-1" || g[0].State != StateInKernel {
		t.Errorf("groups %+v", g)
	}
}

func TestRanges(t *testing.T) {
	for in, want := range map[string]string{"": "", "5": "5", "0 1 2 4 6 7": "0-2,4,6-7", "9 3 4": "3-4,9"} {
		var rs []int
		for _, f := range strings.Fields(in) {
			var v int
			fmt.Sscan(f, &v)
			rs = append(rs, v)
		}
		if got := Ranges(rs); got != want {
			t.Errorf("Ranges(%s) = %q, want %q", in, got, want)
		}
	}
}

// NCCL 2.23-2.26 do not tell the plugin a communicator's size (nranks 0): the ranks the dumps
// name, their peers included, give it, and a rank without a dump is still found by its peers.
func TestUnknownSize(t *testing.T) {
	ring := func(rank int, p ...ProxyOp) *Dump {
		c := comm("0x00000000000000aa", rank, 0, coll("AllReduce", 3, p...))
		c.ABI = 3
		return proc("h", 10+rank, c)
	}
	r := run(t, []*Dump{
		ring(0, pop(Send, 1, 1, SendGPUWait), pop(Recv, 3, 0, RecvWait)),
		ring(1, pop(Send, 2, 2, SendGPUWait), pop(Recv, 0, 1, RecvWait)),
		ring(2, pop(Send, 3, 0, SendPeerWait), pop(Recv, 1, 2, RecvGPUWait)),
	}, nil)
	s := one(t, r)
	if s.Rank != 3 || s.Kind != StateAbsent || s.Basis != BasisPeers || r.Hangs[0].NRanks != 4 {
		t.Errorf("suspect %+v of %d ranks", s, r.Hangs[0].NRanks)
	}
}

// P2P peer mismatch: rank 0's Send #0 to rank 1 waits for a buffer; rank 1 posted its Recv #0
// from rank 2 instead. Rank 1 is named for the peer, not as absent.
func TestP2pOtherPeer(t *testing.T) {
	const h = "0x00000000000000bc"
	sized := func(o Op) Op {
		o.Count, o.Datatype = 4096, "ncclBfloat16"
		return o
	}
	r := run(t, []*Dump{
		proc("a", 1, comm(h, 0, 3, sized(p2p("Send", 0, 1, pop(Send, 1, 0, SendPeerWait))))),
		proc("b", 2, comm(h, 1, 3, sized(p2p("Recv", 0, 2, pop(Recv, 2, 0, RecvWait))))),
		proc("c", 3, comm(h, 2, 3)),
	}, nil)
	s := one(t, r)
	if s.Rank != 1 || s.Kind != StateMismatch || s.Func != "Recv" || s.Seq != 0 || s.P2pPeer == nil || *s.P2pPeer != 0 ||
		s.Mismatch == nil || s.Mismatch.Differs[0] != DiffPeer || *s.Mismatch.Called.Peer != 2 || *s.Mismatch.Others.Peer != 0 {
		t.Fatalf("suspect %+v", s)
	}
	t.Log(s.Why)
	if want := "rank 1 (b, pid 2) called Recv #0 with rank 2 (count 4096 ncclBfloat16) where rank 0 (a, pid 1) called Send #0 with rank 1 (count 4096 ncclBfloat16)"; !strings.Contains(s.Why, want) {
		t.Errorf("verdict %q, want %q", s.Why, want)
	}
}

// No mismatch where the ranks agree, or where a rank is merely behind: rank 2 of 3 is still in
// AllGather seq 4, which the others completed; it is absent from AllReduce seq 9, not in a
// different collective at the same point.
func TestBehindIsNotMismatch(t *testing.T) {
	const h = "0x00000000000000bd"
	done := []Completed{{Func: "AllReduce", Ops: 9, LastSeq: 8}, {Func: "AllGather", Ops: 5, LastSeq: 4}}
	c := func(rank int, open ...Op) Comm {
		x := comm(h, rank, 3, open...)
		x.Completed = done
		return x
	}
	behind := comm(h, 2, 3, coll("AllGather", 4, pop(Recv, 1, 0, RecvWait)))
	behind.Completed = []Completed{{Func: "AllReduce", Ops: 9, LastSeq: 8}, {Func: "AllGather", Ops: 4, LastSeq: 3}}
	r := run(t, []*Dump{
		proc("a", 1, c(0, coll("AllReduce", 9, pop(Recv, 2, 0, RecvWait)))),
		proc("b", 2, c(1, coll("AllReduce", 9, pop(Recv, 0, 0, RecvWait)))),
		proc("c", 3, behind),
	}, nil)
	s := one(t, r)
	if s.Rank != 2 || s.Kind != StateAbsent || s.Mismatch != nil {
		t.Errorf("suspect %+v", s)
	}
}

// An even split names both sides and says the dumps cannot tell which is wrong.
func TestMismatchEvenSplit(t *testing.T) {
	const h = "0x00000000000000be"
	op := func(count uint64) Op {
		o := coll("AllReduce", 3, pop(Recv, 0, 0, RecvWait))
		o.Count, o.Datatype = count, "ncclFloat32"
		return o
	}
	r := run(t, []*Dump{
		proc("a", 1, comm(h, 0, 2, op(100))),
		proc("b", 2, comm(h, 1, 2, op(400))),
	}, nil)
	if len(r.Suspects) != 2 || r.Suspects[0].Kind != StateMismatch || r.Suspects[1].Kind != StateMismatch {
		t.Fatalf("suspects %+v", r.Suspects)
	}
	if !strings.Contains(r.Verdict, "split evenly") || strings.Count(r.Verdict, "\n") != 1 {
		t.Errorf("verdict %q", r.Verdict)
	}
}

// The work follows what the dumps hold, not the ranks one dump claims: a communicator of 2^31
// or 2^63-1 ranks is refused (it was a 16 GB allocation and a makeslice panic), and one of 2^17
// ranks of which one dumped, or a dump listing 100,000 peers, is analyzed in seconds (it was
// quadratic: 2^16 ranks took 14 s, 2^20 more than 30 s). Issue 23, item 9.
func TestClaimedRanksBounded(t *testing.T) {
	const h = "0x00000000000000bf"
	for _, n := range []int{1 << 31, 1<<63 - 1} {
		d := proc("a", 1, comm(h, 0, 4, coll("AllReduce", 1, pop(Recv, 1, 0, RecvWait))))
		d.Comms[0].NRanks, d.FormatVersion = n, Version
		if err := d.Validate(); err == nil || !strings.Contains(err.Error(), "ranks") {
			t.Errorf("nranks %d accepted: %v", n, err)
		}
	}
	big := func(nranks int, peers int) time.Duration {
		c := comm(h, 0, nranks, coll("AllReduce", 1, pop(Recv, 1, 0, RecvWait)))
		for p := 1; p <= peers; p++ {
			c.P2pCompleted = append(c.P2pCompleted, P2pCompleted{Peer: p, Sends: 1, Recvs: 1})
		}
		start := time.Now()
		r := run(t, []*Dump{proc("a", 1, c)}, nil)
		took := time.Since(start)
		if len(r.Hangs) != 1 || r.Hangs[0].NRanks != max(nranks, peers+1) {
			t.Errorf("nranks %d, %d peers: %+v", nranks, peers, r.Hangs)
		}
		t.Logf("nranks %d, %d peers: %v", nranks, peers, took)
		return took
	}
	// Quadratic, these took minutes; linear, about 3 s each on a loaded 2-core VM.
	if took := big(1<<17, 0); took > 30*time.Second {
		t.Errorf("2^17 ranks, one dump: %v", took)
	}
	if took := big(0, 100_000); took > 30*time.Second {
		t.Errorf("100,000 peers: %v", took)
	}
}

// A rank that, where the others call AllReduce seq 5, sends to a peer instead is named with
// the function that differs, not as absent.
func TestMismatchP2pInsteadOfCollective(t *testing.T) {
	const h = "0x00000000000000c1"
	c := func(rank int, open ...Op) Comm {
		x := comm(h, rank, 3, open...)
		x.Completed = []Completed{{Func: "AllReduce", Ops: 5, LastSeq: 4}}
		return x
	}
	r := run(t, []*Dump{
		proc("a", 1, c(0, coll("AllReduce", 5, pop(Recv, 2, 0, RecvWait)))),
		proc("b", 2, c(1, coll("AllReduce", 5, pop(Recv, 0, 0, RecvWait)))),
		proc("c", 3, c(2, p2p("Send", 0, 1, pop(Send, 1, 0, SendPeerWait)))),
	}, nil)
	s := one(t, r)
	if s.Rank != 2 || s.Kind != StateMismatch || s.Mismatch.Differs[0] != DiffFunction || s.Mismatch.Called.Func != "Send" ||
		!strings.Contains(s.Why, "rank 2 (c, pid 3) called Send #0 with rank 1 (count 0) where ranks 0 and 1 called AllReduce seq 5") {
		t.Errorf("suspect %+v\n%s", s, s.Why)
	}
}

// A CUDA graph's replays carry one seq (NCCL 2.26+): rank 0 has completed one replay of seq 5
// and hangs in the next, rank 1 hangs in the first. By (function, seq) they look alike, so the
// analysis says that what it says of seq 5 may be wrong; two ranks at an ordinary seq 5 get no
// such note.
func TestRepeatedSeqIsSaid(t *testing.T) {
	dumps := func(rank0Last int64) []*Dump {
		c0 := comm("0x00000000000000a1", 0, 2, coll("AllReduce", 5))
		c0.Completed = []Completed{{Func: "AllReduce", Ops: 6, LastSeq: rank0Last}}
		c1 := comm("0x00000000000000a1", 1, 2, coll("AllReduce", 5))
		c1.Completed = []Completed{{Func: "AllReduce", Ops: 5, LastSeq: 4}}
		return []*Dump{proc("h", 1, c0), proc("h", 2, c1)}
	}
	if n := repeatNote(run(t, dumps(5), nil)); !strings.Contains(n, "rank 0 AllReduce seq 5") || strings.Contains(n, "rank 1") {
		t.Errorf("note %q, want one naming rank 0's AllReduce seq 5 only", n)
	}
	if n := repeatNote(run(t, dumps(4), nil)); n != "" {
		t.Errorf("note %q where no seq repeats", n)
	}
}

// A CUDA graph's replays share one seq (NCCL 2.26+); the dump numbers them (Op.Repeat,
// Completed.LastRepeat). Three of four ranks wait in the fourth replay of AllReduce seq 5 (5+3);
// rank 3 completed the third (5+2) and never started the fourth. By seq alone rank 3 had
// completed seq 5 and looked finished: no rank was blamed. With repeats it is the one absent,
// and no note says the replays cannot be told apart. The same dumps without repeat numbers (an
// older plugin's) blame no rank, and a note says why.
func TestGraphReplayHangNamesTheRankBehind(t *testing.T) {
	res := run(t, replayDumps(true, 3), nil)
	if len(res.Hangs) != 1 || res.Hangs[0].Seq != 5 || res.Hangs[0].Repeat != 3 || !res.Hangs[0].GraphReplay {
		t.Fatalf("hangs %+v, want AllReduce seq 5 replay 3", res.Hangs)
	}
	if !strings.Contains(res.Hangs[0].Title(), "AllReduce seq 5 replay 3") {
		t.Errorf("title %q, want it to name AllReduce seq 5 replay 3", res.Hangs[0].Title())
	}
	if len(res.Suspects) != 1 || res.Suspects[0].Rank != 3 || res.Suspects[0].Kind != StateAbsent || res.Suspects[0].Repeat != 3 {
		t.Fatalf("suspects %+v, want rank 3 absent from replay 3", res.Suspects)
	}
	if w := res.Suspects[0].Why; !strings.Contains(w, "AllReduce seq 5 replay 3") || !strings.Contains(w, "its last AllReduce was seq 5 replay 2") {
		t.Errorf("why %q, want the replay it never started and the last it completed", w)
	}
	if n := repeatNote(res); n != "" {
		t.Errorf("note %q where every replay is numbered", n)
	}
	old := run(t, replayDumps(false, 3), nil)
	if len(old.Suspects) != 0 || !strings.Contains(repeatNote(old), "do not number them") {
		t.Errorf("unnumbered: suspects %+v, note %q; want none and the note", old.Suspects, repeatNote(old))
	}
}

func repeatNote(r *Result) string {
	for _, n := range r.Notes {
		if strings.Contains(n, "repeat a seq") {
			return n
		}
	}
	return ""
}

// replayDumps: four ranks, three of them in AllReduce seq 5's fourth replay, rank 3 after its
// third (with rank3Replays replays completed; 0: it sees none, its last AllReduce the eager seq
// 4); numbered: the dumps mark and number the replays.
func replayDumps(numbered bool, rank3Replays uint64) []*Dump {
	rep := func(n int64) int64 {
		if numbered {
			return n
		}
		return 0
	}
	var dumps []*Dump
	for r := range 4 {
		c := comm("0x00000000000000a1", r, 4)
		c.Completed = []Completed{{Func: "AllReduce", Ops: 9, LastSeq: 5, LastRepeat: rep(2)}}
		if numbered {
			c.Completed[0].Replays, c.Completed[0].LastReplay = 3, true
		}
		if r < 3 {
			op := coll("AllReduce", 5, pop(Send, (r+1)%4, 0, SendPeerWait), pop(Recv, (r+3)%4, 0, RecvWait))
			op.Repeat, op.GraphReplay = rep(3), numbered
			c.Open = []Op{op}
		} else if rank3Replays == 0 {
			c.Completed = []Completed{{Func: "AllReduce", Ops: 6, LastSeq: 4}}
		}
		dumps = append(dumps, proc("h", 10+r, c))
	}
	return dumps
}

// A rank that shows no replay of the graph (NCCL starts a replay's events only on ranks with
// proxy work in it) is not blamed for a hung replay: its part cannot be seen, and it says so.
// Counted with the eager collectives, it had looked absent from the replay.
func TestRankWithoutReplaysNotBlamed(t *testing.T) {
	res := run(t, replayDumps(true, 0), nil)
	if len(res.Suspects) != 0 {
		t.Fatalf("suspects %+v, want none: rank 3 sees no replay", res.Suspects)
	}
	if len(res.Hangs) != 1 || res.Hangs[0].Ranks[3].State != StateNoReplays {
		t.Fatalf("hangs %+v, want rank 3 %s", res.Hangs, StateNoReplays)
	}
}

// A trace of a rank without a dump places its collectives as a dump would (commops numbers the
// repeats); a sampled trace keeps 1 in N of them, so a collective seen there stands past every
// repeat of its seq and kind (it may clear a rank, never blame one wrongly).
func TestTracedPlace(t *testing.T) {
	o := &commops.Op{Seq: 5, Repeat: 2, GraphReplay: true}
	if p := tracedPlace(o, false); p != (collective.Place{Seq: 5, Replay: true, Repeat: 2}) {
		t.Errorf("full trace: %+v, want seq 5 replay 2", p)
	}
	p := tracedPlace(o, true)
	if p.Compare(collective.Place{Seq: 5, Replay: true, Repeat: 1 << 40}) <= 0 || p.Compare(collective.Place{Seq: 5}) >= 0 {
		t.Errorf("sampled trace: %+v, want past every replay of seq 5, before its eager collective", p)
	}
}

// The same for a rank without a dump whose trace shows no replay of the function: it is not
// judged on the hung replay by its trace (before, "never started it as far as its trace shows").
// Ranks 0-2 wait in the replay on a ring of their own (rank 3 has no proxy work in the graph).
func TestRankWithoutDumpOrReplaysNotBlamed(t *testing.T) {
	dir := t.TempDir()
	for _, d := range replayDumps(true, 3)[:3] { // rank 3 wrote none
		c := &d.Comms[0]
		c.Open[0].Proxy = []ProxyOp{pop(Send, (c.Rank+1)%3, 0, SendGPUWait), pop(Recv, (c.Rank+2)%3, 0, RecvWait)}
		if _, err := Write(dir, d); err != nil {
			t.Fatal(err)
		}
	}
	in, err := Load([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	x := buildIndex(in)
	x.tracesRead = true // its trace, read: eager AllReduces up to seq 4, no replay
	x.sideOf("0x00000000000000a1", 3).started = map[string]collective.Place{"AllReduce": {Seq: 4}}
	v := x.comms["0x00000000000000a1"]
	k, ok := primary(v)
	if !ok || !k.replay {
		t.Fatalf("primary %+v %v, want the replay", k, ok)
	}
	hg, sus := x.analyzeOp(v, k)
	if len(sus) != 0 || hg.Ranks[3].State != StateNoReplays {
		t.Errorf("suspects %+v, rank 3 %s %q; want none and %s", sus, hg.Ranks[3].State, hg.Ranks[3].Text, StateNoReplays)
	}
}

// P2P receives over the network share one queue per channel whatever their peer (net.cc
// recvConnect, shared buffers): rank 1's Recv #0 from rank 0 waits in its channel's queue behind
// its Recv #0 from rank 2, which starves (RecvWait at step 0: rank 2 never sent). From 2.27 the
// queued receive has a ProxyOp with no state and no step; before, none. Rank 0's Send waits for
// the buffer the queued receive has not posted. Rank 2 (in another Send, to rank 3) is the one
// to blame, for never posting its Send to rank 1; rank 1's queued receive is posted (its P2p is
// in its dump), so rank 1 is not read as never posting it, and rank 0 is not blamed.
func TestP2pQueuedBehindAnotherPeer(t *testing.T) {
	queued := []ProxyOp{{Channel: 0, Peer: 0, Direction: Recv, NSteps: 8, StartUnixNs: t0 + 1000}}
	for name, proxy := range map[string][]ProxyOp{"2.27+": queued, "before 2.27": nil} {
		t.Run(name, func(t *testing.T) {
			r := run(t, []*Dump{
				proc("a", 1, comm("0x00000000000000bb", 0, 4, p2p("Send", 0, 1, pop(Send, 1, 0, SendPeerWait)))),
				proc("b", 2, comm("0x00000000000000bb", 1, 4,
					p2p("Recv", 0, 2, pop(Recv, 2, 0, RecvWait)), p2p("Recv", 0, 0, proxy...))),
				proc("c", 3, comm("0x00000000000000bb", 2, 4, p2p("Send", 0, 3, pop(Send, 3, 0, SendPeerWait)))),
				proc("d", 4, comm("0x00000000000000bb", 3, 4)),
			}, nil)
			for _, s := range r.Suspects {
				if s.Rank == 0 || s.Rank == 1 {
					t.Errorf("rank %d blamed (%s): %s", s.Rank, s.Kind, s.Why)
				}
			}
			blamed2 := false
			for _, s := range r.Suspects {
				blamed2 = blamed2 || s.Rank == 2 && s.Func == "Send" && s.P2pPeer != nil && *s.P2pPeer == 1
			}
			if !blamed2 {
				t.Errorf("rank 2, which never posted its Send to rank 1, is not named:\n%s", r.Verdict)
			}
		})
	}
}
