package telemetry

// End-to-end: the C test host replays NCCL's call sequences with the real plugin library, which
// exports through OTLP (gRPC, HTTP) to a real OpenTelemetry Collector (built by
// tools/otelcol/build.sh) or to its own OTLP/JSON file; what arrives is checked against the
// host's ground truth.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ncclprof/ncclprof/internal/aggregate"
)

// otlpEnv points the plugin at a collector.
func otlpEnv(protocol string, port int, extra ...string) []string {
	return append([]string{"NCCLPROF_METRICS=otlp", "OTEL_EXPORTER_OTLP_PROTOCOL=" + protocol,
		fmt.Sprintf("OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:%d", port)}, extra...)
}

// totalOps is the number of operations exported for one communicator.
func totalOps(v view, hash string) float64 {
	var n float64
	for _, p := range v.find(MOps, map[string]string{AttrCommHash: hash}) {
		n += p.value
	}
	return n
}

// summaryOps is the number of operations of a communicator in the plugin's own summary.
func summaryOps(t *testing.T, dir, hash string) float64 {
	var n float64
	s := summaries(t, dir)[hash]
	if s == nil {
		t.Fatalf("no summary for communicator %s in %s", hash, dir)
	}
	for _, o := range s["operations"].([]any) {
		n += o.(map[string]any)["count"].(float64)
	}
	return n
}

func truthOps(c truthComm) float64 {
	var n float64
	for _, o := range c.Ops {
		n += float64(o.Count)
	}
	return n
}

// waitCollected waits until the collector's file holds, for the host's process, every operation
// the plugin aggregated (its summary; the final export at finalize carries the totals), and
// returns it. Whether that is the ground truth is checkTruth's business.
func waitCollected(t *testing.T, c *collector, r hostRun) view {
	t.Helper()
	var v view
	want := map[string]float64{}
	for _, cm := range r.truth.Comms {
		want[cm.Hash] = summaryOps(t, r.dir, cm.Hash)
	}
	got := map[string]float64{}
	ok := waitFor(15*time.Second, func() bool {
		if !fileHas(c.out, `"`+strconv.Itoa(r.truth.PID)+`"`) {
			return false
		}
		v = readOTLP(t, c.out, r.truth.PID)
		for h, n := range want {
			if got[h] = totalOps(v, h); got[h] != n {
				return false
			}
		}
		return true
	})
	if !ok {
		b, _ := os.ReadFile(filepath.Join(c.dir, "otelcol.log"))
		t.Fatalf("the collector did not receive every operation the plugin aggregated within 15 s: got %v, "+
			"the plugin's summary counted %v; host output:\n%s\ncollector log:\n%s", got, want, r.stderr, b)
	}
	return v
}

type checks struct {
	kernel     bool // KernelCh on: every operation has a GPU time
	failuresOK bool // exports may have failed (fault tests)
}

