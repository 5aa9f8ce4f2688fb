package why

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/ncclprof/ncclprof/internal/commops"
	"github.com/ncclprof/ncclprof/internal/words"
)

// Formats Write knows.
var Formats = []string{"table", "json"}

// Write prints the result as a table for a person, or as JSON.
func (r *Result) Write(w io.Writer, format string) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		out := *r
		if out.Rows == nil {
			out.Rows = []Row{}
		}
		return enc.Encode(out)
	case "table":
		r.WriteText(w)
		return nil
	}
	return fmt.Errorf("format %q: want table or json", format)
}

// WriteText prints the table, then each row's cause in a sentence, then what was missing.
func (r *Result) WriteText(w io.Writer) {
	fmt.Fprintf(w, "%s found by skew, %s with slow transfers; arrival compared: %s\n",
		words.Count(r.LateArrivals, "late arrival"), words.Count(r.SlowCollectives, "collective"), arrivals(r.Arrivals))
	if len(r.Rows) == 0 {
		fmt.Fprintln(w, "nothing to explain: no late arrival, no collective whose transfers were slow")
	}
	if len(r.Rows) > 0 {
		r.WriteTable(w)
		fmt.Fprintln(w)
		for _, x := range r.Rows {
			fmt.Fprintf(w, "rank %d, %s, %s: %s\n  in %s pid %d tid %d at %.3f µs\n", x.Rank, x.Collective(), dash(x.Step), x.Summary, x.File, x.Pid, x.Tid, x.TsUs)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintln(w, "note:", n)
	}
}

// Shown are the rows a page lists: all of them, or without any rank's torch.profiler trace only
// those whose cause is known (the others would each say that the trace is missing).
func (r *Result) Shown() []Row {
	if r.KinetoRanks > 0 {
		return r.Rows
	}
	var out []Row
	for _, x := range r.Rows {
		if x.Cause != Unknown {
			out = append(out, x)
		}
	}
	return out
}

// WriteTable prints the table alone: rank, collective, step, lateness, cause, evidence.
func (r *Result) WriteTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "rank\tcollective\tstep\tlate\tcause\tevidence")
	for _, x := range r.Rows {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", x.Rank, x.Collective(), dash(x.Step), x.Lateness(), x.Cause, x.Short())
	}
	tw.Flush()
}

// Collective names the collective: "world AllReduce #12" ("#12+1", "#12 replay 3" where
// collectives share the seq: commops.SeqText).
func (x *Row) Collective() string {
	return fmt.Sprintf("%s %s #%s", x.Comm, x.Func, commops.SeqText(x.Seq, int64(x.Repeat), x.GraphReplay))
}

// Lateness says how late and on which arrival: "3.00 ms (gpu)", or for a slow collective
// "+2.10 ms (transfer)".
func (x *Row) Lateness() string {
	if x.Arrival == "" {
		return "+" + fmtNs(x.LateNs) + " (transfer)"
	}
	return fmtNs(x.LateNs) + " (" + x.Arrival + ")"
}

// Short is the evidence in a few words: the first numbers against the median rank's.
func (x *Row) Short() string {
	if x.Cause == Unknown || len(x.Evidence) == 0 {
		return clip(x.Summary, 110)
	}
	var parts []string
	if x.CarriedFrom != nil {
		parts = append(parts, fmt.Sprintf("carried over from #%d", *x.CarriedFrom))
	}
	for _, e := range x.Evidence[:min(len(x.Evidence), 2)] {
		s := fmt.Sprintf("%s %s vs %s", shortName(e.What), fmtNs(e.Ns), fmtNs(e.MedianNs))
		if e.Detail != "" {
			s += " (" + e.Detail + ")"
		}
		parts = append(parts, s)
	}
	return clip(strings.Join(parts, "; "), 160)
}

func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func arrivals(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s on %s", k, words.Count(m[k], "collective")))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
