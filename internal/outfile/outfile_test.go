package outfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

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

// WriteNew on a full disk (a real tmpfs) leaves nothing behind: no empty or partial file under
// the name, no temporary file (issue 14 item 9: a full disk once left a 0-byte summary). With
// space, the file holds the data whole, under the first free name, without following a symlink
// planted at the name.
func TestWriteNewWholeOrNothing(t *testing.T) {
	dir := hosttest.SmallDisk(t, "64k")
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
