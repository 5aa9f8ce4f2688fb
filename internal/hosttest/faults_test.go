package hosttest

import (
	"encoding/json"
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
	// From the second lifetime: the Go drainer starts on its own thread at the first
	// communicator and may still be starting when the first lifetime's truth is written (before
	// its finalize), so the first count can miss the runtime's threads.
	first, last := r.Truth[1].Threads, r.Truth[cycles-1].Threads
	if last > first+2 || last > 10 {
		t.Errorf("threads grew from %d after the second lifetime to %d after the last", first, last)
	}
	if len(r.Stderr) != 0 {
		t.Errorf("messages during reloads:\n%s", r.Stderr)
	}
}

// A flood of ProxySteps (AllReduces moved in 64-byte chunks: thousands of steps per operation,
// as fast as the proxy thread can) costs nothing the plugin must give up: steps live in the
// arena only while in flight and their transfers are folded as they stop, so every operation,
// byte and transfer is exact and nothing is dropped. (When steps took window slots, this
// flood overflowed them, and three runs lost 4 %, 34 % and 46 % of the operations.)
func TestFloodOfStepsKeepsEverything(t *testing.T) {
	r := Start(t, Options{Args: args(6, "--iters", "1500", "--fast", "flood"),
		Env: []string{"NCCLPROF_METRICS=none"}})
	CheckExact(t, r, r.Truth[0])
	if n := r.Truth[0].TypeCounts[4]; n < 1500*100 {
		t.Fatalf("only %d ProxySteps: the flood is not one", n)
	}
}

// The same flood traced: the trace wants every step whole, the detail windows cannot hold
// them, and the steps that do not fit are dropped from the trace only, counted per type.
// Operations, bytes and transfers stay exact (the summary is complete), and the trace's
// closing metadata says it is partial and what it lost.
func TestFloodTracedLosesOnlyTraceDetail(t *testing.T) {
	r := Start(t, Options{Args: args(6, "--iters", "1500", "--fast", "flood"),
		Env: []string{"NCCLPROF_METRICS=none", "NCCLPROF_TRACE=1"}})
	tr := r.Truth[0]
	s := r.Summary(tr.Comms[0].Hash, tr.Comms[0].Rank)
	if s == nil {
		t.Fatal("no summary")
	}
	checkOps(t, tr.Comms[0], s)
	checkPairs(t, tr.Comms[0], s)
	checkChannels(t, tr.Comms[0], s)
	lost := s.Health.TraceDropped["ProxyStep"]
	if lost == 0 {
		t.Fatalf("the flood fit in the detail windows (health %+v): the test proves nothing", s.Health)
	}
	if len(s.Health.Untracked) != 0 || !s.Complete {
		t.Errorf("untracked %v, complete %v %v: only the trace may lose detail", s.Health.Untracked, s.Complete, s.Partial)
	}
	traces := ReadTraces(t, r.Dir)
	if len(traces) != 1 {
		t.Fatalf("%d traces", len(traces))
	}
	var end struct {
		Partial bool              `json:"partial"`
		Dropped map[string]uint64 `json:"dropped"`
	}
	raw, _ := json.Marshal(traces[0].End)
	if err := json.Unmarshal(raw, &end); err != nil {
		t.Fatal(err)
	}
	if !end.Partial || end.Dropped["ProxyStep"] != lost {
		t.Errorf("trace end says partial=%v dropped=%v; the summary counts %d steps dropped from the trace",
			end.Partial, end.Dropped, lost)
	}
	steps := traces[0].Count("X", "nccl_step")
	if got, want := uint64(steps)+lost, tr.TypeCounts[4]; got != want {
		t.Errorf("%d steps in the trace + %d dropped = %d, the host emitted %d", steps, lost, got, want)
	}
	t.Logf("%d steps traced, %d dropped from the trace and counted", steps, lost)
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
