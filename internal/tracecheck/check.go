// Package tracecheck tells what Perfetto's JSON importer would do with a trace: which events
// it would reject or misplace, which flows it would drop, which slices it would move off their
// track. It re-implements the importer's rules that matter for merged traces (see
// kineto-trace-format.md §7): times read as Perfetto reads them (µs as a double, × 1000,
// rounded to the ns), per-(pid, tid) nesting with the sorter's tie-breaks, the tid-0 rewrite,
// v1 flows keyed globally by (id, cat, name), and dropped negative timestamps.
package tracecheck

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/ncclprof/ncclprof/internal/jsonscan"
	"github.com/ncclprof/ncclprof/internal/traceevent"
	"github.com/ncclprof/ncclprof/internal/tracefile"
	"github.com/tidwall/gjson"
)

// Severity orders findings.
type Severity int

// Severities: an Error makes the trace unfit (check exits non-zero), a Warning is something
// the importer works around with a visible change, an Info is normal for real traces.
const (
	Info Severity = iota
	Warning
	Error
)

func (s Severity) String() string {
	return [...]string{"info", "warning", "error"}[s]
}

// Finding codes. The names follow Perfetto's import statistics where one exists.
const (
	CodeInvalidJSON     = "invalid_json"
	CodeMissingField    = "missing_field"
	CodeFlowNoEnd       = "flow_without_end"
	CodeFlowDuplicate   = "flow_duplicate_id"
	CodeFlowInvalidID   = "flow_invalid_id"
	CodeOverlap         = "slice_not_nested"
	CodeTidZero         = "tid_zero"
	CodeNegativeTs      = "negative_timestamp"
	CodeNegativeDur     = "negative_duration"
	CodeEndBeforeBegin  = "end_before_begin"
	CodeFlowBackwards   = "flow_backwards_in_time"
	CodeFlowEndNoStart  = "flow_end_without_start"
	CodeUnmatchedEnd    = "end_without_begin"
	CodeUnknownPhase    = "unsupported_phase"
	CodeInvalidUTF8     = "invalid_utf8"
	maxExamplesPerGroup = 3
)

var severities = map[string]Severity{
	CodeInvalidJSON: Error, CodeMissingField: Error, CodeFlowNoEnd: Error, CodeFlowDuplicate: Error,
	CodeFlowInvalidID: Error, CodeInvalidUTF8: Error,
	CodeOverlap: Warning, CodeTidZero: Warning, CodeNegativeTs: Warning, CodeNegativeDur: Warning,
	CodeEndBeforeBegin: Warning, CodeFlowBackwards: Warning,
	CodeFlowEndNoStart: Info, CodeUnmatchedEnd: Info, CodeUnknownPhase: Info,
}

// Finding is one kind of problem, with how often it occurs and a few examples.
type Finding struct {
	Code     string   `json:"code"`
	Severity string   `json:"severity"`
	Count    int      `json:"count"`
	Examples []string `json:"examples"`
}

// Report is the result of a check.
type Report struct {
	Path     string     `json:"path"`
	Events   int        `json:"events"`
	Slices   int        `json:"slices"`
	Flows    int        `json:"flows"`
	Tracks   int        `json:"tracks"`
	Findings []*Finding `json:"findings"`
	byCode   map[string]*Finding
}

// Count returns how many findings of a code the report has.
func (r *Report) Count(code string) int {
	if f := r.byCode[code]; f != nil {
		return f.Count
	}
	return 0
}

// Total returns how many findings of a severity there are.
func (r *Report) Total(s Severity) int {
	n := 0
	for _, f := range r.Findings {
		if severities[f.Code] == s {
			n += f.Count
		}
	}
	return n
}

// OK reports whether the trace has no errors.
func (r *Report) OK() bool { return r.Total(Error) == 0 }

func (r *Report) add(code, format string, a ...any) {
	f := r.byCode[code]
	if f == nil {
		f = &Finding{Code: code, Severity: severities[code].String()}
		r.byCode[code] = f
		r.Findings = append(r.Findings, f)
	}
	f.Count++
	if len(f.Examples) < maxExamplesPerGroup {
		f.Examples = append(f.Examples, fmt.Sprintf(format, a...))
	}
}

