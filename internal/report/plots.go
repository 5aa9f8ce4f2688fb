package report

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/ncclprof/ncclprof/internal/commops"
	"github.com/ncclprof/ncclprof/internal/quantile"
	"github.com/ncclprof/ncclprof/internal/skew"
	"github.com/ncclprof/ncclprof/internal/stats"
)

// maxDots bounds the markers of a scatter plot (every n-th operation beyond it), so that a page of
// a long job stays small and quick to draw.
const maxDots = 4000

// funcColours gives each function its colour, in order of first appearance.
func funcColours(s *commops.Set) (names []string, colour map[string]string) {
	colour = map[string]string{}
	for i := range s.Ops {
		if f := s.Ops[i].Func; colour[f] == "" {
			colour[f] = palette[len(names)%len(palette)]
			names = append(names, f)
		}
	}
	return names, colour
}

// bandwidthPlot: bus bandwidth of every timed operation against its size, per function, with the
// median of each size bucket joined by a line.
func bandwidthPlot(s *commops.Set) string {
	p := newSVG("Bus bandwidth against message size", "message size (nccl-tests' size, bytes)", "bus bandwidth (GB/s)")
	p.logX = true
	type pt struct {
		x, y float64
		op   *commops.Op
	}
	var pts []pt
	for i := range s.Ops {
		o := &s.Ops[i]
		if o.Source == commops.NoTime || o.Bytes == 0 {
			continue
		}
		_, bus := stats.Bandwidth(o.Func, o.Bytes, o.Time, s.Comms[o.Comm].NRanks)
		if !math.IsNaN(bus) && bus > 0 {
			pts = append(pts, pt{float64(o.Bytes), bus, o})
		}
	}
	if len(pts) == 0 {
		return p.empty("no timed operation with a known bus bandwidth")
	}
	xs, ys := make([]float64, len(pts)), make([]float64, len(pts))
	for i, q := range pts {
		xs[i], ys[i] = q.x, q.y
	}
	sx, sy := quantile.Sorted(xs), quantile.Sorted(ys)
	lo, hi := math.Pow(2, math.Floor(math.Log2(sx[0]))), math.Pow(2, math.Ceil(math.Log2(sx[len(sx)-1])))
	// The axis holds 95% of the operations: a few absurd rates (an operation whose rank reached
	// it after the others had finished it) would squash the rest against the bottom; those are
	// drawn at the top edge.
	p.scale(lo/1.25, hi*1.25, 0, niceMax(quantile.Of(sy, 0.95)*1.3))
	step := math.Pow(2, math.Max(1, math.Ceil(math.Log2(hi/lo)/8)))
	var xt []tick
	for v := lo; v <= hi; v *= step {
		xt = append(xt, tick{v, stats.Size(uint64(v))})
	}
	p.axes(xt, linearTicks(0, p.y1, 5, num))
	names, colour := funcColours(s)
	stride := max(1, len(pts)/maxDots)
	for i := 0; i < len(pts); i += stride {
		q := pts[i]
		p.dot(q.x, math.Min(q.y, p.y1), 2.5, colour[q.op.Func], fmt.Sprintf("%s %s: %.3f GB/s in %.1f µs",
			q.op.Func, stats.Size(q.op.Bytes), q.y, float64(q.op.Time)/1e3))
	}
	// Medians per function and size bucket, at the bucket's median size.
	med, size := map[string]map[uint64][]float64{}, map[string]map[uint64][]float64{}
	for _, q := range pts {
		if med[q.op.Func] == nil {
			med[q.op.Func], size[q.op.Func] = map[uint64][]float64{}, map[uint64][]float64{}
		}
		b := stats.Bucket(q.op.Bytes)
		med[q.op.Func][b] = append(med[q.op.Func][b], q.y)
		size[q.op.Func][b] = append(size[q.op.Func][b], q.x)
	}
	var used []string
	for _, f := range names {
		if med[f] == nil {
			continue
		}
		used = append(used, f)
		var bs []uint64
		for b := range med[f] {
			bs = append(bs, b)
		}
		sort.Slice(bs, func(i, j int) bool { return bs[i] < bs[j] })
		var lx, ly []float64
		for _, b := range bs {
			x, y := quantile.Median(size[f][b]), math.Min(quantile.Median(med[f][b]), p.y1)
			lx, ly = append(lx, x), append(ly, y)
			p.diamond(x, y, colour[f], fmt.Sprintf("%s %s: median %.3f GB/s over %d operations", f, stats.BucketLabel(b), y, len(med[f][b])))
		}
		p.line(lx, ly, colour[f])
	}
	cs := make([]string, len(used))
	for i, f := range used {
		cs[i] = colour[f]
	}
	p.key(used, cs)
	return p.done()
}

