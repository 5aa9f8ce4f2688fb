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

// The page's grid (internal/report/page.html): a header 78 px high, then plots of PlotW × PlotH
// (1 px border) in two columns, 20 px from the left, 12 px apart.
func plotBox(i int) image.Rectangle {
	x := 20 + 1 + (i%2)*(report.PlotW+2+12)
	y := 78 + 12 + 1 + (i/2)*(report.PlotH+2+12)
	return image.Rect(x+report.MarginL+3, y+report.MarginT+3, x+report.PlotW-report.MarginR-3, y+report.PlotH-report.MarginB-3)
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
	shot := filepath.Join(t.TempDir(), "report.png")
	if _, console := headless(t, bin, "--screenshot="+shot, url); console != "" {
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
	names := []string{"bandwidth against size", "time per rank and communicator", "skew over time", "late arrivals per rank"}
	for i, name := range names {
		box := plotBox(i)
		n := coloured(img, box)
		// A few dozen markers of 5 px, or bars and cells: far more than stray anti-aliasing.
		if n < 400 {
			t.Errorf("plot %q: %d coloured pixels in its data area %v: not drawn", name, n, box)
		}
		t.Logf("plot %q: %d coloured pixels", name, n)
	}
	// The header and the page between plots are not data: nearly nothing coloured there.
	if n := coloured(img, image.Rect(10, 92, 18, 700)); n > 0 {
		t.Errorf("%d coloured pixels in the left margin: the layout is not the one the test measures", n)
	}
	if dst := os.Getenv("NCCLMERGE_REPORT_SCREENSHOT"); dst != "" {
		if err := os.WriteFile(dst, mustRead(t, shot), 0o644); err != nil {
			t.Fatal(err)
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
