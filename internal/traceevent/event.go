// Package traceevent reads Chrome trace JSON documents (the format Kineto, Perfetto and the
// ncclprof plugin share) held in memory: the top-level object or bare array, the traceEvents
// array walked event by event, each event validated and its standard fields read in one pass
// without copying. The Kineto and plugin readers build on it.
package traceevent

import (
	"strconv"
	"strings"

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

	// Positions inside Raw of the values a writer may replace.
	TsSpan, PidSpan, TidSpan, IDSpan, ArgsSpan Span
	// IDRaw is the flow id as written; Bp the flow binding point.
	IDRaw string
	Bp    string
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
		raw := doc[v:ve]
		sp := Span{int32(v - start), int32(ve - start)}
		switch key {
		case "ph":
			e.Ph = jsonscan.String(raw)
		case "cat":
			e.Cat = jsonscan.String(raw)
		case "name":
			e.Name = jsonscan.String(raw)
		case "pid":
			e.Pid, e.PidSpan = idOf(raw), sp
		case "tid":
			e.Tid, e.TidSpan = idOf(raw), sp
		case "ts":
			e.TsSpan = sp
			if e.Ts, e.HasTs = timeOf(raw); !e.HasTs && problem == "" {
				problem, problemAt = "ts is not a number: "+Clip(raw), v
			}
		case "dur":
			if e.Dur, e.HasDur = timeOf(raw); !e.HasDur && problem == "" {
				problem, problemAt = "dur is not a number: "+Clip(raw), v
			}
		case "id":
			e.IDRaw, e.IDSpan = raw, sp
		case "bp":
			e.Bp = jsonscan.String(raw)
		case "args":
			if raw[0] == '{' {
				e.ArgsSpan = sp
			}
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
