package telemetry

// The documentation and the examples are checked against the code: every metric and variable
// is documented, and the Grafana dashboard and collector configuration use what exists.

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

func readRepoFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	if err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	return string(b)
}

// TestDocsListEverything: docs/metrics.md names every metric (both spellings) and every
// environment variable the package reads.
func TestDocsListEverything(t *testing.T) {
	doc := readRepoFile(t, "docs/metrics.md")
	for _, d := range Catalog {
		for _, name := range []string{"`" + d.Name + "`", "`" + d.Prometheus + "`"} {
			if !strings.Contains(doc, name) {
				t.Errorf("docs/metrics.md does not document %s", name)
			}
		}
	}
	vars := map[string]bool{}
	re := regexp.MustCompile(`"((?:NCCLPROF|OTEL)_[A-Z0-9_]+)"`)
	for _, f := range []string{"config.go", "resource.go", "exporters.go"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			vars[m[1]] = true
		}
	}
	if len(vars) < 15 {
		t.Fatalf("found only %d variables in the sources", len(vars))
	}
	for v := range vars {
		if !strings.Contains(doc, "`"+v+"`") {
			t.Errorf("docs/metrics.md does not document %s", v)
		}
	}
}

// promLabels are the Prometheus spellings of the attributes ncclprof sets, plus Prometheus's own.
func promLabels() map[string]bool {
	m := map[string]bool{"le": true, "job": true, "instance": true}
	for _, a := range []string{AttrCommHash, AttrCommName, AttrRank, AttrNRanks, AttrNNodes, AttrOp, AttrAlgo,
		AttrProto, AttrNChannels, AttrAPIOnly, AttrPeer, AttrChannel, AttrStep, AttrFit, AttrReason, AttrKind, AttrExporter,
		AttrDirection} {
		m[strings.ReplaceAll(a, ".", "_")] = true
	}
	return m
}

// dashboard is what the tests read of the Grafana dashboard.
type dashboard struct {
	Title      string `json:"title"`
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			Expr         string `json:"expr"`
			LegendFormat string `json:"legendFormat"`
		} `json:"targets"`
	} `json:"panels"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	var dash dashboard
	if err := json.Unmarshal([]byte(readRepoFile(t, "examples/metrics/grafana/ncclprof-dashboard.json")), &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	return dash
}

// dashboardQueries counts the PromQL expressions of the dashboard's panels.
func dashboardQueries(t *testing.T) int {
	n := 0
	for _, p := range readDashboard(t).Panels {
		n += len(p.Targets)
	}
	return n
}

// TestDashboardUsesExportedNames: every metric and label in the Grafana dashboard is one ncclprof
// exports (under its Prometheus name), and every expression is balanced.
func TestDashboardUsesExportedNames(t *testing.T) {
	dash := readDashboard(t)
	metrics := map[string]bool{}
	hists := map[string]bool{}
	for _, d := range Catalog {
		metrics[d.Prometheus] = true
		if d.Kind == KindHistogram {
			hists[d.Prometheus] = true
		}
	}
	labels := promLabels()
	exprs := map[string]string{}
	for _, v := range dash.Templating.List {
		if v.Definition != "" {
			exprs["variable "+v.Name] = v.Definition
		}
	}
	n := 0
	for _, p := range dash.Panels {
		for i, tg := range p.Targets {
			exprs[p.Title+" #"+string(rune('A'+i))] = tg.Expr
			n++
			for _, m := range regexp.MustCompile(`\{\{(\w+)\}\}`).FindAllStringSubmatch(tg.LegendFormat, -1) {
				if !labels[m[1]] {
					t.Errorf("panel %q: legend uses unknown label %s", p.Title, m[1])
				}
			}
		}
	}
	if n < 15 {
		t.Fatalf("only %d queries in the dashboard", n)
	}
	used := map[string]bool{}
	ident := regexp.MustCompile(`ncclprof_[a-z0-9_]+`)
	byClause := regexp.MustCompile(`by \(([^)]*)\)`)
	matcher := regexp.MustCompile(`([a-z_]+)\s*=~?\s*"`)
	for where, e := range exprs {
		if strings.Count(e, "(") != strings.Count(e, ")") || strings.Count(e, "{") != strings.Count(e, "}") {
			t.Errorf("%s: unbalanced expression %s", where, e)
		}
		for _, id := range ident.FindAllString(e, -1) {
			switch {
			case metrics[id], labels[id]:
			case hists[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(id, "_bucket"), "_sum"), "_count")]:
			default:
				t.Errorf("%s: %s is neither an exported metric nor a label", where, id)
				continue
			}
			used[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(id, "_bucket"), "_sum"), "_count")] = true
		}
		for _, m := range byClause.FindAllStringSubmatch(e, -1) {
			for _, l := range strings.Split(m[1], ",") {
				if l = strings.TrimSpace(l); !labels[l] {
					t.Errorf("%s: groups by unknown label %q", where, l)
				}
			}
		}
		for _, m := range matcher.FindAllStringSubmatch(e, -1) {
			if !labels[m[1]] {
				t.Errorf("%s: selects on unknown label %q", where, m[1])
			}
		}
	}
	// The dashboard covers each family: operations, times, bandwidth, pairs, channels, health.
	for _, must := range []string{"ncclprof_ops_total", "ncclprof_op_completion_duration_seconds",
		"ncclprof_op_busbw_bytes_per_second", "ncclprof_pair_latency_seconds", "ncclprof_pair_bandwidth_bytes_per_second",
		"ncclprof_channel_transfer_time_seconds_total", "ncclprof_events_dropped_total", "ncclprof_export_failures_total"} {
		if !used[must] {
			t.Errorf("the dashboard does not show %s", must)
		}
	}
	var names []string
	for k := range used {
		names = append(names, k)
	}
	sort.Strings(names)
	t.Logf("dashboard %q uses %d metrics: %s", dash.Title, len(names), strings.Join(names, " "))
}

// TestCollectorExampleValid: examples/metrics/otelcol.yaml is a configuration the collector
// accepts (tools/otelcol/build.sh's collector has the components it uses).
func TestCollectorExampleValid(t *testing.T) {
	bin := collectorBinary(t)
	cfg := filepath.Join(repoRoot(t), "examples", "metrics", "otelcol.yaml")
	out, err := exec.Command(bin, "validate", "--config", cfg).CombinedOutput()
	if err != nil {
		t.Fatalf("%s validate --config %s: %v\n%s", bin, cfg, err, out)
	}
}
