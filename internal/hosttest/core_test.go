package hosttest

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

var abis = []int{1, 2, 3, 4, 5, 6}

func args(abi int, rest ...string) []string {
	return append([]string{"--abi", strconv.Itoa(abi)}, rest...)
}

// Sends and receives with three peers of distinct latency and bandwidth, through every ABI
// version: exact bytes and counts, and the regression recovers each peer's model.
func TestP2PGroundTruthEveryABI(t *testing.T) {
	for _, abi := range abis {
		t.Run(fmt.Sprintf("v%d", abi), func(t *testing.T) {
			// Windows 8x the default: the test is about exact figures, not overload, and at load
			// 7 the default's drainer fell behind (496 operations untimed, counted as such).
			r := Start(t, Options{Args: args(abi, "--iters", "600", "--nranks", "4", "p2p"),
				Env: []string{"NCCLPROF_WINDOW_SLOTS=32768"}})
			tr := r.Truth[0]
			CheckExact(t, r, tr)
			CheckFits(t, r, tr, DefaultFit)
			s := r.Summary(tr.Comms[0].Hash, 0)
			if s == nil {
				return
			}
			wantNRanks := 4
			if abi < 4 {
				wantNRanks = 0 // v1–v3 do not pass the communicator size
			}
			if s.Comm.NRanks != wantNRanks || s.Comm.ABI != abi || s.Comm.Name != "p2p" && abi >= 4 {
				t.Errorf("communicator %+v, want nranks %d abi %d", s.Comm, wantNRanks, abi)
			}
		})
	}
}

// Every event type from three threads on three communicators (PXN ops of another process,
// graph replays with stale parents, ProxyCtrl, NetPlugin, CE), with windows that rotate every
// 5 ms so operations, their children and their stops span windows.
func TestMixedAcrossWindowsEveryABI(t *testing.T) {
	for _, abi := range abis {
		t.Run(fmt.Sprintf("v%d", abi), func(t *testing.T) {
			r := Start(t, Options{
				Args: args(abi, "--iters", "300", "--kernel", "mixed"),
				Env: []string{"NCCLPROF_WINDOW_SLOTS=8192", "NCCLPROF_WINDOW_MS=5",
					"NCCLPROF_EVENT_MASK=all"},
			})
			tr := r.Truth[0]
			CheckExact(t, r, tr)
			s := r.Summary(tr.Comms[0].Hash, 0)
			if s == nil {
				return
			}
			// 300 iterations issue a PXN op every 10th: 30 ProxyOps of another process.
			if got := s.Counters["foreign_pxn_events"]; got != 30 {
				t.Errorf("foreign PXN ProxyOps: %d, want 30", got)
			}
			for _, tc := range tr.Comms {
				if cs := r.Summary(tc.Hash, tc.Rank); cs != nil && cs.Health.Windows < 2 {
					t.Errorf("%s: one window only: the time trigger did not rotate", tc.Name)
				}
			}
			for _, k := range []string{"unknown_type", "unknown_state", "bad_handle", "stale_handle", "null_descriptor"} {
				if s.Counters[k] != 0 {
					t.Errorf("counter %s = %d on well-formed input", k, s.Counters[k])
				}
			}
		})
	}
}

// KernelCh (v4+ carries GPU times): every AllReduce gets a GPU span, and its completion time
// (Coll start → last child stop) agrees with the host's own measurement.
func TestAllReduceCompletionAndGPU(t *testing.T) {
	for _, abi := range []int{3, 4, 6} {
		t.Run(fmt.Sprintf("v%d", abi), func(t *testing.T) {
			r := Start(t, Options{Args: args(abi, "--iters", "60", "--kernel", "--channels", "2", "allreduce"),
				Env: []string{"NCCLPROF_EVENT_MASK=default,kernelch"}})
			tr := r.Truth[0]
			CheckExact(t, r, tr)
			tc := tr.Comms[0]
			s := r.Summary(tc.Hash, 0)
			for _, o := range tc.Ops {
				got := s.Op(o.Func, o.Algo, o.Proto, o.NChannels)
				if got == nil {
					continue
				}
				wantGPU := o.Count
				if abi < 4 {
					wantGPU = 0 // v3 KernelCh has no GPU timestamps
				}
				if got.GPU.N != wantGPU {
					t.Errorf("%s: %d ops with GPU time, want %d", o.Func, got.GPU.N, wantGPU)
				}
				if got.Completion.N != o.Count || got.NoCompletion != 0 {
					t.Errorf("%s: completion timed for %d of %d ops", o.Func, got.Completion.N, o.Count)
				}
				// The host times Coll start → its proxy finished; the plugin Coll start → last
				// child stop. Both see the same waits; allow 15 % for callback overheads.
				if m := got.Completion.Mean(); !o.CompletionHolds(m, 0.15) {
					t.Errorf("%s: mean completion %.0f ns, host measured %.0f-%.0f ns", o.Func, m, o.CompletionMinMeanNs, o.CompletionMeanNs)
				}
			}
		})
	}
}

