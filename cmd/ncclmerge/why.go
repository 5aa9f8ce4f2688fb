package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/ncclprof/ncclprof/internal/commops"
	"github.com/ncclprof/ncclprof/internal/merge"
	"github.com/ncclprof/ncclprof/internal/skew"
	"github.com/ncclprof/ncclprof/internal/why"
	"github.com/spf13/cobra"
)

func whyCmd() *cobra.Command {
	opt := why.Defaults
	var (
		minLate time.Duration
		format  string
		jsonOut bool
		quiet   bool
		kineto  []string
	)
	c := &cobra.Command{
		Use:   "why TRACE...",
		Short: "Name why each late rank was late: GPU compute, host, network, a dependency, or what is missing to tell",
		Long: `For each late arrival that ncclmerge skew finds (same thresholds and flags), compare the late
rank's interval since its previous NCCL operation with the other ranks' (their median), and name
the cause with the numbers that show it:

  gpu_compute  its GPU started the collective late while its CPU called on time, right after a
               compute kernel: which kernels ran longer than on the median rank, by how much,
               launched by which operator;
  dependency   the same, but the kernel waited for another collective's kernel or another
               stream's work: how long it sat queued after its launch, behind what;
  host         its CPU called NCCL late: what the launching thread did instead (an operator,
               data loading, Python, synchronisation, or a gap with nothing recorded);
  network      a collective whose slowest transfer took more than --slow-factor times the usual
               for its kind: the link (rank → peer) whose bandwidth fell furthest below that
               link's usual, against the collective's other links;
  unknown      and what was missing: no Kineto trace for the rank, a sampled trace, clocks
               aligned too loosely for a gap this small, nothing recorded that explains it.

A cause is named only when what it points at took at least half the lateness longer than on the
median rank. GPU compute and dependency need the rank's GPU-side arrival (its NCCL kernel's start:
merge its torch.profiler trace, or record KernelCh) and its Kineto trace; host needs its Kineto
trace; network needs the plugin's ProxyOp steps (NCCLPROF_EVENT_MASK with proxyop and proxystep,
the default).

Give ncclmerge merge's per-rank outputs (-o DIR/), its --timeline, or a directory holding them;
or the plugin traces with --kineto and the torch.profiler traces, which are merged first, one
file per rank as ncclmerge merge -o DIR/ would, into a new directory that is kept (the answer
points into it) and named on stderr. torch.profiler traces given as TRACE beside the plugin
traces are found by what they hold and merged the same way. Plugin traces alone answer network
and say unknown for the rest.

Output: a table (rank, collective, step, lateness, cause, evidence), each cause in a sentence with
where the operation is in its trace, and --json for tools.

` + traceArgsHelp,
		Example: `  ncclmerge demo && ncclmerge why ncclmerge-demo
  ncclmerge merge --kineto 'traces/*.pt.trace.json.gz' --nccl ncclprof-out/ -o merged/
  ncclmerge why merged/
  ncclmerge why --kineto 'traces/*.pt.trace.json.gz' ncclprof-out/
  ncclmerge why --json merged/ > why.json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if jsonOut {
				format = "json"
			}
			if !slices.Contains(why.Formats, format) {
				return fmt.Errorf("--format %q: want table or json", format)
			}
			if opt.Skew.K <= 0 || opt.SlowFactor <= 1 {
				return fmt.Errorf("--k must be above 0 and --slow-factor above 1 (e.g. --k 5 --slow-factor 2)")
			}
			if !slices.Contains(skew.Arrivals, opt.Skew.Arrival) {
				return fmt.Errorf("--arrival %q: want auto, gpu or cpu", opt.Skew.Arrival)
			}
			opt.Skew.MinLateNs = int64(minLate)
			if len(kineto) > 0 {
				dir, err := mergeForWhy(kineto, args, quiet)
				if err != nil {
					return err
				}
				args = []string{dir}
			}
			set, acts, err := readForWhy(cmd, args, quiet)
			if err != nil {
				return err
			}
			return why.Analyze(set, acts, opt).Write(cmd.OutOrStdout(), format)
		},
	}
	f := c.Flags()
	f.Float64Var(&opt.Skew.K, "k", opt.Skew.K, "late above median + k·MAD (as skew)")
	f.DurationVar(&minLate, "min-late", time.Duration(opt.Skew.MinLateNs), "and at least this far after the collective's median arrival")
	f.StringVar(&opt.Skew.Arrival, "arrival", opt.Skew.Arrival, "compare auto (GPU-side where every rank's is known, else CPU), gpu or cpu arrivals")
	f.Float64Var(&opt.SlowFactor, "slow-factor", opt.SlowFactor, "network: a collective's slowest transfer above this many times its usual")
	f.StringVar(&format, "format", "table", "table or json")
	f.BoolVar(&jsonOut, "json", false, "print the result as JSON (--format json)")
	f.StringSliceVar(&kineto, "kineto", nil, "torch.profiler traces to merge with the plugin traces given as TRACE first: files, quoted globs or directories")
	f.BoolVarP(&quiet, "quiet", "q", false, "no progress on stderr")
	return c
}

// readForWhy reads the operations of the traces and, in the same pass, what why needs beside
// them (out: outputs the traces must not be). torch.profiler traces given beside the plugin
// traces, not merged with them, are merged first (as --kineto does) and the result read: a
// rank's operations and its activity are otherwise in two files nothing links.
func readForWhy(cmd *cobra.Command, args []string, quiet bool, out ...output) (*commops.Set, []why.Activity, error) {
	col := why.NewCollector()
	set, err := readOpsWith(cmd, args, quiet, commops.Options{Also: col.Hook}, out...)
	if err != nil {
		return nil, nil, err
	}
	acts := col.Activities(set)
	kin, plug := unmerged(set, acts)
	if len(kin) == 0 || len(plug) == 0 {
		return set, acts, nil
	}
	fmt.Fprintf(os.Stderr, "%d of the traces are torch.profiler's, not merged with the plugin's: merging them first, as --kineto does\n", len(kin))
	dir, err := mergeForWhy(kin, plug, quiet)
	if err != nil {
		return nil, nil, err
	}
	return readForWhy(cmd, []string{dir}, quiet, out...)
}

// unmerged lists the files of set that are torch.profiler traces alone (its activity, no NCCL
// operation) and the plugin traces alone (operations, no torch.profiler activity).
func unmerged(set *commops.Set, acts []why.Activity) (kineto, plugin []string) {
	ops := make([]bool, len(set.Files))
	for i := range set.Ops {
		ops[set.Ops[i].Ref.File] = true
	}
	for i, f := range set.Files {
		switch kin := acts[i].HasKineto(); {
		case kin && !ops[i]:
			kineto = append(kineto, f)
		case !kin && ops[i]:
			plugin = append(plugin, f)
		}
	}
	return kineto, plugin
}

// mergeForWhy merges the torch.profiler traces with the plugin traces, one output per rank,
// into a new directory under the temporary directory, which it returns and names on stderr.
func mergeForWhy(kineto, nccl []string, quiet bool) (string, error) {
	kp, err := merge.ExpandFor(kineto, merge.KinetoTrace)
	if err != nil {
		return "", err
	}
	if len(nccl) == 0 {
		return "", fmt.Errorf("--kineto needs the plugin traces too: ncclmerge why --kineto 'traces/*.pt.trace.json.gz' ncclprof-out/")
	}
	np, err := merge.ExpandFor(nccl, merge.PluginTrace)
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "ncclmerge-why-")
	if err != nil {
		return "", err
	}
	var log io.Writer
	if !quiet {
		log = os.Stderr
	}
	if _, err := merge.Run(kp, np, dir+string(os.PathSeparator), merge.Options{Log: log}); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	fmt.Fprintf(os.Stderr, "merged into %s (kept: the answer's places in the traces are there)\n", dir)
	return dir, nil
}
