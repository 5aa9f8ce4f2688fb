package skew

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/ncclprof/ncclprof/internal/commops"
)

// Formats Write knows.
var Formats = []string{"table", "csv", "json"}

// Write prints the result as a table (WriteText), CSV (one row per rank of each communicator) or
// JSON (the whole Result). With Options.Each it prints instead one row per rank of every matched
// collective, in the same three formats.
func (r *Result) Write(w io.Writer, format string) error {
	switch format {
	case "table":
		if r.Options.Each {
			return r.writeEachText(w)
		}
		r.WriteText(w)
		return nil
	case "csv":
		if r.Options.Each {
			return r.writeEachCSV(w)
		}
		return r.writeRanksCSV(w)
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if r.Options.Each {
			return enc.Encode(nonNil(r.Each))
		}
		return enc.Encode(r)
	}
	return fmt.Errorf("format %q: want table, csv or json", format)
}

func nonNil[T any](v []T) []T {
	if v == nil {
		return []T{}
	}
	return v
}

func i64(v int64) string { return strconv.FormatInt(v, 10) }

// optNs is a completion offset for CSV: empty when not known.
func optNs(v *int64) string {
	if v == nil {
		return ""
	}
	return i64(*v)
}

func (r *Result) writeRanksCSV(w io.Writer) error {
	c := csv.NewWriter(w)
	c.Write([]string{"comm", "comm_hash", "rank", "global_rank", "host", "pid", "matched_ops", "late_ops", "arrived_last",
		"late_total_ns", "late_median_ns", "late_max_ns", "chance", "slow",
		"completed_ops", "completed_last", "completion_median_ns", "completion_max_ns"})
	for _, k := range r.Ranks {
		c.Write([]string{k.Comm, k.CommHash, strconv.Itoa(k.Rank), strconv.Itoa(k.GlobalRank), k.Host, i64(k.Pid),
			strconv.Itoa(k.Matched), strconv.Itoa(k.Late), strconv.Itoa(k.Last),
			i64(k.LateTotalNs), i64(k.LateMedianNs), i64(k.LateMaxNs), strconv.FormatFloat(k.Chance, 'g', 4, 64), strconv.FormatBool(k.Slow),
			strconv.Itoa(k.Completed), strconv.Itoa(k.DoneLast), i64(k.DoneMedianNs), i64(k.DoneMaxNs)})
	}
	c.Flush()
	return c.Error()
}

func (r *Result) writeEachCSV(w io.Writer) error {
	c := csv.NewWriter(w)
	c.Write([]string{"comm", "func", "seq", "step", "rank", "global_rank", "arrival_ns", "late", "completion_ns", "completed_last", "arrival", "cpu_arrival_ns", "repeat", "graph_replay"})
	for _, e := range r.Each {
		c.Write([]string{e.Comm, e.Func, i64(e.Seq), e.Step, strconv.Itoa(e.Rank), strconv.Itoa(e.GlobalRank), i64(e.ArriveNs),
			strconv.FormatBool(e.Late), optNs(e.DoneNs), strconv.FormatBool(e.DoneLast), e.Arrival, optNs(e.CPUArriveNs),
			strconv.Itoa(int(e.Repeat)), strconv.FormatBool(e.GraphReplay)})
	}
	c.Flush()
	return c.Error()
}

func (r *Result) writeEachText(w io.Writer) error {
	fmt.Fprintln(w, "every rank of every matched collective: arrival after the median arrival (gpu: its NCCL kernel's start; cpu: its Coll start), its Coll start after the median Coll start where the GPU's was compared, completion after the median completion")
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "comm\tfunc\tseq\tstep\trank\tglobal\tarrival\tlate\tCPU arrival\tcompletion\tcompleted last")
	for _, e := range r.Each {
		done := "-"
		if e.DoneNs != nil {
			done = fmtNs(*e.DoneNs)
		}
		cpu := "-"
		if e.CPUArriveNs != nil {
			cpu = fmtNs(*e.CPUArriveNs)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s (%s)\t%s\t%s\t%s\t%s\n", e.Comm, e.Func, commops.SeqText(e.Seq, int64(e.Repeat), e.GraphReplay), dash(e.Step), e.Rank, e.GlobalRank,
			fmtNs(e.ArriveNs), e.Arrival, yes(e.Late), cpu, done, yes(e.DoneLast))
	}
	return tw.Flush()
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return ""
}
