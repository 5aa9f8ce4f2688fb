package hosttest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A process with more communicators than the plugin's table (1023 slots): the ones beyond get
// a disabled context, NCCL keeps the mask the others need, the overflow is warned about once
// and counted, and every communicator that was profiled gets its exact summary.
func TestMoreCommunicatorsThanSlots(t *testing.T) {
	const profiled, total = 1023, 1100
	r := Start(t, Options{
		Args: args(6, "--comms", fmt.Sprint(total), "--fast", "manycomms"),
		// Small windows keep the 1023 mappings at 2 × 256 slots each.
		Env: []string{"NCCLPROF_WINDOW_SLOTS=256", "NCCLPROF_WINDOWS=2", "NCCLPROF_METRICS=none"},
	})
	tr := r.Truth[0]
	if len(tr.Comms) != total {
		t.Fatalf("host made %d communicators, want %d", len(tr.Comms), total)
	}
	if tr.Mask == 0 {
		t.Errorf("the overflow cleared NCCL's process-wide activation mask")
	}
	if len(r.Summaries) != profiled {
		t.Errorf("%d summaries, want %d", len(r.Summaries), profiled)
	}
	head := tr
	head.Comms = tr.Comms[:profiled]
	CheckExact(t, r, head)
	for _, tc := range tr.Comms[profiled:] {
		if r.Summary(tc.Hash, tc.Rank) != nil {
			t.Errorf("%s is beyond the table yet has a summary", tc.Name)
		}
	}
	var disabled uint64
	for _, s := range r.Summaries {
		disabled = max(disabled, s.Counters["init_disabled"])
	}
	if disabled != total-profiled {
		t.Errorf("init_disabled = %d, want %d", disabled, total-profiled)
	}
	if n := strings.Count(string(r.Stderr), "more than 1023 communicators"); n != 1 {
		t.Errorf("overflow warned %d times, want once; stderr:\n%s", n, r.Stderr)
	}
}

// fork() halfway through a busy run, as DataLoader workers do: the child runs NCCL-free code,
// calls the flushes an exit hook would (they return at once: the child's copy of the plugin
// has no drainer and must not enter Go) and exits normally; the parent's summary stays exact.
func TestForkedChildExitsCleanly(t *testing.T) {
	r := Start(t, Options{Args: args(6, "--iters", "200", "--kernel", "--fast", "fork")})
	CheckExact(t, r, r.Truth[0])
	if strings.Contains(string(r.Stderr), "forked child failed") {
		t.Errorf("child failed: %s", r.Stderr)
	}
}

// The plugin loaded, used, finalized and unloaded (dlclose) 100 times in one process, as a job
// that rebuilds its communicators does: every lifetime gets its exact summary, and the process
// does not gain threads or print warnings along the way.
func TestReloadedManyTimes(t *testing.T) {
	const cycles = 100
	r := Start(t, Options{Args: args(6, "--cycles", fmt.Sprint(cycles), "--iters", "5", "--fast", "cycles")})
	if len(r.Truth) != cycles {
		t.Fatalf("%d lifetimes recorded, want %d", len(r.Truth), cycles)
	}
	for _, tr := range r.Truth {
		CheckExact(t, r, tr)
	}
	first, last := r.Truth[0].Threads, r.Truth[cycles-1].Threads
	if last > first+2 || last > 10 {
		t.Errorf("threads grew from %d after the first lifetime to %d after the last", first, last)
	}
	if len(r.Stderr) != 0 {
		t.Errorf("messages during reloads:\n%s", r.Stderr)
	}
}

// One event type flooding: ProxySteps emitted far faster than the drainer reads them. They
// give way (dropped and counted as dropped_detail) while the reserve at the top of each window
// keeps every operation: counts and bytes stay exact. Without the reserve, three runs of this
// scenario lost 4 %, 34 % and 46 % of the operations.
func TestFloodOfStepsKeepsOperations(t *testing.T) {
	r := Start(t, Options{Args: args(6, "--iters", "1500", "--fast", "flood"),
		Env: []string{"NCCLPROF_WINDOW_SLOTS=65536", "NCCLPROF_METRICS=none"}})
	tr := r.Truth[0]
	s := r.Summary(tr.Comms[0].Hash, tr.Comms[0].Rank)
	if s == nil {
		t.Fatal("no summary")
	}
	checkOps(t, tr.Comms[0], s)
	c := s.Counters
	if c["dropped_detail"] == 0 {
		t.Fatalf("the flood did not overflow the windows (counters %v): the test proves nothing", c)
	}
	if c["dropped_windows_full"] != 0 {
		t.Errorf("%d operation events dropped despite the reserve", c["dropped_windows_full"])
	}
	if tr.UnwrittenHandles != 0 {
		t.Errorf("%d handles left unwritten", tr.UnwrittenHandles)
	}
}

// With the default configuration the plugin opens no socket at all: no listener, no
// connection. (The Prometheus endpoint and OTLP export are opt-in; see internal/telemetry.)
func TestNoSocketsByDefault(t *testing.T) {
	Build(t)
	dir := t.TempDir()
	cmd := exec.Command(Path(t, "ncclprof-testhost"), "--lib", Path(t, "libnccl-profiler-ncclprof.so"),
		"--iters", "1000000", "--kernel", "mixed") // killed below, once looked at
	cmd.Env = append(os.Environ(), "NCCLPROF_OUTPUT_DIR="+dir, "NCCLPROF_TRACE=1",
		"OTEL_METRIC_EXPORT_INTERVAL=100")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	// Look while the plugin is busy: once its trace and metrics files exist, its drainer, trace
	// writer and metrics exporter have all started.
	deadline := time.Now().Add(30 * time.Second)
	for {
		traces, _ := filepath.Glob(filepath.Join(dir, "*.trace.json"))
		metrics, _ := filepath.Glob(filepath.Join(dir, "ncclprof-metrics-*.jsonl"))
		if len(traces) > 0 && len(metrics) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the plugin wrote no trace and metrics file within 30 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		link, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", cmd.Process.Pid, fd.Name()))
		if strings.HasPrefix(link, "socket:") {
			t.Errorf("fd %s is a socket (%s)", fd.Name(), link)
		}
	}
	if len(fds) < 3 {
		t.Fatalf("%d file descriptors: the process was gone before the check", len(fds))
	}
}
