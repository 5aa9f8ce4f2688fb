package stats

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"text/tabwriter"

	"github.com/ncclprof/ncclprof/internal/commops"
	"github.com/ncclprof/ncclprof/internal/words"
)

// Formats lists what Write accepts.
var Formats = []string{"table", "csv", "json"}

// columns of the table and CSV forms, with how each row fills them.
var columns = []struct {
	name string
	val  func(r *Row) string
}{
	{"comm", func(r *Row) string { return r.Comm }},
	{"nranks", func(r *Row) string { return strconv.Itoa(r.NRanks) }},
	{"func", func(r *Row) string { return r.Func }},
	{"size", func(r *Row) string { return r.Size }},
	{"algo", func(r *Row) string { return dash(r.Algo) }},
	{"proto", func(r *Row) string { return dash(r.Proto) }},
	{"count", func(r *Row) string { return strconv.Itoa(r.Count) }},
	{"bytes", func(r *Row) string { return strconv.FormatUint(r.Bytes, 10) }},
	{"time_ms", func(r *Row) string { return ms(r.TimeNs) }},
	{"p50_us", func(r *Row) string { return us(r.P50Ns) }},
	{"p90_us", func(r *Row) string { return us(r.P90Ns) }},
	{"p99_us", func(r *Row) string { return us(r.P99Ns) }},
	{"algbw_GBps", func(r *Row) string { return gbps(r.AlgBW, r.Timed) }},
	{"busbw_GBps", func(r *Row) string { return gbps(r.BusBW, r.Timed) }},
	{"share", func(r *Row) string { return fmt.Sprintf("%.1f%%", 100*r.Share) }},
	{"time_from", func(r *Row) string { return r.Source }},
	// sampled: "1/N" when count, bytes and time are scaled up from a sampled trace's 1 in N.
	{"sampled", func(r *Row) string { return sampledLabel(r) }},
}