// WriteText prints the report for a person.
func (r *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "%s: %d events, %d slices on %d tracks, %d flows: %d errors, %d warnings\n",
		r.Path, r.Events, r.Slices, r.Tracks, r.Flows, r.Total(Error), r.Total(Warning))
	sort.SliceStable(r.Findings, func(i, j int) bool {
		return severities[r.Findings[i].Code] > severities[r.Findings[j].Code]
	})
	for _, f := range r.Findings {
		fmt.Fprintf(w, "  %-7s %-24s %d\n", f.Severity, f.Code, f.Count)
		for _, ex := range f.Examples {
			fmt.Fprintf(w, "          %s\n", ex)
		}
	}
}

// File checks a trace file (.json or .json.gz). The error is for a file that cannot be read at
// all; a file that is not valid JSON gives a report with an invalid_json error.
func File(path string) (*Report, error) {
	data, err := tracefile.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Check(path, data), nil
}

// track is a (pid, tid) after Perfetto's normalization.
type track struct{ pid, tid string }

type slice struct {
	start, end int64
	idx        int
	name       string
}

type flowState struct {
	starts, ends int
	startTs      int64
	first        int // index of the first event of the flow, to report in file order
	firstWhere   string
}

type checker struct {
	r      *Report
	tracks map[track][]slice
	begins map[track][]beginEnd
	flows  map[string]*flowState
}

type beginEnd struct {
	ts    int64
	begin bool
	idx   int
	name  string
}

// Check inspects a trace held in memory.
func Check(path string, data []byte) *Report {
	r := &Report{Path: path, byCode: map[string]*Finding{}}
	c := &checker{r: r, tracks: map[track][]slice{}, begins: map[track][]beginEnd{}, flows: map[string]*flowState{}}
	n := 0
	doc, err := traceevent.Read(path, data, traceevent.Options{}, func(e *traceevent.Event) error {
		c.event(e, n)
		n++
		return nil
	})
	r.Events = n
	if doc != nil && doc.InvalidUTF8 > 0 {
		r.add(CodeInvalidUTF8, "%d bytes are not valid UTF-8, the first at byte %d: JSON text must be UTF-8 (Python's json, and so HTA, refuse the file)",
			doc.InvalidUTF8, doc.FirstInvalidUTF8)
	}
	if err != nil {
		r.add(CodeInvalidJSON, "%v", err)
		return r
	}
	c.finishBeginEnd()
	c.nesting()
	c.finishFlows()
	return r
}

func idString(e *traceevent.Event, span traceevent.Span) string {
	return e.Raw[span.Start:span.End]
}

// norm applies Perfetto's coercions: a string id names an interned string; tid 0 under a
// non-zero pid becomes the pid.
func norm(e *traceevent.Event) track {
	p, t := idString(e, e.PidSpan), idString(e, e.TidSpan)
	if (t == "0" || t == "") && p != "0" && p != "" && !strings.HasPrefix(p, `"`) {
		t = p
	}
	return track{p, t}
}

func where(e *traceevent.Event, n int) string {
	name := e.Name
	if len(name) > 60 {
		name = name[:60] + "…"
	}
	return fmt.Sprintf("event %d at byte %d (%s %q pid %s tid %s)", n, e.Off, e.Ph, name,
		idString(e, e.PidSpan), idString(e, e.TidSpan))
}

