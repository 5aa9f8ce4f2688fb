package skew

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/ncclprof/ncclprof/internal/commops"
	"github.com/ncclprof/ncclprof/internal/words"
)

// WriteText prints the result for a person: the slow ranks first, then every rank that was late,
// the most skewed collectives, the clock alignment and what was missing.
func (r *Result) WriteText(w io.Writer) {
	o := r.Options
	if r.Sampled != "" {
		fmt.Fprintf(w, "%s: the collectives compared are those every rank's sampled trace holds (1 in N, chosen alike on every rank); counts of matched and late collectives are of those, not scaled\n", r.Sampled)
	}
	fmt.Fprintf(w, "late arrival: more than median + %g·MAD of the communicator's lateness (and at least %s) after the collective's median arrival\n",
		o.K, fmtNs(o.MinLateNs))
	fmt.Fprintf(w, "slow rank: late on %d collectives or more, and more often than chance allows at the other ranks' rate (p < %g)\n", o.MinLate, o.Alpha)
	fmt.Fprintf(w, "completion: a rank's end minus the collective's median end; it does not make a rank slow, it shows collectives that ended unevenly\n")
	fmt.Fprintf(w, "arrival compared: %s\n\n", r.arrivalsLine())
	if len(r.Slow) == 0 {
		fmt.Fprintln(w, "no slow rank")
	}
	for _, s := range r.Slow {
		fmt.Fprintf(w, "SLOW: rank %d of %s (global rank %d, %s pid %d): late on %d of %d collectives (%.0f%%; by chance: p = %.1g) by %s median, %s at most; arrived last %d times\n",
			s.Rank, s.Comm, s.GlobalRank, s.Host, s.Pid, s.Late, s.Matched, 100*s.LateFraction(), s.Chance, fmtNs(s.LateMedianNs), fmtNs(s.LateMaxNs), s.Last)
		if len(s.Steps) > 0 {
			fmt.Fprintf(w, "      late in steps: %s\n", clipList(s.StepList(), 12))
		}
	}
	fmt.Fprintln(w)
	r.writeComms(w)
	r.writeRanks(w)
	r.writeCompletion(w)
	r.writeTop(w)
	if a := r.Alignment; a != nil && a.Collectives == 0 {
		fmt.Fprintf(w, "\nclocks of %s not aligned: no collective's end was seen on two hosts\n", words.Count(a.Hosts, "host"))
	} else if a != nil {
		fmt.Fprintf(w, "\nclocks of %s aligned on the ends of %s (reference %s): end spread median %s before, %s after (p90 %s)\n",
			words.Count(a.Hosts, "host"), words.Count(a.Collectives, "collective"), a.Reference, fmtNs(a.BeforeMedianNs), fmtNs(a.ResidualMedianNs), fmtNs(a.ResidualP90Ns))
		for _, h := range slices.Sorted(maps.Keys(a.ShiftNs)) {
			fmt.Fprintf(w, "  host %s: clock shifted by %s\n", h, fmtNs(a.ShiftNs[h]))
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintln(w, "note:", n)
	}
}

func (r *Result) writeComms(w io.Writer) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "communicator\tranks\tcollectives\tlateness median\tMAD\tlate above\tend spread median\tend spread p90")
	for _, c := range r.Comms {
		fmt.Fprintf(tw, "%s\t%d/%d\t%d\t%s\t%s\t%s\t%s\t%s\n", c.Comm, c.Present, c.NRanks, c.Matched, fmtNs(c.MedianNs), fmtNs(c.MADNs), fmtNs(c.ThresholdNs),
			fmtNs(c.DoneSpreadMedianNs), fmtNs(c.DoneSpreadP90Ns))
	}
	tw.Flush()
}

func (r *Result) writeRanks(w io.Writer) {
	fmt.Fprintln(w, "\nranks that arrive late (most often first):")
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "comm\trank\tglobal\thost\tlate\tof\tlast\tlate median\tlate max\tby chance\tslow")
	n := 0
	for _, k := range r.Ranks {
		if k.Late == 0 || n == 20 {
			continue
		}
		n++
		slow := ""
		if k.Slow {
			slow = "SLOW"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%d\t%d\t%s\t%s\t%.2g\t%s\n", k.Comm, k.Rank, k.GlobalRank, k.Host, k.Late, k.Matched, k.Last,
			fmtNs(k.LateMedianNs), fmtNs(k.LateMaxNs), k.Chance, slow)
	}
	tw.Flush()
	if n == 0 {
		fmt.Fprintln(w, "  none")
	}
}

