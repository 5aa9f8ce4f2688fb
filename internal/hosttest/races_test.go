package hosttest

import (
	"strings"
	"testing"
	"time"
)

// Communicator lifetimes that overlap with callbacks (issue 14, item 10; testhost/races.c).

// A finalize of communicator A's context after A was destroyed and B took A's table entry is
// counted and ignored: B keeps all 200 of its operations (it was finalized by the stale call,
// and its summary held 100 of 200, before contexts named their incarnation).
func TestStaleFinalizeIgnored(t *testing.T) {
	r := Start(t, Options{Args: args(6, "--iters", "200", "--fast", "stalefin")})
	CheckExact(t, r, r.Truth[0])
	if n := r.Truth[0].Counter(t, "STALE_FINALIZE"); n != 1 {
		t.Errorf("stale_finalize = %d, want 1", n)
	}
	if b := r.Summary("0x57a1e00000000002", 0); b == nil || b.Counters["stale_finalize"] != 1 {
		t.Errorf("the summary of B does not count the stale finalize: %+v", b)
	}
}

// Finalize while another thread keeps calling into the communicator returns once what started
// before it is processed: it waited the whole timeout and overshot it before (2 s → 6.15 s on
// the development machine), as it counted 1 ms naps rather than time and every new callback
// kept a window open.
func TestFinalizeWhileCallbacksArrive(t *testing.T) {
	const timeout = 2 * time.Second
	r := Start(t, Options{Args: args(6, "--iters", "50", "--fast", "finwhile"),
		Env: []string{"NCCLPROF_FINALIZE_TIMEOUT_MS=2000"}})
	took := time.Duration(r.Truth[0].FinalizeMaxNs)
	t.Logf("finalize took %v with callbacks arriving (timeout %v)", took, timeout)
	if took > timeout/4 {
		t.Errorf("finalize took %v with callbacks arriving (timeout %v): it waited for them", took, timeout)
	}
	tc := r.Truth[0].Comms[0]
	s := r.Summary(tc.Hash, tc.Rank)
	if s == nil {
		t.Fatal("no summary")
	}
	checkOps(t, tc, s)
	if strings.Contains(string(r.Stderr), "did not finish processing") {
		t.Errorf("finalize timed out:\n%s", r.Stderr)
	}
}

// When the drainer really does not finish (held back in the C-only builds), finalize gives up
// at its timeout by the clock: not earlier, and not later than one nap, even with the
// finalizing thread's timer slack raised to 20 ms (each 1 ms nap may then last 21 ms).
func TestFinalizeTimeoutKeptByTheClock(t *testing.T) {
	const timeout = 300 * time.Millisecond
	for _, variant := range []string{"asan", "tsan"} {
		t.Run(variant, func(t *testing.T) {
			r := Start(t, Options{Variant: variant, Args: args(6, "--iters", "20", "--fast", "--slack-ms", "20", "finwhile"),
				Env: []string{"NCCLPROF_FINALIZE_TIMEOUT_MS=300", "NCCLPROF_CDRAIN_HOLD_MS=20000"}})
			noSanitizerReport(t, r)
			took := time.Duration(r.Truth[0].FinalizeMaxNs)
			t.Logf("finalize took %v (timeout %v, drainer held)", took, timeout)
			if took < timeout || took > timeout+150*time.Millisecond {
				t.Errorf("finalize took %v, timeout %v", took, timeout)
			}
			if n := strings.Count(string(r.Stderr), "did not finish processing within"); n != 1 {
				t.Errorf("timeout warned %d times, want once:\n%s", n, r.Stderr)
			}
		})
	}
}

// The lifetime patterns under ThreadSanitizer (and AddressSanitizer): a stale finalize after
// reuse, finalize with callbacks arriving, callbacks on a context while its entry is finalized
// and initialized again (np_comm_rank read the rank np_init_comm was writing), and stops of
// events whose windows were recycled while other threads fill the same slots (np_late read
// the recycled slot np_commit was writing, before late records stopped reading it).
func TestLifecycleRacesUnderSanitizers(t *testing.T) {
	patterns := []struct {
		name string
		args []string
		env  []string
	}{
		{"stalefin", args(6, "--iters", "40", "--fast", "stalefin"), nil},
		{"finwhile", args(6, "--iters", "20", "--fast", "finwhile"), nil},
		{"reinit", args(6, "--iters", "4", "--cycles", "40", "--fast", "reinit"), nil},
		{"late", args(6, "--seconds", "2", "late"), []string{"NCCLPROF_WINDOW_SLOTS=256", "NCCLPROF_WINDOW_MS=1", "NCCLPROF_GRACE_MS=1"}},
	}
	for _, variant := range []string{"tsan", "asan"} {
		for _, p := range patterns {
			t.Run(variant+"/"+p.name, func(t *testing.T) {
				if p.name == "late" {
					lateUnderSanitizer(t, variant, p.args, p.env)
					return
				}
				r := Start(t, Options{Variant: variant, Args: p.args, Env: p.env})
				noSanitizerReport(t, r)
				tr := r.Truth[0]
				switch p.name {
				case "stalefin":
					if n := tr.Counter(t, "STALE_FINALIZE"); n != 1 {
						t.Errorf("stale_finalize = %d, want 1", n)
					}
				case "reinit":
					if tr.Counter(t, "STALE_CONTEXT") == 0 {
						t.Errorf("no callback named an ended communicator's context: the pattern did not occur")
					}
				}
			})
		}
	}
}

// lateUnderSanitizer runs the late pattern until it occurs (up to three runs): whether stops
// land after their windows were sealed depends on how the scheduler interleaves the two
// threads and the drainer, and a run where it did not happen proves nothing. Every run must
// be free of sanitizer reports.
func lateUnderSanitizer(t *testing.T, variant string, args, env []string) {
	for try := 1; try <= 3; try++ {
		r := Start(t, Options{Variant: variant, Args: args, Env: env})
		noSanitizerReport(t, r)
		tr := r.Truth[0]
		late, sealed := tr.Counter(t, "LATE"), tr.Counter(t, "WINDOWS_SEALED")
		t.Logf("run %d: late records %d, windows recycled %d, arena full %d, lost operations %d",
			try, late, sealed, tr.Counter(t, "ARENA_FULL"), tr.Counter(t, "LOST_OPS"))
		if late > 0 && sealed >= 10 {
			return
		}
	}
	t.Errorf("in three runs no stop arrived after its window was recycled: the pattern did not occur")
}

func noSanitizerReport(t *testing.T, r *Run) {
	t.Helper()
	if m := sanitizerReport.Find(r.Stderr); m != nil {
		t.Fatalf("sanitizer report (%s):\n%s", m, r.Stderr)
	}
}
