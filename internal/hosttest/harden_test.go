package hosttest

// Issue 23 (the second adversarial audit): plugin-side hostile inputs, each reproduced through
// the real dynamic loader and checked against what the job must see.

import (
	"cmp"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Item 13: NCCLPROF_HANG_TIMEOUT_S=NaN was accepted (a timeout of about -292 years: a dump every
// 250 ms, "rewritten every -2562047h"), and so was any tiny value. Each hostile value now gives
// one message and the default (60 s), so a short run writes no dump at all.
func TestHangTimeoutRejectsNonNumbers(t *testing.T) {
	for _, v := range []string{"NaN", "-Inf", "0.001"} {
		t.Run(v, func(t *testing.T) {
			r := Start(t, Options{Args: args(6, "--iters", "20", "--logger", "allreduce"),
				Env: []string{"NCCLPROF_HANG_TIMEOUT_S=" + v}})
			want := `NCCLPROF_HANG_TIMEOUT_S="` + v + `" is not a number in [1, 86400]; using 60`
			if n := strings.Count(string(r.Stderr), want); n != 1 {
				t.Errorf("want the message %q once, got %d times; stderr:\n%s", want, n, r.Stderr)
			}
			if m, _ := filepath.Glob(filepath.Join(r.Dir, "ncclprof-hang-*.json")); len(m) != 0 {
				t.Errorf("a dump was written: %v", m)
			}
			CheckExact(t, r, r.Truth[0])
		})
	}
}

// Items 5 and 6: ranks in containers with their own PID namespaces (here `unshare -p`: every
// rank is pid 1) sharing a host name and an output directory each keep a dump of their own.
// Before, all four wrote ncclprof-hang-<host>-1.json over each other and 3 of 4 were lost.
func TestHangDumpsOfSamePIDInOneDirectory(t *testing.T) {
	Build(t)
	if err := exec.Command("unshare", "-p", "-f", "true").Run(); err != nil {
		t.Skipf("cannot make a PID namespace here (unshare -p: %v): needs root", err)
	}
	dir := t.TempDir()
	const nranks = 4
	var cmds []*exec.Cmd
	for r := 0; r < nranks; r++ {
		cmd := exec.Command("unshare", "-p", "-f", Path(t, "ncclprof-testhost"), "--lib",
			Path(t, "libnccl-profiler-ncclprof.so"), "--rank", strconv.Itoa(r), "--nranks", strconv.Itoa(nranks),
			"--scenario", "link", "--culprit", "2", "--hold-s", "2", "--dump-after-s", "0.5", "hang")
		cmd.Env = append(os.Environ(), "NCCLPROF_OUTPUT_DIR="+dir, "NCCLPROF_HANG_TIMEOUT_S=0",
			"NCCLPROF_METRICS=none", "NCCLPROF_EVENT_MASK=default,kernelch")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	for r, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	paths, _ := filepath.Glob(filepath.Join(dir, "ncclprof-hang-*.json"))
	ranks := map[int]string{}
	for _, p := range paths {
		var d struct {
			PID   int `json:"pid"`
			Comms []struct {
				Rank int `json:"rank"`
			} `json:"comms"`
		}
		b, err := os.ReadFile(p)
		if err != nil || json.Unmarshal(b, &d) != nil || len(d.Comms) != 1 || d.PID != 1 {
			t.Errorf("%s: not one pid-1 process's dump of one communicator: %v %.200s", p, err, b)
			continue
		}
		ranks[d.Comms[0].Rank] = filepath.Base(p)
	}
	if len(paths) != nranks || len(ranks) != nranks {
		t.Errorf("want %d dumps, one per rank; got %d files for ranks %v", nranks, len(paths), ranks)
	}
}

// Item 1: a chained plugin that frees its context in finalize (the recorder's strict mode aborts
// on any call naming a finalized context, or a handle issued under one) while another thread
// keeps calling back on the communicator being finalized (finwhile), or on contexts finalized
// and created again (reinit). Before, forwards raced the chained finalize: 3 of 4 finwhile runs
// aborted ("recordEventState on context C0 after its finalize"). Also under ThreadSanitizer
// (the C core's build; the recorder as it is): no report.
func TestChainedFinalizeWhileCallbacksArrive(t *testing.T) {
	for _, sc := range [][]string{
		{"--iters", "20", "--fast", "finwhile"},
		{"--iters", "4", "--cycles", "40", "--fast", "reinit"},
	} {
		for _, variant := range []string{"", "tsan"} {
			t.Run(sc[len(sc)-1]+"/"+cmp.Or(variant, "plain"), func(t *testing.T) {
				runs := 4
				if variant != "" {
					runs = 1
				}
				for run := 0; run < runs; run++ {
					r := Start(t, Options{Variant: variant, Args: args(6, sc...), Env: []string{
						"NCCLPROF_RECORDER_STRICT=1", "NCCLPROF_CHAIN=" + Path(t, "libnccl-profiler-recorder.so")}})
					if strings.Contains(string(r.Stderr), "recorder:") {
						t.Fatalf("run %d: the chained plugin was called after its finalize:\n%s", run, r.Stderr)
					}
					noSanitizerReport(t, r)
				}
			})
		}
	}
}

// Items 2 and 3: the drainer library beside the plugin is a half-copied install (cut at several
// points: inside the ELF header, the program headers, the middle of its code, one byte short)
// or a FIFO (what a stalled NFS mount does to open(), without ever returning). Before, the cut
// files killed the process with SIGBUS inside dlopen, and the FIFO blocked the loader thread
// inside dlopen holding glibc's loader lock, so every later dlopen and exit() hung. Now each is
// refused before it is mapped: one message, mask 0, the job exits 0 without waiting.
func TestDrainLibraryTruncatedOrNotAFile(t *testing.T) {
	Build(t)
	front, err := os.ReadFile(Path(t, "libnccl-profiler-ncclprof.so"))
	if err != nil {
		t.Fatal(err)
	}
	drain, err := os.ReadFile(Path(t, "libncclprof-drain.so"))
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]int{"header": 40, "phdrs": 100, "quarter": len(drain) / 4, "half": len(drain) / 2,
		"one_short": len(drain) - 1, "fifo": -1}
	for name, cut := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			lib := filepath.Join(dir, "libnccl-profiler-ncclprof.so")
			if err := os.WriteFile(lib, front, 0o755); err != nil {
				t.Fatal(err)
			}
			dpath := filepath.Join(dir, "libncclprof-drain.so")
			want := "is cut short"
			if cut < 0 {
				want = "is not a regular file"
				if err := syscall.Mkfifo(dpath, 0o644); err != nil {
					t.Fatal(err)
				}
			} else if err := os.WriteFile(dpath, drain[:cut], 0o755); err != nil {
				t.Fatal(err)
			}
			r := Start(t, Options{Lib: lib, Timeout: 60 * time.Second,
				Args: args(6, "--logger", "--iters", "100", "--fast", "allreduce")})
			checkOneMessage(t, r, "profiling is off in this process", "libncclprof-drain.so", want)
			if r.Truth[0].Mask != 0 {
				t.Errorf("activation mask %#x after the load was refused, want 0", r.Truth[0].Mask)
			}
			if r.Truth[0].FinalizeMaxNs > 1e9 {
				t.Errorf("finalize waited %.2f s for a drainer that never came", r.Truth[0].FinalizeMaxNs/1e9)
			}
		})
	}
}

