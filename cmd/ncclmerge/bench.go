package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/ncclprof/ncclprof/internal/synth"
	"github.com/spf13/cobra"
)

// benchResult is one measured step.
type benchResult struct {
	What      string  `json:"what"`
	Seconds   float64 `json:"seconds"`
	MBps      float64 `json:"mb_per_s"`
	CPUSecs   float64 `json:"cpu_seconds,omitempty"` // user + system, all threads
	PeakRSSMB float64 `json:"peak_rss_mb,omitempty"`
	Note      string  `json:"note,omitempty"`
}

func benchCmd() *cobra.Command {
	var (
		size       string
		sources    []string
		dir        string
		hta, keep  bool
		pythonPath string
		jsonOut    string
		what       string
		reps       int
		ranks, ops int
		channels   int
		testhost   string
	)
	c := &cobra.Command{
		Use:   "bench",
		Short: "Measure merge, stats, skew, why or hang throughput and memory on large synthesized inputs",
		Long: `--what merge (the default): for each --source (one trace shape each), synthesize a Kineto trace
of --size bytes by repeating the real one (each copy later in time, with its own correlation ids) and
its plugin trace, then measure --reps times (medians reported):
  - a plain read of the inputs into memory and a plain copy of them into a file (the floors),
  - ncclmerge merge of them (in a child process: wall time, MB/s of total input — Kineto and plugin
    traces —, CPU time, peak RSS over the total input), and its speed over the floors' of the
    same run ("/read", "/copy": the machine's speed moves, these ratios travel),
  - HTA's trace parser loading the same Kineto file (HolisticTraceAnalysis in --python), unless
    --hta=false, and the ratio of its time to the merge's.
A table per shape ends the report, with the load average before and after; the worst shape
(the lowest ratio to a plain read) is the one to quote.

--what stats: synthesize one rank's plugin trace of --size bytes with every event NCCL reports per
operation (API, launch, group, proxy ops, steps and their states, GPU channels, flows), and time
ncclmerge stats on it (--reps runs in child processes: median wall time, CPU, peak RSS).

--what skew: synthesize the plugin traces of --ranks ranks × --ops collectives (a straggler planted),
and of a quarter of that job (half the ranks, half the operations), and time ncclmerge skew on
both: the ratio of their times against the ratio of their sizes (4) shows how it scales.

--what why: the same jobs with the plugin's full detail (ProxyOp steps, KernelCh), a synthesized
torch.profiler trace per rank (compute before every collective), merged per rank; times
ncclmerge why over the merged traces.

--what hang: the test host plants a hang of each kind (absent, gpu, link, a count and a function
mismatch, a cross-communicator order cycle) on --ranks ranks
(1024 by default here) and lays out every rank's state; the dumps are written with the plugin's
writer, and ncclmerge hang is timed over them (--reps runs: median wall time, CPU, peak RSS).
Also reported: the bytes one in-flight operation adds to a dump, with --channels channels.

The temporary files are deleted unless --keep.`,
		Example: `  ncclmerge bench --size 512MiB --python build/hta-pandas3/bin/python \
      --source testdata/kineto/nccl_parser_config_nccl_data.json.gz \
      --source testdata/kineto/negative_queue_length_values_check_rank0.json.gz
  ncclmerge bench --what stats --size 1GiB
  ncclmerge bench --what skew --ranks 64 --ops 10000
  ncclmerge bench --what why --ranks 64 --ops 10000
  ncclmerge bench --what hang --ranks 1024`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n, err := parseSize(size)
			if err != nil {
				return err
			}
			tmp, err := os.MkdirTemp(dir, "ncclmerge-bench-")
			if err != nil {
				return err
			}
			if keep {
				defer fmt.Fprintf(os.Stderr, "the bench's files are kept in %s\n", tmp)
			} else {
				defer os.RemoveAll(tmp)
			}
			var res *benchReport
			switch what {
			case "merge":
				res, err = runBenchShapes(tmp, sources, n, hta, pythonPath, keep, reps)
			case "stats":
				res, err = benchStats(tmp, n, reps)
			case "skew":
				res, err = benchSkew(tmp, ranks, ops, reps, keep)
			case "why":
				res, err = benchWhy(tmp, ranks, ops, reps, keep)
			case "hang":
				if !cmd.Flags().Changed("ranks") {
					ranks = 1024
				}
				res, err = benchHang(tmp, testhost, ranks, channels, reps)
			default:
				return fmt.Errorf("--what %q: want merge, stats, skew, why or hang", what)
			}
			if err != nil {
				return err
			}
			printBench(res)
			if jsonOut != "" {
				return writeJSON(jsonOut, res)
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&size, "size", "1GiB", "size of the synthesized Kineto trace (e.g. 256MiB, 1GiB)")
	f.StringSliceVar(&sources, "source", []string{"testdata/kineto/nccl_parser_config_nccl_data.json.gz"},
		"Kineto traces to repeat, one shape each (repeat the flag or separate with commas): real ones, or synth:NAME for a synthesized shape ("+strings.Join(synth.ShapeNames(), ", ")+")")
	f.StringVar(&dir, "dir", os.TempDir(), "where to put the temporary files")
	f.BoolVar(&hta, "hta", true, "also time HTA's trace parser (python3 with HolisticTraceAnalysis)")
	f.StringVar(&pythonPath, "python", "python3", "the Python that has HolisticTraceAnalysis")
	f.BoolVar(&keep, "keep", false, "keep the temporary files")
	f.StringVar(&jsonOut, "json", "", "also write the results as JSON to this file")
	f.StringVar(&what, "what", "merge", "what to measure: merge, stats, skew, why or hang")
	f.IntVar(&reps, "reps", 3, "runs of each measurement (the median is reported; merge: each run a plain read, a plain copy and the merge)")
	f.IntVar(&ranks, "ranks", 64, "skew: ranks of the larger job; hang: ranks of the job (default 1024 there)")
	f.IntVar(&channels, "channels", 8, "hang: channels of the hung operation")
	f.StringVar(&testhost, "testhost", "build/ncclprof-testhost", "hang: the C test host that plants the hangs")
	f.IntVar(&ops, "ops", 10000, "skew: collectives per rank of the larger job")
	return c
}

func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"GB", 1e9}, {"MB", 1e6}, {"B", 1}}
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			var v float64
			if _, err := fmt.Sscanf(strings.TrimSuffix(s, u.suffix), "%g", &v); err != nil || v <= 0 {
				break
			}
			return int64(v * float64(u.mult)), nil
		}
	}
	return 0, fmt.Errorf("--size %q: want a size such as 512MiB or 1GiB", s)
}

