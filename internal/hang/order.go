package hang

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ncclprof/ncclprof/internal/commops"
)

// Ranks that call the collectives of two communicators in different orders deadlock: rank 0 waits
// in AllReduce on communicator A for rank 1, which waits in AllGather on B for rank 0. Each
// communicator's analysis sees an absent rank busy in the other's hung operation; followed from
// hung operation to hung operation, those absences close a cycle. The smallest side of the
// cycle is named (every side when they are the same size), and the absences the cycle explains
// are not named on their own.

// orderEdge: ranks absent from hung operation from because they are in hung operation to.
type orderEdge struct {
	from, to string
	sus      []int // indices into the suspects (absent ones)
	ranks    []int // theirs
}

// refKey names a collective on a communicator: comm, function and seq text (commops.SeqText).
func refKey(comm, fn string, seq, repeat int64, replay bool) string {
	return comm + "\x00" + fn + "\x00" + commops.SeqText(seq, repeat, replay)
}

// orderCycles turns the absences that form a cycle across communicators into order mismatches.
func (x *index) orderCycles(res *Result) {
	calls := hungCalls(res.Hangs)
	edges, adj := orderEdges(res.Suspects, calls)
	if len(edges) == 0 {
		return
	}
	comp := cycleComponents(adj)
	byComp := map[string][]*orderEdge{}
	var comps []string
	for _, e := range edges {
		c, ok := comp[e.from]
		if !ok || comp[e.to] != c {
			continue
		}
		if byComp[c] == nil {
			comps = append(comps, c)
		}
		byComp[c] = append(byComp[c], e)
	}
	drop := map[int]bool{}
	for _, c := range comps {
		es := byComp[c]
		least := len(es[0].sus)
		for _, e := range es {
			least = min(least, len(e.sus))
		}
		for _, e := range es {
			for _, i := range e.sus {
				if len(e.sus) == least {
					x.orderSuspect(&res.Suspects[i], e, es, calls)
				} else {
					drop[i] = true
				}
			}
		}
	}
	kept := res.Suspects[:0]
	for i, s := range res.Suspects {
		if !drop[i] {
			kept = append(kept, s)
		}
	}
	res.Suspects = kept
}

// hungCalls is each hung collective's call as its ranks made it.
func hungCalls(hangs []Hung) map[string]Call {
	out := map[string]Call{}
	for _, hg := range hangs {
		for _, rs := range hg.Ranks {
			if rs.op != nil && hg.Kind == KindColl {
				out[refKey(hg.Comm, hg.Func, hg.Seq, hg.Repeat, hg.GraphReplay)] = rs.op.Call()
				break
			}
		}
	}
	return out
}

// orderEdges links hung collectives through the ranks absent from one because they are in
// another communicator's.
func orderEdges(sus []Suspect, hung map[string]Call) ([]*orderEdge, map[string][]string) {
	byKey := map[[2]string]*orderEdge{}
	var edges []*orderEdge
	adj := map[string][]string{}
	for i, s := range sus {
		b := s.BusyIn
		if s.Kind != StateAbsent || b == nil || b.Peer != nil || b.Comm == s.Comm || s.P2pPeer != nil {
			continue
		}
		from, to := refKey(s.Comm, s.Func, s.Seq, s.Repeat, s.GraphReplay), refKey(b.Comm, b.Func, b.Seq, b.Repeat, b.GraphReplay)
		if _, ok := hung[from]; !ok {
			continue
		}
		if _, ok := hung[to]; !ok {
			continue
		}
		k := [2]string{from, to}
		e := byKey[k]
		if e == nil {
			e = &orderEdge{from: from, to: to}
			byKey[k] = e
			edges = append(edges, e)
			adj[from] = append(adj[from], to)
		}
		e.sus, e.ranks = append(e.sus, i), append(e.ranks, s.Rank)
	}
	return edges, adj
}

// cycleComponents maps each hung operation that lies on a cycle to its strongly connected
// component (named by its smallest member). The graph has one node per hung communicator.
func cycleComponents(adj map[string][]string) map[string]string {
	reach := map[string]map[string]bool{}
	for n := range adj {
		seen := map[string]bool{}
		stack := slices.Clone(adj[n])
		for len(stack) > 0 {
			m := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if !seen[m] {
				seen[m] = true
				stack = append(stack, adj[m]...)
			}
		}
		reach[n] = seen
	}
	comp := map[string]string{}
	for n := range adj {
		if !reach[n][n] {
			continue
		}
		name := n
		for m := range reach[n] {
			if reach[m][n] && m < name {
				name = m
			}
		}
		comp[n] = name
	}
	return comp
}

// orderSuspect turns an absent suspect on the smallest side of a cycle into an order mismatch.
func (x *index) orderSuspect(s *Suspect, e *orderEdge, cycle []*orderEdge, calls map[string]Call) {
	b := s.BusyIn
	m := &Mismatch{Differs: []string{DiffOrder}, Called: CommCall{b.Comm, calls[e.to]}, Others: CommCall{s.Comm, calls[e.from]}}
	var sides, other []string
	var otherRanks []int
	for _, f := range cycle {
		ranks := f.ranks
		if f == e {
			m.Ranks = Ranges(ranks)
			continue
		}
		otherRanks = append(otherRanks, ranks...)
		other = append(other, fmt.Sprintf("%s %s in %s and never started %s", ranksCounted(ranks), isAre(len(ranks)), x.refText(f.to), x.refText(f.from)))
	}
	m.OtherRanks = Ranges(otherRanks)
	who := ranksCounted(e.ranks)
	if len(e.sus) == 1 {
		who = fmt.Sprintf("rank %d", s.Rank)
		if s.Host != "" {
			who = fmt.Sprintf("rank %d (%s, pid %d)", s.Rank, s.Host, s.PID)
		}
	}
	sides = append(sides, fmt.Sprintf("%s %s in %s and never started %s", who, isAre(len(e.sus)), x.refText(e.to), x.refText(e.from)))
	s.Kind, s.Mismatch, s.BusyIn = StateMismatch, m, nil
	s.Why = fmt.Sprintf("%s, while %s: the ranks call collectives on these communicators in different orders and each waits for the other (a cycle across communicators)",
		sides[0], strings.Join(other, "; "))
}

func (x *index) refText(key string) string {
	parts := strings.SplitN(key, "\x00", 3)
	where := "comm " + parts[0]
	if v := x.comms[parts[0]]; v != nil && v.name != "" {
		where += " (" + v.name + ")"
	}
	return fmt.Sprintf("%s seq %s on %s", parts[1], parts[2], where)
}

// ranksCounted names ranks with their number when there are many: "ranks 0-16,18-63 (63)".
func ranksCounted(ranks []int) string {
	if len(ranks) > 2 {
		return fmt.Sprintf("%s (%d)", ranksText(ranks), len(ranks))
	}
	return ranksText(ranks)
}

func isAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}
