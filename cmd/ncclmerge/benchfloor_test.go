package main

import (
	"os"
	"path/filepath"
	"testing"
)

// The ratios are each run's own (its merge against the floors measured just before it), then
// their median: a run slowed as a whole by the machine keeps its ratio.
func TestMedianRunRatios(t *testing.T) {
	runs := []mergeRun{
		{read: 1, copy: 2, merge: 4, cpu: 5, rss: 100},   // ratios 0.25, 0.5
		{read: 3, copy: 6, merge: 6, cpu: 7, rss: 300},   // 0.5, 1
		{read: 0.5, copy: 1, merge: 5, cpu: 6, rss: 200}, // 0.1, 0.2
	}
	m := medianRun(runs)
	if m.readRatio != 0.25 || m.copyRatio != 0.5 {
		t.Errorf("ratios %.3f, %.3f; want the median of each run's: 0.25, 0.5", m.readRatio, m.copyRatio)
	}
	if m.read != 1 || m.copy != 2 || m.merge != 5 || m.cpu != 6 || m.rss != 300 {
		t.Errorf("medians read %v copy %v merge %v cpu %v, peak %v; want 1 2 5 6 and the largest peak 300", m.read, m.copy, m.merge, m.cpu, m.rss)
	}
}

// The plain copy writes every input, in order, into one file.
func TestPlainCopy(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	os.WriteFile(a, []byte("first,"), 0o644)
	os.WriteFile(b, []byte("second"), 0o644)
	out := filepath.Join(dir, "out")
	if _, err := plainCopy(out, []string{a, "", b}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(out); string(got) != "first,second" {
		t.Errorf("copied %q", got)
	}
	if _, err := plainRead([]string{a, "", b}); err != nil {
		t.Fatal(err)
	}
}
