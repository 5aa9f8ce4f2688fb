package hosttest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// typeCats maps the host's type counts (NCCL bit order) to the trace's categories.
var typeCats = []string{"nccl_group", "nccl_coll", "nccl_p2p", "nccl_proxy", "nccl_step", "nccl_ctrl",
	"nccl_gpu", "nccl_net", "nccl_api", "nccl_api", "nccl_api", "nccl_launch", "nccl_ce", "nccl_ce", "nccl_ce"}

// Every event type, three threads, three communicators, windows rotating every 5 ms, traced
// from the first event: each recorded event is in the trace exactly once, the file is valid
// JSON that Perfetto draws as recorded (nesting, flows), and timestamps agree with the host's
// CLOCK_REALTIME.
func TestTraceEveryEventOnce(t *testing.T) {
	for _, abi := range []int{2, 4, 6} {
		t.Run(fmt.Sprintf("v%d", abi), func(t *testing.T) {
			r := Start(t, Options{Args: args(abi, "--iters", "120", "--kernel", "mixed"),
				Env: []string{"NCCLPROF_TRACE=1", "NCCLPROF_EVENT_MASK=all", "NCCLPROF_WINDOW_SLOTS=8192", "NCCLPROF_WINDOW_MS=5"}})
			traces := ReadTraces(t, r.Dir)
			if len(traces) != 1 {
				t.Fatalf("%d trace files, want 1", len(traces))
			}
			tr, truth := traces[0], r.Truth[0]
			if _, ok := tr.End["complete"]; !ok {
				t.Error("no ncclprofEnd: the file was not completed at the last finalize")
			}
			want := map[string]uint64{}
			for i, n := range truth.TypeCounts {
				want[typeCats[i]] += n
			}
			for cat, n := range want {
				if got := tr.Count("X", cat); uint64(got) != n {
					t.Errorf("%s: %d slices, %d events recorded", cat, got, n)
				}
			}
			for _, err := range tr.Check() {
				t.Error(err)
			}
			checkClock(t, tr, truth)
			if abi >= 4 {
				checkGPU(t, tr, truth)
			}
		})
	}
}

// checkClock: the host read CLOCK_REALTIME just before and after some callbacks; the trace's
// timestamp of each must lie in that bracket, give or take the documented 2 µs.
func checkClock(t *testing.T, tr *Trace, truth Truth) {
	t.Helper()
	byID := tr.ByID()
	var worst float64
	n := 0
	for _, s := range truth.ClockSamples {
		e := byID[s.Handle]
		if e == nil {
			t.Errorf("sampled event %s not in the trace", s.Handle)
			continue
		}
		ts := tr.UnixNs(e)
		worst = math.Max(worst, float64(max(s.Before-ts, ts-s.After)))
		n++
	}
	if n < 50 {
		t.Errorf("only %d clock samples", n)
	}
	if worst > 2000 {
		t.Errorf("a timestamp is %.0f ns outside the host's CLOCK_REALTIME bracket (bound 2000 ns)", worst)
	}
	t.Logf("%d timestamps checked against CLOCK_REALTIME: worst %.0f ns outside the bracket", n, worst)
}

// checkGPU: KernelCh slices are in GPU time converted to Unix time; the host's GPU clock is
// CLOCK_REALTIME + offset with drift, and the proxy sees a GPU event 300–1000 ns after it.
func checkGPU(t *testing.T, tr *Trace, truth Truth) {
	t.Helper()
	base := truth.GPUBaseRealNs
	d := truth.GPUDriftPPM * 1e-6
	var worst float64
	n := 0
	for i := range tr.Events {
		e := &tr.Events[i]
		if e.Cat != "nccl_gpu" || e.Args["clock"] != "gpu" {
			continue
		}
		g, err := strconv.ParseInt(e.Args["gpu_start_ns"].(string), 10, 64)
		if err != nil {
			t.Fatalf("gpu_start_ns %v: %v", e.Args["gpu_start_ns"], err)
		}
		real := base + int64(math.Round((float64(g-base)-truth.GPUOffsetNs)/(1+d)))
		worst = math.Max(worst, math.Abs(float64(tr.UnixNs(e)-real)))
		n++
	}
	if n == 0 {
		t.Fatal("no KernelCh slices in GPU time")
	}
	if worst > 3000 {
		t.Errorf("GPU timestamps up to %.0f ns off (bound 3000 ns)", worst)
	}
	t.Logf("%d GPU timestamps: worst %.0f ns off after converting %%globaltimer to Unix time", n, worst)
}

