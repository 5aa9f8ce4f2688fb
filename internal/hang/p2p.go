package hang

import "fmt"

// Point-to-point operations have no seq from NCCL: the plugin numbers each (communicator, peer,
// direction) from 0, so rank a's k-th Send to b is matched with b's k-th Recv from a.

// counterpart is the peer's operation that exchanges data with the rank's hung one: the same
// collective, or the matching receive or send (nil: the peer has none open).
func (h *hangCtx) counterpart(rs *RankState, peer int) *Op {
	if h.key.kind == KindColl {
		return h.ranks[peer].op
	}
	pv := h.v.ranks[peer]
	if pv == nil || rs.op == nil {
		return nil
	}
	return pv.comm.find(matching(rs.op, rs.Rank))
}

// matching is the key of the operation that pairs with a P2P operation of rank r.
func matching(o *Op, r int) opKey {
	fn := "Recv"
	if o.Func == "Recv" {
		fn = "Send"
	}
	return opKey{kind: KindP2p, fn: fn, seq: o.Seq, peer: r}
}

// judgeP2p judges each rank's oldest open point-to-point operation: its own ProxyOps (GPU, link),
// then whether its peer ever posted the matching operation.
func (h *hangCtx) judgeP2p() {
	for _, rs := range h.in() {
		if rs.facts.gpuStuck() {
			h.suspect(rs, StateGPU, BasisOwnDump, h.gpuWhy(rs, false))
		}
	}
	h.judgeLinks()
	// A peer that has the same function open with another rank is named first: whoever waits
	// for that peer's own wrong partner is a consequence, not a suspect.
	for _, rs := range h.p2pWaiting() {
		if pv := h.v.ranks[*rs.op.Peer]; pv != nil && !p2pPosted(rs, pv.comm) {
			h.p2pOtherPeer(rs, pv.comm)
		}
	}
	for _, rs := range h.p2pWaiting() {
		if rs.State == StateMismatch {
			continue
		}
		peer := *rs.op.Peer
		want := matching(rs.op, rs.Rank)
		pv, ps := h.v.ranks[peer], h.ranks[peer]
		switch {
		case pv == nil:
			sg := h.peerSigns(peer)
			if len(sg.noBuffer) > 0 && !sg.tookPart() && ps.State == StateNoDump {
				h.p2pAbsent(ps, want, BasisPeers, fmt.Sprintf("it wrote no dump and never posted a receive buffer for %s (SendPeerWait at step 0)", h.who(rs.Rank)))
			}
		case p2pPosted(rs, pv.comm), ps.State == StateMismatch:
		default:
			busy := ""
			if o := oldest(pv.comm); o != nil {
				busy = fmt.Sprintf("; it is in %s instead", keyOf(o))
			}
			h.p2pAbsent(ps, want, BasisOwnDump, fmt.Sprintf("its dump has it completing %d %ss with rank %d%s", pv.comm.p2pDone(rs.Rank, p2pDir(want)), want.fn, rs.Rank, busy))
		}
	}
}

// p2pWaiting lists the ranks whose oldest point-to-point operation is open and not explained by
// their own GPU or link.
func (h *hangCtx) p2pWaiting() []*RankState {
	var out []*RankState
	for _, rs := range h.in() {
		if rs.State != StateGPU && rs.State != StateLinkSend && rs.State != StateLinkRecv {
			out = append(out, rs)
		}
	}
	return out
}

// p2pPosted: the peer's dump (pc) has the operation matching rs's open, or completed it.
func p2pPosted(rs *RankState, pc *Comm) bool {
	want := matching(rs.op, rs.Rank)
	return pc.find(want) != nil || pc.p2pDone(rs.Rank, p2pDir(want)) > uint64(rs.op.Seq)
}

// p2pDir is the direction of a point-to-point operation's function.
func p2pDir(k opKey) string {
	if k.fn == "Send" {
		return Send
	}
	return Recv
}

// p2pAbsent blames a rank for never posting the operation a peer waits for.
func (h *hangCtx) p2pAbsent(ps *RankState, want opKey, basis, detail string) {
	for _, s := range h.sus {
		if s.Rank == ps.Rank && s.Func == want.fn && s.Seq == want.seq && s.P2pPeer != nil && *s.P2pPeer == want.peer {
			return
		}
	}
	why := fmt.Sprintf("%s never posted %s #%d with rank %d on %s: %s; %s waits for it", h.who(ps.Rank), want.fn, want.seq, want.peer, h.commText(), detail, h.who(want.peer))
	s := h.suspect(ps, StateAbsent, basis, why)
	s.Func, s.Seq, s.P2pPeer, s.Waiting = want.fn, want.seq, &want.peer, 1
}

// p2pOtherPeer names the peer of a waiting point-to-point operation when the peer, instead of the
// matching operation, has the same function open with another rank: the two disagree on who
// exchanges data with whom.
func (h *hangCtx) p2pOtherPeer(rs *RankState, pc *Comm) {
	want := matching(rs.op, rs.Rank)
	o := oldest(pc)
	if o == nil || o.Kind != KindP2p || o.Func != want.fn || *o.Peer == rs.Rank {
		return
	}
	peer := h.ranks[*rs.op.Peer]
	exp := Call{Kind: KindP2p, Func: want.fn, Seq: want.seq, Peer: &want.peer, Count: rs.op.Count, Datatype: rs.op.Datatype}
	waiter, called := rs.op.Call(), o.Call()
	m := &Mismatch{Differs: []string{DiffPeer}, Called: CommCall{h.v.hash, called}, Others: CommCall{h.v.hash, exp},
		Ranks: Ranges([]int{peer.Rank}), OtherRanks: Ranges([]int{rs.Rank})}
	m.LastAgreed = h.lastAgreed(peer.Rank, rs.Rank)
	why := fmt.Sprintf("%s called %s where %s called %s on %s: the peer differs (%s waits for %s)",
		h.who(peer.Rank), callText(&called), h.who(rs.Rank), callText(&waiter), h.commText(), h.who(rs.Rank), callName(&exp))
	if m.LastAgreed != nil {
		why += "; the last operation they agree on is " + callName(m.LastAgreed)
	}
	s := h.suspect(peer, StateMismatch, BasisOwnDump, why)
	s.Func, s.Seq, s.P2pPeer, s.Waiting, s.Mismatch = want.fn, want.seq, &want.peer, 1, m
	peer.called = &called
}