// checkTruth compares what was exported with the host's ground truth and the plugin's own
// summary.
func checkTruth(t *testing.T, v view, r hostRun, ck checks) {
	t.Helper()
	tr := r.truth
	if d := dropped(t, r.dir); d > 0 {
		// The hot path dropped events (the machine was too busy for the drainer): the truth
		// cannot be met by anyone. What was aggregated must still arrive exactly.
		t.Logf("the plugin dropped %v events (overloaded machine); checking the export against the "+
			"plugin's own summary instead of the ground truth", d)
		checkSummary(t, v, r)
		checkHealth(t, v, r, ck)
		return
	}
	if v.resource["process.pid"] != strconv.Itoa(tr.PID) {
		t.Errorf("resource process.pid = %q, want %d", v.resource["process.pid"], tr.PID)
	}
	host, _ := os.Hostname()
	if v.resource["host.name"] != host {
		t.Errorf("resource host.name = %q, want %q", v.resource["host.name"], host)
	}
	sums := summaries(t, r.dir)
	for _, c := range tr.Comms {
		sc := sums[c.Hash]
		if sc == nil {
			t.Fatalf("no summary for communicator %s", c.Hash)
		}
		// What the plugin knows of the communicator: profiler ABI v1–v3 do not report nranks
		// (nor nnodes), and then the attributes are absent rather than 0.
		nranks := int(sc["comm"].(map[string]any)["nranks"].(float64))
		// NCCL 2.23–2.26 (v1–v3) never set the communicator's name: it is absent.
		name := c.Name
		if sc["comm"].(map[string]any)["abi_version"].(float64) < 4 {
			name = ""
		}
		base := map[string]string{AttrCommHash: c.Hash, AttrRank: strconv.Itoa(c.Rank), AttrNRanks: ""}
		if nranks > 0 {
			if nranks != c.NRanks {
				t.Errorf("comm %s: the plugin has nranks %d, truth %d", c.Name, nranks, c.NRanks)
			}
			base[AttrNRanks] = strconv.Itoa(nranks)
		}
		if totalOps(v, c.Hash) != truthOps(c) {
			t.Errorf("comm %s: %v operations exported, truth %v", c.Name, totalOps(v, c.Hash), truthOps(c))
		}
		for _, o := range c.Ops {
			want := map[string]string{AttrOp: o.Func, AttrNChannels: strconv.Itoa(o.NChannels),
				AttrAlgo: o.Algo, AttrProto: o.Proto, AttrCommName: name}
			for k, v := range base {
				want[k] = v
			}
			if p := v.one(t, MOps, want); p.value != float64(o.Count) || !p.monotonic {
				t.Errorf("%s %s: %s = %v, truth %d", c.Name, o.Func, MOps, p.value, o.Count)
			}
			if p := v.one(t, MOpIO, want); p.value != float64(o.Bytes) {
				t.Errorf("%s %s: %s = %v, truth %d", c.Name, o.Func, MOpIO, p.value, o.Bytes)
			}
			if p := v.one(t, MOpSize, want); p.count != o.Count || p.sum != float64(o.Bytes) || p.kind != "exponentialHistogram" || p.unit != "By" {
				t.Errorf("%s %s: %s count/sum/kind = %d/%v/%s, truth %d/%d exponentialHistogram",
					c.Name, o.Func, MOpSize, p.count, p.sum, p.kind, o.Count, o.Bytes)
			}
			ps := v.find(MOpCompletion, want)
			if o.CompletionMeanNs > 0 {
				if len(ps) != 1 {
					t.Fatalf("%s %s: no completion histogram", c.Name, o.Func)
				}
				comp := ps[0]
				mean := comp.sum / float64(comp.count) * 1e9
				if comp.count == 0 || comp.count > o.Count || !o.CompletionHolds(mean, 0.05) || comp.unit != "s" {
					t.Errorf("%s %s: completion %d ops, mean %.0f ns; truth %d ops, mean %.0f-%.0f ns (5%%)",
						c.Name, o.Func, comp.count, mean, o.Count, o.CompletionMinMeanNs, o.CompletionMeanNs)
				}
				alg := v.one(t, MOpAlgBW, want)
				// nccl-tests' factor for the communicator size the plugin knows (none: 0 for
				// AllReduce, whose busbw is then not exported).
				f, _ := aggregate.Factor(o.Func, max(nranks, 1))
				if nranks == 0 && o.Func == "AllReduce" {
					f = 0
				}
				if f == 0 {
					if ps := v.find(MOpBusBW, want); len(ps) != 0 {
						t.Errorf("%s %s: busbw exported without the communicator size", c.Name, o.Func)
					}
				} else if bus := v.one(t, MOpBusBW, want); alg.count != comp.count || bus.count != comp.count || !near(bus.sum/alg.sum, f, 1e-9) {
					t.Errorf("%s %s: algbw/busbw counts %d/%d (completion %d), busbw/algbw = %g, want %g",
						c.Name, o.Func, alg.count, bus.count, comp.count, bus.sum/alg.sum, f)
				}
				// algbw of each op is size/time: the mean lies between the extremes those allow.
				if alg.min <= 0 || alg.max < alg.min {
					t.Errorf("%s %s: algbw min/max %g/%g", c.Name, o.Func, alg.min, alg.max)
				}
				if ck.kernel {
					gpu := v.one(t, MOpGPU, want)
					if gpu.count != o.Count || gpu.sum/float64(gpu.count) > comp.sum/float64(comp.count)*1.05 || gpu.min <= 0 {
						t.Errorf("%s %s: GPU time %d ops mean %g s; want %d ops, positive, not above completion %g s",
							c.Name, o.Func, gpu.count, gpu.sum/float64(gpu.count), o.Count, comp.sum/float64(comp.count))
					}
				}
			}
			if p := v.one(t, MOpEnqueue, want); p.count != o.Count || p.min <= 0 {
				t.Errorf("%s %s: enqueue count %d min %g, want %d positive", c.Name, o.Func, p.count, p.min, o.Count)
			}
		}
		fits := map[int]map[string]any{}
		for _, sp := range sc["rank_pairs"].([]any) {
			m := sp.(map[string]any)
			fits[int(m["peer"].(float64))] = m["fit_min"].(map[string]any)
		}
		for _, p := range c.Pairs {
			want := map[string]string{AttrPeer: strconv.Itoa(p.Peer)}
			for k, v := range base {
				want[k] = v
			}
			for _, m := range []struct {
				name, dir string
				truth     uint64
			}{{MPairIO, DirTransmit, p.SentBytes}, {MPairTransfers, DirTransmit, p.SendTransfers},
				{MPairIO, DirReceive, p.RecvBytes}, {MPairTransfers, DirReceive, p.RecvTransfers}} {
				want[AttrDirection] = m.dir
				if got := v.one(t, m.name, want); got.value != float64(m.truth) {
					t.Errorf("%s peer %d: %s %s = %v, truth %d", c.Name, p.Peer, m.name, m.dir, got.value, m.truth)
				}
			}
			delete(want, AttrDirection)
			// Latency and bandwidth are exported exactly when the plugin's own fit (in its
			// summary) is trusted, with its values; a clean fit recovers the host's model.
			want[AttrFit] = "min"
			fit := fits[p.Peer]
			if fit == nil || !fit["trusted"].(bool) {
				for _, name := range []string{MPairLatency, MPairBandwidth, MPairR2} {
					if ps := v.find(name, want); len(ps) != 0 {
						t.Errorf("%s peer %d: %s exported although the fit is not trusted", c.Name, p.Peer, name)
					}
				}
				continue
			}
			lat := v.one(t, MPairLatency, want).value * 1e9
			bw := v.one(t, MPairBandwidth, want).value
			r2 := v.one(t, MPairR2, want).value
			t.Logf("%s peer %d: latency %.0f ns (model %.0f), bandwidth %.3g B/s (model %.3g), R² %.6f",
				c.Name, p.Peer, lat, p.LatencyNs, bw, p.BandwidthBps, r2)
			if !near(lat, fit["latency_ns"].(float64), 1e-9) || !near(bw, fit["bandwidth_bytes_per_s"].(float64), 1e-9) ||
				!near(r2, fit["r2"].(float64), 1e-9) {
				t.Errorf("%s peer %d: exported latency %g ns / bandwidth %g / R² %g; the plugin's fit: %v",
					c.Name, p.Peer, lat, bw, r2, fit)
			}
			if r2 >= 0.99 && (!near(lat, p.LatencyNs, 0.15) || !near(bw, p.BandwidthBps, 0.10)) {
				t.Errorf("%s peer %d: latency %.0f ns / bandwidth %.4g B/s (R² %.4f); model %.0f ns / %.4g B/s",
					c.Name, p.Peer, lat, bw, r2, p.LatencyNs, p.BandwidthBps)
			}
		}
		for _, ch := range c.Channels {
			want := map[string]string{AttrChannel: strconv.Itoa(ch.Channel)}
			for k, v := range base {
				want[k] = v
			}
			if got := v.one(t, MChanTransfers, want); got.value != float64(ch.Transfers) {
				t.Errorf("%s channel %d: transfers %v, truth %d", c.Name, ch.Channel, got.value, ch.Transfers)
			}
			if got := v.one(t, MChanIO, want); got.value != float64(ch.Bytes) {
				t.Errorf("%s channel %d: bytes %v, truth %d", c.Name, ch.Channel, got.value, ch.Bytes)
			}
			if got := v.one(t, MChanTime, want); got.value <= 0 {
				t.Errorf("%s channel %d: transfer time %v", c.Name, ch.Channel, got.value)
			}
		}
	}
	checkHealth(t, v, r, ck)
}