type benchReport struct {
	InputBytes int64         `json:"input_bytes"`
	Copies     int           `json:"copies"`
	Source     string        `json:"source"`
	CPUs       int           `json:"cpus"`
	Results    []benchResult `json:"results"`
	Shapes     []shapeResult `json:"shapes,omitempty"`
	Summary    string        `json:"summary"`
}

// shapeResult is one trace shape's line of the summary table.
type shapeResult struct {
	Shape        string  `json:"shape"`
	KinetoBytes  int64   `json:"kineto_bytes"`
	PluginBytes  int64   `json:"plugin_bytes"`
	MergeSeconds float64 `json:"merge_seconds"`
	MergeCPU     float64 `json:"merge_cpu_seconds"`
	MBps         float64 `json:"mb_per_s_total_input"`
	RSSRatio     float64 `json:"peak_rss_over_total_input"`
	// ReadMBps: a plain read of the same input in the same run; ReadRatio, CopyRatio: the
	// merge's speed over a plain read's and a plain copy's (medians over Runs runs).
	ReadMBps   float64 `json:"plain_read_mb_per_s"`
	ReadRatio  float64 `json:"merge_over_plain_read"`
	CopyRatio  float64 `json:"merge_over_plain_copy"`
	Runs       int     `json:"runs"`
	Load       string  `json:"load_average"` // before → after the runs
	HTASeconds float64 `json:"hta_seconds,omitempty"`
	HTARatio   float64 `json:"hta_over_merge,omitempty"`
}

// runBenchShapes runs the merge benchmark on each source and adds the per-shape table.
func runBenchShapes(tmp string, sources []string, size int64, withHTA bool, python string, keep bool, reps int) (*benchReport, error) {
	all := &benchReport{CPUs: runtime.NumCPU(), Source: strings.Join(sources, ", ")}
	for _, src := range sources {
		dir, err := os.MkdirTemp(tmp, "shape-")
		if err != nil {
			return nil, err
		}
		rep, err := runBench(dir, src, size, withHTA, python, reps)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", src, err)
		}
		if !keep {
			os.RemoveAll(dir) // a shape's files go before the next one's are made
		}
		for i := range rep.Results {
			rep.Results[i].What = shapeName(src) + ": " + rep.Results[i].What
		}
		all.Results = append(all.Results, rep.Results...)
		all.Shapes = append(all.Shapes, rep.Shapes...)
		all.InputBytes += rep.InputBytes
	}
	slow, big := 0, 0
	for i, s := range all.Shapes {
		if s.ReadRatio < all.Shapes[slow].ReadRatio {
			slow = i
		}
		if s.RSSRatio > all.Shapes[big].RSSRatio {
			big = i
		}
	}
	if len(all.Shapes) > 0 {
		w, m := all.Shapes[slow], all.Shapes[big]
		all.Summary = fmt.Sprintf("slowest shape: %s, %.0f MB/s of total input, %.2f of a plain read in the same run (%.0f MB/s); most memory: %s, peak RSS %.2f× the total input",
			w.Shape, w.MBps, w.ReadRatio, w.ReadMBps, m.Shape, m.RSSRatio)
	}
	return all, nil
}

