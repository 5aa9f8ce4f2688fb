package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tidwall/gjson"
)

// tinyInputs copies the hand-checked tiny pair (internal/merge/testdata) into a directory, with a
// symlink to the plugin trace: the same file under another name.
func tinyInputs(t *testing.T) (dir, kin, nccl, link string) {
	dir = t.TempDir()
	kin, nccl, link = filepath.Join(dir, "tiny_kineto.json"), filepath.Join(dir, "tiny_nccl.trace.json"), filepath.Join(dir, "alias.trace.json")
	for src, dst := range map[string]string{"tiny_kineto.json": kin, "tiny_nccl.trace.json": nccl} {
		if err := os.WriteFile(dst, mustRead(t, filepath.Join("../../internal/merge/testdata", src)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(nccl, link); err != nil {
		t.Fatal(err)
	}
	return dir, kin, nccl, link
}

// Issue 13 #6: a file given twice — twice by name, by another path, through a symlink, by a glob
// and by name — is counted once by every command, as it is given once.
func TestFileGivenTwiceCountsOnce(t *testing.T) {
	dir, kin, nccl, link := tinyInputs(t)
	other := filepath.Join(dir, ".", "..", filepath.Base(dir), "tiny_nccl.trace.json")
	twice := [][]string{{nccl, nccl}, {nccl, other}, {nccl, link}, {filepath.Join(dir, "*.trace.json"), nccl}}
	stats := func(args ...string) int64 {
		out, err := run(t, append([]string{"stats", "-q", "--format", "json"}, args...)...)
		if err != nil {
			t.Fatalf("stats %v: %v\n%s", args, err, out)
		}
		return gjson.Get(out, "operations").Int()
	}
	once := stats(nccl)
	if once != 2 {
		t.Fatalf("the tiny trace has 2 operations, stats says %d", once)
	}
	for _, args := range twice {
		if n := stats(args...); n != once {
			t.Errorf("stats %v: %d operations, given once: %d", args, n, once)
		}
		out := filepath.Join(t.TempDir(), "r.html")
		if msg, err := run(t, append([]string{"report", "-q", "-o", out}, args...)...); err != nil {
			t.Fatalf("report: %v %s", err, msg)
		}
		if !strings.Contains(string(mustRead(t, out)), "2 NCCL operations on 1 rank ") {
			t.Errorf("report %v does not count 2 operations on 1 rank", args)
		}
	}
	// merge: the same plugin trace twice in --nccl, or a repeated --pair, links as once.
	merged := func(args ...string) gjson.Result {
		sum := filepath.Join(t.TempDir(), "s.json")
		o := filepath.Join(t.TempDir(), "m.json")
		if msg, err := run(t, append([]string{"merge", "-q", "--kineto", kin, "-o", o, "--summary", sum}, args...)...); err != nil {
			t.Fatalf("merge %v: %v %s", args, err, msg)
		}
		return gjson.Get(string(mustRead(t, sum)), "ranks.0")
	}
	want := merged("--nccl", nccl)
	for _, args := range [][]string{
		{"--nccl", nccl, "--nccl", link},
		{"--nccl", nccl + "," + nccl},
		{"--nccl", nccl, "--pair", kin + "=" + nccl, "--pair", kin + "=" + link},
		{"--nccl", nccl, "--pair", kin + "=" + nccl, "--pair", kin + "=" + nccl},
	} {
		got := merged(args...)
		if got.Get("nccl_operation_groups").Int() != want.Get("nccl_operation_groups").Int() ||
			got.Get("unlinked_operation_groups").Raw != "{}" || got.Get("linked").Raw != want.Get("linked").Raw {
			t.Errorf("merge %v: %s\nwant as once: %s", args, got.Raw, want.Raw)
		}
	}
}

// Issue 14 #5: an output that is one of the inputs (by any name, symlinks included) is refused
// before anything is written, and the input is left as it was; so is a directory given as -o.
func TestOutputIsNeverAnInput(t *testing.T) {
	dir, kin, nccl, link := tinyInputs(t)
	before := map[string][]byte{kin: mustRead(t, kin), nccl: mustRead(t, nccl)}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"report", nccl, "-o", nccl}, "-o " + nccl + " is the input " + nccl},
		{[]string{"report", nccl, "-o", link}, "is the input"},
		{[]string{"report", dir, "-o", nccl}, "is the input"},
		{[]string{"pprof", nccl, "-o", link}, "is the input"},
		{[]string{"merge", "--kineto", kin, "--nccl", nccl, "-o", kin}, "-o " + kin + " is the input"},
		{[]string{"merge", "--kineto", kin, "--nccl", nccl, "-o", filepath.Join(dir, "m.json"), "--summary", nccl}, "--summary " + nccl + " is the input"},
		{[]string{"merge", "--kineto", kin, "--nccl", nccl, "-o", filepath.Join(dir, "m.json"), "--summary", filepath.Join(dir, "m.json")}, "is the input"},
		{[]string{"report", nccl, "-o", dir}, "is a directory: give the file to write, e.g. -o " + filepath.Join(dir, "report.html")},
		{[]string{"pprof", nccl, "-o", dir}, "is a directory"},
	}
	for _, c := range cases {
		if c.args[0] == "merge" {
			os.WriteFile(filepath.Join(dir, "m.json"), []byte("{}"), 0o644) // an earlier output
		}
		_, err := run(t, append(c.args, "-q")...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error saying %q", c.args, err, c.want)
		}
		for p, b := range before {
			if string(mustRead(t, p)) != string(b) {
				t.Fatalf("%v changed the input %s", c.args, p)
			}
		}
	}
	// Into a directory, each rank's output is checked: here it would be the plugin trace given.
	out := t.TempDir()
	in := filepath.Join(out, "tiny_kineto.merged.json") // where -o DIR/ puts tiny_kineto.json's merge
	os.WriteFile(in, before[nccl], 0o644)
	if _, err := run(t, "merge", "-q", "--kineto", kin, "--nccl", in, "-o", out+"/"); err == nil || !strings.Contains(err.Error(), "is the input") {
		t.Errorf("merge -o DIR/ onto an input: %v", err)
	}
	if string(mustRead(t, in)) != string(before[nccl]) {
		t.Error("merge -o DIR/ changed an input")
	}
}

