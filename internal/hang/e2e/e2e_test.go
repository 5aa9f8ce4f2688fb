// Package e2e runs the real plugin through the test host's hang scenarios and checks the dumps it
// writes: on every rank with an operation in flight, within the timeout and a second, showing
// exactly what the host left open, and analyzed into exactly the planted culprit.
//
// A library without the watchdog (ncclprof_dump_inflight not exported: an old or broken build)
// fails every test here with a message that says so: a missing writer must not pass for a
// working one.
package e2e

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ncclprof/ncclprof/internal/hang"
	"github.com/ncclprof/ncclprof/internal/hang/hangtest"
	"github.com/ncclprof/ncclprof/internal/hang/hangtruth"
)

const (
	timeoutS = 2 // NCCLPROF_HANG_TIMEOUT_S of the runs
	holdS    = 5.5
	// timeTolerance: how far the plugin's times may be from the host's own readings around the
	// same callbacks (the plugin converts TSC ticks; the host reads CLOCK_REALTIME).
	timeTolerance = 50 * time.Millisecond
)

// plugin is the library under test, which must export the dump control call.
func plugin(t *testing.T) string {
	lib := hangtest.Built(t, "libnccl-profiler-ncclprof.so")
	f, err := elf.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, _ := f.DynamicSymbols()
	for _, s := range syms {
		if s.Name == "ncclprof_dump_inflight" && elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Section != elf.SHN_UNDEF {
			return lib
		}
	}
	t.Fatalf("%s does not export ncclprof_dump_inflight, so it writes no hang dump: rebuild it (make)", lib)
	return ""
}

// job is one run of a scenario: its ranks as processes, and when each dump first appeared.
type job struct {
	dir    string
	truths []hangtruth.Truth
	first  map[string]time.Time // dump file → when the test first saw it
}

