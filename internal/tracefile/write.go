package tracefile

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// IsGzipName reports whether a name asks for gzip output.
func IsGzipName(name string) bool { return strings.HasSuffix(strings.ToLower(name), ".gz") }

// Writer streams a trace to a file. It writes to a temporary name beside the target and renames
// it on Close, so a failed or interrupted merge never leaves a half-written trace under the
// name the user asked for (Kineto does the same with its .tmp file).
type Writer struct {
	*bufio.Writer
	f    *os.File
	gz   *gzip.Writer
	path string
	tmp  string
}

// Create opens path for writing; a name ending in .gz is written gzip-compressed.
func Create(path string) (*Writer, error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("cannot write %s: %w", path, err)
	}
	w := &Writer{f: f, path: path, tmp: f.Name()}
	var sink io.Writer = f
	if IsGzipName(path) {
		// Level 1: trace JSON compresses about 8:1 even so, and higher levels cost several
		// times the merge itself.
		w.gz, _ = gzip.NewWriterLevel(f, gzip.BestSpeed)
		sink = w.gz
	}
	w.Writer = bufio.NewWriterSize(sink, 1<<20)
	return w, nil
}

// Close flushes, closes and moves the file to its name.
func (w *Writer) Close() error {
	err := w.Flush()
	if w.gz != nil {
		if e := w.gz.Close(); err == nil {
			err = e
		}
	}
	if e := w.f.Close(); err == nil {
		err = e
	}
	if err == nil {
		err = os.Rename(w.tmp, w.path)
	}
	if err != nil {
		os.Remove(w.tmp)
		return fmt.Errorf("writing %s: %w", w.path, err)
	}
	return nil
}

// Abort discards what was written.
func (w *Writer) Abort() {
	w.f.Close()
	os.Remove(w.tmp)
}