// checkSummary compares the exported per-operation counts and bytes with the plugin's summary.
func checkSummary(t *testing.T, v view, r hostRun) {
	t.Helper()
	for hash, s := range summaries(t, r.dir) {
		for _, o := range s["operations"].([]any) {
			op := o.(map[string]any)
			want := map[string]string{AttrCommHash: hash, AttrOp: op["func"].(string),
				AttrNChannels: strconv.Itoa(int(op["nchannels"].(float64))),
				AttrAlgo:      op["algo"].(string), AttrProto: op["proto"].(string)}
			if p := v.one(t, MOps, want); p.value != op["count"].(float64) {
				t.Errorf("%s %s: %s = %v, summary %v", hash, op["func"], MOps, p.value, op["count"])
			}
			if p := v.one(t, MOpIO, want); p.value != op["bytes"].(float64) {
				t.Errorf("%s %s: %s = %v, summary %v", hash, op["func"], MOpIO, p.value, op["bytes"])
			}
		}
	}
}

// checkHealth compares the plugin's health counters with its own summary (same finalize).
func checkHealth(t *testing.T, v view, r hostRun, ck checks) {
	t.Helper()
	// The last summary written (most events) was written at the last finalize, as the final
	// export's counters were read.
	var pc map[string]any
	for _, s := range summaries(t, r.dir) {
		c := s["process_counters"].(map[string]any)
		if pc == nil || c["events"].(float64) > pc["events"].(float64) {
			pc = c
		}
	}
	if got := v.one(t, MEvents, nil).value; got != pc["events"].(float64) || got == 0 {
		t.Errorf("%s = %v, summary says %v", MEvents, got, pc["events"])
	}
	if got := v.one(t, MWindows, nil).value; got != pc["windows_processed"].(float64) || got == 0 {
		t.Errorf("%s = %v, summary says %v", MWindows, got, pc["windows_processed"])
	}
	// Drops come per event type (none at all when nothing was dropped): their sum is the total.
	var untracked float64
	for _, p := range v.find(MEventsDropped, map[string]string{AttrReason: "windows_full"}) {
		if p.attrs[AttrEventType] == "" {
			t.Errorf("%s without %s: %v", MEventsDropped, AttrEventType, p.attrs)
		}
		untracked += p.value
	}
	if untracked != pc["dropped_windows_full"].(float64) {
		t.Errorf("%s = %v, summary says %v", MEventsDropped, untracked, pc["dropped_windows_full"])
	}
	if got := v.one(t, MExportFailures, nil).value; got != 0 && !ck.failuresOK {
		t.Errorf("%v export failures", got)
	}
}

