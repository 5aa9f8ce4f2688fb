// Package stats answers "which collectives cost the most, and do they reach the bandwidth the
// hardware allows": NCCL operations grouped by communicator, function, size bucket, algorithm and
// protocol, with their count, bytes, time percentiles, nccl-tests' algorithm and bus bandwidth, and
// their share of all communication time.
package stats

import (
	"fmt"
	"math"
	"math/bits"
	"sort"
	"strings"

	"github.com/ncclprof/ncclprof/internal/collective"
	"github.com/ncclprof/ncclprof/internal/commops"
	"github.com/ncclprof/ncclprof/internal/quantile"
)

// Row is one group of operations.
type Row struct {
	Comm     string `json:"comm"`
	CommHash string `json:"comm_hash"`
	NRanks   int    `json:"nranks"`
	Func     string `json:"func"`
	// Size is the bucket [SizeMin, 2·SizeMin) of nccl-tests' size, in bytes.
	Size    string `json:"size"`
	SizeMin uint64 `json:"size_min"`
	Algo    string `json:"algo"`
	Proto   string `json:"proto"`
	Count   int    `json:"count"`
	// Timed counts the operations with a time; times and bandwidths are over those.
	Timed  int    `json:"timed"`
	Bytes  uint64 `json:"bytes"`
	TimeNs int64  `json:"time_ns"`
	P50Ns  int64  `json:"p50_ns"`
	P90Ns  int64  `json:"p90_ns"`
	P99Ns  int64  `json:"p99_ns"`
	// AlgBW and BusBW are the medians over timed operations of size/time and size/time × nccl-tests'
	// bus factor, GB/s (10^9 B/s); BusBW is NaN (null in JSON) when the communicator's size is not
	// known (NCCL 2.23–2.26 do not tell the plugin).
	AlgBW  float64 `json:"algbw_GBps"`
	BusBW  float64 `json:"busbw_GBps"`
	Share  float64 `json:"time_share"`
	Source string  `json:"time_source"`
	// Scaled: the row comes (in part) from sampled traces, so Count, Timed, Bytes and TimeNs are
	// estimates: each operation read counts for the N it was sampled from (SampledEvery; -1 when
	// N differs between inputs). OpsRead is how many were read.
	Scaled       bool `json:"scaled,omitempty"`
	SampledEvery int  `json:"sampled_every,omitempty"`
	OpsRead      int  `json:"ops_read,omitempty"`

	times, alg, bus []float64
}

// Table is the answer for a set of traces.
type Table struct {
	Rows []*Row `json:"rows"`
	Ops  int    `json:"operations"`
	// TotalNs is the sum of every operation's time, which counts operations in flight together
	// once each (and so can exceed the wall time); Ranks has each rank's busy time.
	TotalNs    int64      `json:"total_time_ns"`
	TotalBytes uint64     `json:"total_bytes"`
	Ranks      []RankBusy `json:"ranks"`
	Notes      []string   `json:"notes,omitempty"`
	// Sampling: set when inputs were sampled traces; the figures above are then estimates.
	Sampling *commops.Sampling `json:"sampling,omitempty"`
}

// RankBusy is one rank's (process's) communication: how long NCCL was busy, operations in
// flight together counted once, beside the sum of its operations' times.
type RankBusy struct {
	Rank   int    `json:"rank"`
	Host   string `json:"host"`
	Pid    int64  `json:"pid"`
	Timed  int    `json:"timed_operations"`
	BusyNs int64  `json:"busy_ns"`
	SumNs  int64  `json:"sum_ns"`
	SpanNs int64  `json:"span_ns"`
}

type key struct {
	comm            int32
	fn, algo, proto string
	bucket          uint64
}