func shapeName(src string) string {
	b := filepath.Base(src)
	return strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(b, ".gz"), ".json"), ".pt.trace")
}

func runBench(tmp, source string, size int64, withHTA bool, python string, reps int) (*benchReport, error) {
	if name, ok := strings.CutPrefix(source, "synth:"); ok {
		sh, ok := synth.Shapes[name]
		if !ok {
			return nil, fmt.Errorf("--source %s: no such synthesized shape (there are %s)", source, strings.Join(synth.ShapeNames(), ", "))
		}
		// A unit of 20,000 kernels (a few MB; the shape says), repeated to the size like a real trace.
		unit := filepath.Join(tmp, name+".json")
		if err := synth.KinetoShape(unit, sh, sh.UnitKernels()); err != nil {
			return nil, err
		}
		source = unit
	}
	big := filepath.Join(tmp, "kineto.json")
	fmt.Fprintf(os.Stderr, "synthesizing %s from %s …\n", fmtBytes(size), source)
	copies, err := synth.RepeatKineto(source, big, size)
	if err != nil {
		return nil, err
	}
	// A CPU-only trace has no NCCL kernel to derive a plugin trace from: it is merged alone.
	var np string
	var pluginBytes int64
	if plugin, _, err := synth.PluginFromKineto(big, synth.PluginOptions{Seed: 1, Host: "bench"}); err == nil {
		np = filepath.Join(tmp, "ncclprof-bench-1-0.trace.json")
		if err := os.WriteFile(np, plugin, 0o644); err != nil {
			return nil, err
		}
		pluginBytes = int64(len(plugin))
	} else if !strings.Contains(err.Error(), "no NCCL kernels") {
		return nil, err
	}
	// The files just written are flushed to disk before anything is timed: the disk writing
	// them back while the merge ran cost it twice its system time on a slow disk (a merge of
	// a trace written a moment ago, not the one being measured).
	if err := flushToDisk(big, np); err != nil {
		return nil, err
	}
	runtime.GC()
	debug.FreeOSMemory()
	st, err := os.Stat(big)
	if err != nil {
		return nil, err
	}
	in := st.Size()
	rep := &benchReport{InputBytes: in + pluginBytes, Copies: copies, Source: source, CPUs: runtime.NumCPU()}
	mb := float64(in) / 1e6
	total := float64(in+pluginBytes) / 1e6

	// The floors, measured beside each merge (the machine's speed moves from minute to minute,
	// so a ratio to a floor of the same run is what travels): a plain read of the inputs, warm
	// (what any tool pays before parsing), and a plain copy of them into a file (a tool that
	// writes its input back pays at least that).
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	out := filepath.Join(tmp, "merged.json")
	args := []string{"merge", "--kineto", big, "-o", out, "--quiet"}
	if np != "" {
		args = append(args, "--nccl", np)
	}
	inputs := []string{big, np}
	load := loadAvg()
	var runs []mergeRun
	for i := 0; i < max(reps, 1); i++ {
		fmt.Fprintf(os.Stderr, "merging %s (%d copies of the source), run %d of %d …\n", fmtBytes(in), copies, i+1, max(reps, 1))
		r, err := measureMerge(self, args, out, inputs)
		if err != nil {
			return nil, err
		}
		runs = append(runs, r)
	}
	m := medianRun(runs)
	rep.Results = append(rep.Results,
		benchResult{What: "plain read (os.ReadFile)", Seconds: m.read, MBps: total / m.read, Note: "Kineto + plugin input, warm"},
		benchResult{What: "plain copy (read + write)", Seconds: m.copy, MBps: total / m.copy, Note: "Kineto + plugin input into one file"},
		benchResult{What: "ncclmerge merge", Seconds: m.merge, MBps: total / m.merge, CPUSecs: m.cpu, PeakRSSMB: m.rss,
			Note: fmt.Sprintf("MB/s of Kineto + plugin input (%.0f + %.0f MB); peak RSS %.2f× it; %.2f of a plain read, %.2f of a plain copy (medians of %d runs)",
				mb, float64(pluginBytes)/1e6, m.rss/total, m.readRatio, m.copyRatio, len(runs))})
	secs := m.merge
	shape := shapeResult{Shape: shapeName(source), KinetoBytes: in, PluginBytes: pluginBytes, MergeSeconds: secs, MergeCPU: m.cpu,
		MBps: total / secs, RSSRatio: m.rss / total, ReadMBps: total / m.read, ReadRatio: m.readRatio, CopyRatio: m.copyRatio,
		Runs: len(runs), Load: load + " → " + loadAvg()}
	if withHTA {
		fmt.Fprintf(os.Stderr, "loading it with HTA's trace parser (slow) …\n")
		script := `import sys
from hta.common.trace_parser import parse_trace_dataframe
from hta.configs.parser_config import ParserConfig
meta, df, sym = parse_trace_dataframe(sys.argv[1], ParserConfig())
print(len(df))`
		hsecs, hcpu, hrss, err := timeChild(python, "-c", script, big)
		if err != nil {
			rep.Results = append(rep.Results, benchResult{What: "HTA parse_trace_dataframe", Note: "failed: " + err.Error()})
		} else {
			rep.Results = append(rep.Results, benchResult{What: "HTA parse_trace_dataframe", Seconds: hsecs, MBps: mb / hsecs, CPUSecs: hcpu, PeakRSSMB: hrss,
				Note: fmt.Sprintf("ncclmerge merged Kineto + plugin %.1f× faster than HTA loaded the Kineto trace", hsecs/secs)})
			shape.HTASeconds, shape.HTARatio = hsecs, hsecs/secs
		}
	}
	rep.Shapes = append(rep.Shapes, shape)
	return rep, nil
}

