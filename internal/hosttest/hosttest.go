// Package hosttest runs the C test host (testhost/, which stands in for NCCL) against the built
// plugin and reads back what both sides wrote: the host's ground truth and the plugin's
// per-communicator summaries. Tests of the plugin core, its metrics and its trace use it.
package hosttest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ncclprof/ncclprof/internal/testtraces"
)

var (
	buildOnce sync.Once
	buildErr  error
)

// Root is the repository root (the directory holding go.mod).
func Root(t testing.TB) string { t.Helper(); return testtraces.Root(t) }

// Build makes the plugin, the host and the sanitizer builds (incremental; once per process).
func Build(t testing.TB) {
	t.Helper()
	r := Root(t)
	buildOnce.Do(func() {
		cmd := exec.Command("make", "-C", r, "all", "sanitize")
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("make all sanitize: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}

// Path of a build artifact, e.g. Path(t, "ncclprof-testhost") or Path(t, "asan/ncclprof-testhost").
func Path(t testing.TB, name string) string { return filepath.Join(Root(t), "build", name) }

// Run is one run of the host.
type Run struct {
	Dir       string // NCCLPROF_OUTPUT_DIR of the run
	Truth     []Truth
	Summaries []Summary
	Stdout    []byte
	Stderr    []byte
	Elapsed   time.Duration
}

// Options for a run. Args are the host's arguments after --lib (scenario last).
type Options struct {
	Variant string   // "" (the real plugin), "asan" or "tsan"
	Args    []string // e.g. {"--abi", "6", "--iters", "50", "p2p"}
	Env     []string // extra environment, e.g. NCCLPROF_WINDOW_SLOTS=2048
	Timeout time.Duration
	// Lib is another plugin library to load (default: the build's, or the Variant's).
	Lib string
	// Ulimit runs the host under these shell ulimit options, e.g. {"-n 7"} or {"-v 1000000"}.
	Ulimit []string
}

// Start runs the host with the plugin and returns what it and the plugin wrote. The run must
// exit 0 unless allowFail.
func Start(t testing.TB, o Options) *Run {
	t.Helper()
	Build(t)
	dir := t.TempDir()
	lib := Path(t, "libnccl-profiler-ncclprof.so")
	host := Path(t, "ncclprof-testhost")
	if o.Variant != "" {
		lib = Path(t, o.Variant+"/libnccl-profiler-ncclprof.so")
		host = Path(t, o.Variant+"/ncclprof-testhost")
	}
	if o.Lib != "" {
		lib = o.Lib
	}
	truth := filepath.Join(dir, "truth.json")
	args := append([]string{"--lib", lib, "--truth", truth}, o.Args...)
	timeout := o.Timeout
	if timeout == 0 {
		timeout = 3 * time.Minute
	}
	cmd := exec.Command(host, args...)
	if len(o.Ulimit) > 0 { // the shell's own ulimit, then the host in its place
		script := "ulimit " + strings.Join(o.Ulimit, " && ulimit ") + ` && exec "$0" "$@"`
		cmd = exec.Command("/bin/sh", append([]string{"-c", script, host}, args...)...)
	}
	cmd.Env = append(os.Environ(), "NCCLPROF_OUTPUT_DIR="+dir)
	cmd.Env = append(cmd.Env, o.Env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		t.Fatalf("host %v did not finish within %v; stderr:\n%s", args, timeout, stderr.String())
	}
	r := &Run{Dir: dir, Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), Elapsed: time.Since(start)}
	if err != nil {
		t.Fatalf("host %v: %v\nstderr:\n%s", args, err, stderr.String())
	}
	r.Truth = readTruth(t, truth)
	r.Summaries = ReadSummaries(t, dir)
	return r
}

// readTruth reads the host's ground truth: one JSON document per line (the cycles scenario
// writes one per communicator lifetime).
func readTruth(t testing.TB, path string) []Truth {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []Truth
	dec := json.NewDecoder(bytes.NewReader(b))
	for dec.More() {
		var x Truth
		if err := dec.Decode(&x); err != nil {
			t.Fatalf("truth %s: %v", path, err)
		}
		out = append(out, x)
	}
	return out
}

// ReadSummaries reads every plugin summary in dir.
func ReadSummaries(t testing.TB, dir string) []Summary {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "ncclprof-summary-*.json"))
	var out []Summary
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var s Summary
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatalf("summary %s is not valid JSON: %v", f, err)
		}
		out = append(out, s)
	}
	return out
}

// Summary finds the plugin's summary of a communicator (hash as "0x%016x", rank).
func (r *Run) Summary(hash string, rank int) *Summary {
	for i := range r.Summaries {
		if r.Summaries[i].Comm.Hash == hash && r.Summaries[i].Comm.Rank == rank {
			return &r.Summaries[i]
		}
	}
	return nil
}

// Counter is the plugin's process-wide counter NP_C_<name> (e.g. "LATE") as the truth
// recorded it, its index read from the enum in profiler/core.h (so the order lives in one place).
func (tr Truth) Counter(t testing.TB, name string) uint64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(Root(t), "profiler", "core.h"))
	if err != nil {
		t.Fatal(err)
	}
	enum := counterEnum.Find(b)
	if enum == nil {
		t.Fatal("profiler/core.h: no NP_C_* enum")
	}
	enum = cComment.ReplaceAll(enum, nil)
	for i, m := range counterName.FindAllSubmatch(enum, -1) {
		if string(m[1]) == name {
			if i >= len(tr.PluginCounters) {
				t.Fatalf("NP_C_%s (%d): the truth has %d counters", name, i, len(tr.PluginCounters))
			}
			return tr.PluginCounters[i]
		}
	}
	t.Fatalf("profiler/core.h has no NP_C_%s", name)
	return 0
}

var (
	counterEnum = regexp.MustCompile(`(?s)enum \{\s*NP_C_EVENTS.*?NP_C_COUNT`)
	counterName = regexp.MustCompile(`\bNP_C_([A-Z_]+)\b`)
	cComment    = regexp.MustCompile(`(?s)/\*.*?\*/`)
)