// Compute groups the operations of s.
//
// From sampled traces each operation counts for the N operations it was sampled from (counts,
// bytes and times are then estimates, and the rows say so); the operations the trigger added
// around slow ones are left out, as they are not a uniform sample. Percentiles and bandwidths
// are over the operations read.
func Compute(s *commops.Set) *Table {
	t := &Table{Notes: s.Notes}
	if s.Sampling.On() {
		sm := s.Sampling
		t.Sampling = &sm
	}
	rows := map[key]*Row{}
	for i := range s.Ops {
		o := &s.Ops[i]
		w := o.Weight()
		if w == 0 {
			continue
		}
		t.Ops += int(w)
		k := key{o.Comm, o.Func, o.Algo, o.Proto, Bucket(o.Bytes)}
		r := rows[k]
		if r == nil {
			c := s.Comms[o.Comm]
			r = &Row{Comm: c.Label(), CommHash: fmt.Sprintf("0x%016x", c.Hash), NRanks: c.NRanks, Func: o.Func,
				Size: BucketLabel(k.bucket), SizeMin: k.bucket, Algo: o.Algo, Proto: o.Proto}
			rows[k] = r
			t.Rows = append(t.Rows, r)
		}
		r.add(o, s.Comms[o.Comm].NRanks, w)
		t.TotalBytes += o.Bytes * uint64(w)
		if o.Source != commops.NoTime && o.Time > 0 {
			t.TotalNs += o.Time * w
		}
	}
	for _, r := range t.Rows {
		r.finish(t.TotalNs)
	}
	t.Sort("time")
	t.Ranks = ranksBusy(s)
	return t
}

// ranksBusy measures each process, in rank order.
func ranksBusy(s *commops.Set) []RankBusy {
	out := make([]RankBusy, len(s.Procs))
	for i, b := range s.BusyByProc() {
		p := s.Procs[i]
		out[i] = RankBusy{Rank: p.Rank, Host: p.Host, Pid: p.Pid, Timed: b.Ops, BusyNs: b.BusyNs, SumNs: b.SumNs, SpanNs: b.SpanNs}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Rank < out[j].Rank })
	return out
}

// Busiest is the rank that was busy longest, and the median busy time over ranks.
func (t *Table) Busiest() (top RankBusy, medianNs int64) {
	if len(t.Ranks) == 0 {
		return RankBusy{}, 0
	}
	v := make([]float64, len(t.Ranks))
	for i, r := range t.Ranks {
		v[i] = float64(r.BusyNs)
		if r.BusyNs > top.BusyNs {
			top = r
		}
	}
	return top, int64(quantile.Median(v))
}

// add counts o, which stands for w operations (1 from a full trace).
func (r *Row) add(o *commops.Op, nranks int, w int64) {
	r.Count += int(w)
	r.Bytes += o.Bytes * uint64(w)
	r.OpsRead++
	if o.Traced != commops.Full {
		r.Scaled = true
		switch e := int(o.Every); {
		case r.SampledEvery == 0:
			r.SampledEvery = e
		case r.SampledEvery != e:
			r.SampledEvery = -1
		}
	}
	if o.Source == commops.NoTime || o.Time <= 0 {
		return
	}
	r.Timed += int(w)
	r.TimeNs += o.Time * w
	r.times = append(r.times, float64(o.Time))
	alg, bus := Bandwidth(o.Func, o.Bytes, o.Time, nranks)
	r.alg, r.bus = append(r.alg, alg), append(r.bus, bus)
	switch src := o.Source.String(); r.Source {
	case "", src:
		r.Source = src
	default:
		r.Source = "mixed"
	}
}

func (r *Row) finish(total int64) {
	ts := quantile.Sorted(r.times)
	r.P50Ns, r.P90Ns, r.P99Ns = int64(quantile.Of(ts, 0.5)), int64(quantile.Of(ts, 0.9)), int64(quantile.Of(ts, 0.99))
	r.AlgBW, r.BusBW = quantile.Median(r.alg), medianOrNaN(r.bus)
	if total > 0 {
		r.Share = float64(r.TimeNs) / float64(total)
	}
	if r.Source == "" {
		r.Source = commops.NoTime.String()
	}
	if !r.Scaled {
		r.OpsRead = 0 // it is Count
	}
	r.times, r.alg, r.bus = nil, nil, nil
}

