package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ncclprof/ncclprof/internal/hang"
	"github.com/ncclprof/ncclprof/internal/hang/hangtest"
	"github.com/ncclprof/ncclprof/internal/hang/hangtruth"
)

// ncclmerge hang end to end on dumps synthesized from a planted link failure: the verdict is the
// first line, the JSON names the pair and the channel, the exit status is 0.
func TestHangCommand(t *testing.T) {
	truths := hangtest.Plan(t, "--scenario", "link", "--culprit", "2", "--channel", "1", "--step", "3")
	dir, _ := hangtest.Synthesize(t, truths, hangtruth.Watchdog)
	out, err := run(t, "hang", dir)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.HasPrefix(out, "the link from rank 2 (node000, pid 40002) to rank 3 (node000, pid 40003) stopped on channel 1 in AllReduce seq 2398459 on comm 0x48a6000000000003 (world)") {
		t.Errorf("the first line is not the verdict:\n%s", out)
	}
	out, err = run(t, "hang", "--format", "json", dir)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Suspects []map[string]any `json:"suspects"`
		Hangs    []struct {
			Ranks []struct {
				Rank  int    `json:"rank"`
				State string `json:"state"`
			} `json:"ranks"`
		} `json:"hangs"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"rank": 2.0, "kind": "link", "comm": "0x48a6000000000003", "seq": 2398459.0, "func": "AllReduce", "peer": 3.0, "channel": 1.0}
	if len(res.Suspects) != 1 {
		t.Fatalf("%d suspects", len(res.Suspects))
	}
	for k, v := range want {
		if res.Suspects[0][k] != v {
			t.Errorf("suspect %s = %v, want %v", k, res.Suspects[0][k], v)
		}
	}
	if n := len(res.Hangs[0].Ranks); n != 8 || res.Hangs[0].Ranks[3].State != hang.StateLinkRecv {
		t.Errorf("per-rank evidence: %d ranks, rank 3 %+v", n, res.Hangs[0].Ranks[3])
	}
}

// The exit status says what was found: 3 when nothing is in flight, 2 when the dumps name nobody,
// 1 (an error that says what to do) when there is no dump.
func TestHangExitStatus(t *testing.T) {
	truths := hangtest.Plan(t, "--scenario", "link", "--culprit", "2")
	dir, _ := hangtest.Synthesize(t, truths, hangtruth.Requested)
	for _, p := range []string{"0", "1", "2", "3", "4", "5", "6", "7"} {
		d, err := hang.ReadFile(filepath.Join(dir, fmt.Sprintf("ncclprof-hang-node000-4000%s.json", p)))
		if err != nil {
			t.Fatal(err)
		}
		d.Comms[0].Open = nil
		if _, err := hang.Write(dir, d); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := run(t, "hang", dir); !errors.Is(err, exitStatus(hangNothing)) {
		t.Errorf("nothing in flight: %v, want exit status %d", err, hangNothing)
	}
	intra := hangtest.Plan(t, "--scenario", "intra", "--kind", "gpu", "--culprit", "3")
	intraDir, paths := hangtest.Synthesize(t, intra, hangtruth.Watchdog)
	// The one rank whose kernel never started now runs it like the others: nothing tells them apart.
	d, err := hang.ReadFile(paths[3])
	if err != nil {
		t.Fatal(err)
	}
	other, _ := hang.ReadFile(paths[0])
	d.Comms[0].Open[0].Kernel = other.Comms[0].Open[0].Kernel
	if _, err := hang.Write(intraDir, d); err != nil {
		t.Fatal(err)
	}
	if out, err := run(t, "hang", intraDir); !errors.Is(err, exitStatus(hangNoSuspect)) || !strings.Contains(out, "name no rank to blame") {
		t.Errorf("no suspect: %v\n%s", err, out)
	}
	if _, err := run(t, "hang", t.TempDir()); err == nil || !strings.Contains(err.Error(), "no hang dump (ncclprof-hang-*.json)") {
		t.Errorf("no dump: %v", err)
	}
	if _, err := run(t, "hang"); err == nil || !strings.Contains(err.Error(), "give the directories") {
		t.Errorf("no argument: %v", err)
	}
}

// liveJob runs a hang scenario's ranks as test-host processes through the real plugin (tracing
// on), each staying hung for holdS seconds, and returns their output directory with every rank's
// truth (real hosts and pids).
func liveJob(t *testing.T, nranks int, holdS string, args ...string) (string, []hangtruth.Truth) {
	host, lib := hangtest.Built(t, "ncclprof-testhost"), hangtest.Built(t, "libnccl-profiler-ncclprof.so")
	dir := t.TempDir()
	err := runRanks(nranks, func(r int) *exec.Cmd {
		a := append([]string{"--lib", lib, "--rank", strconv.Itoa(r), "--nranks", strconv.Itoa(nranks),
			"--truth", filepath.Join(dir, fmt.Sprintf("truth-%d.json", r)), "--hold-s", holdS}, args...)
		cmd := exec.Command(host, append(a, "hang")...)
		cmd.Env = append(os.Environ(), "NCCLPROF_TRACE=1", "NCCLPROF_EVENT_MASK=default,kernelch", "NCCLPROF_OUTPUT_DIR="+dir,
			"NCCLPROF_TRACE_DIR="+dir, "NCCLPROF_METRICS=none", "NCCLPROF_HANG_TIMEOUT_S=0")
		return cmd
	})
	if err != nil {
		t.Fatal(err)
	}
	truths := make([]hangtruth.Truth, nranks)
	for r := range truths {
		tr, err := hangtruth.Read(filepath.Join(dir, fmt.Sprintf("truth-%d.json", r)))
		if err != nil {
			t.Fatal(err)
		}
		truths[r] = tr
	}
	return dir, truths
}

// Beside the dumps, the plugin's real traces and summaries speak for the ranks that wrote no
// dump: the absent rank of an intra-node job by its trace (its last AllReduce is the one before),
// a rank that left the loop early by its summary, and ranks that completed the operation by
// their traces (they took part). Dumps are synthesized from the processes' truth until the plugin
// writes its own.
func TestHangTracesAndSummaries(t *testing.T) {
	cases := []struct {
		name  string
		args  []string
		basis string
		check func(t *testing.T, res *hang.Result)
	}{
		{"absent by its trace", []string{"--scenario", "intra", "--kind", "absent", "--culprit", "2"}, hang.BasisTrace, nil},
		{"absent by its summary", []string{"--scenario", "absent", "--culprit", "1", "--culprit-leaves"}, hang.BasisSummary, nil},
		{"finished ranks by their traces", []string{"--scenario", "finished", "--culprit", "2", "--step", "2"}, hang.BasisOwnDump,
			func(t *testing.T, res *hang.Result) {
				// Rank 1 sent to rank 2, whose dump shows it; only rank 0's trace speaks for rank 0.
				for r, want := range map[int]string{0: "no dump; its trace shows it started Reduce seq 2398459", 1: "no dump; its peers show it took part"} {
					if rs := res.Hangs[0].Ranks[r]; rs.State != hang.StateTookPart || rs.Text != want {
						t.Errorf("rank %d, which completed the operation and wrote no dump: %s %q, want %q", r, rs.State, rs.Text, want)
					}
				}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, truths := liveJob(t, 6, "3", c.args...)
			if _, err := hangtruth.WriteDumps(dir, truths, hangtruth.Watchdog); err != nil {
				t.Fatal(err)
			}
			out, err := run(t, "hang", "--format", "json", dir)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			var res hang.Result
			if err := json.Unmarshal([]byte(out), &res); err != nil {
				t.Fatal(err)
			}
			hangtest.AssertPlanted(t, &res, truths)
			if len(res.Suspects) == 1 && res.Suspects[0].Basis != c.basis {
				t.Errorf("basis %q, want %q: %s", res.Suspects[0].Basis, c.basis, res.Verdict)
			}
			if c.check != nil {
				c.check(t, &res)
			}
			if t.Failed() {
				text, _ := run(t, "hang", dir)
				t.Log(text)
			}
		})
	}
}

// The report of a hung job's dumps alone: the verdict, the suspect and the grouped evidence,
// rendered by headless Chromium without a console message, nothing fetched; the hang section is
// drawn (its red frame and verdict are on the screenshot). NCCLMERGE_HANG_SCREENSHOT=path keeps
// the screenshot (docs/img/ncclmerge-hang-report.png).
func TestHangReportRendersInChromium(t *testing.T) {
	bin := chromium(t)
	truths := hangtest.Plan(t, "--scenario", "link", "--culprit", "21", "--channel", "2", "--step", "9", "--nranks", "64", "--channels", "4")
	dir, _ := hangtest.Synthesize(t, truths, hangtruth.Watchdog)
	out := filepath.Join(t.TempDir(), "hang.html")
	if msg, err := run(t, "report", "-q", dir, "-o", out, "--title", "Simulated 64-rank job, hung"); err != nil {
		t.Fatalf("%v\n%s", err, msg)
	}
	html := string(mustRead(t, out))
	for _, want := range []string{
		"The job is hung: who to blame",
		`<p class="verdict">the link from rank 21 (node002, pid 40021) to rank 22 (node002, pid 40022) stopped on channel 2 in AllReduce seq 2398459`,
		`<tr class="slow"><td class="l">link</td><td>21</td><td class="l">node002</td><td>40021</td><td class="l">0x48a6000000000003 (world)</td><td class="l">AllReduce</td><td>2398459</td><td>22</td><td>2</td>`,
		"64 hang dumps (SIMULATED by the test host)",
	} {
		if !strings.Contains(html, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	for _, bad := range []string{"<script", "<link", "<img", "src=", "url(http", "<svg"} {
		if strings.Contains(html, bad) {
			t.Errorf("the page has %q (no plots without traces, nothing fetched)", bad)
		}
	}
	dom, console := headless(t, bin, "--dump-dom", "file://"+out)
	if console != "" {
		t.Errorf("console messages:\n%s", console)
	}
	if !strings.Contains(string(dom), "waits_for_buffers") {
		t.Fatalf("Chromium did not render the evidence: %.300s", dom)
	}
	shot := filepath.Join(t.TempDir(), "hang.png")
	if _, console := headless(t, bin, "--screenshot="+shot, "file://"+out); console != "" {
		t.Errorf("console messages:\n%s", console)
	}
	img := decodePNG(t, shot)
	// The section's red frame runs down its left edge (x = 20), below the 78 px header.
	red := 0
	for y := 100; y < 300; y++ {
		r, g, b, _ := img.At(21, y).RGBA()
		if r>>8 > 150 && g>>8 < 40 && b>>8 < 40 {
			red++
		}
	}
	if red < 150 {
		t.Errorf("%d red pixels on the hang section's left frame: not drawn where expected", red)
	}
	if n := coloured(img, image.Rect(40, 100, 1500, 140)); n < 500 {
		t.Errorf("%d coloured pixels where the red verdict should be", n)
	}
	if dst := os.Getenv("NCCLMERGE_HANG_SCREENSHOT"); dst != "" {
		if err := os.WriteFile(dst, mustRead(t, shot), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Dumps beside the plugin's traces of the same hung job: the usual page (its four plots) with the
// hang section first.
func TestHangReportWithTraces(t *testing.T) {
	dir, truths := liveJob(t, 6, "2", "--scenario", "absent", "--culprit", "5")
	if _, err := hangtruth.WriteDumps(dir, truths, hangtruth.Watchdog); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "r.html")
	if msg, err := run(t, "report", "-q", dir, "-o", out); err != nil {
		t.Fatalf("%v\n%s", err, msg)
	}
	html := string(mustRead(t, out))
	if n := strings.Count(html, "<svg"); n != 4 {
		t.Errorf("%d plots, want 4", n)
	}
	// Rank 5 wrote no dump; its trace gives its host and pid.
	verdict := regexp.MustCompile(`<p class="verdict">rank 5 \([^,]+, pid \d+\) never started AllReduce seq 2398459`)
	hangAt, plotsAt := -1, strings.Index(html, "<svg")
	if m := verdict.FindStringIndex(html); m != nil {
		hangAt = m[0]
	}
	if hangAt < 0 || hangAt > plotsAt {
		t.Errorf("the hang verdict is not on the page before the plots (at %d, plots at %d)", hangAt, plotsAt)
	}
}

func decodePNG(t *testing.T, path string) image.Image {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	return img
}
