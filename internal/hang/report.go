package hang

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// stateOrder is the order groups are listed in: suspects first, then the evidence.
var stateOrder = []string{StateMismatch, StateAbsent, StateGPU, StateLinkSend, StateUnknown, StateLinkRecv, StateWaitData,
	StateWaitBuffers, StateWaitGPU, StateInKernel, StateEnqueued, StateTookPart, StateNoReplays, StateFinished, StateNoDump}

var waitPrefix = map[string]string{
	StateWaitData:    "waits for data",
	StateWaitBuffers: "waits for a peer to free a buffer",
	StateWaitGPU:     "its sends wait for its GPU, which waits for input",
	StateInKernel:    "in the kernel",
	StateEnqueued:    "enqueued",
	StateGPU:         "its GPU stopped",
	StateLinkSend:    "its send never completed",
	StateLinkRecv:    "waits for that send",
}

// report gives every rank its text and groups the ranks that read the same.
func (h *hangCtx) report() Hung {
	sus := map[int]bool{}
	basis := map[int]string{} // each suspect rank's first basis
	for _, s := range h.sus {
		sus[s.Rank] = true
		if s.Peer != nil {
			sus[*s.Peer] = true
		}
		if _, ok := basis[s.Rank]; !ok {
			basis[s.Rank] = s.Basis
		}
	}
	isSus := func(r int) bool { return sus[r] }
	hg := Hung{Comm: h.v.hash, CommName: h.v.name, NRanks: h.v.nranks, Kind: h.key.kind, Func: h.key.fn, Seq: h.key.seq, Repeat: h.key.rep, GraphReplay: h.key.replay, Ranks: []RankState{}}
	if h.key.kind == KindP2p {
		hg.Func, hg.Seq = "point-to-point", -1
	}
	for _, rs := range h.ranks {
		if rs.Text == "" {
			rs.Text = h.rankText(rs, isSus, basis[rs.Rank])
		}
		if rs.op != nil {
			hg.In++
			hg.StuckForNs = max(hg.StuckForNs, rs.AgeNs)
		}
		hg.Ranks = append(hg.Ranks, *rs)
	}
	hg.Groups = groups(h.ranks)
	return hg
}

func (h *hangCtx) rankText(rs *RankState, isSus func(int) bool, basis string) string {
	if p, ok := waitPrefix[rs.State]; ok && rs.op != nil {
		t := p + ": " + rs.facts.describe(rs.op, isSus)
		if h.key.kind == KindP2p {
			t = rs.op.Func + fmt.Sprintf(" #%d with rank %d, ", rs.op.Seq, *rs.op.Peer) + t
		}
		return t
	}
	switch rs.State {
	case StateMismatch:
		return "called " + callText(rs.called) + " instead"
	case StateAbsent:
		if rv := h.v.ranks[rs.Rank]; rv != nil {
			t := "never started it"
			if d := rv.comm.completedAt(h.key.fn); d.Seq >= 0 && h.key.kind == KindColl {
				t += fmt.Sprintf("; its last %s was seq %s", h.key.fn, placeText(d))
			}
			if o := oldest(rv.comm); o != nil {
				t += "; in " + keyOf(o).String() + " instead"
			}
			return t
		}
		return map[string]string{
			BasisPeers:   "no dump; its peers show it never posted a buffer nor sent data",
			BasisSummary: "destroyed the communicator before it (its summary)",
			BasisTrace:   "no dump; its trace ends before it",
			BasisNoDump:  "no dump, and no rank exchanged data with it",
		}[basis]
	case StateFinished:
		return "completed it"
	case StateUnknown:
		return "no dump; it posted receive buffers but sent nothing"
	}
	return "no dump (nothing in flight there, or its dump was lost)"
}

