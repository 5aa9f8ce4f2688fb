package hosttest

import (
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// The plugin under the resource limits that killed jobs (issue 14, item 2), through the real
// dynamic loader: the C library NCCL loads checks what its Go drainer needs before loading it,
// and when the process cannot afford it, init still succeeds, NCCL is asked for no events
// (mask 0), one message comes through NCCL's logger, and the job exits 0. Before, the Go
// runtime started inside dlopen: `ulimit -n 7` aborted the process (exit 134, "runtime:
// eventfd failed"), `ulimit -v 1000000` aborted mid-run without a summary, and 800 MB was
// fatal at dlopen.
func TestResourceLimitsTurnThePluginOff(t *testing.T) {
	for _, c := range []struct {
		ulimit, says, fix string
	}{
		{"-n 7", "file descriptors are free (RLIMIT_NOFILE 7", "raise the limit (ulimit -n)"},
		{"-v 1000000", "of address space are left under RLIMIT_AS (ulimit -v 1000000)", "raise or remove the limit"},
		{"-v 800000", "of address space are left under RLIMIT_AS (ulimit -v 800000)", "raise or remove the limit"},
		{"-v 600000", "of address space are left under RLIMIT_AS (ulimit -v 600000)", "raise or remove the limit"},
	} {
		t.Run(strings.ReplaceAll(c.ulimit, " ", ""), func(t *testing.T) {
			r := Start(t, Options{Ulimit: []string{c.ulimit}, Args: args(6, "--logger", "--iters", "100", "--fast", "mixed")})
			checkOneMessage(t, r, "profiling is off in this process: ", c.says, c.fix)
			if r.Truth[0].Mask != 0 {
				t.Errorf("activation mask %#x, want 0", r.Truth[0].Mask)
			}
			if len(r.Summaries) != 0 {
				t.Errorf("%d summaries written by a plugin that is off", len(r.Summaries))
			}
			if n := r.Truth[0].Counter(t, "INIT_DISABLED"); n == 0 {
				t.Errorf("init_disabled = 0: the communicators were not counted as not profiled")
			}
			// The empty plugin, under the same limit, runs the same job (the floor).
			Start(t, Options{Ulimit: []string{c.ulimit}, Lib: Path(t, "libnccl-profiler-empty.so"),
				Args: args(6, "--iters", "100", "--fast", "mixed")})
		})
	}
}

// Room enough under both limits: the plugin loads its drainer and every figure is exact, so the
// checks only refuse what would fail (the thresholds are in profiler/loader.c).
func TestResourceLimitsWithRoomProfile(t *testing.T) {
	r := Start(t, Options{Ulimit: []string{"-n 64", "-v 3000000"}, Args: args(6, "--logger", "--iters", "200", "--kernel", "allreduce")})
	CheckExact(t, r, r.Truth[0])
	if len(r.Stderr) != 0 {
		t.Errorf("messages:\n%s", r.Stderr)
	}
}

// The C library without its Go library beside it (a copy of one file): one message that says
// what to install, the job goes on, and NCCL is asked for no more events.
func TestDrainLibraryMissing(t *testing.T) {
	lib := pluginAlone(t)
	r := Start(t, Options{Lib: lib, Args: args(6, "--logger", "--iters", "100", "--fast", "allreduce")})
	checkOneMessage(t, r, "profiling is off in this process: cannot load its drainer",
		"libncclprof-drain.so", "side by side")
	if r.Truth[0].Mask != 0 {
		t.Errorf("activation mask %#x after the load failed, want 0", r.Truth[0].Mask)
	}
	if r.Truth[0].FinalizeMaxNs > 1e9 {
		t.Errorf("finalize waited %.2f s for a drainer that never came", r.Truth[0].FinalizeMaxNs/1e9)
	}
}

// The job grows into its own `ulimit -v` while the plugin runs (asgrow: it reserves address
// space until 150 MiB are left): the drainer stops tracing rather than grow into the limit, says
// so once, completes the trace file it had open, and keeps every operation in the summary.
func TestAddressSpaceShortStopsTracing(t *testing.T) {
	r := Start(t, Options{Ulimit: []string{"-v 2300000"}, Args: args(6, "--logger", "--iters", "200", "--fast", "asgrow"),
		Env: []string{"NCCLPROF_TRACE=1", "NCCLPROF_WINDOW_MS=100"}})
	checkOneMessage(t, r, "address space is short (", "tracing is off for the rest of this process", "ulimit -v")
	CheckExact(t, r, r.Truth[0])
	traces := ReadTraces(t, r.Dir)
	if len(traces) != 1 {
		t.Fatalf("%d trace files, want the one open when memory ran short", len(traces))
	}
	slices := 0
	for _, e := range traces[0].Events {
		if e.Ph == "X" {
			slices++
		}
	}
	if string(traces[0].End["complete"]) != "true" || slices == 0 {
		t.Errorf("the trace was not completed (complete: %s) or holds no slices (%d)", traces[0].End["complete"], slices)
	}
}

// NCCL finds the plugin by name on LD_LIBRARY_PATH (NCCL_PROFILER_PLUGIN=ncclprof), or through
// a symlink in another directory: either way the C library finds its Go drainer beside the file
// it really is, and every figure is exact.
func TestFoundByNameOrThroughSymlink(t *testing.T) {
	Build(t)
	t.Run("by-name", func(t *testing.T) {
		r := Start(t, Options{Lib: "libnccl-profiler-ncclprof.so", Env: []string{"LD_LIBRARY_PATH=" + filepath.Dir(Path(t, "x"))},
			Args: args(6, "--iters", "50", "--fast", "allreduce")})
		CheckExact(t, r, r.Truth[0])
	})
	t.Run("symlink", func(t *testing.T) {
		link := filepath.Join(t.TempDir(), "libnccl-profiler-ncclprof.so")
		if err := os.Symlink(Path(t, "libnccl-profiler-ncclprof.so"), link); err != nil {
			t.Fatal(err)
		}
		r := Start(t, Options{Lib: link, Args: args(6, "--iters", "50", "--fast", "allreduce")})
		CheckExact(t, r, r.Truth[0])
	})
}

// A forked child that creates a communicator after its parent started the drainer gets a
// disabled context and mask 0 (one message) and no Go runtime (it stays one thread); the
// parent's figures stay exact.
func TestForkedChildNeverStartsGo(t *testing.T) {
	r := Start(t, Options{Args: args(6, "--logger", "--iters", "100", "--fast", "forkinit")})
	CheckExact(t, r, r.Truth[0])
	checkOneMessage(t, r, "profiling is off in this process: ", "forked from one where the plugin had started its drainer", "")
}

// A process that loads the library and uses the control API but creates no communicator (a
// DataLoader worker, a Python control call) never starts a Go runtime: the Go library is not
// even mapped.
func TestNoCommunicatorNoGoRuntime(t *testing.T) {
	Build(t)
	out, err := exec.Command("python3", "-c", `
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.ncclprof_set_step(b"step 1"); lib.ncclprof_trace_start(None); lib.ncclprof_trace_stop()
print(lib.ncclprof_flush(100), lib.ncclprof_metrics_flush(100))
print("drain mapped" if "libncclprof-drain" in open("/proc/self/maps").read() else "drain not mapped")
`, Path(t, "libnccl-profiler-ncclprof.so")).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "2 2\ndrain not mapped" {
		t.Errorf("got %q, want flushes answering 2 (no drainer) and the Go library not mapped", got)
	}
}

var pluginLine = regexp.MustCompile(`(?m)^.*ncclprof.*$`)

// checkOneMessage: the run's only output is one plugin message, through NCCL's logger, with
// the given parts; nothing from a crashing runtime.
func checkOneMessage(t *testing.T, r *Run, parts ...string) {
	t.Helper()
	lines := pluginLine.FindAllString(string(r.Stderr), -1)
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "NCCL WARN ncclprof: ") {
		t.Fatalf("want one plugin message through NCCL's logger, got %d; stderr:\n%s", len(lines), r.Stderr)
	}
	for _, p := range parts {
		if !strings.Contains(lines[0], p) {
			t.Errorf("message lacks %q:\n%s", p, lines[0])
		}
	}
	if strings.Contains(string(r.Stderr), "runtime:") || strings.Contains(string(r.Stderr), "fatal error") {
		t.Errorf("a runtime failed:\n%s", r.Stderr)
	}
}

