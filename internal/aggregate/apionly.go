package aggregate

import "github.com/ncclprof/ncclprof/internal/event"

// API calls and the operations NCCL reports only through them (docs/nccl-api-patterns.md).
//
// From ABI v5 (NCCL 2.28) every collective call starts a GroupApi and a CollApi, and NCCL
// starts a Coll only for the tasks its ordinary scheduler plans. Symmetric kernels
// (scheduler/symmetric_sched.cc frees the task), CE collectives (ce_coll.cc) and, from 2.29,
// Broadcasts with several roots in one group (ncclTaskBcast) never get one: their CollApi is
// all there is. Such a call is counted once, as an operation marked APIOnly, when its group
// has ended and QuietNs passed with no Coll naming it (a Coll that does come names its CollApi
// as parent, so it is never counted beside it).
//
// A CUDA graph captures the API calls once; each replay starts Group and Coll/P2p again with
// the capture-time CollApi/P2pApi as parent (enqueue.cc hostStreamPlanTask). A captured call
// is therefore never counted on its own, lives while its replays come, and the n-th task of
// each of a captured group's calls belong to replay n: an all-to-all replayed 4,000 times is
// 4,000 AlltoAll operations, not one group of 4,000 × 2n tasks.

// replayKey is one replay of a captured group: its n-th set of tasks.
type replayKey struct {
	g *groupEntry
	n int
}

// apiCall records a CollApi or P2pApi call.
func (a *Aggregator) apiCall(cs *commState, r *event.Record) {
	e := &apiEntry{handle: r.Handle, start: r.Start, stop: r.Stop, open: r.Flags&event.Open != 0,
		p2p: r.Type == event.P2pAPI, fn: r.Func, dtype: r.Dtype, count: r.Count, root: int(r.Root),
		graph: r.Graph, used: r.Start}
	cs.qAPIs.push(r.Start, r.Handle)
	if g := a.group(r.Parent); g != nil {
		e.group = g
		if e.p2p {
			g.p2pAPIs++
		} else {
			g.collAPIs++
		}
	}
	cs.apis[r.Handle] = e
	if !e.p2p && !e.graph {
		cs.apiOrder = append(cs.apiOrder, e)
	}
}

// linkTask ties a Coll/P2p task to its API call and to the group it is rebuilt in, if any.
func (a *Aggregator) linkTask(cs *commState, e *opEntry, api *apiEntry, at event.Ticks) {
	e.api = api
	if api.counted { // counted from its API events alone, and its Coll came after all
		a.recount(cs, api)
	}
	n := api.tasks
	api.tasks++
	api.used = max(api.used, at)
	g := api.group
	if g == nil {
		return
	}
	if api.graph {
		if g = a.replayGroup(cs, g, n, at); g == nil {
			return
		}
		g.linked++ // each captured call has one task per replay
	} else if api.p2p && !api.linked {
		api.linked = true
		g.linked++
	}
	g.pending++
	e.group = g
}

// replayGroup is replay n of a captured group, made at its first task; nil when the group is
// not one call NCCL expanded (its replays' tasks are separate operations, as at capture).
func (a *Aggregator) replayGroup(cs *commState, capture *groupEntry, n int, at event.Ticks) *groupEntry {
	if capture.depth != 1 || capture.p2pAPIs < 2 || capture.collAPIs > 0 {
		return nil
	}
	k := replayKey{capture, n}
	if g := cs.replays[k]; g != nil {
		return g
	}
	g := &groupEntry{depth: capture.depth, p2pAPIs: capture.p2pAPIs, born: at, capture: capture, replayN: n}
	cs.replays[k] = g
	cs.grOrder = append(cs.grOrder, g)
	return g
}

// forgetGroup drops a finished group from the lookups.
func (a *Aggregator) forgetGroup(cs *commState, g *groupEntry) {
	if g.capture != nil {
		delete(cs.replays, replayKey{g.capture, g.replayN})
		return
	}
	delete(cs.groups, g.handle)
}

// decideAPIs counts, once each, the CollApi calls that have no Coll QuietNs after their group
// ended (or MaxAgeNs after they started, if it never ends).
func (a *Aggregator) decideAPIs(cs *commState, quiet, old func(event.Ticks) bool) {
	cs.apiOrder = due(cs.apiOrder, func(e *apiEntry) bool { return quiet(e.start) }, func(e *apiEntry) bool {
		if e.tasks > 0 {
			return true
		}
		end, open := e.stop, e.open
		if g := e.group; g != nil {
			end, open = max(end, g.stop), open || g.open
		}
		if !old(e.start) && (open || !quiet(end)) {
			return false
		}
		a.countAPIOnly(cs, e)
		return true
	})
}