// checkResource checks the standard and launcher variables the run set.
func checkResource(t *testing.T, v view, want map[string]string) {
	t.Helper()
	for k, w := range want {
		if v.resource[k] != w {
			t.Errorf("resource %s = %q, want %q (resource: %v)", k, v.resource[k], w, v.resource)
		}
	}
}

func noSecret(t *testing.T, out, secret string) {
	t.Helper()
	if strings.Contains(out, secret) {
		t.Errorf("the host's output shows the secret %q:\n%s", secret, out)
	}
}

// TestE2ECollectorGRPC: rank-pair latency and bandwidth, counts and bytes over OTLP/gRPC.
func TestE2ECollectorGRPC(t *testing.T) {
	col := startCollector(t)
	r := runHost(t, otlpEnv("grpc", col.grpcPort,
		"OTEL_SERVICE_NAME=e2e-train", "OTEL_RESOURCE_ATTRIBUTES=deployment.environment.name=e2e,team=ml",
		"LOCAL_RANK=3", "CUDA_VISIBLE_DEVICES=0,1,2,3", "POD_NAME=trainer-0", "POD_NAMESPACE=research",
		"OTEL_EXPORTER_OTLP_HEADERS=x-ncclprof-token=e2e-s3cr3t"),
		"--iters", "200", "p2p")
	v := waitCollected(t, col, r)
	checkTruth(t, v, r, checks{})
	checkResource(t, v, map[string]string{"service.name": "e2e-train", "deployment.environment.name": "e2e",
		"team": "ml", KeyLocalRank: "3", KeyGPU: "3", "k8s.pod.name": "trainer-0",
		"k8s.namespace.name": "research", KeyVersion: "0.1.0"})
	noSecret(t, r.stderr, "e2e-s3cr3t")
	if strings.Contains(r.stderr, "metrics") {
		t.Errorf("a healthy export printed a warning:\n%s", r.stderr)
	}
}

