package report

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/ncclprof/ncclprof/internal/commops"
	"github.com/ncclprof/ncclprof/internal/commops/commopstest"
	"github.com/ncclprof/ncclprof/internal/skew"
	"github.com/ncclprof/ncclprof/internal/stats"
	"github.com/ncclprof/ncclprof/internal/synth"
)

func render(t *testing.T, o synth.JobOptions) string {
	s, _ := commopstest.Job(t, o, commops.Options{})
	var b bytes.Buffer
	if err := Build(s, stats.Compute(s), skew.Analyze(s, skew.Defaults), "t <&> t").Write(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// The page has its four plots with data, the slow rank, and nothing it would fetch.
func TestPage(t *testing.T) {
	h := render(t, synth.DefaultJob(4, 50))
	if n := strings.Count(h, "<svg"); n != 4 {
		t.Errorf("%d plots", n)
	}
	if strings.Count(h, "<circle") < 100 || strings.Contains(h, `class="empty"`) {
		t.Errorf("the scatter plots have too few markers")
	}
	for _, bad := range []string{"<script", "<link", "src=", "url(http"} {
		if strings.Contains(h, bad) {
			t.Errorf("the page has %q", bad)
		}
	}
	if !strings.Contains(h, "<title>t &lt;&amp;&gt; t</title>") {
		t.Error("the title is not escaped")
	}
	if !strings.Contains(h, `<tr class="slow"><td class="l">world</td><td>1</td>`) {
		t.Error("the slow rank 1 is not shown")
	}
}

// A job where nothing is matched across ranks says so in the plots instead of drawing nothing.
func TestEmptyPlotsSayWhy(t *testing.T) {
	o := synth.DefaultJob(2, 5)
	o.Only = []int{0}
	h := render(t, o)
	if !strings.Contains(h, "no collective seen on two ranks or more") {
		t.Error("the skew plot of a single rank does not say why it is empty")
	}
}

// Issue 13 #4: operations in flight together count once in the busy time the header, the busy
// table and the heatmap show; their added-up time is shown as what it is. Rank 0 runs three
// AllReduces of 10 ms each inside 12 ms of wall time (on two communicators), rank 1 one of 4 ms.
func TestBusyTimeIsTheUnion(t *testing.T) {
	const ms = int64(1e6)
	base := int64(1_700_000_000) * 1e9
	op := func(proc, comm int32, seq, start, end int64) commops.Op {
		return commops.Op{Proc: proc, Comm: comm, Func: "AllReduce", Seq: seq, Peer: -1, Step: -1, Bytes: 1 << 20,
			Source: commops.Completion, Arrive: base + start, Done: base + end, Time: end - start}
	}
	s := &commops.Set{
		Files: []string{"a.json", "b.json"},
		Procs: []commops.Proc{{Rank: 0, Host: "h", Pid: 1}, {Rank: 1, Host: "h", Pid: 2}},
		Comms: []commops.Comm{{Hash: 1, Name: "dp", NRanks: 2}, {Hash: 2, Name: "tp", NRanks: 2}},
		Ops: []commops.Op{
			op(0, 0, 0, 0, 10*ms), op(0, 1, 0, 1*ms, 11*ms), op(0, 0, 1, 2*ms, 12*ms),
			op(1, 0, 0, 0, 4*ms),
		},
	}
	var b bytes.Buffer
	if err := Build(s, stats.Compute(s), skew.Analyze(s, skew.Defaults), "busy").Write(&b); err != nil {
		t.Fatal(err)
	}
	h := b.String()
	for _, want := range []string{
		"4 NCCL operations on 2 ranks · NCCL busy 8.000 ms per rank (median; most: rank 0, 12.000 ms) · operation times add up to 34.000 ms",
		"<tr><td>0</td><td class=\"l\">h</td><td>1</td><td>3</td><td>12.000</td><td>12.000</td><td>100.0%</td><td>30.000</td></tr>",
		"<tr><td>1</td><td class=\"l\">h</td><td>2</td><td>1</td><td>4.000</td><td>4.000</td><td>100.0%</td><td>4.000</td></tr>",
		"rank 0 (h pid 1), dp: 12.000 ms", // two overlapping operations on dp: 0–12 ms
		"rank 0 (h pid 1), tp: 10.000 ms",
	} {
		if !strings.Contains(h, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
}

// tickLabels are the texts of a plot's tick labels (and its key), in order.
func tickLabels(svg string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`class="tick"[^>]*>([^<]*)<`).FindAllStringSubmatch(svg, -1) {
		out = append(out, m[1])
	}
	return out
}

// Issue 13 #9: axes a person can read. A skew plot spanning one decade gets more ticks than its
// two ends, and a run of 0.4 ms is timed in µs (not "0.0001" s); a count axis has no halves; the
// heatmap names both its axes.
func TestAxesReadable(t *testing.T) {
	base := int64(1_700_000_000) * 1e9
	r := &skew.Result{}
	for i := 0; i < 5; i++ {
		r.Points = append(r.Points, skew.Point{AtNs: base + int64(i)*100_000, SkewNs: int64(20_000 + i*10_000)})
	}
	s := &commops.Set{Comms: []commops.Comm{{Name: "world", NRanks: 2}}}
	svg := skewPlot(s, r)
	labels := strings.Join(tickLabels(svg), " ")
	if want := "0 100 200 300 400 10 µs 20 µs 50 µs 100 µs world late last rank"; labels != want { // then the key
		t.Errorf("skew plot ticks %q, want %q", labels, want)
	}
	if !strings.Contains(svg, "time since the first collective (µs)") {
		t.Error("the skew plot's time axis does not say µs")
	}
	r.Ranks = []*skew.RankRow{{GlobalRank: 0, Late: 1}, {GlobalRank: 1}}
	if labels := tickLabels(latePlot(r)); strings.Join(labels, " ") != "0 1 2 0 1 slow rank other ranks" {
		t.Errorf("late arrivals ticks %q: a count has no halves", labels)
	}
	h := heatmap(&commops.Set{Procs: []commops.Proc{{Rank: 0}}, Comms: s.Comms, Ops: []commops.Op{
		{Source: commops.Completion, Arrive: base, Done: base + 1e6, Time: 1e6}}}, nil)
	for _, title := range []string{`>rank</text>`, `>communicator</text>`} {
		if !strings.Contains(h, title) {
			t.Errorf("the heatmap has no axis title %s", title)
		}
	}
}

// A CUDA graph's replays share a seq: the slowest operations and the skew table name each by its
// replay ("7 replay 2"), as the text outputs do, not by a seq several rows share.
func TestReplaysNamedInThePage(t *testing.T) {
	const ms = int64(1e6)
	base := int64(1_700_000_000) * 1e9
	var ops []commops.Op
	for proc := range int32(2) {
		for n := range 3 {
			start := int64(n) * 20 * ms
			if proc == 1 {
				start += ms // rank 1 arrives 1 ms late on every replay
			}
			ops = append(ops, commops.Op{Proc: proc, Rank: proc, Func: "AllReduce", Seq: 7, GraphReplay: true, Peer: -1, Step: -1,
				Bytes: 1 << 20, Source: commops.Completion, Arrive: base + start, Done: base + start + int64(n+1)*ms, Time: int64(n+1) * ms})
		}
	}
	s := &commops.Set{Files: []string{"a.json", "b.json"}, Procs: []commops.Proc{{Rank: 0, Host: "h", Pid: 1}, {Rank: 1, Host: "h", Pid: 2}},
		Comms: []commops.Comm{{Hash: 1, Name: "dp", NRanks: 2}}, Ops: ops}
	s.NumberRepeats()
	var b bytes.Buffer
	if err := Build(s, stats.Compute(s), skew.Analyze(s, skew.Defaults), "replays").Write(&b); err != nil {
		t.Fatal(err)
	}
	h := b.String()
	for _, want := range []string{"<td>7 replay 2</td>", "<td>7 replay 0</td>"} {
		if !strings.Contains(h, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
}