// apiOnlyOp is the operation a CollApi call stands for when NCCL reported nothing else.
func (a *Aggregator) apiOnlyOp(cs *commState, e *apiEntry) Op {
	o := Op{Handle: e.handle, Comm: cs.info, Func: e.fn, Dtype: e.dtype, Count: e.count,
		Peer: -1, Root: e.root, Start: e.start, APIOnly: true}
	_, mul := Factor(o.Func, cs.info.NRanks)
	o.Bytes = e.count * event.DtypeSize(e.dtype) * mul
	if !e.open && e.stop >= e.start {
		o.End = e.stop
		o.APINs = a.ns(e.stop - e.start)
	}
	return o
}

func (a *Aggregator) countAPIOnly(cs *commState, e *apiEntry) {
	if t := cs.lostAPIs[e.fn]; t != nil && t.claims > 0 {
		t.claims-- // a Coll of this function lost with its CollApi kept: it is that call, counted
		return
	}
	e.counted = true
	o := a.apiOnlyOp(cs, e)
	// Not in the progress a hang dump compares across ranks (its flight record): counted 200 ms
	// after its group, it would interleave there with the operations around it differently on
	// each rank.
	a.emit(cs, &o)
}

// recount takes back an operation counted from its API events alone when its Coll comes after
// all: the Coll counts it. The summary's count and bytes are exact again; its API time stays in
// the distribution and metrics already exported keep it, which Partial says.
func (a *Aggregator) recount(cs *commState, e *apiEntry) {
	e.counted = false
	o := a.apiOnlyOp(cs, e)
	if s := cs.res.Ops[opKey(&o)]; s != nil && s.APIOnly > 0 {
		s.Count--
		s.Bytes -= o.Bytes
		s.APIOnly--
		s.NoCompletion--
	}
	cs.res.Health.APIOnlyRecounted++
}

// expireAPIs forgets API calls MaxAgeNs after they started, except captured ones whose replays
// are still coming: those are kept until MaxAgeNs after their latest replay.
func (a *Aggregator) expireAPIs(cs *commState, old func(event.Ticks) bool) {
	for h, ok := cs.qAPIs.pop(old); ok; h, ok = cs.qAPIs.pop(old) {
		if e := cs.apis[h]; e != nil && e.graph && !old(e.used) {
			cs.qAPIs.push(e.used, h)
			continue
		}
		delete(cs.apis, h)
	}
}

// When windows are full, records are lost; the plugin's lost-operation table still counts them
// (lost.go), and for API calls:
//   - a lost CollApi (LostOp of type CollApi) may be an API-only operation: it is one unless a
//     Coll came for it, recorded (its parent then reads dropped: ParentDropped) or lost too
//     (LostAPIDropped); those are counted as Colls. What remains at finalize is counted as
//     untimed API-only operations;
//   - a lost Coll whose CollApi was recorded (LostAPIKept) is counted by the table: the next
//     CollApi of its function found without a Coll is that call, and is not counted again.
// Counts are exact; the bytes too when the calls of one function that met these fates have one
// size.

// lostCalls tallies, per function, CollApi calls whose records were lost.
type lostCalls struct {
	lost, lostBytes uint64 // CollApi calls lost
	had, hadBytes   uint64 // of them, ones that had a Coll
	claims          uint64 // Colls lost whose CollApi was recorded, not yet matched
}

func (t *lostCalls) gone(n, bytes uint64) { t.had, t.hadBytes = t.had+n, t.hadBytes+bytes }

func (a *Aggregator) tally(cs *commState, fn string) *lostCalls {
	t := cs.lostAPIs[fn]
	if t == nil {
		t = &lostCalls{}
		cs.lostAPIs[fn] = t
	}
	return t
}

// lostCall takes what a lost-table entry says of API calls; true when the entry counts no
// operation itself (a lost CollApi).
func (a *Aggregator) lostCall(cs *commState, l LostOp, n, bytes uint64) bool {
	switch {
	case l.Type == event.CollAPI:
		t := a.tally(cs, l.Func)
		t.lost, t.lostBytes = t.lost+n, t.lostBytes+bytes
		return true
	case l.API == LostAPIKept:
		a.tally(cs, l.Func).claims += n
	case l.API == LostAPIDropped:
		a.tally(cs, l.Func).gone(n, bytes)
	}
	return false
}

// countLostAPIOnly counts, at finalize, the lost CollApi calls that had no Coll.
func (a *Aggregator) countLostAPIOnly(cs *commState) {
	for fn, t := range cs.lostAPIs {
		if t.lost <= t.had {
			continue
		}
		o := &Op{Comm: cs.info, Func: fn, Peer: -1, Root: -1, APIOnly: true, Untimed: t.lost - t.had}
		if t.lostBytes > t.hadBytes {
			o.Bytes = t.lostBytes - t.hadBytes
		}
		a.emitUntimed(cs, o)
	}
}