func (c *checker) event(e *traceevent.Event, n int) {
	if e.Raw == "{}" {
		return // the NCCL example plugin's sentinel
	}
	if !c.required(e, n) {
		return
	}
	if e.Ph != "M" && e.TidSpan.Valid() && idString(e, e.TidSpan) == "0" && !processScoped(e) {
		c.r.add(CodeTidZero, "%s: Perfetto shows tid 0 as the process's main thread (tid = pid)", where(e, n))
	}
	if e.HasTs && e.Ts < 0 && e.Ph != "M" {
		c.r.add(CodeNegativeTs, "%s: Perfetto drops events with a negative ts", where(e, n))
		return
	}
	ts := perfettoTs(e)
	switch e.Ph {
	case "X":
		c.r.Slices++
		if e.Dur < 0 {
			c.r.add(CodeNegativeDur, "%s: dur %d ns", where(e, n), e.Dur)
			return
		}
		dur := e.Dur
		if v, ok := traceevent.PerfettoNs(e.Raw[e.DurSpan.Start:e.DurSpan.End]); ok && e.DurSpan.Valid() {
			dur = v
		}
		tr := norm(e)
		c.tracks[tr] = append(c.tracks[tr], slice{ts, ts + dur, n, e.Name})
	case "B", "E":
		tr := norm(e)
		c.begins[tr] = append(c.begins[tr], beginEnd{ts, e.Ph == "B", n, e.Name})
	case "s", "t", "f":
		c.flow(e, n)
	case "i", "I", "R", "C", "M", "b", "e", "n", "T", "P":
	default:
		c.r.add(CodeUnknownPhase, "%s: Perfetto ignores phase %q", where(e, n), e.Ph)
	}
}

// required checks the fields Perfetto needs for the event's phase.
func (c *checker) required(e *traceevent.Event, n int) bool {
	var missing []string
	need := func(ok bool, field string) {
		if !ok {
			missing = append(missing, field)
		}
	}
	switch e.Ph {
	case "M":
		need(e.Name != "", "name")
		need(e.PidSpan.Valid(), "pid")
	case "X":
		need(e.HasTs, "ts")
		need(e.HasDur, "dur")
		need(e.PidSpan.Valid(), "pid")
		need(e.TidSpan.Valid(), "tid")
	case "B", "E":
		need(e.HasTs, "ts")
		need(e.PidSpan.Valid(), "pid")
		need(e.TidSpan.Valid(), "tid")
	case "s", "t", "f":
		need(e.HasTs, "ts")
		need(e.IDSpan.Valid(), "id")
		need(e.PidSpan.Valid(), "pid")
		need(e.TidSpan.Valid(), "tid")
	case "b", "e", "n":
		need(e.HasTs, "ts")
		need(e.PidSpan.Valid(), "pid")
		need(e.IDSpan.Valid() || strings.Contains(e.Raw, `"id2"`), "id")
	case "i", "I", "R", "C":
		need(e.HasTs, "ts")
	}
	if len(missing) > 0 {
		c.r.add(CodeMissingField, "%s: missing %s", where(e, n), strings.Join(missing, ", "))
		return false
	}
	return true
}

// flowKey is Perfetto's v1 flow identity: (id, cat, name), global to the file. A string id is
// read as hex.
func flowKey(e *traceevent.Event) (string, bool) {
	raw := e.IDRaw
	var id uint64
	var err error
	if strings.HasPrefix(raw, `"`) {
		s := strings.TrimPrefix(strings.ToLower(jsonscan.String(raw)), "0x")
		id, err = strconv.ParseUint(s, 16, 64)
	} else {
		id, err = jsonscan.Uint(raw)
	}
	if err != nil {
		return "", false
	}
	return strconv.FormatUint(id, 10) + "\x00" + e.Cat + "\x00" + e.Name, true
}

// perfettoTs is the event's ts as Perfetto's importer reads it: the µs text as a double,
// times 1000, rounded to the ns (which far from the base is not always the decimal's ns).
func perfettoTs(e *traceevent.Event) int64 {
	if e.TsSpan.Valid() {
		if v, ok := traceevent.PerfettoNs(e.Raw[e.TsSpan.Start:e.TsSpan.End]); ok {
			return v
		}
	}
	return e.Ts
}

func (c *checker) flow(e *traceevent.Event, n int) {
	key, ok := flowKey(e)
	if !ok {
		c.r.add(CodeFlowInvalidID, "%s: id %s is not a number (string ids are read as hex)", where(e, n), e.IDRaw)
		return
	}
	st := c.flows[key]
	if st == nil {
		st = &flowState{first: n, firstWhere: where(e, n)}
		c.flows[key] = st
	}
	switch e.Ph {
	case "s":
		c.r.Flows++
		st.starts++
		if st.starts > 1 {
			c.r.add(CodeFlowDuplicate, "%s: a second flow start with id %s cat %q name %q (Perfetto drops it)", where(e, n), e.IDRaw, e.Cat, e.Name)
			return
		}
		st.startTs = perfettoTs(e)
		if st.ends > 0 {
			st.first, st.firstWhere = n, where(e, n)
		}
	default:
		st.ends++
		if ts := perfettoTs(e); st.starts > 0 && ts < st.startTs {
			c.r.add(CodeFlowBackwards, "%s: ends %d ns before its start", where(e, n), st.startTs-ts)
		}
	}
}

