package skew

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
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

// plantDone delays rank's completion by ns on every 7th collective (seq 3, 10, …: 29 of 200),
// which the synthesized job otherwise ends at the same instant on every rank.
func plantDone(s *commops.Set, rank int32, ns int64) (planted map[int64]bool) {
	planted = map[int64]bool{}
	for i := range s.Ops {
		if o := &s.Ops[i]; o.Rank == rank && o.Seq%7 == 3 {
			o.Done += ns
			planted[o.Seq] = true
		}
	}
	return planted
}

func ptrNs(v *int64) string {
	if v == nil {
		return "unknown"
	}
	return fmt.Sprintf("%d ns", *v)
}

// checkDone asserts that every rank's completion offset on every collective is the planted one
// (within 1 µs: the trace's ts are µs with 3 decimals), and the summaries that follow from it.
func checkDone(t *testing.T, r *Result, rank int, delay int64, planted map[int64]bool) {
	t.Helper()
	const tol = 1_000
	near := func(got, want int64) bool { return got >= want-tol && got <= want+tol }
	if len(planted) != 29 || len(r.Each) != 16*200 {
		t.Fatalf("%d collectives planted, %d rows: want 29 and 16 × 200", len(planted), len(r.Each))
	}
	for _, e := range r.Each {
		want := int64(0)
		if e.Rank == rank && planted[e.Seq] {
			want = delay
		}
		if e.DoneNs == nil || !near(*e.DoneNs, want) {
			t.Fatalf("seq %d rank %d: completion %s after the median, want %d ± %d ns", e.Seq, e.Rank, ptrNs(e.DoneNs), want, tol)
		}
		if e.DoneLast != (want != 0) {
			t.Fatalf("seq %d rank %d: completed last %v, want %v", e.Seq, e.Rank, e.DoneLast, want != 0)
		}
	}
	for _, k := range r.Ranks {
		if k.Completed != 200 {
			t.Errorf("rank %d: %d collectives with a completion, want 200", k.Rank, k.Completed)
		}
		wantLast, wantMax := 0, int64(0)
		if k.Rank == rank {
			wantLast, wantMax = 29, delay
		}
		if k.DoneLast != wantLast || !near(k.DoneMaxNs, wantMax) || !near(k.DoneMedianNs, 0) {
			t.Errorf("rank %d: completed last %d times, by %d ns at most, %d ns median; want %d, %d ns, 0",
				k.Rank, k.DoneLast, k.DoneMaxNs, k.DoneMedianNs, wantLast, wantMax)
		}
	}
	for _, o := range r.Top {
		wantSpread, wantLast := int64(0), -1
		if planted[o.Seq] {
			wantSpread, wantLast = delay, rank
		}
		if !near(o.DoneSpreadNs, wantSpread) || o.DoneLast != wantLast || wantLast >= 0 && !near(o.DoneLateNs, delay) || len(o.PerRank) != 16 {
			t.Errorf("seq %d: end spread %d ns, last to end %d by %d ns, %d ranks; want %d ns, %d by %d ns, 16",
				o.Seq, o.DoneSpreadNs, o.DoneLast, o.DoneLateNs, len(o.PerRank), wantSpread, wantLast, wantSpread)
		}
		for _, p := range o.PerRank {
			if want := map[bool]int64{true: delay}[p.Rank == rank && planted[o.Seq]]; p.DoneNs == nil || !near(*p.DoneNs, want) {
				t.Errorf("seq %d rank %d: completion %s, want %d ns", o.Seq, p.Rank, ptrNs(p.DoneNs), want)
			}
		}
	}
	if c := r.Comms[0]; !near(c.DoneSpreadMedianNs, 0) || !near(c.DoneSpreadP90Ns, delay) {
		t.Errorf("end spread median %d, p90 %d: want 0 and %d (29 of 200 collectives spread)", c.DoneSpreadMedianNs, c.DoneSpreadP90Ns, delay)
	}
}

