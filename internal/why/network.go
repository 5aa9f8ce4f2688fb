package why

import (
	"cmp"
	"fmt"
	"sort"

	"github.com/ncclprof/ncclprof/internal/collective"
	"github.com/ncclprof/ncclprof/internal/commops"
	"github.com/ncclprof/ncclprof/internal/quantile"
)

// link is one send of one collective: a rank to a peer.
type link struct {
	proc       int32
	rank, peer int32
	bytes, ns  int64
}

// collKey names a collective across ranks by what the plugin records of it (repeat and replay
// tell apart the collectives that share a seq: commops.Op).
type collKey struct {
	comm   uint64
	fn     string
	seq    int64
	repeat int32
	replay bool
}

// collOf is operation o's collective.
func (a *analyzer) collOf(o *commops.Op) collKey {
	return collKey{a.s.Comms[o.Comm].Hash, o.Func, o.Seq, o.Repeat, o.GraphReplay}
}

// linkKey names a link of a communicator for the usual bandwidth of its collectives of one kind.
type linkKey struct {
	comm       uint64
	fn         string
	bytes      int64
	rank, peer int32
}

// slowCollectives finds the collectives whose slowest transfer took far longer than usual for
// their kind, and names the link that fell furthest below its own usual bandwidth.
func (a *analyzer) slowCollectives() {
	colls, ranks := a.links()
	// The usual: per link and per kind of collective, the median transfer time.
	usualLink := map[linkKey][]int64{}
	usualColl := map[linkKey][]int64{} // rank, peer -1
	slowest := map[collKey]int64{}
	for k, ls := range colls {
		for _, l := range ls {
			usualLink[lkey(k, l)] = append(usualLink[lkey(k, l)], l.ns)
			slowest[k] = max(slowest[k], l.ns)
		}
		ck := linkKey{k.comm, k.fn, ls[0].bytes, -1, -1}
		usualColl[ck] = append(usualColl[ck], slowest[k])
	}
	// The median and MAD of each kind, taken once: every collective of a kind compares with
	// them (taken per collective, they cost a sort of the kind's every collective each time:
	// quadratic in the job's length).
	type usual struct{ med, mad int64 }
	usualOf := map[linkKey]usual{}
	med := func(k linkKey) (int64, int64) {
		u, ok := usualOf[k]
		if !ok {
			s := quantile.Sorted(usualColl[k])
			u.med = quantile.MedianSorted(s)
			u.mad = quantile.MAD(s, u.med)
			usualOf[k] = u
		}
		return u.med, u.mad
	}
	keys := make([]collKey, 0, len(colls))
	for k := range colls {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		return cmp.Or(cmp.Compare(a.seq, b.seq), cmp.Compare(a.comm, b.comm), cmp.Compare(a.fn, b.fn),
			collective.Place{Seq: a.seq, Replay: a.replay, Repeat: int64(a.repeat)}.Compare(collective.Place{Seq: b.seq, Replay: b.replay, Repeat: int64(b.repeat)})) < 0
	})
	for _, k := range keys {
		ls := colls[k]
		if a.hadLate[k] {
			// A late rank makes the others' steps wait for it (SendPeerWait, RecvWait): its
			// transfers are not slow, and the late arrival is explained already.
			continue
		}
		kind := linkKey{k.comm, k.fn, ls[0].bytes, -1, -1}
		m, mad := med(kind)
		if len(usualColl[kind]) < 3 || float64(slowest[k]) <= a.opt.SlowFactor*float64(m) || float64(slowest[k]-m) <= a.opt.SlowK*float64(mad) ||
			slowest[k]-m < a.opt.Skew.MinLateNs {
			continue
		}
		a.res.SlowCollectives++
		a.slowLink(k, ls, usualLink, ranks, slowest[k]-m)
	}
}

func lkey(k collKey, l link) linkKey { return linkKey{k.comm, k.fn, l.bytes, l.rank, l.peer} }