// TestE2ECollectorHTTP: collectives with KernelCh (GPU time, bus bandwidth) and a rebuilt
// AlltoAll over OTLP/HTTP with gzip; and the plugin's own OTLP/JSON file replayed into the
// collector, which must accept it.
func TestE2ECollectorHTTP(t *testing.T) {
	col := startCollector(t)
	env := otlpEnv("http/protobuf", col.httpPort, "OTEL_EXPORTER_OTLP_COMPRESSION=gzip")
	ar := runHost(t, append(env, "NCCLPROF_EVENT_MASK=default,kernelch"), "--kernel", "--iters", "80", "allreduce")
	checkTruth(t, waitCollected(t, col, ar), ar, checks{kernel: true})
	a2a := runHost(t, env, "--iters", "40", "alltoall")
	v := waitCollected(t, col, a2a)
	checkTruth(t, v, a2a, checks{})
	if p := v.one(t, MOps, map[string]string{AttrOp: "AlltoAll"}); p.value != 40 {
		t.Errorf("rebuilt AlltoAll count = %v, want 40", p.value)
	}

	// The file exporter's lines are valid OTLP/JSON for the collector's OTLP/HTTP receiver.
	f := runHost(t, []string{"NCCLPROF_METRICS=file"}, "--iters", "30", "p2p")
	files, _ := filepath.Glob(filepath.Join(f.dir, "ncclprof-metrics-*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("want one metrics file in %s, got %v", f.dir, files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	for i, line := range lines {
		resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/v1/metrics", col.httpPort), "application/json", bytes.NewReader(line))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("the collector refused line %d of %s: HTTP %d", i+1, files[0], resp.StatusCode)
		}
	}
	checkTruth(t, waitCollected(t, col, f), f, checks{})
}

