// Package traceevent reads Chrome trace JSON documents (the format Kineto, Perfetto and the
// ncclprof plugin share) held in memory: the top-level object or bare array, the traceEvents
// array walked event by event, each event validated and its standard fields read in one pass
// without copying. The Kineto and plugin readers build on it.
package traceevent

import (
	"math"
	"strconv"
	"strings"
	"unsafe"

	"github.com/ncclprof/ncclprof/internal/jsonscan"
	"github.com/tidwall/gjson"
)

// Span is the position of a value inside its event's text: Raw[Start:End].
type Span struct{ Start, End int32 }

// Valid reports whether the span was found.
func (s Span) Valid() bool { return s.End > s.Start }

// ID is a pid or tid: a number, or a string (Kineto's "Spans", "Traces", "" and 2021-era
// string thread ids).
type ID struct {
	Num   int64
	Str   string
	IsStr bool
}

// String writes the id as it would appear in JSON.
func (id ID) String() string {
	if id.IsStr {
		return strconv.Quote(id.Str)
	}
	return strconv.FormatInt(id.Num, 10)
}

func idOf(raw string) ID {
	if n, ok := smallUint(raw); ok {
		return ID{Num: n}
	}
	if raw[0] == '"' {
		str := jsonscan.String(raw)
		// Numeric strings ("1234") name the same thread as the number.
		if n, err := strconv.ParseInt(str, 10, 64); err == nil {
			return ID{Num: n}
		}
		return ID{Str: str, IsStr: true}
	}
	n, err := jsonscan.Int(raw)
	if err != nil {
		return ID{Str: raw, IsStr: true}
	}
	return ID{Num: n}
}

// smallUint reads the ids almost every event has, plain decimal numbers below 10^18, without
// strconv's generality.
func smallUint(raw string) (int64, bool) {
	if len(raw) == 0 || len(raw) > 18 || (raw[0] == '0' && len(raw) > 1) {
		return 0, false
	}
	var n int64
	for i := 0; i < len(raw); i++ {
		d := raw[i] - '0'
		if d > 9 {
			return 0, false
		}
		n = n*10 + int64(d)
	}
	return n, true
}

// Event is one element of traceEvents, read without copying: strings point into the file.
type Event struct {
	// Off is the offset of the event in the document, Raw its text.
	Off int64
	Raw string

	Ph   string
	Cat  string
	Name string
	Pid  ID
	Tid  ID

	// Ts is nanoseconds on the file's own scale: relative to Trace.Base, or absolute Unix ns
	// in traces without a base. Trace.Unix converts.
	Ts, Dur       int64
	HasTs, HasDur bool

	// Positions inside Raw of the values a writer may replace (or a checker read as text).
	TsSpan, DurSpan, PidSpan, TidSpan, IDSpan, ArgsSpan Span
	// IDRaw is the flow id as written; Bp the flow binding point.
	IDRaw string
	Bp    string
	// argsTwice: the event has more than one args object (the last is ArgsSpan); a second
	// pass must then not take the first for the last (see Options.LineRuns).
	argsTwice bool
}

// Args returns the event's args object (zero-copy).
func (e *Event) Args() gjson.Result {
	if !e.ArgsSpan.Valid() {
		return gjson.Result{}
	}
	return gjson.Result{Type: gjson.JSON, Raw: e.Raw[e.ArgsSpan.Start:e.ArgsSpan.End], Index: int(e.ArgsSpan.Start)}
}

// Arg returns one argument by name (keys with spaces, like "External id", are fine).
func (e *Event) Arg(name string) gjson.Result {
	if !e.ArgsSpan.Valid() {
		return gjson.Result{}
	}
	return gjson.Get(e.Raw[e.ArgsSpan.Start:e.ArgsSpan.End], escapePath(name))
}

