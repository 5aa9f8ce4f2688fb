package commops

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ncclprof/ncclprof/internal/merge"
	"github.com/ncclprof/ncclprof/internal/synth"
)

// A plugin trace gives each operation its arrival (Coll start), completion, arguments, channels
// and step; every operation once.
func TestPluginTrace(t *testing.T) {
	o := synth.DefaultJob(4, 30)
	o.Detail = true
	paths, err := synth.Job(t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Read(paths, Options{Legs: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Ops) != 120 || len(s.Procs) != 4 || len(s.Comms) != 1 || s.Comms[0].NRanks != 4 || s.Comms[0].Name != "world" {
		t.Fatalf("%d ops, %d procs, comms %+v", len(s.Ops), len(s.Procs), s.Comms)
	}
	for i, p := range s.Procs {
		if p.Rank != i || p.Host != "synth" || p.Pid != int64(1000+i) || p.Ops != 30 {
			t.Errorf("proc %d: %+v", i, p)
		}
	}
	op := s.Ops[35] // rank 1, collective 5
	if op.Proc != 1 || op.Seq != 5 || op.Func != "AllReduce" || op.Bytes != 1<<20 || op.Source != Completion ||
		op.Time != op.Done-op.Arrive || op.Algo != "RING" || op.NChannels != 2 || len(op.Legs) != 2 || op.Legs[0].Peer != 2 {
		t.Errorf("op %+v", op)
	}
	if s.Steps[op.Step] != "step 0" {
		t.Errorf("step %q, want step 0", s.Steps[op.Step])
	}
	if op.Ref.Tid != 2_100_000_001 || op.Ref.Pid != 1001 {
		t.Errorf("ref %+v: want the completion slice", op.Ref)
	}
}

// A merged rank times its operations by their kernels; a timeline keeps the ranks apart.
func TestMergedAndTimeline(t *testing.T) {
	np := "../merge/testdata/tiny_nccl.trace.json"
	out := mergeTiny(t, np)
	s, err := Read([]string{out}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	kernels := 0
	for _, o := range s.Ops {
		if o.Source == Kernel {
			kernels++
			if o.Time != 100_000 && o.Time != 50_000 {
				t.Errorf("kernel time %d", o.Time)
			}
		}
	}
	if kernels != 2 {
		t.Errorf("%d operations timed by kernels, want the 2 linked ones", kernels)
	}
	plain, err := Read([]string{np}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(plain.Ops) != len(s.Ops) {
		t.Errorf("the plugin trace has %d operations, its merge %d", len(plain.Ops), len(s.Ops))
	}
}

// A trace cut in the middle is read up to its last complete event, and says so.
func TestCutTrace(t *testing.T) {
	paths, err := synth.Job(t.TempDir(), synth.DefaultJob(2, 40))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(paths[0])
	// Cut inside a number, just after its '.': the reader must see the cut, not a bad number.
	at := len(b) / 2
	at += bytes.Index(b[at:], []byte(`"ts":`))
	at += bytes.IndexByte(b[at:], '.') + 1
	os.WriteFile(paths[0], b[:at], 0o644)
	s, err := Read(paths, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Procs[0].Truncated || s.Procs[0].Ops >= 40 || s.Procs[0].Ops < 10 || s.Procs[1].Ops != 40 || len(s.Notes) == 0 {
		t.Errorf("procs %+v notes %v", s.Procs, s.Notes)
	}
}

// The directory ncclprof.profile leaves holds a rank's plugin trace and its merged output, which
// carries the same plugin events: read together, in either order, each operation counts once,
// timed by its kernel where the merge linked one, and a note says so.
func TestPluginTraceBesideItsMerge(t *testing.T) {
	dir := t.TempDir()
	// The plugin names its host; the tiny trace leaves it empty (then each file is a process
	// of its own, whose clock is its own).
	data, err := os.ReadFile("../merge/testdata/tiny_nccl.trace.json")
	if err != nil {
		t.Fatal(err)
	}
	np := filepath.Join(dir, "ncclprof-node-100-0.trace.json")
	if err := os.WriteFile(np, bytes.Replace(data, []byte(`"host":""`), []byte(`"host":"node"`), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	out := mergeTiny(t, np)
	alone, err := Read([]string{out}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, paths := range [][]string{{np, out}, {out, np}} {
		s, err := Read(paths, Options{})
		if err != nil {
			t.Fatal(err)
		}
		kernels := 0
		for _, o := range s.Ops {
			if o.Source == Kernel {
				kernels++
			}
		}
		if len(s.Ops) != len(alone.Ops) || kernels != 2 {
			t.Errorf("%v: %d operations (%d timed by kernels); the merged output alone has %d (2)", paths, len(s.Ops), kernels, len(alone.Ops))
		}
		if len(s.Notes) == 0 || !strings.Contains(s.Notes[len(s.Notes)-1], "each is counted once") {
			t.Errorf("%v: no note says that duplicates were dropped: %q", paths, s.Notes)
		}
	}
}

// mergeTiny merges the tiny Kineto trace with the plugin trace np, as ncclmerge merge does, and
// returns the merged rank's path.
func mergeTiny(t *testing.T, np string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "rank0.merged.json")
	if _, err := merge.Run([]string{"../merge/testdata/tiny_kineto.json"}, []string{np}, out, merge.Options{}); err != nil {
		t.Fatal(err)
	}
	return out
}

// A communicator's label escapes what would act on a terminal (issue 23, item 14).
func TestLabelEscapes(t *testing.T) {
	if got := (Comm{Name: "pp\nrank 3 is slow\x1b[0m"}).Label(); got != `pp\nrank 3 is slow\x1b[0m` {
		t.Errorf("Label() = %q", got)
	}
}
