package main

import (
	"strings"

	"github.com/ncclprof/ncclprof/internal/stats"
	"github.com/spf13/cobra"
)

func statsCmd() *cobra.Command {
	var (
		sortBy, format string
		each, quiet    bool
	)
	c := &cobra.Command{
		Use:   "stats TRACE...",
		Short: "Time, bytes and bandwidth per communicator, operation, size, algorithm and protocol",
		Long: `Group NCCL operations by communicator, function, size bucket (powers of two of nccl-tests'
size), algorithm and protocol, and give for each group: count, bytes, total time, time
percentiles (p50, p90, p99), algorithm bandwidth (size/time) and bus bandwidth (algbw × 2(n−1)/n
for AllReduce, (n−1)/n for AllGather, ReduceScatter and AlltoAll, 1 otherwise: nccl-tests'
definitions), each the median over the group's operations, and the group's share of all
communication time.

An operation's time is its GPU kernel's duration where ncclmerge linked one (merged traces),
else the plugin's completion span (Coll start to its last ProxyOp or KernelCh stop); the
time_from column says which. Operations with neither are counted but not timed.

--each lists every timed operation instead (every NCCL kernel of a merged trace) with its
bandwidth and where it is in the trace.

Sampled traces (the plugin's NCCLPROF_TRACE_SAMPLE=N) hold 1 in N operations: each counts for N,
so count, bytes and time are estimates, marked ~ (the sampled column says 1/N); the operations
the plugin's trigger traced around slow ones are left out of the groups (they are no uniform
sample) and still listed by --each.

` + traceArgsHelp,
		Example: `  ncclmerge stats ncclprof-out/
  ncclmerge stats --sort busbw --format csv 'ncclprof-out/*.trace.json' > comm.csv
  ncclmerge stats --each --format json merged/rank0.merged.json.gz`,
		RunE: func(cmd *cobra.Command, args []string) error {
			set, err := readOps(cmd, args, quiet, false)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if each {
				return stats.WriteEach(out, stats.Each(set), format)
			}
			t := stats.Compute(set)
			if err := t.Sort(sortBy); err != nil {
				return err
			}
			return t.Write(out, format)
		},
	}
	f := c.Flags()
	f.StringVar(&sortBy, "sort", "time", "order rows by: "+strings.Join(stats.SortKeys(), ", ")+" (numbers largest first)")
	f.StringVar(&format, "format", "table", "table, csv or json")
	f.BoolVar(&each, "each", false, "list every timed operation (every linked kernel) instead of groups")
	f.BoolVarP(&quiet, "quiet", "q", false, "no progress on stderr")
	return c
}
