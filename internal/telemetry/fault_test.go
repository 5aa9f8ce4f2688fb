package telemetry

// Fault tests: the collector absent, stopped in the middle of a run (and back), or slow. The job
// must exit cleanly, on time, with one warning, and its memory must not grow; callbacks never
// wait for export (they never enter Go), so the host's run time is the measure.

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// metricsWarnings are the lines the plugin logged about metrics.
func metricsWarnings(out string) []string {
	var w []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "metrics:") {
			w = append(w, l)
		}
	}
	return w
}

// timed runs the host n times and returns the median run and all wall times.
func timed(t *testing.T, n int, env []string, args ...string) (hostRun, []time.Duration) {
	t.Helper()
	runs := make([]hostRun, n)
	walls := make([]time.Duration, n)
	for i := range runs {
		runs[i] = runHost(t, env, args...)
		walls[i] = runs[i].wall
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].wall < runs[j].wall })
	return runs[n/2], walls
}

const faultSecret = "fault-s3cr3t-t0ken"

// TestFaultCollectorAbsent: nothing listens at the endpoint. Export fails at once (connection
// refused; no retries under cumulative temporality), so the run takes as long as with a healthy
// collector, and one warning says what to do.
func TestFaultCollectorAbsent(t *testing.T) {
	args := []string{"--iters", "1500", "p2p"}
	base, baseWalls := timed(t, 3, []string{"NCCLPROF_METRICS=none"}, args...)
	col := startCollector(t)
	for _, proto := range []string{"grpc", "http/protobuf"} {
		t.Run(strings.ReplaceAll(proto, "/", "_"), func(t *testing.T) {
			livePort := col.httpPort
			if proto == "grpc" {
				livePort = col.grpcPort
			}
			live, liveWalls := timed(t, 3, otlpEnv(proto, livePort, "OTEL_METRIC_EXPORT_INTERVAL=100"), args...)
			port := freePort(t) // closed again: nothing listens there
			env := otlpEnv(proto, port, "OTEL_METRIC_EXPORT_INTERVAL=100",
				"OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer%20"+faultSecret)
			dead, walls := timed(t, 3, env, args...)
			t.Logf("%s, exporting every 100 ms, median of 3 runs: collector absent %v %v; healthy collector %v %v; "+
				"metrics off %v %v; max RSS %d / %d / %d KB",
				proto, dead.wall.Round(time.Millisecond), walls, live.wall.Round(time.Millisecond), liveWalls,
				base.wall.Round(time.Millisecond), baseWalls, dead.maxRSSKB, live.maxRSSKB, base.maxRSSKB)
			// Refused at once; the final export gives up within 250 ms after a failure.
			checkFinalizeWait(t, dead, 250*time.Millisecond+time.Second/2)
			w := metricsWarnings(dead.stderr)
			if len(w) != 1 || !strings.Contains(w[0], "failed") || !strings.Contains(w[0], "printed once") ||
				!strings.Contains(w[0], fmt.Sprint(port)) {
				t.Errorf("want exactly one warning naming the endpoint, got %d:\n%s", len(w), strings.Join(w, "\n"))
			}
			noSecret(t, dead.stderr, faultSecret)
			summary(t, dead.dir) // the other outputs are unaffected
			if dead.maxRSSKB > live.maxRSSKB+32<<10 {
				t.Errorf("max RSS %d KB with a dead collector, %d KB with a healthy one", dead.maxRSSKB, live.maxRSSKB)
			}
		})
	}
}

// TestFaultCollectorStopsMidRun: the collector dies while the job runs and comes back before it
// ends. The job neither stalls nor fails; the export after the collector is back carries the
// complete cumulative totals, including how many exports failed meanwhile.
func TestFaultCollectorStopsMidRun(t *testing.T) {
	args := []string{"--iters", "12000", "p2p"}
	// Bigger windows: this test is about export, so the hot path gets room to ride out a busy
	// 2-core machine (with drops it checks against the plugin's summary instead).
	windows := []string{"NCCLPROF_WINDOWS=8", "NCCLPROF_WINDOW_SLOTS=16384"}
	base := runHost(t, append([]string{"NCCLPROF_METRICS=none"}, windows...), args...)
	for _, proto := range []string{"grpc", "http/protobuf"} {
		t.Run(strings.ReplaceAll(proto, "/", "_"), func(t *testing.T) {
			col := startCollector(t)
			port := col.httpPort
			if proto == "grpc" {
				port = col.grpcPort
			}
			var wg sync.WaitGroup
			var restartErr error
			wg.Add(1)
			go func() { // down at 0.8 s, back at 1.6 s (the run lasts about 3 s)
				defer wg.Done()
				time.Sleep(800 * time.Millisecond)
				col.stop()
				time.Sleep(800 * time.Millisecond)
				restartErr = col.restart()
			}()
			r := runHost(t, otlpEnv(proto, port, append([]string{"OTEL_METRIC_EXPORT_INTERVAL=100"}, windows...)...), args...)
			wg.Wait()
			if restartErr != nil {
				t.Fatalf("restarting the collector: %v", restartErr)
			}
			t.Logf("%s, collector down for 0.8 s mid-run: run %v, without metrics %v; max RSS %d KB vs %d KB",
				proto, r.wall.Round(time.Millisecond), base.wall.Round(time.Millisecond), r.maxRSSKB, base.maxRSSKB)
			if r.wall < 1700*time.Millisecond {
				t.Fatalf("the run (%v) ended before the collector came back; make it longer", r.wall)
			}
			checkFinalizeWait(t, r, 2*time.Second+time.Second/2) // the final export's bound
			if w := metricsWarnings(r.stderr); len(w) != 1 {
				t.Errorf("want one warning, got %d:\n%s", len(w), strings.Join(w, "\n"))
			}
			v := waitCollected(t, col, r)
			checkTruth(t, v, r, checks{failuresOK: true})
			if f := v.one(t, MExportFailures, nil).value; f < 1 {
				t.Errorf("%s = %v after the collector was down for 0.8 s at a 100 ms interval", MExportFailures, f)
			} else {
				t.Logf("%s = %v, %s = %v", MExportFailures, f, MExportDropped, v.one(t, MExportDropped, nil).value)
			}
		})
	}
}

