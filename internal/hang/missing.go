package hang

import (
	"fmt"
	"strings"

	"github.com/ncclprof/ncclprof/internal/collective"
)

// A rank with nothing in flight writes no dump, so the rank that never started an operation is
// usually the one rank of the communicator without a dump. What the others' ProxyOps show about
// it, and its summary or trace where there is one, tell that apart from a dump that was lost.

// peerSigns is what the ranks that exchange data with a rank without a dump show about it.
type peerSigns struct {
	posted    bool  // a send to it progressed: it posted receive buffers
	sent      bool  // a receive from it got data
	noBuffer  []int // ranks whose send to it waits at step 0 for a buffer it never posted
	gotNone   []int // ranks whose receive from it got nothing
	stoppedOk bool  // a ProxyOp with it completed
}

func (p *peerSigns) tookPart() bool { return p.posted || p.sent || p.stoppedOk }

func (h *hangCtx) peerSigns(m int) peerSigns {
	var s peerSigns
	for _, pp := range h.proxiesWith()[m] {
		rs, p := pp.rs, pp.p
		{
			head := p.Head()
			switch {
			case p.Stopped:
				s.stoppedOk = true
			case p.Direction == Send && (p.StepsDone > 0 || head != nil && head.State == SendWait):
				s.posted = true
			case p.Direction == Send && head != nil && head.State == SendPeerWait:
				s.noBuffer = appendOnce(s.noBuffer, rs.Rank)
			case p.Direction == Recv && (p.StepsDone > 0 || holdsData(p)):
				s.sent = true
			case p.Direction == Recv && head != nil && head.State == RecvWait:
				s.gotNone = appendOnce(s.gotNone, rs.Rank)
			}
		}
	}
	return s
}

// rankProxy is a ProxyOp of a rank in the hung operation.
type rankProxy struct {
	rs *RankState
	p  *ProxyOp
}

// proxiesWith indexes, once, the ProxyOps of the ranks in the hung operation by their peer, so
// that what the peers show about every rank without a dump takes one pass over them.
func (h *hangCtx) proxiesWith() map[int][]rankProxy {
	if h.byPeer == nil {
		h.byPeer = map[int][]rankProxy{}
		for _, rs := range h.in() {
			for i := range rs.op.Proxy {
				p := &rs.op.Proxy[i]
				h.byPeer[p.Peer] = append(h.byPeer[p.Peer], rankProxy{rs, p})
			}
		}
	}
	return h.byPeer
}

func holdsData(p *ProxyOp) bool {
	for _, s := range p.Open {
		if s.State == RecvFlushWait || s.State == RecvGPUWait {
			return true
		}
	}
	return false
}

func appendOnce(xs []int, v int) []int {
	for _, x := range xs {
		if x == v {
			return xs
		}
	}
	return append(xs, v)
}