// groups gathers ranks whose state and text are the same, suspects first.
func groups(ranks []*RankState) []Group {
	type acc struct {
		g            Group
		ranks        []int
		lo, hi       int
		ageLo, ageHi int64
	}
	byKey := map[string]*acc{}
	var order []*acc
	for _, rs := range ranks {
		k := rs.State + "\x00" + rs.Text
		a := byKey[k]
		if a == nil {
			a = &acc{g: Group{State: rs.State, Text: rs.Text}, lo: -1, hi: -1, ageLo: -1}
			byKey[k] = a
			order = append(order, a)
		}
		a.ranks = append(a.ranks, rs.Rank)
		if rs.stepLo >= 0 && (a.lo < 0 || rs.stepLo < a.lo) {
			a.lo = rs.stepLo
		}
		a.hi = max(a.hi, rs.stepHi)
		if rs.op != nil {
			if a.ageLo < 0 || rs.AgeNs < a.ageLo {
				a.ageLo = rs.AgeNs
			}
			a.ageHi = max(a.ageHi, rs.AgeNs)
		}
	}
	slices.SortStableFunc(order, func(a, b *acc) int {
		if d := slices.Index(stateOrder, a.g.State) - slices.Index(stateOrder, b.g.State); d != 0 {
			return d
		}
		return a.ranks[0] - b.ranks[0]
	})
	out := make([]Group, 0, len(order))
	for _, a := range order {
		a.g.Ranks, a.g.Count = Ranges(a.ranks), len(a.ranks)
		var extra []string
		if a.lo >= 0 {
			extra = append(extra, "oldest open step "+span(strconv.Itoa(a.lo), strconv.Itoa(a.hi)))
		}
		if a.ageLo >= 0 {
			extra = append(extra, "open for "+span(seconds(a.ageLo), seconds(a.ageHi)))
		}
		if len(extra) > 0 {
			a.g.Text += " (" + strings.Join(extra, ", ") + ")"
		}
		out = append(out, a.g)
	}
	return out
}

// span writes "a" or "a–b".
func span(lo, hi string) string {
	if lo == hi {
		return lo
	}
	return lo + "–" + hi
}

// busyElsewhere tells, for every rank absent from an operation by its own dump, where its dump
// shows it instead: an older operation of the same communicator or one of another (often the
// real hang, of which this absence is a consequence).
func (x *index) busyElsewhere(res *Result) {
	byProc := map[string]*Loaded{} // Load keeps one dump per process
	for i := range x.in.Dumps {
		l := &x.in.Dumps[i]
		byProc[procKey(l.Host, l.PID)] = l
	}
	for i := range res.Suspects {
		s := &res.Suspects[i]
		if s.Kind != StateAbsent || s.Basis != BasisOwnDump || s.P2pPeer != nil {
			continue
		}
		var best *Op
		var bestComm string
		if l := byProc[procKey(s.Host, s.PID)]; l != nil {
			for j := range l.Comms {
				if o := oldest(&l.Comms[j]); o != nil && (best == nil || cmpOpStart(o, best) < 0) {
					best, bestComm = o, l.Comms[j].Hash
				}
			}
		}
		if best == nil {
			continue
		}
		s.BusyIn = &OpRef{Comm: bestComm, Func: best.Func, Seq: best.Seq, Repeat: best.Repeat, GraphReplay: best.GraphReplay, Peer: best.Peer}
		where := "on comm " + bestComm
		if v := x.comms[bestComm]; v != nil && v.name != "" {
			where += " (" + v.name + ")"
		}
		s.Why += fmt.Sprintf("; it is in %s %s instead", keyOf(best), where)
	}
}

// Ranges writes sorted ranks compactly: 0-4,6,8-255.
func Ranges(ranks []int) string {
	rs := slices.Clone(ranks)
	slices.Sort(rs)
	var b strings.Builder
	for i := 0; i < len(rs); {
		j := i
		for j+1 < len(rs) && rs[j+1] == rs[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(rs[i]))
		if j > i {
			fmt.Fprintf(&b, "-%d", rs[j])
		}
		i = j + 1
	}
	return b.String()
}

// seconds writes a duration in ns as seconds for people: "61.2 s", "850 ms".
func seconds(ns int64) string {
	if ns < 1e9 {
		return fmt.Sprintf("%d ms", ns/1e6)
	}
	return fmt.Sprintf("%.1f s", float64(ns)/1e9)
}

func channelsText(ch []int) string {
	if len(ch) == 1 {
		return fmt.Sprintf("channel %d", ch[0])
	}
	return "channels " + Ranges(ch)
}