// heatmap: how long NCCL was busy for every rank (row) on every communicator (column), operations
// in flight together counted once. A slow rank is the lightest cell, which reads backwards until
// one knows why (the others wait for it inside NCCL): the plot says so, naming the ranks skew
// flagged.
func heatmap(s *commops.Set, sk *skew.Result) string {
	p := newSVG("Busy time per rank and communicator", "communicator", "rank")
	procs := make([]int, len(s.Procs))
	for i := range procs {
		procs[i] = i
	}
	sort.SliceStable(procs, func(i, j int) bool { return s.Procs[procs[i]].Rank < s.Procs[procs[j]].Rank })
	row := make([]int, len(s.Procs))
	for r, i := range procs {
		row[i] = r
	}
	nc := len(s.Comms)
	busy := s.BusyBy(len(s.Procs)*nc, func(o *commops.Op) int { return row[o.Proc]*nc + int(o.Comm) })
	cells := make([][]int64, len(s.Procs))
	var top int64
	for r := range cells {
		cells[r] = make([]int64, nc)
		for c := range cells[r] {
			cells[r][c] = busy[r*nc+c].BusyNs
			top = max(top, cells[r][c])
		}
	}
	approx := "" // the totals of sampled traces are estimates
	if s.Sampling.On() {
		approx = "~"
	}
	if top == 0 {
		return p.empty("no timed operation")
	}
	l, t := float64(MarginL), float64(MarginT)
	w := float64(PlotW-MarginL-MarginR) / float64(len(s.Comms))
	h := float64(PlotH-MarginT-MarginB) / float64(len(s.Procs))
	every := max(1, len(s.Procs)/16)
	for r, pi := range procs {
		pr := s.Procs[pi]
		for c := range s.Comms {
			v := cells[r][c]
			tip := fmt.Sprintf("rank %d (%s pid %d), %s: %s%.3f ms", pr.Rank, pr.Host, pr.Pid, s.Comms[c].Label(), approx, float64(v)/1e6)
			p.rect(l+float64(c)*w+0.5, t+float64(r)*h+0.5, w-1, h-1, heat(float64(v)/float64(top)), tip)
			if w > 70 && h > 14 && v > 0 {
				class := "cell"
				if float64(v) > 0.5*float64(top) { // white on the dark half of the scale
					class = "cell dark"
				}
				p.text(l+(float64(c)+0.5)*w, t+(float64(r)+0.5)*h+4, "middle", class, fmt.Sprintf("%s%.1f ms", approx, float64(v)/1e6))
			}
		}
		if r%every == 0 {
			p.text(l-6, t+(float64(r)+0.5)*h+4, "end", "tick", fmt.Sprintf("%d", pr.Rank))
		}
	}
	for c := range s.Comms {
		p.text(l+(float64(c)+0.5)*w, float64(PlotH-MarginB+16), "middle", "tick", clip(s.Comms[c].Label(), int(max(w/7, 4))))
	}
	p.axisTitles()
	p.text(float64(PlotW-MarginR+12), t+10, "start", "tick", "0 ms (white)")
	p.rect(float64(PlotW-MarginR+12), t+18, 14, 60, "url(#heatgrad)", "colour scale")
	p.text(float64(PlotW-MarginR+12), t+94, "start", "tick", fmt.Sprintf("%.1f ms", float64(top)/1e6))
	for i, line := range heatmapLegend(sk) {
		p.text(float64(PlotW-MarginR+12), t+122+float64(i)*15, "start", "tick", line)
	}
	fmt.Fprintf(&p.b, `<defs><linearGradient id="heatgrad" x1="0" y1="0" x2="0" y2="1"><stop offset="0" stop-color="%s"/><stop offset="1" stop-color="%s"/></linearGradient></defs>`, heat(0), heat(1))
	return p.done()
}

// heatmapLegend: the lines beside the heat map's scale that say why a slow rank is light: it
// arrives last, so it waits least in NCCL, while the others wait there for it.
func heatmapLegend(sk *skew.Result) []string {
	lines := []string{"A slow rank is light:", "it arrives last and", "waits least, while", "the others wait for", "it inside NCCL."}
	if sk == nil || len(sk.Slow) == 0 {
		return lines
	}
	seen := map[int]bool{}
	var ranks []string
	for _, r := range sk.Slow {
		if !seen[r.GlobalRank] {
			seen[r.GlobalRank] = true
			ranks = append(ranks, fmt.Sprint(r.GlobalRank))
		}
	}
	name := "Slow here: rank "
	if len(ranks) > 1 {
		name = "Slow here: ranks "
	}
	return append(lines, clip(name+strings.Join(ranks, ", "), 24))
}

