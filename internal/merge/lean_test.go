package merge

import (
	"math/rand"
	"testing"

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
