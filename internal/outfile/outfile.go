// Package outfile creates the files ncclprof writes into directories that users name through
// environment variables (summaries, traces, metrics). Inside someone's training job a file
// must never clobber anything: every file is new, never reached through a symlink planted by
// another user, and gets the usual permissions (0644 less the umask; never world-writable).
package outfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// MaxTries is how many names Create tries (base, base.1, … base.999) before giving up.
const MaxTries = 1000

// Create makes dir if needed and a new file in it named base+ext, or base.N+ext when that
// name is taken (two processes with the same host and pid, as in containers sharing a
// directory; or a rerun into the same directory).
func Create(dir, base, ext string) (*os.File, error) {
	if err := CheckDir(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for n := 0; n < MaxTries; n++ {
		// O_EXCL fails on any existing name, a dangling symlink included; O_NOFOLLOW says so
		// explicitly for the final component.
		f, err := os.OpenFile(filepath.Join(dir, nameAt(base, ext, n)),
			os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o644)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		return f, err
	}
	return nil, tooMany(dir, base, ext)
}

// nameAt is the n-th name Create tries: base+ext, then base.N+ext.
func nameAt(base, ext string, n int) string {
	if n == 0 {
		return base + ext
	}
	return fmt.Sprintf("%s.%d%s", base, n, ext)
}

func tooMany(dir, base, ext string) error {
	return fmt.Errorf("%d files named %s.*%s already in %s: clean it or choose another directory",
		MaxTries, base, ext, dir)
}

// WriteNew writes data to a new file named as Create names it, whole or not at all: the data
// goes to a hidden temporary file in dir, which takes the name only once all of it is written,
// so a full disk leaves neither a truncated nor an empty file under the name. Like Create, it
// never replaces an existing file. It returns the file's path.
func WriteNew(dir, base, ext string, data []byte) (string, error) {
	tmp, err := Create(dir, "."+base, ext+".tmp")
	if err != nil {
		return "", err
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		var path string
		if path, err = claim(tmp.Name(), dir, base, ext); err == nil {
			return path, nil
		}
	}
	_ = os.Remove(tmp.Name())
	return "", err
}

// claim gives the written file tmp the first free name Create would take. A hard link fails on
// an existing name (a symlink included) rather than replacing it, as rename would; tmp is
// removed once linked.
func claim(tmp, dir, base, ext string) (string, error) {
	for n := 0; n < MaxTries; n++ {
		path := filepath.Join(dir, nameAt(base, ext, n))
		err := os.Link(tmp, path)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		return path, os.Remove(tmp)
	}
	return "", tooMany(dir, base, ext)
}

// CheckDir refuses a directory path that passes through a symlink owned by another user (not
// root, not us), the case Linux's fs.protected_symlinks guards against in sticky directories
// like /tmp: such a link could redirect a job's output into a place its owner chose.
func CheckDir(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	me := uint32(os.Geteuid())
	for p := abs; ; p = filepath.Dir(p) {
		fi, err := os.Lstat(p)
		if err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != me && st.Uid != 0 {
				return fmt.Errorf("%s is a symlink owned by uid %d, not by you: refusing to follow it "+
					"(another user could redirect your output); use a directory you own", p, st.Uid)
			}
		}
		if parent := filepath.Dir(p); parent == p {
			return nil
		}
	}
}
