package hang

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ncclprof/ncclprof/internal/commops"
	"github.com/ncclprof/ncclprof/internal/words"
)

// Bases of a suspicion: what says so.
const (
	BasisOwnDump = "own_dump" // the suspect's own dump
	BasisPeers   = "peers"    // the ProxyOps of the ranks it exchanges data with
	BasisSummary = "summary"  // its communicator summary: it destroyed the communicator
	BasisTrace   = "trace"    // its trace (which may lag by a window)
	BasisNoDump  = "no_dump"  // only that it wrote no dump while the others wait
)

// Result is the analysis of a set of dumps: what `ncclmerge hang --format json` prints.
type Result struct {
	// Verdict is one line per hung operation with a suspect, the first the most direct.
	Verdict  string    `json:"verdict"`
	Suspects []Suspect `json:"suspects"`
	Hangs    []Hung    `json:"hangs"`
	Dumps    DumpsRead `json:"dumps"`
	Notes    []string  `json:"notes"`
}

// Suspect is a rank (or, for a link, a rank and the peer it sends to) to blame.
type Suspect struct {
	Rank        int    `json:"rank"`
	Kind        string `json:"kind"` // absent, gpu, link or unknown
	Comm        string `json:"comm"`
	CommName    string `json:"comm_name"`
	Seq         int64  `json:"seq"`
	Repeat      int64  `json:"repeat,omitempty"`       // as Op.Repeat
	GraphReplay bool   `json:"graph_replay,omitempty"` // as Op.GraphReplay
	Func        string `json:"func"`
	// A link's receiving rank, its lowest stalled channel, every stalled channel between the
	// pair, and the step that never completed on that channel.
	Peer     *int  `json:"peer,omitempty"`
	Channel  *int  `json:"channel,omitempty"`
	Channels []int `json:"channels,omitempty"`
	Step     *int  `json:"step,omitempty"`
	// For a point-to-point operation the suspect never posted: the rank waiting for it.
	P2pPeer  *int   `json:"p2p_peer,omitempty"`
	Host     string `json:"host,omitempty"`
	PID      int    `json:"pid,omitempty"`
	PeerHost string `json:"peer_host,omitempty"`
	Basis    string `json:"basis"`
	Waiting  int    `json:"waiting"` // ranks in the operation that wait for it
	// BusyIn: the operation an absent rank's own dump shows it in instead.
	BusyIn *OpRef `json:"busy_in,omitempty"`
	// Mismatch: what a rank of kind mismatch called, and what the others called.
	Mismatch *Mismatch `json:"mismatch,omitempty"`
	Why      string    `json:"why"`
}

// SeqText is the seq of the operation it is blamed for as the text writes it: "12", "12 replay
// 3" (commops.SeqText).
func (s Suspect) SeqText() string { return commops.SeqText(s.Seq, s.Repeat, s.GraphReplay) }

// SeqText is the hung operation's seq as the text writes it (Suspect.SeqText).
func (hg Hung) SeqText() string { return commops.SeqText(hg.Seq, hg.Repeat, hg.GraphReplay) }

// OpRef names an operation on a communicator.
type OpRef struct {
	Comm        string `json:"comm"`
	Func        string `json:"func"`
	Seq         int64  `json:"seq"`
	Repeat      int64  `json:"repeat,omitempty"`       // as Op.Repeat
	GraphReplay bool   `json:"graph_replay,omitempty"` // as Op.GraphReplay
	Peer        *int   `json:"peer,omitempty"`
}

// Hung is one hung operation of a communicator and every rank's part in it.
type Hung struct {
	Comm        string      `json:"comm"`
	CommName    string      `json:"comm_name"`
	NRanks      int         `json:"nranks"`
	Kind        string      `json:"kind"`
	Func        string      `json:"func"`
	Seq         int64       `json:"seq"`
	Repeat      int64       `json:"repeat,omitempty"`       // as Op.Repeat
	GraphReplay bool        `json:"graph_replay,omitempty"` // as Op.GraphReplay
	In          int         `json:"ranks_in"`               // ranks whose dump has it open
	StuckForNs  int64       `json:"stuck_for_ns"`
	Groups      []Group     `json:"groups"`
	Ranks       []RankState `json:"ranks"`
}

// Group is ranks in the same situation (their states read the same).
type Group struct {
	Ranks string `json:"ranks"` // "0-4,6-255"
	Count int    `json:"count"`
	State string `json:"state"`
	Text  string `json:"text"`
}