// TestE2EFileExporter: with nothing configured, metrics go to an OTLP/JSON lines file in
// NCCLPROF_OUTPUT_DIR, created with the umask, holding the same truth.
func TestE2EFileExporter(t *testing.T) {
	old := syscall.Umask(0o027)
	defer syscall.Umask(old)
	r := runHost(t, []string{"NCCLPROF_METRICS=", "OTEL_METRICS_EXPORTER=", "OTEL_EXPORTER_OTLP_ENDPOINT=",
		"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=", "OTEL_SDK_DISABLED="}, "--iters", "100", "p2p")
	files, _ := filepath.Glob(filepath.Join(r.dir, "ncclprof-metrics-*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("want one metrics file in %s, got %v", r.dir, files)
	}
	st, err := os.Stat(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o640 {
		t.Errorf("metrics file mode %v, want 0640 (0666 less the umask 027)", st.Mode().Perm())
	}
	host, _ := os.Hostname()
	if want := fmt.Sprintf("ncclprof-metrics-%s-%d.jsonl", host, r.truth.PID); filepath.Base(files[0]) != want {
		t.Errorf("metrics file %s, want %s", filepath.Base(files[0]), want)
	}
	v := readOTLP(t, files[0], r.truth.PID)
	checkTruth(t, v, r, checks{})
	if v.lines < 1 {
		t.Errorf("no export lines")
	}
}

// TestE2EStepLabelFromC: the exported ncclprof_set_step_label labels operations by the time
// they start. A small C driver (testdata/steplabel.c) links the test host's NCCL emulation.
func TestE2EStepLabelFromC(t *testing.T) {
	lib, _ := built(t)
	root := repoRoot(t)
	bin := filepath.Join(t.TempDir(), "steplabel")
	srcs := []string{filepath.Join(root, "internal", "telemetry", "testdata", "steplabel.c")}
	for _, f := range []string{"emit.c", "calllog.c", "world.c", "era.c", "scenarios.c"} {
		srcs = append(srcs, filepath.Join(root, "testhost", f))
	}
	args := append([]string{"-std=gnu11", "-O1", "-o", bin, "-I" + filepath.Join(root, "testhost")}, srcs...)
	if out, err := runCmd("cc", append(args, "-ldl", "-lpthread")...); err != nil {
		t.Fatalf("cannot build the step-label driver: %v\n%s", err, out)
	}
	dir := t.TempDir()
	out, err := runCmdEnv([]string{"NCCLPROF_OUTPUT_DIR=" + dir, "NCCLPROF_METRICS=file"}, bin, lib)
	if err != nil {
		t.Fatalf("step-label driver: %v\n%s", err, out)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "ncclprof-metrics-*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("no metrics file: %v\n%s", files, out)
	}
	var pid int
	if _, err := fmt.Sscanf(strings.TrimSpace(out), "pid %d", &pid); err != nil {
		t.Fatalf("driver output %q: %v", out, err)
	}
	v := readOTLP(t, files[0], pid)
	// The driver runs 5 AllReduces unlabelled, 7 as "warmup", 11 as "train", then clears.
	for label, want := range map[string]float64{"": 5 + 3, "warmup": 7, "train": 11} {
		if p := v.one(t, MOps, map[string]string{AttrOp: "AllReduce", AttrStep: label}); p.value != want {
			t.Errorf("AllReduces labelled %q: %v, want %v", label, p.value, want)
		}
	}
}

// TestE2ETraceBytes: the trace writer's byte count (published by the trace sink for
// ncclprof_stats) reaches ncclprof.trace.io. The writer publishes once per drainer pass, so
// the value lags the file by at most a pass and the final windows.
func TestE2ETraceBytes(t *testing.T) {
	r := runHost(t, []string{"NCCLPROF_METRICS=file", "NCCLPROF_TRACE=1", "OTEL_METRIC_EXPORT_INTERVAL=100"},
		"--iters", "2000", "p2p")
	traces, _ := filepath.Glob(filepath.Join(r.dir, "*.trace.json*"))
	var size int64
	for _, f := range traces {
		if st, err := os.Stat(f); err == nil {
			size += st.Size()
		}
	}
	files, _ := filepath.Glob(filepath.Join(r.dir, "ncclprof-metrics-*.jsonl"))
	if len(files) != 1 || len(traces) == 0 {
		t.Fatalf("metrics files %v, trace files %v", files, traces)
	}
	tb := readOTLP(t, files[0], r.truth.PID).one(t, MTraceIO, nil).value
	t.Logf("trace files hold %d bytes; %s = %v", size, MTraceIO, tb)
	if tb <= 0 || tb > float64(size) {
		t.Errorf("%s = %v, the trace files hold %d bytes", MTraceIO, tb, size)
	}
}

func runCmd(name string, args ...string) (string, error) { return runCmdEnv(nil, name, args...) }

func runCmdEnv(env []string, name string, args ...string) (string, error) {
	cmd := execCommand(name, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

var _ = math.Abs

// TestE2EEveryABI: every profiler ABI version (NCCL 2.23 … 2.29+), several communicators, three
// NCCL threads, PXN and CUDA-graph replay (the host's "mixed" scenario), through the default
// file exporter, against the ground truth.
func TestE2EEveryABI(t *testing.T) {
	for abi := 1; abi <= 6; abi++ {
		t.Run(fmt.Sprintf("abi%d", abi), func(t *testing.T) {
			r := runHost(t, []string{"NCCLPROF_METRICS=file"}, "--abi", strconv.Itoa(abi), "--iters", "60", "mixed")
			files, _ := filepath.Glob(filepath.Join(r.dir, "ncclprof-metrics-*.jsonl"))
			if len(files) != 1 {
				t.Fatalf("want one metrics file, got %v", files)
			}
			checkTruth(t, readOTLP(t, files[0], r.truth.PID), r, checks{})
		})
	}
}

// TestE2ECycles: communicators created and destroyed with dlclose/dlopen in between (NCCL unloads
// the plugin when the last communicator goes; the Go runtime stays). Each cycle ends with a final
// export, and every cycle's operations are exported exactly once.
func TestE2ECycles(t *testing.T) {
	r := runHost(t, []string{"NCCLPROF_METRICS=file"}, "--cycles", "3", "--iters", "20", "cycles")
	b, err := os.ReadFile(filepath.Join(r.dir, "truth.json"))
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(r.dir, "ncclprof-metrics-*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("want one metrics file across cycles, got %v", files)
	}
	raw, _ := os.ReadFile(files[0])
	if n := bytes.Count(raw, []byte("\n")); n != 3 {
		t.Errorf("%d export lines, want 3 (one final export per cycle; the interval is 10 s)", n)
	}
	v := readOTLP(t, files[0], r.truth.PID)
	cycles := 0
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var tr truth
		if err := json.Unmarshal(line, &tr); err != nil {
			t.Fatal(err)
		}
		for _, c := range tr.Comms {
			cycles++
			if got := totalOps(v, c.Hash); got != truthOps(c) || got == 0 {
				t.Errorf("cycle communicator %s: %v operations exported, truth %v", c.Hash, got, truthOps(c))
			}
		}
	}
	if cycles != 3 {
		t.Errorf("%d communicators in the truth, want 3", cycles)
	}
}
