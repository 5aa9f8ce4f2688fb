package hang

import (
	"cmp"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/ncclprof/ncclprof/internal/collective"
	"github.com/ncclprof/ncclprof/internal/commops"
	"github.com/ncclprof/ncclprof/internal/words"
)

// rankView is one rank of a communicator as its process's dump shows it.
type rankView struct {
	dump *Loaded
	comm *Comm
}

// commView gathers a communicator across every dump.
type commView struct {
	hash   string
	name   string
	nranks int
	ranks  map[int]*rankView
}

// sideInfo is what summaries and traces say about a rank that wrote no dump.
type sideInfo struct {
	host string
	pid  int
	// left: the rank destroyed the communicator (its summary exists) after these operations.
	left    bool
	leftOps map[string]uint64
	// started: per function, the furthest collective its trace shows it starting; replays:
	// the functions its trace shows a CUDA graph replay of.
	started map[string]collective.Place
	replays map[string]bool
	source  string // the file that says so
}

type index struct {
	in    *Input
	comms map[string]*commView
	order []string // hashes, sorted
	side  map[string]map[int]*sideInfo
	notes []string
	// tracesRead: traces of processes without a dump were read (once, when a rank was missing).
	tracesRead bool
}

func buildIndex(in *Input) *index {
	x := &index{in: in, comms: map[string]*commView{}, side: map[string]map[int]*sideInfo{}}
	for i := range in.Dumps {
		l := &in.Dumps[i]
		for j := range l.Comms {
			c := &l.Comms[j]
			v := x.comms[c.Hash]
			if v == nil {
				// The application names communicators: escaped, a name cannot forge a line.
				v = &commView{hash: c.Hash, name: words.Printable(c.Name), nranks: c.NRanks, ranks: map[int]*rankView{}}
				x.comms[c.Hash] = v
				x.order = append(x.order, c.Hash)
			}
			if c.NRanks != v.nranks && c.NRanks > 0 && v.nranks > 0 {
				x.notes = append(x.notes, fmt.Sprintf("communicator %s: %s says %d ranks, another dump %d; the larger is used", c.Hash, filepath.Base(l.Path), c.NRanks, v.nranks))
			}
			v.nranks = max(v.nranks, c.NRanks, c.maxRank()+1)
			if old := v.ranks[c.Rank]; old != nil {
				x.notes = append(x.notes, fmt.Sprintf("communicator %s rank %d is in two dumps, %s and %s (dumps of two jobs in one directory?); the newer is used",
					c.Hash, c.Rank, filepath.Base(old.dump.Path), filepath.Base(l.Path)))
				if old.dump.WrittenUnixNs >= l.WrittenUnixNs {
					continue
				}
			}
			v.ranks[c.Rank] = &rankView{dump: l, comm: c}
		}
	}
	slices.Sort(x.order)
	for _, h := range x.order {
		if n := x.comms[h].repeatedSeqs(); n != "" {
			x.notes = append(x.notes, n)
		}
	}
	for _, s := range in.Summaries {
		if v := x.comms[s.Hash]; v != nil && v.ranks[s.Rank] == nil {
			si := x.sideOf(s.Hash, s.Rank)
			si.host, si.pid, si.left, si.leftOps, si.source = s.Host, s.PID, true, s.Ops, s.Path
		}
	}
	return x
}

func (x *index) sideOf(hash string, rank int) *sideInfo {
	m := x.side[hash]
	if m == nil {
		m = map[int]*sideInfo{}
		x.side[hash] = m
	}
	if m[rank] == nil {
		m[rank] = &sideInfo{}
	}
	return m[rank]
}

var traceNameRE = regexp.MustCompile(`^ncclprof-(.+)-(\d+)-\d+\.trace\.json(\.gz)?$`)