// Item 11: NCCLPROF_TRACE_MAX_MB=1 with over 700 communicators, whose metadata alone nearly
// fills half the bound: the sampled trace was rotated on every record (5797 files written and
// deleted in an 8 s run, finalize timeouts; with 1 in 100 sampled, 774 files and 2 finalize
// timeouts in a 3 s run at 2e8d75e). Now a file holds a quarter of the bound in events before it
// rotates (84 files, no timeout), and the user is told once to raise the bound.
func TestSampledRotationWithManyCommunicators(t *testing.T) {
	const bound = 1 << 20
	r := Start(t, Options{Args: args(6, "--logger", "--comms", "720", "--iters", "100000000", "--seconds", "3", "soak"),
		Env: sampleEnv(100, "NCCLPROF_TRACE_MAX_MB=1", "NCCLPROF_TRACE_TRIGGER=off", "NCCLPROF_WINDOW_MS=50",
			"NCCLPROF_WINDOW_SLOTS=256", "NCCLPROF_INFLIGHT_CELLS=256", "NCCLPROF_SUMMARY=0")})
	files, sizes := 0, map[int]int{}
	for _, tr := range ReadTraces(t, r.Dir) {
		if m := sampledName.FindStringSubmatch(filepath.Base(tr.Path)); m != nil {
			n, _ := strconv.Atoi(m[1])
			files, sizes[n] = max(files, n+1), tr.RawSize
		}
	}
	for n, size := range sizes { // the newest was completed by finalize, not rotated
		if n != files-1 && size < bound/4 {
			t.Errorf("sampled file %d holds %d bytes: rotated before a quarter of the bound", n, size)
		}
	}
	if len(sizes) < 2 {
		t.Errorf("sampled files kept %v: the run wrote too little to rotate", sizes)
	}
	if strings.Contains(string(r.Stderr), "did not finish processing") {
		t.Errorf("finalize timed out:\n%.2000s", r.Stderr)
	}
	if n := strings.Count(string(r.Stderr), "Raise NCCLPROF_TRACE_MAX_MB to at least"); n != 1 {
		t.Errorf("the advice to raise the bound appeared %d times, want once:\n%.2000s", n, r.Stderr)
	}
	t.Logf("%d sampled files written in %v", files, r.Elapsed)
}

