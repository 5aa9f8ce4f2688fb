package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"

	"github.com/ncclprof/ncclprof/internal/hang"
	"github.com/ncclprof/ncclprof/internal/hang/hangtruth"
	"github.com/ncclprof/ncclprof/internal/merge"
	"github.com/ncclprof/ncclprof/internal/ptrace"
	"github.com/ncclprof/ncclprof/internal/synth"
)

// benchStats times ncclmerge stats on one rank's synthesized plugin trace of at least size bytes.
func benchStats(tmp string, size int64, reps int) (*benchReport, error) {
	opt := synth.DefaultJob(8, 0)
	opt.Detail, opt.TargetBytes, opt.Only = true, size, []int{0}
	dir := filepath.Join(tmp, "stats")
	fmt.Fprintf(os.Stderr, "synthesizing a %s plugin trace …\n", fmtBytes(size))
	paths, err := synth.Job(dir, opt)
	if err != nil {
		return nil, err
	}
	st, err := os.Stat(paths[0])
	if err != nil {
		return nil, err
	}
	rep := &benchReport{InputBytes: st.Size(), CPUs: runtime.NumCPU(),
		Source: fmt.Sprintf("%s plugin trace of one rank (synthesized: every NCCL event of 1 MiB AllReduces)", fmtBytes(st.Size()))}
	r, err := medianChild(reps, "ncclmerge stats", st.Size(), "stats", "-q", paths[0])
	if err != nil {
		return nil, err
	}
	r.Note += fmt.Sprintf("; peak RSS %.2f× the input", r.PeakRSSMB*1e6/float64(st.Size()))
	rep.Results = append(rep.Results, r)
	return rep, nil
}

// benchSkew times ncclmerge skew on a job of ranks × ops and on one of half the ranks and half
// the operations: the ratio of their times against the ratio of their sizes shows the scaling.
func benchSkew(tmp string, ranks, ops, reps int, keep bool) (*benchReport, error) {
	return benchScaling(tmp, ranks, ops, reps, keep, "skew", "synthesized plugin traces", func(dir string, ranks, ops int) (string, error) {
		_, err := synth.Job(dir, synth.DefaultJob(ranks, ops))
		return dir, err
	})
}

// benchScaling times `ncclmerge <command> -q` on the traces write puts in a directory for a job of
// ranks × ops, and for one of half the ranks and half the operations.
// With keep, each job's traces stay in tmp for a later look (--keep).
func benchScaling(tmp string, ranks, ops, reps int, keep bool, command, source string, write func(dir string, ranks, ops int) (string, error)) (*benchReport, error) {
	if ranks < 4 || ops < 20 {
		return nil, fmt.Errorf("--ranks at least 4 and --ops at least 20")
	}
	rep := &benchReport{CPUs: runtime.NumCPU(), Source: fmt.Sprintf("%s: %d ranks × %d collectives, and %d × %d",
		source, ranks, ops, ranks/2, ops/2)}
	var secs [2]float64
	for i, size := range [][2]int{{ranks / 2, ops / 2}, {ranks, ops}} {
		dir := filepath.Join(tmp, fmt.Sprintf("%s-%dx%d", command, size[0], size[1]))
		fmt.Fprintf(os.Stderr, "synthesizing %d ranks × %d collectives …\n", size[0], size[1])
		in, err := write(dir, size[0], size[1])
		if err != nil {
			return nil, err
		}
		var bytes int64
		files, _ := filepath.Glob(filepath.Join(in, "*"))
		for _, p := range files {
			if st, err := os.Stat(p); err == nil {
				bytes += st.Size()
			}
		}
		r, err := medianChild(reps, fmt.Sprintf("ncclmerge %s %d × %d", command, size[0], size[1]), bytes, command, "-q", in)
		if err != nil {
			return nil, err
		}
		r.Note += fmt.Sprintf("; %d operations, %s of traces, %.0f ns per operation", size[0]*size[1], fmtBytes(bytes),
			r.Seconds*1e9/float64(size[0]*size[1]))
		secs[i] = r.Seconds
		rep.Results = append(rep.Results, r)
		if keep {
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			return nil, err
		}
	}
	rep.Summary = fmt.Sprintf("4× the operations took %.2f× the time (linear: 4)", secs[1]/secs[0])
	return rep, nil
}

