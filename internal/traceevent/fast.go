package traceevent

import (
	"math"
	"strings"

	"github.com/ncclprof/ncclprof/internal/jsonscan"
)

// parseFast is Parse for the events traces are made of: an object of plain keys whose values
// are validated scalars, or containers validated by jsonscan.Skip. It reads the members in
// one loop with no callback, which was most of a merge's parse time (a closure call, a
// whitespace skip and a string scan per key). On anything else — an escaped key, a ts that is
// not a number, a syntax error — it returns ok == false and Parse reads the event again the
// general way, which says what is wrong: the result is always the general reader's.
//
// With valid, the document was validated already (a second pass): values are only delimited,
// not validated again. argsEnd ≥ 0 (with valid) is where the event's args object is known to
// end (see parseLine): it is not delimited at all.
func parseFast(e *Event, s string, start int, valid bool, argsEnd int) (end int, ok bool) {
	*e = Event{Off: int64(start)}
	i := skipWS(s, start+1)
	if i < len(s) && s[i] == '}' {
		e.Raw = s[start : i+1]
		return i + 1, true
	}
	for {
		// A key: plain ASCII in every real trace.
		if i >= len(s) || s[i] != '"' {
			return 0, false
		}
		ks := i + 1
		j := ks
		for j < len(s) && s[j] != '"' && s[j] != '\\' && s[j] >= 0x20 {
			j++
		}
		if j >= len(s) || s[j] != '"' {
			return 0, false
		}
		key := s[ks:j]
		i = j + 1
		if i < len(s) && s[i] != ':' {
			i = skipWS(s, i)
		}
		if i >= len(s) || s[i] != ':' {
			return 0, false
		}
		i = skipWS(s, i+1)
		if i >= len(s) {
			return 0, false
		}
		if end, ok := e.number(key, s, i, start); ok {
			i = end // ts, dur, pid and tid are read as they are delimited: once, not twice
		} else if i, ok = e.value(key, s, i, start, valid, argsEnd); !ok {
			return 0, false
		}
		if i < len(s) && s[i] != ',' && s[i] != '}' {
			i = skipWS(s, i)
		}
		if i >= len(s) {
			return 0, false
		}
		switch s[i] {
		case ',':
			i = skipWS(s, i+1)
		case '}':
			e.Raw = s[start : i+1]
			return i + 1, true
		default:
			return 0, false
		}
	}
}

// member reads one top-level member whose value is s[v:ve] (validated; plain: a string without
// escapes) into e. It returns what is wrong where the format needs another value (a ts that is
// not a number), else "".
func (e *Event) member(key, s string, v, ve, start int, plain bool) (problem string) {
	raw := s[v:ve]
	sp := Span{int32(v - start), int32(ve - start)}
	str := func() string {
		if plain {
			return raw[1 : len(raw)-1]
		}
		return jsonscan.String(raw)
	}
	switch key {
	case "ph":
		e.Ph = str()
	case "cat":
		e.Cat = str()
	case "name":
		e.Name = str()
	case "pid":
		e.Pid, e.PidSpan = idOf(raw), sp
	case "tid":
		e.Tid, e.TidSpan = idOf(raw), sp
	case "ts":
		e.TsSpan = sp
		if e.Ts, e.HasTs = timeOf(raw); !e.HasTs {
			return "ts is not a number: " + Clip(raw)
		}
	case "dur":
		e.DurSpan = sp
		if e.Dur, e.HasDur = timeOf(raw); !e.HasDur {
			return "dur is not a number: " + Clip(raw)
		}
	case "id":
		e.IDRaw, e.IDSpan = raw, sp
	case "bp":
		e.Bp = str()
	case "args":
		if raw[0] == '{' {
			e.argsTwice = e.argsTwice || e.ArgsSpan.Valid()
			e.ArgsSpan = sp
		}
	}
	return ""
}

// value delimits (and unless valid, validates) the value of key at s[v] and reads it into e.
func (e *Event) value(key, s string, v, start int, valid bool, argsEnd int) (end int, ok bool) {
	i := v
	plain := false // a string value without escapes
	var err error
	switch c := s[i]; {
	case argsEnd >= 0 && c == '{' && key == "args":
		i = argsEnd
	case valid && c == '"':
		i, plain = jsonscan.StringEnd(s, i)
	case valid:
		i = jsonscan.SkipValid(s, i)
	case c == '"':
		i, plain, err = jsonscan.ScanString(s, i)
	case c == '-' || c-'0' <= 9:
		i, err = jsonscan.SkipNumber(s, i)
	default:
		i, err = jsonscan.Skip(s, i)
	}
	if err != nil || e.member(key, s, v, i, start, plain) != "" {
		return 0, false
	}
	return i, true
}

