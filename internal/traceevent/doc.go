package traceevent

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/ncclprof/ncclprof/internal/jsonscan"
)

// Member is a top-level key of the trace object other than traceEvents, kept as written.
type Member struct {
	Key string // raw key text
	Raw string // raw value text
}

// Doc is a trace document held in memory.
type Doc struct {
	Path string
	Data []byte
	doc  string // zero-copy view of Data

	// Members are the top-level keys other than traceEvents, in file order.
	Members []Member
	// BareArray: the document is an array of events rather than an object.
	BareArray bool
	// Events counts the elements of traceEvents that were read.
	Events int
	// Truncated: the file ends inside traceEvents (a writer killed mid-write); the events up
	// to the last complete one were read. TruncatedAt is the offset of the first byte not read.
	Truncated   bool
	TruncatedAt int64
	// InvalidUTF8 counts the bytes that are not valid UTF-8 (JSON text must be), the first at
	// FirstInvalidUTF8; with Options.RepairUTF8 they were replaced with '?'.
	InvalidUTF8      int
	FirstInvalidUTF8 int64

	eventsStart, eventsEnd int
	// marks are the starts of every markEvery-th event, from the first (see WalkParallel).
	marks []int
	// lines[k] (with Options.LineRuns): every event of the run that starts at marks[k] is on
	// a line of its own with its args last (see parseLine).
	lines []bool
}

// Member returns the raw value of a top-level key ("" when absent).
func (d *Doc) Member(key string) string {
	for _, m := range d.Members {
		if m.Key == key {
			return m.Raw
		}
	}
	return ""
}

// Text is the document as a string (no copy).
func (d *Doc) Text() string { return d.doc }

// EventsStart is the offset of the traceEvents array's '['.
func (d *Doc) EventsStart() int { return d.eventsStart }

// EventsEnd is the offset just past the last event read (before the ']' of a complete file).
func (d *Doc) EventsEnd() int { return d.eventsEnd }

// Options tune reading.
type Options struct {
	// Truncated accepts a file that ends inside traceEvents, the way Perfetto reads an
	// unterminated trace: events up to the last complete one are kept.
	Truncated bool
	// Progress, if set, is called now and then with the bytes walked so far.
	Progress func(done, total int64)
	// Release, if set, is called now and then with an offset the walk will not read below
	// again (tracefile.Pass.Release: a one-pass reader gives those pages back).
	Release func(upTo int64)
	// Hint is the advice added to a syntax error ("check that it is a trace written by …").
	Hint string
	// RepairUTF8 replaces each byte that is not valid UTF-8 with '?' in data itself (the
	// caller owns it), so that what is copied from the document is valid JSON text for every
	// reader; Doc.InvalidUTF8 counts them either way.
	RepairUTF8 bool
	// LineRuns notes which runs of events (see WalkParallel) have each event on a line of its
	// own with its args last, as the ncclprof plugin writes them: WalkRange then reads them
	// again without walking their args (a third of that second pass over a plugin trace).
	LineRuns bool
}

// Error is a problem with a trace file, at a byte offset.
type Error struct {
	Path   string
	Offset int64
	Msg    string
	Hint   string
}

func (e *Error) Error() string {
	s := fmt.Sprintf("%s: byte %d: %s", e.Path, e.Offset, e.Msg)
	if e.Hint != "" {
		s += " (" + e.Hint + ")"
	}
	return s
}

// Errorf makes an Error for the document.
func (d *Doc) Errorf(off int, hint, format string, a ...any) error {
	return &Error{Path: d.Path, Offset: int64(off), Msg: fmt.Sprintf(format, a...), Hint: hint}
}

// Read validates data as a trace document and calls visit for every event in file order. The
// Event is reused between calls: copy what must outlive one (its strings point into data and
// stay valid as long as data does).
func Read(path string, data []byte, opt Options, visit func(*Event) error) (*Doc, error) {
	return ReadWith(path, data, opt, Reader[Event]{Parse: Parse, Event: func(e *Event) *Event { return e }, Visit: visit})
}

// Reader is how ReadWith reads each event into a T of the reader's, which holds the Event.
type Reader[T any] struct {
	// Parse reads the event at doc[start] into t: its Event as Parse does, and what else the
	// reader takes from it. It runs on the goroutines that parse a large document's chunks,
	// so that work is shared between the cores: it must touch nothing but its arguments. It
	// sets every field of t (t is not zeroed before).
	Parse func(t *T, doc string, start int) (end int, err error)
	// Event returns the Event inside t.
	Event func(t *T) *Event
	// Visit, if set, sees each event in file order, where it was parsed (no copy): t is
	// reused once Visit returns.
	Visit func(t *T) error
}

