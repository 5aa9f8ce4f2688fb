// Package report writes one self-contained HTML page that answers the questions people open a
// trace for — which collectives cost the most, do they reach the bandwidth the hardware allows,
// which rank makes everyone wait — with plots drawn as inline SVG: no script, style sheet or
// font is fetched, so the page opens anywhere, offline. Its only code is one inline click handler
// that copies a row's Perfetto query to the clipboard.
package report

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"math"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/ncclprof/ncclprof/internal/commops"
	"github.com/ncclprof/ncclprof/internal/hang"
	"github.com/ncclprof/ncclprof/internal/skew"
	"github.com/ncclprof/ncclprof/internal/stats"
	"github.com/ncclprof/ncclprof/internal/why"
	"github.com/ncclprof/ncclprof/internal/words"
)

//go:embed page.html
var pageHTML string

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"ms":    func(ns int64) string { return fmt.Sprintf("%.3f", float64(ns)/1e6) },
	"us":    func(ns int64) string { return fmt.Sprintf("%.1f", float64(ns)/1e3) },
	"pct":   func(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) },
	"bw":    func(v float64) string { return fmtBW(v) },
	"size":  func(n uint64) string { return stats.Size(n) },
	"base":  filepath.Base,
	"count": words.Count,
	"ratio": func(a, b int64) float64 { return float64(a) / float64(b) },
	"secs":  func(ns int64) string { return fmt.Sprintf("%.1f", float64(ns)/1e9) },
	"suspect": func(state string) bool {
		return state == hang.StateMismatch || state == hang.StateAbsent || state == hang.StateGPU || state == hang.StateLinkSend || state == hang.StateUnknown
	},
	"lines": func(s string) []string { return strings.Split(s, "\n") },
	// perfettoTs is a JSON ts in µs as Perfetto's trace processor stores it: ns.
	"perfettoTs": func(us float64) int64 { return int64(math.Round(us * 1e3)) },
}).Parse(pageHTML))

// Page is what the template shows.
type Page struct {
	Title     string
	Generated string
	Files     []string
	// Sampled: "sampled 1/N" when the traces are sampled: Ops, TotalNs and the busy times are
	// then estimates, scaled up from the OpsRead operations read.
	Sampled string
	OpsRead int
	Ops     int
	Ranks   int
	// TotalNs is the sum of the operations' times: operations in flight together each count, so
	// it can exceed the wall time. Busy is each rank's busy time (the union of its operations'
	// intervals), BusyTop the busiest rank and BusyMedianNs the median over ranks.
	TotalNs      int64
	Busy         []stats.RankBusy
	BusyTop      stats.RankBusy
	BusyMedianNs int64
	Plots        []template.HTML
	Stats        []*stats.Row
	Skew         *skew.Result
	Slowest      []SlowOp
	Notes        []string
	// Traces: the page has the trace analyses (it may have the hang alone).
	Traces bool
	// Hang is the analysis of the in-flight dumps found beside the traces (nil: none).
	Hang *hang.Result
	// Why names the cause of each late arrival and slow collective (nil: not asked).
	Why *why.Result
}

// SlowOp is one of the slowest operations, with where to find it.
type SlowOp struct {
	Rank     int
	Comm     string
	Func     string
	Seq      int64
	Place    string // its seq as the analyses write it: "12", "12 replay 3" (commops.SeqText)
	Bytes    uint64
	TimeNs   int64
	BusBW    float64
	Step     string
	TimeFrom string
	// Traced: in a sampled trace, why it is there ("trigger": the slow operation that had the
	// next ones traced in full); "" from a full trace.
	Traced   string
	File     string
	Pid, Tid int64
	TsUs     string
	// PerfettoTs is the slice's ts as Perfetto's trace processor stores it (ns): the JSON ts in µs
	// × 1000, for `SELECT * FROM slice WHERE ts = …` in its query page.
	PerfettoTs int64
}

// Build assembles the page from the operations, their statistics and their skew.
func Build(s *commops.Set, st *stats.Table, sk *skew.Result, title string) *Page {
	p := &Page{Title: title, Generated: generated(), Files: s.Files, Traces: true,
		Ops: st.Ops, Ranks: len(s.Procs), TotalNs: st.TotalNs, Busy: st.Ranks, Skew: sk, Notes: sk.Notes,
		Sampled: s.Sampling.Label(), OpsRead: s.Sampling.Sampled + s.Sampling.Full}
	p.BusyTop, p.BusyMedianNs = st.Busiest()
	for _, svg := range []string{bandwidthPlot(s), heatmap(s, sk), skewPlot(s, sk), latePlot(sk)} {
		p.Plots = append(p.Plots, template.HTML(svg)) // built by this package, every text escaped
	}
	p.Stats = st.Rows[:min(len(st.Rows), 25)]
	p.Slowest = slowest(s, 25)
	return p
}

// BuildHang is the page of a hung job whose ranks wrote in-flight dumps and no trace: the hang
// section alone.
func BuildHang(r *hang.Result, title string, dumps []string) *Page {
	return &Page{Title: title, Generated: generated(), Files: perDir(dumps, "dump"), Hang: r}
}

// perDir names files by directory, "DIR/ (1024 dumps)": a job has thousands of them.
func perDir(files []string, what string) []string {
	count := map[string]int{}
	var dirs []string
	for _, f := range files {
		d := filepath.Dir(f)
		if count[d] == 0 {
			dirs = append(dirs, d)
		}
		count[d]++
	}
	sort.Strings(dirs)
	out := make([]string, len(dirs))
	for i, d := range dirs {
		out[i] = fmt.Sprintf("%s/ (%d %ss)", d, count[d], what)
	}
	return out
}

func generated() string { return time.Now().UTC().Format("2006-01-02 15:04 UTC") }

// slowest lists the n longest operations.
func slowest(s *commops.Set, n int) []SlowOp {
	idx := make([]int, 0, len(s.Ops))
	for i := range s.Ops {
		if s.Ops[i].Source != commops.NoTime {
			idx = append(idx, i)
		}
	}
	sort.SliceStable(idx, func(a, b int) bool { return s.Ops[idx[a]].Time > s.Ops[idx[b]].Time })
	var out []SlowOp
	for _, i := range idx[:min(n, len(idx))] {
		o := &s.Ops[i]
		c := s.Comms[o.Comm]
		_, bus := stats.Bandwidth(o.Func, o.Bytes, o.Time, c.NRanks)
		r := SlowOp{Rank: s.Procs[o.Proc].Rank, Comm: c.Label(), Func: o.Func, Seq: o.Seq,
			Place: commops.SeqText(o.Seq, int64(o.Repeat), o.GraphReplay), Bytes: o.Bytes, TimeNs: o.Time,
			BusBW: bus, TimeFrom: o.Source.String(), File: s.Files[o.Ref.File], Pid: o.Ref.Pid, Tid: o.Ref.Tid,
			TsUs: fmt.Sprintf("%.3f", float64(o.Ref.TsNs)/1e3), PerfettoTs: o.Ref.TsNs}
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

func fmtBW(v float64) string {
	if v != v || v <= 0 { // NaN: the communicator's size is not known
		return "–"
	}
	return fmt.Sprintf("%.3f", v)
}

// Write renders the page.
func (p *Page) Write(w io.Writer) error { return page.Execute(w, p) }
