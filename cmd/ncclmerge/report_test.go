package main

import (
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ncclprof/ncclprof/internal/merge"
	"github.com/ncclprof/ncclprof/internal/report"
	"github.com/ncclprof/ncclprof/internal/synth"
	"github.com/ncclprof/ncclprof/internal/testtraces"
	"github.com/tidwall/gjson"
)

// pageLayout is where a page puts its plots in a window w px wide, as Chromium lays it out: each
// plot's box, and the page's width against the window's (a page wider than its window is cut).
type pageLayout struct {
	Plots           []image.Rectangle
	Scroll, Visible int
	// Buttons: each copy button's right edge and that of the section holding it, which hides
	// what lies beyond it behind a scroll.
	Buttons [][2]int
}

// layoutOf loads a copy of the page with a script that reports its layout in the DOM.
func layoutOf(t *testing.T, bin, html string, w int) pageLayout {
	probe := filepath.Join(t.TempDir(), "probe.html")
	os.WriteFile(probe, []byte(strings.Replace(html, "</body>", `<script>
var r=[].map.call(document.querySelectorAll("svg.plot"),function(e){var b=e.getBoundingClientRect();return [b.left,b.top,b.right,b.bottom].map(Math.round)});
var c=[].map.call(document.querySelectorAll("button.copy"),function(b){return [b.getBoundingClientRect().right,b.closest("section").getBoundingClientRect().right].map(Math.round)});
document.body.dataset.layout=JSON.stringify({plots:r,buttons:c,scroll:document.documentElement.scrollWidth,visible:document.documentElement.clientWidth});
</script></body>`, 1)), 0o644)
	dom, _ := headless(t, bin, fmt.Sprintf("--window-size=%d,1300", w), "--dump-dom", "file://"+probe)
	m := regexp.MustCompile(`data-layout="([^"]*)"`).FindSubmatch(dom)
	if m == nil {
		t.Fatalf("no layout reported at %d px", w)
	}
	var l struct {
		Plots           [][4]int
		Buttons         [][2]int
		Scroll, Visible int
	}
	if err := json.Unmarshal([]byte(strings.ReplaceAll(string(m[1]), "&quot;", `"`)), &l); err != nil {
		t.Fatal(err)
	}
	out := pageLayout{Scroll: l.Scroll, Visible: l.Visible, Buttons: l.Buttons}
	for _, p := range l.Plots {
		out.Plots = append(out.Plots, image.Rect(p[0], p[1], p[2], p[3]))
	}
	return out
}

// dataArea is the part of a plot's box (drawn PlotW wide, scaled to the box) inside its axes.
func dataArea(box image.Rectangle) image.Rectangle {
	k := float64(box.Dx()) / report.PlotW
	at := func(x, y int) image.Point {
		return image.Pt(box.Min.X+int(float64(x)*k), box.Min.Y+int(float64(y)*k))
	}
	return image.Rectangle{at(report.MarginL+3, report.MarginT+3), at(report.PlotW-report.MarginR-3, report.PlotH-report.MarginB-3)}
}

// coloured counts the pixels of a region that are neither white nor grey: data marks (dots,
// lines, bars, heatmap cells), not the frame, grid lines or text.
func coloured(img image.Image, r image.Rectangle) int {
	n := 0
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			cr, cg, cb, _ := img.At(x, y).RGBA()
			hi, lo := max(cr, cg, cb)>>8, min(cr, cg, cb)>>8
			if hi-lo > 60 {
				n++
			}
		}
	}
	return n
}