func sampledLabel(r *Row) string {
	switch {
	case !r.Scaled:
		return "-"
	case r.SampledEvery < 0:
		return "1/N varies"
	}
	return fmt.Sprintf("1/%d", r.SampledEvery)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func ms(ns int64) string { return strconv.FormatFloat(float64(ns)/1e6, 'f', 3, 64) }
func us(ns int64) string { return strconv.FormatFloat(float64(ns)/1e3, 'f', 1, 64) }

func gbps(v float64, timed int) string {
	if timed == 0 || math.IsNaN(v) {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

// Write prints the table in a format of Formats.
func (t *Table) Write(w io.Writer, format string) error {
	switch format {
	case "table":
		return t.writeTable(w)
	case "csv":
		return t.writeCSV(w)
	case "json":
		return writeJSON(w, t)
	}
	return fmt.Errorf("--format %q: want table, csv or json", format)
}

func (t *Table) writeTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	for i, c := range columns {
		fmt.Fprint(tw, sep(i), c.name)
	}
	fmt.Fprintln(tw, "\t")
	for _, r := range t.Rows {
		for i, c := range columns {
			v := c.val(r)
			if r.Scaled && (c.name == "count" || c.name == "bytes" || c.name == "time_ms") {
				v = "~" + v // an estimate: scaled up from a sampled trace
			}
			fmt.Fprint(tw, sep(i), v)
		}
		fmt.Fprintln(tw, "\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	about := ""
	if sm := t.Sampling; sm != nil {
		about = "about "
		fmt.Fprintf(w, "%s: about %s, %s; their times add up to about %s (share: of this sum), scaled up from the %d operations read (~: an estimate)\n",
			sm.Label(), words.Count(t.Ops, "operation"), Size(t.TotalBytes), fmtDur(t.TotalNs), sm.Sampled+sm.Full)
	} else {
		fmt.Fprintf(w, "%s, %s; their times add up to %s (share: of this sum)\n", words.Count(t.Ops, "operation"), Size(t.TotalBytes), fmtDur(t.TotalNs))
	}
	if top, med := t.Busiest(); top.Timed > 0 {
		fmt.Fprintf(w, "NCCL busy (operations in flight together counted once): most on rank %d, %s%s of the %s from its first operation to its last; median %s%s over %s\n",
			top.Rank, about, fmtDur(top.BusyNs), fmtDur(top.SpanNs), about, fmtDur(med), words.Count(len(t.Ranks), "rank"))
	}
	for _, n := range t.Notes {
		fmt.Fprintln(w, "note:", n)
	}
	return nil
}

func sep(i int) string {
	if i == 0 {
		return ""
	}
	return "\t"
}

func fmtDur(ns int64) string {
	switch {
	case ns >= 1e9:
		return fmt.Sprintf("%.3f s", float64(ns)/1e9)
	case ns >= 1e6:
		return fmt.Sprintf("%.3f ms", float64(ns)/1e6)
	}
	return fmt.Sprintf("%.1f µs", float64(ns)/1e3)
}

func (t *Table) writeCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	head := make([]string, len(columns))
	for i, c := range columns {
		head[i] = c.name
	}
	cw.Write(head)
	for _, r := range t.Rows {
		rec := make([]string, len(columns))
		for i, c := range columns {
			rec[i] = c.val(r)
		}
		cw.Write(rec)
	}
	cw.Flush()
	return cw.Error()
}

// GBps is a bandwidth that writes NaN (unknown) as JSON null.
type GBps float64

// MarshalJSON writes the value in full, or null.
func (g GBps) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(g)) || math.IsInf(float64(g), 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, float64(g), 'g', -1, 64), nil
}

// MarshalJSON writes the row with its bandwidths as GBps.
func (r *Row) MarshalJSON() ([]byte, error) {
	type plain Row
	return json.Marshal(struct {
		*plain
		AlgBW GBps `json:"algbw_GBps"`
		BusBW GBps `json:"busbw_GBps"`
	}{(*plain)(r), GBps(r.AlgBW), GBps(r.BusBW)})
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// OpRow is one operation with its bandwidth (--each): for a merged trace, each NCCL kernel.
type OpRow struct {
	Rank     int    `json:"rank"`
	Host     string `json:"host"`
	Pid      int64  `json:"pid"`
	Comm     string `json:"comm"`
	NRanks   int    `json:"nranks"`
	Func     string `json:"func"`
	Seq      int64  `json:"seq"`
	Algo     string `json:"algo,omitempty"`
	Proto    string `json:"proto,omitempty"`
	Bytes    uint64 `json:"bytes"`
	TimeNs   int64  `json:"time_ns"`
	AlgBW    GBps   `json:"algbw_GBps"`
	BusBW    GBps   `json:"busbw_GBps"`
	TimeFrom string `json:"time_from"`
	Step     string `json:"step,omitempty"`
	// Traced: from a sampled trace, why it is there (sampled, triggered, trigger).
	Traced string `json:"traced,omitempty"`
	// Where the slice is: file, pid, tid and ts as written (µs).
	File string  `json:"file"`
	SPid int64   `json:"slice_pid"`
	STid int64   `json:"slice_tid"`
	TsUs float64 `json:"slice_ts_us"`
}

// Each lists every timed operation with its bandwidth, in the order of s.
func Each(s *commops.Set) []OpRow {
	var out []OpRow
	for i := range s.Ops {
		o := &s.Ops[i]
		if o.Source == commops.NoTime {
			continue
		}
		c, p := s.Comms[o.Comm], s.Procs[o.Proc]
		alg, bus := Bandwidth(o.Func, o.Bytes, o.Time, c.NRanks)
		r := OpRow{Rank: int(o.Rank), Host: p.Host, Pid: p.Pid, Comm: c.Label(), NRanks: c.NRanks, Func: o.Func,
			Seq: o.Seq, Algo: o.Algo, Proto: o.Proto, Bytes: o.Bytes, TimeNs: o.Time, AlgBW: GBps(alg), BusBW: GBps(bus),
			TimeFrom: o.Source.String(), File: s.Files[o.Ref.File], SPid: o.Ref.Pid, STid: o.Ref.Tid,
			TsUs: float64(o.Ref.TsNs) / 1e3}
		if o.Step >= 0 {
			r.Step = s.Steps[o.Step]
		}
		if o.Traced != commops.Full {
			r.Traced = o.Traced.String()
		}
		out = append(out, r)
	}
	return out
}

// WriteEach prints Each's rows in a format of Formats.
func WriteEach(w io.Writer, rows []OpRow, format string) error {
	switch format {
	case "json":
		return writeJSON(w, rows)
	case "table", "csv":
	default:
		return fmt.Errorf("--format %q: want table, csv or json", format)
	}
	head := []string{"rank", "comm", "func", "seq", "algo", "proto", "bytes", "time_us", "algbw_GBps", "busbw_GBps", "time_from", "step", "file", "pid", "tid", "ts_us"}
	recs := [][]string{head}
	for _, r := range rows {
		recs = append(recs, []string{strconv.Itoa(r.Rank), r.Comm, r.Func, strconv.FormatInt(r.Seq, 10), dash(r.Algo), dash(r.Proto),
			strconv.FormatUint(r.Bytes, 10), us(r.TimeNs), gbps(float64(r.AlgBW), 1), gbps(float64(r.BusBW), 1), r.TimeFrom,
			dash(r.Step), r.File, strconv.FormatInt(r.SPid, 10), strconv.FormatInt(r.STid, 10),
			strconv.FormatFloat(r.TsUs, 'f', 3, 64)})
	}
	if format == "csv" {
		cw := csv.NewWriter(w)
		cw.WriteAll(recs)
		return cw.Error()
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	for _, rec := range recs {
		for i, f := range rec {
			fmt.Fprint(tw, sep(i), f)
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}