func (c *checker) finishFlows() {
	all := make([]*flowState, 0, len(c.flows))
	for _, st := range c.flows {
		all = append(all, st)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].first < all[j].first })
	for _, st := range all {
		switch {
		case st.starts > 0 && st.ends == 0:
			c.r.add(CodeFlowNoEnd, "%s: flow start with no end (Perfetto draws nothing)", st.firstWhere)
		case st.starts == 0:
			c.r.add(CodeFlowEndNoStart, "%s: flow end with no start (Kineto writes these for calls that launch nothing)", st.firstWhere)
		}
	}
}

// finishBeginEnd pairs B/E events per track into slices.
func (c *checker) finishBeginEnd() {
	for _, tr := range sortedTracks(c.begins) {
		evs := c.begins[tr]
		sort.SliceStable(evs, func(i, j int) bool {
			if evs[i].ts != evs[j].ts {
				return evs[i].ts < evs[j].ts
			}
			return !evs[i].begin && evs[j].begin // E sorts before B at equal ts
		})
		var open []beginEnd
		for _, ev := range evs {
			if ev.begin {
				open = append(open, ev)
				continue
			}
			if len(open) == 0 {
				c.r.add(CodeUnmatchedEnd, "event %d: E with no open B on pid %s tid %s", ev.idx, tr.pid, tr.tid)
				continue
			}
			b := open[len(open)-1]
			open = open[:len(open)-1]
			if ev.idx < b.idx && ev.ts < b.ts {
				c.r.add(CodeEndBeforeBegin, "event %d: E before its B", ev.idx)
			}
			c.tracks[tr] = append(c.tracks[tr], slice{b.ts, ev.ts, b.idx, b.name})
		}
	}
}

// nesting finds slices that do not nest on their track, in the importer's order: by ts, the
// longest first at equal ts, then file order.
func (c *checker) nesting() {
	c.r.Tracks = len(c.tracks)
	keys := make([]track, 0, len(c.tracks))
	for tr := range c.tracks {
		keys = append(keys, tr)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].pid != keys[j].pid {
			return keys[i].pid < keys[j].pid
		}
		return keys[i].tid < keys[j].tid
	})
	for _, tr := range keys {
		sl := c.tracks[tr]
		sort.Slice(sl, func(i, j int) bool {
			a, b := sl[i], sl[j]
			if a.start != b.start {
				return a.start < b.start
			}
			if a.end-a.start != b.end-b.start {
				return a.end-a.start > b.end-b.start
			}
			return a.idx < b.idx
		})
		var stack []slice
		for _, s := range sl {
			for len(stack) > 0 && stack[len(stack)-1].end <= s.start {
				stack = stack[:len(stack)-1]
			}
			if len(stack) > 0 && stack[len(stack)-1].end < s.end {
				top := stack[len(stack)-1]
				c.r.add(CodeOverlap, "event %d %q crosses event %d %q by %d ns on pid %s tid %s (Perfetto moves it to an overflow track)",
					s.idx, s.name, top.idx, top.name, top.end-s.start, tr.pid, tr.tid)
				continue
			}
			stack = append(stack, s)
		}
	}
}

func sortedTracks(m map[track][]beginEnd) []track {
	keys := make([]track, 0, len(m))
	for tr := range m {
		keys = append(keys, tr)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].pid != keys[j].pid {
			return keys[i].pid < keys[j].pid
		}
		return keys[i].tid < keys[j].tid
	})
	return keys
}

// processScoped: an instant of process or global scope ("s": "p" or "g") is drawn on the process
// (or global) track, so its tid does not matter (the plugin's ncclprof_step labels).
func processScoped(e *traceevent.Event) bool {
	if e.Ph != "i" && e.Ph != "I" {
		return false
	}
	s := gjson.Get(e.Raw, "s").Str
	return s == "p" || s == "g"
}
