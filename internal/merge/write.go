package merge

import (
	"io"
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

// emitter streams events into the traceEvents array.
type emitter struct {
	w      io.Writer
	base   int64
	events int
	buf    []byte // replacement values of the event being rewritten
	out    []byte // the rewritten event
	reps   []rep  // where they go
	err    error
}

func (e *emitter) sep() {
	if e.events > 0 {
		e.write([]byte(",\n"))
	} else {
		e.write([]byte("\n"))
	}
}

func (e *emitter) write(b []byte) {
	if e.err == nil {
		_, e.err = e.w.Write(b)
	}
}

func (e *emitter) writeString(s string) {
	if e.err == nil {
		_, e.err = io.WriteString(e.w, s)
	}
}

// stableWriter takes text that stays valid until it is closed without copying it.
type stableWriter interface{ WriteStable(string) error }

// writeInput writes a span of an input document (which outlives the output).
func (e *emitter) writeInput(s string) {
	if sw, ok := e.w.(stableWriter); ok && e.err == nil {
		e.err = sw.WriteStable(s)
		return
	}
	e.writeString(s)
}

// event writes one whole event.
func (e *emitter) event(b []byte) {
	e.sep()
	e.write(b)
	e.events++
}

func (e *emitter) ts(b []byte, unix int64) []byte { return jsonscan.AppendMicros(b, unix-e.base) }

// rep replaces Raw[span] of an event.
type rep struct {
	span traceevent.Span
	text []byte
}

// patch rebuilds an event with replacements and, optionally, members added to its args.
func patch(dst []byte, raw string, reps []rep, argsSpan traceevent.Span, addArgs []byte) []byte {
	if len(addArgs) > 0 {
		if argsSpan.Valid() {
			body := strings.TrimSpace(raw[argsSpan.Start+1 : argsSpan.End-1])
			ins := addArgs
			if body != "" {
				ins = append([]byte{','}, addArgs...)
			}
			reps = append(reps, rep{traceevent.Span{Start: argsSpan.End - 1, End: argsSpan.End - 1}, ins})
		} else {
			end := int32(len(raw) - 1)
			reps = append(reps, rep{traceevent.Span{Start: end, End: end}, append(append([]byte(`,"args":{`), addArgs...), '}')})
		}
	}
	// A handful, nearly in order: an insertion sort (sort.SliceStable allocated per event).
	for i := 1; i < len(reps); i++ {
		for j := i; j > 0 && reps[j].span.Start < reps[j-1].span.Start; j-- {
			reps[j], reps[j-1] = reps[j-1], reps[j]
		}
	}
	pos := int32(0)
	for _, r := range reps {
		dst = append(dst, raw[pos:r.span.Start]...)
		dst = append(dst, r.text...)
		pos = r.span.End
	}
	return append(dst, raw[pos:]...)
}

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
		evEnd, err := traceevent.Parse(&ev, doc, int(p.off))
		if err != nil {
			e.err = err
			return
		}
		if !p.drop {
			var reps []rep
			if rebase && ev.HasTs && ev.Ts >= kineto.AbsoluteMinNs {
				reps = append(reps, rep{ev.TsSpan, e.ts(nil, ev.Ts)})
			}
			e.out = patch(e.out[:0], ev.Raw, reps, ev.ArgsSpan, r.kernelArgs(p.k))
			if first {
				e.sep()
				first = false
			} else {
				e.writeString(",\n")
			}
			e.write(e.out)
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
	reps := e.reps[:0]
	b := e.buf[:0]
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
		if (ev.Ph == "s" || ev.Ph == "t" || ev.Ph == "f") && ev.IDSpan.Valid() {
			if idx, ok := r.kx.flows[r.kx.keys.key(ev.IDRaw, ev.Event.Cat, ev.Name)]; ok {
				at := len(b)
				b = strconv.AppendUint(b, tl.flowID(r, uint64(idx)), 10)
				reps = append(reps, rep{ev.IDSpan, b[at:]})
			}
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
			add = r.kernelArgs(k)
		}
	}
	// Two buffers kept across events: the replacements point into buf while out is built.
	e.out = patch(e.out[:0], ev.Raw, reps, ev.ArgsSpan, add)
	e.event(e.out)
	e.buf, e.reps = b[:0], reps[:0]
}

