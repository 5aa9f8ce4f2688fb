package merge

import (
	"sort"
	"strconv"
	"strings"

	"github.com/ncclprof/ncclprof/internal/collective"
	"github.com/ncclprof/ncclprof/internal/jsonscan"
	"github.com/ncclprof/ncclprof/internal/kineto"
	"github.com/ncclprof/ncclprof/internal/ptrace"
	"github.com/ncclprof/ncclprof/internal/traceevent"
)

// Synthetic thread ids of the tracks ncclmerge adds (the plugin's own synthetic tracks use
// 2.0e9–2.2e9+, Kineto uses OS thread ids, stream ids and stream + 1000000).
const (
	// userTrackBase + tid: the plugin's slices of a real thread, moved off Kineto's track of
	// that thread so they can never break its nesting.
	userTrackBase = 2300000000
	// gpuTrackBase + stream·1024 + lane·128 + channel: KernelCh placed on the GPU timeline.
	gpuTrackBase = 2400000000
)

// Flow categories and names ncclmerge writes (private, so ids cannot clash with Kineto's).
const (
	linkFlowCat  = "nccl_link"
	linkFlowName = "nccl_link"
)

// writeKineto copies the rank's Kineto events. Outside a timeline it copies the array in bulk
// between the few events that change (and, for absolute-µs traces, the ts values it rebases);
// a timeline renames processes and flows, so it rewrites each event.
func (r *rankState) writeKineto(e *emitter, tl *timelineMap) {
	sameBase := r.kt.HasBase && r.kt.Base == e.base
	if tl == nil && r.shift == 0 && (sameBase || r.kt.Absolute) {
		r.copyBulk(e, !sameBase)
		return
	}
	r.kt.Walk(func(ev *kineto.Event) bool {
		r.rewriteKineto(e, ev, tl)
		return e.err == nil
	})
}

// copyBulk writes the traceEvents content as it is, except for the patch points: linked NCCL
// kernels gain args, dangling flow starts go, and with rebase the absolute ts values become
// relative to the output's base.
func (r *rankState) copyBulk(e *emitter, rebase bool) {
	doc := r.kt.Text()
	type point struct {
		off  int64
		k    *kernel
		drop bool
	}
	var pts []point
	for _, k := range r.kx.kernels {
		if k.link != nil {
			pts = append(pts, point{off: k.off, k: k})
		}
	}
	for _, off := range r.kx.dangling {
		pts = append(pts, point{off: off, drop: true})
	}
	sort.Slice(pts, func(i, j int) bool { return pts[i].off < pts[j].off })
	var ts *blocks[tsAt] // with rebase: the ts values to rebase, from ti on
	if rebase {
		ts = &r.kx.absTs
	}
	ti := 0
	start, end := r.kt.EventsStart()+1, r.kt.EventsEnd()
	// Count the events of the bulk copy: all of them, less the drops.
	copied := r.kt.Events - len(r.kx.dangling)
	pos := start
	first := true
	var num []byte
	// emit writes doc[a:b], a run of whole events, without the separators at its ends, with
	// the ts values inside it rebased.
	emit := func(a, b int) {
		for a < b && strings.IndexByte(" \t\r\n,", doc[a]) >= 0 {
			a++
		}
		for b > a && strings.IndexByte(" \t\r\n,", doc[b-1]) >= 0 {
			b--
		}
		if a == b {
			return
		}
		if first {
			e.sep()
			first = false
		} else {
			e.writeString(",\n")
		}
		for ts != nil && ti < ts.len() && ts.at(ti).off() < int64(a) {
			ti++
		}
		for ts != nil && ti < ts.len() && ts.at(ti).off() < int64(b) {
			off, n := ts.at(ti).off(), ts.at(ti).n()
			ti++
			e.writeInput(doc[a:off])
			num = e.rebased(num[:0], doc[off:off+n])
			e.write(num)
			a = int(off + n)
		}
		e.writeInput(doc[a:b])
	}
	var ev traceevent.Event
	for _, p := range pts {
		emit(pos, int(p.off))
		evEnd, err := traceevent.ParseValid(&ev, doc, int(p.off))
		if err != nil {
			e.err = err
			return
		}
		if !p.drop {
			reps := e.sc.reps[:0]
			if rebase && ev.HasTs && ev.Ts >= kineto.AbsoluteMinNs {
				e.sc.buf = e.ts(e.sc.buf[:0], ev.Ts)
				reps = append(reps, rep{ev.TsSpan, e.sc.buf})
			}
			if first {
				e.sep()
				first = false
			} else {
				e.writeString(",\n")
			}
			e.sc.args = r.appendKernelArgs(e.sc.args[:0], p.k)
			e.cur = patch(e.cur, ev.Raw, reps, ev.ArgsSpan, e.sc.args)
			e.sc.reps = reps[:0]
			e.spill()
		}
		pos = evEnd
	}
	emit(pos, end)
	e.events += copied
}

