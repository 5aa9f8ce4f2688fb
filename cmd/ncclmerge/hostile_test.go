package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ncclprof/ncclprof/internal/hang/hangtest"
	"github.com/ncclprof/ncclprof/internal/hang/hangtruth"
	"github.com/ncclprof/ncclprof/internal/testtraces"
)

// runWithin runs the command and fails the test if it has not returned within the limit (the
// command is left running: a test binary ends with the test).
func runWithin(t *testing.T, limit time.Duration, args ...string) (string, error) {
	t.Helper()
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := run(t, args...)
		done <- result{out, err}
	}()
	select {
	case r := <-done:
		return r.out, r.err
	case <-time.After(limit):
		t.Fatalf("ncclmerge %s did not return within %v", strings.Join(args, " "), limit)
		return "", nil
	}
}

// A named pipe or a link to /dev/zero among the inputs is refused at once with what it is, by
// hang, report, stats and check alike; before, each blocked forever on the pipe and read the
// device until memory ran out (issue 23, item 9).
func TestInputsThatAreNotFiles(t *testing.T) {
	truths := hangtest.Plan(t, "--scenario", "link", "--culprit", "2")
	dir, _ := hangtest.Synthesize(t, truths, hangtruth.Watchdog)
	fifo := filepath.Join(dir, "ncclprof-hang-evil-1.json")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "ncclprof-hang-evil-2.json")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	out, err := runWithin(t, 20*time.Second, "hang", dir)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.HasPrefix(out, "the link from rank 2") || !strings.Contains(out, "a named pipe (FIFO)") || !strings.Contains(out, "is a device") {
		t.Errorf("the verdict should stand and both files be named as refused:\n%s", out)
	}
	trace := filepath.Join(t.TempDir(), "rank0.trace.json")
	if err := syscall.Mkfifo(trace, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"stats", trace}, {"check", trace}, {"report", trace, "-o", filepath.Join(t.TempDir(), "r.html")}} {
		out, err := runWithin(t, 20*time.Second, args...)
		if err == nil && !strings.Contains(out, "named pipe") {
			t.Errorf("%s of a FIFO: no error\n%s", args[0], out)
		}
	}
}

// A dump another user owns is not read: in a sticky shared directory (NCCLPROF_OUTPUT_DIR=/tmp)
// anyone can create a file under an upcoming process's dump name and steer the verdict. It is
// named among the files not used, with how to use it anyway (issue 23, item 6, reading side).
func TestDumpOfAnotherUserRefused(t *testing.T) {
	truths := hangtest.Plan(t, "--scenario", "link", "--culprit", "2")
	dir, paths := hangtest.Synthesize(t, truths, hangtruth.Watchdog)
	if err := os.Chown(paths[2], 54321, 54321); err != nil {
		t.Skipf("cannot give a file to another user here (%v): needs root", err)
	}
	out, err := run(t, "hang", dir)
	if err != nil && err != exitStatus(hangNoSuspect) {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "owned by uid 54321, not by you") || !strings.Contains(out, "copy it") {
		t.Errorf("the other user's dump is not refused loudly:\n%s", out)
	}
	if strings.HasPrefix(out, "the link from rank 2") {
		t.Errorf("the verdict still rests on the refused dump of rank 2:\n%s", out)
	}
}

// merge -o X --summary X (or the same file spelt another way) is refused before anything is
// written: it exited 0 and X held only the summary, the merged trace lost (issue 23, item 7).
func TestMergeSummaryIsTheOutput(t *testing.T) {
	dir := t.TempDir()
	k := testtraces.Kineto(t, "cpu_only_rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
	out := filepath.Join(dir, "m.json")
	for _, summary := range []string{out, filepath.Join(dir, ".", "m.json"), filepath.Join(dir, "sub", "..", "m.json")} {
		os.Mkdir(filepath.Join(dir, "sub"), 0o755)
		_, err := run(t, "merge", "--kineto", k, "-o", out, "--summary", summary)
		if err == nil || !strings.Contains(err.Error(), "is also the -o output") {
			t.Errorf("--summary %s with -o %s: %v", summary, out, err)
		}
		if _, serr := os.Stat(out); serr == nil {
			t.Fatalf("%s was written although the command was refused", out)
		}
	}
}

// A communicator name is the application's choice: with CR, LF or ESC in it, it printed raw and
// could forge a verdict line. It prints escaped (issue 23, item 14).
func TestCommNameCannotForgeLines(t *testing.T) {
	truths := hangtest.Plan(t, "--scenario", "link", "--culprit", "2")
	const forged = "the GPU of rank 7 (node000, pid 40007) stopped"
	for i := range truths {
		for j := range truths[i].Dump.Comms {
			truths[i].Dump.Comms[j].Name = "world\n" + forged + "\r\x1b[2K"
		}
	}
	dir, _ := hangtest.Synthesize(t, truths, hangtruth.Watchdog)
	out, err := run(t, "hang", dir)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), forged) || strings.ContainsAny(line, "\r\x1b") {
			t.Errorf("a line forged by the communicator name: %q", line)
		}
	}
	if !strings.Contains(out, `(world\nthe GPU of rank 7`) || !strings.Contains(out, `\r\x1b[2K)`) {
		t.Errorf("the name is not shown escaped:\n%s", out)
	}
}
