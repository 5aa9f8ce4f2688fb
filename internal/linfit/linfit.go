// Package linfit fits transfer time against transfer size, time = latency + size/bandwidth,
// from streams of (size, time) points that arrive window by window and merge across windows.
//
// Two modes, as in the seed design:
//   - AVG fits every point (ordinary least squares). Unbiased when noise is symmetric.
//   - MIN fits, for each distinct size, the fastest transfer seen. Queueing and preemption only
//     ever add time, so the minimum tracks the hardware's floor and resists noisy neighbours.
//
// A fit is reported as trustworthy only when it can be: at least MinDistinctSizes distinct
// sizes, at least MinPoints points, a positive slope, and R² of at least MinR2.
package linfit

import (
	"maps"
	"math"
	"slices"
)

// Rules for a trustworthy fit.
const (
	MinDistinctSizes = 3
	MinPoints        = 8
	MinR2            = 0.8
	// MaxSizes bounds the MIN mode's table; sizes beyond it are not added (counted in Ignored).
	MaxSizes = 1024
)

// Mode selects which points the fit uses.
type Mode int

// Fit modes.
const (
	AVG Mode = iota
	MIN
)

func (m Mode) String() string {
	if m == MIN {
		return "min"
	}
	return "avg"
}

// moments are running means and co-moments (Welford), so sizes of 1e9 bytes do not lose
// precision to cancellation the way raw sums of squares would.
type moments struct {
	n             uint64
	mx, my        float64
	m2x, m2y, cxy float64
}

func (m *moments) add(x, y float64) {
	m.n++
	n := float64(m.n)
	dx, dy := x-m.mx, y-m.my
	m.mx += dx / n
	m.my += dy / n
	m.m2x += dx * (x - m.mx)
	m.m2y += dy * (y - m.my)
	m.cxy += dx * (y - m.my)
}

// merge is Chan et al.'s pairwise update.
func (m *moments) merge(b moments) {
	if b.n == 0 {
		return
	}
	if m.n == 0 {
		*m = b
		return
	}
	na, nb := float64(m.n), float64(b.n)
	n := na + nb
	dx, dy := b.mx-m.mx, b.my-m.my
	m.m2x += b.m2x + dx*dx*na*nb/n
	m.m2y += b.m2y + dy*dy*na*nb/n
	m.cxy += b.cxy + dx*dy*na*nb/n
	m.mx += dx * nb / n
	m.my += dy * nb / n
	m.n += b.n
}

func (m *moments) line() (slope, icept, r2 float64, ok bool) {
	if m.n < 2 || m.m2x <= 0 {
		return 0, 0, 0, false
	}
	slope = m.cxy / m.m2x
	icept = m.my - slope*m.mx
	r2 = 1 // every point on a horizontal line
	if m.m2y > 0 {
		r2 = m.cxy * m.cxy / (m.m2x * m.m2y)
	}
	return slope, icept, r2, true
}

// Acc accumulates points. The zero value is ready to use.
type Acc struct {
	all     moments
	mins    map[uint64]float64
	Ignored uint64 // points whose size did not fit in the MIN table
}

// Add records one transfer of size bytes that took t nanoseconds.
func (a *Acc) Add(size uint64, t float64) {
	a.all.add(float64(size), t)
	a.setMin(size, t)
}

// AddGroup records n transfers of one size whose times (ns) sum to sumT, whose squares sum to
// sumT2, and the fastest of which took minT: the same fit as n calls to Add, from the sums the
// plugin keeps per size (a group's points share x, so its co-moment with x is zero).
func (a *Acc) AddGroup(size, n uint64, sumT, sumT2, minT float64) {
	if n == 0 {
		return
	}
	my := sumT / float64(n)
	m2y := math.Max(sumT2-sumT*my, 0) // Σ(t − mean)²; rounding can take it just below 0
	a.all.merge(moments{n: n, mx: float64(size), my: my, m2y: m2y})
	a.setMin(size, minT)
}

// Merge adds every point b has seen.
func (a *Acc) Merge(b *Acc) {
	a.all.merge(b.all)
	a.Ignored += b.Ignored
	for s, t := range b.mins {
		a.setMin(s, t)
	}
}

func (a *Acc) setMin(size uint64, t float64) {
	if a.mins == nil {
		a.mins = make(map[uint64]float64)
	}
	if cur, ok := a.mins[size]; ok {
		if t < cur {
			a.mins[size] = t
		}
	} else if len(a.mins) < MaxSizes {
		a.mins[size] = t
	} else {
		a.Ignored++
	}
}

// N is the number of points added.
func (a *Acc) N() uint64 { return a.all.n }

// DistinctSizes is the number of different sizes seen (up to MaxSizes).
func (a *Acc) DistinctSizes() int { return len(a.mins) }

// Result of a fit. Latency is the intercept (clamped at 0), Bandwidth is 1/slope.
type Result struct {
	Mode          Mode    `json:"mode"`
	Points        uint64  `json:"points"`
	DistinctSizes int     `json:"distinct_sizes"`
	SlopeNsPerB   float64 `json:"slope_ns_per_byte"`
	InterceptNs   float64 `json:"intercept_ns"`
	R2            float64 `json:"r2"`
	LatencyNs     float64 `json:"latency_ns"`
	BandwidthBps  float64 `json:"bandwidth_bytes_per_s"`
	Trusted       bool    `json:"trusted"`
}

// Fit computes the fit in the given mode.
func (a *Acc) Fit(mode Mode) Result {
	r := Result{Mode: mode, Points: a.all.n, DistinctSizes: len(a.mins)}
	m := a.all
	if mode == MIN {
		// Sorted, so the same points give bit-identical results however they were merged.
		m = moments{}
		for _, s := range slices.Sorted(maps.Keys(a.mins)) {
			m.add(float64(s), a.mins[s])
		}
	}
	slope, icept, r2, ok := m.line()
	if !ok {
		return r
	}
	r.SlopeNsPerB, r.InterceptNs, r.R2 = slope, icept, r2
	r.LatencyNs = math.Max(icept, 0)
	if slope > 0 {
		r.BandwidthBps = 1e9 / slope
	}
	r.Trusted = slope > 0 && r2 >= MinR2 && r.DistinctSizes >= MinDistinctSizes && a.all.n >= MinPoints
	return r
}