// runLimited runs ncclmerge (this test binary, see TestMain) with at most 3 GB of address space
// and returns its output and peak resident memory.
func runLimited(t *testing.T, args ...string) (string, int64, error) {
	t.Helper()
	a, _ := json.Marshal(append([]string{"ncclmerge"}, args...))
	cmd := exec.Command("bash", "-c", `ulimit -v 3000000 && exec "$0"`, os.Args[0])
	cmd.Env = append(os.Environ(), "NCCLMERGE_TEST_ARGS="+string(a))
	out, err := cmd.CombinedOutput()
	var rss int64
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		rss = ru.Maxrss << 10
	}
	return string(out), rss, err
}

// Issue 14 #4: ranks and communicator sizes are taken from the files, so a file may claim any.
// skew and report size what they hold by the ranks the traces contain: a rank outside its
// communicator is counted but not matched (and a note says so), a huge claimed size costs nothing.
// Before, rank = INT_MAX made them allocate 7.9 GB and rank = nranks = 2^30 ran out of memory.
func TestClaimedRanksDoNotSizeMemory(t *testing.T) {
	good := string(mustRead(t, "../../internal/merge/testdata/tiny_nccl.trace.json"))
	for _, c := range []struct {
		rank, nranks int
		note         string
	}{
		{math.MaxInt32, 2, "claim a rank outside 0..1, its size (e.g. 2147483647)"},
		{1 << 30, 1 << 30, "claim a rank outside 0..1073741823, its size (e.g. 1073741824)"},
		{1, 1 << 30, "no trace of rank 2, 3, 4"},
		{math.MaxInt32 - 1, math.MaxInt32, "and 2147483581 more"},
	} {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "ncclprof-a-100-0.trace.json"), []byte(strings.ReplaceAll(good, `"nranks":2`, fmt.Sprintf(`"nranks":%d`, c.nranks))), 0o644)
		hostile := strings.NewReplacer(`"rank":0`, fmt.Sprintf(`"rank":%d`, c.rank), `"nranks":2`, fmt.Sprintf(`"nranks":%d`, c.nranks), `"pid":100`, `"pid":200`).Replace(good)
		os.WriteFile(filepath.Join(dir, "ncclprof-a-200-0.trace.json"), []byte(hostile), 0o644)
		for _, args := range [][]string{{"skew", "-q", "--json", dir}, {"report", "-q", dir, "-o", filepath.Join(dir, "r.html")}} {
			out, rss, err := runLimited(t, args...)
			if err != nil {
				t.Errorf("rank %d of %d: %s: %v\n%.500s", c.rank, c.nranks, args[0], err, out)
				continue
			}
			t.Logf("%s rank %d of %d: peak %d MiB", args[0], c.rank, c.nranks, rss>>20)
			if rss > 200<<20 {
				t.Errorf("rank %d of %d: %s peaked at %d MiB for two 4 KB traces", c.rank, c.nranks, args[0], rss>>20)
			}
			if args[0] == "skew" && !strings.Contains(out, c.note) {
				t.Errorf("rank %d of %d: no note %q in\n%.800s", c.rank, c.nranks, c.note, out)
			}
		}
	}
}