// readTraces reads, once, the traces of processes that wrote no dump: they tell which operations
// such a rank started. A trace lags the process by the plugin's window (up to a second), so it
// can show that a rank started an operation, not that it did not.
func (x *index) readTraces() {
	if x.tracesRead {
		return
	}
	x.tracesRead = true
	dumped := map[string]bool{}
	for _, l := range x.in.Dumps {
		dumped[procKey(l.Host, l.PID)] = true
	}
	var paths []string
	for _, p := range x.in.Traces {
		m := traceNameRE.FindStringSubmatch(filepath.Base(p))
		if m != nil && dumped[m[1]+"/"+m[2]] {
			continue // the dump says more than the trace
		}
		paths = append(paths, p)
	}
	if len(paths) == 0 {
		return
	}
	set, err := commops.Read(paths, commops.Options{})
	if err != nil {
		x.notes = append(x.notes, fmt.Sprintf("the traces of processes without a dump were not used: %v", err))
		return
	}
	for i := range set.Ops {
		o := &set.Ops[i]
		if o.Seq < 0 {
			continue
		}
		hash := FormatHash(set.Comms[o.Comm].Hash)
		if v := x.comms[hash]; v == nil || v.ranks[int(o.Rank)] != nil {
			continue
		}
		si := x.sideOf(hash, int(o.Rank))
		if si.started == nil {
			si.started = map[string]collective.Place{}
		}
		proc := set.Procs[o.Proc]
		si.host, si.pid = proc.Host, int(proc.Pid)
		if si.source == "" && len(proc.Files) > 0 {
			si.source = proc.Files[0]
		}
		p := tracedPlace(o, set.Sampling.On())
		if last, ok := si.started[o.Func]; !ok || p.Compare(last) > 0 {
			si.started[o.Func] = p
		}
		if o.GraphReplay {
			if si.replays == nil {
				si.replays = map[string]bool{}
			}
			si.replays[o.Func] = true
		}
	}
}

// tracedPlace is where a collective a trace shows started stands (commops numbers repeats as a
// dump does). A sampled trace keeps 1 in N of a seq's repeats, so it cannot number them: a
// collective seen there stands past every repeat of its seq and kind, which may clear a rank
// but never blames one wrongly.
func tracedPlace(o *commops.Op, sampled bool) collective.Place {
	p := collective.Place{Seq: o.Seq, Replay: o.GraphReplay, Repeat: int64(o.Repeat)}
	if sampled {
		p.Repeat = math.MaxInt64
	}
	return p
}

// maxRank is the highest rank the communicator's entry names (its own, its peers'): the size of
// a communicator whose nranks the plugin was not told is at least that plus one.
func (c *Comm) maxRank() int {
	m := c.Rank
	for _, p := range c.P2pCompleted {
		m = max(m, p.Peer)
	}
	for _, o := range c.Open {
		if o.Peer != nil {
			m = max(m, *o.Peer)
		}
		for _, p := range o.Proxy {
			m = max(m, p.Peer)
		}
	}
	return m
}

// completedAt is the furthest collective of fn the rank completed (Seq -1: none).
func (c *Comm) completedAt(fn string) collective.Place {
	for _, d := range c.Completed {
		if d.Func == fn {
			return collective.Place{Seq: d.LastSeq, Replay: d.LastReplay, Repeat: d.LastRepeat}
		}
	}
	return collective.Place{Seq: -1}
}

// completed: the rank completed collective k, or one after it.
func (c *Comm) completed(k opKey) bool { return c.completedAt(k.fn).Compare(k.place()) >= 0 }

// completedUpTo: the furthest collective of k's function the rank completed is the one right
// before k: the previous repeat of its kind; before a seq's first replay, the eager collective
// of the seq before; before an eager collective, that too or the replays of its own seq.
func (c *Comm) completedUpTo(k opKey) bool {
	d := c.completedAt(k.fn)
	switch {
	case k.rep > 0:
		return d == collective.Place{Seq: k.seq, Replay: k.replay, Repeat: k.rep - 1}
	case k.replay:
		return d.Seq == k.seq-1 && !d.Replay
	}
	return d.Seq == k.seq && d.Replay || d.Seq == k.seq-1 && !d.Replay
}