// writeCompletion lists the ranks that complete last most often, and those that ever completed
// --min-late or more after a collective's median completion.
func (r *Result) writeCompletion(w io.Writer) {
	fmt.Fprintln(w, "\nranks that complete last (most often first; completion after the collective's median completion):")
	ranks := slices.Clone(r.Ranks)
	slices.SortStableFunc(ranks, func(x, y *RankRow) int {
		if x.DoneLast != y.DoneLast {
			return y.DoneLast - x.DoneLast
		}
		return cmp.Compare(y.DoneMaxNs, x.DoneMaxNs)
	})
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "comm\trank\tglobal\thost\tcompleted last\tof\tcompletion median\tcompletion max")
	n, known := 0, false
	for _, k := range ranks {
		known = known || k.Completed > 0
		if k.Completed == 0 || k.DoneLast == 0 && k.DoneMaxNs < r.Options.MinLateNs || n == 20 {
			continue
		}
		n++
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%d\t%s\t%s\n", k.Comm, k.Rank, k.GlobalRank, k.Host, k.DoneLast, k.Completed,
			fmtNs(k.DoneMedianNs), fmtNs(k.DoneMaxNs))
	}
	tw.Flush()
	switch {
	case !known:
		fmt.Fprintln(w, "  no completion known on two ranks of a collective")
	case n == 0:
		fmt.Fprintf(w, "  none: no rank completed strictly last, and every completion was within %s of its collective's median\n", fmtNs(r.Options.MinLateNs))
	}
}

func (r *Result) writeTop(w io.Writer) {
	if len(r.Top) == 0 {
		return
	}
	fmt.Fprintln(w, "\ncollectives with the largest skew (first to last arrival; end spread: first to last completion):")
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "comm\tfunc\tseq\tstep\tskew\tlast rank\tlate by\tend spread\tlast to end\twhere (file pid/tid ts µs)")
	for _, o := range r.Top {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s %d/%d %.3f\n", o.Comm, o.Func, commops.SeqText(o.Seq, int64(o.Repeat), o.GraphReplay), dash(o.Step), fmtNs(o.SkewNs), o.Last,
			fmtNs(o.LateNs), fmtNs(o.DoneSpreadNs), lastToEnd(o), o.File, o.Pid, o.Tid, o.TsUs)
	}
	tw.Flush()
}

// lastToEnd names the rank that completed last and by how much after the median: "3 (+120.0 µs)".
func lastToEnd(o OpRow) string {
	if o.DoneLast < 0 {
		return "-"
	}
	return fmt.Sprintf("%d (+%s)", o.DoneLast, fmtNs(o.DoneLateNs))
}

// StepList names the steps a rank was late in, with how late at most: "train step 3 (3.0 ms)".
func (r *RankRow) StepList() []string {
	out := make([]string, len(r.Steps))
	for i, s := range r.Steps {
		out[i] = fmt.Sprintf("%s (%s)", s.Step, fmtNs(s.MaxNs))
	}
	return out
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func clipList(v []string, n int) string {
	if len(v) <= n {
		return strings.Join(v, ", ")
	}
	return strings.Join(v[:n], ", ") + fmt.Sprintf(", … (%d in all)", len(v))
}

func fmtNs(ns int64) string { return words.Ns(ns) }

// arrivalsLine says which arrival the collectives were compared on: "GPU side (the NCCL kernel's
// start; from kernel) on 20 collectives, CPU (Coll start) on 4".
func (r *Result) arrivalsLine() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(r.Arrivals)) {
		what := "GPU side (the NCCL kernel's start, from " + strings.TrimSuffix(strings.TrimPrefix(k, "gpu ("), ")") + ")"
		if k == "cpu" {
			what = "CPU (Coll start: the call reached NCCL)"
		}
		parts = append(parts, fmt.Sprintf("%s on %s", what, words.Count(r.Arrivals[k], "collective")))
	}
	if r.Skipped > 0 {
		parts = append(parts, fmt.Sprintf("%s left out (--arrival gpu: a rank's GPU-side arrival unknown)", words.Count(r.Skipped, "collective")))
	}
	if len(parts) == 0 {
		return "none (no collective matched on two ranks)"
	}
	return strings.Join(parts, "; ")
}