// ncclAlltoAll arrives as P2P tasks; with API events (v5+) it is one AlltoAll operation.
func TestAlltoAllRebuilt(t *testing.T) {
	for _, abi := range []int{4, 5, 6} {
		t.Run(fmt.Sprintf("v%d", abi), func(t *testing.T) {
			r := Start(t, Options{Args: args(abi, "--iters", "40", "--nranks", "4", "alltoall")})
			tr := r.Truth[0]
			CheckExact(t, r, tr)
			s := r.Summary(tr.Comms[0].Hash, 0)
			a2a := s.Op("AlltoAll", "", "", 2)
			if abi >= 5 && (a2a == nil || a2a.Count != 40) {
				t.Errorf("v%d: AlltoAll %+v, want 40 rebuilt operations", abi, a2a)
			}
			if abi < 5 && a2a != nil {
				t.Errorf("v%d has no API events, yet AlltoAll was rebuilt: %+v", abi, a2a)
			}
		})
	}
}

// Communicators destroyed and created again with NCCL's dlclose/dlopen in between: each
// lifetime gets its own complete summary.
func TestInitFinalizeCycles(t *testing.T) {
	r := Start(t, Options{Args: args(5, "--cycles", "4", "--iters", "20", "--fast", "cycles")})
	if len(r.Truth) != 4 {
		t.Fatalf("%d truths, want 4", len(r.Truth))
	}
	for i, tr := range r.Truth {
		t.Run(fmt.Sprint("cycle", i), func(t *testing.T) { CheckExact(t, r, tr) })
	}
}

// NCCLPROF_ENABLE=0: init succeeds with a disabled context, NCCL is told to send nothing.
func TestDisabled(t *testing.T) {
	r := Start(t, Options{Args: args(6, "--iters", "10", "--fast", "allreduce"), Env: []string{"NCCLPROF_ENABLE=0"}})
	if r.Truth[0].Mask != 0 {
		t.Errorf("activation mask %#x, want 0", r.Truth[0].Mask)
	}
	if len(r.Summaries) != 0 {
		t.Errorf("%d summaries written while disabled", len(r.Summaries))
	}
}

// NCCLPROF_EVENT_MASK accepts names and numbers; what NCCL receives is checked.
func TestEventMask(t *testing.T) {
	cases := map[string]int{
		"":                  0xf1f,
		"default":           0xf1f,
		"coll,p2p":          0x6,
		"Coll|P2p|KernelCh": 0x46,
		"0x1e":              0x1e,
		"default+kernelch":  0xf5f,
		"all":               0x7fff,
		"bogus":             0xf1f, // not understood: warning and the default
	}
	for in, want := range cases {
		t.Run(in, func(t *testing.T) {
			r := Start(t, Options{Args: args(6, "--iters", "2", "--fast", "allreduce"),
				Env: []string{"NCCLPROF_EVENT_MASK=" + in}})
			if got := r.Truth[0].Mask; got != want {
				t.Errorf("mask %q → %#x, want %#x", in, got, want)
			}
			if in == "bogus" && !strings.Contains(string(r.Stderr), "NCCLPROF_EVENT_MASK=bogus is not understood") {
				t.Errorf("no warning for a bad mask; stderr: %s", r.Stderr)
			}
		})
	}
}

// A mask set through the control API before the first communicator wins over
// NCCLPROF_EVENT_MASK and stays in force as communicators come and go (each init hands NCCL
// the mask in force, not the configured one).
func TestEventMaskFromAPIStays(t *testing.T) {
	r := Start(t, Options{Args: args(6, "--mask-api", "0x6", "--cycles", "3", "--iters", "5", "--fast", "cycles"),
		Env: []string{"NCCLPROF_EVENT_MASK=all"}})
	if len(r.Truth) != 3 {
		t.Fatalf("%d lifetimes", len(r.Truth))
	}
	for i, tr := range r.Truth {
		if tr.Mask != 0x6 {
			t.Errorf("lifetime %d: NCCL's mask %#x, want 0x6 (set through the API)", i, tr.Mask)
		}
	}
}