// ReadWith is Read for a reader that takes more from each event than its Event.
func ReadWith[T any](path string, data []byte, opt Options, r Reader[T]) (*Doc, error) {
	d := &Doc{Path: path, Data: data}
	// Valid text is checked at memory speed (tens of GB/s); only a file that fails is walked
	// byte by byte.
	if !validUTF8(data, opt.Release) {
		d.InvalidUTF8, d.FirstInvalidUTF8 = invalidUTF8(data, opt.RepairUTF8)
	}
	d.doc = unsafe.String(unsafe.SliceData(data), len(data))
	events := func(i int) (int, error) {
		return walkEvents(d, i, &walker[T]{d: d, opt: opt, r: r})
	}
	if err := d.walkTop(opt, events); err != nil {
		return nil, err
	}
	return d, nil
}

// utf8Piece is how much validUTF8 checks before giving it back (a variable for the tests).
var utf8Piece = 8 << 20

// validUTF8 is utf8.Valid(data); with release, checked a piece at a time, each given back once
// checked, so that a one-pass reader never holds the whole file at once. A piece ends before an
// ASCII byte, where no UTF-8 sequence can be cut.
func validUTF8(data []byte, release func(upTo int64)) bool {
	if release == nil {
		return utf8.Valid(data)
	}
	for at := 0; at < len(data); {
		end := min(at+utf8Piece, len(data))
		for end < len(data) && data[end] >= utf8.RuneSelf {
			end++
		}
		if !utf8.Valid(data[at:end]) {
			return false
		}
		release(int64(end))
		at = end
	}
	release(0) // the walk starts again from the top
	return true
}

// invalidUTF8 counts (and with repair replaces with '?', keeping every offset) the bytes of b
// that are not part of a valid UTF-8 sequence.
func invalidUTF8(b []byte, repair bool) (n int, first int64) {
	first = -1
	for i := 0; i < len(b); {
		if b[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			if first < 0 {
				first = int64(i)
			}
			n++
			if repair {
				b[i] = '?'
			}
		}
		i += size
	}
	return n, first
}

// walkTop walks the top-level value; events walks the traceEvents array whose '[' is at its
// argument.
func (d *Doc) walkTop(opt Options, events func(i int) (int, error)) error {
	s := d.doc
	i := jsonscan.SkipWS(s, 0)
	if i >= len(s) {
		return d.Errorf(i, "", "the file is empty")
	}
	switch s[i] {
	case '[':
		d.BareArray = true
		end, err := events(i)
		if err != nil || d.Truncated {
			return err
		}
		return d.expectEnd(end)
	case '{':
	default:
		return d.Errorf(i, "a trace starts with '{' or '['; is this the right file?", "not a JSON trace: starts with %s", describeByte(s[i]))
	}
	seen := false
	end, err := jsonscan.Members(s, i, func(key string, v int) (int, error) {
		if key == "traceEvents" {
			if seen {
				return v, d.Errorf(v, "", "traceEvents appears twice")
			}
			seen = true
			end, err := events(v)
			if err == nil && d.Truncated {
				err = errTruncated
			}
			return end, err
		}
		ve, err := jsonscan.Skip(s, v)
		if err != nil {
			return ve, err
		}
		d.Members = append(d.Members, Member{Key: key, Raw: s[v:ve]})
		return ve, nil
	})
	if errors.Is(err, errTruncated) {
		return nil
	}
	if err != nil {
		return d.wrapScan(err, opt.Hint)
	}
	if !seen {
		return d.Errorf(i, "a trace has a traceEvents array; is this the right file?", "no traceEvents in the trace object")
	}
	return d.expectEnd(end)
}

// errTruncated stops the top-level walk after a truncated traceEvents was accepted.
var errTruncated = errors.New("truncated")

func describeByte(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return fmt.Sprintf("'%c'", c)
	}
	return fmt.Sprintf("byte 0x%02x", c)
}

func (d *Doc) expectEnd(end int) error {
	if j := jsonscan.SkipWS(d.doc, end); j < len(d.doc) {
		return d.Errorf(j, "", "unexpected data after the end of the trace")
	}
	return nil
}

// walkEvents validates and visits the traceEvents array at s[i]. Large arrays are parsed by
// several goroutines, chunk by chunk (see parallel.go); visit still sees every event in file
// order, from this goroutine.
func walkEvents[T any](d *Doc, i int, w *walker[T]) (int, error) {
	s := d.doc
	arr, err := jsonscan.NewArray(s, i)
	if err != nil {
		return i, err
	}
	d.eventsStart = jsonscan.SkipWS(s, i)
	d.eventsEnd = d.eventsStart + 1
	w.arr = arr
	if end, done, err := w.parallel(); done {
		return end, err
	}
	return w.sequential(-1)
}

