package hang

import (
	"fmt"
	"slices"
	"strings"
)

// The most common hang is not a broken GPU or link but ranks that disagree about the collective
// they are in: a different function, count, datatype or root at the same point of the program,
// a point-to-point operation with another peer, or collectives on two communicators called in
// different orders. Every rank then waits in an operation the others never join. These are
// named from what each rank called (its open operations, its flight record), before the rules
// that read ProxyOp states: a rank in the wrong operation may look stuck in any way.

// StateMismatch is a rank that called something else than the others at the same point.
const StateMismatch = "mismatch"

// What differs between the ranks' calls.
const (
	DiffFunction = "function"
	DiffCount    = "count"
	DiffDatatype = "datatype"
	DiffRoot     = "root"
	DiffPeer     = "peer"
	DiffOrder    = "order" // collectives on several communicators called in different orders
)

// Mismatch says what a rank called where the others called something else.
type Mismatch struct {
	Differs []string `json:"differs"`
	Called  CommCall `json:"called"` // what the suspect called
	Others  CommCall `json:"others"` // what the others called (or, for a P2P peer, expect)
	// Ranks: every rank that called what the suspect called; OtherRanks: those that called the
	// others' operation.
	Ranks      string `json:"ranks"`
	OtherRanks string `json:"other_ranks"`
	// LastAgreed: the newest operation of the communicator both sides completed (from the
	// flight record; absent when the records share none).
	LastAgreed *Call `json:"last_agreed,omitempty"`
}

// CommCall is a call on a communicator.
type CommCall struct {
	Comm string `json:"comm"`
	Call
}

// variant is what a set of ranks called at the point of the hung collective.
type variant struct {
	call  Call
	ranks []*RankState
}

// judgeMismatch names the ranks whose call at the point of the hung collective differs from the
// others': ranks in the operation with another count, datatype or root, and ranks that, having
// completed everything before it, are in another operation of the communicator instead.
func (h *hangCtx) judgeMismatch() {
	vars := h.variants()
	if len(vars) < 2 {
		return
	}
	// The largest variant is what the ranks meant to call; an even split names every side.
	top := vars[0]
	tie := len(vars[1].ranks) == len(top.ranks)
	for i, v := range vars {
		if i == 0 && !tie {
			continue
		}
		other := top
		if i == 0 {
			other = vars[1]
		}
		if v.call.Func != h.key.fn && h.startedBy(other.ranks[0], &v.call) {
			continue // the others did call it: this rank is behind, not elsewhere (absent)
		}
		h.mismatchSuspects(v, other, tie)
	}
}

// variants groups the ranks by what they called at the point of the hung collective, the
// largest group first. Ranks that are not at that point (behind, finished, without a dump) are
// in none.
func (h *hangCtx) variants() []variant {
	byCall := map[string]int{}
	var out []variant
	for _, rs := range h.ranks {
		c, ok := h.pointCall(rs)
		if !ok {
			continue
		}
		k := sigKey(&c)
		i, seen := byCall[k]
		if !seen {
			i = len(out)
			byCall[k] = i
			out = append(out, variant{call: c})
		}
		out[i].ranks = append(out[i].ranks, rs)
	}
	slices.SortStableFunc(out, func(a, b variant) int { return len(b.ranks) - len(a.ranks) })
	return out
}

// pointCall is what the rank called at the point of the hung collective: the operation itself
// (with its count, datatype, root), or, for a rank absent from it that completed every earlier
// one of its function, the operation of this communicator it is in instead (a collective, or a
// point-to-point operation the others never call at this point).
func (h *hangCtx) pointCall(rs *RankState) (Call, bool) {
	if rs.op != nil {
		return rs.op.Call(), true
	}
	rv := h.v.ranks[rs.Rank]
	if rs.State != StateAbsent || rv == nil || !rv.comm.completedUpTo(h.key) {
		return Call{}, false
	}
	if o := oldest(rv.comm); o != nil {
		return o.Call(), true
	}
	return Call{}, false
}

func sigKey(c *Call) string {
	return fmt.Sprintf("%s\x00%s\x00%d\x00%s\x00%d\x00%d", c.Func, placeText(c.place()), c.Count, c.Datatype, derefOr(c.Root, -1), derefOr(c.Peer, -1))
}

