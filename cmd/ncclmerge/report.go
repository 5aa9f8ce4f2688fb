package main

import (
	"fmt"
	"io"
	"slices"

	"github.com/ncclprof/ncclprof/internal/hang"
	"github.com/ncclprof/ncclprof/internal/report"
	"github.com/ncclprof/ncclprof/internal/skew"
	"github.com/ncclprof/ncclprof/internal/stats"
	"github.com/ncclprof/ncclprof/internal/why"
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
Skew uses ncclmerge skew's default thresholds. Where the arguments hold the plugin's in-flight
dumps (ncclprof-hang-*.json), the page begins with ncclmerge hang's verdict and evidence; with
dumps and no trace, it has that alone.

` + traceArgsHelp,
		Example: `  ncclmerge report ncclprof-out/ -o report.html
  ncclmerge report merged/ -o report.html --title "job 1234, step 1000-1100"`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return fmt.Errorf("-o is required: the HTML file to write (e.g. -o report.html)")
			}
			page, err := buildReport(cmd, args, title, quiet, output{out, "report.html"})
			if err != nil {
				return err
			}
			if err := writeAtomic(out, func(w io.Writer) error { return page.Write(w) }); err != nil {
				return err
			}
			if !quiet {
				what := words.Count(page.Ops, "operation") + ", " + words.Count(page.Ranks, "rank")
				if page.Sampled != "" {
					what = fmt.Sprintf("%s: about %s scaled up from %d read, %s", page.Sampled, words.Count(page.Ops, "operation"),
						page.OpsRead, words.Count(page.Ranks, "rank"))
				}
				if page.Hang != nil {
					what += ", the hang analysis of " + words.Count(page.Hang.Dumps.Read, "dump")
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s (%s): open it in a browser\n", out, what)
			}
			return nil
		},
	}
	c.Flags().StringVarP(&out, "output", "o", "", "the HTML file to write")
	c.Flags().StringVar(&title, "title", "NCCL communication report", "the page's title")
	c.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress on stderr")
	return c
}

// buildReport reads the traces and, where there are any, the hang dumps among the arguments;
// out must be none of them.
func buildReport(cmd *cobra.Command, args []string, title string, quiet bool, out output) (*report.Page, error) {
	found, err := hang.Find(args)
	if err != nil {
		return nil, err
	}
	if len(found.Dumps) == 0 {
		return reportOfTraces(cmd, args, title, quiet, out)
	}
	found.Others = nil // explicit files that are not dumps by name are traces here
	res := hang.Analyze(found.Load())
	// The traces are every other input but the summaries (which only the hang analysis reads).
	all, err := expandTraces(args)
	if err != nil {
		return nil, err
	}
	if err := checkOutput("-o", out.path, out.example, all, found.Dumps, found.Summaries); err != nil {
		return nil, err
	}
	var traces []string
	for _, p := range all {
		if !hang.IsDumpName(p) && !slices.Contains(found.Summaries, p) {
			traces = append(traces, p)
		}
	}
	if len(traces) == 0 {
		return report.BuildHang(res, title, found.Dumps), nil
	}
	page, err := reportOfTraces(cmd, traces, title, quiet, out)
	if err == nil {
		page.Hang = res
	}
	return page, err
}

func reportOfTraces(cmd *cobra.Command, args []string, title string, quiet bool, out output) (*report.Page, error) {
	set, acts, err := readForWhy(cmd, args, quiet, out) // and the why table's inputs, in the same pass
	if err != nil {
		return nil, err
	}
	page := report.Build(set, stats.Compute(set), skew.Analyze(set, skew.Defaults), title)
	page.Why = why.Analyze(set, acts, why.Defaults)
	return page, nil
}