// seesReplays: the rank shows CUDA graph replays of fn (one completed or open). NCCL starts a
// replay's events only on ranks whose part of the graph has proxy work (enqueue.cc
// ncclLaunchPrepare, hasProxyOps): a rank that shows none cannot be judged on a replay.
func (c *Comm) seesReplays(fn string) bool {
	for _, d := range c.Completed {
		if d.Func == fn && d.Replays > 0 {
			return true
		}
	}
	for i := range c.Open {
		if c.Open[i].Func == fn && c.Open[i].GraphReplay {
			return true
		}
	}
	return false
}

func (c *Comm) completedOps(fn string) uint64 {
	for _, d := range c.Completed {
		if d.Func == fn {
			return d.Ops
		}
	}
	return 0
}

// p2pDone is how many sends to (or receives from) peer the rank completed.
func (c *Comm) p2pDone(peer int, dir string) uint64 {
	for _, p := range c.P2pCompleted {
		if p.Peer == peer {
			if dir == Send {
				return p.Sends
			}
			return p.Recvs
		}
	}
	return 0
}

// find is the rank's open operation with this key (nil: none).
func (c *Comm) find(k opKey) *Op {
	for i := range c.Open {
		if keyOf(&c.Open[i]) == k {
			return &c.Open[i]
		}
	}
	return nil
}

// opKey identifies an operation on a rank: collectives by (function, seq, repeat); P2P by
// (function, peer, ordinal).
type opKey struct {
	kind, fn string
	seq, rep int64
	replay   bool // a CUDA graph's replay (Op.GraphReplay)
	peer     int
}

func (k opKey) place() collective.Place {
	return collective.Place{Seq: k.seq, Replay: k.replay, Repeat: k.rep}
}

func keyOf(o *Op) opKey {
	k := opKey{kind: o.Kind, fn: o.Func, seq: o.Seq, rep: o.Repeat, replay: o.GraphReplay, peer: -1}
	if o.Peer != nil {
		k.peer = *o.Peer
	}
	return k
}

func (k opKey) String() string {
	if k.kind == KindP2p {
		return fmt.Sprintf("%s #%d with rank %d", k.fn, k.seq, k.peer)
	}
	return k.fn + " seq " + placeText(k.place())
}

// placeText writes where a collective stands: "20", "20+3", "20 replay 3" (commops.SeqText).
func placeText(p collective.Place) string { return commops.SeqText(p.Seq, p.Repeat, p.Replay) }

// ranksSorted lists the ranks a communicator has views for.
func (v *commView) ranksSorted() []int {
	out := make([]int, 0, len(v.ranks))
	for r := range v.ranks {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

func cmpOpStart(a, b *Op) int {
	return cmp.Or(cmp.Compare(a.StartUnixNs, b.StartUnixNs), cmp.Compare(a.Seq, b.Seq), cmp.Compare(a.Repeat, b.Repeat))
}

// repeatedSeqs says where a rank's open collectives repeat a seq with no repeat number to tell
// them apart, one open twice or one the rank already completed: NCCL gives every replay of a
// CUDA-graph-captured collective the same seq (from 2.26, unless KernelCh is on:
// src/plugin/profiler.cc ncclProfilerStartTaskEvents), and a dump from a plugin that did not
// number them (Op.Repeat) shows a rank at one replay and a rank at the next alike, so what is
// said of that seq may be wrong. "" where no seq repeats.
func (v *commView) repeatedSeqs() string {
	var at []string
	for _, r := range v.ranksSorted() {
		c := v.ranks[r].comm
		seen := map[opKey]bool{}
		for i := range c.Open {
			o := &c.Open[i]
			if o.Kind != KindColl {
				continue
			}
			k := keyOf(o)
			if seen[k] || c.completed(k) {
				at = append(at, fmt.Sprintf("rank %d %s", r, k))
				break
			}
			seen[k] = true
		}
	}
	if len(at) == 0 {
		return ""
	}
	return fmt.Sprintf("communicator %s: collectives repeat a seq (%s): a CUDA graph's replays carry one seq (NCCL 2.26+, unless KernelCh is on), and these dumps do not number them (written by an ncclprof before repeat numbers), so which replay each rank is at cannot be told apart, and what is said of that seq may be wrong", v.hash, strings.Join(at, ", "))
}
