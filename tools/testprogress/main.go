// Command testprogress turns `go test -json` into the log a person reads while `make test` runs:
// a line when each package starts ("[3/27] internal/hosttest"), a line every 30 s while a long
// one runs (how long so far, tests passed, the test running now), one line per package at its
// end, each skipped test with its reason, and the whole output of every failed test and
// package. Lines that are not JSON (the go command's own messages) pass through, except the
// per-module "go: downloading" lines, which it counts instead.
//
//	go test -json ./... 2>&1 | testprogress -packages 27
//
// It exits 1 when a package or a build failed, so the caller needs no pipefail.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

// event is one line of `go test -json` (cmd/test2json); build events carry ImportPath.
type event struct {
	Action      string
	Package     string
	ImportPath  string
	Test        string
	Elapsed     float64
	Output      string
	FailedBuild string
}

// pkg is what is kept of a package while it runs: the output of each test (printed only if it
// fails) and the package's own output.
type pkg struct {
	name    string
	index   int
	started time.Time
	passed  int
	skipped int
	running string
	out     map[string][]string // test ("" for the package) → its output lines
	failed  []string            // the tests and subtests that failed, in order
}

type summary struct {
	mu       sync.Mutex
	w        io.Writer
	total    int
	now      func() time.Time
	pkgs     map[string]*pkg
	order    int
	failed   []string
	ok       int
	builds   map[string][]string // import path → build output
	modules  int                 // "go: downloading" lines
	start    time.Time
	lastEnd  time.Time // when the last package ended (or the run started)
	done     int       // packages ended
	anyError bool
	// Tests over every package, for the closing line that CI's log readers know.
	passed, failedTests, skipped int
	// Every failed test with the last lines it printed, said again at the very end: CI's log
	// readers keep a run's first and last lines and may cut the middle where they were printed.
	failures []failure
}

// failure is one failed test and the end of what it printed.
type failure struct {
	name  string
	lines []string
}

// failureLines is how many of a failed test's last lines the closing recap repeats.
const failureLines = 12

func newSummary(w io.Writer, total int, now func() time.Time) *summary {
	return &summary{w: w, total: total, now: now, pkgs: map[string]*pkg{}, builds: map[string][]string{}, start: now(), lastEnd: now()}
}

// line takes one line of input.
func (s *summary) line(text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var e event
	if !strings.HasPrefix(text, "{") || json.Unmarshal([]byte(text), &e) != nil {
		s.plain(text)
		return
	}
	if e.ImportPath != "" {
		s.build(&e)
		return
	}
	if e.Package == "" {
		return
	}
	p := s.pkg(e.Package)
	switch {
	case e.Action == "output":
		p.out[e.Test] = append(p.out[e.Test], strings.TrimSuffix(e.Output, "\n"))
	case e.Test == "":
		if e.Action == "pass" || e.Action == "fail" || e.Action == "skip" {
			s.end(p, &e)
		}
	case e.Action == "fail" && strings.Contains(e.Test, "/"):
		p.failed = append(p.failed, e.Test)
	case e.Action == "pass" && strings.Contains(e.Test, "/"):
		delete(p.out, e.Test) // its lines are noise beside its failed siblings'
	case strings.Contains(e.Test, "/"): // subtests are reported with their parent
	case e.Action == "run":
		p.running = e.Test
	case e.Action == "pass":
		p.passed++
		s.passed++
		delete(p.out, e.Test)
	case e.Action == "fail":
		s.failedTests++
		p.failed = append(p.failed, e.Test)
	case e.Action == "skip":
		p.skipped++
		s.skipped++
		fmt.Fprintf(s.w, "  skip %s %s: %s\n", short(p.name), e.Test, skipReason(p.out[e.Test]))
		delete(p.out, e.Test)
	}
}

// plain passes a line that is not a test event through, counting module downloads instead.
func (s *summary) plain(text string) {
	if strings.HasPrefix(text, "go: downloading ") && strings.Contains(text, " v") {
		s.modules++
		return
	}
	if strings.HasPrefix(text, "go: added ") || strings.HasPrefix(text, "go: finding ") {
		return
	}
	fmt.Fprintln(s.w, text)
}

// build keeps a package's build output, printed when its build fails.
func (s *summary) build(e *event) {
	switch e.Action {
	case "build-output":
		s.builds[e.ImportPath] = append(s.builds[e.ImportPath], strings.TrimSuffix(e.Output, "\n"))
	case "build-fail":
		s.anyError = true
		fmt.Fprintf(s.w, "BUILD FAILED %s\n", e.ImportPath)
		for _, l := range s.builds[e.ImportPath] {
			fmt.Fprintf(s.w, "    %s\n", l)
		}
	}
}

func (s *summary) pkg(name string) *pkg {
	p := s.pkgs[name]
	if p == nil {
		s.order++
		p = &pkg{name: name, index: s.order, started: s.now(), out: map[string][]string{}}
		s.pkgs[name] = p
		of := ""
		if s.total > 0 {
			of = fmt.Sprintf("/%d", s.total)
		}
		fmt.Fprintf(s.w, "go test [%d%s] %s ...\n", p.index, of, short(name))
	}
	return p
}