// rebased turns an absolute µs ts value (number or numeric string) into µs since the output's
// base.
func (e *emitter) rebased(b []byte, raw string) []byte {
	if raw[0] == '"' {
		raw = jsonscan.String(raw)
	}
	ns, err := jsonscan.Scaled(raw, 3)
	if err != nil {
		return append(b, raw...) // cannot happen: the reader accepted it as a time
	}
	return e.ts(b, ns)
}

// rewriteKineto writes one Kineto event with its time rebased and, in a timeline, its
// process, flow id and process metadata renamed.
func (r *rankState) rewriteKineto(e *emitter, ev *kineto.Event, tl *timelineMap) {
	reps := e.sc.reps[:0]
	b := e.sc.buf[:0]
	flow := -1
	if tl != nil && isFlow(ev.Ph) && ev.IDSpan.Valid() {
		flow = tl.kinetoFlow(r, r.kx.keys.key(ev.IDRaw, ev.Event.Cat, ev.Name))
	}
	if ev.Ph == "s" && r.isDangling(ev.Off) {
		return
	}
	if ev.HasTs && ev.TsSpan.Valid() {
		at := len(b)
		b = e.ts(b, r.kt.Unix(ev.Ts)+r.shift)
		reps = append(reps, rep{ev.TsSpan, b[at:]})
	}
	if tl != nil {
		if ev.PidSpan.Valid() {
			at := len(b)
			b = tl.pid(b, r, ev.Pid)
			reps = append(reps, rep{ev.PidSpan, b[at:]})
		}
		if flow >= 0 {
			at := len(b)
			b = strconv.AppendUint(b, tl.flowID(r, uint64(flow)), 10)
			reps = append(reps, rep{ev.IDSpan, b[at:]})
		}
		if ev.Ph == "M" && ev.ArgsSpan.Valid() {
			if args := tl.processMeta(r, ev); args != nil {
				at := len(b)
				b = append(b, args...)
				reps = append(reps, rep{ev.ArgsSpan, b[at:]})
			}
		}
	}
	var add []byte
	if ev.Cat == kineto.CatKernel {
		if k := r.kx.kernelAt[ev.Off]; k != nil && k.link != nil {
			e.sc.args = r.appendKernelArgs(e.sc.args[:0], k)
			add = e.sc.args
		}
	}
	// The replacements point into b while the event is built: both are kept for the next.
	e.sep()
	e.cur = patch(e.cur, ev.Raw, reps, ev.ArgsSpan, add)
	e.events++
	e.spill()
	e.sc.buf, e.sc.reps = b[:0], reps[:0]
}

func (r *rankState) isDangling(off int64) bool {
	i := sort.Search(len(r.kx.dangling), func(i int) bool { return r.kx.dangling[i] >= off })
	return i < len(r.kx.dangling) && r.kx.dangling[i] == off
}

// appendKernelArgs appends the "nccl" member added to a linked kernel's args: NCCL's view of
// the operation and the bandwidth from the kernel's GPU duration (nccl-tests definitions).
func (r *rankState) appendKernelArgs(dst []byte, k *kernel) []byte {
	l := k.link
	g := l.group
	o := newObj(append(dst, `"nccl":`...))
	o.str("link_rule", l.rule)
	o.hex("comm", g.comm.Hash)
	if g.comm.Name != "" {
		o.str("comm_name", g.comm.Name)
	}
	o.int("rank", int64(g.comm.Rank))
	if g.comm.NRanks > 0 {
		o.int("nranks", int64(g.comm.NRanks))
	}
	var bytes uint64
	var proxy, steps, net, chans int
	for _, op := range g.ops {
		bytes += op.bytes()
		proxy += op.proxies
		steps += op.steps
		net += op.net
		chans += len(op.channels)
	}
	if len(g.ops) == 1 {
		appendOp(o, g.ops[0])
	} else {
		o.key("ops")
		o.b = append(o.b, '[')
		for i, op := range g.ops {
			if i > 0 {
				o.b = append(o.b, ',')
			}
			sub := newObj(o.b)
			appendOp(sub, op)
			o.b = sub.done()
		}
		o.b = append(o.b, ']')
	}
	o.uint("bytes", bytes)
	o.int("proxy_ops", int64(proxy))
	o.int("proxy_steps", int64(steps))
	if net > 0 {
		o.int("net_events", int64(net))
	}
	o.int("kernel_channels", int64(chans))
	dur := k.end - k.start
	fn := g.kfunc
	if len(g.ops) == 1 {
		fn = g.ops[0].ev.Func
	}
	algbw, busbw := collective.Bandwidth(fn, bytes, dur, g.comm.NRanks)
	if dur > 0 {
		o.float("algbw_GBps", algbw)
		if g.kfunc != "Generic" && g.comm.NRanks > 0 {
			o.float("busbw_GBps", busbw)
		}
	}
	if g.launch != nil {
		o.hex("kernel_launch", g.launch.ID)
	}
	return o.done()
}

