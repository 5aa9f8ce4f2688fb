package report

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// Plot geometry: every plot is drawn in the same box of PlotW × PlotH user units; the page
// scales it to the width of its column (viewBox), so two columns fit a 1280 px window.
const (
	PlotW, PlotH = 760, 330
	// The data area inside a plot: left, top, right and bottom margins hold the axes.
	MarginL, MarginT, MarginR, MarginB = 70, 34, 150, 46
)

// palette is a categorical colour scale readable on white.
var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"}

// svg builds one plot's SVG text.
type svg struct {
	b                     strings.Builder
	x0, x1, y0, y1        float64 // data ranges (log10 of x when logX)
	logX, logY            bool
	title, xlabel, ylabel string
	legend                []string
}

func newSVG(title, xlabel, ylabel string) *svg {
	s := &svg{title: title, xlabel: xlabel, ylabel: ylabel}
	fmt.Fprintf(&s.b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" class="plot" role="img">`, PlotW, PlotH)
	fmt.Fprintf(&s.b, `<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>`, PlotW, PlotH)
	fmt.Fprintf(&s.b, `<text x="%d" y="20" class="title">%s</text>`, MarginL, esc(title))
	return s
}

func esc(s string) string { return html.EscapeString(s) }

// scale sets the data ranges (for a log axis, the values themselves: the log is taken here).
func (s *svg) scale(x0, x1, y0, y1 float64) {
	if s.logX {
		x0, x1 = math.Log10(x0), math.Log10(x1)
	}
	if s.logY {
		y0, y1 = math.Log10(y0), math.Log10(y1)
	}
	if x1 <= x0 {
		x0, x1 = x0-1, x0+1
	}
	if y1 <= y0 {
		y0, y1 = y0-1, y0+1
	}
	s.x0, s.x1, s.y0, s.y1 = x0, x1, y0, y1
}

func (s *svg) X(v float64) float64 {
	if s.logX {
		v = math.Log10(v)
	}
	return MarginL + (v-s.x0)/(s.x1-s.x0)*float64(PlotW-MarginL-MarginR)
}

func (s *svg) Y(v float64) float64 {
	if s.logY {
		v = math.Log10(v)
	}
	return float64(PlotH-MarginB) - (v-s.y0)/(s.y1-s.y0)*float64(PlotH-MarginT-MarginB)
}

// axes draws the frame, grid lines at the ticks and the axis labels.
func (s *svg) axes(xt []tick, yt []tick) {
	l, r, t, b := float64(MarginL), float64(PlotW-MarginR), float64(MarginT), float64(PlotH-MarginB)
	for _, k := range xt {
		x := s.X(k.v)
		fmt.Fprintf(&s.b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" class="grid"/><text x="%.1f" y="%.1f" class="tick" text-anchor="middle">%s</text>`,
			x, t, x, b, x, b+16, esc(k.label))
	}
	for _, k := range yt {
		y := s.Y(k.v)
		fmt.Fprintf(&s.b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" class="grid"/><text x="%.1f" y="%.1f" class="tick" text-anchor="end">%s</text>`,
			l, y, r, y, l-6, y+4, esc(k.label))
	}
	fmt.Fprintf(&s.b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" class="frame"/>`, l, t, r-l, b-t)
	s.axisTitles()
}

// axisTitles writes the x axis's title under the data area and the y axis's beside it.
func (s *svg) axisTitles() {
	l, r, t, b := float64(MarginL), float64(PlotW-MarginR), float64(MarginT), float64(PlotH-MarginB)
	fmt.Fprintf(&s.b, `<text x="%.1f" y="%d" class="label" text-anchor="middle">%s</text>`, (l+r)/2, PlotH-8, esc(s.xlabel))
	fmt.Fprintf(&s.b, `<text transform="translate(16 %.1f) rotate(-90)" class="label" text-anchor="middle">%s</text>`, (t+b)/2, esc(s.ylabel))
}

// dot draws a marker with a tooltip.
func (s *svg) dot(x, y float64, r float64, colour, tip string) {
	fmt.Fprintf(&s.b, `<circle cx="%.1f" cy="%.1f" r="%.1f" fill="%s" fill-opacity="0.75"><title>%s</title></circle>`,
		s.X(x), s.Y(y), r, colour, esc(tip))
}

// diamond marks a summary point (a median) with a tooltip.
func (s *svg) diamond(x, y float64, colour, tip string) {
	cx, cy := s.X(x), s.Y(y)
	fmt.Fprintf(&s.b, `<path d="M%.1f %.1fl6 6l-6 6l-6 -6z" fill="%s" stroke="#000" stroke-width="1"><title>%s</title></path>`,
		cx, cy-6, colour, esc(tip))
}

// line draws a polyline through data points.
func (s *svg) line(xs, ys []float64, colour string) {
	var pts []string
	for i := range xs {
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", s.X(xs[i]), s.Y(ys[i])))
	}
	fmt.Fprintf(&s.b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`, strings.Join(pts, " "), colour)
}

// rect draws a box in pixel coordinates with a tooltip.
func (s *svg) rect(x, y, w, h float64, colour, tip string) {
	fmt.Fprintf(&s.b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s</title></rect>`, x, y, w, h, colour, esc(tip))
}

func (s *svg) text(x, y float64, anchor, class, t string) {
	fmt.Fprintf(&s.b, `<text x="%.1f" y="%.1f" text-anchor="%s" class="%s">%s</text>`, x, y, anchor, class, esc(t))
}

// key draws the legend in the right margin.
func (s *svg) key(names []string, colours []string) {
	x := float64(PlotW - MarginR + 12)
	for i, n := range names {
		if i == 14 {
			s.text(x, float64(MarginT+8+i*17), "start", "tick", fmt.Sprintf("… %d more", len(names)-i))
			break
		}
		y := float64(MarginT + 8 + i*17)
		fmt.Fprintf(&s.b, `<rect x="%.0f" y="%.0f" width="10" height="10" fill="%s"/>`, x, y-9, colours[i])
		s.text(x+15, y, "start", "tick", clip(n, 18))
	}
}

func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// empty writes a plot that says why it has nothing to show.
func (s *svg) empty(why string) string {
	s.text(PlotW/2, PlotH/2, "middle", "empty", why)
	return s.done()
}

func (s *svg) done() string {
	s.b.WriteString("</svg>")
	return s.b.String()
}

// tick is an axis tick: a value on the data scale and its label.
type tick struct {
	v     float64
	label string
}

// linearTicks returns about n round ticks over [lo, hi].
func linearTicks(lo, hi float64, n int, format func(float64) string) []tick {
	if hi <= lo {
		return []tick{{lo, format(lo)}}
	}
	raw := (hi - lo) / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var t []tick
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
		t = append(t, tick{v, format(v)})
	}
	return t
}

// countTicks returns round whole-number ticks over [0, hi], for axes that count things: a count
// has no halves.
func countTicks(hi float64) []tick {
	t := linearTicks(0, hi, 5, num)
	if len(t) > 1 && t[1].v-t[0].v >= 1 {
		return t
	}
	t = t[:0]
	for v := 0.0; v <= hi+1e-9; v++ {
		t = append(t, tick{v, num(v)})
	}
	return t
}

// logTicks returns ticks for a log axis over [lo, hi] (powers of ten): every decade, and 2 and 5
// times each when the range spans two decades or fewer, so the axis never has only its ends.
func logTicks(lo, hi float64, format func(float64) string) []tick {
	var t []tick
	few := math.Log10(hi/lo) <= 2.01
	for d := lo; d <= hi*1.0001; d *= 10 {
		for _, m := range []float64{1, 2, 5} {
			if v := d * m; v <= hi*1.0001 && (m == 1 || few) {
				t = append(t, tick{v, format(v)})
			}
		}
	}
	return t
}

// timeAxis picks the unit of a time axis spanning span ns: the scale to divide ns by, and its name.
func timeAxis(spanNs float64) (div float64, unit string) {
	switch {
	case spanNs >= 10e9:
		return 1e9, "s"
	case spanNs >= 10e6:
		return 1e6, "ms"
	}
	return 1e3, "µs"
}

// niceMax rounds up to 1, 2 or 5 times a power of ten.
func niceMax(v float64) float64 {
	if v <= 0 {
		return 1
	}
	mag := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= v {
			return m * mag
		}
	}
	return 10 * mag
}
