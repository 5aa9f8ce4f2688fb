// Package outfile creates the files ncclprof writes into directories that users name through
// environment variables (summaries, traces, metrics). Inside someone's training job a file
// must never clobber anything: every file is new, never reached through a symlink planted by
// another user, and gets the usual permissions (0644 less the umask; never world-writable).
//
// A directory is checked and opened once per process (O_DIRECTORY|O_NOFOLLOW), and every file
// is created relative to that descriptor (openat). So once a directory has been accepted, what
// its path names later does not matter: replacing it with a symlink mid-run (a TOCTOU attack
// on the path checks) cannot send the job's files anywhere else.
package outfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// MaxTries is how many names Create tries (base, base.1, … base.999) before giving up.
const MaxTries = 1000

// maxDirs bounds the directories held open: a program that writes into a new directory every
// step must not run the job out of descriptors. One evicted is simply opened (and checked)
// again the next time.
const maxDirs = 8

var (
	dirsMu sync.Mutex
	dirs   = map[string]*heldDir{} // absolute path as given → the directory opened for it
	uses   uint64
)

type heldDir struct {
	f       *os.File
	lastUse uint64
}

// Create makes dir if needed and a new file in it named base+ext, or base.N+ext when that
// name is taken (two processes with the same host and pid, as in containers sharing a
// directory; or a rerun into the same directory).
func Create(dir, base, ext string) (*os.File, error) {
	return held(dir, func(d *os.File) (*os.File, error) { return createIn(d, dir, base, ext) })
}

// held runs fn with the directory opened for dir (opened, created and checked the first time),
// again with the path reopened when the directory held was removed meanwhile (a user cleaning
// up between runs), with every check of the first time.
func held[T any](dir string, fn func(d *os.File) (T, error)) (T, error) {
	var zero T
	abs, err := filepath.Abs(dir)
	if err != nil {
		return zero, err
	}
	// Held while creating: a directory evicted and closed under a concurrent call could see
	// its descriptor number reused by another file.
	dirsMu.Lock()
	defer dirsMu.Unlock()
	d, err := openDir(abs, false)
	if err != nil {
		return zero, err
	}
	v, err := fn(d)
	if errors.Is(err, fs.ErrNotExist) {
		if d, err = openDir(abs, true); err != nil {
			return zero, err
		}
		v, err = fn(d)
	}
	return v, err
}

// nameAt is the n-th name Create tries: base+ext, then base.N+ext.
func nameAt(base, ext string, n int) string {
	if n == 0 {
		return base + ext
	}
	return fmt.Sprintf("%s.%d%s", base, n, ext)
}

// ErrNamesTaken: every name Create tries was taken (tooMany wraps it).
var ErrNamesTaken = errors.New("every name taken")

func tooMany(dir, base, ext string) error {
	return fmt.Errorf("%d files named %s.*%s already in %s: clean it or choose another directory (%w)",
		MaxTries, base, ext, dir, ErrNamesTaken)
}

// WriteNew writes data to a new file named as Create names it, whole or not at all: the data
// goes to a hidden temporary file in dir, which takes the name only once all of it is written
// (a hard link, which fails on an existing name rather than replacing it), so a full disk
// leaves neither a truncated nor an empty file under the name. It returns the file's path.
func WriteNew(dir, base, ext string, data []byte) (string, error) {
	return held(dir, func(d *os.File) (string, error) {
		tmp, err := writeTemp(d, dir, base, ext, data)
		if err != nil {
			return "", err
		}
		defer unix.Unlinkat(int(d.Fd()), tmp, 0)
		for n := 0; n < MaxTries; n++ {
			name := nameAt(base, ext, n)
			err := unix.Linkat(int(d.Fd()), tmp, int(d.Fd()), name, 0)
			if err == unix.EEXIST {
				continue
			}
			if err != nil {
				return "", &fs.PathError{Op: "link", Path: filepath.Join(dir, name), Err: err}
			}
			return filepath.Join(dir, name), nil
		}
		return "", tooMany(dir, base, ext)
	})
}

// Replace writes data to dir/name whole, replacing a previous file of that name: a hidden
// temporary file is written, then renamed over the name (which replaces the entry, a symlink
// planted there included, and never follows it). A reader sees the old file or the new one,
// never half of one, and a failure leaves the old one whole. For files a process rewrites (hang
// dumps). It returns the file's path.
func Replace(dir, name string, data []byte) (string, error) {
	return held(dir, func(d *os.File) (string, error) {
		tmp, err := writeTemp(d, dir, name, "", data)
		if err != nil {
			return "", err
		}
		if err := unix.Renameat(int(d.Fd()), tmp, int(d.Fd()), name); err != nil {
			unix.Unlinkat(int(d.Fd()), tmp, 0)
			return "", &fs.PathError{Op: "rename", Path: filepath.Join(dir, name), Err: err}
		}
		return filepath.Join(dir, name), nil
	})
}

// Remove deletes dir/name, a file this process created there (rotated trace files), through the
// directory held open: the name is resolved in the directory accepted when the file was made,
// never through a path someone may have swapped since. A name already gone is not an error.
func Remove(dir, name string) error {
	if name == "" || strings.ContainsRune(name, '/') || name == "." || name == ".." {
		return fmt.Errorf("outfile: %q is not a file name", name)
	}
	_, err := held(dir, func(d *os.File) (struct{}, error) {
		err := unix.Unlinkat(int(d.Fd()), name, 0)
		if err == unix.ENOENT {
			return struct{}{}, nil
		}
		if err != nil {
			return struct{}{}, &fs.PathError{Op: "remove", Path: filepath.Join(dir, name), Err: err}
		}
		return struct{}{}, nil
	})
	return err
}