func (r *rankState) isDangling(off int64) bool {
	i := sort.Search(len(r.kx.dangling), func(i int) bool { return r.kx.dangling[i] >= off })
	return i < len(r.kx.dangling) && r.kx.dangling[i] == off
}

// kernelArgs is the "nccl" member added to a linked kernel's args: NCCL's view of the
// operation and the bandwidth from the kernel's GPU duration (nccl-tests definitions).
func (r *rankState) kernelArgs(k *kernel) []byte {
	l := k.link
	g := l.group
	o := newObj([]byte(`"nccl":`))
	o.str("link_rule", l.rule)
	o.str("comm", hexHandle(g.comm.Hash))
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
		o.str("kernel_launch", hexHandle(g.launch.ID))
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
	o.str("op", hexHandle(e.ID))
}

// writePlugin writes the plugin's events: their times on Kineto's clock, their real-thread
// slices on tracks of their own, their flow ids renumbered, linked operations annotated. It
// walks each file again: most events were read as records only (see lean.go); those that were
// decoded are met in the same order.
func (r *rankState) writePlugin(e *emitter, tl *timelineMap, ids *idSpace) {
	for _, p := range r.px {
		flows := pluginFlows(p.lean.flows, ids.pluginFlows(r))
		kept := p.t.Events
		var tmp ptrace.Event
		walk(p.t, func(raw *traceevent.Event) bool {
			ev := &tmp
			if len(kept) > 0 && kept[0].Off == raw.Off {
				ev, kept = &kept[0], kept[1:]
			} else {
				tmp = ptrace.Event{Event: *raw, Kind: ptrace.KindOf(raw.Cat, raw.Name),
					Start: p.t.Base + raw.Ts, End: p.t.Base + raw.Ts + raw.Dur}
				if raw.Ph != "X" {
					tmp.Kind = ptrace.KindOther
				}
			}
			if ev.Raw == "{}" || isProcessMeta(ev) {
				return true // the sentinel of the example plugin; process metadata went first
			}
			var flowN *uint64
			if isFlow(ev.Ph) {
				if flowN = flows[p.lean.keys.key(ev.IDRaw, ev.Cat, ev.Name)]; flowN == nil {
					return true // a flow start whose end was cut off with the file
				}
			}
			r.rewritePlugin(e, p, ev, tl, flowN, ids)
			return e.err == nil
		})
		if e.err != nil {
			return
		}
	}
}

// walk visits every event of a plugin trace in file order: again from the file for a trace
// read from one, else (NCCL's example plugin, parsed whole) its events.
func walk(t *ptrace.Trace, visit func(*traceevent.Event) bool) {
	if t.Unanchored || t.Doc.Text() == "" {
		for i := range t.Events {
			if !visit(&t.Events[i].Event) {
				return
			}
		}
		return
	}
	t.Doc.Walk(visit)
}

func isFlow(ph string) bool { return ph == "s" || ph == "t" || ph == "f" }

// isProcessMeta: the plugin names the process it shares with Kineto ("ncclprof <host> pid N").
func isProcessMeta(ev *ptrace.Event) bool {
	return ev.Ph == "M" && (ev.Name == "process_name" || ev.Name == "process_labels" || ev.Name == "process_sort_index")
}

// writePluginProcessMeta writes the plugin's process metadata before Kineto's events: kept, as
// every input event is, but where Kineto's own names, which come later, win in viewers (the
// last name of a process is the one shown).
func (r *rankState) writePluginProcessMeta(e *emitter, tl *timelineMap) {
	ids := newIDSpace()
	for _, p := range r.px {
		for i := range p.t.Events {
			if ev := &p.t.Events[i]; isProcessMeta(ev) {
				r.rewritePlugin(e, p, ev, tl, nil, ids)
			}
		}
	}
}

// pluginFlows numbers the plugin's complete flows; flows missing a start or an end (a cut
// file) are absent from the map.
func pluginFlows(recs []flowRec, next *uint64) map[flowKey]*uint64 {
	starts, ends := map[flowKey]int{}, map[flowKey]int{}
	var order []flowKey
	for _, f := range recs {
		if starts[f.key]+ends[f.key] == 0 {
			order = append(order, f.key)
		}
		if f.start {
			starts[f.key]++
		} else {
			ends[f.key]++
		}
	}
	out := make(map[flowKey]*uint64, len(order))
	for _, k := range order {
		if starts[k] == 1 && ends[k] > 0 {
			v := *next
			out[k] = &v
			*next++
		}
	}
	return out
}

