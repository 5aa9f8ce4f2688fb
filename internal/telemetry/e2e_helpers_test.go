package telemetry

// Helpers of the end-to-end tests: the built plugin and C test host (make), the OpenTelemetry
// Collector (tools/otelcol/build.sh), the host's ground truth, and OTLP/JSON output read back.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	colpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	cpb "go.opentelemetry.io/proto/otlp/common/v1"
	mpb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/ncclprof/ncclprof/internal/hosttest"
)

func repoRoot(t *testing.T) string { return hosttest.Root(t) }

// built makes the plugin and the C test host (hosttest.Build) and returns their paths.
func built(t *testing.T) (lib, host string) {
	t.Helper()
	hosttest.Build(t)
	return hosttest.Path(t, "libnccl-profiler-ncclprof.so"), hosttest.Path(t, "ncclprof-testhost")
}

// builtTool is a program the tests run that a script in tools/ builds once and caches: the
// path in the variable env if set, else what the script prints.
type builtTool struct {
	env, script string
	once        sync.Once
	path        string
	err         error
}

func (b *builtTool) get(t *testing.T) (string, error) {
	t.Helper()
	b.once.Do(func() {
		if p := os.Getenv(b.env); p != "" {
			b.path = p
			if _, err := os.Stat(p); err != nil {
				b.err = fmt.Errorf("%s=%s: %v", b.env, p, err)
			}
			return
		}
		script := filepath.Join(repoRoot(t), b.script)
		cmd := exec.Command(script)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			b.err = fmt.Errorf("%s failed: %v\n%s", script, err, stderr.String())
			return
		}
		b.path = strings.TrimSpace(string(out))
	})
	return b.path, b.err
}

var (
	collectorTool   = &builtTool{env: "NCCLPROF_OTELCOL", script: "tools/otelcol/build.sh"}
	prometheus3Tool = &builtTool{env: "NCCLPROF_PROMETHEUS3", script: "tools/prometheus/build.sh"}
)

