package align

import (
	"math"
	"sort"
)

// GPU estimates how the GPU's %globaltimer (KernelCh pTimer, ns) maps to Unix ns, from what the
// plugin observes: NCCL's proxy thread calls KernelCh start after the GPU wrote the channel's
// start time, and KernelChStop after it wrote the stop time. So for every callback,
//
//	offset = pTimer − unix(GPU event) ≥ pTimer − unix(callback) =: gap,
//
// and the largest gaps (the callbacks that came soonest) bound the offset from below. The
// estimate is the upper envelope of the gaps over time — the largest gap of each time bucket —
// fitted with a robust line, so a drifting GPU timer is followed. It is low by the quickest
// callback latency seen (typically well under the proxy's polling period); Uncertainty is the
// envelope's scatter around the line. The GPU timer is never assumed equal to CLOCK_REALTIME.
type GPU struct {
	base     int64            // Unix ns that times are relative to
	buckets  map[int64]bucket // bucket index → its largest gaps
	n        int
	rejected int // readings that cannot be GPU times (Observe) or that disagree with the fit (Convert)
	fitted   bool
	t0       float64 // reference time of the fit (Unix ns)
	offset   float64 // at t0
	drift    float64 // ns of offset per ns
	scatter  float64
}

const (
	gpuBucketNs  = 50e6 // 50 ms
	gpuMaxBucket = 1200 // one minute of buckets
	gpuTopK      = 8    // gaps kept per bucket: an outlier among them cannot take the envelope
	// A reading at or past 2^62 ns is 146 years from its epoch, Unix or boot: no GPU clock
	// reads that (INT64_MAX and UINT64_MAX are what corrupt or poisoned memory looks like).
	gpuImpossible = uint64(1) << 62
	// How far a reading may sit from the fitted line and still be a reading of this clock: a
	// callback can come late (the proxy thread was busy: up to a minute is allowed), never
	// before the GPU event it reports (a second of fit error is allowed).
	gpuMaxLateNs  = 60e9
	gpuMaxAheadNs = 1e9
)

// GPUTimePossible says whether a pTimer can be a GPU clock reading at all (not absent, not
// beyond gpuImpossible). Whether it agrees with this GPU's clock is Convert's question.
func GPUTimePossible(ptimer uint64) bool { return ptimer != 0 && ptimer < gpuImpossible }

type gapAt struct{ t, gap float64 } // t: Unix ns − base; gap: ns

// bucket holds the largest gaps of one time bucket, largest first.
type bucket struct {
	top [gpuTopK]gapAt
	n   int
}

func (b *bucket) add(p gapAt) {
	if b.n < gpuTopK {
		b.n++
	} else if p.gap <= b.top[gpuTopK-1].gap {
		return
	}
	i := b.n - 1
	for ; i > 0 && b.top[i-1].gap < p.gap; i-- {
		b.top[i] = b.top[i-1]
	}
	b.top[i] = p
}

// NewGPU returns an empty estimator.
func NewGPU() *GPU { return &GPU{buckets: map[int64]bucket{}} }

// Observe records one callback: its CPU time converted to Unix ns and the GPU time it reports.
// A reading no GPU clock can give is rejected (counted) before it reaches the fit.
func (g *GPU) Observe(callbackUnix int64, ptimer uint64) {
	if ptimer == 0 || callbackUnix <= 0 {
		return
	}
	if !GPUTimePossible(ptimer) {
		g.rejected++
		return
	}
	if g.base == 0 {
		g.base = callbackUnix
	}
	gap := float64(int64(ptimer) - callbackUnix)
	t := float64(callbackUnix - g.base)
	k := int64(math.Floor(t / gpuBucketNs))
	b := g.buckets[k]
	b.add(gapAt{t, gap}) // its own time: a drifting offset moves within a bucket
	g.buckets[k] = b
	g.n++
	g.fitted = false
	if len(g.buckets) > gpuMaxBucket {
		var oldest int64 = math.MaxInt64
		for k := range g.buckets {
			oldest = min(oldest, k)
		}
		delete(g.buckets, oldest)
	}
}

