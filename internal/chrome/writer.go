// Package chrome writes Chrome trace event files (the JSON Perfetto and chrome://tracing open)
// as a stream: events are appended as they are produced and memory stays bounded.
//
// The file is a complete JSON document after every Flush: each flush overwrites the previous
// terminator (`]}`) with the new events and a new terminator. A process killed between flushes
// leaves a valid file with everything flushed so far; one killed during a write leaves a file cut
// inside the last event, which Perfetto still opens (it accepts an unterminated traceEvents). The
// header and the closing metadata are the caller's JSON (docs/trace-format.md).
package chrome

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"
)

const terminator = "\n]}\n"

// flushAt bounds the buffer: past it, Spill flushes what is pending.
const flushAt = 1 << 20

// Writer streams one trace file. It is not safe for concurrent use. After an error (disk
// full, directory gone) it stops writing and keeps the error; everything flushed before stays
// valid.
type Writer struct {
	f      *os.File
	path   string
	base   int64 // baseTimeNanoseconds
	buf    []byte
	off    int64 // where the terminator starts
	first  bool  // no event written yet: the next one has no leading comma
	events uint64
	bytes  int64
	err    error
}

// New starts a trace in f, a new empty file (see internal/outfile), and owns it from then on.
// header is the JSON members written before traceEvents (without braces), e.g.
// `"schemaVersion":1,...`.
func New(f *os.File, baseNs int64, header []byte) (*Writer, error) {
	path := f.Name()
	w := &Writer{f: f, path: path, base: baseNs, first: true}
	head := append([]byte("{"), header...)
	head = append(head, `,"traceEvents":[`...)
	w.buf = head
	w.off = 0
	if err := w.flush(false); err != nil {
		_ = f.Close()
		return nil, err
	}
	return w, nil
}

// Path of the file.
func (w *Writer) Path() string { return w.path }

// Err is the first write error, if any.
func (w *Writer) Err() error { return w.err }

// Events and Bytes written so far (flushed).
func (w *Writer) Events() uint64 { return w.events }

// Bytes written so far, terminator included.
func (w *Writer) Bytes() int64 { return w.bytes }

// Pending is the size of what is buffered for the next flush.
func (w *Writer) Pending() int { return len(w.buf) }

// BaseNs is the file's baseTimeNanoseconds.
func (w *Writer) BaseNs() int64 { return w.base }

// Event starts a new event in the buffer and returns it for the caller to fill; the caller
// must call End on it.
func (w *Writer) Event(ph byte, name, cat string, pid, tid int64) *Event {
	if !w.first {
		w.buf = append(w.buf, ',')
	}
	w.first = false
	w.buf = append(w.buf, "\n{\"ph\":\""...)
	w.buf = append(w.buf, ph)
	w.buf = append(w.buf, '"')
	e := &Event{w: w}
	if name != "" {
		e.Str("name", name)
	}
	if cat != "" {
		e.Str("cat", cat)
	}
	e.Int("pid", pid)
	e.Int("tid", tid)
	w.events++
	return e
}

// Spill flushes once the buffer holds flushAt bytes. Callers call it between units that must
// reach the file together (a slice with its states and the two ends of its flow), so a killed
// job never leaves half of a flow behind.
func (w *Writer) Spill() {
	if len(w.buf) >= flushAt {
		_ = w.flush(false) // an error sticks in w.err; the caller sees it at Flush
	}
}

// Flush writes what is buffered, leaving the file a complete JSON document.
func (w *Writer) Flush() error { return w.flush(false) }

// Close writes the buffered events and the closing members (`"name":value,...` without
// braces; may be empty) and closes the file.
func (w *Writer) Close(closing []byte) error {
	if w.f == nil {
		return w.err
	}
	w.buf = append(w.buf, "\n]"...)
	if len(closing) > 0 {
		w.buf = append(w.buf, ',')
		w.buf = append(w.buf, closing...)
	}
	w.buf = append(w.buf, "}\n"...)
	err := w.flush(true)
	if cerr := w.f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	w.f = nil
	return err
}

