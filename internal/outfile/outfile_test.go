package outfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ncclprof/ncclprof/internal/hosttest"
)

func TestNewFilesOnly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b") // created on demand
	old := syscall.Umask(0)                     // even with no umask: not group/world-writable
	defer syscall.Umask(old)
	f1, err := Create(dir, "x", ".json")
	if err != nil {
		t.Fatal(err)
	}
	f2, err := Create(dir, "x", ".json")
	if err != nil {
		t.Fatal(err)
	}
	defer f1.Close()
	defer f2.Close()
	if got := filepath.Base(f1.Name()); got != "x.json" {
		t.Errorf("first file %s", got)
	}
	if got := filepath.Base(f2.Name()); got != "x.1.json" {
		t.Errorf("second file %s, want x.1.json", got)
	}
	fi, _ := os.Stat(f1.Name())
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", fi.Mode().Perm())
	}
}

func TestUmaskRespected(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	f, err := Create(t.TempDir(), "x", ".json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if fi, _ := f.Stat(); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v under umask 077, want 0600", fi.Mode().Perm())
	}
}

// A symlink planted at the name the plugin will use is neither followed nor replaced.
func TestPlantedSymlinkNotFollowed(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	os.WriteFile(victim, []byte("keep"), 0o644)
	os.Symlink(victim, filepath.Join(dir, "x.json"))
	f, err := Create(dir, "x", ".json")
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("new")
	f.Close()
	if filepath.Base(f.Name()) != "x.1.json" {
		t.Errorf("wrote %s", f.Name())
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Errorf("victim changed to %q", b)
	}
}