// number reads the value of ts, dur, pid or tid at s[v] where it is a plain non-negative number
// (JSON's grammar: no leading zero; a time with up to 3 decimals, ns exact), as it finds its
// end: what member would take from it after a separate validating scan. ok == false: another
// key, or a number for the general path (a sign, an exponent, more decimals, too many digits),
// which reads it the same way it always did. It repeats smallUint's and jsonscan.Scaled's rules
// for these forms because delimiting first and calling member (those two) lost the whole gain
// (merged, plugin and Kineto traces 9-13 % slower); FuzzParseFast keeps the two agreeing.
func (e *Event) number(key, s string, v, start int) (end int, ok bool) {
	isTime := key == "ts" || key == "dur"
	if s[v]-'0' > 9 || !isTime && key != "pid" && key != "tid" {
		return 0, false
	}
	var n uint64 // may wrap past 19 digits: such a number is refused below
	i := v
	for ; i < len(s) && s[i]-'0' <= 9; i++ {
		n = n*10 + uint64(s[i]-'0')
	}
	digits := i - v
	if digits > 1 && s[v] == '0' || i >= len(s) || s[i] == 'e' || s[i] == 'E' {
		return 0, false
	}
	if !isTime {
		if s[i] == '.' || digits > 18 { // as smallUint
			return 0, false
		}
	} else {
		frac := 0
		if s[i] == '.' {
			j := i + 1
			for ; j < len(s) && s[j]-'0' <= 9 && j-i <= 3; j++ {
				n = n*10 + uint64(s[j]-'0')
			}
			frac = j - i - 1
			if frac == 0 || j >= len(s) || s[j]-'0' <= 9 || s[j] == 'e' || s[j] == 'E' {
				return 0, false // "1.", more than 3 decimals, an exponent
			}
			i = j
		}
		if digits+3 > 19 {
			return 0, false
		}
		for ; frac < 3; frac++ {
			n *= 10
		}
		if n > math.MaxInt64 {
			return 0, false
		}
	}
	sp := Span{int32(v - start), int32(i - start)}
	switch key {
	case "ts":
		e.Ts, e.HasTs, e.TsSpan = int64(n), true, sp
	case "dur":
		e.Dur, e.HasDur, e.DurSpan = int64(n), true, sp
	case "pid":
		e.Pid, e.PidSpan = ID{Num: int64(n)}, sp
	default:
		e.Tid, e.TidSpan = ID{Num: int64(n)}, sp
	}
	return i, true
}

// skipWS is jsonscan.SkipWS, inlined here: most calls find no whitespace.
func skipWS(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t') {
		i++
	}
	return i
}

// parseLine is ParseValid for an event of a run Read found to be one event per line with args
// last (Options.LineRuns): the event ends at the '}' before the newline that follows it, so
// its args object, most of its text, is not walked again.
func parseLine(e *Event, s string, start int) (int, error) {
	nl := strings.IndexByte(s[start:], '\n')
	if nl < 0 || s[start] != '{' {
		return ParseValid(e, s, start)
	}
	end := start + nl
	for end > start && (s[end-1] == ' ' || s[end-1] == '\t' || s[end-1] == '\r' || s[end-1] == ',') {
		end--
	}
	argsEnd := end - 1 // the event's '}'
	for argsEnd > start && (s[argsEnd-1] == ' ' || s[argsEnd-1] == '\t' || s[argsEnd-1] == '\r') {
		argsEnd--
	}
	if got, ok := parseFast(e, s, start, true, argsEnd); ok && got == end {
		return end, nil
	}
	return ParseValid(e, s, start)
}

// lineEvent reports whether ev, which ends at s[end], can be read again by parseLine: no
// newline inside it, one between it and the next, and its one args object (if any) last.
func lineEvent(ev *Event, s string, end int) bool {
	if strings.IndexByte(ev.Raw, '\n') >= 0 {
		return false
	}
	j := end
	for j < len(s) && (s[j] == ' ' || s[j] == '\t' || s[j] == '\r' || s[j] == ',') {
		j++
	}
	if j >= len(s) || s[j] != '\n' {
		return false
	}
	if !ev.ArgsSpan.Valid() {
		return true
	}
	return !ev.argsTwice && strings.TrimLeft(ev.Raw[ev.ArgsSpan.End:], " \t\r") == "}"
}