// The Go drainer library exports only what the C library looks up in it: cgo's glue
// (_cgo_*, crosscall2, resolver wrappers) stays local (tools/build/drain.map), and the library
// NCCL loads exports the profiler structs and the control API, nothing of Go's.
func TestExportsOnlyTheirAPI(t *testing.T) {
	Build(t)
	exports := func(lib string) []string {
		f, err := elf.Open(Path(t, lib))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		syms, err := f.DynamicSymbols()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range syms {
			if s.Section != elf.SHN_UNDEF && elf.ST_BIND(s.Info) != elf.STB_LOCAL && s.Name != "" {
				out = append(out, s.Name)
			}
		}
		sort.Strings(out)
		return out
	}
	if got := exports("libncclprof-drain.so"); strings.Join(got, " ") != "np_drain_start np_go_metrics_flush" {
		t.Errorf("the drainer library exports %v", got)
	}
	front := exports("libnccl-profiler-ncclprof.so")
	for _, s := range front {
		if !strings.HasPrefix(s, "ncclProfiler_v") && !strings.HasPrefix(s, "ncclprof_") {
			t.Errorf("the library NCCL loads exports %s", s)
		}
	}
	if len(front) < 6 {
		t.Errorf("the library NCCL loads exports only %v", front)
	}
}

