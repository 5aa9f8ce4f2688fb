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

const asyncBuf = 1 << 20

func newAsyncWriter(w io.Writer) *asyncWriter {
	a := &asyncWriter{w: w, full: make(chan chunk, 4), free: make(chan []byte, 3)}
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
			a.free <- c.buf[:0]
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
			a.cur = <-a.free
		}
	}
	return n, nil
}

// writeStable queues s itself: the caller guarantees it stays unchanged until Close.
func (a *asyncWriter) writeStable(s string) error {
	if len(a.cur) > 0 {
		a.full <- chunk{buf: a.cur}
		a.cur = <-a.free
	}
	a.full <- chunk{stable: s}
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