// walker carries one walk of the events array.
type walker[T any] struct {
	d   *Doc
	opt Options
	r   Reader[T]
	arr *jsonscan.Array
	n   int
	cur T
}

// sequential parses and visits events from the array's position until its end, or (limit ≥ 0)
// until the next event would start at or after limit; it returns the array's end, or the
// position reached.
func (w *walker[T]) sequential(limit int) (int, error) {
	s := w.d.doc
	for {
		start, ok, err := w.arr.Begin()
		if !ok && err == nil {
			break
		}
		if limit >= 0 && err == nil && start >= limit {
			w.arr.Rewind(start)
			return start, nil
		}
		var end int
		if err == nil {
			end, err = w.r.Parse(&w.cur, s, start)
		}
		if err != nil {
			return w.fail(err, end)
		}
		w.arr.Finish(end)
		if err := w.accept(&w.cur, start, end); err != nil {
			return start, err
		}
	}
	return w.arr.End, nil
}

// fail ends a walk on a parse error: a file cut short is accepted with Options.Truncated.
func (w *walker[T]) fail(err error, end int) (int, error) {
	if w.opt.Truncated && atEOF(err, len(w.d.doc)) {
		w.d.Truncated, w.d.TruncatedAt = true, int64(w.d.eventsEnd)
		return len(w.d.doc), nil
	}
	return end, w.d.wrapEvent(err, w.n, w.opt.Hint)
}

// markEvery: every markEvery-th event's start is kept, for a later parallel pass.
const markEvery = 2048

// accept checks and visits one parsed event.
func (w *walker[T]) accept(t *T, start, end int) error {
	ev := w.r.Event(t)
	w.d.eventsEnd = end
	if ev.Ph == "" && ev.Raw != "{}" {
		return w.d.Errorf(start, "every trace event needs a \"ph\"", "event %d has no ph", w.n)
	}
	if w.n%markEvery == 0 {
		w.d.marks = append(w.d.marks, start)
		if w.opt.LineRuns {
			w.d.lines = append(w.d.lines, true)
		}
	}
	if w.opt.LineRuns && w.d.lines[len(w.d.lines)-1] && !lineEvent(ev, w.d.doc, end) {
		w.d.lines[len(w.d.lines)-1] = false
	}
	w.n++
	w.d.Events++
	if w.r.Visit != nil {
		if err := w.r.Visit(t); err != nil {
			return err
		}
	}
	if w.opt.Progress != nil && w.n&0xffff == 0 {
		w.opt.Progress(int64(end), int64(len(w.d.doc)))
	}
	if w.opt.Release != nil && w.n&0x3fff == 0 {
		w.opt.Release(int64(start))
	}
	return nil
}

// atEOF reports whether a scan error is the document ending early.
func atEOF(err error, n int) bool {
	var se *jsonscan.Error
	return errors.As(err, &se) && se.Offset >= int64(n) ||
		errors.As(err, &se) && strings.HasPrefix(se.Msg, "unterminated string")
}

// wrapEvent turns a scan error inside event n into a file error with advice.
func (d *Doc) wrapEvent(err error, n int, hint string) error {
	var se *jsonscan.Error
	if errors.As(err, &se) && se.Field {
		return d.Errorf(int(se.Offset), "", "event %d: %s", n, se.Msg)
	}
	return d.wrapScan(err, hint)
}

// wrapScan turns a jsonscan error into a file error with advice.
func (d *Doc) wrapScan(err error, hint string) error {
	var se *jsonscan.Error
	if !errors.As(err, &se) {
		return err
	}
	if hint == "" {
		hint = "the file is not valid JSON"
	}
	if se.Offset >= int64(len(d.doc)) || strings.HasPrefix(se.Msg, "unterminated string") {
		hint = "the file ends early: it was cut while being written or copied; copy it again from where it was written"
	}
	return &Error{Path: d.Path, Offset: se.Offset, Msg: se.Msg, Hint: hint}
}

// Walk visits the events again, in file order. The Event is reused between calls; visit
// returns false to stop.
func (d *Doc) Walk(visit func(*Event) bool) {
	if d.eventsEnd <= d.eventsStart+1 {
		return
	}
	var ev Event
	arr, err := jsonscan.NewArray(d.doc, d.eventsStart)
	if err != nil {
		return
	}
	for {
		start, ok, err := arr.Begin()
		if err != nil || !ok || start >= d.eventsEnd {
			return
		}
		end, err := ParseValid(&ev, d.doc, start)
		if err != nil || !visit(&ev) {
			return
		}
		arr.Finish(end)
	}
}