// flushToDisk waits until the named files (empty names skipped) are on disk.
func flushToDisk(paths ...string) error {
	for _, p := range paths {
		if p == "" {
			continue
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	return nil
}

// timeChild runs a command and returns its wall time, CPU time and peak resident memory (MB).
func timeChild(name string, args ...string) (secs, cpu, rss float64, err error) {
	cmd := exec.Command(name, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	cmd.Stdout = nil
	t0 := time.Now()
	err = cmd.Run()
	secs = time.Since(t0).Seconds()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 600 {
			msg = "…" + msg[len(msg)-600:]
		}
		return 0, 0, 0, fmt.Errorf("%v: %s", err, msg)
	}
	cpu = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		rss = float64(ru.Maxrss) * 1024 / 1e6 // Linux reports KiB
	}
	return secs, cpu, rss, nil
}

func printBench(r *benchReport) {
	if r.Copies > 0 {
		fmt.Printf("input: %s Kineto trace (%d copies of %s), %d CPUs\n", fmtBytes(r.InputBytes), r.Copies, filepath.Base(r.Source), r.CPUs)
	} else {
		fmt.Printf("input: %s, %d CPUs\n", r.Source, r.CPUs)
	}
	fmt.Printf("%-36s %10s %10s %10s %12s  %s\n", "step", "seconds", "MB/s", "CPU s", "peak RSS MB", "")
	for _, x := range r.Results {
		rss, cpu := "", ""
		if x.PeakRSSMB > 0 {
			rss = fmt.Sprintf("%.0f", x.PeakRSSMB)
		}
		if x.CPUSecs > 0 {
			cpu = fmt.Sprintf("%.2f", x.CPUSecs)
		}
		fmt.Printf("%-36s %10.2f %10.0f %10s %12s  %s\n", x.What, x.Seconds, x.MBps, cpu, rss, x.Note)
	}
	if len(r.Shapes) > 0 {
		fmt.Printf("\n%-28s %9s %9s %7s %7s %6s %6s %10s %9s  %s\n", "shape", "input MB", "merge s", "MB/s", "read", "/read", "/copy", "RSS/input", "HTA/merge", "load before → after")
		for _, s := range r.Shapes {
			hta := "-"
			if s.HTARatio > 0 {
				hta = fmt.Sprintf("%.1f×", s.HTARatio)
			}
			fmt.Printf("%-28s %9.0f %9.2f %7.0f %7.0f %6.2f %6.2f %9.2f× %9s  %s\n", s.Shape, float64(s.KinetoBytes+s.PluginBytes)/1e6, s.MergeSeconds, s.MBps,
				s.ReadMBps, s.ReadRatio, s.CopyRatio, s.RSSRatio, hta, s.Load)
		}
	}
	if r.Summary != "" {
		fmt.Println(r.Summary)
	}
	fmt.Printf("load average when done: %s\n", loadAvg())
}

// loadAvg reads /proc/loadavg: other work on the machine slows every number above.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