// runJob starts the ranks, watches the directory for dumps while they hang, and waits for them.
func runJob(t *testing.T, lib string, nranks int, env []string, args ...string) *job {
	host := hangtest.Built(t, "ncclprof-testhost")
	j := &job{dir: t.TempDir(), first: map[string]time.Time{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // dumps are renamed into place: one seen is whole
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			m, _ := filepath.Glob(filepath.Join(j.dir, "ncclprof-hang-*.json"))
			now := time.Now()
			for _, p := range m {
				if _, ok := j.first[p]; !ok {
					j.first[p] = now
				}
			}
		}
	}()
	procs := make([]*exec.Cmd, nranks)
	for r := range procs {
		a := append([]string{"--lib", lib, "--rank", strconv.Itoa(r), "--nranks", strconv.Itoa(nranks),
			"--truth", filepath.Join(j.dir, fmt.Sprintf("truth-%d.json", r)), "--hold-s", fmt.Sprint(holdS)}, args...)
		cmd := exec.Command(host, append(a, "hang")...)
		cmd.Env = append(append(os.Environ(), "NCCLPROF_EVENT_MASK=default,kernelch", "NCCLPROF_OUTPUT_DIR="+j.dir,
			"NCCLPROF_METRICS=none"), env...)
		var out strings.Builder
		cmd.Stderr = &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[r] = cmd
		t.Cleanup(func() {
			if cmd.ProcessState == nil {
				cmd.Process.Kill()
				cmd.Wait()
			}
		})
	}
	for r, p := range procs {
		if err := p.Wait(); err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	close(stop)
	wg.Wait()
	for r := 0; r < nranks; r++ {
		tr, err := hangtruth.Read(filepath.Join(j.dir, fmt.Sprintf("truth-%d.json", r)))
		if err != nil {
			t.Fatal(err)
		}
		j.truths = append(j.truths, tr)
	}
	return j
}

// analyze reads the job's dumps and checks that the analysis names exactly the planted culprits.
func (j *job) analyze(t *testing.T) *hang.Result {
	t.Helper()
	in, err := hang.Load([]string{j.dir})
	if err != nil {
		t.Fatal(err)
	}
	res := hang.Analyze(in)
	hangtest.AssertPlanted(t, res, j.truths)
	return res
}

// Every scenario, with the watchdog: every rank with an operation in flight writes its dump
// within the timeout and a second of the hang, rewrites it while the hang lasts, shows exactly
// what the host left open; the analysis of the real dumps names exactly the planted culprit.
func TestWatchdogDumps(t *testing.T) {
	lib := plugin(t)
	for _, args := range [][]string{
		{"--scenario", "absent", "--culprit", "3"},
		{"--scenario", "gpu", "--culprit", "5"},
		{"--scenario", "link", "--culprit", "2", "--channel", "1", "--step", "3"},
		{"--scenario", "intra", "--kind", "gpu", "--culprit", "4"},
		{"--scenario", "intra", "--kind", "absent", "--culprit", "6"},
		{"--scenario", "twocomms", "--culprit", "1", "--culprit2", "2"},
		{"--scenario", "finished", "--culprit", "3", "--step", "2"},
		{"--scenario", "mismatch", "--what", "root", "--culprit", "2"},
		{"--scenario", "mismatch", "--what", "function", "--culprit", "5"},
		{"--scenario", "order", "--culprit", "6"},
		// A CUDA graph's replays, one seq for all (NCCL 2.26+): the dump numbers them by repeat.
		{"--scenario", "absent", "--culprit", "3", "--replays"},
		{"--scenario", "mismatch", "--what", "count", "--culprit", "2", "--replays"},
		// NCCL before 2.27 (ABI v3): a send refused for want of a buffer shows only on its
		// ProxyOp (SendRemFifoWait), which the plugin's dump carries.
		{"--scenario", "order", "--culprit", "6", "--abi", "3"},
		{"--scenario", "link", "--culprit", "2", "--channel", "1", "--step", "3", "--abi", "3"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			j := runJob(t, lib, 8, []string{"NCCLPROF_HANG_TIMEOUT_S=" + strconv.Itoa(timeoutS)}, args...)
			for _, tr := range j.truths {
				path := filepath.Join(j.dir, hang.FileName(tr.Dump.Host, tr.Dump.PID))
				seen, ok := j.first[path]
				if !tr.HasOpen {
					continue // nothing in flight: the watchdog has nothing to report (it may still write)
				}
				if !ok {
					t.Errorf("rank %d (pid %d) had an operation in flight and wrote no dump", tr.JobRank, tr.Dump.PID)
					continue
				}
				if late := seen.Sub(time.Unix(0, tr.HungNs)); late > (timeoutS+1)*time.Second {
					t.Errorf("rank %d: first dump %v after the hang, more than the timeout (%d s) and a second", tr.JobRank, late, timeoutS)
				} else {
					t.Logf("rank %d: first dump %v after the hang", tr.JobRank, late.Round(time.Millisecond))
				}
				d, err := hang.ReadFile(path)
				if err != nil {
					t.Errorf("rank %d: %v", tr.JobRank, err)
					continue
				}
				if d.Reason != hang.ReasonTimeout || d.TimeoutS != timeoutS || d.DumpsWritten < 2 || d.FirstDetectedUnixNs <= 0 || !d.Simulated {
					t.Errorf("rank %d: reason %q, timeout %v, dumps written %d (want 2 or more in %.1f s), first detected %d, simulated %v",
						tr.JobRank, d.Reason, d.TimeoutS, d.DumpsWritten, holdS, d.FirstDetectedUnixNs, d.Simulated)
				}
				compare(t, tr, d)
			}
			res := j.analyze(t)
			if len(res.Dumps.Problems) > 0 {
				t.Errorf("problems reading the plugin's dumps: %v", res.Dumps.Problems)
			}
		})
	}
}

// On request (ncclprof_dump_inflight, the watchdog off): every process writes one, the absent
// rank too, whose dump then names it.
func TestRequestedDumps(t *testing.T) {
	lib := plugin(t)
	j := runJob(t, lib, 6, []string{"NCCLPROF_HANG_TIMEOUT_S=0"}, "--scenario", "absent", "--culprit", "4", "--dump-after-s", "1")
	for _, tr := range j.truths {
		d, err := hang.ReadFile(filepath.Join(j.dir, hang.FileName(tr.Dump.Host, tr.Dump.PID)))
		if err != nil {
			t.Errorf("rank %d: %v", tr.JobRank, err)
			continue
		}
		if d.Reason != hang.ReasonRequest || d.TimeoutS != 0 || d.DumpsWritten != 1 {
			t.Errorf("rank %d: reason %q, timeout %v, dumps written %d", tr.JobRank, d.Reason, d.TimeoutS, d.DumpsWritten)
		}
		compare(t, tr, d)
	}
	res := j.analyze(t)
	if len(res.Suspects) == 1 && res.Suspects[0].Basis != hang.BasisOwnDump {
		t.Errorf("the absent rank's own dump should name it: basis %q", res.Suspects[0].Basis)
	}
}