// Windows too small for the load: events are dropped and counted, every callback still gets a
// handle, and nothing crashes. (Operation windows alone now keep up with this scenario; traced,
// every step and detail event wants a slot of the 2×256, which overflow at once.)
func TestDropsAreCountedNotFatal(t *testing.T) {
	r := Start(t, Options{
		Args: args(6, "--iters", "400", "--kernel", "--fast", "mixed"),
		Env: []string{"NCCLPROF_WINDOW_SLOTS=256", "NCCLPROF_WINDOWS=2", "NCCLPROF_WINDOW_MS=1000",
			"NCCLPROF_TRACE=1", "NCCLPROF_EVENT_MASK=all"},
	})
	tr := r.Truth[0]
	if tr.UnwrittenHandles != 0 {
		t.Errorf("%d handles left unwritten", tr.UnwrittenHandles)
	}
	if len(r.Summaries) == 0 {
		t.Fatal("no summaries")
	}
	c := r.Summaries[0].Counters
	if c["dropped_windows_full"]+c["dropped_detail"] == 0 {
		t.Fatalf("expected drops with 2×256 slots under a burst; counters %v", c)
	}
	if c["events"] == 0 {
		t.Errorf("nothing recorded at all: %v", c)
	}
	if n := strings.Count(string(r.Stderr), "events are being dropped"); n != 1 {
		t.Errorf("drops reported %d times, want once; stderr:\n%s", n, r.Stderr)
	}
	// The warning names what gave way, per event type.
	if !regexp.MustCompile(`not tracked: (none|[A-Za-z]+ \d+)[^;]*; trace detail: (none|[A-Za-z]+ \d+)`).Match(r.Stderr) {
		t.Errorf("the drop warning does not say what was dropped per type; stderr:\n%s", r.Stderr)
	}
}

// The plugin's Go runtime stays small: NCCLPROF_GOMAXPROCS (default 2) bounds the threads it
// adds to the job. The host itself runs at most 3 threads at the end (main, proxy joined).
func TestThreadsBounded(t *testing.T) {
	r := Start(t, Options{Args: args(6, "--iters", "100", "--fast", "mixed")})
	if n := r.Truth[0].Threads; n <= 0 || n > 10 {
		t.Errorf("process has %d threads at the end, want at most 10", n)
	}
}

var sanitizerReport = regexp.MustCompile(`ERROR: AddressSanitizer|WARNING: ThreadSanitizer|runtime error:|LeakSanitizer`)

func fuzzSeconds() string {
	if s := os.Getenv("NCCLPROF_FUZZ_SECONDS"); s != "" {
		return s
	}
	return "2"
}

// Random and malformed calls from several threads for a bounded time, against the real plugin
// (Go drainer) and the AddressSanitizer/UBSan and ThreadSanitizer builds (C drainer).
func TestFuzz(t *testing.T) {
	for _, variant := range []string{"", "asan", "tsan"} {
		for _, abi := range []int{1, 3, 4, 6} {
			name := variant
			if name == "" {
				name = "plugin"
			}
			t.Run(fmt.Sprintf("%s/v%d", name, abi), func(t *testing.T) {
				start := time.Now()
				r := Start(t, Options{Variant: variant, Args: args(abi, "--seconds", fuzzSeconds(), "--seed",
					strconv.Itoa(abi), "fuzz")})
				if m := sanitizerReport.Find(r.Stderr); m != nil {
					t.Fatalf("sanitizer report (%s):\n%s", m, r.Stderr)
				}
				if !strings.Contains(string(r.Stdout), `"unwritten_handles":0`) {
					t.Errorf("handles left unwritten: %s", r.Stdout)
				}
				t.Logf("%s in %v", strings.TrimSpace(string(r.Stdout)), time.Since(start).Round(time.Millisecond))
				if variant == "" {
					if len(r.Summaries) == 0 {
						t.Fatal("fuzz run wrote no summaries")
					}
					c := r.Summaries[len(r.Summaries)-1].Counters
					for _, k := range []string{"unknown_type", "null_descriptor", "bad_handle", "stop_twice", "unknown_state"} {
						if c[k] == 0 {
							t.Errorf("fuzzer never exercised %s: %v", k, c)
						}
					}
				}
			})
		}
	}
}

// The realistic threads (user, proxy, CUDA callback) and windows rotating every 5 ms under the
// sanitizers.
func TestSanitizersMixed(t *testing.T) {
	for _, variant := range []string{"asan", "tsan"} {
		t.Run(variant, func(t *testing.T) {
			r := Start(t, Options{Variant: variant, Args: args(6, "--iters", "120", "--kernel", "mixed"),
				Env: []string{"NCCLPROF_WINDOW_SLOTS=2048", "NCCLPROF_WINDOW_MS=5"}})
			if m := sanitizerReport.Find(r.Stderr); m != nil {
				t.Fatalf("sanitizer report (%s):\n%s", m, r.Stderr)
			}
		})
	}
}