// collectorBinary is the OpenTelemetry Collector the tests run: $NCCLPROF_OTELCOL, or what
// tools/otelcol/build.sh prints (it builds once, then prints the cached binary). The test fails,
// never skips, when there is none: CI must build it.
func collectorBinary(t *testing.T) string {
	t.Helper()
	p, err := collectorTool.get(t)
	if err != nil {
		t.Fatalf("the end-to-end metrics tests need an OpenTelemetry Collector with the OTLP receiver "+
			"and the file exporter, and none is available: %v\nBuild it with tools/otelcol/build.sh "+
			"(about 3 minutes; needs Go and the module proxy), or point NCCLPROF_OTELCOL at such a binary.", err)
	}
	return p
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

type collector struct {
	t                  *testing.T
	bin, dir, cfg, out string
	grpcPort, httpPort int
	cmd                *exec.Cmd
	log                *os.File
}

// startCollector runs the collector with OTLP gRPC and HTTP receivers on free loopback ports and
// a file exporter writing OTLP/JSON lines.
func startCollector(t *testing.T) *collector { return startCollectorTLS(t, "", "") }

// startCollectorTLS is startCollector with both receivers serving TLS with the given
// certificate and key (PEM files), when certFile is not empty.
func startCollectorTLS(t *testing.T, certFile, keyFile string) *collector {
	t.Helper()
	c := &collector{t: t, bin: collectorBinary(t), dir: t.TempDir(), grpcPort: freePort(t), httpPort: freePort(t)}
	c.out = filepath.Join(c.dir, "collected.jsonl")
	c.cfg = filepath.Join(c.dir, "otelcol.yaml")
	tls := ""
	if certFile != "" {
		tls = fmt.Sprintf("\n        tls:\n          cert_file: %s\n          key_file: %s", certFile, keyFile)
	}
	cfg := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:%[1]d%[4]s
      http:
        endpoint: 127.0.0.1:%[2]d%[4]s
exporters:
  file:
    path: %[3]s
    flush_interval: 100ms
service:
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
  pipelines:
    metrics:
      receivers: [otlp]
      exporters: [file]
`, c.grpcPort, c.httpPort, c.out, tls)
	if err := os.WriteFile(c.cfg, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	c.start()
	t.Cleanup(c.stop)
	return c
}

func (c *collector) start() {
	c.t.Helper()
	if err := c.restart(); err != nil {
		c.t.Fatal(err)
	}
}

// restart starts the collector process on the same ports and output; it does not call t.Fatal,
// so it may run on another goroutine.
func (c *collector) restart() error {
	var err error
	if c.log, err = os.OpenFile(filepath.Join(c.dir, "otelcol.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
		return err
	}
	c.cmd = exec.Command(c.bin, "--config", c.cfg)
	c.cmd.Stdout, c.cmd.Stderr = c.log, c.log
	if err := c.cmd.Start(); err != nil {
		return fmt.Errorf("cannot start the collector %s: %v", c.bin, err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, port := range []int{c.grpcPort, c.httpPort} {
		for {
			conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 200*time.Millisecond)
			if err == nil {
				conn.Close()
				break
			}
			if time.Now().After(deadline) {
				c.stop()
				b, _ := os.ReadFile(filepath.Join(c.dir, "otelcol.log"))
				return fmt.Errorf("the collector did not listen on 127.0.0.1:%d within 20 s; its log:\n%s", port, b)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

// stop ends the collector (SIGTERM, then SIGKILL after 10 s); it is safe to call twice.
func (c *collector) stop() {
	if c.cmd == nil || c.cmd.Process == nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
	c.cmd = nil
	if c.log != nil {
		c.log.Close()
		c.log = nil
	}
}

// ---------------------------------------------------------------------------- the test host

// The host's ground truth, as the plugin-core tests read it.
type (
	truth     = hosttest.Truth
	truthComm = hosttest.TruthComm
)

type hostRun struct {
	dir      string // NCCLPROF_OUTPUT_DIR
	truth    truth
	wall     time.Duration
	exitCode int
	stderr   string
	maxRSSKB int64
}

// runHost runs the C test host on a scenario with the plugin, env added to the test's
// environment (NCCLPROF_OUTPUT_DIR is set to a fresh directory unless given).
func runHost(t *testing.T, env []string, args ...string) hostRun {
	t.Helper()
	lib, host := built(t)
	r := hostRun{dir: t.TempDir()}
	truthPath := filepath.Join(r.dir, "truth.json")
	cmd := exec.Command(host, append([]string{"--lib", lib, "--truth", truthPath}, args...)...)
	cmd.Env = append(os.Environ(), "NCCLPROF_OUTPUT_DIR="+r.dir)
	cmd.Env = append(cmd.Env, env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Stdout = &stderr
	start := time.Now()
	err := cmd.Run()
	r.wall = time.Since(start)
	r.stderr = stderr.String()
	if cmd.ProcessState != nil {
		r.exitCode = cmd.ProcessState.ExitCode()
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			r.maxRSSKB = ru.Maxrss
		}
	}
	if err != nil || r.exitCode != 0 {
		t.Fatalf("test host %v exited with %d (%v); output:\n%s", args, r.exitCode, err, r.stderr)
	}
	b, err := os.ReadFile(truthPath)
	if err != nil {
		t.Fatalf("the host wrote no ground truth: %v", err)
	}
	// The cycles scenario writes one truth line per cycle; the first is kept here.
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(&r.truth); err != nil {
		t.Fatalf("ground truth %s: %v", truthPath, err)
	}
	return r
}

// ---------------------------------------------------------------------------- OTLP read back

// pt is one data point read back from OTLP/JSON, attributes as strings.
type pt struct {
	attrs         map[string]string
	value         float64
	count         uint64
	sum, min, max float64
	kind          string // sum, gauge, histogram, exponentialHistogram
	monotonic     bool
	temporality   mpb.AggregationTemporality
	unit          string
	time          uint64 // collection time, Unix ns
}

// view is the latest value of every series of one process, and its resource.
type view struct {
	resource map[string]string
	series   map[string]map[string]pt // metric → attribute key → latest point
	lines    int
}

func anyString(v *cpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *cpb.AnyValue_StringValue:
		return x.StringValue
	case *cpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *cpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	case *cpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	}
	return fmt.Sprint(v)
}

func attrMap(kvs []*cpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = anyString(kv.Value)
	}
	return m
}

func attrKeyOf(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s;", k, m[k])
	}
	return b.String()
}

// readOTLP reads OTLP/JSON lines (the plugin's file or the collector's) and keeps, for the
// process with the given pid, the latest point of every series.
func readOTLP(t *testing.T, path string, pid int) view {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("no OTLP output at %s: %v", path, err)
	}
	defer f.Close()
	v := view{series: map[string]map[string]pt{}}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 256<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var req colpb.ExportMetricsServiceRequest
		if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(sc.Bytes(), &req); err != nil {
			t.Fatalf("%s: a line is not OTLP/JSON: %v", path, err)
		}
		for _, rm := range req.ResourceMetrics {
			res := attrMap(rm.GetResource().GetAttributes())
			if res["process.pid"] != strconv.Itoa(pid) {
				continue
			}
			v.lines++
			v.resource = res
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					for _, p := range pointsPB(m) {
						if v.series[m.Name] == nil {
							v.series[m.Name] = map[string]pt{}
						}
						// Exports can arrive out of order (a periodic export still in flight
						// when the final one goes out on its own connection): the latest
						// collection wins, not the latest line.
						k := attrKeyOf(p.attrs)
						if old, ok := v.series[m.Name][k]; !ok || p.time >= old.time {
							v.series[m.Name][k] = p
						}
					}
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

func pointsPB(m *mpb.Metric) []pt {
	var out []pt
	num := func(dps []*mpb.NumberDataPoint, kind string, mono bool, tmp mpb.AggregationTemporality) {
		for _, d := range dps {
			p := pt{attrs: attrMap(d.Attributes), kind: kind, monotonic: mono, temporality: tmp, unit: m.Unit,
				time: d.TimeUnixNano}
			switch x := d.Value.(type) {
			case *mpb.NumberDataPoint_AsInt:
				p.value = float64(x.AsInt)
			case *mpb.NumberDataPoint_AsDouble:
				p.value = x.AsDouble
			}
			out = append(out, p)
		}
	}
	switch d := m.Data.(type) {
	case *mpb.Metric_Sum:
		num(d.Sum.DataPoints, "sum", d.Sum.IsMonotonic, d.Sum.AggregationTemporality)
	case *mpb.Metric_Gauge:
		num(d.Gauge.DataPoints, "gauge", false, 0)
	case *mpb.Metric_Histogram:
		for _, h := range d.Histogram.DataPoints {
			out = append(out, pt{attrs: attrMap(h.Attributes), kind: "histogram", count: h.Count,
				sum: h.GetSum(), min: h.GetMin(), max: h.GetMax(), temporality: d.Histogram.AggregationTemporality, unit: m.Unit,
				time: h.TimeUnixNano})
		}
	case *mpb.Metric_ExponentialHistogram:
		for _, h := range d.ExponentialHistogram.DataPoints {
			out = append(out, pt{attrs: attrMap(h.Attributes), kind: "exponentialHistogram", count: h.Count,
				sum: h.GetSum(), min: h.GetMin(), max: h.GetMax(), temporality: d.ExponentialHistogram.AggregationTemporality, unit: m.Unit,
				time: h.TimeUnixNano})
		}
	}
	return out
}

// find returns the points of a metric whose attributes include want ("" as a value: the
// attribute must be absent).
func (v view) find(metric string, want map[string]string) []pt {
	var out []pt
next:
	for _, p := range v.series[metric] {
		for k, w := range want {
			got, ok := p.attrs[k]
			if w == "" && ok || w != "" && got != w {
				continue next
			}
		}
		out = append(out, p)
	}
	return out
}

func (v view) one(t *testing.T, metric string, want map[string]string) pt {
	t.Helper()
	ps := v.find(metric, want)
	if len(ps) != 1 {
		t.Fatalf("%s %v: want exactly one series, got %d (series of %s: %d)", metric, want, len(ps), metric, len(v.series[metric]))
	}
	return ps[0]
}

// waitFor polls until cond holds or the timeout passes.
func waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// fileHas says whether the file exists and contains s.
func fileHas(path, s string) bool {
	b, err := os.ReadFile(path)
	return err == nil && bytes.Contains(b, []byte(s))
}

// summaries reads the plugin's own summaries (one per communicator, written at finalize), to
// cross-check what metrics exported: process counters and what was aggregated.
func summaries(t *testing.T, dir string) map[string]map[string]any {
	t.Helper()
	ms, _ := filepath.Glob(filepath.Join(dir, "ncclprof-summary-*.json"))
	if len(ms) == 0 {
		t.Fatalf("no summary in %s", dir)
	}
	out := map[string]map[string]any{}
	for _, m := range ms {
		b, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		var s map[string]any
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		out[s["comm"].(map[string]any)["comm_hash"].(string)] = s
	}
	return out
}

// summary is any one summary (for the process counters).
func summary(t *testing.T, dir string) map[string]any {
	t.Helper()
	for _, s := range summaries(t, dir) {
		return s
	}
	return nil
}

// dropped is how many events the plugin's hot path dropped (every window busy: the drainer fell
// behind, which happens on an overloaded machine).
func dropped(t *testing.T, dir string) float64 {
	pc := summary(t, dir)["process_counters"].(map[string]any)
	return pc["dropped_windows_full"].(float64) + pc["dropped_too_many_threads"].(float64)
}

var execCommand = exec.Command

// checkFinalizeWait fails if NCCL's communicator destroy waited longer than bound for the
// plugin. Wall times of whole runs are not compared: on a shared machine they measure the
// neighbours, while this is the one wait metrics can add to the job.
func checkFinalizeWait(t *testing.T, r hostRun, bound time.Duration) {
	t.Helper()
	got := time.Duration(r.truth.FinalizeMaxNs)
	t.Logf("longest communicator finalize: %v (bound %v)", got.Round(time.Millisecond), bound)
	if got > bound {
		t.Errorf("a communicator's finalize waited %v, more than %v", got.Round(time.Millisecond), bound)
	}
}