// judgeMissing decides about the ranks without a dump. Their summaries (they destroyed the
// communicator) and their peers' evidence always count; what their traces show, and the bare
// fact that a rank wrote no dump, count only when nothing more direct explains the hang.
func (h *hangCtx) judgeMissing() {
	var missing []*RankState
	for _, rs := range h.ranks {
		if rs.State == StateNoDump {
			missing = append(missing, rs)
		}
	}
	if len(missing) == 0 {
		return
	}
	h.x.readTraces()
	doneBefore := h.opsBefore()
	var silent, traced, bare []*RankState
	for _, rs := range missing {
		si := h.x.side[h.v.hash][rs.Rank]
		if si != nil {
			rs.Host, rs.PID = si.host, si.pid
		}
		sg := h.peerSigns(rs.Rank)
		var traced0 collective.Place
		inTrace := false
		if si != nil {
			traced0, inTrace = si.started[h.key.fn]
		}
		switch {
		case si != nil && si.left:
			if si.leftOps[h.key.fn] > doneBefore {
				h.setState(rs, StateFinished)
				rs.Text = fmt.Sprintf("no dump; destroyed the communicator after %d %s (its summary)", si.leftOps[h.key.fn], h.key.fn)
				continue
			}
			h.suspect(rs, StateAbsent, BasisSummary, fmt.Sprintf("%s destroyed %s after %d %s (its summary %s), so it never started %s; %s",
				h.who(rs.Rank), h.commText(), si.leftOps[h.key.fn], h.key.fn, baseName(si.source), h.key, h.waitText(rs.Rank)))
		case len(sg.noBuffer) > 0 && !sg.tookPart():
			h.suspect(rs, StateAbsent, BasisPeers, fmt.Sprintf("%s never started %s on %s: it wrote no dump, %s could not hand it data (it never posted a receive buffer: SendPeerWait at step 0)%s; %s",
				h.who(rs.Rank), h.key, h.commText(), ranksText(sg.noBuffer), gotNoneText(sg.gotNone), h.waitText(rs.Rank)))
		case sg.tookPart() && len(sg.gotNone) > 0 && !sg.sent:
			silent = append(silent, rs)
		case sg.tookPart():
			h.setState(rs, StateTookPart)
			rs.Text = "no dump; its peers show it took part"
		case inTrace && traced0.Compare(h.key.place()) >= 0:
			h.setState(rs, StateTookPart)
			rs.Text = fmt.Sprintf("no dump; its trace shows it started %s", h.key)
		case inTrace && h.key.replay && !si.replays[h.key.fn]:
			h.setState(rs, StateNoReplays)
			rs.Text = "no dump; its trace shows no CUDA graph replay of " + h.key.fn + " (NCCL starts a replay's events only on ranks with proxy work in the graph), so its part in one cannot be seen"
		case inTrace:
			traced = append(traced, rs)
		default:
			bare = append(bare, rs)
		}
	}
	if h.direct || len(h.sus) > 0 {
		return
	}
	for _, rs := range silent {
		sg := h.peerSigns(rs.Rank)
		h.suspect(rs, StateUnknown, BasisPeers, fmt.Sprintf("%s wrote no dump, and %s stopped at it on %s: it posted receive buffers, yet %s received nothing from it, so its GPU or its link is stuck (its dump would say which); %s",
			h.who(rs.Rank), h.key, h.commText(), ranksText(sg.gotNone), h.waitText(rs.Rank)))
	}
	for _, rs := range traced {
		t := h.x.side[h.v.hash][rs.Rank].started[h.key.fn]
		h.suspect(rs, StateAbsent, BasisTrace, fmt.Sprintf("%s never started %s on %s as far as its trace shows (its last %s there is seq %s; a trace can lag the process by a window) and it wrote no dump; %s",
			h.who(rs.Rank), h.key, h.commText(), h.key.fn, placeText(t), h.waitText(rs.Rank)))
	}
	if len(h.sus) > 0 {
		return
	}
	var ranks []int
	for _, rs := range bare {
		ranks = append(ranks, rs.Rank)
	}
	why := fmt.Sprintf("%s never started %s on %s, as far as the dumps show: no dump from %s (a process with nothing in flight writes none) and no rank exchanged data with %s; %s",
		ranksText(ranks), h.key, h.commText(), them(len(ranks)), them(len(ranks)), h.waitText(ranks...))
	for _, rs := range bare {
		h.suspect(rs, StateAbsent, BasisNoDump, why)
	}
}

// opsBefore is how many operations of the function a rank in the hung one had completed before
// it: a rank that left the communicator after more had completed it too.
func (h *hangCtx) opsBefore() uint64 {
	for _, rs := range h.in() {
		return h.v.ranks[rs.Rank].comm.completedOps(h.key.fn)
	}
	return 0
}

func gotNoneText(ranks []int) string {
	if len(ranks) == 0 {
		return ""
	}
	return " and " + ranksText(ranks) + " received nothing from it"
}

func them(n int) string {
	if n == 1 {
		return "it"
	}
	return "them"
}

// ranksText names ranks for a sentence: "rank 4", "ranks 4 and 6", "ranks 0-3,7".
func ranksText(ranks []int) string {
	switch len(ranks) {
	case 0:
		return "no rank"
	case 1:
		return fmt.Sprintf("rank %d", ranks[0])
	case 2:
		return fmt.Sprintf("ranks %d and %d", ranks[0], ranks[1])
	}
	return "ranks " + Ranges(ranks)
}

func baseName(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}