// The report of the planted job renders in headless Chromium without a console message, names
// the slow rank, fetches nothing, and its four plots are drawn: each plot's data area has marks.
// NCCLMERGE_REPORT_SCREENSHOT=path keeps the screenshot (docs/img/ncclmerge-report.png).
func TestReportRendersInChromium(t *testing.T) {
	bin := chromium(t)
	dir, truth := plantedJob(t)
	out := filepath.Join(t.TempDir(), "report.html")
	if msg, err := run(t, "report", "-q", dir, "-o", out, "--title", "Simulated 8-rank job, rank 3 slow"); err != nil {
		t.Fatalf("%v\n%s", err, msg)
	}
	html := string(mustRead(t, out))
	// Self-contained: no script, style sheet, image or font from anywhere.
	for _, bad := range []string{"<script", "<link", "<img", "src=", "@import", "url(http"} {
		if strings.Contains(html, bad) {
			t.Errorf("the page has %q: it must need no network", bad)
		}
	}
	if n := strings.Count(html, "<svg"); n != 4 {
		t.Errorf("%d plots, want 4", n)
	}
	if !regexp.MustCompile(fmt.Sprintf(`<tr class="slow"><td class="l">world</td><td>%d</td>`, truth.SlowRank)).MatchString(html) {
		t.Errorf("the page does not name rank %d of world as slow", truth.SlowRank)
	}
	// The heat map says why the slow rank is its lightest cell, and names it.
	for _, want := range []string{">A slow rank is light:<", ">the others wait for<", fmt.Sprintf(">Slow here: rank %d<", truth.SlowRank)} {
		if !strings.Contains(html, want) {
			t.Errorf("the heat map does not say %q", want)
		}
	}
	// Plugin traces alone: the why table says what it needs instead of a row per late arrival.
	if !strings.Contains(html, "<h2>Why they were late</h2>") || !strings.Contains(html, "No rank's torch.profiler trace is among the inputs") || strings.Contains(html, "<td class=\"l\">unknown</td>") {
		t.Error("the why section of plugin traces alone does not say to merge the torch.profiler traces, or lists unknowns")
	}
	if !strings.Contains(html, "SELECT * FROM slice WHERE ts = ") {
		t.Error("the slowest operations have no Perfetto reference")
	}
	if n := strings.Count(html, `<button type="button" class="copy"`); n < 2 || n != strings.Count(html, "SELECT * FROM slice WHERE ts = ") {
		t.Errorf("%d copy buttons for %d Perfetto queries", n, strings.Count(html, "SELECT * FROM slice WHERE ts = "))
	}
	url := "file://" + out
	dom, console := headless(t, bin, "--dump-dom", url)
	if console != "" {
		t.Errorf("console messages:\n%s", console)
	}
	if !strings.Contains(string(dom), "Late arrivals per rank") {
		t.Fatalf("Chromium did not render the page: %.300s", dom)
	}
	// A click on the first copy button (from a script added to a copy of the page) puts its query
	// on the clipboard, or, where the browser refuses (headless, no user gesture), selects it for
	// Ctrl+C: either way the query is selected and the button says which.
	clicked := filepath.Join(t.TempDir(), "clicked.html")
	os.WriteFile(clicked, []byte(strings.Replace(html, "</body>", `<script>document.querySelector("button.copy").click();
setTimeout(function(){document.body.dataset.selected=getSelection().toString();document.body.dataset.label=document.querySelector("button.copy").textContent},100)</script></body>`, 1)), 0o644)
	dom, console = headless(t, bin, "--dump-dom", "file://"+clicked)
	if console != "" {
		t.Errorf("console messages after a click on copy:\n%s", console)
	}
	if m := regexp.MustCompile(`data-selected="(SELECT \* FROM slice WHERE ts = \d+)" data-label="(copied|selected: Ctrl\+C)"`).FindSubmatch(dom); m == nil || !strings.Contains(html, "<code>"+string(m[1])+"</code>") {
		t.Errorf("a click on copy did not select the first query: %s", regexp.MustCompile(`<body[^>]*>`).Find(dom))
	}
	// At 1280, 1400 and 1920 px (issue 13 #9: at 1400 px the right column was cut): the page is
	// no wider than the window, its four plots side by side two by two, and each drawn: its data
	// area has marks. Nothing coloured in the page's left margin. Every copy button is inside
	// its section (issue 25: at 1400 px the wide tables scrolled and hid them).
	names := []string{"bandwidth against size", "busy time per rank and communicator", "skew over time", "late arrivals per rank"}
	for _, w := range []int{1280, 1400, 1920} {
		l := layoutOf(t, bin, html, w)
		if l.Scroll > l.Visible || len(l.Plots) != 4 {
			t.Fatalf("at %d px: the page is %d px wide in a %d px window, %d plots", w, l.Scroll, l.Visible, len(l.Plots))
		}
		if len(l.Buttons) != strings.Count(html, `<button type="button" class="copy"`) {
			t.Errorf("at %d px: %d copy buttons laid out", w, len(l.Buttons))
		}
		for i, b := range l.Buttons {
			if b[0] > b[1] {
				t.Errorf("at %d px: copy button %d ends at %d px, past its section's edge at %d px (hidden behind a scroll)", w, i, b[0], b[1])
				break
			}
		}
		if a, b := l.Plots[0], l.Plots[1]; a.Min.Y != b.Min.Y || b.Min.X < a.Max.X || b.Max.X > l.Visible {
			t.Errorf("at %d px: plots not two side by side inside the window: %v %v", w, a, b)
		}
		shot := filepath.Join(t.TempDir(), "report.png")
		if _, console := headless(t, bin, fmt.Sprintf("--window-size=%d,1300", w), "--screenshot="+shot, url); console != "" {
			t.Errorf("console messages:\n%s", console)
		}
		f, err := os.Open(shot)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if img.Bounds().Dx() != w {
			t.Fatalf("the screenshot is %d px wide, asked for %d", img.Bounds().Dx(), w)
		}
		for i, name := range names {
			area := dataArea(l.Plots[i])
			// A few dozen markers of 5 px, or bars and cells: far more than stray anti-aliasing.
			n := coloured(img, area)
			if n < 400 {
				t.Errorf("at %d px, plot %q: %d coloured pixels in its data area %v: not drawn", w, name, n, area)
			}
			t.Logf("at %d px, plot %q: %d coloured pixels", w, name, n)
		}
		top, bottom := l.Plots[0].Min.Y, l.Plots[3].Max.Y
		if n := coloured(img, image.Rect(2, top, l.Plots[0].Min.X-2, bottom)); n > 0 {
			t.Errorf("at %d px: %d coloured pixels in the left margin", w, n)
		}
		if dst := os.Getenv("NCCLMERGE_REPORT_SCREENSHOT"); dst != "" && w == 1280 {
			// For the documentation: the same page without the window's scroll bar.
			headless(t, bin, fmt.Sprintf("--window-size=%d,1300", w), "--hide-scrollbars", "--screenshot="+dst, url)
		}
	}
}

