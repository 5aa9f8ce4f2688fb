package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ncclprof/ncclprof/internal/merge"
	"github.com/spf13/cobra"
)

func mergeCmd() *cobra.Command {
	var (
		kin, nccl, pairs []string
		out              string
		timeline, force  bool
		quiet            bool
		align            string
		cpuOffset        string
		slack            time.Duration
		kinetoBase       int64
		summaryPath      string
	)
	c := &cobra.Command{
		Use:   "merge --kineto PATH... --nccl PATH... -o OUT",
		Short: "Merge Kineto traces with the plugin's NCCL traces",
		Long: `Merge torch.profiler (Kineto) traces with the ncclprof plugin's traces.

PATH is a file, a glob (quote it) or a directory; inputs are .json or .json.gz, any Kineto era.
OUT is a .json or .json.gz file, or a directory (ending in /) for one merged file per rank.

Files are paired by what both sides record: the process id and host (and rank). With one file
on each side they are paired as given, after checking that they are the same process. --pair
KINETO=NCCL[,NCCL...] pairs explicitly.

Each NCCL kernel is linked to its operation by the "launch" rule (the plugin's KernelLaunch
interval holds the Kineto launch call on the same thread, whose correlation names the kernel),
else by the "order" rule (the n-th operation of a communicator and function is the n-th kernel
of its process group). The kernel's args gain an "nccl" object (link rule, seq, algo, proto,
channels, proxy ops and steps, algbw and busbw from the kernel's GPU time); plugin events go on
tracks of their own in the rank's process; a flow joins each operation to its kernel; kernel
channel (KernelCh) times are placed on the GPU timeline by the offset measured on linked kernels.

With several ranks, --timeline writes one trace of all ranks (processes renamed "rank N ...",
flow ids renumbered, GPU tracks kept apart); --align ends also shifts each host so that the
kernels of the same collective end together, and reports what spread remains. The timeline is
for Perfetto: HTA (HolisticTraceAnalysis) reads one trace per rank and takes a timeline for a
single rank, with wrong numbers; give HTA the per-rank files of -o DIR/ (they load with pandas 2
and 3, and HTA's analyses of them equal those of the Kineto traces alone).`,
		Example: `  ncclmerge merge --kineto rank0.pt.trace.json.gz --nccl ncclprof-node7-4242-0.trace.json -o merged.json.gz
  ncclmerge merge --kineto 'traces/*.pt.trace.json.gz' --nccl ncclprof-out/ -o merged/
  ncclmerge merge --kineto traces/ --nccl ncclprof-out/ --timeline --align ends -o job.json.gz`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unexpected argument %q: quote globs (--kineto 'dir/*.json') or repeat the flag for each file", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(kin) == 0 || out == "" {
				return fmt.Errorf("--kineto and -o are required (see ncclmerge merge --help)")
			}
			opt := merge.Options{Timeline: timeline, Force: force, LaunchSlack: int64(slack)}
			switch align {
			case "none", "":
			case "ends":
				if !timeline {
					return fmt.Errorf("--align ends needs --timeline (it aligns ranks within one trace)")
				}
				opt.AlignEnds = true
			default:
				return fmt.Errorf("--align %q: want none or ends", align)
			}
			if cpuOffset != "auto" {
				d, err := time.ParseDuration(strings.ReplaceAll(cpuOffset, "µ", "u"))
				if err != nil {
					return fmt.Errorf("--cpu-offset %q: want auto or a duration such as 150us or -2ms", cpuOffset)
				}
				ns := int64(d)
				opt.CPUOffset = &ns
			}
			if cmd.Flags().Changed("kineto-base") {
				opt.KinetoBase = &kinetoBase
			}
			if !quiet {
				opt.Log = os.Stderr
				if len(nccl) == 0 {
					fmt.Fprintln(os.Stderr, "ncclmerge merge: no --nccl given: the output holds the torch.profiler events only and no NCCL kernel is linked (pass the plugin's traces, e.g. --nccl ncclprof-out/)")
				}
			}
			var err error
			if opt.Pairs, err = parsePairs(pairs); err != nil {
				return err
			}
			kp, err := merge.ExpandFor(kin, merge.KinetoTrace)
			if err != nil {
				return err
			}
			kp = uniqueFiles(kp)
			var np []string
			if len(nccl) > 0 {
				if np, err = merge.ExpandFor(nccl, merge.PluginTrace); err != nil {
					return fmt.Errorf("--nccl %w (the plugin writes a trace only where NCCL runs: a CPU run "+
						"under gloo has none, so leave --nccl out to merge the torch.profiler traces alone)", err)
				}
				np = uniqueFiles(np)
			}
			for _, o := range merge.Outputs(kp, out, timeline) {
				if err := refuseOverwrite("-o", o, kp, np); err != nil {
					return err
				}
			}
			if summaryPath != "" {
				outs := merge.Outputs(kp, out, timeline)
				if err := checkOutput("--summary", summaryPath, "summary.json", kp, np, outs); err != nil {
					return err
				}
				if err := refuseSameOutput("--summary", summaryPath, "-o", outs); err != nil {
					return err
				}
			}
			// The GC percent is Go's default: merge.Run ends each phase (reading the plugin
			// traces, reading and linking a Kineto trace) by collecting what it left, which keeps
			// the peak near the input's size. A GC percent of 5 here re-marked the plugin events,
			// pointers throughout, a dozen times a merge: 2.13 s -> 1.82 s on nccl-heavy (median
			// of 6 runs each), the peak 1.13 -> 1.12 GB.
			sum, err := merge.Run(kp, np, out, opt)
			if err != nil {
				return err
			}
			if !quiet {
				sum.WriteText(os.Stderr)
			}
			if summaryPath != "" {
				return writeJSON(summaryPath, sum)
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringSliceVar(&kin, "kineto", nil, "torch.profiler traces: files, quoted globs or directories (repeatable, comma-separated)")
	f.StringSliceVar(&nccl, "nccl", nil, "ncclprof plugin traces (*.trace.json): files, quoted globs or directories")
	f.StringVarP(&out, "output", "o", "", "output .json / .json.gz file, or directory/ for one file per rank")
	f.BoolVar(&timeline, "timeline", false, "write all ranks into one trace, for Perfetto (for HTA, merge to -o DIR/: one file per rank)")
	f.StringVar(&align, "align", "none", "with --timeline: none, or ends (align hosts on collective kernel ends)")
	f.StringArrayVar(&pairs, "pair", nil, "pair explicitly: KINETO=NCCL[,NCCL...] (repeatable)")
	f.StringVar(&cpuOffset, "cpu-offset", "auto", "plugin → Kineto CPU clock offset: auto (measured on kernel launches) or a duration")
	f.DurationVar(&slack, "launch-slack", 0, "how far a launch call may stick out of a KernelLaunch interval (default: the plugin's clock error + 1µs)")
	f.Int64Var(&kinetoBase, "kineto-base", 0, "base time (Unix ns) for a Kineto trace with relative ts and no baseTimeNanoseconds")
	f.BoolVar(&force, "force", false, "merge files even if their metadata says they are different processes")
	f.BoolVarP(&quiet, "quiet", "q", false, "print nothing but errors")
	f.StringVar(&summaryPath, "summary", "", "also write the merge summary as JSON to this file")
	return c
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// fmtBytes prints a size for people.
func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return strconv.FormatFloat(float64(n)/(1<<30), 'f', 2, 64) + " GiB"
	case n >= 1<<20:
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
	}
	return strconv.FormatInt(n, 10) + " B"
}
