package skew

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ncclprof/ncclprof/internal/commops"
	"github.com/ncclprof/ncclprof/internal/synth"
)

// job writes a synthesized job: 16 ranks × 200 AllReduces with 20 µs of jitter, rank 5 late by
// 1 ms on every 10th collective (seq 9, 19, …: the last collective of steps 0, 1, …).
func job(t *testing.T, slow int) (string, []string) {
	t.Helper()
	o := synth.DefaultJob(16, 200)
	o.SlowRank = slow
	dir := t.TempDir()
	paths, err := synth.Job(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	return dir, paths
}

func analyze(t *testing.T, paths []string, opt Options) *Result {
	t.Helper()
	s, err := commops.Read(paths, commops.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return Analyze(s, opt)
}

func plantedSteps() []string {
	var s []string
	for k := 0; k < 20; k++ {
		s = append(s, fmt.Sprintf("step %d", k))
	}
	return s
}

// checkSlow asserts that exactly the planted rank is flagged, late on exactly the planted
// collectives, by the planted delay.
func checkSlow(t *testing.T, r *Result, rank int) {
	t.Helper()
	if len(r.Slow) != 1 || r.Slow[0].Rank != rank {
		var buf bytes.Buffer
		r.WriteText(&buf)
		t.Fatalf("slow ranks %+v, want only rank %d\n%s", r.Slow, rank, buf.String())
	}
	s := r.Slow[0]
	if s.Late != 20 || s.Matched != 200 {
		t.Errorf("rank %d late on %d of %d collectives, want 20 of 200", rank, s.Late, s.Matched)
	}
	// Late by 1 ms after the median arrival, give or take the 20 µs of jitter.
	if s.LateMedianNs < 980_000 || s.LateMedianNs > 1_020_000 {
		t.Errorf("late by %d ns, want 1 ms ± 20 µs", s.LateMedianNs)
	}
	var steps []string
	for _, st := range s.Steps {
		steps = append(steps, st.Step)
		if st.Late != 1 || st.MaxNs < 980_000 || st.MaxNs > 1_020_000 {
			t.Errorf("%+v: want late once by 1 ms", st)
		}
	}
	if !slices.Equal(steps, plantedSteps()) {
		t.Errorf("late in steps %v, want %v", steps, plantedSteps())
	}
	for _, k := range r.Ranks {
		if k.Rank != rank && k.Late > 0 {
			t.Errorf("healthy rank %d called late %d times", k.Rank, k.Late)
		}
	}
	if len(r.Top) == 0 || r.Top[0].Last != rank || r.Top[0].SkewNs < 1_000_000 {
		t.Errorf("most skewed collective %+v, want one of rank %d's late ones", r.Top, rank)
	}
}

func TestFindsThePlantedStraggler(t *testing.T) {
	_, paths := job(t, 5)
	checkSlow(t, analyze(t, paths, Defaults), 5)
}

func TestNoStragglerNoFlag(t *testing.T) {
	_, paths := job(t, -1)
	r := analyze(t, paths, Defaults)
	if len(r.Slow) != 0 {
		t.Fatalf("flagged %+v in a job without a straggler", r.Slow[0])
	}
}

// A rank on another host whose clock is 5 ms ahead: without alignment it looks late on every
// collective; aligned on collective ends, the offset is measured and the straggler found.
func TestClockOffsetIsAligned(t *testing.T) {
	_, paths := job(t, 5)
	b, _ := os.ReadFile(paths[3])
	b = bytes.Replace(b, []byte(`"host":"synth"`), []byte(`"host":"other"`), 1)
	b = bytes.Replace(b, []byte(`"baseTimeNanoseconds":1760000000000000000`), []byte(`"baseTimeNanoseconds":1760000000005000000`), 1)
	os.WriteFile(paths[3], b, 0o644)

	r := analyze(t, paths, Defaults)
	checkSlow(t, r, 5)
	a := r.Alignment
	if a == nil || a.Hosts != 2 || a.ShiftNs["other"] != -5_000_000 || a.ResidualMedianNs != 0 || a.BeforeMedianNs != 5_000_000 {
		t.Errorf("alignment %+v, want host other shifted by -5 ms, residual 0", a)
	}
	noAlign := Defaults
	noAlign.Align = false
	r = analyze(t, paths, noAlign)
	if !slices.ContainsFunc(r.Slow, func(k *RankRow) bool { return k.Rank == 3 }) {
		t.Errorf("without alignment the shifted rank 3 must look slow (the test would prove nothing): %+v", r.Slow)
	}
}

// A rank without a trace and a trace cut in the middle: the collectives are compared over the
// ranks present, both are reported, and the straggler is still found.
func TestMissingRankAndCutTrace(t *testing.T) {
	_, paths := job(t, 5)
	b, _ := os.ReadFile(paths[2])
	os.WriteFile(paths[2], b[:len(b)/2], 0o644)
	r := analyze(t, append(paths[:7:7], paths[8:]...), Defaults)
	if len(r.Slow) != 1 || r.Slow[0].Rank != 5 || r.Slow[0].Late != 20 {
		t.Fatalf("slow %+v", r.Slow)
	}
	notes := strings.Join(r.Notes, "\n")
	for _, want := range []string{"no trace of rank 7 (15 of 16 ranks present)", "rank 2 has", "ends early"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes do not say %q:\n%s", want, notes)
		}
	}
	if c := r.Comms[0]; c.Present != 15 || !slices.Equal(c.Missing, []int{7}) {
		t.Errorf("communicator %+v", c)
	}
}

func TestWriteTextNamesTheStraggler(t *testing.T) {
	dir, paths := job(t, 5)
	var buf bytes.Buffer
	analyze(t, paths, Defaults).WriteText(&buf)
	out := buf.String()
	for _, want := range []string{"SLOW: rank 5 of world", "late on 20 of 200", "late in steps: step 0 (", filepath.Base(dir) + "/ncclprof-synth-1005-0.trace.json"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
