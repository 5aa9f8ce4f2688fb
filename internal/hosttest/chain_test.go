package hosttest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// chainRun runs a scenario with the recording plugin chained behind ncclprof and checks that
// it received exactly the calls the host (NCCL) made, converted to its version ver.
func chainRun(t *testing.T, abi, ver, mask int, recorder string, env []string, hostArgs ...string) (*Run, map[string]int) {
	t.Helper()
	dir := t.TempDir()
	hostLog, recLog := filepath.Join(dir, "host.log"), filepath.Join(dir, "recorder.log")
	env = append([]string{"NCCLPROF_CHAIN=" + Path(t, recorder), "NCCLPROF_HOST_CALLLOG=" + hostLog,
		"NCCLPROF_RECORDER_LOG=" + recLog, fmt.Sprintf("NCCLPROF_RECORDER_MASK=%d", mask)}, env...)
	r := Start(t, Options{Args: args(abi, hostArgs...), Env: env})
	got := checkChained(t, hostLog, recLog, abi, ver, mask)
	t.Logf("v%d → chained v%d, mask %#x: %v calls compared", abi, ver, mask, got)
	return r, got
}

// Every ABI version the host drives, every event type, three threads, PXN and graph replays:
// the chained plugin gets every call NCCL made for the types it asked for, with its own
// contexts and handles (parents included), nothing else, in each thread's order.
func TestChainedRecorderGetsExactlyWhatNCCLSent(t *testing.T) {
	for _, abi := range abis {
		t.Run(fmt.Sprintf("v%d", abi), func(t *testing.T) {
			r, got := chainRun(t, abi, abi, 0x7fff, "libnccl-profiler-recorder.so", nil,
				"--iters", "60", "--kernel", "mixed")
			CheckExact(t, r, r.Truth[0]) // and ncclprof's own results are as without a chain
			if got["start"] < 1000 || got["stop"] < 1000 || got["record"] < 500 || got["init"] != 3 || got["finalize"] != 3 {
				t.Errorf("too few calls compared: %v", got)
			}
		})
	}
}

// Small windows that rotate every 5 ms, so ncclprof reuses its slots many times during the
// run (and drops events when full): the chained plugin's handles, which hang off ncclprof's,
// must still all be found, graph replays' captured parents included.
func TestChainedRecorderAcrossWindowReuse(t *testing.T) {
	_, got := chainRun(t, 6, 6, 0x7fff, "libnccl-profiler-recorder.so",
		[]string{"NCCLPROF_WINDOW_SLOTS=256", "NCCLPROF_WINDOW_MS=5", "NCCLPROF_EVENT_MASK=all"},
		"--iters", "300", "--kernel", "mixed")
	if got["start"] < 20000 {
		t.Errorf("too few calls compared: %v", got)
	}
}

// A chained plugin older than the version NCCL calls ncclprof with gets every call converted
// as NCCL's own adapters would (parents of Coll/P2p become the Group from v4 down, names and
// hashes appear as NULL/0 below v4, v1 gets enum values, states v1–v3 do not know are not
// passed). Every pair of versions the host drives.
func TestChainedOlderPluginGetsNCCLsConversion(t *testing.T) {
	for abi := 2; abi <= 6; abi++ {
		for ver := 1; ver < abi; ver++ {
			t.Run(fmt.Sprintf("v%d_to_v%d", abi, ver), func(t *testing.T) {
				_, got := chainRun(t, abi, ver, 0x7fff, fmt.Sprintf("recorder/librecorder-v%d.so", ver), nil,
					"--iters", "30", "--kernel", "mixed")
				if got["start"] < 1000 || got["init"] != 3 {
					t.Errorf("too few calls compared: %v", got)
				}
			})
		}
	}
}

// NVIDIA's Inspector exports only v5 and asks for Coll, P2p and KernelCh: the shape of the
// chain people will use most, under NCCL 2.29+ (v6) with ncclprof's default mask (which has
// no KernelCh: those reach the chained plugin alone).
func TestChainedInspectorShape(t *testing.T) {
	const collP2pKch = 0x2 | 0x4 | 0x40
	r, got := chainRun(t, 6, 5, collP2pKch, "recorder/librecorder-v5.so", nil,
		"--iters", "60", "--kernel", "mixed")
	CheckExact(t, r, r.Truth[0])
	if got["start"] < 500 {
		t.Errorf("too few calls compared: %v", got)
	}
}