func appendOp(o *obj, op *op) {
	e := op.ev
	o.str("func", e.Func)
	if e.Seq >= 0 {
		o.int("seq", e.Seq)
	}
	if op.api != nil {
		o.uint("count", op.api.Count)
		o.str("datatype", op.api.Datatype)
	} else {
		o.uint("count", e.Count)
		o.str("datatype", e.Datatype)
	}
	if e.Algo != "" {
		o.str("algo", e.Algo)
	}
	if e.Proto != "" {
		o.str("proto", e.Proto)
	}
	if e.Kind == ptrace.P2p {
		o.int("peer", int64(e.Peer))
	}
	o.int("nchannels", int64(e.NChannels))
	o.hex("op", e.ID)
}

// writeAdded writes what ncclmerge adds: sort indexes for the moved thread tracks, a flow
// from each linked operation to its kernel, and the kernel channels on the GPU timeline.
func (r *rankState) writeAdded(e *emitter, tl *timelineMap, ids *idSpace) int {
	n0 := e.events
	r.writeTrackMeta(e, tl)
	r.writeLinkFlows(e, tl, ids)
	r.writePlacedChannels(e, tl)
	return e.events - n0
}

// pid adds a pid member: the process as the output names it (renamed in a timeline).
func (o *obj) pid(r *rankState, tl *timelineMap, id kineto.ID) *obj {
	o.key("pid")
	o.b = r.appendPid(o.b, tl, id)
	return o
}

func (r *rankState) appendPid(b []byte, tl *timelineMap, id kineto.ID) []byte {
	if tl != nil {
		return tl.pid(b, r, id)
	}
	return appendID(b, id)
}

// appendID appends a pid or tid as the input wrote it (a number, or a string).
func appendID(b []byte, id kineto.ID) []byte {
	if id.IsStr {
		return appendJSONString(b, id.Str)
	}
	return strconv.AppendInt(b, id.Num, 10)
}

func (r *rankState) writeTrackMeta(e *emitter, tl *timelineMap) {
	seen := map[[2]int64]bool{}
	for _, p := range r.px {
		if p.t.Unanchored {
			continue
		}
		var threads [][2]int64 // in order of first appearance
		met := map[[2]int64]bool{}
		for i := 0; i < p.lean.events.len(); i++ {
			if ev := p.lean.events.ptr(i); !ev.tidStr && isRealTid(ev.Tid) {
				if th := [2]int64{ev.Pid.Num, ev.Tid}; !met[th] {
					met[th] = true
					threads = append(threads, th)
				}
			}
		}
		var counted [][2]int64 // threads only counted slices were on, in a fixed order
		for th := range p.lean.realThreads {
			counted = append(counted, th)
		}
		sort.Slice(counted, func(i, j int) bool {
			return counted[i][0] < counted[j][0] || counted[i][0] == counted[j][0] && counted[i][1] < counted[j][1]
		})
		for _, th := range append(threads, counted...) {
			if seen[th] {
				continue
			}
			seen[th] = true
			o := e.object().str("ph", "M").str("name", "thread_sort_index").pid(r, tl, kineto.ID{Num: th[0]}).
				int("tid", userTid(th[1]))
			o.end(o.object("args").int("sort_index", th[1]).done())
			e.endObject(o)
		}
	}
}