// Item 10, the dump's side: every AllReduce stays in flight (KernelCh asked for, none ever
// started), 30,000 of them paced over at least 3 s, with a 1 s watchdog. Before, the dump listed every one pending (and
// pinned each for ever); now it lists at most 8192, oldest first, and counts the rest in
// health.ops_not_listed (the documented field, which the code never set), marked partial.
func TestHangDumpListsABoundedNumber(t *testing.T) {
	r := Start(t, Options{Args: args(6, "--iters", "30000", "--pace-us", "100", "--fast", "--logger", "allreduce"),
		Env: []string{"NCCLPROF_HANG_TIMEOUT_S=1", "NCCLPROF_EVENT_MASK=default,kernelch", "NCCLPROF_METRICS=none"}})
	paths, _ := filepath.Glob(filepath.Join(r.Dir, "ncclprof-hang-*.json"))
	if len(paths) != 1 {
		t.Fatalf("want one dump, got %v; stderr:\n%.2000s", paths, r.Stderr)
	}
	var d struct {
		Comms []struct {
			Open []struct {
				StartUnixNs int64 `json:"start_unix_ns"`
			} `json:"open_ops"`
		} `json:"comms"`
		Health struct {
			Partial      bool   `json:"partial"`
			OpsNotListed uint64 `json:"ops_not_listed"`
		} `json:"health"`
	}
	b, err := os.ReadFile(paths[0])
	if err != nil || json.Unmarshal(b, &d) != nil || len(d.Comms) != 1 {
		t.Fatalf("%s: %v", paths[0], err)
	}
	listed := len(d.Comms[0].Open)
	if listed != 8192 || d.Health.OpsNotListed == 0 || !d.Health.Partial {
		t.Errorf("%d operations listed, %d not listed, partial %v: want 8192 listed, the rest counted",
			listed, d.Health.OpsNotListed, d.Health.Partial)
	}
	t.Logf("%d listed, %d not listed, %d bytes", listed, d.Health.OpsNotListed, len(b))
}

