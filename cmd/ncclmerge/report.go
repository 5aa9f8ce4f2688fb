package main

import (
	"fmt"
	"io"

	"github.com/ncclprof/ncclprof/internal/report"
	"github.com/ncclprof/ncclprof/internal/skew"
	"github.com/ncclprof/ncclprof/internal/stats"
	"github.com/ncclprof/ncclprof/internal/words"
	"github.com/spf13/cobra"
)

func reportCmd() *cobra.Command {
	var (
		out, title string
		quiet      bool
	)
	c := &cobra.Command{
		Use:   "report TRACE... -o report.html",
		Short: "Write one self-contained HTML page of plots: bandwidth, time per rank, skew, slowest operations",
		Long: `Write one HTML page, readable offline (plots are inline SVG: nothing is fetched), with:
  - bus bandwidth against message size, every operation and the median per size, per function;
  - communication time per rank and communicator (heatmap);
  - the arrival skew of every collective over the run, late last ranks marked;
  - late arrivals per rank (slow ranks in red);
  - the slow ranks, the stats table (as ncclmerge stats), the slowest operations and the most
    skewed collectives, each with where it is in its trace (file, pid, tid, ts, and the query
    that finds the slice in Perfetto).
Skew uses ncclmerge skew's default thresholds.

` + traceArgsHelp,
		Example: `  ncclmerge report ncclprof-out/ -o report.html
  ncclmerge report merged/ -o report.html --title "job 1234, step 1000-1100"`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return fmt.Errorf("-o is required: the HTML file to write (e.g. -o report.html)")
			}
			set, err := readOps(cmd, args, quiet, false, output{out, "report.html"})
			if err != nil {
				return err
			}
			page := report.Build(set, stats.Compute(set), skew.Analyze(set, skew.Defaults), title)
			if err := writeAtomic(out, func(w io.Writer) error { return page.Write(w) }); err != nil {
				return err
			}
			if !quiet {
				fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s (%s, %s): open it in a browser\n", out, words.Count(page.Ops, "operation"), words.Count(page.Ranks, "rank"))
			}
			return nil
		},
	}
	c.Flags().StringVarP(&out, "output", "o", "", "the HTML file to write")
	c.Flags().StringVar(&title, "title", "NCCL communication report", "the page's title")
	c.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress on stderr")
	return c
}
