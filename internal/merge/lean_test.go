package merge

import (
	"math/rand"
	"testing"
	"unsafe"

	"github.com/ncclprof/ncclprof/internal/ptrace"
)

// tallyProxies keeps the last parent and the last operation's counts aside; the counts must be
// the planted ones whether a trace lists each operation's proxy records together or interleaves
// them, and records whose parent is unknown or of the wrong kind count for nothing.
func TestTallyProxiesAnyOrder(t *testing.T) {
	var recs []proxyRec
	want := map[uint64]proxyCounts{}
	next := uint64(1000)
	id := func() uint64 { next++; return next }
	for op := uint64(1); op <= 50; op++ {
		proxies, steps, net := int(op%3)+1, 0, 0
		for p := 0; p < proxies; p++ {
			po := id()
			recs = append(recs, proxyRec{po, op, ptrace.ProxyOp})
			for s := 0; s < int(op%4); s++ {
				st := id()
				recs = append(recs, proxyRec{st, po, ptrace.ProxyStep})
				steps++
				for k := 0; k < int(op%5); k++ {
					recs = append(recs, proxyRec{id(), st, []ptrace.Kind{ptrace.StepState, ptrace.Net}[k%2]})
					net++
				}
			}
			// A network event right under a ProxyOp is not under a step: not net.
			recs = append(recs, proxyRec{id(), po, ptrace.Net})
		}
		want[op] = proxyCounts{proxies, steps, net}
	}
	// A step and a state whose parents are missing count for nothing.
	recs = append(recs, proxyRec{id(), 999999, ptrace.ProxyStep}, proxyRec{id(), 999998, ptrace.StepState})
	nodes := map[uint64]proxyNode{}
	for _, r := range recs {
		nodes[r.id] = proxyNode{r.parent, r.kind}
	}
	lookup := func(id uint64) proxyNode { return nodes[id] }
	check := func(name string, recs []proxyRec) {
		var b blocks[proxyRec]
		for _, r := range recs {
			b.add(r)
		}
		got := tallyProxies(&b, lookup)
		if len(got) != len(want) {
			t.Errorf("%s: %d operations counted, want %d", name, len(got), len(want))
		}
		for op, w := range want {
			if got[op] != w {
				t.Errorf("%s: operation %d counted %+v, want %+v", name, op, got[op], w)
			}
		}
	}
	check("in file order", recs)
	shuffled := append([]proxyRec(nil), recs...)
	rand.New(rand.NewSource(7)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	check("shuffled", shuffled)
}

// A handle repeated (a damaged file) is counted once as a repeat, and its first record is the
// one the records under it are counted by: proxies before channels before groups, each in file
// order, as countProxies fills its map.
func TestCountProxiesFirstRecordWins(t *testing.T) {
	lp := &leanPlugin{dupGroupAPIs: 2}
	for _, r := range []proxyRec{
		{10, 1, ptrace.ProxyOp},    // the first record of handle 10: a proxy op of operation 1
		{11, 10, ptrace.ProxyStep}, // a step under it: operation 1's
		{10, 2, ptrace.ProxyOp},    // handle 10 again, under operation 2: a repeat
		{12, 11, ptrace.Net},       // under the step: operation 1's network event
		{0, 2, ptrace.ProxyOp},     // no handle: counted, never a repeat
	} {
		lp.proxies.add(r)
	}
	lp.channels.add(channelRec{id: 11, op: 3}) // the step's handle again
	lp.channels.add(channelRec{id: 20, op: 3})
	lp.groups = []groupRec{{id: 20}, {id: 21}, {id: 0}}
	counts, dups := lp.countProxies()
	want := map[uint64]proxyCounts{1: {proxies: 1, steps: 1, net: 1}, 2: {proxies: 2}}
	if len(counts) != len(want) || counts[1] != want[1] || counts[2] != want[2] {
		t.Errorf("counts %+v, want %+v", counts, want)
	}
	if dups != 3+2 { // 10, 11 and 20 repeated, and the two repeated GroupApi handles
		t.Errorf("%d repeats counted, want 5", dups)
	}
}

// The merge keeps one plEvent per API call, launch and operation to its end (150,000 of them
// in a 128 MiB small-nccl merge): a field added to it costs that many times over, and the
// record must stay well under the decoded event it replaced, or issue 26's peak of 1.5x its
// input is lost again (a ptrace.Event there took 1.69x).
func TestPlEventStaysCompact(t *testing.T) {
	rec, full := unsafe.Sizeof(plEvent{}), unsafe.Sizeof(ptrace.Event{})
	if rec > 232 || rec > full/2 {
		t.Errorf("plEvent is %d bytes (ptrace.Event %d): keep it at most 232 and under half; "+
			"keep only what the merge reads after the first pass", rec, full)
	}
}

// plEventOf carries every field the linker and writer read from the decoded event.
func TestPlEventOfCopiesWhatTheMergeReads(t *testing.T) {
	var e ptrace.Event
	e.Off, e.Start, e.End = 11, 12, 13
	e.Pid.Num, e.Tid.Num = 14, 15
	e.ID, e.Parent, e.Comm, e.Op, e.Group, e.GroupAPI = 1, 2, 3, 4, 5, 6
	e.Count, e.Bytes, e.Seq = 7, 8, 9
	e.Func, e.Datatype, e.Algo, e.Proto = "AllReduce", "ncclFloat32", "RING", "LL"
	e.Rank, e.NChannels, e.Peer, e.Kind = 16, 17, 3_000_000_000, ptrace.Coll // (a hostile peer: no wrapping)
	want := plEvent{Off: 11, Start: 12, End: 13, ID: 1, Parent: 2, Comm: 3, Op: 4, Group: 5, GroupAPI: 6,
		Count: 7, Bytes: 8, Seq: 9, Pid: e.Pid, Tid: 15, Func: "AllReduce", Datatype: "ncclFloat32",
		Algo: "RING", Proto: "LL", Rank: 16, NChannels: 17, Peer: 3_000_000_000, Kind: ptrace.Coll}
	if got := plEventOf(&e); got != want {
		t.Errorf("plEventOf = %+v, want %+v", got, want)
	}
	e.Tid.Str, e.Tid.IsStr, e.Tid.Num = "main", true, 0
	if got := plEventOf(&e); !got.tidStr || got.Tid != 0 {
		t.Errorf("a string tid: plEventOf gives tid %d, tidStr %v; want 0, true", got.Tid, got.tidStr)
	}
}
