package main

import (
	"strings"
	"testing"
	"time"
)

// A canned `go test -json` stream (as the go command writes it with -p 1): one package passes
// with a skipped test, one fails, one fails to build, and the go command downloads modules.
const stream = `go: downloading github.com/spf13/cobra v1.10.1
go: downloading go1.26.8 (linux/amd64)
{"Action":"start","Package":"github.com/ncclprof/ncclprof/internal/a"}
{"Action":"run","Package":"github.com/ncclprof/ncclprof/internal/a","Test":"TestOne"}
{"Action":"output","Package":"github.com/ncclprof/ncclprof/internal/a","Test":"TestOne","Output":"=== RUN   TestOne\n"}
{"Action":"output","Package":"github.com/ncclprof/ncclprof/internal/a","Test":"TestOne","Output":"    a_test.go:9: noise of a passing test\n"}
{"Action":"pass","Package":"github.com/ncclprof/ncclprof/internal/a","Test":"TestOne","Elapsed":1}
{"Action":"run","Package":"github.com/ncclprof/ncclprof/internal/a","Test":"TestTorch"}
{"Action":"output","Package":"github.com/ncclprof/ncclprof/internal/a","Test":"TestTorch","Output":"    a_test.go:20: torch is not installed\n"}
{"Action":"output","Package":"github.com/ncclprof/ncclprof/internal/a","Test":"TestTorch","Output":"--- SKIP: TestTorch (0.00s)\n"}
{"Action":"skip","Package":"github.com/ncclprof/ncclprof/internal/a","Test":"TestTorch","Elapsed":0}
{"Action":"pass","Package":"github.com/ncclprof/ncclprof/internal/a","Elapsed":2.5}
{"Action":"start","Package":"github.com/ncclprof/ncclprof/internal/b"}
{"Action":"run","Package":"github.com/ncclprof/ncclprof/internal/b","Test":"TestBad"}
{"Action":"run","Package":"github.com/ncclprof/ncclprof/internal/b","Test":"TestBad/sub"}
{"Action":"output","Package":"github.com/ncclprof/ncclprof/internal/b","Test":"TestBad","Output":"    b_test.go:5: got 3, want 4\n"}
{"Action":"fail","Package":"github.com/ncclprof/ncclprof/internal/b","Test":"TestBad/sub","Elapsed":0.1}
{"Action":"output","Package":"github.com/ncclprof/ncclprof/internal/b","Test":"TestBad/ok","Output":"--- PASS: TestBad/ok (0.00s)\n"}
{"Action":"pass","Package":"github.com/ncclprof/ncclprof/internal/b","Test":"TestBad/ok","Elapsed":0.1}
{"Action":"fail","Package":"github.com/ncclprof/ncclprof/internal/b","Test":"TestBad","Elapsed":0.1}
{"Action":"output","Package":"github.com/ncclprof/ncclprof/internal/b","Output":"FAIL\n"}
{"Action":"fail","Package":"github.com/ncclprof/ncclprof/internal/b","Elapsed":0.2}
{"ImportPath":"github.com/ncclprof/ncclprof/internal/c [github.com/ncclprof/ncclprof/internal/c.test]","Action":"build-output","Output":"internal/c/c.go:3:1: syntax error\n"}
{"ImportPath":"github.com/ncclprof/ncclprof/internal/c [github.com/ncclprof/ncclprof/internal/c.test]","Action":"build-fail"}
`

func run(t *testing.T, input string) (string, bool, *summary) {
	var out strings.Builder
	now := time.Unix(0, 0)
	s := newSummary(&out, 3, func() time.Time { return now })
	for _, l := range strings.Split(strings.TrimSuffix(input, "\n"), "\n") {
		s.line(l)
		now = now.Add(time.Second)
	}
	ok := s.finish()
	return out.String(), ok, s
}

func TestSummary(t *testing.T) {
	out, ok, _ := run(t, stream)
	if ok {
		t.Error("a failed package and a failed build reported as success")
	}
	for _, want := range []string{
		"go test [1/3] internal/a ...\n",
		"  skip internal/a TestTorch: a_test.go:20: torch is not installed\n",
		"ok   internal/a 2.5s (1 tests passed, 1 skipped)\n",
		"go test [2/3] internal/b ...\n",
		"FAIL internal/b 0.2s (0 tests passed)\n",
		"    FAIL\n",
		"        b_test.go:5: got 3, want 4\n",
		"BUILD FAILED github.com/ncclprof/ncclprof/internal/c [github.com/ncclprof/ncclprof/internal/c.test]\n    internal/c/c.go:3:1: syntax error\n",
		"go: downloading go1.26.8 (linux/amd64)\n", // the toolchain line stays: it takes a while
		// said again at the end, where CI's log readers keep lines
		"go test: 2 failed tests, again (their last lines):\n  FAIL internal/b TestBad/sub\n  FAIL internal/b TestBad\n        b_test.go:5: got 3, want 4\ngo test: 1 packages ok",
		"go test: 1 packages ok, FAILED: internal/b (24s; 1 Go modules downloaded)\n",
		"gotest: 1 passed, 1 failed, 1 skipped\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %q:\n%s", want, out)
		}
	}
	for _, noise := range []string{"noise of a passing test", "spf13/cobra", "TestBad/ok"} {
		if strings.Contains(out, noise) {
			t.Errorf("the log has %q, which nobody needs to read:\n%s", noise, out)
		}
	}
}

// A long package says every tick how long it has run, how many tests passed and which runs.
func TestTick(t *testing.T) {
	var out strings.Builder
	now := time.Unix(0, 0)
	s := newSummary(&out, 3, func() time.Time { return now })
	for _, l := range strings.Split(`{"Action":"start","Package":"github.com/ncclprof/ncclprof/internal/hosttest"}
{"Action":"run","Package":"github.com/ncclprof/ncclprof/internal/hosttest","Test":"TestA"}
{"Action":"pass","Package":"github.com/ncclprof/ncclprof/internal/hosttest","Test":"TestA","Elapsed":40}
{"Action":"run","Package":"github.com/ncclprof/ncclprof/internal/hosttest","Test":"TestSoakShort"}`, "\n") {
		s.line(l)
	}
	now = now.Add(95 * time.Second)
	s.tick()
	if want := "  ... internal/hosttest: 95 s so far, 1 tests passed, running TestSoakShort\n"; !strings.Contains(out.String(), want) {
		t.Errorf("tick: want %q in\n%s", want, out.String())
	}
	if s.finish() {
		t.Error("a package that never ended reported as success")
	}
	if !strings.Contains(out.String(), "FAILED: internal/hosttest (no result)") {
		t.Errorf("a package without a result is not named:\n%s", out.String())
	}
}

// Between packages (the next test binary compiling) a tick says so.
func TestTickBetweenPackages(t *testing.T) {
	var out strings.Builder
	now := time.Unix(0, 0)
	s := newSummary(&out, 3, func() time.Time { return now })
	s.line(`{"Action":"pass","Package":"github.com/ncclprof/ncclprof/internal/a","Elapsed":1}`)
	now = now.Add(12 * time.Second)
	s.tick()
	if !strings.Contains(out.String(), "  ... compiling the next package's tests: 12 s so far\n") {
		t.Errorf("no word while the next package compiles:\n%s", out.String())
	}
}
