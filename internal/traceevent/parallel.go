package traceevent

import (
	"runtime"
	"strings"

	"github.com/ncclprof/ncclprof/internal/jsonscan"
)

// Parallel parsing of a large traceEvents array. The array is cut into chunks at candidate
// event boundaries: a ',' then whitespace holding a newline, then '{'. A raw newline cannot
// occur inside a JSON string, so such a place is always between two values, though not always
// between two events (a multi-line nested array of objects has them too). Workers parse chunks
// independently; the consumer accepts a chunk only if it starts exactly where the previous one
// ended, and otherwise parses that stretch itself, so the result is the sequential one.

const (
	chunkSize   = 1 << 20
	minParallel = 8 * chunkSize
)

// chunk is one worker's result.
type chunk[T any] struct {
	start, limit int // the chunk covers events that start in [start, limit)
	events       []T
	bounds       [][2]int // each event's start and end
	next         int      // where the event after the last one starts (≥ limit), or the ']'
	closed       bool     // next is the array's ']'
	err          error    // the parse error that stopped the worker, if any
	errEnd       int
}

// parallel parses the array with several goroutines. done is false when it declined (small
// array, one CPU, or no boundaries found) and the caller should walk sequentially.
func (w *walker[T]) parallel() (end int, done bool, err error) {
	s := w.d.doc
	procs := runtime.GOMAXPROCS(0)
	first := jsonscan.SkipWS(s, w.d.eventsStart+1)
	if procs < 2 || len(s)-first < minParallel {
		return 0, false, nil
	}
	cuts := []int{first}
	for at := first + chunkSize; at < len(s); at += chunkSize {
		c := nextBoundary(s, at)
		if c < 0 {
			break
		}
		if c > cuts[len(cuts)-1] {
			cuts = append(cuts, c)
		}
	}
	if len(cuts) < 2 {
		return 0, false, nil
	}
	// Workers take chunks in order; at most 2·procs results wait for the consumer.
	results := make([]chan *chunk[T], len(cuts))
	for i := range results {
		results[i] = make(chan *chunk[T], 1)
	}
	jobs := make(chan int, len(cuts))
	for i := range cuts {
		jobs <- i
	}
	close(jobs)
	sem := make(chan struct{}, 2*procs)
	// Chunks are recycled: their event slices are the walk's only per-event allocation.
	free := make(chan *chunk[T], 2*procs+1)
	stop := make(chan struct{})
	defer close(stop)
	for p := 0; p < procs; p++ {
		go func() {
			for {
				// Take a slot before a job, so the slots go to the oldest jobs and the
				// consumer, which waits for them in order, always gets the next one.
				select {
				case sem <- struct{}{}:
				case <-stop:
					return
				}
				i, ok := <-jobs
				if !ok {
					return
				}
				limit := len(s)
				if i+1 < len(cuts) {
					limit = cuts[i+1]
				}
				var c *chunk[T]
				select {
				case c = <-free:
				default:
					c = &chunk[T]{}
				}
				c.parse(w.r.Parse, s, cuts[i], limit)
				results[i] <- c
			}
		}()
	}
	// A chunk goes back to the pool before its slot is released, so that the worker the slot
	// lets go finds it there (chunks are allocated a handful of times, not once per chunk).
	release := func(c *chunk[T]) {
		select {
		case free <- c:
		default:
		}
		<-sem
	}
	expect := first
	for i := range cuts {
		c := <-results[i]
		if c.start != expect {
			// A false boundary, or the previous stretch was parsed here: catch up sequentially.
			w.arr.Resume(expect)
			pos, err := w.sequential(c.limit)
			if err != nil || w.d.Truncated || w.arr.End > 0 {
				return pos, true, err // an error, or the array ended
			}
			expect = pos
			release(c)
			continue
		}
		for k := range c.events {
			if err := w.accept(&c.events[k], c.bounds[k][0], c.bounds[k][1]); err != nil {
				return c.bounds[k][0], true, err
			}
		}
		if c.err != nil {
			// Genuine: this chunk started at a real boundary. Let the sequential walk report
			// it (it knows about truncation and event numbers).
			w.arr.Resume(c.next)
			end, err := w.sequential(-1)
			return end, true, err
		}
		if c.closed {
			w.arr.Resume(c.next)
			end, err := w.sequential(-1)
			return end, true, err
		}
		expect = c.next
		release(c)
	}
	w.arr.Resume(expect)
	end, err = w.sequential(-1)
	return end, true, err
}

// nextBoundary returns the start of the first candidate event at or after at: a '{' preceded
// by whitespace holding a newline, preceded by ','. -1 if there is none.
func nextBoundary(s string, at int) int {
	for at < len(s) {
		nl := strings.IndexByte(s[at:], '\n')
		if nl < 0 {
			return -1
		}
		p := at + nl
		j := jsonscan.SkipWS(s, p)
		k := p - 1
		for k >= 0 && (s[k] == ' ' || s[k] == '\t' || s[k] == '\r') {
			k--
		}
		if j < len(s) && s[j] == '{' && k >= 0 && s[k] == ',' {
			return j
		}
		at = p + 1
	}
	return -1
}