func (g *GPU) fit() {
	if g.fitted {
		return
	}
	g.fitted = true
	pts := g.envelope()
	sort.Slice(pts, func(i, j int) bool { return pts[i].t < pts[j].t })
	g.drift = 0
	if len(pts) >= 3 { // Theil–Sen: the median slope over all pairs
		var slopes []float64
		for i := range pts {
			for j := i + 1; j < len(pts); j++ {
				slopes = append(slopes, (pts[j].gap-pts[i].gap)/(pts[j].t-pts[i].t))
			}
		}
		sort.Float64s(slopes)
		g.drift = slopes[len(slopes)/2]
	}
	if len(pts) == 0 {
		return
	}
	g.t0 = pts[len(pts)-1].t
	// The line through the envelope: the median of each point's implied offset at t0.
	at := make([]float64, len(pts))
	for i, p := range pts {
		at[i] = p.gap + (g.t0-p.t)*g.drift
	}
	sort.Float64s(at)
	g.offset = at[len(at)/2]
	g.scatter = 0
	for _, v := range at {
		g.scatter = max(g.scatter, math.Abs(v-g.offset))
	}
}

// envelope is each bucket's largest gap that agrees with the consensus, the median of every
// gap kept: readings far off it (a corrupted pTimer that is still below gpuImpossible) would
// otherwise be the largest gap of their bucket and drag the line to them.
func (g *GPU) envelope() []gapAt {
	var all []float64
	for _, b := range g.buckets {
		for _, p := range b.top[:b.n] {
			all = append(all, p.gap)
		}
	}
	if len(all) == 0 {
		return nil
	}
	sort.Float64s(all)
	consensus := all[len(all)/2]
	pts := make([]gapAt, 0, len(g.buckets))
	for _, b := range g.buckets {
		for _, p := range b.top[:b.n] {
			if p.gap <= consensus+gpuMaxAheadNs && p.gap >= consensus-gpuMaxLateNs {
				pts = append(pts, p)
				break
			}
		}
	}
	return pts
}

// Ready reports whether any KernelCh timing was seen.
func (g *GPU) Ready() bool { return len(g.buckets) > 0 }

// Convert maps a GPU timestamp to Unix ns, given the Unix time of the callback that reported
// it. It refuses (ok false) a reading that cannot be right: one no GPU clock gives (counted
// by Observe already) or one the fitted line places more than gpuMaxAheadNs after its
// callback or gpuMaxLateNs before it (counted here). The caller falls back to CPU times.
func (g *GPU) Convert(callbackUnix int64, ptimer uint64) (unix int64, ok bool) {
	if !GPUTimePossible(ptimer) || !g.Ready() {
		return 0, false
	}
	unix = g.UnixNs(ptimer)
	if d := float64(unix - callbackUnix); d > gpuMaxAheadNs || d < -gpuMaxLateNs {
		g.rejected++
		return 0, false
	}
	return unix, true
}

// UnixNs converts a GPU timestamp to Unix ns (the offset is evaluated at the event's own time).
func (g *GPU) UnixNs(ptimer uint64) int64 {
	g.fit()
	u := float64(int64(ptimer)-g.base) - g.offset // first guess, relative to base
	off := g.offset + (u-g.t0)*g.drift
	return int64(ptimer) - int64(math.Round(off))
}

// GPUInfo describes the estimate for the trace.
type GPUInfo struct {
	Method        string  `json:"method"`
	OffsetNs      float64 `json:"offset_ns"`
	DriftPPM      float64 `json:"drift_ppm"`
	Samples       int     `json:"samples"`
	UncertaintyNs float64 `json:"uncertainty_ns"`
	// Rejected counts GPU timestamps refused as impossible: never fitted, never placed.
	Rejected int `json:"rejected"`
}

// Info is the current estimate ({"method": "none"} without KernelCh timing).
func (g *GPU) Info() GPUInfo {
	if !g.Ready() {
		return GPUInfo{Method: "none", Rejected: g.rejected}
	}
	g.fit()
	return GPUInfo{Method: "kernelch_min_gap", OffsetNs: g.offset, DriftPPM: g.drift * 1e6,
		Samples: g.n, UncertaintyNs: g.scatter, Rejected: g.rejected}
}