// A chained plugin whose init succeeds with a NULL context (how plugins opt out) still gets
// the events of its types with that NULL context, as from NCCL, and no finalize (NCCL 2.28+).
func TestChainedNullContext(t *testing.T) {
	for _, abi := range []int{4, 6} {
		chainRun(t, abi, abi, 0x7fff, "libnccl-profiler-recorder.so",
			[]string{"NCCLPROF_RECORDER_NULL_CTX=1"}, "--iters", "20", "mixed")
	}
}

// The empty plugin chained: ncclprof's own results stay exact.
func TestChainedEmptyPlugin(t *testing.T) {
	r := Start(t, Options{Args: args(6, "--iters", "60", "--kernel", "mixed"),
		Env: []string{"NCCLPROF_CHAIN=" + Path(t, "libnccl-profiler-empty.so")}})
	CheckExact(t, r, r.Truth[0])
	if strings.Contains(string(r.Stderr), "NCCLPROF_CHAIN") {
		t.Errorf("unexpected message:\n%s", r.Stderr)
	}
}

// NCCL's name rule: a bare name is tried as is, then as libnccl-profiler-<name>.so.
func TestChainByName(t *testing.T) {
	dir := t.TempDir()
	recLog := filepath.Join(dir, "recorder.log")
	r := Start(t, Options{Args: args(6, "--iters", "10", "allreduce"), Env: []string{
		"NCCLPROF_CHAIN=recorder", "LD_LIBRARY_PATH=" + filepath.Join(Root(t), "build"),
		"NCCLPROF_RECORDER_LOG=" + recLog}})
	CheckExact(t, r, r.Truth[0])
	b, err := os.ReadFile(recLog)
	if err != nil || !strings.Contains(string(b), " init ctx=C0 ") {
		t.Fatalf("libnccl-profiler-recorder.so was not loaded by name: %v\n%s", err, r.Stderr)
	}
}

// Chained plugins that fail: each is reported once, is never called again, and ncclprof's own
// results are exact, as without it.
func TestChainedPluginFailures(t *testing.T) {
	for _, tc := range []struct {
		name, lib, msg string
		abi            int
		env            []string
		calls          string // what the recorder's log must hold ("" for no log)
	}{
		{"missing", "/nonexistent/libnccl-profiler-gone.so", "cannot be loaded", 6, nil, ""},
		{"not_a_plugin", "libm.so.6", "has no ncclProfiler_v6", 6, nil, ""},
		{"too_new", "recorder/librecorder-v6.so", "has no ncclProfiler_v4", 4, nil, ""},
		{"bad_table", "recorder/librecorder-badtable.so", "NULL or invalid function pointer", 6, nil, ""},
		{"itself", "libnccl-profiler-ncclprof.so", "is ncclprof itself", 6, nil, ""},
		// Issue 23: a table whose startEvent points into the library's data (crashed at the first
		// call), one whose init is libc's _exit (ended the job: both pointers lie in some loaded
		// object, which was all that was checked), and a copy of ncclprof under another file
		// name (ran as a second instance: doubled summaries, each finalize waiting 5 s).
		{"data_pointer", "recorder/librecorder-datatable.so", "NULL or invalid function pointer", 6, nil, ""},
		{"init_is_exit", "recorder/librecorder-exittable.so", "NULL or invalid function pointer", 6, nil, ""},
		{"copy_of_itself", "copy", "is a copy of ncclprof", 6, nil, ""},
		{"init_error", "libnccl-profiler-recorder.so", "returned error 3 from init", 6,
			[]string{"NCCLPROF_RECORDER_FAIL=init"}, "init"},
		{"start_error", "libnccl-profiler-recorder.so", "returned error 3 from startEvent", 6,
			[]string{"NCCLPROF_RECORDER_FAIL=start"}, "init init init start"},
		{"finalize_error", "libnccl-profiler-recorder.so", "returned error 3 from finalize", 6,
			[]string{"NCCLPROF_RECORDER_FAIL=finalize", "NCCLPROF_RECORDER_MASK=0"}, "init init init finalize"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recLog := filepath.Join(t.TempDir(), "recorder.log")
			lib := tc.lib
			switch {
			case lib == "copy":
				lib = filepath.Join(t.TempDir(), "libnccl-profiler-other.so")
				b, err := os.ReadFile(Path(t, "libnccl-profiler-ncclprof.so"))
				if err != nil || os.WriteFile(lib, b, 0o755) != nil {
					t.Fatal(err)
				}
			case !strings.HasPrefix(lib, "/") && !strings.HasPrefix(lib, "libm"):
				lib = Path(t, lib)
			}
			env := append([]string{"NCCLPROF_CHAIN=" + lib, "NCCLPROF_RECORDER_LOG=" + recLog}, tc.env...)
			r := Start(t, Options{Args: args(tc.abi, "--iters", "30", "--kernel", "mixed"), Env: env})
			CheckExact(t, r, r.Truth[0])
			if n := strings.Count(string(r.Stderr), tc.msg); n != 1 {
				t.Errorf("%d messages %q, want 1; stderr:\n%s", n, tc.msg, r.Stderr)
			}
			b, _ := os.ReadFile(recLog)
			var kinds []string
			for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				if f := strings.Fields(l); len(f) > 1 {
					kinds = append(kinds, f[1])
				}
			}
			if got := strings.Join(kinds, " "); got != tc.calls {
				t.Errorf("the chained plugin got %q, want %q (nothing after its failure)", got, tc.calls)
			}
		})
	}
}

