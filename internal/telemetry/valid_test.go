package telemetry

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestInvalidUTF8Labels (issue 14 item 6): a communicator name, function string, step label and
// resource attribute that are not valid UTF-8 cost neither the export nor any other series, with
// the file exporter and over OTLP (gRPC and HTTP) into the real collector. Before, protobuf
// refused to encode the export, so every export failed and the warning blamed the directory.
func TestInvalidUTF8Labels(t *testing.T) {
	col := startCollector(t)
	for i, exp := range []string{"file", "grpc", "http/protobuf"} {
		t.Run(strings.ReplaceAll(exp, "/", "_"), func(t *testing.T) {
			pid := 7100 + i
			dir := t.TempDir()
			cfg, _ := FromEnv(envOf())
			cfg.Exporter, cfg.OutputDir, cfg.Interval = ExporterFile, dir, time.Hour
			out := ""
			if exp != "file" {
				port := col.httpPort
				if exp == "grpc" {
					port = col.grpcPort
				}
				t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", fmt.Sprintf("http://127.0.0.1:%d", port))
				t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", exp)
				cfg, _ = FromEnv(os.Getenv)
				cfg.Interval = time.Hour
				out = col.out
			}
			var w warnings
			r, err := New(context.Background(), Options{Config: cfg, Warn: w.add,
				Host: Host{Name: "node7", PID: pid, LocalRank: -1, Getenv: envOf("POD_NAME", "pod-\xfe")}})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Shutdown(context.Background())

			r.SetStepLabel("eval\xff", 0)
			good := allReduce(1, 1<<20, 2e6, 1e4, 0, 0, nil, nil)
			bad := allReduce(2, 1<<10, 1e6, 1e4, 0, 0, nil, nil)
			bad.Comm.Name, bad.Comm.Hash, bad.Func = "bad\xffname", 0xbad, "AllGather\xc3"
			r.RecordOp(good)
			r.RecordOp(bad)
			r.RecordOp(good)
			r.Pass()
			if err := r.FinalFlush(); err != nil {
				t.Fatalf("the export failed: %v (warnings %q)", err, w.all())
			}
			if out == "" {
				out = r.Stats().File
			}
			var v view
			if !waitFor(10*time.Second, func() bool {
				v = view{}
				if fileHas(out, fmt.Sprintf(`"intValue":"%d"`, pid)) {
					v = readOTLP(t, out, pid)
				}
				return len(v.series[MOps]) == 2
			}) {
				t.Fatalf("the export did not arrive whole in %s: %d series of %s", out, len(v.series[MOps]), MOps)
			}
			if p := v.one(t, MOps, map[string]string{AttrCommName: "tp", AttrOp: "AllReduce", AttrStep: "eval\uFFFD"}); p.value != 2 {
				t.Errorf("the valid series: %v operations, want 2", p.value)
			}
			if p := v.one(t, MOps, map[string]string{AttrCommName: "bad\uFFFDname", AttrOp: "AllGather\uFFFD"}); p.value != 1 {
				t.Errorf("the repaired series: %v operations, want 1", p.value)
			}
			if got := v.resource["k8s.pod.name"]; got != "pod-\uFFFD" {
				t.Errorf("resource k8s.pod.name %q, want the repaired %q", got, "pod-\uFFFD")
			}
			// pod name, step label, communicator name, function: 4 strings repaired.
			if p := v.one(t, MConditions, map[string]string{AttrKind: KindInvalidUTF8}); p.value != 4 {
				t.Errorf("repaired strings counted %v, want 4", p.value)
			}
			ws := w.all()
			if len(ws) != 1 || !strings.Contains(ws[0], "UTF-8") || strings.Contains(ws[0], "directory") {
				t.Errorf("want one warning about UTF-8 (not blaming the directory), got %q", ws)
			}
			if s := r.Stats(); s.ExportFailures != 0 {
				t.Errorf("%d exports failed", s.ExportFailures)
			}
		})
	}
}