// Item 6, the writing side: in a shared sticky directory (NCCLPROF_OUTPUT_DIR=/tmp) another
// user created the dump's name first (uid 4244 guessing the next pids: here pid 1, in a PID
// namespace). The real process (uid 4243) could not rename over that file (the sticky bit), so
// its dump failed; now it claims the next name, and the other user's file is left as it was.
// Needs root (to be two users and make a PID namespace).
func TestHangDumpInStickyDirectoryNameTaken(t *testing.T) {
	Build(t)
	if os.Geteuid() != 0 || exec.Command("unshare", "-p", "-f", "true").Run() != nil {
		t.Skip("needs root: two users and a PID namespace")
	}
	// The other user must reach the directory and run the test host and the plugin: a checkout
	// under root's 0700 home (CI's) or a private TMPDIR lets them do neither, so all of it is
	// under /tmp, copied.
	parent, err := os.MkdirTemp("/tmp", "ncclprof-sticky-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	os.Chmod(parent, 0o755)
	bin := copyFor(t, parent, "ncclprof-testhost", "libnccl-profiler-ncclprof.so", "libncclprof-drain.so")
	dir := filepath.Join(parent, "shared")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o1777)
	host, _ := os.Hostname()
	squat := filepath.Join(dir, "ncclprof-hang-"+host+"-1.json")
	if err := os.WriteFile(squat, []byte(`{"forged":true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chown(squat, 4244, 4244)
	cmd := exec.Command("unshare", "-p", "-f", "setpriv", "--reuid=4243", "--regid=4243", "--clear-groups",
		filepath.Join(bin, "ncclprof-testhost"), "--lib", filepath.Join(bin, "libnccl-profiler-ncclprof.so"), "--rank", "0", "--nranks", "4", "--scenario", "link", "--culprit", "2", "--hold-s", "1.5",
		"--dump-after-s", "0.5", "hang")
	cmd.Env = append(os.Environ(), "NCCLPROF_OUTPUT_DIR="+dir, "NCCLPROF_HANG_TIMEOUT_S=0", "NCCLPROF_METRICS=none",
		"NCCLPROF_SUMMARY=0", "NCCLPROF_EVENT_MASK=default,kernelch")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if b, _ := os.ReadFile(squat); string(b) != `{"forged":true}` {
		t.Errorf("the other user's file changed: %.80q", b)
	}
	mine := filepath.Join(dir, "ncclprof-hang-"+host+"-1.1.json")
	st, err := os.Stat(mine)
	if err != nil {
		t.Fatalf("no dump under the next name: %v\n%s", err, out)
	}
	if uid := st.Sys().(*syscall.Stat_t).Uid; uid != 4243 {
		t.Errorf("%s owned by uid %d, want 4243", mine, uid)
	}
	if strings.Contains(string(out), "not written") {
		t.Errorf("a dump failed:\n%s", out)
	}
}

// copyFor copies build products into a new folder of dir that anybody can read and run, and
// returns it.
func copyFor(t *testing.T, dir string, names ...string) string {
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		b, err := os.ReadFile(Path(t, n))
		if err == nil {
			err = os.WriteFile(filepath.Join(bin, n), b, 0o755)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return bin
}

// Item 13, the C side: strtoull takes a sign and wraps, so a negative number could land inside
// the range ("-18446744073709551612" read as 4 windows) and be taken silently.
func TestCSettingsRejectNegativeNumbers(t *testing.T) {
	r := Start(t, Options{Args: args(6, "--iters", "20", "--logger", "allreduce"),
		Env: []string{"NCCLPROF_WINDOWS=-18446744073709551612"}})
	want := "NCCLPROF_WINDOWS=-18446744073709551612 is not a number in [2, "
	if !strings.Contains(string(r.Stderr), want) {
		t.Errorf("no message %q; stderr:\n%s", want, r.Stderr)
	}
	CheckExact(t, r, r.Truth[0])
}