// writeTemp writes data to a new hidden file .base*ext.tmp in d and returns its name.
func writeTemp(d *os.File, dir, base, ext string, data []byte) (string, error) {
	f, err := createIn(d, dir, "."+base, ext+".tmp")
	if err != nil {
		return "", err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	name := filepath.Base(f.Name())
	if err != nil {
		unix.Unlinkat(int(d.Fd()), name, 0)
		return "", err
	}
	return name, nil
}

// createIn creates the first free name in the opened directory d (shown to users as dir).
func createIn(d *os.File, dir, base, ext string) (*os.File, error) {
	for n := 0; n < MaxTries; n++ {
		name := nameAt(base, ext, n)
		// O_EXCL fails on any existing name, a dangling symlink included; O_NOFOLLOW says so
		// explicitly for the final component.
		fd, err := syscall.Openat(int(d.Fd()), name,
			syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o644)
		if err == syscall.EINTR {
			n--
			continue
		}
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "open", Path: filepath.Join(dir, name), Err: err}
		}
		return os.NewFile(uintptr(fd), filepath.Join(dir, name)), nil
	}
	return nil, tooMany(dir, base, ext)
}

// openDir returns the directory opened for abs, opening (and creating) it the first time, or
// again with reopen (dirsMu held).
func openDir(abs string, reopen bool) (*os.File, error) {
	uses++
	if h := dirs[abs]; h != nil {
		if !reopen {
			h.lastUse = uses
			return h.f, nil
		}
		h.f.Close()
		delete(dirs, abs)
	}
	d, err := openChecked(abs)
	if err != nil {
		return nil, err
	}
	if len(dirs) >= maxDirs {
		evictOldest()
	}
	dirs[abs] = &heldDir{f: d, lastUse: uses}
	return d, nil
}

// ReleaseDirs closes every directory held open (the next file opens and checks its directory
// again): a held descriptor keeps the file system it is on busy, so a test that mounts one for
// output releases them before it unmounts.
func ReleaseDirs() {
	dirsMu.Lock()
	defer dirsMu.Unlock()
	for p, h := range dirs {
		h.f.Close()
		delete(dirs, p)
	}
}

// evictOldest closes the directory used least recently (dirsMu held). A file being created
// in it right now holds its own descriptor, so closing the directory does not disturb it.
func evictOldest() {
	var oldest string
	for p, h := range dirs {
		if oldest == "" || h.lastUse < dirs[oldest].lastUse {
			oldest = p
		}
	}
	dirs[oldest].f.Close()
	delete(dirs, oldest)
}

// openChecked opens (creating what is missing) the directory abs names, in one walk from the
// root that opens each component relative to the previous one without following it: a
// symlink met on the way (in abs or in a link's target) is examined through a descriptor of
// the link itself, followed only when it belongs to us or to root, and refused otherwise. A
// separate check before the open (walk the path with lstat, then open it) is not enough: it can
// be swapped between the two.
func openChecked(abs string) (*os.File, error) {
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	todo := splitPath(abs)
	for links := 0; len(todo) > 0; {
		name := todo[0]
		todo = todo[1:]
		next, target, err := step(fd, name)
		if err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("output directory %s: %w", abs, err)
		}
		if next >= 0 {
			unix.Close(fd)
			fd = next
			continue
		}
		if links++; links > 40 {
			unix.Close(fd)
			return nil, fmt.Errorf("output directory %s: too many levels of symlinks", abs)
		}
		if filepath.IsAbs(target) {
			root, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				unix.Close(fd)
				return nil, err
			}
			unix.Close(fd)
			fd = root
		}
		todo = append(splitPath(target), todo...)
	}
	dir, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	unix.Close(fd)
	if err != nil {
		return nil, fmt.Errorf("output directory %s: %w", abs, err)
	}
	return os.NewFile(uintptr(dir), abs), nil
}

// step opens the component name inside the directory dirfd without following it, creating a
// directory there if nothing is. It returns the component's descriptor (a directory), or -1
// and the target of a symlink that may be followed.
func step(dirfd int, name string) (int, string, error) {
	for tries := 0; ; tries++ {
		fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == unix.ENOENT && tries < 3 {
			if err := unix.Mkdirat(dirfd, name, 0o755); err != nil && err != unix.EEXIST {
				return -1, "", fmt.Errorf("creating %s: %w", name, err)
			}
			continue
		}
		if err != nil {
			return -1, "", fmt.Errorf("%s: %w", name, err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return -1, "", err
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			return fd, "", nil
		case unix.S_IFLNK:
			defer unix.Close(fd)
			if me := uint32(os.Geteuid()); st.Uid != me && st.Uid != 0 {
				return -1, "", fmt.Errorf("%s is a symlink owned by uid %d, not by you: refusing to "+
					"follow it (another user could redirect your output); use a directory you own", name, st.Uid)
			}
			buf := make([]byte, 4096)
			n, err := unix.Readlinkat(fd, "", buf) // the link this descriptor holds, not the path's
			if err != nil {
				return -1, "", err
			}
			return -1, string(buf[:n]), nil
		default:
			unix.Close(fd)
			return -1, "", fmt.Errorf("%s is not a directory", name)
		}
	}
}

// splitPath lists a path's components, "." and empty ones left out ("..": kept, resolved by
// the kernel against the directory reached so far, as path lookup does).
func splitPath(p string) []string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}
