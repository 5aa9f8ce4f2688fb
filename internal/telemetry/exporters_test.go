package telemetry

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	colpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/ncclprof/ncclprof/internal/aggregate"
	"github.com/ncclprof/ncclprof/internal/event"
	"github.com/ncclprof/ncclprof/internal/hosttest"
)

type warnings struct {
	mu sync.Mutex
	w  []string
}

func (w *warnings) add(s string) { w.mu.Lock(); w.w = append(w.w, s); w.mu.Unlock() }
func (w *warnings) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.w...)
}

func fileRecorder(t *testing.T, dir string, maxSize int64, w *warnings) *Recorder {
	t.Helper()
	cfg, _ := FromEnv(envOf())
	cfg.Exporter, cfg.OutputDir, cfg.Interval, cfg.FileMaxSize = ExporterFile, dir, time.Hour, maxSize
	r, err := New(context.Background(), Options{Config: cfg, Warn: w.add,
		Host: Host{Name: "node/7", PID: 4242, LocalRank: -1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Shutdown(context.Background()) })
	return r
}

// TestFileExporter: OTLP/JSON lines, readable back; a file or symlink already at the name is
// neither followed nor overwritten; the umask applies.
func TestFileExporter(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(dir, "ncclprof-metrics-node_7-4242")
	if err := os.Symlink(victim, base+".jsonl"); err != nil { // planted by someone else
		t.Fatal(err)
	}
	if err := os.WriteFile(base+".1.jsonl", []byte("older run\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)

	var w warnings
	r := fileRecorder(t, dir, 256<<20, &w)
	r.RecordOp(allReduce(1, 1<<20, 2e6, 1e4, 0, 0, nil, nil))
	if err := r.FinalFlush(); err != nil {
		t.Fatalf("FinalFlush: %v", err)
	}
	r.RecordOp(allReduce(2, 1<<20, 4e6, 1e4, 0, 0, nil, nil))
	if err := r.FinalFlush(); err != nil {
		t.Fatalf("FinalFlush: %v", err)
	}
	path := r.Stats().File
	if path != base+".2.jsonl" {
		t.Fatalf("metrics file %q, want %q (the first two names were taken)", path, base+".2.jsonl")
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
		t.Errorf("the symlink's target was written: %q", b)
	}
	if b, _ := os.ReadFile(base + ".1.jsonl"); string(b) != "older run\n" {
		t.Errorf("an existing file was overwritten: %q", b)
	}
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 || !st.Mode().IsRegular() {
		t.Errorf("file mode %v, want a regular file with 0600 (0666 less umask 077)", st.Mode())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	if len(lines) != 2 {
		t.Fatalf("want 2 export lines, got %d", len(lines))
	}
	// The OTLP/JSON encoding: lowerCamelCase keys, enums as numbers (2 = cumulative).
	if !bytes.Contains(lines[1], []byte(`"aggregationTemporality":2`)) || !bytes.Contains(lines[1], []byte(`"resourceMetrics"`)) {
		t.Errorf("not OTLP/JSON as the specification writes it: %.300s", lines[1])
	}
	v := readOTLP(t, path, 4242)
	if p := v.one(t, MOps, map[string]string{AttrOp: "AllReduce"}); p.value != 2 {
		t.Errorf("ops in the last line = %v, want 2 (cumulative)", p.value)
	}
	if p := v.one(t, MOpCompletion, map[string]string{AttrOp: "AllReduce"}); p.count != 2 || !near(p.sum, 6e-3, 1e-9) || p.kind != "exponentialHistogram" {
		t.Errorf("completion %+v, want 2 values summing to 6 ms", p)
	}
	var req colpb.ExportMetricsServiceRequest
	if err := protojson.Unmarshal(lines[0], &req); err != nil {
		t.Errorf("line 1 is not an ExportMetricsServiceRequest: %v", err)
	}
	if len(w.all()) != 0 {
		t.Errorf("warnings: %v", w.all())
	}
}

// TestFileExporterRotates: past half of NCCLPROF_METRICS_FILE_MAX_MB the file moves to
// <name>.prev.jsonl and starts again, so the two stay under the cap however long the job runs,
// every export succeeds, and the newest line still holds every operation (cumulative).
func TestFileExporterRotates(t *testing.T) {
	dir := t.TempDir()
	var w warnings
	const maxSize = 40_000
	r := fileRecorder(t, dir, maxSize, &w)
	const n = 40
	for i := 1; i <= n; i++ {
		r.RecordOp(allReduce(event.Ticks(i), 1<<20, 2e6, 1e4, 0, 0, nil, nil))
		if err := r.FinalFlush(); err != nil {
			t.Fatalf("export %d: %v", i, err)
		}
	}
	s := r.Stats()
	if s.Exports != n || s.ExportFailures != 0 {
		t.Errorf("stats %+v, want %d exports and no failure", s, n)
	}
	if s.FileRotations < 2 {
		t.Fatalf("%d rotations: the lines are too small for this test", s.FileRotations)
	}
	prev := strings.TrimSuffix(s.File, ".jsonl") + ".prev.jsonl"
	var total int64
	for _, p := range []string{s.File, prev} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		total += st.Size()
	}
	if total > maxSize {
		t.Errorf("current + previous file = %d bytes, over the %d cap", total, maxSize)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*")); len(files) != 2 {
		t.Errorf("files %v, want the current and the previous one", files)
	}
	if p := readOTLP(t, s.File, 4242).one(t, MOps, map[string]string{AttrOp: "AllReduce"}); p.value != n {
		t.Errorf("ops in the newest line = %v, want %d", p.value, n)
	}
	if len(w.all()) != 0 {
		t.Errorf("warnings: %v", w.all())
	}
}

// TestFileExporterDiskFull (issue 14 item 9): an export that meets a full disk (a real tmpfs)
// fails as a whole: the file keeps only whole lines, and once there is space again the next
// export is a line of its own, not glued to a partial one.
func TestFileExporterDiskFull(t *testing.T) {
	dir := hosttest.SmallDisk(t, "256k")
	var w warnings
	r := fileRecorder(t, dir, 256<<20, &w)
	r.RecordOp(allReduce(1, 1<<20, 2e6, 1e4, 0, 0, nil, nil))
	if err := r.FinalFlush(); err != nil {
		t.Fatal(err)
	}
	path := r.Stats().File
	first, _ := os.ReadFile(path)
	filler := hosttest.FillDisk(t, dir)
	r.RecordOp(allReduce(2, 1<<20, 2e6, 1e4, 0, 0, nil, nil))
	if err := r.FinalFlush(); err == nil {
		t.Fatal("an export to a full disk succeeded")
	}
	if b, _ := os.ReadFile(path); string(b) != string(first) {
		t.Errorf("after the failed export the file has %d bytes, want the %d of the first line alone", len(b), len(first))
	}
	os.Remove(filler)
	r.RecordOp(allReduce(3, 1<<20, 2e6, 1e4, 0, 0, nil, nil))
	if err := r.FinalFlush(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	lines := bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n"))
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2 (the failed export leaves none)", len(lines))
	}
	for i, l := range lines {
		var req colpb.ExportMetricsServiceRequest
		if err := protojson.Unmarshal(l, &req); err != nil {
			t.Errorf("line %d is not whole OTLP/JSON: %v", i+1, err)
		}
	}
	if p := readOTLP(t, path, 4242).one(t, MOps, map[string]string{AttrOp: "AllReduce"}); p.value != 3 {
		t.Errorf("ops in the last line = %v, want 3 (cumulative: nothing lost)", p.value)
	}
	if s := r.Stats(); s.ExportFailures != 1 || s.Exports != 2 {
		t.Errorf("stats %+v, want 2 exports and 1 failure", s)
	}
	if ws := w.all(); len(ws) != 1 || !strings.Contains(ws[0], "space") {
		t.Errorf("want one warning about space, got %q", ws)
	}
}

// TestFileExporterUnwritable: a directory that cannot be created costs a warning, not the job.
func TestFileExporterUnwritable(t *testing.T) {
	parent := t.TempDir()
	blocker := filepath.Join(parent, "file")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var w warnings
	r := fileRecorder(t, filepath.Join(blocker, "sub"), 1<<20, &w)
	r.RecordOp(allReduce(1, 1<<20, 2e6, 1e4, 0, 0, nil, nil))
	if err := r.FinalFlush(); err == nil {
		t.Fatal("export into an impossible directory succeeded")
	}
	if ws := w.all(); len(ws) != 1 || !strings.Contains(ws[0], "writing metrics to") {
		t.Errorf("want one warning, got %q", ws)
	}
}

// TestPrometheus serves every metric of the catalogue under the documented Prometheus name, on
// the base port plus the local rank.
func TestPrometheus(t *testing.T) {
	port := freePort(t)
	cfg, _ := FromEnv(envOf())
	cfg.Exporter, cfg.Histogram, cfg.PromPort, cfg.LocalRank = ExporterPrometheus, HistogramExplicit, port-2, 2
	counters := map[string]uint64{"events": 10, "dropped_windows_full": 1, "windows_processed": 2, "stale_handle": 1}
	r, err := New(context.Background(), Options{Config: cfg, Host: Host{Name: "h", PID: 7, LocalRank: 2},
		Counters: func() map[string]uint64 { return counters }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Shutdown(context.Background())
	if got := r.Stats().PrometheusAddr; got != fmt.Sprintf("127.0.0.1:%d", port) {
		t.Fatalf("listening on %s, want 127.0.0.1:%d (base %d + local rank 2)", got, port, port-2)
	}
	o := allReduce(1, 1<<20, 2e6, 1e4, 1.5e6, 3e3, []float64{1 << 20}, []float64{4e4})
	o.Incomplete = true
	r.RecordOp(o)
	r.ObserveResults([]*aggregate.Result{testResult(tpComm)})
	r.SetTraceBytes(func() uint64 { return 123 })
	if err := r.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(body)
	for _, d := range Catalog {
		if !strings.Contains(text, "# TYPE "+d.Prometheus+" ") {
			t.Errorf("%s: no %s in the scrape", d.Name, d.Prometheus)
		}
	}
	for _, want := range []string{
		`ncclprof_ops_total{nccl_algo="RING",nccl_comm_hash="0xa11edce000000001",nccl_comm_name="tp",nccl_nchannels="2",nccl_nnodes="2",nccl_nranks="8",nccl_op="AllReduce",nccl_proto="SIMPLE",nccl_rank="2"`,
		`ncclprof_events_dropped_total{ncclprof_reason="windows_full"`,
		`ncclprof_trace_io_bytes_total{`,
		`ncclprof_op_completion_duration_seconds_bucket{`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", text)
	}
}

// TestPrometheusPortTaken: a port in use costs one warning; the job and the recorder go on.
func TestPrometheusPortTaken(t *testing.T) {
	port := freePort(t)
	cfg, _ := FromEnv(envOf())
	cfg.Exporter, cfg.PromPort = ExporterPrometheus, port
	var w warnings
	r1, err := New(context.Background(), Options{Config: cfg, Host: Host{Name: "h", PID: 1, LocalRank: -1}})
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Shutdown(context.Background())
	r2, err := New(context.Background(), Options{Config: cfg, Warn: w.add, Host: Host{Name: "h", PID: 1, LocalRank: -1}})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Shutdown(context.Background())
	r2.RecordOp(allReduce(1, 1<<20, 2e6, 1e4, 0, 0, nil, nil))
	if ws := w.all(); len(ws) != 1 || !strings.Contains(ws[0], "NCCLPROF_PROMETHEUS_PORT") {
		t.Errorf("want one warning naming NCCLPROF_PROMETHEUS_PORT, got %q", ws)
	}
}

// TestOTLPFailure: a collector that refuses connections costs one warning, without secrets;
// failures and lost points are counted; once failing, the final export gives up quickly.
func TestOTLPFailure(t *testing.T) {
	for _, proto := range []string{"grpc", "http/protobuf"} {
		t.Run(strings.ReplaceAll(proto, "/", "_"), func(t *testing.T) {
			port := freePort(t)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", fmt.Sprintf("http://ncclprof:pa55w0rd@127.0.0.1:%d/?api_key=k3y-in-url", port))
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", proto)
			t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20s3cr3t-t0ken")
			cfg, probs := FromEnv(os.Getenv)
			if cfg.Exporter != ExporterOTLP || len(probs) != 1 { // the query string is not sent
				t.Fatalf("config %+v %v", cfg, probs)
			}
			var w warnings
			r := otlpRecorder(t, cfg, &w)
			if err := r.FinalFlush(); err == nil {
				t.Fatal("export to a closed port succeeded")
			}
			start := time.Now()
			_ = r.FinalFlush()
			if d := time.Since(start); d > DownFinalTimeout+200*time.Millisecond {
				t.Errorf("second final export took %v; after a failure it is bounded by %v", d, DownFinalTimeout)
			}
			s := r.Stats()
			if s.ExportFailures != 2 || s.DroppedPoints == 0 || s.Exports != 0 {
				t.Errorf("stats %+v, want 2 failures with dropped points", s)
			}
			ws := w.all()
			if len(ws) != 1 || !strings.Contains(ws[0], fmt.Sprintf("127.0.0.1:%d", port)) {
				t.Fatalf("want one warning naming the endpoint, got %q", ws)
			}
			for _, secret := range []string{"pa55w0rd", "s3cr3t-t0ken", "k3y-in-url"} {
				if strings.Contains(ws[0], secret) {
					t.Errorf("the warning shows %q: %s", secret, ws[0])
				}
			}
		})
	}
}

// TestConsoleExporter: NCCLPROF_METRICS=console prints the export (the SDK's JSON) to stdout.
func TestConsoleExporter(t *testing.T) {
	rd, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = wr
	cfg, _ := FromEnv(envOf("NCCLPROF_METRICS", "console"))
	cfg.Interval = time.Hour
	r, err := New(context.Background(), Options{Config: cfg, Host: Host{Name: "h", PID: 1, LocalRank: -1}})
	os.Stdout = old
	if err != nil {
		t.Fatal(err)
	}
	r.RecordOp(allReduce(1, 1<<20, 2e6, 1e4, 0, 0, nil, nil))
	if err := r.FinalFlush(); err != nil {
		t.Fatal(err)
	}
	_ = r.Shutdown(context.Background())
	wr.Close()
	out, _ := io.ReadAll(rd)
	for _, want := range []string{`"Name":"ncclprof.ops"`, `"Name":"ncclprof.op.completion.duration"`, `"Value":"AllReduce"`} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("console output lacks %s:\n%.600s", want, out)
		}
	}
}

// otlpRecorder is a Recorder exporting as cfg says, only when flushed, with one AllReduce
// recorded; its warnings go to w.
func otlpRecorder(t *testing.T, cfg Config, w *warnings) *Recorder {
	cfg.Interval = time.Hour
	r, err := New(context.Background(), Options{Config: cfg, Warn: w.add, Host: Host{Name: "h", PID: 1, LocalRank: -1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Shutdown(context.Background()) })
	r.RecordOp(allReduce(1, 1<<20, 2e6, 1e4, 0, 0, nil, nil))
	return r
}

// A final export whose deadline has passed before it starts (a loaded machine spent it on the
// last collection) is a failed export too: counted and warned about, not silent.
func TestFinalExportOutOfTimeCounted(t *testing.T) {
	for _, proto := range []string{"grpc", "http/protobuf"} {
		t.Run(strings.ReplaceAll(proto, "/", "_"), func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", fmt.Sprintf("http://127.0.0.1:%d", freePort(t)))
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", proto)
			cfg, _ := FromEnv(os.Getenv)
			var w warnings
			r := otlpRecorder(t, cfg, &w)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if err := r.push.flush(ctx); err == nil {
				t.Fatal("an export out of time succeeded")
			}
			if s := r.Stats(); s.ExportFailures != 1 || s.Exports != 0 {
				t.Errorf("stats %+v, want 1 failure", s)
			}
			if ws := w.all(); len(ws) != 1 {
				t.Errorf("want one warning, got %q", ws)
			}
		})
	}
}
