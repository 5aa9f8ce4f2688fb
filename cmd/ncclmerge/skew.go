package main

import (
	"fmt"
	"slices"
	"time"

	"github.com/ncclprof/ncclprof/internal/skew"
	"github.com/spf13/cobra"
)

func skewCmd() *cobra.Command {
	opt := skew.Defaults
	var (
		minLate     time.Duration
		align       string
		format      string
		jsonOut     bool
		quiet, fail bool
	)
	c := &cobra.Command{
		Use:   "skew TRACE...",
		Short: "Find the ranks that arrive late at collectives and make the others wait",
		Long: fmt.Sprintf(`Match each collective across ranks by NCCL's (communicator, function, seq; a CUDA graph's
replays, which share a seq from NCCL 2.26, by their order, written "seq replay n"), measure how
late each rank arrived after the collective's median arrival, and flag:

  late arrival  lateness > median + k·MAD of all lateness in the communicator (k = --k, %g),
                and at least --min-late (%s) after the median;
  slow rank     late on at least --min-count (%d) collectives, and more often than chance
                allows: at the rate of late arrivals of the communicator's other ranks, being
                late that often has a probability below --alpha (%g).

Arrival is where the waiting happens: on the GPU. With --arrival auto (the default) a collective is
compared on its NCCL kernels' starts when every rank's is known: the Kineto kernel linked in a
merged trace, else the plugin's KernelCh start (placed by its GPU clock estimate), else the first
send step's release from SendGPUWait; otherwise on Coll starts (when the CPU call reached NCCL).
A PyTorch job's CPU enqueues collectives ahead of its GPU, so a rank whose GPU is slow calls NCCL
on time while the others' kernels wait for its kernel. The output says which arrival it compared;
--arrival cpu compares Coll starts only, --arrival gpu leaves out collectives without GPU starts.

The median absolute deviation is used, not the standard deviation: stragglers are the outliers,
and a few very late arrivals inflate a standard deviation until they hide inside it.

Completion is measured too: each rank's completion (its last ProxyOp or KernelCh stop, or its GPU
kernel's end in a merged trace) minus the collective's median completion. It does not make a rank
slow: a rank that arrives late makes the others wait, while a spread of completions says the
collective itself ended unevenly (one rank's kernel or network leg took longer).

Output: the slow ranks, with how late, on which communicators and in which training steps
(ncclprof_set_step labels); every rank that was late, most often first, with how often it arrived
last; per rank, how often it completed strictly last and its completion after the median (median,
max); the collectives with the largest skew (first to last arrival), their end spread (first to
last completion), every rank's arrival and completion offsets (JSON), and where the late rank's
slice is in its trace (file, pid, tid, ts as Perfetto shows them). --format csv gives one row per
rank of each communicator; --each one row per rank of every matched collective instead.

Hosts whose clocks differ are aligned first on collective ends (--align ends, the default: every
rank leaves a blocking collective at nearly the same instant), and the spread that remains is
reported. Ranks without a trace and traces cut short are reported; collectives are compared over
the ranks present.

`+traceArgsHelp, skew.Defaults.K, time.Duration(skew.Defaults.MinLateNs), skew.Defaults.MinLate, skew.Defaults.Alpha),
		Example: `  ncclmerge skew ncclprof-out/
  ncclmerge skew --k 3 'job/rank*/ncclprof-*.trace.json'
  ncclmerge skew --json merged/ > skew.json
  ncclmerge skew --format csv ncclprof-out/ > ranks.csv
  ncclmerge skew --each --format csv ncclprof-out/ > every-rank-every-collective.csv`,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch align {
			case "ends":
				opt.Align = true
			case "none":
				opt.Align = false
			default:
				return fmt.Errorf("--align %q: want ends or none", align)
			}
			if !slices.Contains(skew.Arrivals, opt.Arrival) {
				return fmt.Errorf("--arrival %q: want auto, gpu or cpu", opt.Arrival)
			}
			if opt.K <= 0 || opt.Alpha <= 0 || opt.Alpha >= 1 {
				return fmt.Errorf("--k must be above 0 and --alpha between 0 and 1 (e.g. --k 5 --alpha 0.001)")
			}
			opt.MinLateNs = int64(minLate)
			if jsonOut {
				if cmd.Flags().Changed("format") && format != "json" {
					return fmt.Errorf("--json and --format %s: choose one", format)
				}
				format = "json"
			}
			if !slices.Contains(skew.Formats, format) {
				return fmt.Errorf("--format %q: want table, csv or json", format)
			}
			set, err := readOps(cmd, args, quiet, false)
			if err != nil {
				return err
			}
			res := skew.Analyze(set, opt)
			if err := res.Write(cmd.OutOrStdout(), format); err != nil {
				return err
			}
			if fail && len(res.Slow) > 0 {
				return errReported
			}
			return nil
		},
	}
	f := c.Flags()
	f.Float64Var(&opt.K, "k", opt.K, "late above median + k·MAD")
	f.DurationVar(&minLate, "min-late", time.Duration(opt.MinLateNs), "and at least this far after the collective's median arrival")
	f.Float64Var(&opt.Alpha, "alpha", opt.Alpha, "slow: late more often than this probability allows at the other ranks' rate")
	f.IntVar(&opt.MinLate, "min-count", opt.MinLate, "slow: and late on at least this many collectives")
	f.IntVar(&opt.Top, "top", opt.Top, "how many of the most skewed collectives to list")
	f.StringVar(&opt.Arrival, "arrival", opt.Arrival, "compare auto (GPU-side where every rank's is known, else CPU), gpu or cpu arrivals")
	f.StringVar(&align, "align", "ends", "ends (align hosts' clocks on collective ends) or none")
	f.StringVar(&format, "format", "table", "table, csv (one row per rank) or json")
	f.BoolVar(&jsonOut, "json", false, "print the result as JSON (--format json)")
	f.BoolVar(&opt.Each, "each", false, "list every rank's arrival and completion on every matched collective instead")
	f.BoolVar(&fail, "fail", false, "exit with status 1 when a slow rank is found (for CI)")
	f.BoolVarP(&quiet, "quiet", "q", false, "no progress on stderr")
	return c
}