// startedBy: the rank's dump shows it started the collective (open or completed); a
// point-to-point operation is the rank's own with its peer, which the others do not share.
func (h *hangCtx) startedBy(rs *RankState, c *Call) bool {
	rv := h.v.ranks[rs.Rank]
	if c.Kind == KindP2p {
		return false
	}
	k := opKey{kind: KindColl, fn: c.Func, seq: c.Seq, rep: c.Repeat, replay: c.GraphReplay, peer: -1}
	return rv.comm.find(k) != nil || rv.comm.completed(k)
}

// differs lists what differs between two calls at the same point.
func differs(a, b *Call) []string {
	if a.Func != b.Func || a.place() != b.place() {
		return []string{DiffFunction}
	}
	var d []string
	if a.Count != b.Count {
		d = append(d, DiffCount)
	}
	if a.Datatype != b.Datatype {
		d = append(d, DiffDatatype)
	}
	if derefOr(a.Root, -1) != derefOr(b.Root, -1) {
		d = append(d, DiffRoot)
	}
	return d
}

func (h *hangCtx) mismatchSuspects(v, other variant, tie bool) {
	m := Mismatch{Differs: differs(&v.call, &other.call), Called: CommCall{h.v.hash, v.call}, Others: CommCall{h.v.hash, other.call},
		Ranks: Ranges(rankList(v.ranks)), OtherRanks: Ranges(rankList(other.ranks))}
	m.LastAgreed = h.lastAgreed(v.ranks[0].Rank, other.ranks[0].Rank)
	who := h.who(v.ranks[0].Rank)
	if len(v.ranks) > 1 {
		who = ranksCounted(rankList(v.ranks))
	}
	why := fmt.Sprintf("%s called %s where %s called %s on %s: the %s differs",
		who, callText(&v.call), ranksCounted(rankList(other.ranks)), callText(&other.call), h.commText(), strings.Join(m.Differs, " and "))
	if m.LastAgreed != nil {
		why += "; the last operation they agree on is " + callName(m.LastAgreed)
	}
	if tie {
		why += "; the ranks split evenly, so the dumps cannot tell which side is wrong"
	}
	for _, rs := range v.ranks {
		s := h.suspect(rs, StateMismatch, BasisOwnDump, why)
		mm := m
		s.Mismatch = &mm
		rs.called = &v.call
	}
}

// lastAgreed is the newest operation in rank a's flight record that rank b's also holds.
func (h *hangCtx) lastAgreed(a, b int) *Call {
	ra, rb := h.v.ranks[a], h.v.ranks[b]
	if ra == nil || rb == nil {
		return nil
	}
	for i := len(ra.comm.Recent) - 1; i >= 0; i-- {
		c := ra.comm.Recent[i]
		for _, d := range rb.comm.Recent {
			if c.Kind == d.Kind && c.Func == d.Func && c.place() == d.place() && derefOr(c.Peer, -1) == derefOr(d.Peer, -1) {
				return &c
			}
		}
	}
	return nil
}

// callText writes a call with what ranks must agree on: "AllReduce seq 20 (count 4096
// ncclFloat32)", "Reduce seq 7 (count 16 ncclInt8, root 3)", "Recv #2 with rank 5 (...)".
func callText(c *Call) string {
	s := fmt.Sprintf(" (count %d", c.Count)
	if c.Datatype != "" {
		s += " " + c.Datatype
	}
	if c.Root != nil {
		s += fmt.Sprintf(", root %d", *c.Root)
	}
	return callName(c) + s + ")"
}

// callName names a call without its arguments: "AllReduce seq 20", "Recv #2 with rank 5".
func callName(c *Call) string {
	k := opKey{kind: c.Kind, fn: c.Func, seq: c.Seq, rep: c.Repeat, replay: c.GraphReplay, peer: derefOr(c.Peer, -1)}
	return k.String()
}

func rankList(rs []*RankState) []int {
	out := make([]int, len(rs))
	for i, r := range rs {
		out[i] = r.Rank
	}
	return out
}

func derefOr(p *int, v int) int {
	if p == nil {
		return v
	}
	return *p
}
