package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The scanner on C++ written for this test (not NCCL's): every construct it must see
// through, and every one it must not mistake for a call.
const synthetic = `// ncclProfilerStartInComment(x); is no call
#include "profiler.h"
#define CALL_IN_MACRO() ncclProfilerStartMacro(1)
ncclResult_t ncclProfilerStartDeclared(int s);
static const char* s = "ncclProfilerStartInString(";
namespace ns {
extern "C" {
struct ncclThing { int ncclProfilerField; };
static int table[] = { 1, 2 };
ncclResult_t Proxy::progress(int a) {
  auto f = [&](int b) { ncclProfilerStartProxyOpEvent(b, args); };   /* a lambda: still progress */
  if (a) { ncclProfilerStopProxyOpEvent(a, args); }
  ncclProfilerStopProxyOpEvent(a, args);
  obj.ncclProfilerNotAFreeCall(1);
  return ncclSuccess;
}
}
}
ncclResult_t ncclProfilerStartTaskEvents(struct ncclKernelPlan* plan) {
  eDescr.type = ncclProfileColl;
  ncclProfiler->startEvent(ctx, &h, &eDescr);
  eDescr.type = ncclProfileP2p;
  ncclProfiler->startEvent(ctx, &h, &eDescr);
  ncclProfiler->stopEvent(h);
  ncclProfiler->name;
  char c = '{';
}
template <typename T>
static void after(T x) { ncclProfilerFunction(&h, 0, NULL, 0, NULL); }
`

func TestScanSynthetic(t *testing.T) {
	got := scanFile("src/x.cc", synthetic)
	want := []string{
		"src/x.cc\tProxy::progress\tncclProfilerStartProxyOpEvent\tProxyOp\t1\t11",
		"src/x.cc\tProxy::progress\tncclProfilerStopProxyOpEvent\tProxyOp\t2\t12,13",
		"src/x.cc\tafter\tncclProfilerFunction\tNetPlugin\t1\t29",
		"src/x.cc\tncclProfilerStartTaskEvents\tplugin.startEvent\tColl\t1\t21",
		"src/x.cc\tncclProfilerStartTaskEvents\tplugin.startEvent\tP2p\t1\t23",
		"src/x.cc\tncclProfilerStartTaskEvents\tplugin.stopEvent\tColl+P2p\t1\t24",
	}
	var lines []string
	for _, s := range got {
		var b bytes.Buffer
		writeRelease(&b, &Release{Tag: "x", Sites: []Site{s}})
		rows := strings.Split(strings.TrimSpace(b.String()), "\n")
		lines = append(lines, rows[len(rows)-1])
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("scan:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

// parseFile opens path and parses it, failing the test on either.
func parseFile[T any](t *testing.T, path string, parse func(io.Reader) (T, error)) T {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v, err := parse(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

func readFixture(t *testing.T, tag string) *Release {
	return parseFile(t, filepath.Join("testdata", tag+".tsv"), readRelease)
}

const mapPath = "../../../docs/nccl-call-sites.tsv"

func readMapFile(t *testing.T) *Map { return parseFile(t, mapPath, readMap) }

// The committed map holds exactly the call sites extracted from v2.23.4-1 and v2.30.7-1
// (testdata: rows extracted from NCCL's sources, no NCCL code), with their ABI versions.
func TestMapHoldsTheExtractedReleases(t *testing.T) {
	m := readMapFile(t)
	for _, tag := range []string{"v2.23.4-1", "v2.30.7-1"} {
		lines, err := Diff(m, tag, readFixture(t, tag))
		if err != nil {
			t.Fatal(err)
		}
		if len(lines) != 0 {
			t.Errorf("%s differs from the map at its own tag:\n%s", tag, strings.Join(lines, "\n"))
		}
	}
}

// What a reader of the next release's diff sees, from the command line: the one call site
// 2.30 added over 2.29 (the plugin unloaded when its init fails), and 2.23's raw-step wrappers
// against 2.24's per-transfer ones. Exit 1 when they differ, 0 when not.
func TestDiffCommand(t *testing.T) {
	cases := []struct {
		rows, against string
		code          int
		want          []string
	}{
		{"v2.30.7-1", "v2.29.7-1", 1, []string{
			"# v2.30.7-1 against the map at v2.29.7-1: 1 difference(s)",
			"+\tsrc/plugin/profiler.cc\tncclProfilerPluginInit\tncclProfilerPluginUnload\t-\t1",
		}},
		{"v2.30.7-1", "", 0, []string{"# v2.30.7-1 against the map at v2.30.7-1: 0 difference(s)"}},
		{"v2.23.4-1", "v2.24.3-1", 1, nil},
	}
	for _, c := range cases {
		var out, errOut bytes.Buffer
		args := []string{"diff", "--rows", filepath.Join("testdata", c.rows+".tsv"), "--map", mapPath}
		if c.against != "" {
			args = append(args, "--against", c.against)
		}
		if code := run(args, &out, &errOut); code != c.code {
			t.Errorf("%v: exit %d, want %d (%s)", args, code, c.code, errOut.String())
		}
		got := strings.Split(strings.TrimSpace(out.String()), "\n")
		if c.want != nil && strings.Join(got, "\n") != strings.Join(c.want, "\n") {
			t.Errorf("%v:\n%s\nwant:\n%s", args, out.String(), strings.Join(c.want, "\n"))
		}
		if c.rows == "v2.23.4-1" { // 21: the ABI line, then 10 wrappers renamed (- and +)
			if len(got) != 22 || got[1] != "abi\tv2.24.3-1: 1 2\tv2.23.4-1: 1" ||
				!strings.Contains(out.String(), "+\tsrc/transport/net.cc\tsendProxyProgress\tncclProfilerStartSendProxyStepEvents\tProxyStep\t1") ||
				!strings.Contains(out.String(), "-\tsrc/transport/net.cc\tsendProxyProgress\tncclProfilerStartSendProxyStepEvent\tProxyStep\t1") {
				t.Errorf("2.23 against 2.24:\n%s", out.String())
			}
		}
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"diff", "--map", mapPath}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "--repo DIR --tag TAG") {
		t.Errorf("diff without a source: exit %d, %q; want 2 and what to give", code, errOut.String())
	}
}

// Every call site of the two ends of the range is explained in docs/nccl-call-sites.md: its
// function and its call appear there.
func TestDocNamesEveryCallSite(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/nccl-call-sites.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, tag := range []string{"v2.23.4-1", "v2.30.7-1"} {
		for _, s := range readFixture(t, tag).Sites {
			call := strings.TrimPrefix(s.Call, "plugin.")
			if !bytes.Contains(doc, []byte(s.Func)) || !bytes.Contains(doc, []byte(call)) {
				t.Errorf("%s: %s %s → %s is not in docs/nccl-call-sites.md", tag, s.File, s.Func, s.Call)
			}
		}
	}
}

// With a clone of NCCL (NCCLPROF_NCCL_REPO=DIR), the map is remade from it and must be the
// committed one byte for byte. CI has no clone; the fixtures above stand in for it.
func TestMapFromClone(t *testing.T) {
	repo := os.Getenv("NCCLPROF_NCCL_REPO")
	if repo == "" {
		t.Skip("NCCLPROF_NCCL_REPO (a clone of NVIDIA/nccl with its tags) not set")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	m := readMapFile(t)
	var out, errOut bytes.Buffer
	if code := run(append([]string{"map", "--repo", repo}, m.Tags...), &out, &errOut); code != 0 {
		t.Fatalf("map: exit %d: %s", code, errOut.String())
	}
	want, _ := os.ReadFile(mapPath)
	if !bytes.Equal(out.Bytes(), want) {
		t.Errorf("the map remade from %s differs from %s", repo, mapPath)
	}
	for _, tag := range []string{"v2.23.4-1", "v2.30.7-1"} {
		out.Reset()
		if code := run([]string{"extract", "--repo", repo, "--tag", tag}, &out, &errOut); code != 0 {
			t.Fatalf("extract %s: %s", tag, errOut.String())
		}
		fix, _ := os.ReadFile(filepath.Join("testdata", tag+".tsv"))
		if !bytes.Equal(out.Bytes(), fix) {
			t.Errorf("testdata/%s.tsv is not what extract gives", tag)
		}
	}
}