// peakEnv names a file where ncclmerge writes its peak resident memory when it exits. A child's
// rusage peak would count the pages it shared with this process before exec (the synthesized
// input's generator); the kernel's VmHWM of the child itself does not.
const peakEnv = "NCCLMERGE_PEAK_FILE"

// writePeak writes this process's VmHWM (KiB) to $NCCLMERGE_PEAK_FILE, if set.
func writePeak() {
	path := os.Getenv(peakEnv)
	if path == "" {
		return
	}
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			os.WriteFile(path, []byte(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB"))), 0o644)
		}
	}
}

// timeSelf runs this program (self) with args like timeChild, but takes the peak resident
// memory from the child's own VmHWM (MB), which it writes at exit.
func timeSelf(self string, args ...string) (secs, cpu, rss float64, err error) {
	peak := filepath.Join(os.TempDir(), fmt.Sprintf("ncclmerge-peak-%d", os.Getpid()))
	os.Setenv(peakEnv, peak)
	defer os.Unsetenv(peakEnv)
	defer os.Remove(peak)
	secs, cpu, _, err = timeChild(self, args...)
	if err != nil {
		return 0, 0, 0, err
	}
	b, _ := os.ReadFile(peak)
	kib, _ := strconv.ParseFloat(string(b), 64)
	return secs, cpu, kib * 1024 / 1e6, nil
}

// medianChild runs this program reps times with args and returns the run of median wall time.
func medianChild(reps int, what string, inBytes int64, args ...string) (benchResult, error) {
	self, err := os.Executable()
	if err != nil {
		return benchResult{}, err
	}
	var runs []benchResult
	for i := 0; i < max(reps, 1); i++ {
		fmt.Fprintf(os.Stderr, "%s: run %d of %d …\n", what, i+1, reps)
		secs, cpu, rss, err := timeSelf(self, args...)
		if err != nil {
			return benchResult{}, fmt.Errorf("%s failed: %w", what, err)
		}
		runs = append(runs, benchResult{What: what, Seconds: secs, MBps: float64(inBytes) / 1e6 / secs, CPUSecs: cpu, PeakRSSMB: rss})
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].Seconds < runs[j].Seconds })
	m := runs[len(runs)/2]
	m.Note = fmt.Sprintf("median of %d runs (%.2f–%.2f s)", len(runs), runs[0].Seconds, runs[len(runs)-1].Seconds)
	return m, nil
}

// hangBenchScenarios are the hangs timed: a name, then the test host's options.
var hangBenchScenarios = [][]string{
	{"absent", "--scenario", "absent"}, {"gpu", "--scenario", "gpu"}, {"link", "--scenario", "link"},
	{"mismatch-count", "--scenario", "mismatch", "--what", "count"}, {"mismatch-function", "--scenario", "mismatch", "--what", "function"},
	{"order", "--scenario", "order"},
}