func (w *Writer) flush(final bool) error {
	if w.err != nil {
		w.buf = w.buf[:0]
		return w.err
	}
	if w.f == nil {
		return errors.New("chrome: writer closed")
	}
	if len(w.buf) == 0 && !final {
		return nil
	}
	out := w.buf
	if !final {
		out = append(out, terminator...)
	}
	n, err := w.f.WriteAt(out, w.off)
	if err == nil && n != len(out) {
		err = fmt.Errorf("short write (%d of %d bytes)", n, len(out))
	}
	if err != nil {
		// Part of the new data may be on disk: put the terminator back where it was and cut
		// the file after it (truncating frees space, so it works on a full disk too), so the
		// file stays valid up to the previous flush.
		_, _ = w.f.WriteAt([]byte(terminator), w.off)
		_ = w.f.Truncate(w.off + int64(len(terminator)))
		w.err = err
		w.buf = w.buf[:0]
		return err
	}
	w.off += int64(len(w.buf))
	w.bytes = w.off + int64(len(out)-len(w.buf))
	w.buf = w.buf[:0]
	return nil
}

// IsNoSpace reports whether err is a full disk (or quota).
func IsNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// Event is one trace event being written. Fill it with the typed setters, then End.
type Event struct {
	w         *Writer
	args      bool // inside "args"
	argsEmpty bool // no member in "args" yet
}

func (e *Event) key(k string) {
	b := e.w.buf
	if e.argsEmpty {
		e.argsEmpty = false
		b = append(b, '"')
	} else {
		b = append(b, ',', '"')
	}
	b = append(b, k...)
	e.w.buf = append(b, '"', ':')
}

// Str adds a string member (JSON-escaped).
func (e *Event) Str(k, v string) *Event {
	e.key(k)
	e.w.buf = AppendString(e.w.buf, v)
	return e
}

// Int adds an integer member.
func (e *Event) Int(k string, v int64) *Event {
	e.key(k)
	e.w.buf = strconv.AppendInt(e.w.buf, v, 10)
	return e
}

// Uint adds an unsigned integer member.
func (e *Event) Uint(k string, v uint64) *Event {
	e.key(k)
	e.w.buf = strconv.AppendUint(e.w.buf, v, 10)
	return e
}

// Float adds a float member with prec decimals.
func (e *Event) Float(k string, v float64, prec int) *Event {
	e.key(k)
	e.w.buf = strconv.AppendFloat(e.w.buf, v, 'f', prec, 64)
	return e
}

// Bool adds a boolean member.
func (e *Event) Bool(k string, v bool) *Event {
	e.key(k)
	e.w.buf = strconv.AppendBool(e.w.buf, v)
	return e
}

// Hex adds a handle or hash as "0x%016x" (a string: JSON numbers lose bits above 2^53).
func (e *Event) Hex(k string, v uint64) *Event {
	e.key(k)
	b := append(e.w.buf, '"', '0', 'x')
	const digits = "0123456789abcdef"
	for s := 60; s >= 0; s -= 4 {
		b = append(b, digits[(v>>uint(s))&0xf])
	}
	e.w.buf = append(b, '"')
	return e
}

// Raw adds a member whose value is already JSON.
func (e *Event) Raw(k string, json []byte) *Event {
	e.key(k)
	e.w.buf = append(e.w.buf, json...)
	return e
}

// Ts adds a timestamp member: µs relative to the file's base with 3 decimals (ns resolution),
// Kineto's encoding since PyTorch 2.4.
func (e *Event) Ts(k string, unixNs int64) *Event {
	e.key(k)
	e.w.buf = appendMicros(e.w.buf, unixNs-e.w.base)
	return e
}

// Dur adds a duration member in µs with 3 decimals.
func (e *Event) Dur(k string, ns int64) *Event {
	e.key(k)
	e.w.buf = appendMicros(e.w.buf, ns)
	return e
}

// Args opens the "args" object; the setters then add to it until End.
func (e *Event) Args() *Event {
	e.w.buf = append(e.w.buf, `,"args":{`...)
	e.args, e.argsEmpty = true, true
	return e
}

// End closes the event.
func (e *Event) End() {
	if e.args {
		e.w.buf = append(e.w.buf, '}')
	}
	e.w.buf = append(e.w.buf, '}')
}

func appendMicros(b []byte, ns int64) []byte {
	if ns < 0 {
		b = append(b, '-')
		ns = -ns
	}
	b = strconv.AppendInt(b, ns/1000, 10)
	frac := ns % 1000
	return append(b, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
}

// AppendString appends s as a JSON string (invalid UTF-8 becomes U+FFFD, so the file stays
// valid JSON whatever a communicator name or step label holds).
func AppendString(b []byte, s string) []byte {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, `\u00`...)
			b = append(b, "0123456789abcdef"[c>>4], "0123456789abcdef"[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
