package merge

import (
	"strings"

	"github.com/ncclprof/ncclprof/internal/jsonscan"
	"github.com/ncclprof/ncclprof/internal/traceevent"
	"github.com/ncclprof/ncclprof/internal/tracefile"
)

// output is where the emitter's buffers go: tracefile.Writer.
type output interface {
	// Buffer returns an empty buffer to fill; Submit takes it back, filled, to be written.
	Buffer() []byte
	Submit([]byte) error
	// WriteStable writes text that stays unchanged until the output is closed (a span of an
	// input), without a copy.
	WriteStable(string) error
}

// emitter streams the output document. It fills buffers of the output's own and hands them
// on whole: events are formatted where the write system call takes them from, with no copy
// in between (a buffered writer copied every byte of the output once more).
type emitter struct {
	w      output
	base   int64
	events int
	cur    []byte // the buffer being filled
	sc     scratch
	err    error
}

func newEmitter(w output, base int64) *emitter {
	return &emitter{w: w, base: base, cur: w.Buffer()}
}

// scratch holds the buffers rewriting an event needs, kept across events by their goroutine.
type scratch struct {
	buf  []byte // replacement values of the event being rewritten
	reps []rep  // where they go
	args []byte // members added to its args
}

// spill hands the buffer on once it is full.
func (e *emitter) spill() {
	if len(e.cur) >= tracefile.AsyncBuf {
		e.submit()
	}
}

func (e *emitter) submit() {
	if e.err == nil {
		e.err = e.w.Submit(e.cur)
	}
	e.cur = e.w.Buffer()
}

// flush hands on what is buffered (the output is complete once its writer is closed).
func (e *emitter) flush() {
	if len(e.cur) > 0 {
		e.submit()
	}
}

func (e *emitter) sep() {
	if e.events > 0 {
		e.cur = append(e.cur, ',', '\n')
	} else {
		e.cur = append(e.cur, '\n')
	}
}

func (e *emitter) write(b []byte) {
	e.cur = append(e.cur, b...)
	e.spill()
}

func (e *emitter) writeString(s string) {
	e.cur = append(e.cur, s...)
	e.spill()
}

// writeInput writes a span of an input document (which outlives the output): a long one
// without a copy.
func (e *emitter) writeInput(s string) {
	if len(s) < 64<<10 {
		e.writeString(s)
		return
	}
	e.flush()
	if e.err == nil {
		e.err = e.w.WriteStable(s)
	}
}

// event writes one whole event.
func (e *emitter) event(b []byte) {
	e.sep()
	e.write(b)
	e.events++
}

// object starts an event built in place; end it with endObject.
func (e *emitter) object() *obj {
	e.sep()
	return newObj(e.cur)
}

func (e *emitter) endObject(o *obj) {
	e.cur = o.done()
	e.events++
	e.spill()
}

// eventsFrom writes events formatted elsewhere (n of them, each preceded by ",\n").
func (e *emitter) eventsFrom(b []byte, n int) {
	if n == 0 {
		return
	}
	if e.events == 0 {
		b = b[1:] // the first event of the array follows a newline only
	}
	e.write(b)
	e.events += n
}

// submitEvents is eventsFrom for a buffer of the output's own, handed on without a copy (b is
// the output's from then on); it returns an empty buffer for the caller to fill next.
func (e *emitter) submitEvents(b []byte, n int) []byte {
	if n == 0 || e.events == 0 || e.err != nil {
		e.eventsFrom(b, n)
		return b[:0]
	}
	e.flush()
	if e.err == nil {
		e.err = e.w.Submit(b)
	}
	e.events += n
	return e.w.Buffer()
}

func (e *emitter) ts(b []byte, unix int64) []byte { return jsonscan.AppendMicros(b, unix-e.base) }

// rep replaces Raw[span] of an event.
type rep struct {
	span traceevent.Span
	text []byte
}

var comma, argsOpen, argsClose = []byte{','}, []byte(`,"args":{`), []byte{'}'}

// patch rebuilds an event with replacements and, optionally, members added to its args.
func patch(dst []byte, raw string, reps []rep, argsSpan traceevent.Span, addArgs []byte) []byte {
	if len(addArgs) > 0 {
		// Insertions at one place keep their order (the sort below is stable).
		if argsSpan.Valid() {
			at := traceevent.Span{Start: argsSpan.End - 1, End: argsSpan.End - 1}
			if strings.TrimSpace(raw[argsSpan.Start+1:argsSpan.End-1]) != "" {
				reps = append(reps, rep{at, comma})
			}
			reps = append(reps, rep{at, addArgs})
		} else {
			at := traceevent.Span{Start: int32(len(raw) - 1), End: int32(len(raw) - 1)}
			reps = append(reps, rep{at, argsOpen}, rep{at, addArgs}, rep{at, argsClose})
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
