package stats

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/ncclprof/ncclprof/internal/commops"
	"github.com/ncclprof/ncclprof/internal/commops/commopstest"
	"github.com/ncclprof/ncclprof/internal/synth"
)

// A job without jitter: every rank's completion time is the planted duration, so the bus
// bandwidth must come out as planted (10 GB/s) up to the trace's ns rounding.
func TestPlantedBandwidth(t *testing.T) {
	o := synth.DefaultJob(8, 100)
	o.JitterNs, o.SlowRank = 1, -1
	s, _ := commopstest.Job(t, o, commops.Options{})
	tb := Compute(s)
	if len(tb.Rows) != 1 {
		t.Fatalf("%d rows", len(tb.Rows))
	}
	r := tb.Rows[0]
	dur := int64(183500) // ns: 1 MiB × 2·7/8 / 10 GB/s
	if r.Count != 800 || r.Timed != 800 || r.Bytes != 800<<20 || r.Size != "1-2MiB" || r.NRanks != 8 || r.Source != "completion" {
		t.Errorf("row %+v", r)
	}
	for _, p := range []int64{r.P50Ns, r.P90Ns, r.P99Ns} {
		if p < dur || p > dur+2 { // jitter of at most 1 ns
			t.Errorf("percentile %d ns, want the planted %d", p, dur)
		}
	}
	if math.Abs(r.BusBW-10) > 0.01 || math.Abs(r.AlgBW-10*8/14.0) > 0.01 || r.Share != 1 {
		t.Errorf("busbw %.4f algbw %.4f share %g, want 10, %.4f, 1", r.BusBW, r.AlgBW, r.Share, 10*8/14.0)
	}
	var buf bytes.Buffer
	if err := tb.Write(&buf, "csv"); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&buf).ReadAll()
	if err != nil || len(recs) != 2 || recs[1][13] != "10.000" {
		t.Errorf("csv %v %v", recs, err)
	}
	buf.Reset()
	tb.Write(&buf, "json")
	var back struct {
		Rows []map[string]any `json:"rows"`
	}
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil || math.Abs(back.Rows[0]["busbw_GBps"].(float64)-10) > 0.01 {
		t.Errorf("json %s %v", buf.String(), err)
	}
	if err := tb.Sort("nonsense"); err == nil || !strings.Contains(err.Error(), "busbw") {
		t.Errorf("an unknown --sort must list the keys: %v", err)
	}
}

func TestBandwidthDefinitions(t *testing.T) {
	for _, c := range []struct {
		fn       string
		n        int
		alg, bus float64
	}{{"AllReduce", 8, 1, 1.75}, {"AllGather", 4, 1, 0.75}, {"ReduceScatter", 2, 1, 0.5}, {"Broadcast", 8, 1, 1}, {"SendRecv", 2, 1, 1}} {
		alg, bus := Bandwidth(c.fn, 1000, 1000, c.n)
		if alg != c.alg || bus != c.bus {
			t.Errorf("%s on %d: %g %g, want %g %g", c.fn, c.n, alg, bus, c.alg, c.bus)
		}
	}
	if _, bus := Bandwidth("AllReduce", 1000, 1000, 0); !math.IsNaN(bus) {
		t.Errorf("AllReduce of unknown size: busbw %g, want NaN", bus)
	}
	if _, bus := Bandwidth("Broadcast", 1000, 1000, 0); bus != 1 {
		t.Errorf("Broadcast's factor is 1 whatever the size: %g", bus)
	}
}

func TestBuckets(t *testing.T) {
	for _, c := range []struct {
		n    uint64
		want string
	}{{0, "0"}, {1, "1-2B"}, {1000, "512B-1KiB"}, {1 << 20, "1-2MiB"}, {3 << 19, "1-2MiB"}, {5 << 30, "4-8GiB"}} {
		if got := BucketLabel(Bucket(c.n)); got != c.want {
			t.Errorf("%d bytes: %q, want %q", c.n, got, c.want)
		}
	}
}

// The same job traced in full and sampled 1 in 4 (plus operations its trigger added): the sampled
// table's counts, bytes and times are the full one's scaled up from a quarter of the operations
// — exactly here, where every operation takes the planted time — and marked as estimates, in
// every format; the triggered operations are left out.
func TestSampledCountsAreScaledAndMarked(t *testing.T) {
	o := synth.DefaultJob(4, 200)
	o.JitterNs, o.SlowRank = 1, -1
	full, _ := commopstest.Job(t, o, commops.Options{})
	o.Sample, o.Triggered = 4, []int{101, 102, 103}
	sampled, _ := commopstest.Job(t, o, commops.Options{})
	ft, st := Compute(full), Compute(sampled)
	fr, sr := ft.Rows[0], st.Rows[0]
	if sr.Count != fr.Count || sr.Bytes != fr.Bytes || sr.Timed != fr.Timed || st.Ops != ft.Ops {
		t.Errorf("sampled row count %d bytes %d timed %d (ops %d), full %d %d %d (%d)", sr.Count, sr.Bytes, sr.Timed, st.Ops, fr.Count, fr.Bytes, fr.Timed, ft.Ops)
	}
	if d := math.Abs(float64(sr.TimeNs-fr.TimeNs)) / float64(fr.TimeNs); d > 0.001 {
		t.Errorf("sampled time %d ns, full %d ns", sr.TimeNs, fr.TimeNs)
	}
	if !sr.Scaled || sr.SampledEvery != 4 || sr.OpsRead != 200 || fr.Scaled || fr.OpsRead != 0 {
		t.Errorf("sampled row %+v / full row %+v: want the sampled one marked 1/4 from 200 read", sr, fr)
	}
	if st.Sampling == nil || st.Sampling.Triggered != 12 || ft.Sampling != nil {
		t.Errorf("table sampling %+v, full %+v", st.Sampling, ft.Sampling)
	}
	var buf bytes.Buffer
	st.Write(&buf, "table")
	if s := buf.String(); !strings.Contains(s, "~800") || !strings.Contains(s, "sampled 1/4: about 800 operations") {
		t.Errorf("table output does not mark the estimate:\n%s", s)
	}
	buf.Reset()
	st.Write(&buf, "csv")
	recs, _ := csv.NewReader(&buf).ReadAll()
	if last := len(recs[0]) - 1; recs[0][last] != "sampled" || recs[1][last] != "1/4" || recs[1][6] != "800" {
		t.Errorf("csv %v: want count 800 and a sampled column of 1/4", recs)
	}
	buf.Reset()
	st.Write(&buf, "json")
	var back struct {
		Rows     []map[string]any `json:"rows"`
		Sampling map[string]any   `json:"sampling"`
	}
	json.Unmarshal(buf.Bytes(), &back)
	if back.Rows[0]["scaled"] != true || back.Rows[0]["sampled_every"] != 4.0 || back.Sampling["every"] != 4.0 {
		t.Errorf("json %s", buf.String())
	}
}