// slowLink names the link of a slow collective that ran furthest below its usual bandwidth, at
// most 1/SlowFactor of it, and slower than the collective's other links by SlowFactor too.
func (a *analyzer) slowLink(k collKey, ls []link, usual map[linkKey][]int64, ranks map[collKey]map[int32]int32, extra int64) {
	worst, ratio := -1, 0.0
	var usualNs int64
	for j, l := range ls {
		u := quantile.Median(usual[lkey(k, l)])
		if r := float64(l.ns) / float64(max(u, 1)); r > ratio {
			worst, ratio, usualNs = j, r, u
		}
	}
	if worst < 0 || ratio < a.opt.SlowFactor {
		return // every link ran near its usual: the slowness is not one link's
	}
	l := ls[worst]
	var rest []int64
	for j, o := range ls {
		if j != worst {
			rest = append(rest, o.ns)
		}
	}
	restNs := quantile.Median(rest)
	if len(rest) > 0 && float64(l.ns) < a.opt.SlowFactor*float64(restNs) {
		return // the collective's other links were as slow: not this link's doing (a busy host, a slow kernel)
	}
	op, ok := ranks[k][l.proc]
	if !ok {
		return
	}
	gbps := func(ns int64) float64 { return float64(l.bytes) / float64(max(ns, 1)) }
	r := a.row(op, extra, "")
	r.Cause = Network
	r.Evidence = []Evidence{
		{What: fmt.Sprintf("send to peer %d", l.peer), Ns: l.ns, MedianNs: usualNs,
			Detail: fmt.Sprintf("%.2f GB/s against %.2f GB/s usual on this link", gbps(l.ns), gbps(usualNs))},
		{What: "the collective's other links", Ns: restNs, MedianNs: usualNs,
			Detail: fmt.Sprintf("%.2f GB/s median", gbps(restNs))},
	}
	r.Summary = fmt.Sprintf("network: arrived on time, but its transfer to peer %d ran at %.2f GB/s against %.2f GB/s usual on that link and %.2f GB/s on the collective's other links (%s of data took %s instead of %s)",
		l.peer, gbps(l.ns), gbps(usualNs), gbps(restNs), fmtBytes(l.bytes), fmtNs(l.ns), fmtNs(usualNs))
	a.res.Rows = append(a.res.Rows, r)
}

func fmtBytes(b int64) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}

// links gathers every rank's sends per collective, and where each collective's operation is on
// each process (for its step and place in the trace). A collective's sends on one rank to one
// peer over several channels are one link.
func (a *analyzer) links() (map[collKey][]link, map[collKey]map[int32]int32) {
	ops := map[collKey]map[int32]int32{}
	procOf := map[ranksKey]int32{}
	type handleKey struct {
		proc   int32
		handle uint64
	}
	byHandle := map[handleKey]int32{}
	for i := range a.s.Ops {
		o := &a.s.Ops[i]
		if o.Seq < 0 {
			continue
		}
		k := a.collOf(o)
		if ops[k] == nil {
			ops[k] = map[int32]int32{}
		}
		ops[k][o.Proc] = int32(i)
		byHandle[handleKey{o.Proc, o.Handle}] = int32(i)
		procOf[ranksKey{o.Ref.File, o.Ref.Pid >> timelineShift}] = o.Proc
	}
	colls := map[collKey][]link{}
	for rk, act := range a.acts {
		proc, ok := procOf[rk]
		if !ok {
			continue
		}
		merged := map[[2]int64]*link{}
		var order [][2]int64
		for _, s := range act.sent {
			i, ok := byHandle[handleKey{proc, s.coll}] // by handle: a graph's replays share a seq
			if !ok {
				continue
			}
			mk := [2]int64{int64(i), int64(s.peer)}
			l := merged[mk]
			if l == nil {
				l = &link{proc: proc, rank: a.s.Ops[i].Rank, peer: s.peer}
				merged[mk] = l
				order = append(order, mk)
			}
			l.bytes += s.bytes
			l.ns = max(l.ns, s.ns) // channels run side by side
		}
		for _, mk := range order {
			k := a.collOf(&a.s.Ops[mk[0]])
			colls[k] = append(colls[k], *merged[mk])
		}
	}
	return colls, ops
}