func TestForeignSymlinkInPathRefused(t *testing.T) {
	base := t.TempDir()
	real := filepath.Join(base, "real")
	os.Mkdir(real, 0o755)
	mine := filepath.Join(base, "mine")
	os.Symlink(real, mine)
	if _, err := Create(filepath.Join(mine, "out"), "x", ".json"); err != nil {
		t.Fatalf("own symlink refused: %v", err)
	}
	foreign := filepath.Join(base, "foreign")
	os.Symlink(real, foreign)
	if err := os.Lchown(foreign, 4242, 4242); errors.Is(err, syscall.EPERM) {
		t.Skip("needs root to make a symlink owned by another user")
	} else if err != nil {
		t.Fatal(err)
	}
	_, err := Create(filepath.Join(foreign, "out2"), "x", ".json")
	if err == nil || !strings.Contains(err.Error(), "owned by uid 4242") {
		t.Fatalf("foreign symlink followed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(real, "out2")); err == nil {
		t.Error("a file was created through the foreign symlink")
	}
}

func TestGivesUpWithAdvice(t *testing.T) {
	dir := t.TempDir()
	for n := 0; n < MaxTries; n++ {
		f, err := Create(dir, "x", ".json")
		if err != nil {
			t.Fatal(n, err)
		}
		f.Close()
	}
	if _, err := Create(dir, "x", ".json"); err == nil || !strings.Contains(err.Error(), "choose another directory") {
		t.Fatalf("err %v", err)
	}
}

// The output directory is replaced by a symlink to someone else's directory after the first
// file was written (the audit's TOCTOU: 229 summaries landed in another user's 0700
// directory). Every later file still goes into the directory that was checked and opened.
func TestDirSwappedForSymlinkLater(t *testing.T) {
	base := t.TempDir()
	out, moved, victim := filepath.Join(base, "out"), filepath.Join(base, "out.moved"), filepath.Join(base, "victim")
	if err := os.Mkdir(victim, 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := Create(out, "summary", ".json")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Rename(out, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, out); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 229; i++ {
		f, err := Create(out, "summary", ".json")
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	if n := countFiles(t, victim); n != 0 {
		t.Errorf("%d files redirected into the symlink's target", n)
	}
	if n := countFiles(t, moved); n != 230 {
		t.Errorf("%d files in the directory that was opened, want 230", n)
	}
}

// A directory removed while the job runs is opened again by path, with every check: a
// symlink owned by another user now standing there is refused.
func TestDirRemovedThenForeignSymlinkRefused(t *testing.T) {
	base := t.TempDir()
	out, victim := filepath.Join(base, "out"), filepath.Join(base, "victim")
	os.Mkdir(victim, 0o700)
	f, err := Create(out, "x", ".json")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.RemoveAll(out); err != nil {
		t.Fatal(err)
	}
	foreignSymlink(t, victim, out)
	if _, err := Create(out, "x", ".json"); err == nil || !strings.Contains(err.Error(), "owned by uid 4242") {
		t.Fatalf("err %v, want the foreign symlink refused", err)
	}
	if n := countFiles(t, victim); n != 0 {
		t.Errorf("%d files in the symlink's target", n)
	}
}

// The swap races with the checks themselves: another user's process flips each output path
// between a real directory and its own symlink (to its directory) as fast as it can while the
// job creates files there. Creates may fail; none may land in the attacker's directory.
func TestDirSymlinkSwapRace(t *testing.T) {
	base := t.TempDir()
	victim := filepath.Join(base, "victim")
	os.Mkdir(victim, 0o777)
	var created, failed int
	for d := 0; d < 40; d++ {
		out := filepath.Join(base, fmt.Sprintf("out%d", d))
		link := filepath.Join(base, fmt.Sprintf("link%d", d))
		os.Mkdir(out, 0o755)
		foreignSymlink(t, victim, link)
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() { // the attacker: exchange the directory and the symlink, again and again
			defer close(done)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := renameExchange(out, link); err != nil {
					t.Errorf("renameat2: %v", err)
					return
				}
			}
		}()
		for i := 0; i < 25; i++ {
			if f, err := Create(out, "summary", ".json"); err == nil {
				f.Close()
				created++
			} else {
				failed++
			}
		}
		close(stop)
		<-done
	}
	if n := countFiles(t, victim); n != 0 {
		t.Fatalf("%d of %d files landed in the attacker's directory", n, created)
	}
	if created == 0 {
		t.Fatal("no file was created at all")
	}
	t.Logf("%d files created, %d refused while the path was being swapped", created, failed)
}

// foreignSymlink makes link → target owned by uid 4242, as another user would (needs root).
func foreignSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(link, 4242, 4242); errors.Is(err, syscall.EPERM) {
		t.Skip("needs root to make a symlink owned by another user")
	} else if err != nil {
		t.Fatal(err)
	}
}

// renameExchange swaps two paths atomically (renameat2 RENAME_EXCHANGE).
func renameExchange(a, b string) error {
	return unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
}

func countFiles(t *testing.T, dir string) int {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// Directories are held open, but only a few: writing into a new directory every step must not
// run the job out of descriptors.
func TestHeldDirectoriesBounded(t *testing.T) {
	fds := func() int {
		ents, _ := os.ReadDir("/proc/self/fd")
		return len(ents)
	}
	before := fds()
	base := t.TempDir()
	for i := 0; i < 50; i++ {
		f, err := Create(filepath.Join(base, fmt.Sprintf("step%d", i)), "x", ".json")
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	if grew := fds() - before; grew > maxDirs {
		t.Errorf("%d more descriptors open after writing into 50 directories, bound %d", grew, maxDirs)
	}
}

// WriteNew on a full disk (a real tmpfs) leaves nothing behind: no empty or partial file under
// the name, no temporary file (issue 14 item 9: a full disk once left a 0-byte summary). With
// space, the file holds the data whole, under the first free name, without following a symlink
// planted at the name.
func TestWriteNewWholeOrNothing(t *testing.T) {
	dir := hosttest.SmallDisk(t, "64k")
	t.Cleanup(ReleaseDirs) // before the tmpfs is unmounted (cleanups run last first)
	defer syscall.Umask(syscall.Umask(0o022))
	data := []byte(strings.Repeat("{\"summary\": 1}\n", 1000)) // 15 kB: more than a page
	victim := filepath.Join(t.TempDir(), "victim")
	os.WriteFile(victim, []byte("keep"), 0o644)
	if err := os.Symlink(victim, filepath.Join(dir, "s.json")); err != nil {
		t.Fatal(err)
	}
	filler := hosttest.FillDisk(t, dir)
	if path, err := WriteNew(dir, "s", ".json", data); err == nil || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("WriteNew on a full disk: %q, %v; want ENOSPC", path, err)
	}
	names := func() []string {
		es, _ := os.ReadDir(dir)
		var out []string
		for _, e := range es {
			out = append(out, e.Name())
		}
		return out
	}
	if got := strings.Join(names(), " "); got != "filler s.json" {
		t.Errorf("after the failed write the directory holds %q, want only the filler and the planted link", got)
	}
	os.Remove(filler)
	path, err := WriteNew(dir, "s", ".json", data)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(path) != "s.1.json" {
		t.Errorf("wrote %s, want s.1.json (s.json is taken)", path)
	}
	if b, _ := os.ReadFile(path); string(b) != string(data) {
		t.Errorf("the file holds %d bytes, want the %d written", len(b), len(data))
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Errorf("the planted link's target changed to %q", b)
	}
	if got := strings.Join(names(), " "); got != "s.1.json s.json" {
		t.Errorf("directory %q: the temporary file was left behind", got)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644 as Create makes it (umask 022)", fi.Mode().Perm())
	}
}

// Replace rewrites a file whole: a reader sees the old bytes or the new ones, a symlink planted
// at the name is replaced (its target untouched), and no temporary file is left.
func TestReplaceRewritesWhole(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	os.WriteFile(victim, []byte("keep"), 0o644)
	if err := os.Symlink(victim, filepath.Join(dir, "d.json")); err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"first", "second, longer"} {
		path, err := Replace(dir, "d.json", []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(path); string(b) != body {
			t.Errorf("%s holds %q, want %q", path, b, body)
		}
	}
	if fi, _ := os.Lstat(filepath.Join(dir, "d.json")); fi.Mode()&os.ModeSymlink != 0 {
		t.Error("the planted symlink is still there")
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Errorf("the link's target changed to %q", b)
	}
	if n := countFiles(t, dir); n != 1 {
		t.Errorf("%d files in the directory, want the one (no temporary left)", n)
	}
}

// Remove deletes through the directory held open: after the path is swapped for a symlink to
// another directory, the file removed is the one created, and a same-named file in the
// symlink's target is untouched. A name already gone is not an error; a path is refused.
func TestRemoveThroughHeldDirectory(t *testing.T) {
	base := t.TempDir()
	out, moved, victim := filepath.Join(base, "out"), filepath.Join(base, "out.moved"), filepath.Join(base, "victim")
	f, err := Create(out, "trace", ".json")
	if err != nil {
		t.Fatal(err)
	}
	name := filepath.Base(f.Name())
	f.Close()
	if err := os.Mkdir(victim, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(victim, name), []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(out, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, out); err != nil {
		t.Fatal(err)
	}
	if err := Remove(out, name); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(moved, name)); !os.IsNotExist(err) {
		t.Errorf("the file created is still there (%v)", err)
	}
	if b, err := os.ReadFile(filepath.Join(victim, name)); err != nil || string(b) != "keep" {
		t.Errorf("the symlink's target lost its file: %q %v", b, err)
	}
	if err := Remove(out, name); err != nil {
		t.Errorf("removing a name already gone: %v, want nil", err)
	}
	if err := Remove(out, "../victim/"+name); err == nil {
		t.Error("a path with a slash was accepted as a file name")
	}
}