// Rank 9 completes 250 µs after the others on 29 collectives; rank 5 arrives 1 ms late on 20
// (and, the job's collectives ending when the last rank has arrived, completes with the others).
// Completion is measured on every rank and collective exactly, and leaves the verdict alone: rank
// 5 is the slow one, rank 9 is not.
func TestCompletionOfAPlantedRank(t *testing.T) {
	_, paths := job(t, 5)
	s, err := commops.Read(paths, commops.Options{})
	if err != nil {
		t.Fatal(err)
	}
	planted := plantDone(s, 9, 250_000)
	opt := Defaults
	opt.Each, opt.Top = true, 200
	r := Analyze(s, opt)
	checkSlow(t, r, 5)
	checkDone(t, r, 9, 250_000, planted)
	// Of the collectives rank 5 was late on, seq 59, 129 and 199 are also rank 9's planted ones.
	var both []int64
	for _, o := range r.Top[:20] {
		if o.DoneLast == 9 {
			both = append(both, o.Seq)
		}
	}
	slices.Sort(both)
	if !slices.Equal(both, []int64{59, 129, 199}) {
		t.Errorf("late collectives ending last on rank 9: %v, want 59, 129, 199", both)
	}
}

// The same on two hosts whose clocks differ by 5 ms, with the delayed rank alone on the other
// host: completions are compared after alignment, which the delay (on 29 of 200 collectives)
// does not move.
func TestCompletionAfterAlignment(t *testing.T) {
	_, paths := job(t, 5)
	b, _ := os.ReadFile(paths[9])
	b = bytes.Replace(b, []byte(`"host":"synth"`), []byte(`"host":"other"`), 1)
	b = bytes.Replace(b, []byte(`"baseTimeNanoseconds":1760000000000000000`), []byte(`"baseTimeNanoseconds":1760000000005000000`), 1)
	os.WriteFile(paths[9], b, 0o644)
	s, err := commops.Read(paths, commops.Options{})
	if err != nil {
		t.Fatal(err)
	}
	planted := plantDone(s, 9, 250_000)
	opt := Defaults
	opt.Each = true
	r := Analyze(s, opt)
	if a := r.Alignment; a == nil || a.ShiftNs["other"] != -5_000_000 {
		t.Fatalf("alignment %+v, want host other shifted by -5 ms", a)
	}
	checkSlow(t, r, 5)
	checkDone(t, r, 9, 250_000, planted)
}

