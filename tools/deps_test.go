// Package tools_test tests tools/deps.sh, the first step of `make test`: on a machine that lacks
// what the tests need and that it cannot install itself, it must stop at once with the one
// command to run, before anything long is built.
package tools_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeMachine is a PATH with only the commands deps.sh reaches before it decides: stubs for go
// (reporting goVersion), gcc, id (a non-root uid) and apt-get (which must not run), and the
// real sed, dirname and python3. Chromium, Debian's Prometheus and npm are absent.
func fakeMachine(t *testing.T, goVersion string) []string {
	bin := t.TempDir()
	stub := func(name, body string) {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	stub("go", `case "$1 $2" in
"env GOVERSION") echo `+goVersion+`;;
"env GOTOOLCHAIN") echo "${GOTOOLCHAIN:-auto}";;
*) echo "unexpected go $*" >&2; exit 2;;
esac`)
	stub("gcc", "exit 0")
	stub("id", "echo 1000")
	stub("apt-get", `echo "apt-get ran as a user" >&2; exit 3`)
	real := map[string]string{}
	for _, name := range []string{"sed", "dirname", "bash"} {
		p, err := exec.LookPath(name)
		if err != nil {
			t.Skipf("%s not on PATH", name)
		}
		real[name] = p
	}
	// The interpreter itself, not a shim (pyenv's needs its own environment).
	py, err := exec.Command("python3", "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		t.Skipf("python3: %v", err)
	}
	real["python3"] = strings.TrimSpace(string(py))
	for name, p := range real {
		if err := os.Symlink(p, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	return []string{"PATH=" + bin, "HOME=" + t.TempDir(), "NCCLPROF_CACHE_DIR=" + t.TempDir(),
		"NCCLPROF_PROMETHEUS2=" + filepath.Join(bin, "no-prometheus")}
}

func deps(t *testing.T, env []string, args ...string) (string, error) {
	bashPath, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not on PATH")
	}
	cmd := exec.Command(bashPath, append([]string{"deps.sh"}, args...)...)
	cmd.Env = env
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("deps.sh took %v to decide; it must stop at once", d)
	}
	return string(out), err
}

// Not root and no Chromium, Prometheus or npm: one apt-get line naming all of them, exit 1,
// nothing built.
func TestStopsAtOnceWithTheCommand(t *testing.T) {
	out, err := deps(t, fakeMachine(t, "go1.26.0"))
	if err == nil {
		t.Fatalf("deps.sh succeeded on a machine without Chromium:\n%s", out)
	}
	if !strings.Contains(out, "    sudo apt-get install -y chromium prometheus nodejs npm\n") {
		t.Errorf("want the one command to run, got:\n%s", out)
	}
	if strings.Contains(out, "installing") || strings.Contains(out, "building") {
		t.Errorf("it started installing or building before stopping:\n%s", out)
	}
}

// GOTOOLCHAIN=local with a Go older than go.mod's: one line saying what to do. Without local,
// the same Go is told it will fetch the toolchain (and passes).
func TestOldGoWithLocalToolchain(t *testing.T) {
	env := fakeMachine(t, "go1.22.12")
	out, err := deps(t, append(env, "GOTOOLCHAIN=local"), "go")
	if err == nil {
		t.Fatalf("an old Go with GOTOOLCHAIN=local passed:\n%s", out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 1 || !strings.Contains(out, "Go 1.22.12 is older than go.mod's go 1.26") ||
		!strings.Contains(out, "GOTOOLCHAIN=auto") || !strings.Contains(out, "https://go.dev/dl") {
		t.Errorf("want one line with the cause and what to do, got:\n%s", out)
	}
	out, err = deps(t, append(env, "GOTOOLCHAIN=auto"), "go")
	if err != nil || !strings.Contains(out, "will fetch and use go1.26") {
		t.Errorf("Go 1.22 with GOTOOLCHAIN=auto fetches 1.26 itself; got %v:\n%s", err, out)
	}
	out, err = deps(t, fakeMachine(t, "go1.20.3"), "go")
	if err == nil || !strings.Contains(out, "too old") {
		t.Errorf("Go 1.20 cannot fetch a toolchain; got %v:\n%s", err, out)
	}
}

// A failing Go suite does not stop the Python one: `make test` runs both, names what failed and
// exits non-zero. The sub-makes are a stub that records its arguments and fails test-go.
func TestMakeTestRunsBothSuites(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	stub := filepath.Join(dir, "submake")
	os.WriteFile(stub, []byte("#!/bin/sh\necho \"$*\" >>"+log+"\ncase \"$*\" in *test-go*) exit 2;; esac\n"), 0o755)
	cmd := exec.Command("make", "-C", "..", "-o", "deps", "test", "MAKE="+stub)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("make test passed with a failing Go suite:\n%s", out)
	}
	ran, _ := os.ReadFile(log)
	if !strings.Contains(string(ran), "test-go") || !strings.Contains(string(ran), "test-python") {
		t.Errorf("both suites must run; ran:\n%s", ran)
	}
	if !strings.Contains(string(out), "FAILED: test-go (") || strings.Contains(string(out), "test-python (") {
		t.Errorf("want the failed suite named, got:\n%s", out)
	}
}