// escapePath escapes the characters gjson gives meaning to in a path.
func escapePath(name string) string {
	if !strings.ContainsAny(name, ".*?|#@\\!=<>%") {
		return name
	}
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		if strings.IndexByte(".*?|#@\\!=<>%", name[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(name[i])
	}
	return b.String()
}

// Parse validates the event that starts at doc[start] and fills e from its top-level
// members in the same pass, returning the event's end. A problem with a field's value is
// returned as a *jsonscan.Error too (the caller adds the file).
func Parse(e *Event, doc string, start int) (int, error) {
	if start < len(doc) && doc[start] == '{' {
		if end, ok := parseFast(e, doc, start, false, -1); ok {
			return end, nil
		}
	}
	return parseSlow(e, doc, start)
}

// ParseValid is Parse for an event of a document Read has validated (a second pass over it):
// it reads the same fields without validating the values again.
func ParseValid(e *Event, doc string, start int) (int, error) {
	if start < len(doc) && doc[start] == '{' {
		if end, ok := parseFast(e, doc, start, true, -1); ok {
			return end, nil
		}
	}
	return Parse(e, doc, start)
}

// parseSlow is Parse member by member through jsonscan.Members: every event parseFast declines.
func parseSlow(e *Event, doc string, start int) (int, error) {
	*e = Event{Off: int64(start)}
	if start >= len(doc) || doc[start] != '{' {
		end, err := jsonscan.Skip(doc, start)
		if err == nil {
			err = &jsonscan.Error{Offset: int64(start), Msg: "an event must be a JSON object", Field: true}
		}
		return end, err
	}
	var problem string
	var problemAt int
	end, err := jsonscan.Members(doc, start, func(key string, v int) (int, error) {
		ve, err := jsonscan.SkipScalar(doc, v)
		if err != nil {
			return ve, err
		}
		if p := e.member(key, doc, v, ve, start, false); p != "" && problem == "" {
			problem, problemAt = p, v
		}
		return ve, nil
	})
	if err != nil {
		return end, err
	}
	e.Raw = doc[start:end]
	if problem != "" {
		return end, &jsonscan.Error{Offset: int64(problemAt), Msg: problem, Field: true}
	}
	return end, nil
}

// FlowID reads a v1 flow event's id as Perfetto does: a number, or a string of hex digits
// (with or without 0x). ok is false for anything else (which Perfetto keys by its text).
func FlowID(raw string) (id uint64, ok bool) {
	var err error
	if strings.HasPrefix(raw, `"`) {
		id, err = strconv.ParseUint(strings.TrimPrefix(strings.ToLower(jsonscan.String(raw)), "0x"), 16, 64)
	} else {
		id, err = jsonscan.Uint(raw)
	}
	if err != nil {
		return 0, false
	}
	return id, true
}

// timeOf reads a µs value (number or numeric string, as Perfetto accepts) as exact ns.
func timeOf(raw string) (int64, bool) {
	if raw[0] == '"' {
		raw = jsonscan.String(raw)
	}
	ns, err := jsonscan.Scaled(raw, 3)
	return ns, err == nil
}

func Clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// PerfettoNs is the time Perfetto's JSON importer gives a ts or dur value written as text (its
// json_parser.h and json_trace_tokenizer.cc CoerceToTs): an integer is µs × 1000 exactly; a
// number with a fraction or exponent becomes the double int_part + fraction_digits/10^n (summed
// in doubles, not correctly rounded), kept exact when it is whole and otherwise rounded as
// llround(µs × 1000). A double holds a ns only up to about 2.25e12 µs (26 days from the base):
// beyond, two values that meet exactly in decimal may overlap by a ns once read.
func PerfettoNs(raw string) (int64, bool) {
	if len(raw) > 0 && raw[0] == '"' {
		raw = jsonscan.String(raw)
	}
	if !strings.ContainsAny(raw, ".eE") {
		if n, err := strconv.ParseInt(raw, 10, 64); err == nil {
			return n * 1000, true
		}
	}
	f, ok := perfettoDouble(raw)
	if !ok {
		return 0, false
	}
	if f == math.Trunc(f) {
		return int64(f) * 1000, true
	}
	return int64(math.Round(f * 1000)), true
}

// perfettoDouble parses a JSON number the way Perfetto's parser does.
func perfettoDouble(s string) (float64, bool) {
	i, neg := 0, false
	if i < len(s) && s[i] == '-' {
		neg, i = true, i+1
	}
	var intPart int64
	digits := 0
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		intPart = intPart*10 + int64(s[i]-'0')
		digits++
	}
	var fraction float64
	if i < len(s) && s[i] == '.' {
		i++
		var fract int64
		var div uint64 = 1
		for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
			fract = fract*10 + int64(s[i]-'0')
			div *= 10
		}
		fraction = float64(fract) / float64(div)
	}
	var exp int64
	expNeg := false
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			expNeg, i = s[i] == '-', i+1
		}
		for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
			exp = exp*10 + int64(s[i]-'0')
		}
	}
	if digits == 0 || i != len(s) {
		return 0, false
	}
	out := float64(intPart) + fraction
	if expNeg {
		out /= math.Pow(10, float64(exp))
	} else if exp > 0 {
		out *= math.Pow(10, float64(exp))
	}
	if neg {
		out = -out
	}
	return out, !math.IsInf(out, 0) && !math.IsNaN(out)
}

// PerfettoOf is PerfettoNs of the µs text AppendMicros writes for ns.
func PerfettoOf(ns int64) int64 {
	var buf [32]byte
	b := jsonscan.AppendMicros(buf[:0], ns)
	v, _ := PerfettoNs(unsafe.String(unsafe.SliceData(b), len(b)))
	return v
}

// PerfettoDur is the dur to write for a slice written at ts (ns since the base, written with
// AppendMicros) lasting dur ns so that, as Perfetto rounds them, it ends exactly where a
// slice starting at ts + dur begins: children then nest in their parents, and slices that meet
// do not overlap, to the ns. It differs from dur by at most a ns or two, and only far from
// the base.
func PerfettoDur(ts, dur int64) int64 {
	if ts+dur < 2_000_000_000_000_000 && ts > -2_000_000_000_000_000 {
		return dur // every ns is exact in a double this close to the base
	}
	return max(PerfettoOf(ts+dur)-PerfettoOf(ts), 0)
}
