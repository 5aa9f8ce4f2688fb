package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ncclprof/ncclprof/internal/merge"
	"github.com/ncclprof/ncclprof/internal/skew"
	"github.com/ncclprof/ncclprof/internal/traceevent"
	"github.com/ncclprof/ncclprof/internal/tracefile"
	"github.com/ncclprof/ncclprof/internal/version"
	"github.com/tidwall/gjson"
)

// Issue 13 #8: what a newcomer tried on the command line answers in words.
func TestCommandLineAnswers(t *testing.T) {
	out, err := run(t, "--version")
	if err != nil || strings.TrimSpace(out) != "ncclmerge version "+version.Version {
		t.Errorf("--version: %v %q", err, out)
	}
	if _, err := run(t, "check"); err == nil || err.Error() != "give the traces to check: ncclmerge check TRACE... (.json or .json.gz; see --help)" {
		t.Errorf("check without a trace: %v", err)
	}
	for args, want := range map[string]string{
		"skew --k abc x":            `--k "abc": want a number (see ncclmerge skew --help)`,
		"skew --min-late 5 x":       `--min-late "5": want a duration such as 500us, 10ms or 2s (see ncclmerge skew --help)`,
		"skew --min-count 2.5 x":    `--min-count "2.5": want a whole number (see ncclmerge skew --help)`,
		"stats --frobnicate x":      "unknown flag: --frobnicate (see ncclmerge stats --help)",
		"demo --ranks many --dir x": `--ranks "many": want a whole number (see ncclmerge demo --help)`,
	} {
		_, err := run(t, strings.Fields(args)...)
		if err == nil || err.Error() != want || strings.Contains(err.Error(), "strconv") {
			t.Errorf("%s: %v, want %q", args, err, want)
		}
	}
	// Counts read as words: "1 rank", not "1 ranks".
	dir, kin, nccl, _ := tinyInputs(t)
	msg, err := run(t, "report", nccl, "-o", filepath.Join(dir, "r.html"))
	if err != nil || !strings.Contains(msg, "(2 operations, 1 rank): open it") {
		t.Errorf("report: %v %q", err, msg)
	}
	msg, _ = run(t, "stats", "-q", nccl)
	if !strings.Contains(msg, "\n2 operations, ") || strings.Contains(msg, "1 ranks") {
		t.Errorf("stats: %q", msg)
	}
	// merge without --nccl says loudly what it did; the summary names no empty plugin trace.
	stderr := captureStderr(t, func() {
		if _, err := run(t, "merge", "--kineto", kin, "-o", filepath.Join(dir, "m.json")); err != nil {
			t.Error(err)
		}
	})
	if !strings.Contains(stderr, "no --nccl given: the output holds the torch.profiler events only and no NCCL kernel is linked") ||
		!strings.Contains(stderr, "tiny_kineto.json, and no plugin trace: no NCCL operation to link") || strings.Contains(stderr, " + \n") {
		t.Errorf("merge without --nccl printed:\n%s", stderr)
	}
}

// Alignment that found nothing to align on says so instead of "over 0 collectives".
func TestNoAlignmentSaysSo(t *testing.T) {
	var b bytes.Buffer
	(&merge.Summary{Alignment: &merge.Alignment{Method: "ends"}}).WriteText(&b)
	if s := b.String(); strings.Contains(s, "0 collectives") || !strings.Contains(s, "no collective's end was seen on two hosts, so no host was shifted") {
		t.Errorf("merge: %q", s)
	}
	b.Reset()
	(&skew.Result{Options: skew.Defaults, Alignment: &skew.Alignment{Hosts: 2}}).Write(&b, "table")
	if s := b.String(); strings.Contains(s, "0 collectives") || !strings.Contains(s, "clocks of 2 hosts not aligned: no collective's end was seen on two hosts") {
		t.Errorf("skew: %q", s)
	}
	b.Reset()
	(&merge.Summary{Alignment: &merge.Alignment{Method: "ends", Collectives: 1}}).WriteText(&b)
	if !strings.Contains(b.String(), "over 1 collective:") {
		t.Errorf("merge: %q", b.String())
	}
}

// In the timeline, no two tracks of a process share a name (operations in flight together get
// lanes named apart), and no track name ends in a space. The allreduce scenario overlaps its
// operations: 17 tracks of a rank were all "NCCL ops allreduce rank 0".
func TestTimelineTrackNames(t *testing.T) {
	host, lib := "../../build/ncclprof-testhost", "../../build/libnccl-profiler-ncclprof.so"
	if _, err := os.Stat(host); err != nil {
		t.Skipf("%s is not built (run make first)", host)
	}
	dir := t.TempDir()
	if err := runDemo(demoOptions{dir: dir, host: host, lib: lib, scenario: "allreduce", ranks: 2, iters: 20, slowRank: -1}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "timeline.json.gz")
	data, _ := tracefile.ReadFile(out)
	names := map[string]int64{}
	lanes := 0
	_, err := traceevent.Read(out, data, traceevent.Options{}, func(e *traceevent.Event) error {
		if e.Ph != "M" || e.Name != "thread_name" {
			return nil
		}
		name := gjson.Get(e.Raw, "args.name").Str
		key := e.Pid.String() + "/" + name
		if tid, dup := names[key]; dup {
			t.Errorf("pid %s: tracks %d and %d are both named %q", e.Pid.String(), tid, e.Tid.Num, name)
		}
		names[key] = e.Tid.Num
		if strings.TrimSpace(name) != name {
			t.Errorf("pid %s: track name %q has spaces around it", e.Pid.String(), name)
		}
		if strings.HasPrefix(name, "NCCL ops") && strings.Contains(name, " lane ") {
			lanes++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if lanes == 0 {
		t.Log("no operations overlapped in this run: the lane names were not exercised")
	}
}

// captureStderr returns what f wrote to os.Stderr.
func captureStderr(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stderr
	os.Stderr = w
	done := make(chan string)
	go func() {
		var b bytes.Buffer
		b.ReadFrom(r)
		done <- b.String()
	}()
	f()
	os.Stderr = old
	w.Close()
	return <-done
}