// writeLinkFlows draws a flow from each linked operation (its Coll/P2p slice, else its
// KernelLaunch) to its kernel. A flow that would go back in time (a clock problem) is left out
// rather than drawn wrong.
func (r *rankState) writeLinkFlows(e *emitter, tl *timelineMap, ids *idSpace) {
	for _, l := range r.links {
		g := l.group
		kTs := l.kernel.start + r.shift
		var srcs []*plEvent
		for _, op := range g.ops {
			srcs = append(srcs, op.ev)
		}
		if len(srcs) == 0 && g.launch != nil {
			srcs = append(srcs, g.launch)
		}
		for _, src := range srcs {
			sTs := src.Start + g.src.shift + r.shift
			if sTs > kTs || g.src.t.Unanchored {
				continue
			}
			id := ids.linkFlow(r)
			tid := src.Tid
			if isRealTid(tid) {
				tid = userTid(tid)
			}
			e.endObject(e.object().str("ph", "s").uint("id", id).str("cat", linkFlowCat).str("name", linkFlowName).
				pid(r, tl, src.Pid).int("tid", tid).micros("ts", sTs-e.base))
			f := e.object().str("ph", "f").str("bp", "e").uint("id", id).str("cat", linkFlowCat).str("name", linkFlowName).
				pid(r, tl, l.kernel.pid).key("tid")
			f.b = appendID(f.b, l.kernel.tid)
			e.endObject(f.micros("ts", kTs-e.base))
		}
	}
}

// placed is a kernel channel placed on the GPU timeline.
type placed struct {
	ch         channelRec
	pid        kineto.ID
	stream     int64
	offset     int64 // the GPU clock offset it was placed with
	start, end int64
}

// writePlacedChannels puts each KernelCh on the GPU process of its kernel, at its globaltimer
// time less the GPU clock offset (%globaltimer − Kineto time), one track per stream and channel
// (more lanes where noise makes two overlap, so the tracks always nest).
func (r *rankState) writePlacedChannels(e *emitter, tl *timelineMap) {
	if r.gpu.from == "" {
		return
	}
	n := 0
	for _, l := range r.links {
		for _, op := range l.group.ops {
			n += len(op.channels)
		}
	}
	all := make([]placed, 0, n)
	for _, l := range r.links {
		if l.kernel.tid.IsStr {
			continue
		}
		for _, op := range l.group.ops {
			for _, ch := range op.channels {
				if ch.gpuStart <= 0 || ch.gpuStop < ch.gpuStart {
					continue
				}
				all = append(all, placed{ch: ch, pid: l.kernel.pid, stream: l.kernel.tid.Num, offset: l.gpuOffset,
					start: ch.gpuStart - l.gpuOffset + r.shift, end: ch.gpuStop - l.gpuOffset + r.shift})
			}
		}
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].start < all[j].start })
	type trackKey struct {
		pid     kineto.ID
		stream  int64
		channel int
	}
	lanes := map[trackKey][]int64{} // (pid, stream, channel) → end of each lane
	type namedKey struct {
		pid kineto.ID
		tid int64
	}
	named := map[namedKey]bool{}
	for _, pc := range all {
		key := trackKey{pc.pid, pc.stream, pc.ch.channel}
		ends := lanes[key]
		lane := -1
		for i, end := range ends {
			if end <= pc.start {
				lane = i
				break
			}
		}
		if lane < 0 {
			lane = len(ends)
			ends = append(ends, 0)
		}
		ends[lane] = pc.end
		lanes[key] = ends
		tid := gpuTrackBase + (pc.stream%1000000)*1024 + int64(lane%8)*128 + int64(pc.ch.channel%128)
		if nk := (namedKey{pc.pid, tid}); !named[nk] {
			named[nk] = true
			name := "stream " + strconv.FormatInt(pc.stream, 10) + " NCCL ch " + strconv.Itoa(pc.ch.channel)
			if lane > 0 {
				name += " lane " + strconv.Itoa(lane)
			}
			m := e.object().str("ph", "M").str("name", "thread_name").pid(r, tl, pc.pid).int("tid", tid)
			e.endObject(m.end(m.object("args").str("name", name).done()))
			s := e.object().str("ph", "M").str("name", "thread_sort_index").pid(r, tl, pc.pid).int("tid", tid)
			e.endObject(s.end(s.object("args").int("sort_index", pc.stream*1000+int64(pc.ch.channel)*8+int64(lane)+1).done()))
		}
		x := e.object().str("ph", "X").str("cat", "nccl_gpu").str("name", pc.ch.name).pid(r, tl, pc.pid).
			int("tid", tid).micros("ts", pc.start-e.base).
			micros("dur", traceevent.PerfettoDur(pc.start-e.base, pc.end-pc.start))
		// 64-bit clock values as decimal strings, as the plugin writes them: a double would
		// lose their low bits.
		args := x.object("args").int("channel", int64(pc.ch.channel)).hex("op", pc.ch.op).
			decimal("gpu_start_ns", pc.ch.gpuStart).decimal("gpu_stop_ns", pc.ch.gpuStop).
			decimal("gpu_offset_ns", pc.offset).str("placed_by", r.gpu.placedBy())
		e.endObject(x.end(args.done()))
	}
}
