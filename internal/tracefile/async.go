package tracefile

import (
	"io"
	"sync"
)

// asyncWriter hands full buffers to a goroutine that writes them (and compresses them, when
// what it writes to is a gzip stream), so that the write system calls — half of a merge's time
// where it copies most of its input as it is — run on another core while the next buffer fills.
// chunk is a buffer of the writer's own, or text that stays valid until the writer is closed
// (a span of the input held in memory), written without a copy.
type chunk struct {
	buf    []byte
	stable string
}

type asyncWriter struct {
	w    io.Writer
	cur  []byte
	full chan chunk
	free chan []byte
	done sync.WaitGroup
	mu   sync.Mutex
	err  error
}

// AsyncBuf is the size of the buffers handed to the writing goroutine.
const AsyncBuf = 1 << 20

const asyncBuf = AsyncBuf

func newAsyncWriter(w io.Writer) *asyncWriter {
	// free holds the buffers written, for reuse: this writer's own and those handed in with
	// submit (several producers may each hold one while they fill it).
	a := &asyncWriter{w: w, full: make(chan chunk, 4), free: make(chan []byte, 12)}
	for i := 0; i < 2; i++ {
		a.free <- make([]byte, 0, asyncBuf)
	}
	a.cur = make([]byte, 0, asyncBuf)
	a.done.Add(1)
	go a.run()
	return a
}

func (a *asyncWriter) run() {
	defer a.done.Done()
	for c := range a.full {
		if a.error() == nil {
			var err error
			if c.buf != nil {
				_, err = a.w.Write(c.buf)
			} else {
				_, err = io.WriteString(a.w, c.stable)
			}
			if err != nil {
				a.mu.Lock()
				a.err = err
				a.mu.Unlock()
			}
		}
		if c.buf != nil {
			select {
			case a.free <- c.buf[:0]:
			default: // more buffers than the pool keeps: the collector takes this one
			}
		}
	}
}

func (a *asyncWriter) error() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// Write copies p into the current buffer, handing buffers on as they fill. An error of an
// earlier write is returned by a later call.
func (a *asyncWriter) Write(p []byte) (int, error) {
	if err := a.error(); err != nil {
		return 0, err
	}
	n := len(p)
	for len(p) > 0 {
		k := copy(a.cur[len(a.cur):cap(a.cur)], p)
		a.cur = a.cur[:len(a.cur)+k]
		p = p[k:]
		if len(a.cur) == cap(a.cur) {
			a.full <- chunk{buf: a.cur}
			a.cur = a.buffer()
		}
	}
	return n, nil
}

// buffer returns an empty buffer of at least asyncBuf bytes: one written already, else new.
func (a *asyncWriter) buffer() []byte {
	select {
	case b := <-a.free:
		return b
	default:
		return make([]byte, 0, asyncBuf)
	}
}

// handOn queues what the current buffer holds.
func (a *asyncWriter) handOn() {
	if len(a.cur) > 0 {
		a.full <- chunk{buf: a.cur}
		a.cur = a.buffer()
	}
}

// writeStable queues s itself: the caller guarantees it stays unchanged until Close.
func (a *asyncWriter) writeStable(s string) error {
	a.handOn()
	a.full <- chunk{stable: s}
	return a.error()
}

// submit queues b itself, after what was written before; the writer owns it from then on.
func (a *asyncWriter) submit(b []byte) error {
	a.handOn()
	if len(b) > 0 {
		a.full <- chunk{buf: b}
	}
	return a.error()
}

// Close writes what is left and waits for the writer goroutine.
func (a *asyncWriter) Close() error {
	if len(a.cur) > 0 {
		a.full <- chunk{buf: a.cur}
		a.cur = nil
	}
	close(a.full)
	a.done.Wait()
	return a.error()
}