// RankState is one rank's part in a hung operation.
type RankState struct {
	Rank  int    `json:"rank"`
	Host  string `json:"host,omitempty"`
	PID   int    `json:"pid,omitempty"`
	State string `json:"state"`
	Text  string `json:"text"`
	AgeNs int64  `json:"age_ns,omitempty"` // how long it has had the operation open
	Heads []Head `json:"heads,omitempty"`
	Dump  string `json:"dump,omitempty"`
	// For grouping: the range of oldest open steps, not printed per rank.
	stepLo, stepHi int
	op             *Op
	facts          opFacts
	called         *Call // a mismatch: what it called at this point
}

// DumpsRead says what was read.
type DumpsRead struct {
	Read            int       `json:"read"`
	Problems        []Problem `json:"problems"`
	Summaries       int       `json:"summaries"`
	Traces          int       `json:"traces"`
	FirstWritten    int64     `json:"first_written_unix_ns"`
	LastWritten     int64     `json:"last_written_unix_ns"`
	Requested       int       `json:"requested"` // dumps written on request rather than by the watchdog
	PartialDumps    int       `json:"partial"`   // dumps whose process dropped events
	Simulated       int       `json:"simulated"` // dumps of the test host, not of a real job
	NothingInFlight int       `json:"nothing_in_flight"`
}

// Analyze names the suspects of every hung operation in the input.
func Analyze(in *Input) *Result {
	x := buildIndex(in)
	res := &Result{Suspects: []Suspect{}, Hangs: []Hung{}, Dumps: dumpsRead(in), Notes: []string{}}
	for _, h := range x.order {
		v := x.comms[h]
		k, ok := primary(v)
		if !ok {
			continue
		}
		hg, sus := x.analyzeOp(v, k)
		res.Hangs = append(res.Hangs, hg)
		res.Suspects = append(res.Suspects, sus...)
	}
	x.busyElsewhere(res)
	x.orderCycles(res)
	// Suspects the dumps show directly first; an absent rank busy in another hang last.
	slices.SortStableFunc(res.Suspects, func(a, b Suspect) int {
		return cmp.Or(cmp.Compare(b2i(a.BusyIn != nil), b2i(b.BusyIn != nil)), cmp.Compare(basisRank(a.Basis), basisRank(b.Basis)))
	})
	var lines []string
	seen := map[string]bool{}
	for _, s := range res.Suspects {
		if !seen[s.Why] { // ranks that called the same share a line
			seen[s.Why] = true
			lines = append(lines, s.Why)
		}
	}
	switch {
	case len(lines) > 0:
		res.Verdict = strings.Join(lines, "\n")
	case len(res.Hangs) > 0:
		res.Verdict = fmt.Sprintf("%d operation(s) in flight, but the dumps name no rank to blame: see the evidence", len(res.Hangs))
	default:
		res.Verdict = "nothing in flight: no dump shows an open NCCL operation"
	}
	res.Notes = append(res.Notes, x.notes...)
	if res.Dumps.PartialDumps > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d dump(s) come from processes that dropped events (health.partial): an operation or state may be missing from them", res.Dumps.PartialDumps))
	}
	return res
}

func basisRank(b string) int {
	return slices.Index([]string{BasisOwnDump, BasisSummary, BasisPeers, BasisTrace, BasisNoDump}, b)
}

func dumpsRead(in *Input) DumpsRead {
	d := DumpsRead{Read: len(in.Dumps), Problems: in.Problems, Summaries: len(in.Summaries), Traces: len(in.Traces)}
	if d.Problems == nil {
		d.Problems = []Problem{}
	}
	for _, l := range in.Dumps {
		if d.FirstWritten == 0 || l.WrittenUnixNs < d.FirstWritten {
			d.FirstWritten = l.WrittenUnixNs
		}
		d.LastWritten = max(d.LastWritten, l.WrittenUnixNs)
		if l.Reason == ReasonRequest {
			d.Requested++
		}
		if l.Health.Partial {
			d.PartialDumps++
		}
		if l.Simulated {
			d.Simulated++
		}
		open := 0
		for _, c := range l.Comms {
			open += len(c.Open)
		}
		if open == 0 {
			d.NothingInFlight++
		}
	}
	return d
}

