package tracefile

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
)

// IsGzipName reports whether a name asks for gzip output.
func IsGzipName(name string) bool { return strings.HasSuffix(strings.ToLower(name), ".gz") }

// Writer streams a trace to a file. It writes to a temporary name beside the target and renames
// it on Close, so a failed or interrupted merge never leaves a half-written trace under the
// name the user asked for (Kineto does the same with its .tmp file).
type Writer struct {
	*bufio.Writer
	f  *os.File
	gz *gzip.Writer
	// async writes (and compresses) on another goroutine; nil for CreateRaw.
	async *asyncWriter
	path  string
	tmp   string
	// direct: path is written in place (a device or pipe such as /dev/null), not renamed onto.
	direct bool
}

// Create opens path for writing; a name ending in .gz is written gzip-compressed.
func Create(path string) (*Writer, error) {
	w, err := CreateRaw(path)
	if err != nil {
		return w, err
	}
	var sink io.Writer = w.f
	if IsGzipName(path) {
		// Level 1: trace JSON compresses about 8:1 even so, and higher levels cost several
		// times the merge itself.
		w.gz, _ = gzip.NewWriterLevel(w.f, gzip.BestSpeed)
		sink = w.gz
	}
	w.async = newAsyncWriter(sink)
	w.Writer = bufio.NewWriterSize(w.async, 1<<16)
	return w, nil
}

// CreateRaw opens path for writing bytes as given (for formats that compress themselves). The
// directory is made if missing; the file gets 0644 less the umask, like any new file.
func CreateRaw(path string) (*Writer, error) {
	target, direct := renameTarget(path)
	if direct {
		// A rename would put a regular file in the place of the device (as root, /dev/null).
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return nil, fmt.Errorf("cannot write %s: %w", path, err)
		}
		return &Writer{Writer: bufio.NewWriterSize(f, 1<<20), f: f, path: path, direct: true}, nil
	}
	f, err := createTemp(target)
	if err != nil {
		return nil, fmt.Errorf("cannot write %s: %w", path, err)
	}
	return &Writer{Writer: bufio.NewWriterSize(f, 1<<20), f: f, path: target, tmp: f.Name()}, nil
}

// renameTarget is the file a finished output is renamed onto: path, or the file a symbolic
// link at path names (renaming onto the link would replace it: -o /dev/stdout replaced /dev's
// link); direct when path is neither a regular file nor missing (a device, a pipe), which is
// written in place.
func renameTarget(path string) (target string, direct bool) {
	st, err := os.Stat(path)
	if err != nil {
		return path, false // missing (or unreadable: creating the file beside it says why)
	}
	if !st.Mode().IsRegular() {
		return path, !st.IsDir()
	}
	if lst, err := os.Lstat(path); err == nil && lst.Mode()&fs.ModeSymlink != 0 {
		if real, err := filepath.EvalSymlinks(path); err == nil {
			return real, false
		}
	}
	return path, false
}

// createTemp makes a new file beside path, under a hidden temporary name. (os.CreateTemp
// would give it mode 0600, which the rename would keep.)
func createTemp(path string) (*os.File, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for {
		tmp := filepath.Join(dir, fmt.Sprintf(".%s.tmp-%d-%d", filepath.Base(path), os.Getpid(), tmpSeq.Add(1)))
		f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
	}
}

var tmpSeq atomic.Uint64

// Close flushes, closes and moves the file to its name.
func (w *Writer) Close() error {
	err := w.Flush()
	if w.async != nil {
		if e := w.async.Close(); err == nil {
			err = e
		}
	}
	if w.gz != nil {
		if e := w.gz.Close(); err == nil {
			err = e
		}
	}
	if e := w.f.Close(); err == nil {
		err = e
	}
	if err == nil && !w.direct {
		err = replace(w.tmp, w.path)
	}
	if err != nil {
		if !w.direct {
			os.Remove(w.tmp)
		}
		return fmt.Errorf("writing %s: %w", w.path, err)
	}
	return nil
}

// WriteStable writes s, which the caller guarantees stays unchanged until Close (text of an
// input held in memory): long runs are handed to the writing goroutine without a copy.
func (w *Writer) WriteStable(s string) error {
	if w.async == nil || len(s) < 64<<10 {
		_, err := w.WriteString(s)
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return w.async.writeStable(s)
}

// Buffer returns an empty buffer to fill and hand back with Submit (its capacity is at least
// AsyncBuf; one written already is reused).
func (w *Writer) Buffer() []byte {
	if w.async == nil {
		return make([]byte, 0, AsyncBuf)
	}
	return w.async.buffer()
}

// Submit writes b after what was written before, without a copy: the Writer owns b from then
// on (and reuses it once written). A producer that fills its own buffers (several goroutines
// formatting events) hands them on this way.
func (w *Writer) Submit(b []byte) error {
	if w.async == nil {
		_, err := w.Write(b)
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return w.async.submit(b)
}

// Abort discards what was written.
func (w *Writer) Abort() {
	if w.async != nil {
		w.async.Close()
	}
	w.f.Close()
	if !w.direct {
		os.Remove(w.tmp)
	}
}
