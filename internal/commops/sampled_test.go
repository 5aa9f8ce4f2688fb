package commops

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ncclprof/ncclprof/internal/merge"
	"github.com/ncclprof/ncclprof/internal/ptrace"
	"github.com/ncclprof/ncclprof/internal/synth"
)

// A sampled trace (1 in 5, plus two operations the trigger added): each operation says why it is
// there and what it stands for — N for a sampled one, nothing for a triggered one — and the set
// sums it up with notes a reader of the analyses must see.
func TestSampledTraceWeights(t *testing.T) {
	o := synth.DefaultJob(4, 50)
	o.Sample, o.Triggered = 5, []int{7, 8}
	paths, err := synth.Job(t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Read(paths, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var w int64
	for i := range s.Ops {
		op := &s.Ops[i]
		switch {
		case op.Seq%5 == 0:
			if op.Traced != Sampled || op.Every != 5 || op.Weight() != 5 {
				t.Errorf("seq %d: traced %v every %d weight %d, want sampled 1/5 standing for 5", op.Seq, op.Traced, op.Every, op.Weight())
			}
		case op.Seq == 7 || op.Seq == 8:
			if op.Traced != Triggered || op.Weight() != 0 {
				t.Errorf("seq %d: traced %v weight %d, want triggered, weight 0", op.Seq, op.Traced, op.Weight())
			}
		default:
			t.Errorf("seq %d is in the set; the trace does not hold it", op.Seq)
		}
		w += op.Weight()
	}
	if w != 4*50 {
		t.Errorf("the weights add up to %d operations, the job ran %d", w, 4*50)
	}
	sm := s.Sampling
	if sm.Every != 5 || sm.Sampled != 40 || sm.Triggered != 8 || sm.Full != 0 || sm.Label() != "sampled 1/5" {
		t.Errorf("sampling %+v (%q)", sm, sm.Label())
	}
	if !containsNote(s.Notes, "estimates (scaled)") || !containsNote(s.Notes, "8 operations the trigger traced") {
		t.Errorf("notes %q", s.Notes)
	}
}

// The same process read from its full trace and its sampled one: each operation counts once,
// from the full trace (the sampled copies would stand for 4 each), and the notes say so.
func TestSampledAndFullOfOneProcess(t *testing.T) {
	dir := t.TempDir()
	o := synth.DefaultJob(1, 20)
	full, err := synth.Job(filepath.Join(dir, "full"), o)
	if err != nil {
		t.Fatal(err)
	}
	o.Sample = 4
	sampled, err := synth.Job(filepath.Join(dir, "sampled"), o)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Read(append(full, sampled...), Options{})
	if err != nil {
		t.Fatal(err)
	}
	w := int64(0)
	for i := range s.Ops {
		w += s.Ops[i].Weight()
	}
	if len(s.Ops) != 20 || w != 20 || s.Sampling.Full != 20 || s.Sampling.Sampled != 0 || !containsNote(s.Notes, "each is counted once") {
		t.Errorf("sampling %+v notes %q", s.Sampling, s.Notes)
	}
}

// ncclmerge's output of one rank whose process wrote several plugin files (a sampled trace's
// rotated files) keeps their headers as an array: it is read, with its sampling, not refused as
// "not an ncclprof trace".
func TestMergedRankOfRotatedFiles(t *testing.T) {
	dir := t.TempDir()
	o := synth.DefaultJob(1, 40)
	o.Sample = 2
	p, err := synth.Job(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	// Split the rank's file in two, as rotation does: the first half of its operations in one
	// file, the rest in the next, each a complete trace with the same header.
	parts := splitTrace(t, p[0], dir)
	whole, err := ptrace.Read(p[0])
	if err != nil {
		t.Fatal(err)
	}
	kin, _ := synth.KinetoFromPlugin(whole, synth.KinetoOptions{Rank: 0, WorldSize: 1})
	k := filepath.Join(dir, "synth_1000.pt.trace.json")
	if err := os.WriteFile(k, kin, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "m.json")
	if _, err := merge.Run([]string{k}, parts, out, merge.Options{}); err != nil {
		t.Fatal(err)
	}
	s, err := Read([]string{out}, Options{})
	if err != nil {
		t.Fatalf("a merged rank of two plugin files: %v", err)
	}
	if s.Sampling.Every != 2 || s.Sampling.Sampled != 20 {
		t.Errorf("sampling %+v, want 20 operations sampled 1/2", s.Sampling)
	}
	// A timeline keeps each rank's plugin header: the sampling is read from there.
	tl := filepath.Join(dir, "timeline.json")
	if _, err := merge.Run([]string{k}, parts, tl, merge.Options{Timeline: true}); err != nil {
		t.Fatal(err)
	}
	if s, err = Read([]string{tl}, Options{}); err != nil {
		t.Fatal(err)
	}
	if s.Sampling.Every != 2 || s.Sampling.Sampled != 20 || s.Ops[0].Weight() != 2 {
		t.Errorf("timeline: sampling %+v, want 20 operations sampled 1/2", s.Sampling)
	}
}

// splitTrace writes a plugin trace's events into two files with its header and closing.
func splitTrace(t *testing.T, path, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	head := s[:strings.Index(s, `"traceEvents":[`)+len(`"traceEvents":[`)]
	body := s[len(head):strings.LastIndex(s, "\n]")]
	tail := s[strings.LastIndex(s, "\n]"):]
	lines := strings.Split(strings.TrimPrefix(body, "\n"), ",\n")
	// Cut at an operation's Coll: metadata (process, communicator) goes to both halves.
	cut := len(lines) / 2
	for !strings.Contains(lines[cut], `"nccl_coll"`) {
		cut++
	}
	var meta []string
	for _, l := range lines[:cut] {
		if strings.Contains(l, `"ph":"M"`) {
			meta = append(meta, l)
		}
	}
	var out []string
	for i, evs := range [][]string{lines[:cut], append(meta, lines[cut:]...)} {
		p := filepath.Join(dir, strings.Replace(filepath.Base(path), "-0.trace", "-sampled-"+string(rune('0'+i))+".trace", 1))
		if err := os.WriteFile(p, []byte(head+"\n"+strings.Join(evs, ",\n")+tail), 0o644); err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

func containsNote(notes []string, s string) bool {
	for _, n := range notes {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}

// A rank's busy time from its sampled trace: the union of the operations read, scaled by the N
// each stands for, is the full trace's when the operations do not overlap and take the same time
// (as here: one AllReduce every 2 ms, no jitter); what the trigger added is left out.
func TestSampledBusyIsScaled(t *testing.T) {
	o := synth.DefaultJob(4, 200)
	o.JitterNs, o.SlowRank = 1, -1
	dir := t.TempDir()
	fullPaths, err := synth.Job(filepath.Join(dir, "full"), o)
	if err != nil {
		t.Fatal(err)
	}
	o.Sample, o.Triggered = 4, []int{9, 10}
	sampledPaths, err := synth.Job(filepath.Join(dir, "sampled"), o)
	if err != nil {
		t.Fatal(err)
	}
	full, _ := Read(fullPaths, Options{})
	sampled, _ := Read(sampledPaths, Options{})
	fb, sb := full.BusyByProc(), sampled.BusyByProc()
	for i := range fb {
		if sb[i].Ops != fb[i].Ops || sb[i].SumNs != fb[i].SumNs || sb[i].BusyNs != fb[i].BusyNs {
			t.Errorf("rank %d: sampled busy %+v, full %+v", i, sb[i], fb[i])
		}
	}
}