// primary is the operation a communicator is stuck in: the one most of its ranks have as their
// oldest open operation (ties: the one that started first).
func primary(v *commView) (opKey, bool) {
	count := map[opKey]int{}
	first := map[opKey]int64{}
	for _, rv := range v.ranks {
		o := oldest(rv.comm)
		if o == nil {
			continue
		}
		k := keyOf(o)
		if o.Kind == KindP2p {
			k = opKey{kind: KindP2p, peer: -1, seq: -1} // point-to-point hangs are judged pair by pair
		}
		count[k]++
		if t, ok := first[k]; !ok || o.StartUnixNs < t {
			first[k] = o.StartUnixNs
		}
	}
	var best opKey
	found := false
	for k, n := range count {
		if !found || n > count[best] || n == count[best] && (first[k] < first[best] || first[k] == first[best] && k.String() < best.String()) {
			best, found = k, true
		}
	}
	return best, found
}

// oldest is a rank's oldest open operation on the communicator (nil: none).
func oldest(c *Comm) *Op {
	var o *Op
	for i := range c.Open {
		if o == nil || cmpOpStart(&c.Open[i], o) < 0 {
			o = &c.Open[i]
		}
	}
	return o
}

// hangCtx is one hung operation being judged.
type hangCtx struct {
	x      *index
	v      *commView
	key    opKey
	ranks  []*RankState // by rank
	inOp   []*RankState // the ranks with the operation open, by rank
	sus    []Suspect
	direct bool // a suspect the dumps show directly (own dump, summary)
	// unseen counts the ranks not in the operation that may still wait for it (no dump, or
	// took part by their peers' evidence), kept by setState so each verdict's text costs no pass.
	unseen int
	byPeer map[int][]rankProxy // proxiesWith
}

func (x *index) analyzeOp(v *commView, k opKey) (Hung, []Suspect) {
	h := &hangCtx{x: x, v: v, key: k, ranks: make([]*RankState, v.nranks)}
	for r := range h.ranks {
		rs := h.evalRank(r)
		h.ranks[r] = rs
		if rs.op != nil {
			h.inOp = append(h.inOp, rs)
		}
		if unseen(rs) {
			h.unseen++
		}
	}
	if k.kind == KindP2p {
		h.judgeP2p()
	} else {
		h.judgeColl()
	}
	return h.report(), h.sus
}

// evalRank is a rank's part as its own dump shows it, before any suspect is known.
func (h *hangCtx) evalRank(r int) *RankState {
	rs := &RankState{Rank: r, stepLo: -1, stepHi: -1}
	rv := h.v.ranks[r]
	if rv == nil {
		rs.State = StateNoDump
		if si := h.x.side[h.v.hash][r]; si != nil {
			rs.Host, rs.PID = si.host, si.pid
		}
		return rs
	}
	rs.Host, rs.PID, rs.Dump = rv.dump.Host, rv.dump.PID, filepath.Base(rv.dump.Path)
	var o *Op
	if h.key.kind == KindP2p {
		o = p2pOldest(rv.comm)
	} else {
		o = rv.comm.find(h.key)
	}
	switch {
	case o != nil:
	case h.key.kind == KindP2p:
		rs.State, rs.Text = StateFinished, "no point-to-point operation open"
		return rs
	case rv.comm.completed(h.key):
		rs.State = StateFinished
		return rs
	case h.key.replay && !rv.comm.seesReplays(h.key.fn):
		rs.State, rs.Text = StateNoReplays, "shows no CUDA graph replay of "+h.key.fn+" (NCCL starts a replay's events only on ranks with proxy work in the graph), so its part in one cannot be seen"
		return rs
	default:
		rs.State = StateAbsent
		return rs
	}
	rs.op, rs.AgeNs = o, o.AgeNs
	rs.facts = factsOf(o, rv.dump.EventMask)
	rs.Heads = rs.facts.heads
	rs.stepLo, rs.stepHi = rs.facts.headSteps()
	rs.State = rs.facts.waiting()
	return rs
}

func p2pOldest(c *Comm) *Op {
	o := oldest(c)
	if o == nil || o.Kind != KindP2p {
		return nil
	}
	return o
}

// in lists the ranks that have the operation open.
func (h *hangCtx) in() []*RankState { return h.inOp }