// end reports a package's result; a failure with every line its failed tests and it printed.
func (s *summary) end(p *pkg, e *event) {
	took := s.now().Sub(p.started).Seconds()
	if e.Elapsed > 0 {
		took = e.Elapsed
	}
	switch e.Action {
	case "pass", "skip":
		s.ok++
		fmt.Fprintf(s.w, "ok   %s %.1fs (%s)\n", short(p.name), took, p.counts())
	case "fail":
		s.failed = append(s.failed, short(p.name))
		fmt.Fprintf(s.w, "FAIL %s %.1fs (%s)\n", short(p.name), took, p.counts())
		tests := make([]string, 0, len(p.out))
		for t := range p.out {
			tests = append(tests, t)
		}
		// The failed tests in name order, then the package's own output ("", its FAIL line).
		sort.Slice(tests, func(i, j int) bool { return tests[i] != "" && (tests[j] == "" || tests[i] < tests[j]) })
		for _, t := range tests {
			for _, l := range p.out[t] {
				fmt.Fprintf(s.w, "    %s\n", l)
			}
		}
		for _, t := range p.failed {
			s.failures = append(s.failures, failure{short(p.name) + " " + t, lastLines(p.out[t], failureLines)})
		}
	}
	delete(s.pkgs, p.name)
	s.done++
	s.lastEnd = s.now()
}

func (p *pkg) counts() string {
	c := fmt.Sprintf("%d tests passed", p.passed)
	if p.skipped > 0 {
		c += fmt.Sprintf(", %d skipped", p.skipped)
	}
	return c
}

// tick says, for every package still running, how long it has run and what it is doing.
func (s *summary) tick() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pkgs) == 0 && s.done < s.total {
		fmt.Fprintf(s.w, "  ... compiling the next package's tests: %.0f s so far\n", s.now().Sub(s.lastEnd).Seconds())
	}
	for _, p := range s.pkgs {
		doing := ""
		if p.running != "" {
			doing = ", running " + p.running
		}
		fmt.Fprintf(s.w, "  ... %s: %.0f s so far, %d tests passed%s\n", short(p.name), s.now().Sub(p.started).Seconds(), p.passed, doing)
	}
}

// finish prints the last line and reports whether everything passed.
func (s *summary) finish() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.pkgs { // a package whose binary died without a result
		s.failed = append(s.failed, short(p.name)+" (no result)")
	}
	d := s.now().Sub(s.start).Round(time.Second)
	dl := ""
	if s.modules > 0 {
		dl = fmt.Sprintf("; %d Go modules downloaded", s.modules)
	}
	ok := len(s.failed) == 0 && !s.anyError
	if len(s.failures) > 0 {
		fmt.Fprintf(s.w, "go test: %d failed tests, again (their last lines):\n", len(s.failures))
	}
	for _, f := range s.failures {
		fmt.Fprintf(s.w, "  FAIL %s\n", f.name)
		for _, l := range f.lines {
			fmt.Fprintf(s.w, "    %s\n", l)
		}
	}
	if ok {
		fmt.Fprintf(s.w, "go test: %d packages ok (%s%s)\n", s.ok, d, dl)
	} else {
		fmt.Fprintf(s.w, "go test: %d packages ok, FAILED: %s (%s%s)\n", s.ok, strings.Join(s.failed, ", "), d, dl)
	}
	// The plain closing line CI reads when the go test lines themselves are summarized away.
	fmt.Fprintf(s.w, "gotest: %d passed, %d failed, %d skipped\n", s.passed, s.failedTests, s.skipped)
	return ok
}

// lastLines returns at most n of lines' last lines.
func lastLines(lines []string, n int) []string {
	if len(lines) > n {
		return lines[len(lines)-n:]
	}
	return lines
}

// short drops the module path from a package name.
func short(name string) string {
	if i := strings.Index(name, "/ncclprof/ncclprof/"); i >= 0 {
		return name[i+len("/ncclprof/ncclprof/"):]
	}
	return name
}

// skipReason is the message t.Skip printed: the test's last output line that is not the
// "--- SKIP" line itself.
func skipReason(out []string) string {
	for i := len(out) - 1; i >= 0; i-- {
		l := strings.TrimSpace(out[i])
		if l != "" && !strings.HasPrefix(l, "--- SKIP") && !strings.HasPrefix(l, "=== ") {
			return l
		}
	}
	return "(no reason given)"
}

func main() {
	total := flag.Int("packages", 0, "how many packages will be tested (for [i/N])")
	every := flag.Duration("every", 30*time.Second, "how often to say what a running package is doing")
	flag.Parse()
	s := newSummary(os.Stdout, *total, time.Now)
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(*every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				s.tick()
			case <-stop:
				return
			}
		}
	}()
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	for in.Scan() {
		s.line(in.Text())
	}
	close(stop)
	if err := in.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "testprogress: reading go test's output: %v\n", err)
		os.Exit(1)
	}
	if !s.finish() {
		os.Exit(1)
	}
}