func (r *rankState) rewritePlugin(e *emitter, p *pluginIndex, ev *ptrace.Event, tl *timelineMap, flowN *uint64, ids *idSpace) {
	reps := e.reps[:0]
	b := e.buf[:0]
	if ev.HasTs && ev.TsSpan.Valid() {
		at := len(b)
		ts := ev.Start + p.shift + r.shift
		b = e.ts(b, ts)
		reps = append(reps, rep{ev.TsSpan, b[at:]})
		if ev.HasDur && ev.DurSpan.Valid() {
			// Far from the base Perfetto rounds ts and dur apart: write the dur that ends
			// the slice where its exact end rounds, so slices nest and meet to the ns.
			if d := traceevent.PerfettoDur(ts-e.base, ev.Dur); d != ev.Dur {
				at := len(b)
				b = jsonscan.AppendMicros(b, d)
				reps = append(reps, rep{ev.DurSpan, b[at:]})
			}
		}
	}
	if tl != nil && ev.PidSpan.Valid() {
		at := len(b)
		b = tl.pid(b, r, ev.Pid)
		reps = append(reps, rep{ev.PidSpan, b[at:]})
	}
	moveTid := !p.t.Unanchored && ev.TidSpan.Valid() && !ev.Tid.IsStr && isRealTid(ev.Tid.Num) &&
		(ev.Ph != "M" || ev.Name == "thread_name")
	if moveTid {
		at := len(b)
		b = strconv.AppendInt(b, userTid(ev.Tid.Num), 10)
		reps = append(reps, rep{ev.TidSpan, b[at:]})
	}
	if isFlow(ev.Ph) && ev.IDSpan.Valid() && flowN != nil {
		at := len(b)
		b = strconv.AppendUint(b, ids.pluginFlow(r, *flowN), 10)
		reps = append(reps, rep{ev.IDSpan, b[at:]})
	}
	var add []byte
	if ev.IsSlice() {
		add = r.pluginLinkArgs(p, ev)
	}
	// Two buffers kept across events: the replacements point into buf while out is built.
	e.out = patch(e.out[:0], ev.Raw, reps, ev.ArgsSpan, add)
	e.event(e.out)
	e.buf, e.reps = b[:0], reps[:0]
}

// isRealTid: the plugin's synthetic tracks start at 2e9; lower tids are OS threads.
func isRealTid(tid int64) bool { return tid > 0 && tid < 2000000000 }

func userTid(tid int64) int64 { return userTrackBase + tid%100000000 }