// The table, CSV and JSON outputs carry the completion summary, and --each lists every rank of
// every collective.
func TestCompletionOutputs(t *testing.T) {
	_, paths := job(t, 5)
	s, err := commops.Read(paths, commops.Options{})
	if err != nil {
		t.Fatal(err)
	}
	plantDone(s, 9, 250_000)
	r := Analyze(s, Defaults)
	var buf bytes.Buffer
	if err := r.Write(&buf, "table"); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	if !regexp.MustCompile(`(?m)^ranks that complete last.*\n.*\nworld +9 +9 +synth +29 +200 +0 ns +250\.0 µs$`).MatchString(text) {
		t.Errorf("the table does not list rank 9 completing last 29 of 200 times by 250 µs at most:\n%s", text)
	}
	buf.Reset()
	if err := r.Write(&buf, "csv"); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil || len(rows) != 17 {
		t.Fatalf("csv: %d rows, %v", len(rows), err)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	for _, row := range rows[1:] {
		want := []string{"0", "0"}
		if row[col["rank"]] == "9" {
			want = []string{"29", "250000"}
		}
		if row[col["completed_last"]] != want[0] || row[col["completion_max_ns"]] != want[1] || row[col["completed_ops"]] != "200" {
			t.Errorf("csv rank %s: completed_last %s, completion_max_ns %s; want %v", row[col["rank"]], row[col["completed_last"]], row[col["completion_max_ns"]], want)
		}
	}
	buf.Reset()
	if err := r.Write(&buf, "json"); err != nil {
		t.Fatal(err)
	}
	var back Result
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(back.Ranks, func(k *RankRow) bool { return k.Rank == 9 })
	if i < 0 || back.Ranks[i].DoneLast != 29 || back.Ranks[i].DoneMaxNs != 250_000 || len(back.Top[0].PerRank) != 16 {
		t.Errorf("json: rank 9 %+v, per-rank offsets of the most skewed collective %v", back.Ranks[i], back.Top[0].PerRank)
	}

	opt := Defaults
	opt.Each = true
	buf.Reset()
	if err := Analyze(s, opt).Write(&buf, "csv"); err != nil {
		t.Fatal(err)
	}
	rows, err = csv.NewReader(&buf).ReadAll()
	if err != nil || len(rows) != 1+16*200 {
		t.Fatalf("csv --each: %d rows, %v", len(rows), err)
	}
	want := []string{"world", "AllReduce", "10", "step 1", "9", "9"}
	for _, row := range rows[1:] {
		if slices.Equal(row[:6], want) {
			if row[7] != "false" || row[8] != "250000" || row[9] != "true" {
				t.Errorf("csv --each, seq 10 rank 9: %v, want completion 250000, last", row)
			}
			return
		}
	}
	t.Errorf("csv --each has no row %v", want)
}

// Sampled traces (1 in 3, chosen alike on every rank): the collectives compared are the sampled
// ones, every rank's, and the straggler is still found on those of its late ones that were
// sampled (seq 9, 39, …: i % 10 == 9 and i % 3 == 0). What the trigger added is left out: each
// rank's trigger fires on its own, so those do not line up. The output says it is sampled.
func TestSampledTracesLineUp(t *testing.T) {
	o := synth.DefaultJob(16, 200)
	o.SlowRank = 5
	o.Sample, o.Triggered = 3, []int{13, 14}
	paths, err := synth.Job(t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	r := analyze(t, paths, Defaults)
	if len(r.Slow) != 1 || r.Slow[0].Rank != 5 {
		t.Fatalf("slow ranks %+v, want rank 5", r.Slow)
	}
	// 67 sampled seqs (0, 3, …, 198); rank 5 late on seq ≡ 9 (mod 30): 9, 39, …, 189.
	if s := r.Slow[0]; s.Matched != 67 || s.Late != 7 {
		t.Errorf("rank 5 late on %d of %d matched, want 7 of 67 (the triggered 13 and 14 left out)", s.Late, s.Matched)
	}
	var buf bytes.Buffer
	r.WriteText(&buf)
	if r.Sampled != "sampled 1/3" || !strings.HasPrefix(buf.String(), "sampled 1/3: the collectives compared") {
		t.Errorf("Sampled %q; text:\n%s", r.Sampled, buf.String())
	}
}

// A rank whose GPU starts three collectives 500 µs late while its CPU calls NCCL on time (its
// KernelCh, not its Coll, is late): judged on the GPU-side arrival, exactly those three are late
// and only on that rank; judged on Coll starts (--arrival cpu), nothing is late.
func TestGPULateWhileCPUOnTime(t *testing.T) {
	o := synth.DefaultJob(8, 100)
	o.SlowRank, o.Detail = -1, true
	o.GPUSlowRank, o.GPUSlowNs, o.GPUSlowOps = 3, 500_000, []int{25, 50, 75}
	paths, err := synth.Job(t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	opt := Defaults
	opt.Each = true
	r := analyze(t, paths, opt)
	if r.Arrivals["gpu (kernelch)"] != 100 || len(r.Arrivals) != 1 {
		t.Errorf("arrivals compared %v, want 100 on the GPU (KernelCh)", r.Arrivals)
	}
	var late []string
	for _, e := range r.Each {
		if e.Arrival != "gpu" || e.CPUArriveNs == nil {
			t.Fatalf("%+v: want a GPU-side arrival with its CPU one beside it", e)
		}
		if !e.Late {
			continue
		}
		late = append(late, fmt.Sprintf("rank %d seq %d", e.Rank, e.Seq))
		// 500 µs after the median, give or take the 20 µs of jitter; the CPU on time.
		if e.ArriveNs < 480_000 || e.ArriveNs > 520_000 || *e.CPUArriveNs > 20_000 {
			t.Errorf("%s: GPU late by %d ns, CPU by %d ns; want 500 µs and on time", late[len(late)-1], e.ArriveNs, *e.CPUArriveNs)
		}
	}
	if want := "rank 3 seq 25, rank 3 seq 50, rank 3 seq 75"; strings.Join(late, ", ") != want {
		t.Errorf("late arrivals %v, want %s", late, want)
	}
	opt.Arrival = "cpu"
	r = analyze(t, paths, opt)
	for _, e := range r.Each {
		if e.Late || e.Arrival != "cpu" {
			t.Errorf("judged on Coll starts: %+v", e)
		}
	}
	// Without KernelCh (not in the event mask), the first send step's release from SendGPUWait
	// stands for the GPU's arrival: the same three are late.
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var kept []string
		for _, l := range strings.SplitAfter(string(b), "\n") {
			if !strings.Contains(l, `"nccl_gpu"`) {
				kept = append(kept, l)
			}
		}
		if err := os.WriteFile(p, []byte(strings.Join(kept, "")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	opt.Arrival = "auto"
	r = analyze(t, paths, opt)
	late = late[:0]
	for _, e := range r.Each {
		if e.Late {
			late = append(late, fmt.Sprintf("rank %d seq %d", e.Rank, e.Seq))
		}
	}
	if r.Arrivals["gpu (send_gpu_wait)"] != 100 || strings.Join(late, ", ") != "rank 3 seq 25, rank 3 seq 50, rank 3 seq 75" {
		t.Errorf("without KernelCh: arrivals %v, late %v", r.Arrivals, late)
	}
}

// A CUDA graph replayed: NCCL gives every replay of a captured collective the seq of the next
// eager one (from 2.26, unless KernelCh is on), so the job's collectives 100 to 149 come with seq
// 100 on every rank, back to back. Each is still matched with its own on the other ranks (the
// n-th repeat with the n-th), so the planted lateness on 5 of them is found: matched by seq
// alone, the 49 repeats after the first fell out of the analysis and with them those 5.
func TestGraphReplaysSharingASeq(t *testing.T) {
	r := replayed(t, func(o *commops.Op) {
		if o.Seq >= 100 && o.Seq < 150 {
			o.Seq = 100
		}
	})
	// The tables tell the repeats apart: the late 110th collective is seq 100's repeat 9.
	var text bytes.Buffer
	r.WriteText(&text)
	if !strings.Contains(text.String(), "100+9") {
		t.Errorf("no row names seq 100's repeat 9 (100+9):\n%s", text.String())
	}
}

// The same graph replayed where only half the ranks see its replays: NCCL starts a replay's
// events only on ranks whose part of the graph has proxy work (enqueue.cc, hasProxyOps), so
// ranks 8-15 have only the eager collective that shares the replays' seq (the job's 150th).
// The traces mark replays (graph_replay) and they are matched apart: the eager collective with
// the eager one, each replay among the ranks that saw it. Counted together, ranks 8-15's eager
// collective was matched with the others' first replay, 49 collectives earlier.
func TestGraphReplaysSeenByHalfTheRanks(t *testing.T) {
	r := replayed(t, func(o *commops.Op) {
		switch {
		case o.Seq >= 100 && o.Seq < 149 && o.Rank >= 8:
			o.Seq = -1 // not seen: no collective for the analysis
		case o.Seq >= 100 && o.Seq < 149:
			o.Seq, o.GraphReplay = 100, true
		case o.Seq == 149:
			o.Seq = 100 // the eager collective after the replays
		}
	})
	var text bytes.Buffer
	r.WriteText(&text)
	if !strings.Contains(text.String(), "100 replay 9") {
		t.Errorf("no row names seq 100's replay 9:\n%s", text.String())
	}
}

// replayed analyzes a job of 16 ranks × 200 collectives, rank 5 planted late on 20, its
// operations changed by replay first (a graph's replays planted), and checks the planted rank is
// found, late on 20 of 200.
func replayed(t *testing.T, replay func(o *commops.Op)) *Result {
	t.Helper()
	_, paths := job(t, 5)
	s, err := commops.Read(paths, commops.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range s.Ops {
		replay(&s.Ops[i])
	}
	s.NumberRepeats()
	r := Analyze(s, Defaults)
	if got, want := slowRanks(r), []string{"rank 5 late on 20 of 200"}; !slices.Equal(got, want) {
		t.Fatalf("slow ranks %v, want %v", got, want)
	}
	return r
}

// slowRanks says which ranks r found slow, on how many of the collectives matched.
func slowRanks(r *Result) []string {
	var out []string
	for _, k := range r.Slow {
		out = append(out, fmt.Sprintf("rank %d late on %d of %d", k.Rank, k.Late, k.Matched))
	}
	return out
}