// blackhole accepts connections and reads but never answers: a collector that hangs.
func blackhole(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() { _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().(*net.TCPAddr).Port
}

// TestFaultCollectorSlow: the collector accepts connections and never answers. Periodic exports
// wait on the SDK's goroutine (up to OTEL_EXPORTER_OTLP_TIMEOUT) without touching the job; the
// final export at finalize is bounded by NCCLPROF_METRICS_FINAL_TIMEOUT_MS (default 2 s).
func TestFaultCollectorSlow(t *testing.T) {
	args := []string{"--iters", "1500", "p2p"}
	base, _ := timed(t, 3, []string{"NCCLPROF_METRICS=none"}, args...)
	for _, tc := range []struct {
		proto, finalMs string
		bound          time.Duration
	}{
		{"grpc", "", DefaultFinalTimeout},
		{"http/protobuf", "", DefaultFinalTimeout},
		{"grpc", "300", 300 * time.Millisecond},
		{"http/protobuf", "300", 300 * time.Millisecond},
	} {
		name := strings.ReplaceAll(tc.proto, "/", "_") + "_final" + map[bool]string{true: "default", false: tc.finalMs}[tc.finalMs == ""]
		t.Run(name, func(t *testing.T) {
			env := otlpEnv(tc.proto, blackhole(t), "OTEL_METRIC_EXPORT_INTERVAL=100")
			if tc.finalMs != "" {
				env = append(env, "NCCLPROF_METRICS_FINAL_TIMEOUT_MS="+tc.finalMs)
			}
			r := runHost(t, env, args...)
			t.Logf("%s, collector hangs, final export bounded by %v: run %v, without metrics %v; max RSS %d KB vs %d KB",
				tc.proto, tc.bound, r.wall.Round(time.Millisecond), base.wall.Round(time.Millisecond),
				r.maxRSSKB, base.maxRSSKB)
			checkFinalizeWait(t, r, tc.bound+time.Second/2)
			w := metricsWarnings(r.stderr)
			if len(w) != 1 || !strings.Contains(w[0], "failed") {
				t.Errorf("want one warning about the failed export, got %d:\n%s", len(w), strings.Join(w, "\n"))
			}
			if r.maxRSSKB > base.maxRSSKB+64<<10 {
				t.Errorf("max RSS %d KB with a hanging collector, %d KB without metrics", r.maxRSSKB, base.maxRSSKB)
			}
		})
	}
}

// TestFaultCollectorDelayed: the collector answers, but 300 ms late, while the plugin exports
// every 100 ms. Exports queue nowhere (the export goroutine waits, ticks are skipped), the job
// does not wait, and the final export still delivers the exact totals.
func TestFaultCollectorDelayed(t *testing.T) {
	col := startCollector(t)
	target, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", col.httpPort))
	proxy := httputil.NewSingleHostReverseProxy(target)
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		requests.Add(1)
		time.Sleep(300 * time.Millisecond)
		proxy.ServeHTTP(w, req)
	}))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	args := []string{"--iters", "3000", "p2p"}
	base := runHost(t, []string{"NCCLPROF_METRICS=none"}, args...)
	r := runHost(t, otlpEnv("http/protobuf", port, "OTEL_METRIC_EXPORT_INTERVAL=100"), args...)
	t.Logf("collector answering after 300 ms, exports every 100 ms: run %v, metrics off %v; %d requests; max RSS %d KB vs %d KB",
		r.wall.Round(time.Millisecond), base.wall.Round(time.Millisecond), requests.Load(), r.maxRSSKB, base.maxRSSKB)
	// The final export waits for the collector's answer (300 ms) within its 2 s bound.
	checkFinalizeWait(t, r, 2*time.Second+time.Second/2)
	if w := metricsWarnings(r.stderr); len(w) != 0 {
		t.Errorf("a slow but working collector caused warnings:\n%s", strings.Join(w, "\n"))
	}
	checkTruth(t, waitCollected(t, col, r), r, checks{})
}