// pluginLinkArgs annotates a linked Coll/P2p or KernelLaunch with its kernel.
func (r *rankState) pluginLinkArgs(p *pluginIndex, ev *ptrace.Event) []byte {
	var l *link
	switch ev.Kind {
	case ptrace.Coll, ptrace.P2p:
		if o := p.ops[ev.ID]; o != nil && o.group.link != nil && ev.ID != 0 {
			l = o.group.link
		}
	case ptrace.KernelLaunch:
		l = p.launchLink[ev] // (a scan of every group per launch was quadratic)
	}
	if l == nil {
		return nil
	}
	o := newObj([]byte(`"ncclmerge":`))
	o.str("kernel", l.kernel.name)
	if l.kernel.corr != 0 {
		o.uint("correlation", l.kernel.corr)
	}
	o.str("link_rule", l.rule)
	return o.done()
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

func (r *rankState) pidText(tl *timelineMap, id kineto.ID) []byte {
	if tl != nil {
		return tl.pid(nil, r, id)
	}
	if id.IsStr {
		return appendJSONString(nil, id.Str)
	}
	return strconv.AppendInt(nil, id.Num, 10)
}

func (r *rankState) writeTrackMeta(e *emitter, tl *timelineMap) {
	seen := map[[2]int64]bool{}
	for _, p := range r.px {
		if p.t.Unanchored {
			continue
		}
		var threads [][2]int64
		for i := range p.t.Events {
			if ev := &p.t.Events[i]; ev.IsSlice() && !ev.Tid.IsStr && isRealTid(ev.Tid.Num) {
				threads = append(threads, [2]int64{ev.Pid.Num, ev.Tid.Num})
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
			o := newObj(nil).str("ph", "M").str("name", "thread_sort_index").raw("pid", r.pidText(tl, kineto.ID{Num: th[0]})).
				int("tid", userTid(th[1]))
			o.raw("args", newObj(nil).int("sort_index", th[1]).done())
			e.event(o.done())
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
		var srcs []*ptrace.Event
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
			tid := src.Tid.Num
			if isRealTid(tid) {
				tid = userTid(tid)
			}
			s := newObj(nil).str("ph", "s").uint("id", id).str("cat", linkFlowCat).str("name", linkFlowName).
				raw("pid", r.pidText(tl, src.Pid)).int("tid", tid).raw("ts", e.ts(nil, sTs))
			e.event(s.done())
			f := newObj(nil).str("ph", "f").str("bp", "e").uint("id", id).str("cat", linkFlowCat).str("name", linkFlowName).
				raw("pid", r.pidText(tl, l.kernel.pid)).raw("tid", []byte(l.kernel.tid.String())).raw("ts", e.ts(nil, kTs))
			e.event(f.done())
		}
	}
}

// placed is a kernel channel placed on the GPU timeline.
type placed struct {
	ch         channelRec
	pid        kineto.ID
	stream     int64
	start, end int64
}

// writePlacedChannels puts each KernelCh on the GPU process of its kernel, at its globaltimer
// time less the GPU clock offset (%globaltimer − Kineto time), one track per stream and channel
// (more lanes where noise makes two overlap, so the tracks always nest).
func (r *rankState) writePlacedChannels(e *emitter, tl *timelineMap) {
	if r.gpu.from == "" {
		return
	}
	var all []placed
	for _, l := range r.links {
		if l.kernel.tid.IsStr {
			continue
		}
		for _, op := range l.group.ops {
			for _, ch := range op.channels {
				if ch.gpuStart <= 0 || ch.gpuStop < ch.gpuStart {
					continue
				}
				all = append(all, placed{ch: ch, pid: l.kernel.pid, stream: l.kernel.tid.Num,
					start: ch.gpuStart - r.gpu.offset + r.shift, end: ch.gpuStop - r.gpu.offset + r.shift})
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
	pidTexts := map[kineto.ID][]byte{}
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
		pidText, ok := pidTexts[pc.pid]
		if !ok {
			pidText = r.pidText(tl, pc.pid)
			pidTexts[pc.pid] = pidText
		}
		if nk := (namedKey{pc.pid, tid}); !named[nk] {
			named[nk] = true
			name := "stream " + strconv.FormatInt(pc.stream, 10) + " NCCL ch " + strconv.Itoa(pc.ch.channel)
			if lane > 0 {
				name += " lane " + strconv.Itoa(lane)
			}
			m := newObj(nil).str("ph", "M").str("name", "thread_name").raw("pid", pidText).int("tid", tid)
			m.raw("args", newObj(nil).str("name", name).done())
			e.event(m.done())
			s := newObj(nil).str("ph", "M").str("name", "thread_sort_index").raw("pid", pidText).int("tid", tid)
			s.raw("args", newObj(nil).int("sort_index", pc.stream*1000+int64(pc.ch.channel)*8+int64(lane)+1).done())
			e.event(s.done())
		}
		// 64-bit clock values as decimal strings, as the plugin writes them: a double would
		// lose their low bits. (Built in the emitter's buffers: one slice per channel.)
		args := newObj(e.buf[:0]).int("channel", int64(pc.ch.channel)).str("op", hexHandle(pc.ch.op)).
			str("gpu_start_ns", strconv.FormatInt(pc.ch.gpuStart, 10)).str("gpu_stop_ns", strconv.FormatInt(pc.ch.gpuStop, 10)).
			str("gpu_offset_ns", strconv.FormatInt(r.gpu.offset, 10)).str("placed_by", r.gpu.placedBy())
		e.buf = args.done()
		x := newObj(e.out[:0]).str("ph", "X").str("cat", "nccl_gpu").str("name", pc.ch.name).raw("pid", pidText).
			int("tid", tid).key("ts")
		x.b = e.ts(x.b, pc.start)
		x.micros("dur", traceevent.PerfettoDur(pc.start-e.base, pc.end-pc.start)).raw("args", e.buf)
		e.out = x.done()
		e.event(e.out)
	}
}