// unseen: a rank not in the operation that may still wait for it, for all the dumps show.
func unseen(rs *RankState) bool {
	return rs.op == nil && (rs.State == StateNoDump || rs.State == StateTookPart)
}

// setState changes a rank's state, keeping the count of unseen ranks.
func (h *hangCtx) setState(rs *RankState, st string) {
	if unseen(rs) {
		h.unseen--
	}
	rs.State = st
	if unseen(rs) {
		h.unseen++
	}
}

// judgeColl finds the suspects of a hung collective, the strongest evidence first: ranks whose own
// dump shows them stuck (GPU, link) or absent; ranks whose summary shows they left; then, for
// ranks without a dump, what their peers and traces show.
func (h *hangCtx) judgeColl() {
	kernelOthers := 0
	for _, rs := range h.in() {
		if rs.facts.kernelStarted > 0 {
			kernelOthers++
		}
	}
	h.judgeMismatch()
	for _, rs := range h.in() {
		switch {
		case rs.State == StateMismatch: // in the wrong operation: its states say nothing more
		case rs.facts.gpuStuck():
			h.suspect(rs, StateGPU, BasisOwnDump, h.gpuWhy(rs, false))
		case rs.facts.kernelNeverStarted(kernelOthers):
			h.suspect(rs, StateGPU, BasisOwnDump, h.gpuWhy(rs, true))
		}
	}
	h.judgeLinks()
	for _, rs := range h.ranks {
		if rs.State == StateAbsent {
			h.suspect(rs, StateAbsent, BasisOwnDump, h.absentOwnWhy(rs))
		}
	}
	h.judgeMissing()
}

// judgeLinks finds sends whose oldest step went to the network and never completed, and pairs
// each with the receiver's step. One suspect per rank pair, with every channel stalled between
// them.
func (h *hangCtx) judgeLinks() {
	for _, rs := range h.in() {
		if rs.State == StateGPU || rs.State == StateMismatch {
			continue
		}
		byPeer := map[int][]Head{}
		var peers []int
		for _, hd := range rs.facts.linkSends() {
			if byPeer[hd.Peer] == nil {
				peers = append(peers, hd.Peer)
			}
			byPeer[hd.Peer] = append(byPeer[hd.Peer], hd)
		}
		slices.Sort(peers)
		for _, p := range peers {
			h.linkSuspect(rs, p, byPeer[p])
		}
	}
}

func (h *hangCtx) linkSuspect(rs *RankState, peer int, sends []Head) {
	first := sends[0]
	var chans []int
	for _, s := range sends {
		chans = append(chans, s.Channel)
	}
	recv := h.ranks[peer]
	seen := "rank %d wrote no dump"
	if ro := h.counterpart(rs, peer); ro != nil {
		seen = "rank %d still waits for that step (RecvWait)"
		if st := recvStepState(ro, first.Channel, rs.Rank, first.Step); st != RecvWait {
			seen = "rank %d's receive of that step is in state " + orNone(st)
		}
		if recv.op == ro {
			recv.State = StateLinkRecv
		}
	} else if h.v.ranks[peer] != nil {
		seen = "rank %d has no matching receive open"
	}
	rs.State = StateLinkSend
	since := sinceOf(rs.op, first)
	why := fmt.Sprintf("the link from %s to %s stopped on %s in %s on %s: rank %d's send of step %d went to the network%s and never completed (SendWait), and %s; %s",
		h.who(rs.Rank), h.who(peer), channelsText(chans), h.key, h.commText(), rs.Rank, first.Step, since, fmt.Sprintf(seen, peer), h.waitText(rs.Rank, peer))
	s := h.suspect(rs, "link", BasisOwnDump, why)
	s.Peer, s.Channel, s.Channels, s.Step = &peer, &chans[0], chans, &first.Step
	s.PeerHost = recv.Host
	s.Waiting = h.waiting(rs.Rank, peer)
}

func orNone(s string) string {
	if s == "" {
		return "none (not open)"
	}
	return s
}

// recvStepState is the state of a step of the receive from peer on a channel ("" if not open).
func recvStepState(o *Op, channel, peer, step int) string {
	for _, p := range o.Proxy {
		if p.Channel == channel && p.Peer == peer && p.Direction == Recv {
			for _, s := range p.Open {
				if s.Step == step {
					return s.State
				}
			}
		}
	}
	return ""
}

