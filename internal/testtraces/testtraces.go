// Package testtraces finds the repository's test data for tests: the real Kineto traces in
// testdata/kineto (with their license and provenance) and the repository root. Every test that
// reads a real trace goes through here, so a plain clone with nothing beside it runs them all.
package testtraces

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
)

var (
	rootOnce sync.Once
	root     string
	rootErr  string
)

// Root is the repository root: the nearest directory above the test's working directory (its
// package directory, under go test) that holds go.mod.
func Root(t testing.TB) string {
	t.Helper()
	rootOnce.Do(func() {
		dir, err := os.Getwd()
		if err != nil {
			rootErr = err.Error()
			return
		}
		for {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				root = dir
				return
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				rootErr = "no go.mod above the test's directory"
				return
			}
			dir = parent
		}
	})
	if root == "" {
		t.Fatal(rootErr)
	}
	return root
}

// KinetoDir is testdata/kineto, where the real torch.profiler traces are.
func KinetoDir(t testing.TB) string {
	t.Helper()
	return filepath.Join(Root(t), "testdata", "kineto")
}

// Kineto is the absolute path of one real Kineto trace, e.g.
// Kineto(t, "nccl_parser_config_nccl_data.json.gz"); the test fails if it is missing.
func Kineto(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(KinetoDir(t), name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("real trace missing: %v (the repository carries it in testdata/kineto; see its README.md)", err)
	}
	return p
}

// AllKineto is every real Kineto trace (*.json.gz in testdata/kineto), for seed corpora.
func AllKineto(t testing.TB) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(KinetoDir(t), "*.json.gz"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no real traces in %s (%v)", KinetoDir(t), err)
	}
	return paths
}