// pluginAlone copies the built C library into a directory of its own, without the Go library
// it loads: it turns itself off at its first communicator.
func pluginAlone(t *testing.T) string {
	Build(t)
	lib := filepath.Join(t.TempDir(), "libnccl-profiler-ncclprof.so")
	b, err := os.ReadFile(Path(t, "libnccl-profiler-ncclprof.so"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lib, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return lib
}

// The benchmarks time a plugin that turned itself off as if it recorded (a copy without its
// drainer measured 0.34x the floor, a figure that looks like a gain): they refuse, say why, and
// tools/bench/nccl.sh fails with the message.
func TestBenchRefusesAPluginThatIsOff(t *testing.T) {
	lib := pluginAlone(t)
	out := filepath.Join(t.TempDir(), "bench")
	cmd := exec.Command("bash", filepath.Join(Root(t), "tools/bench/nccl.sh"), Path(t, "ncclprof-testhost"),
		lib, Path(t, "libnccl-profiler-empty.so"), out, "3")
	cmd.Env = append(os.Environ(), "NCCLPROF_BENCH_ROWS=no network (user thread's events only), paced")
	msg, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("nccl.sh succeeded on a plugin that is off:\n%s", msg)
	}
	for _, want := range []string{"cannot load its drainer", "is off in this process", "records nothing", "bench-nccl failed"} {
		if !strings.Contains(string(msg), want) {
			t.Errorf("output lacks %q:\n%s", want, msg)
		}
	}
}

// The queued rows of bench-nccl run whole on both libraries (each run progresses what it left
// queued before the other library's run) and report a figure for each. Not a speed test: make
// bench gives the figures.
func TestBenchQueuedRowsRun(t *testing.T) {
	Build(t)
	out := filepath.Join(t.TempDir(), "bench")
	cmd := exec.Command("bash", filepath.Join(Root(t), "tools/bench/nccl.sh"), Path(t, "ncclprof-testhost"),
		Path(t, "libnccl-profiler-ncclprof.so"), Path(t, "libnccl-profiler-empty.so"), out, "3")
	cmd.Env = append(os.Environ(), "NCCLPROF_BENCH_ROWS=queued")
	msg, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("nccl.sh: %v\n%s", err, msg)
	}
	b, err := os.ReadFile(filepath.Join(out, "bench-nccl.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Rows []struct {
			Row      string  `json:"row"`
			Floor    float64 `json:"floor_ns_per_callback"`
			Ncclprof float64 `json:"ncclprof_ns_per_callback"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("bench-nccl.json: %v\n%s", err, b)
	}
	n := 0
	for _, r := range res.Rows {
		if strings.Contains(r.Row, "queued") {
			n++
			if r.Floor <= 0 || r.Ncclprof <= 0 {
				t.Errorf("row %q: floor %.2f ns, ncclprof %.2f ns", r.Row, r.Floor, r.Ncclprof)
			}
		}
	}
	if n != 2 {
		t.Errorf("%d queued rows, want 2 (paced, unpaced):\n%s", n, b)
	}
}

// NCCLPROF_BENCH_POSITIONS=1 times each callback of the row by its position in the AllReduce:
// a 2-channel 4-step AllReduce under the default mask is 104 callbacks (the user thread's 12;
// per channel a send and a receive ProxyOp, each started, InProgress and stopped, with 4 steps
// of a start, 3 states and a stop), each timed for ncclprof and for the floor's plugin.
func TestBenchPositionsCoverTheAllReduce(t *testing.T) {
	Build(t)
	cmd := exec.Command(Path(t, "ncclprof-testhost"), "--lib", Path(t, "libnccl-profiler-ncclprof.so"),
		"--empty-lib", Path(t, "libnccl-profiler-empty.so"), "--reps", "3", "bench-nccl")
	cmd.Env = append(os.Environ(), "NCCLPROF_BENCH_POSITIONS=1", "NCCLPROF_BENCH_ROWS=default 2ch x 4 steps, unpaced",
		"NCCLPROF_OUTPUT_DIR="+t.TempDir(), "NCCLPROF_METRICS=none")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("bench-nccl: %v\n%s", err, stderr.String())
	}
	positions := 0
	for _, line := range strings.Split(stderr.String(), "\n") {
		var k int
		var prof, floor float64
		if n, _ := fmt.Sscanf(line, "%d %f %f", &k, &prof, &floor); n != 3 {
			continue
		}
		if k != positions || prof <= 0 || floor <= 0 {
			t.Errorf("position line %q: want position %d with both times > 0", line, positions)
		}
		positions++
	}
	if positions != 104 {
		t.Errorf("%d positions, want 104:\n%s", positions, stderr.String())
	}
}
