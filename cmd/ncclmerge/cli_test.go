package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ncclprof/ncclprof/internal/testtraces"
)

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func TestHelpAnswers(t *testing.T) {
	out, err := run(t, "merge", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--kineto", "--nccl", "--timeline", "--align", "--pair", "launch", "order", "Example"} {
		if !strings.Contains(out, want) {
			t.Errorf("merge --help does not mention %q", want)
		}
	}
}

func TestMergeArgumentErrors(t *testing.T) {
	if _, err := run(t, "merge", "--nccl", "x.json"); err == nil || !strings.Contains(err.Error(), "--kineto and -o are required") {
		t.Errorf("missing flags: %v", err)
	}
	if _, err := run(t, "merge", "--kineto", "a.json", "b.json", "-o", "x.json"); err == nil || !strings.Contains(err.Error(), "quote globs") {
		t.Errorf("stray argument: %v", err)
	}
	if _, err := run(t, "merge", "--kineto", "/nonexistent/*.json", "-o", "x.json"); err == nil || !strings.Contains(err.Error(), "no file matches") {
		t.Errorf("no match: %v", err)
	}
	if _, err := run(t, "merge", "--kineto", "a", "-o", "x", "--align", "ends"); err == nil || !strings.Contains(err.Error(), "needs --timeline") {
		t.Errorf("align without timeline: %v", err)
	}
}

func TestCheckExitStatus(t *testing.T) {
	bad := testtraces.Kineto(t, "triton_example_triton_example.json.gz")
	if _, err := run(t, "check", bad); !errors.Is(err, errReported) {
		t.Errorf("a trace with a flow without end must fail check, got %v", err)
	}
	if _, err := run(t, "check", "../../internal/merge/testdata/tiny.merged.golden.json"); err != nil {
		t.Errorf("the golden output must pass check: %v", err)
	}
	garbage := filepath.Join(t.TempDir(), "g.json")
	os.WriteFile(garbage, []byte("\x00\x01garbage"), 0o644)
	if _, err := run(t, "check", garbage); !errors.Is(err, errReported) {
		t.Errorf("garbage must fail check, got %v", err)
	}
}

// merge end to end through the command line: a real trace and its synthesized plugin trace.
func TestMergeCommand(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "m.json.gz")
	sum := filepath.Join(dir, "s.json")
	_, err := run(t, "merge", "-q", "--kineto", "../../internal/merge/testdata/tiny_kineto.json",
		"--nccl", "../../internal/merge/testdata/tiny_nccl.trace.json", "-o", out, "--summary", sum)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(sum)
	if !strings.Contains(string(b), `"launch": 1`) || !strings.Contains(string(b), `"order": 1`) {
		t.Errorf("summary: %s", b)
	}
	if _, err := run(t, "check", out); err != nil {
		t.Errorf("check of the output: %v", err)
	}
}
