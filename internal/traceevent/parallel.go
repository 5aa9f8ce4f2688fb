package traceevent

import (
	"runtime"
	"sort"
	"strings"

	"github.com/ncclprof/ncclprof/internal/jsonscan"
	"github.com/ncclprof/ncclprof/internal/tracefile"
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
	if boundaryIn(s, first+chunkSize, first+2*chunkSize) < 0 {
		return 0, false, nil // no boundary where the second chunk would start: one walk
	}
	// Chunk i covers the events that start from the first boundary in its stretch of chunkSize
	// bytes up to the first one in the next stretch. Each worker finds its chunk's two, so the
	// file is touched only as the walk gets to it: found up front, they touched every MiB of it
	// before the first event, and the kernel then mapped the whole file at once (a one-pass
	// reader's Release could give nothing back). A stretch without a boundary leaves an empty
	// chunk that the consumer fills in sequentially.
	n := (len(s) - first + chunkSize - 1) / chunkSize
	cut := func(i int) int {
		if i == 0 {
			return first
		}
		at := first + i*chunkSize
		if at >= len(s) {
			return len(s)
		}
		return boundaryIn(s, at, min(at+chunkSize, len(s)))
	}
	expect := first
	inOrder(n, procs, func(i int, c *chunk[T]) {
		start, limit := cut(i), cut(i+1)
		if limit < 0 {
			limit = min(first+(i+2)*chunkSize, len(s))
		}
		if start < 0 || start >= limit {
			*c = chunk[T]{start: -1, limit: limit, events: c.events[:0], bounds: c.bounds[:0]}
			return
		}
		c.parse(w.r.Parse, s, start, limit)
	}, func(_ int, c *chunk[T]) bool {
		end, done, err = w.consume(c, &expect)
		return !done
	})
	if done {
		return end, true, err
	}
	w.arr.Resume(expect)
	end, err = w.sequential(-1)
	return end, true, err
}

// consume visits a parsed chunk that should start at *expect, and moves *expect past it. done
// is true when the walk ended here (an error, or the end of the array), with its result.
func (w *walker[T]) consume(c *chunk[T], expect *int) (end int, done bool, err error) {
	if c.start != *expect {
		// A false boundary, or the previous stretch was parsed here: catch up sequentially.
		w.arr.Resume(*expect)
		pos, err := w.sequential(c.limit)
		if err != nil || w.d.Truncated || w.arr.End > 0 {
			return pos, true, err // an error, or the array ended
		}
		*expect = pos
		return 0, false, nil
	}
	for k := range c.events {
		if err := w.accept(&c.events[k], c.bounds[k][0], c.bounds[k][1]); err != nil {
			return c.bounds[k][0], true, err
		}
	}
	if c.err != nil || c.closed {
		// A genuine error (this chunk started at a real boundary: the sequential walk reports
		// it, knowing about truncation and event numbers), or the end of the array.
		w.arr.Resume(c.next)
		end, err := w.sequential(-1)
		return end, true, err
	}
	*expect = c.next
	return 0, false, nil
}

// inOrder runs work for jobs 0 … n-1 on procs goroutines and hands each result to each, on the
// caller's goroutine, in job order; it stops early when each returns false. Workers take a slot
// before a job, so the slots go to the oldest jobs and each, which waits for them in order,
// always gets the next one; at most 2·procs results wait. Results are reused: each must be done
// with one when it returns (work is handed back a used result to fill again).
func inOrder[R any](n, procs int, work func(i int, r *R), each func(i int, r *R) bool) {
	results := make([]chan *R, n)
	for i := range results {
		results[i] = make(chan *R, 1)
	}
	jobs := make(chan int, n)
	for i := range n {
		jobs <- i
	}
	close(jobs)
	sem := make(chan struct{}, 2*procs)
	free := make(chan *R, 2*procs+1)
	stop := make(chan struct{})
	defer close(stop)
	for range procs {
		go func() {
			defer tracefile.GuardFaults()() // the chunks are of a mapped trace
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
				work(i, r)
				results[i] <- r
			}
		}()
	}
	for i := range n {
		r := <-results[i]
		if !each(i, r) {
			return
		}
		// Back to the pool before its slot is released, so that the worker the slot lets go
		// finds it there (results are allocated a handful of times, not once per job).
		select {
		case free <- r:
		default:
		}
		<-sem
	}
}

// boundaryIn returns the start of the first candidate event after a newline in [at, to): a '{'
// preceded by whitespace holding that newline, preceded by ','. -1 if there is none.
func boundaryIn(s string, at, to int) int {
	for at < to {
		nl := strings.IndexByte(s[at:to], '\n')
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
	var err error
	inOrder(len(spans), procs, func(i int, r *R) { work(spans[i][0], spans[i][1], r) },
		func(_ int, r *R) bool {
			err = emit(r)
			return err == nil
		})
	return err
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
	parse := ParseValid
	if k := sort.SearchInts(d.marks, from); k < len(d.lines) && d.marks[k] == from && d.lines[k] {
		parse = parseLine
	}
	var ev Event
	for i := from; i < to; {
		end, err := parse(&ev, s, i)
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