// The chain under AddressSanitizer and ThreadSanitizer (the C core; the recorder as it is):
// three threads, windows reused every 5 ms, every call also going to the chained plugin.
func TestChainedUnderSanitizers(t *testing.T) {
	for _, variant := range []string{"asan", "tsan"} {
		t.Run(variant, func(t *testing.T) {
			dir := t.TempDir()
			hostLog, recLog := filepath.Join(dir, "host.log"), filepath.Join(dir, "recorder.log")
			r := Start(t, Options{Variant: variant, Args: args(6, "--iters", "120", "--kernel", "mixed"),
				Env: []string{"NCCLPROF_WINDOW_SLOTS=512", "NCCLPROF_WINDOW_MS=5",
					"NCCLPROF_CHAIN=" + Path(t, "libnccl-profiler-recorder.so"),
					"NCCLPROF_HOST_CALLLOG=" + hostLog, "NCCLPROF_RECORDER_LOG=" + recLog}})
			if m := sanitizerReport.Find(r.Stderr); m != nil {
				t.Fatalf("sanitizer report (%s):\n%s", m, r.Stderr)
			}
			checkChained(t, hostLog, recLog, 6, 6, 0x7fff)
		})
	}
}

// Communicators destroyed and created again, with NCCL's dlclose/dlopen of ncclprof in between:
// the chained plugin is finalized and initialized with them, and its calls stay exact.
func TestChainedAcrossInitFinalizeCycles(t *testing.T) {
	_, got := chainRun(t, 6, 6, 0x7fff, "libnccl-profiler-recorder.so", nil,
		"--iters", "20", "--cycles", "4", "cycles")
	if got["init"] != 4 || got["finalize"] != 4 {
		t.Errorf("calls compared %v, want 4 inits and finalizes", got)
	}
}

// The fuzzer's random and malformed calls (NULL descriptors, unknown types, made-up and
// recycled handles) with a plugin chained, under the sanitizers: no report, and every *eHandle
// written.
func TestChainedFuzz(t *testing.T) {
	for _, variant := range []string{"asan", "tsan"} {
		for _, abi := range []int{3, 6} {
			t.Run(fmt.Sprintf("%s/v%d", variant, abi), func(t *testing.T) {
				r := Start(t, Options{Variant: variant, Args: args(abi, "--seconds", "2", "--seed",
					"7", "fuzz"), Env: []string{"NCCLPROF_CHAIN=" + Path(t, "libnccl-profiler-empty.so")}})
				if m := sanitizerReport.Find(r.Stderr); m != nil {
					t.Fatalf("sanitizer report (%s):\n%s", m, r.Stderr)
				}
				if !strings.Contains(string(r.Stdout), `"unwritten_handles":0`) {
					t.Errorf("handles left unwritten: %s", r.Stdout)
				}
			})
		}
	}
}
