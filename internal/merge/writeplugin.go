package merge

import (
	"sort"
	"strconv"

	"github.com/ncclprof/ncclprof/internal/jsonscan"
	"github.com/ncclprof/ncclprof/internal/ptrace"
	"github.com/ncclprof/ncclprof/internal/traceevent"
)

// pluginWriter writes one plugin trace's events: their times on Kineto's clock, their
// real-thread slices on tracks of their own, their flow ids renumbered, linked operations
// annotated. Most events were read as records only (see lean.go), so it reads the file again.
// That pass is shared between the cores: each goroutine formats a run of events into a buffer
// of the output's own (see pluginRun), and the buffers go to the output in file order. Every
// field it reads is settled before it starts, so the goroutines share them read-only.
type pluginWriter struct {
	r     *rankState
	p     *pluginIndex
	tl    *timelineMap
	ids   *idSpace
	flows map[flowKey]uint64 // the complete flows, numbered
	base  int64              // the output's
}

// pluginRun is one run of a plugin trace's events, formatted: each event after ",\n".
type pluginRun struct {
	out    []byte
	events int
	sc     scratch
}

// writePlugin writes the rank's plugin events, file by file.
func (r *rankState) writePlugin(e *emitter, tl *timelineMap, ids *idSpace) {
	for _, p := range r.px {
		pw := &pluginWriter{r: r, p: p, tl: tl, ids: ids, base: e.base,
			flows: pluginFlows(&p.lean.flows, ids.pluginFlows(r))}
		if p.t.Unanchored || p.t.Doc.Text() == "" {
			// NCCL's example plugin is parsed whole (it is small): its events, in order.
			run := pluginRun{out: e.w.Buffer()}
			kept := keptCursor{l: &p.lean.events}
			for i := range p.t.Events {
				pw.event(&run, &p.t.Events[i].Event, &kept)
			}
			e.submitEvents(run.out, run.events)
		} else {
			err := traceevent.WalkParallel(p.t.Doc, func(from, to int, run *pluginRun) {
				if run.out == nil {
					run.out = make([]byte, 0, 1<<20)
				}
				run.out, run.events = run.out[:0], 0
				kept := keptCursor{l: &p.lean.events}
				kept.i = sort.Search(kept.l.len(), func(i int) bool { return kept.l.ptr(i).Off >= int64(from) })
				p.t.Doc.WalkRange(from, to, func(raw *traceevent.Event) bool {
					pw.event(run, raw, &kept)
					return true
				})
			}, func(run *pluginRun) error {
				run.out = e.submitEvents(run.out, run.events) // a buffer to fill next time
				return e.err
			})
			if err != nil {
				return
			}
		}
		if e.err != nil {
			return
		}
	}
}

// keptCursor walks the indexed slices (leanPlugin.events) along the file: i is the first not
// yet met.
type keptCursor struct {
	l *blocks[plEvent]
	i int
}

// next returns the indexed slice at offset off, if the event there is one, and moves past it.
func (k *keptCursor) next(off int64) *plEvent {
	if k.i < k.l.len() && k.l.ptr(k.i).Off == off {
		k.i++
		return k.l.ptr(k.i - 1)
	}
	return nil
}

// event formats one event of the file into run. kept are the indexed slices from this one on:
// the event is the first of them when the linker indexed it (the others were read as records).
func (pw *pluginWriter) event(run *pluginRun, raw *traceevent.Event, kept *keptCursor) {
	p := pw.p
	ev := kept.next(raw.Off)
	if raw.Raw == "{}" || isProcessMeta(raw) {
		return // the sentinel of the example plugin; process metadata went first
	}
	flowN := int64(-1)
	if isFlow(raw.Ph) {
		k, ok := p.lean.keys.find(raw.IDRaw, raw.Cat, raw.Name)
		n, complete := pw.flows[k]
		if !ok || !complete {
			return // a flow start whose end was cut off with the file
		}
		flowN = int64(n)
	}
	run.out = append(run.out, ',', '\n')
	run.out = pw.rewrite(run.out, &run.sc, raw, ev, flowN)
	run.events++
}

func isFlow(ph string) bool { return ph == "s" || ph == "t" || ph == "f" }

