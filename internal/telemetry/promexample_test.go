package telemetry

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// debianPrometheus is Prometheus 2.x as Debian packages it (apt-get install prometheus: 2.42 on
// Debian 12), or $NCCLPROF_PROMETHEUS2.
func debianPrometheus(t *testing.T) string {
	t.Helper()
	p := os.Getenv("NCCLPROF_PROMETHEUS2")
	if p == "" {
		p = "/usr/bin/prometheus"
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("the metrics example is tested with Debian's Prometheus 2.x too, and there is none at %s: "+
			"apt-get install prometheus, or point NCCLPROF_PROMETHEUS2 at a Prometheus 2.x", p)
	}
	return p
}

// TestPrometheusExample (issue 16 item 3): examples/metrics/check-with-prometheus.sh with a real
// Prometheus of each generation: 3.x takes prometheus.yml (OTLP through the collector, native
// histograms; and a scrape of the plugin's endpoint, classic buckets), 2.x the fallback
// prometheus-2.yml (scrape). Every PromQL expression of the Grafana dashboard must return data,
// none of it NaN, for each way in. With the old default (exponential histograms on the
// endpoint) Prometheus 2.42 gave NaN in five quantile queries; with the old prometheus.yml it
// did not start.
func TestPrometheusExample(t *testing.T) {
	built(t)
	collectorBinary(t)
	p3, err := prometheus3Tool.get(t)
	if err != nil {
		t.Fatalf("the metrics example is tested with a Prometheus 3.x, and none is available: %v\n"+
			"Build it with tools/prometheus/build.sh (about 8 CPU-minutes; needs Go and the module proxy), "+
			"or point NCCLPROF_PROMETHEUS3 at a Prometheus 3.8+ binary.", err)
	}
	script := filepath.Join(repoRoot(t), "examples", "metrics", "check-with-prometheus.sh")
	for _, tc := range []struct {
		name, bin, config string
		jobs              int
	}{
		{"3.x", p3, "prometheus.yml", 2},
		{"2.x", debianPrometheus(t), "prometheus-2.yml", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(script)
			cmd.Env = append(os.Environ(), "PROMETHEUS="+tc.bin, "NCCLPROF_OTELCOL="+collectorBinary(t))
			out, err := cmd.CombinedOutput()
			text := string(out)
			t.Logf("%s", text)
			if err != nil {
				t.Fatalf("check-with-prometheus.sh with %s failed: %v", tc.bin, err)
			}
			if !strings.Contains(text, "Prometheus "+strings.TrimSuffix(tc.name, "x")) ||
				!strings.Contains(text, "with "+tc.config) {
				t.Errorf("the script did not run Prometheus %s with %s", tc.name, tc.config)
			}
			// Every dashboard query, once per way in, said ok; nothing said BAD.
			ok := strings.Count(text, "\nok ")
			if want := dashboardQueries(t) * tc.jobs; ok < want || strings.Contains(text, "BAD") {
				t.Errorf("%d queries ok, want at least %d and none BAD", ok, want)
			}
		})
	}
}
