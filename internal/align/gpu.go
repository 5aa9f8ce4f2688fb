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
	base    int64           // Unix ns that times are relative to
	buckets map[int64]gapAt // bucket index → its largest gap
	n       int
	fitted  bool
	t0      float64 // reference time of the fit (Unix ns)
	offset  float64 // at t0
	drift   float64 // ns of offset per ns
	scatter float64
}

const (
	gpuBucketNs  = 50e6 // 50 ms
	gpuMaxBucket = 1200 // one minute of buckets
)

type gapAt struct{ t, gap float64 } // t: Unix ns − base; gap: ns

// NewGPU returns an empty estimator.
func NewGPU() *GPU { return &GPU{buckets: map[int64]gapAt{}} }

// Observe records one callback: its CPU time converted to Unix ns and the GPU time it reports.
func (g *GPU) Observe(callbackUnix int64, ptimer uint64) {
	if ptimer == 0 || callbackUnix <= 0 {
		return
	}
	if g.base == 0 {
		g.base = callbackUnix
	}
	gap := float64(int64(ptimer) - callbackUnix)
	t := float64(callbackUnix - g.base)
	b := int64(math.Floor(t / gpuBucketNs))
	if cur, ok := g.buckets[b]; !ok || gap > cur.gap {
		g.buckets[b] = gapAt{t, gap} // its own time: a drifting offset moves within a bucket
	}
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
	pts := make([]gapAt, 0, len(g.buckets))
	for _, p := range g.buckets {
		pts = append(pts, p)
	}
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

// Ready reports whether any KernelCh timing was seen.
func (g *GPU) Ready() bool { return len(g.buckets) > 0 }

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
}

// Info is the current estimate ({"method": "none"} without KernelCh timing).
func (g *GPU) Info() GPUInfo {
	if !g.Ready() {
		return GPUInfo{Method: "none"}
	}
	g.fit()
	return GPUInfo{Method: "kernelch_min_gap", OffsetNs: g.offset, DriftPPM: g.drift * 1e6,
		Samples: g.n, UncertaintyNs: g.scatter}
}
