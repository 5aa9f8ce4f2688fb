// Package build_test checks the shape of the C library's sources (profiler/), which
// tools/build/plugin.sh compiles: its headers include one another without a cycle, and each
// file includes what it uses itself.
package build_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

var profilerDir = filepath.Join("..", "..", "profiler")

var quotedInclude = regexp.MustCompile(`(?m)^\s*#\s*include\s+"([^"]+)"`)

// includeGraph maps each file of dir to the files of dir it includes ("x.h").
func includeGraph(t *testing.T, dir string) map[string][]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.[ch]"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no C sources in %s (%v)", dir, err)
	}
	g := map[string][]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(f)
		g[name] = nil
		for _, m := range quotedInclude.FindAllStringSubmatch(string(b), -1) {
			g[name] = append(g[name], m[1])
		}
	}
	return g
}

// findCycle returns a cycle of g as the files along it (the first repeated at the end), or nil.
func findCycle(g map[string][]string) []string {
	const (
		unseen = iota
		open
		done
	)
	state := map[string]int{}
	var path []string
	var visit func(n string) []string
	visit = func(n string) []string {
		state[n] = open
		path = append(path, n)
		for _, m := range g[n] {
			switch state[m] {
			case open:
				for i, p := range path {
					if p == m {
						return append(append([]string{}, path[i:]...), m)
					}
				}
			case unseen:
				if c := visit(m); c != nil {
					return c
				}
			}
		}
		path = path[:len(path)-1]
		state[n] = done
		return nil
	}
	names := make([]string, 0, len(g))
	for n := range g {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if state[n] == unseen {
			if c := visit(n); c != nil {
				return c
			}
		}
	}
	return nil
}

// No header of the C library includes, through others, a header that includes it back.
func TestIncludeGraphHasNoCycle(t *testing.T) {
	g := includeGraph(t, profilerDir)
	if c := findCycle(g); c != nil {
		t.Errorf("profiler/ includes in a circle: %s", strings.Join(c, " → "))
	}
	// The state the files share has one owner: state.h includes no header of the library but
	// core.h (the types it shares with the Go side), and the hot path is included by no header
	// but the one that owns it.
	for _, h := range g["state.h"] {
		if h != "core.h" {
			t.Errorf("state.h includes %s: it may include only core.h (and system headers)", h)
		}
	}
	for f, incs := range g {
		for _, h := range incs {
			if h == "hot.h" && strings.HasSuffix(f, ".h") {
				t.Errorf("%s includes hot.h: only C files that run the hot path include it", f)
			}
		}
	}
}

// The cycle finder itself: a planted cycle is found and named, a tree is not taken for one.
func TestFindCycle(t *testing.T) {
	cyclic := map[string][]string{
		"a.c": {"hot.h"}, "hot.h": {"state.h"}, "state.h": {"core.h", "chain.h"},
		"chain.h": {"hot.h"}, "core.h": {"abi.h"}, "abi.h": nil,
	}
	got := strings.Join(findCycle(cyclic), " → ")
	if got != "hot.h → state.h → chain.h → hot.h" {
		t.Errorf("planted cycle reported as %q", got)
	}
	tree := map[string][]string{
		"a.c": {"hot.h", "state.h"}, "b.c": {"state.h"}, "hot.h": {"state.h", "ticks.h"},
		"ticks.h": {"state.h"}, "state.h": {"core.h"}, "core.h": nil,
	}
	if c := findCycle(tree); c != nil {
		t.Errorf("no cycle in a diamond, found %v", c)
	}
}

// Each C file compiles with x86's intrinsics headers reduced to the declarations it uses from
// them: on x86 they bring in stdlib.h and more, which an aarch64 build (make wheel
// GOARCH=arm64) does not get, so a file that relied on them fails there (chain.c called getenv
// with no declaration: an error with GCC 14, a pointer cut to an int with older compilers).
func TestEachFileIncludesWhatItUses(t *testing.T) {
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("no C compiler (%s) on PATH", cc)
	}
	stubs := t.TempDir()
	for name, text := range map[string]string{
		"x86intrin.h": "unsigned long long __rdtsc(void);\n",
		"cpuid.h":     "int __get_cpuid(unsigned, unsigned*, unsigned*, unsigned*, unsigned*);\n",
	} {
		if err := os.WriteFile(filepath.Join(stubs, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files, _ := filepath.Glob(filepath.Join(profilerDir, "*.c"))
	for _, f := range files {
		for _, extra := range [][]string{nil, {"-DNP_TSAN"}} {
			args := append([]string{"-std=gnu11", "-fsyntax-only", "-Wall", "-Werror=implicit-function-declaration",
				"-Werror=int-conversion", "-I", stubs}, extra...)
			out, err := exec.Command(cc, append(args, f)...).CombinedOutput()
			if err != nil {
				t.Errorf("%s %v, without what x86intrin.h brings in: %v\n%s", filepath.Base(f), extra, err, out)
			}
		}
	}
}