// On real torch.profiler traces (testdata/kineto) merged with plugin traces synthesized from
// them, stats --each gives every NCCL kernel its bus bandwidth: its size over its GPU duration
// times nccl-tests' factor, checked here against values computed from the merged file itself.
func TestStatsEachKernelOfRealTraces(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"nccl_parser_config_nccl_data", "trace_filter_sampled_rank-0", "negative_queue_length_values_check_rank0"} {
		k := testtraces.Kineto(t, name+".json.gz")
		plugin, _, err := synth.PluginFromKineto(k, synth.PluginOptions{Seed: 1, Host: "real"})
		if err != nil {
			t.Fatal(err)
		}
		np := filepath.Join(dir, name+".trace.json")
		os.WriteFile(np, plugin, 0o644)
		merged := filepath.Join(dir, name+".merged.json")
		if _, err := merge.Run([]string{k}, []string{np}, merged, merge.Options{}); err != nil {
			t.Fatal(err)
		}
		out, err := run(t, "stats", "-q", "--each", "--format", "json", merged)
		if err != nil {
			t.Fatal(err)
		}
		var rows []struct {
			Func     string   `json:"func"`
			Bytes    uint64   `json:"bytes"`
			TimeNs   int64    `json:"time_ns"`
			BusBW    *float64 `json:"busbw_GBps"`
			TimeFrom string   `json:"time_from"`
			TsUs     float64  `json:"slice_ts_us"`
			Tid      int64    `json:"slice_tid"`
		}
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			t.Fatal(err)
		}
		byTs := map[string]int{}
		for i, r := range rows {
			byTs[fmt.Sprintf("%.3f/%d", r.TsUs, r.Tid)] = i // two streams' kernels may start together
		}
		kernels := 0
		gjson.GetBytes(mustRead(t, merged), "traceEvents").ForEach(func(_, e gjson.Result) bool {
			n := e.Get("args.nccl")
			if e.Get("cat").Str != "kernel" || !n.Exists() {
				return true
			}
			kernels++
			i, ok := byTs[fmt.Sprintf("%.3f/%d", e.Get("ts").Float(), e.Get("tid").Int())]
			if !ok {
				t.Errorf("%s: kernel at ts %.3f has no row", name, e.Get("ts").Float())
				return true
			}
			r := rows[i]
			// By hand: bytes / duration, times 2(n−1)/n for AllReduce, (n−1)/n for AllGather and
			// ReduceScatter, 1 for Broadcast and SendRecv.
			nr := float64(n.Get("nranks").Int())
			factor := map[string]float64{"AllReduce": 2 * (nr - 1) / nr, "AllGather": (nr - 1) / nr, "ReduceScatter": (nr - 1) / nr}[r.Func]
			if factor == 0 {
				factor = 1
			}
			want := float64(n.Get("bytes").Uint()) / (e.Get("dur").Float() * 1000) * factor
			if r.TimeFrom != "kernel" || r.BusBW == nil || math.Abs(*r.BusBW-want) > 0.0005+1e-6*want {
				t.Errorf("%s: kernel at ts %.3f: busbw %v from %s, want %.4f", name, e.Get("ts").Float(), r.BusBW, r.TimeFrom, want)
			}
			return true
		})
		if kernels == 0 || kernels != len(rows) {
			t.Errorf("%s: %d linked kernels, %d rows", name, kernels, len(rows))
		}
		if name == "nccl_parser_config_nccl_data" {
			// One kernel by hand, from Kineto's own arguments: the AllReduce at 4458676524716.094 µs
			// has "In msg nelems" 2049000 of Float (4 B) = 8196000 B, runs 3306.963 µs on a
			// group of 2 (factor 2·1/2 = 1): 8196000 / 3306963 ns = 2.47840 GB/s.
			i, ok := byTs["4458676524716.094/40"]
			if !ok {
				t.Fatalf("no row for the AllReduce at 4458676524716.094 µs on stream 40: %v", byTs)
			}
			r := rows[i]
			if r.Func != "AllReduce" || r.Bytes != 8196000 || r.TimeNs != 3306963 || math.Abs(*r.BusBW-2.4784) > 0.0001 {
				t.Errorf("the AllReduce at 4458676524716.094: %+v, busbw %v, want 8196000 B in 3306963 ns = 2.4784 GB/s", r, *r.BusBW)
			}
		}
	}
}
