package hosttest

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// SmallDisk mounts a tmpfs of the given size ("256k", "2m") on a fresh directory and unmounts it
// when the test ends: a real full disk (ENOSPC, short writes) for tests of what is written when
// space runs out. Mounting needs root; elsewhere the test is skipped.
func SmallDisk(t testing.TB, size string) string {
	t.Helper()
	mnt := filepath.Join(t.TempDir(), "small")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a small tmpfs here (needs root): %v %s", err, out)
	}
	// Lazily (MNT_DETACH): a process's writers may still hold the directory open (internal/outfile
	// keeps the directories it writes into open for the life of the process).
	t.Cleanup(func() { _ = exec.Command("umount", "-l", mnt).Run() })
	return mnt
}

// FillDisk writes a file in dir until the disk is full and returns its path; removing it frees
// the space again.
func FillDisk(t testing.TB, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v", dir, err)
			}
			return path
		}
	}
}