// A job killed mid-run leaves a trace that is valid JSON holding what was flushed.
func TestTraceSurvivesKill(t *testing.T) {
	Build(t)
	dir := t.TempDir()
	cmd := exec.Command(Path(t, "ncclprof-testhost"), "--lib", Path(t, "libnccl-profiler-ncclprof.so"),
		"--iters", "1000000", "--kernel", "mixed")
	cmd.Env = append(os.Environ(), "NCCLPROF_OUTPUT_DIR="+dir, "NCCLPROF_TRACE=1", "NCCLPROF_WINDOW_MS=20")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		files, _ := filepath.Glob(filepath.Join(dir, "*.trace.json"))
		if len(files) == 1 {
			if st, err := os.Stat(files[0]); err == nil && st.Size() > 500_000 {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	files, _ := filepath.Glob(filepath.Join(dir, "ncclprof-*.trace.json"))
	if len(files) != 1 {
		t.Fatalf("after the kill: %d traces", len(files))
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	tr, cut := killedTrace(t, b)
	if len(tr.Events) < 1000 {
		t.Fatalf("after the kill: %d events", len(tr.Events))
	}
	if _, done := tr.End["complete"]; done {
		t.Error("a killed run cannot have completed its trace")
	}
	halved := 0
	for _, err := range tr.Check() {
		// Cut inside a flush, the flow whose unit the cut went through has one end.
		if cut && (strings.HasSuffix(err.Error(), "1 starts and 0 ends") || strings.HasSuffix(err.Error(), "0 starts and 1 ends")) {
			halved++
			continue
		}
		t.Error(err)
	}
	if halved > 2 {
		t.Errorf("%d flows with one end: more than the unit the cut went through", halved)
	}
	t.Logf("killed mid-run: %d events, %d bytes, cut inside a write: %v", len(tr.Events), len(b), cut)
	// A kill inside a write may not happen in this run: the same file cut at an odd byte
	// must read the same way, up to the event before the cut.
	at := len(b) * 2 / 3
	part, cut := killedTrace(t, b[:at])
	if !cut || len(part.Events) == 0 || len(part.Events) >= len(tr.Events) {
		t.Errorf("cut at byte %d of %d: %d events (of %d), read as cut: %v", at, len(b), len(part.Events), len(tr.Events), cut)
	}
	if len(part.Events) < len(tr.Events) && !reflect.DeepEqual(part.Events, tr.Events[:len(part.Events)]) {
		t.Errorf("the events read from the cut file are not the whole file's first %d", len(part.Events))
	}
}

// killedTrace reads the trace of a killed job. Killed between flushes, it is a whole JSON
// document; killed inside a write (SIGKILL stops a long write between pages), it is that
// document cut inside the last flush, which Perfetto and ncclmerge read up to the last
// complete event: so does this, after checking the file ends cut, not damaged elsewhere.
func killedTrace(t *testing.T, b []byte) (tr Trace, cut bool) {
	t.Helper()
	if json.Valid(b) {
		if err := json.Unmarshal(b, &tr); err != nil {
			t.Fatal(err)
		}
		return tr, false
	}
	if bytes.HasSuffix(b, []byte("]}\n")) {
		t.Fatalf("the trace ends like a whole document but is not valid JSON")
	}
	last := bytes.LastIndex(b, []byte(",\n{\"ph\""))
	if last < 0 {
		t.Fatalf("the cut trace has no event")
	}
	whole := append(append([]byte{}, b[:last]...), "\n]}\n"...)
	if err := json.Unmarshal(whole, &tr); err != nil {
		t.Fatalf("the trace up to its last event start is not valid JSON: %v", err)
	}
	return tr, true
}

// The control API opens a trace window for the middle third of the iterations and labels the
// steps, without waiting for the drainer around the calls: exactly those operations are in the
// file, with their labels, the last ones included.
func TestTraceWindowAndSteps(t *testing.T) {
	r := Start(t, Options{Args: args(6, "--iters", "90", "--control", "allreduce")})
	traces := ReadTraces(t, r.Dir)
	if len(traces) != 1 {
		t.Fatalf("%d traces", len(traces))
	}
	tr := traces[0]
	if n := tr.Count("X", "nccl_coll"); n != 30 {
		t.Errorf("%d AllReduce in the window, want 30 (iterations 30–59)", n)
	}
	if _, ok := tr.End["complete"]; !ok {
		t.Error("ncclprof_trace_stop did not complete the file")
	}
	labels := map[string]bool{}
	for _, e := range tr.Events {
		if e.Name == "ncclprof_step" {
			labels[e.Args["step"].(string)] = true
		}
	}
	// Each iteration is labelled before it runs: "iter 60" is set just before the stop.
	if !labels["iter 30"] || !labels["iter 60"] || len(labels) != 31 {
		t.Errorf("step labels %v", labels)
	}
	for l := range labels {
		var i int
		if _, err := fmt.Sscanf(l, "iter %d", &i); err != nil || i < 30 || i > 60 {
			t.Errorf("label %q outside the window", l)
		}
	}
}

// With NCCLPROF_TRACE=1 the file opens only once the first window is read; the labels set
// before that are kept and written at their times, so every operation is under its own step.
func TestTraceWholeRunKeepsEarlyLabels(t *testing.T) {
	r := Start(t, Options{Args: args(6, "--iters", "40", "--labels", "allreduce"),
		Env: []string{"NCCLPROF_TRACE=1", "NCCLPROF_METRICS=none"}})
	traces := ReadTraces(t, r.Dir)
	if len(traces) != 1 {
		t.Fatalf("%d traces", len(traces))
	}
	var steps []*TraceEvent
	var colls []*TraceEvent
	for i := range traces[0].Events {
		e := &traces[0].Events[i]
		switch {
		case e.Name == "ncclprof_step":
			steps = append(steps, e)
		case e.Cat == "nccl_coll":
			colls = append(colls, e)
		}
	}
	if len(steps) != 40 || len(colls) != 40 {
		t.Fatalf("%d labels and %d AllReduces, want 40 of each", len(steps), len(colls))
	}
	sort.Slice(colls, func(i, j int) bool { return colls[i].Ts < colls[j].Ts })
	for i, c := range colls { // AllReduce i runs after label "iter i" and before "iter i+1"
		if want := fmt.Sprintf("iter %d", i); steps[i].Args["step"] != want || steps[i].Ts > c.Ts ||
			(i+1 < len(steps) && steps[i+1].Ts < c.Ts) {
			t.Fatalf("AllReduce %d at %.3f µs is not under label %q (labels: %q at %.3f µs)",
				i, c.Ts, want, steps[i].Args["step"], steps[i].Ts)
		}
	}
}

// An unwritable trace directory stops tracing with one message; the job and its summaries go on.
func TestTraceUnwritableDir(t *testing.T) {
	r := Start(t, Options{Args: args(6, "--iters", "20", "--fast", "allreduce"),
		Env: []string{"NCCLPROF_TRACE=1", "NCCLPROF_TRACE_DIR=/proc/self/ncclprof"}})
	if n := strings.Count(string(r.Stderr), "tracing stopped"); n != 1 {
		t.Errorf("%d 'tracing stopped' messages, want 1; stderr:\n%s", n, r.Stderr)
	}
	if len(r.Summaries) == 0 {
		t.Error("summaries were not written")
	}
}

// A full disk (a 2 MiB tmpfs) stops tracing; what was flushed stays valid JSON.
func TestTraceDiskFull(t *testing.T) {
	dir := t.TempDir()
	mnt := filepath.Join(dir, "full")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a small tmpfs here (needs root): %v %s", err, out)
	}
	defer exec.Command("umount", mnt).Run()
	r := Start(t, Options{Args: args(6, "--iters", "200", "--kernel", "mixed"),
		Env: []string{"NCCLPROF_TRACE=1", "NCCLPROF_TRACE_DIR=" + mnt}})
	if !strings.Contains(string(r.Stderr), "the disk is full") {
		t.Errorf("no disk-full message; stderr:\n%s", r.Stderr)
	}
	traces := ReadTraces(t, mnt)
	if len(traces) != 1 || len(traces[0].Events) == 0 {
		t.Fatalf("traces on the full disk: %d", len(traces))
	}
	if len(r.Summaries) == 0 {
		t.Error("summaries were not written")
	}
}