// medianOrNaN is the median of values that are NaN where unknown: NaN if any is.
func medianOrNaN(v []float64) float64 {
	for _, x := range v {
		if math.IsNaN(x) {
			return math.NaN()
		}
	}
	return quantile.Median(v)
}

// Bandwidth returns nccl-tests' algbw = size/time and busbw = algbw × the function's bus factor
// (GB/s). busbw is NaN where the factor depends on a communicator size that is not known.
func Bandwidth(fn string, size uint64, ns int64, nranks int) (alg, bus float64) {
	alg, bus = collective.Bandwidth(fn, size, ns, nranks)
	if nranks < 1 && collective.BusFactor(fn, 4) != 1 { // the factor depends on the size
		bus = math.NaN()
	}
	return alg, bus
}

// Bucket is the power of two at or below n (0 for 0): operations of sizes within a factor of two
// share a row, as nccl-tests' size sweeps step by powers of two.
func Bucket(n uint64) uint64 {
	if n == 0 {
		return 0
	}
	return 1 << (63 - bits.LeadingZeros64(n))
}

// BucketLabel names the bucket starting at lo: "4-8MiB", "512KiB-1MiB".
func BucketLabel(lo uint64) string {
	if lo == 0 {
		return "0"
	}
	a, b := Size(lo), Size(2*lo)
	if ua, ub := unit(a), unit(b); ua == ub {
		a = strings.TrimSuffix(a, ua)
	}
	return a + "-" + b
}

func unit(s string) string { return strings.TrimLeft(s, "0123456789.") }

// Size prints a byte count with a binary unit.
func Size(n uint64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	v, u := float64(n), 0
	for v >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f%s", v, units[u])
	}
	return fmt.Sprintf("%.3g%s", v, units[u])
}

// sortKeys: how each --sort key orders rows (numbers largest first, names in order).
var sortKeys = map[string]func(a, b *Row) bool{
	"time":  func(a, b *Row) bool { return a.TimeNs > b.TimeNs },
	"share": func(a, b *Row) bool { return a.Share > b.Share },
	"count": func(a, b *Row) bool { return a.Count > b.Count },
	"bytes": func(a, b *Row) bool { return a.Bytes > b.Bytes },
	"p50":   func(a, b *Row) bool { return a.P50Ns > b.P50Ns },
	"p90":   func(a, b *Row) bool { return a.P90Ns > b.P90Ns },
	"p99":   func(a, b *Row) bool { return a.P99Ns > b.P99Ns },
	"algbw": func(a, b *Row) bool { return nanLow(a.AlgBW) > nanLow(b.AlgBW) },
	"busbw": func(a, b *Row) bool { return nanLow(a.BusBW) > nanLow(b.BusBW) },
	"size":  func(a, b *Row) bool { return a.SizeMin < b.SizeMin },
	"comm":  func(a, b *Row) bool { return a.Comm < b.Comm },
	"func":  func(a, b *Row) bool { return a.Func < b.Func },
}

func nanLow(v float64) float64 {
	if math.IsNaN(v) {
		return math.Inf(-1)
	}
	return v
}

// SortKeys lists what Sort accepts.
func SortKeys() []string {
	var k []string
	for s := range sortKeys {
		k = append(k, s)
	}
	sort.Strings(k)
	return k
}

// Sort orders the rows by a key of SortKeys, ties by communicator, function, size, algorithm
// and protocol so that the output is the same every run.
func (t *Table) Sort(by string) error {
	less, ok := sortKeys[by]
	if !ok {
		return fmt.Errorf("--sort %q: want one of %s", by, strings.Join(SortKeys(), ", "))
	}
	sort.SliceStable(t.Rows, func(i, j int) bool {
		a, b := t.Rows[i], t.Rows[j]
		if less(a, b) != less(b, a) {
			return less(a, b)
		}
		return tie(a) < tie(b)
	})
	return nil
}

func tie(r *Row) string {
	return fmt.Sprintf("%s\x00%s\x00%020d\x00%s\x00%s", r.Comm, r.Func, r.SizeMin, r.Algo, r.Proto)
}
