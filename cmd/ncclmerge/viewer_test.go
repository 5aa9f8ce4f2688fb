package main

import (
	"bytes"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ncclprof/ncclprof/internal/merge"
	"github.com/ncclprof/ncclprof/internal/synth"
	"github.com/ncclprof/ncclprof/internal/testtraces"
	"github.com/ncclprof/ncclprof/internal/tracecheck"
	"github.com/ncclprof/ncclprof/internal/traceevent"
)

const installHelp = `tools/deps.sh installs them (make test runs it): Chromium with apt-get, speedscope@1.25.0
with npm into the project's cache (or point SPEEDSCOPE_DIR at speedscope's dist/release directory)`

// speedscopeDir finds speedscope's built web app: SPEEDSCOPE_DIR, else where tools/deps.sh
// installs it (the project's cache), else a global npm install.
func speedscopeDir(t *testing.T) string {
	if d := os.Getenv("SPEEDSCOPE_DIR"); d != "" {
		return d
	}
	var dirs []string
	if out, err := exec.Command(filepath.Join(testtraces.Root(t), "tools", "deps.sh"), "speedscope-dir").Output(); err == nil {
		dirs = append(dirs, strings.TrimSpace(string(out)))
	}
	if out, err := exec.Command("npm", "root", "-g").Output(); err == nil {
		dirs = append(dirs, filepath.Join(strings.TrimSpace(string(out)), "speedscope", "dist", "release"))
	}
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "index.html")); err == nil {
			return d
		}
	}
	t.Fatalf("speedscope is not installed (looked in %v); %s", dirs, installHelp)
	return ""
}

func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatalf("chromium is not installed; %s", installHelp)
	return ""
}

// headless runs Chromium the way this workplace allows (no network but loopback, no GPU).
func headless(t *testing.T, bin string, args ...string) (out []byte, console string) {
	base := []string{"--enable-logging=stderr", "--v=0", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir(), "--window-size=1600,1000", "--virtual-time-budget=20000"}
	cmd := exec.Command(bin, append(base, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium failed: %v\n%s", err, stderr.String())
	}
	for _, line := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(line, "CONSOLE") && !strings.Contains(line, "WebGL") && !strings.Contains(line, "GL Driver") {
			console += line + "\n"
		}
	}
	return out, console
}

// The merged output opens in a real viewer: speedscope, in headless Chromium, loads it and
// shows one profile per track with slices (as many as ncclmerge check counts), and the test
// keeps a screenshot (NCCLMERGE_SCREENSHOT=path copies it out, for the documentation).
func TestOpensInSpeedscope(t *testing.T) {
	app, bin := speedscopeDir(t), chromium(t)
	dir := t.TempDir()
	k := testtraces.Kineto(t, "trace_filter_sampled_rank-0.json.gz")
	plugin, _, err := synth.PluginFromKineto(k, synth.PluginOptions{GPUOffsetNs: 1_000_000, Seed: 1, Host: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	np := filepath.Join(dir, "ncclprof-demo-4037-0.trace.json")
	os.WriteFile(np, plugin, 0o644)
	out := filepath.Join(dir, "merged.json")
	if _, err := merge.Run([]string{k}, []string{np}, out, merge.Options{}); err != nil {
		t.Fatal(err)
	}
	if rep, err := tracecheck.File(out); err != nil || !rep.OK() {
		t.Fatalf("check: %v %+v", err, rep)
	}
	// speedscope keys threads by Number(pid), so Kineto's own events with string pids ("Spans",
	// "Traces", "") make it fail on any real torch.profiler trace; the viewer gets the merged
	// trace without those few events.
	view, removed := withoutStringPids(t, out)
	if removed != 2 {
		t.Fatalf("removed %d events with string pids, want the input's 2 (counted with Python)", removed)
	}
	rep := tracecheck.Check(view, mustRead(t, view))

	mux := http.NewServeMux()
	mux.Handle("/", http.FileServer(http.Dir(app)))
	mux.HandleFunc("/merged.json", func(w http.ResponseWriter, r *http.Request) { http.ServeFile(w, r, view) })
	srv := httptest.NewServer(mux) // 127.0.0.1 only
	defer srv.Close()
	url := srv.URL + "/#profileURL=" + srv.URL + "/merged.json&title=ncclmerge"

	domb, console := headless(t, bin, "--dump-dom", url)
	dom := string(domb)
	m := regexp.MustCompile(`ncclmerge <span[^>]*>\(1/(\d+)\)</span>`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("speedscope did not show the trace; its console said:\n%s", console)
	}
	if n, _ := strconv.Atoi(m[1]); n != rep.Tracks {
		t.Errorf("speedscope shows %d profiles, the trace has %d tracks with slices", n, rep.Tracks)
	}
	shot := filepath.Join(dir, "speedscope.png")
	headless(t, bin, "--screenshot="+shot, url)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	// Not a blank page: many distinct colours (the flame chart).
	colours := map[uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 7 {
		for x := b.Min.X; x < b.Max.X; x += 7 {
			r, g, bl, _ := img.At(x, y).RGBA()
			colours[r>>8<<16|g>>8<<8|bl>>8] = true
		}
	}
	if len(colours) < 20 {
		t.Fatalf("the screenshot looks blank (%d colours)", len(colours))
	}
	if dst := os.Getenv("NCCLMERGE_SCREENSHOT"); dst != "" {
		data, _ := os.ReadFile(shot)
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func mustRead(t *testing.T, path string) []byte {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// withoutStringPids writes a copy of a trace without the events whose pid or tid is a string.
func withoutStringPids(t *testing.T, path string) (string, int) {
	var b bytes.Buffer
	b.WriteString(`{"traceEvents":[`)
	removed, n := 0, 0
	_, err := traceevent.Read(path, mustRead(t, path), traceevent.Options{}, func(e *traceevent.Event) error {
		if e.Pid.IsStr || e.Tid.IsStr {
			removed++
			return nil
		}
		if n > 0 {
			b.WriteString(",\n")
		}
		n++
		b.WriteString(e.Raw)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	b.WriteString("]}\n")
	dst := path + ".view.json"
	if err := os.WriteFile(dst, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return dst, removed
}