// benchHang times ncclmerge hang over the dumps of a job of --ranks ranks, for each kind of hang
// the test host plants (its --plan: every rank's state, no plugin), the dumps written with the
// plugin's own writer; and measures what one in-flight operation adds to a dump.
func benchHang(tmp, host string, ranks, channels, reps int) (*benchReport, error) {
	if _, err := os.Stat(host); err != nil {
		return nil, fmt.Errorf("%s is missing: build the test host with `make` in the repository root (or pass --testhost)", host)
	}
	rep := &benchReport{CPUs: runtime.NumCPU(), Source: fmt.Sprintf("in-flight dumps of %d ranks, one AllReduce each on %d channels (test host --plan)", ranks, channels)}
	var perOp []int
	for _, sc := range hangBenchScenarios {
		scenario := sc[0]
		plan, dumps := filepath.Join(tmp, "plan-"+scenario), filepath.Join(tmp, "dumps-"+scenario)
		os.MkdirAll(plan, 0o755)
		fmt.Fprintf(os.Stderr, "planting a %s hang on %d ranks …\n", scenario, ranks)
		truths, err := hangtruth.Plan(host, plan, append(sc[1:], "--nranks", strconv.Itoa(ranks), "--channels", strconv.Itoa(channels),
			"--culprit", strconv.Itoa(ranks/2+1), "--step", "5")...)
		if err != nil {
			return nil, err
		}
		paths, err := hangtruth.WriteDumps(dumps, truths, hangtruth.Watchdog)
		if err != nil {
			return nil, err
		}
		var in int64
		n := 0
		for _, p := range paths {
			if p == "" {
				continue
			}
			st, err := os.Stat(p)
			if err != nil {
				return nil, err
			}
			in += st.Size()
			n++
			if b, err := opBytes(p); err == nil {
				perOp = append(perOp, b)
			}
		}
		r, err := medianChild(reps, fmt.Sprintf("ncclmerge hang (%s)", scenario), in, "hang", dumps)
		if err != nil {
			return nil, err
		}
		r.Note += fmt.Sprintf("; %d dumps, %s", n, fmtBytes(in))
		rep.Results = append(rep.Results, r)
	}
	sort.Ints(perOp)
	rep.Summary = fmt.Sprintf("one in-flight operation adds %d–%d bytes to a dump (median %d; %d channels, a send and a receive ProxyOp each, up to 8 open steps)",
		perOp[0], perOp[len(perOp)-1], perOp[len(perOp)/2], channels)
	return rep, nil
}

// opBytes is what a dump's open operations add to it: its size less that of the same dump
// without them.
func opBytes(path string) (int, error) {
	d, err := hang.ReadFile(path)
	if err != nil {
		return 0, err
	}
	full, err := hang.Marshal(d)
	if err != nil {
		return 0, err
	}
	ops := 0
	for i := range d.Comms {
		ops += len(d.Comms[i].Open)
		d.Comms[i].Open = nil
	}
	bare, err := hang.Marshal(d)
	if err != nil || ops == 0 {
		return 0, fmt.Errorf("no open operation")
	}
	return (len(full) - len(bare)) / ops, nil
}

// benchWhy times ncclmerge why like benchSkew, over each rank's merged trace: the plugin's full
// detail, a synthesized torch.profiler trace with compute before every collective, merged.
func benchWhy(tmp string, ranks, ops, reps int, keep bool) (*benchReport, error) {
	return benchScaling(tmp, ranks, ops, reps, keep, "why", "synthesized and merged traces (plugin detail + torch.profiler compute)", mergedJob)
}

// mergedJob writes a job's plugin traces (full detail, rank 1 late on every 10th collective),
// a torch.profiler trace per rank, and their merge per rank into dir/merged, which it returns.
func mergedJob(dir string, ranks, ops int) (string, error) {
	o := synth.DefaultJob(ranks, ops)
	o.Detail = true
	traces, err := synth.Job(filepath.Join(dir, "nccl"), o)
	if err != nil {
		return "", err
	}
	merged := filepath.Join(dir, "merged")
	for r, p := range traces {
		t, err := ptrace.Read(p)
		if err != nil {
			return "", err
		}
		data, _ := synth.KinetoFromPlugin(t, synth.KinetoOptions{Rank: r, WorldSize: ranks, Work: synth.DefaultWork()})
		kp := filepath.Join(dir, fmt.Sprintf("rank%d.pt.trace.json", r))
		if err := os.WriteFile(kp, data, 0o644); err != nil {
			return "", err
		}
		out := filepath.Join(merged, fmt.Sprintf("rank%d.merged.json", r))
		if _, err := merge.Run([]string{kp}, []string{p}, out, merge.Options{}); err != nil {
			return "", err
		}
		os.Remove(kp) // what is measured is the merged trace
		os.Remove(p)
	}
	return merged, nil
}