// heat maps 0..1 to white → dark blue.
func heat(f float64) string {
	f = math.Max(0, math.Min(1, f))
	r := 247 - f*(247-8)
	g := 251 - f*(251-48)
	b := 255 - f*(255-107)
	return fmt.Sprintf("#%02x%02x%02x", int(r), int(g), int(b))
}

// skewPlot: each matched collective's skew (first to last arrival) over the run, per communicator;
// those whose last rank was late are drawn larger, in red.
func skewPlot(s *commops.Set, r *skew.Result) string {
	p := newSVG("Arrival skew of each collective over time", "", "skew, first to last arrival")
	p.logY = true
	if r == nil || len(r.Points) == 0 {
		return p.empty("no collective seen on two ranks or more")
	}
	t0, t1, lo, hi := r.Points[0].AtNs, r.Points[0].AtNs, math.Inf(1), 0.0
	for _, q := range r.Points {
		t0, t1 = min(t0, q.AtNs), max(t1, q.AtNs)
		if q.SkewNs > 0 {
			lo, hi = math.Min(lo, float64(q.SkewNs)), math.Max(hi, float64(q.SkewNs))
		}
	}
	if hi == 0 {
		return p.empty("every collective's ranks arrived together")
	}
	lo, hi = math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi)))
	div, unit := timeAxis(float64(t1 - t0))
	p.xlabel = "time since the first collective (" + unit + ")"
	p.scale(0, float64(t1-t0)/div, lo, hi)
	p.axes(linearTicks(0, p.x1, 6, num), logTicks(lo, hi, fmtNs))
	names := make([]string, len(s.Comms))
	cs := make([]string, len(s.Comms))
	for i, c := range s.Comms {
		names[i], cs[i] = c.Label(), palette[i%len(palette)]
	}
	stride := max(1, len(r.Points)/maxDots)
	for i, q := range r.Points {
		if q.SkewNs <= 0 || (i%stride != 0 && !q.Late) {
			continue
		}
		x, y := float64(q.AtNs-t0)/div, float64(q.SkewNs)
		tip := fmt.Sprintf("%s: skew %s, last rank %d", names[q.Comm], fmtNs(y), q.Last)
		if q.Late {
			p.dot(x, y, 4.5, "#d62728", tip+" (late)")
		} else {
			p.dot(x, y, 2.2, cs[q.Comm], tip)
		}
	}
	p.key(append(names, "late last rank"), append(cs, "#d62728"))
	return p.done()
}

// latePlot: how often each rank arrived late (bars), slow ranks in red.
func latePlot(r *skew.Result) string {
	p := newSVG("Late arrivals per rank", "global rank", "late collectives")
	if r == nil || len(r.Ranks) == 0 {
		return p.empty("no collective seen on two ranks or more")
	}
	late, slow := map[int]int{}, map[int]bool{}
	ranks := []int{}
	for _, k := range r.Ranks {
		if _, ok := late[k.GlobalRank]; !ok {
			ranks = append(ranks, k.GlobalRank)
		}
		late[k.GlobalRank] += k.Late
		slow[k.GlobalRank] = slow[k.GlobalRank] || k.Slow
	}
	sort.Ints(ranks)
	top := 0
	for _, n := range late {
		top = max(top, n)
	}
	p.scale(-0.5, float64(len(ranks))-0.5, 0, niceMax(float64(max(top, 1))*1.1))
	p.axes(nil, countTicks(p.y1))
	w := float64(PlotW-MarginL-MarginR) / float64(len(ranks))
	every := max(1, len(ranks)/24)
	for i, g := range ranks {
		colour := "#1f77b4"
		if slow[g] {
			colour = "#d62728"
		}
		x, y0 := p.X(float64(i)), p.Y(0)
		y := p.Y(float64(late[g]))
		p.rect(x-w*0.4, y, w*0.8, math.Max(y0-y, 0), colour, fmt.Sprintf("rank %d: late on %d collectives", g, late[g]))
		if i%every == 0 {
			p.text(x, float64(PlotH-MarginB+16), "middle", "tick", fmt.Sprint(g))
		}
	}
	p.key([]string{"slow rank", "other ranks"}, []string{"#d62728", "#1f77b4"})
	return p.done()
}

// num prints a tick value without floating-point noise (0.30000000000000004).
func num(v float64) string { return fmt.Sprintf("%.4g", v) }

func fmtNs(v float64) string {
	switch {
	case v >= 1e9:
		return fmt.Sprintf("%g s", v/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%g ms", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%g µs", v/1e3)
	}
	return fmt.Sprintf("%g ns", v)
}