// compare checks a real dump against what the host left open.
func compare(t *testing.T, tr hangtruth.Truth, d *hang.Dump) {
	t.Helper()
	want := tr.Dump
	if d.Host != want.Host || d.PID != want.PID || d.EventMask != want.EventMask {
		t.Errorf("rank %d: host %s pid %d mask %d, want %s %d %d", tr.JobRank, d.Host, d.PID, d.EventMask, want.Host, want.PID, want.EventMask)
	}
	if len(d.Comms) != len(want.Comms) {
		t.Errorf("rank %d: %d communicators, want %d", tr.JobRank, len(d.Comms), len(want.Comms))
		return
	}
	for i := range want.Comms {
		g, w := d.Comms[i], want.Comms[i]
		where := fmt.Sprintf("rank %d comm %s", tr.JobRank, w.Hash)
		if g.Hash != w.Hash || g.Name != w.Name || g.Rank != w.Rank || g.NRanks != w.NRanks || g.ABI != w.ABI || !slices.Equal(g.Completed, w.Completed) {
			t.Errorf("%s: %s %s rank %d/%d abi %d completed %v, want %s %s rank %d/%d abi %d completed %v", where,
				g.Hash, g.Name, g.Rank, g.NRanks, g.ABI, g.Completed, w.Hash, w.Name, w.Rank, w.NRanks, w.ABI, w.Completed)
		}
		if !slices.EqualFunc(g.Recent, w.Recent, hang.Call.Equal) {
			t.Errorf("%s: flight record %+v, want %+v", where, g.Recent, w.Recent)
		}
		if len(g.Open) != len(w.Open) {
			t.Errorf("%s: %d open operations, want %d", where, len(g.Open), len(w.Open))
			continue
		}
		for k := range w.Open {
			compareOp(t, where, &g.Open[k], &w.Open[k])
		}
	}
}

func compareOp(t *testing.T, where string, g, w *hang.Op) {
	t.Helper()
	near := func(a, b int64) bool { return time.Duration(a-b).Abs() <= timeTolerance }
	if !g.Call().Equal(w.Call()) || g.Algorithm != w.Algorithm ||
		g.Protocol != w.Protocol || g.NChannels != w.NChannels || (g.Launched == nil) != (w.Launched == nil) || g.Launched != nil && *g.Launched != *w.Launched ||
		!near(g.StartUnixNs, w.StartUnixNs) {
		t.Errorf("%s: operation %+v, want %+v", where, *g, *w)
		return
	}
	if len(g.Kernel) != len(w.Kernel) {
		t.Errorf("%s %s seq %d: %d kernel channels, want %d", where, w.Func, w.Seq, len(g.Kernel), len(w.Kernel))
	}
	for i := 0; i < min(len(g.Kernel), len(w.Kernel)); i++ {
		gk, wk := g.Kernel[i], w.Kernel[i]
		if gk.Channel != wk.Channel || gk.Started != wk.Started || gk.Stopped != wk.Stopped || gk.GPUStartNs != wk.GPUStartNs || gk.GPUStopNs != wk.GPUStopNs {
			t.Errorf("%s %s seq %d: kernel channel %+v, want %+v", where, w.Func, w.Seq, gk, wk)
		}
	}
	if len(g.Proxy) != len(w.Proxy) {
		t.Errorf("%s %s seq %d: %d ProxyOps, want %d", where, w.Func, w.Seq, len(g.Proxy), len(w.Proxy))
		return
	}
	for i := range w.Proxy {
		gp, wp := g.Proxy[i], w.Proxy[i]
		same := gp.Channel == wp.Channel && gp.Peer == wp.Peer && gp.Direction == wp.Direction && gp.NSteps == wp.NSteps &&
			gp.StepsDone == wp.StepsDone && gp.Stopped == wp.Stopped && gp.State == wp.State && len(gp.Open) == len(wp.Open)
		for k := 0; same && k < len(wp.Open); k++ {
			same = gp.Open[k].Step == wp.Open[k].Step && gp.Open[k].State == wp.Open[k].State && near(gp.Open[k].SinceUnixNs, wp.Open[k].SinceUnixNs)
		}
		if !same {
			t.Errorf("%s %s seq %d: ProxyOp %+v, want %+v", where, w.Func, w.Seq, gp, wp)
		}
	}
}