func sinceOf(o *Op, hd Head) string {
	for _, p := range o.Proxy {
		if p.Channel == hd.Channel && p.Peer == hd.Peer && p.Direction == hd.Direction {
			if s := p.Head(); s != nil && s.SinceUnixNs > 0 && o.StartUnixNs > 0 && o.AgeNs > 0 {
				return " " + seconds(o.StartUnixNs+o.AgeNs-s.SinceUnixNs) + " ago"
			}
		}
	}
	return ""
}

// suspect records a suspect and marks its rank.
func (h *hangCtx) suspect(rs *RankState, kind, basis, why string) *Suspect {
	state := kind
	if kind == "link" {
		state = StateLinkSend
	}
	h.setState(rs, state)
	h.direct = h.direct || basis == BasisOwnDump || basis == BasisSummary
	h.sus = append(h.sus, Suspect{Rank: rs.Rank, Kind: kind, Comm: h.v.hash, CommName: h.v.name, Seq: h.key.seq, Repeat: h.key.rep, GraphReplay: h.key.replay, Func: h.key.fn,
		Host: rs.Host, PID: rs.PID, Basis: basis, Waiting: h.waiting(rs.Rank), Why: why})
	return &h.sus[len(h.sus)-1]
}

// waiting counts the ranks with the operation open, other than the given ones (distinct ranks).
func (h *hangCtx) waiting(except ...int) int {
	n := len(h.inOp)
	for _, r := range except {
		if h.ranks[r].op != nil {
			n--
		}
	}
	return n
}

func (h *hangCtx) waitText(except ...int) string {
	n := h.waiting(except...)
	missing := h.unseen
	for _, r := range except {
		if unseen(h.ranks[r]) {
			missing--
		}
	}
	s := plural(n, "rank") + " wait for it"
	if n == 1 {
		s = "1 rank waits for it"
	}
	if missing > 0 {
		s += fmt.Sprintf(" (and %d without a dump)", missing)
	}
	return s
}

func (h *hangCtx) who(rank int) string {
	rs := h.ranks[rank]
	if rs.Host != "" {
		return fmt.Sprintf("rank %d (%s, pid %d)", rank, words.Printable(rs.Host), rs.PID)
	}
	return fmt.Sprintf("rank %d", rank)
}

func (h *hangCtx) commText() string {
	if h.v.name != "" {
		return fmt.Sprintf("comm %s (%s)", h.v.hash, h.v.name)
	}
	return "comm " + h.v.hash
}

func (h *hangCtx) gpuWhy(rs *RankState, notStarted bool) string {
	f := &rs.facts
	var what []string
	switch {
	case notStarted && rs.op.Launched != nil && *rs.op.Launched:
		what = append(what, fmt.Sprintf("its kernel was launched %s ago and never started on the GPU", seconds(rs.op.AgeNs)))
	case notStarted:
		what = append(what, fmt.Sprintf("its kernel never started on the GPU (the operation was enqueued %s ago)", seconds(rs.op.AgeNs)))
	case f.kernelStarted > 0:
		what = append(what, fmt.Sprintf("its kernel started and never finished (%d/%d channels)", f.kernelStarted-f.kernelStopped, max(rs.op.NChannels, f.kernelStarted)))
	}
	if !notStarted {
		if f.sendGPUWait {
			lo := -1
			for _, hd := range f.heads {
				if hd.Direction == Send && hd.State == SendGPUWait && (lo < 0 || hd.Step < lo) {
					lo = hd.Step
				}
			}
			what = append(what, fmt.Sprintf("its sends wait for the GPU at step %d (SendGPUWait)", lo))
		}
		what = append(what, "its receive buffers hold data the GPU never consumed (RecvGPUWait)")
	}
	return fmt.Sprintf("the GPU of %s stopped in %s on %s: %s; %s", h.who(rs.Rank), h.key, h.commText(), strings.Join(what, ", "), h.waitText(rs.Rank))
}

func (h *hangCtx) absentOwnWhy(rs *RankState) string {
	rv := h.v.ranks[rs.Rank]
	last := "it completed no " + h.key.fn
	if d := rv.comm.completedAt(h.key.fn); d.Seq >= 0 {
		last = fmt.Sprintf("its last %s was seq %s", h.key.fn, placeText(d))
	}
	return fmt.Sprintf("%s never started %s on %s (%s); %s", h.who(rs.Rank), h.key, h.commText(), last, h.waitText(rs.Rank))
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