// isProcessMeta: the plugin names the process it shares with Kineto ("ncclprof <host> pid N").
func isProcessMeta(ev *traceevent.Event) bool {
	return ev.Ph == "M" && (ev.Name == "process_name" || ev.Name == "process_labels" || ev.Name == "process_sort_index")
}

// writePluginProcessMeta writes the plugin's process metadata before Kineto's events: kept, as
// every input event is, but where Kineto's own names, which come later, win in viewers (the
// last name of a process is the one shown).
func (r *rankState) writePluginProcessMeta(e *emitter, tl *timelineMap) {
	ids := newIDSpace()
	for _, p := range r.px {
		pw := &pluginWriter{r: r, p: p, tl: tl, ids: ids, base: e.base}
		for i := range p.t.Events {
			if ev := &p.t.Events[i]; isProcessMeta(&ev.Event) {
				e.sep()
				e.cur = pw.rewrite(e.cur, &e.sc, &ev.Event, nil, -1)
				e.events++
				e.spill()
			}
		}
	}
}

// pluginFlows numbers the plugin's complete flows; flows missing a start or an end (a cut
// file) are absent from the map.
func pluginFlows(recs *blocks[flowRec], next *uint64) map[flowKey]uint64 {
	type count struct{ starts, ends int }
	counts := make(map[flowKey]count, recs.len()/2)
	var order []flowKey
	for i := 0; i < recs.len(); i++ {
		f := recs.at(i)
		c, seen := counts[f.key]
		if !seen {
			order = append(order, f.key)
		}
		if f.start {
			c.starts++
		} else {
			c.ends++
		}
		counts[f.key] = c
	}
	out := make(map[flowKey]uint64, len(order))
	for _, k := range order {
		if c := counts[k]; c.starts == 1 && c.ends > 0 {
			out[k] = *next
			*next++
		}
	}
	return out
}

// rewrite appends ev to dst with its time on the output's clock, its real thread moved to a
// track of its own, its flow id renumbered (flowN ≥ 0: its number) and, for a linked
// operation (kept: its plEvent, nil for events read as counted records), its link.
func (pw *pluginWriter) rewrite(dst []byte, sc *scratch, ev *traceevent.Event, kept *plEvent, flowN int64) []byte {
	r, p, tl := pw.r, pw.p, pw.tl
	reps := sc.reps[:0]
	b := sc.buf[:0]
	if ev.HasTs && ev.TsSpan.Valid() {
		at := len(b)
		ts := p.t.Base + ev.Ts + p.shift + r.shift
		b = jsonscan.AppendMicros(b, ts-pw.base)
		reps = append(reps, rep{ev.TsSpan, b[at:]})
		if ev.HasDur && ev.DurSpan.Valid() {
			// Far from the base Perfetto rounds ts and dur apart: write the dur that ends
			// the slice where its exact end rounds, so slices nest and meet to the ns.
			if d := traceevent.PerfettoDur(ts-pw.base, ev.Dur); d != ev.Dur {
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
	if isFlow(ev.Ph) && ev.IDSpan.Valid() && flowN >= 0 {
		at := len(b)
		b = strconv.AppendUint(b, pw.ids.pluginFlow(r, uint64(flowN)), 10)
		reps = append(reps, rep{ev.IDSpan, b[at:]})
	}
	var add []byte
	if kept != nil {
		sc.args = r.appendPluginLinkArgs(sc.args[:0], p, kept)
		add = sc.args
	}
	// The replacements point into b while dst is built: both are kept for the next event.
	dst = patch(dst, ev.Raw, reps, ev.ArgsSpan, add)
	sc.buf, sc.reps = b[:0], reps[:0]
	return dst
}

// isRealTid: the plugin's synthetic tracks start at 2e9; lower tids are OS threads.
func isRealTid(tid int64) bool { return tid > 0 && tid < 2000000000 }

func userTid(tid int64) int64 { return userTrackBase + tid%100000000 }

// appendPluginLinkArgs annotates a linked Coll/P2p or KernelLaunch with its kernel (nothing
// for other events).
func (r *rankState) appendPluginLinkArgs(dst []byte, p *pluginIndex, ev *plEvent) []byte {
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
		return dst
	}
	o := newObj(append(dst, `"ncclmerge":`...))
	o.str("kernel", l.kernel.name)
	if l.kernel.corr != 0 {
		o.uint("correlation", l.kernel.corr)
	}
	o.str("link_rule", l.rule)
	return o.done()
}