// parse parses the events that start in [start, limit) into c, reusing its slices (parse sets
// every field of an event: the slots are not zeroed).
func (c *chunk[T]) parse(parse func(*T, string, int) (int, error), s string, start, limit int) {
	if cap(c.events) == 0 {
		// Sized for events of 200 bytes or more (traces' are 250 to 400): grown by doubling,
		// a new chunk's slices were allocated twice over.
		n := min(limit-start, chunkSize) / 200
		c.events, c.bounds = make([]T, 0, n), make([][2]int, 0, n)
	}
	*c = chunk[T]{start: start, limit: limit, next: start, events: c.events[:0], bounds: c.bounds[:0]}
	i := start
	for {
		if len(c.events) == cap(c.events) {
			var zero T
			c.events = append(c.events, zero)
		} else {
			c.events = c.events[:len(c.events)+1]
		}
		end, err := parse(&c.events[len(c.events)-1], s, i)
		if err != nil {
			c.events = c.events[:len(c.events)-1]
			c.err, c.errEnd, c.next = err, end, i
			return
		}
		c.bounds = append(c.bounds, [2]int{i, end})
		j := jsonscan.SkipWS(s, end)
		switch {
		case j < len(s) && s[j] == ',':
			i = jsonscan.SkipWS(s, j+1)
			c.next = i
			if i >= limit {
				return
			}
		case j < len(s) && s[j] == ']':
			c.next, c.closed = j, true
			return
		default:
			// Not a separator: let the sequential walk say what is wrong, from this event on.
			c.err, c.next = &jsonscan.Error{Offset: int64(j), Msg: "bad separator"}, i
			c.events, c.bounds = c.events[:len(c.events)-1], c.bounds[:len(c.bounds)-1]
			return
		}
	}
}

// WalkParallel is a second pass over the events of a document Read has validated, shared
// between the cores: work reads the events that start in [from, to) (with WalkRange) into a
// result, on several goroutines, and emit sees the results in file order on the caller's
// goroutine. Results are reused: emit must not keep one. It returns emit's first error.
func WalkParallel[R any](d *Doc, work func(from, to int, r *R), emit func(r *R) error) error {
	spans := d.spans()
	procs := runtime.GOMAXPROCS(0)
	if procs < 2 || len(spans) < 2 {
		var r R
		for _, sp := range spans {
			work(sp[0], sp[1], &r)
			if err := emit(&r); err != nil {
				return err
			}
		}
		return nil
	}
	results := make([]chan *R, len(spans))
	for i := range results {
		results[i] = make(chan *R, 1)
	}
	jobs := make(chan int, len(spans))
	for i := range spans {
		jobs <- i
	}
	close(jobs)
	// As in parallel: a slot before a job, at most 2·procs results waiting, results recycled.
	sem := make(chan struct{}, 2*procs)
	free := make(chan *R, 2*procs+1)
	stop := make(chan struct{})
	defer close(stop)
	for p := 0; p < procs; p++ {
		go func() {
			for {
				select {
				case sem <- struct{}{}:
				case <-stop:
					return
				}
				i, ok := <-jobs
				if !ok {
					return
				}
				var r *R
				select {
				case r = <-free:
				default:
					r = new(R)
				}
				work(spans[i][0], spans[i][1], r)
				results[i] <- r
			}
		}()
	}
	for i := range spans {
		r := <-results[i]
		if err := emit(r); err != nil {
			return err
		}
		select {
		case free <- r:
		default:
		}
		<-sem
	}
	return nil
}

// spans cuts the events read into runs of markEvery events: [start of the first, start of the
// next run), the last one ending at EventsEnd.
func (d *Doc) spans() [][2]int {
	var out [][2]int
	for i, m := range d.marks {
		to := d.eventsEnd
		if i+1 < len(d.marks) {
			to = d.marks[i+1]
		}
		out = append(out, [2]int{m, to})
	}
	return out
}

// WalkRange visits, in file order, the events of a validated document that start in
// [from, to), from the event that starts at from (a span WalkParallel gives). The Event is
// reused between calls; visit returns false to stop.
func (d *Doc) WalkRange(from, to int, visit func(*Event) bool) {
	s := d.doc
	var ev Event
	for i := from; i < to; {
		end, err := ParseValid(&ev, s, i)
		if err != nil || !visit(&ev) {
			return
		}
		j := jsonscan.SkipWS(s, end)
		if j >= len(s) || s[j] != ',' {
			return
		}
		i = jsonscan.SkipWS(s, j+1)
	}
}
