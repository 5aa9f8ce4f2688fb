package align

import (
	"math"
	"slices"
	"sort"
)

// CPU converts counter ticks to Unix ns (CLOCK_REALTIME), as Kineto's timestamps are.
//
// It keeps anchors, each the tightest of several (counter, CLOCK_REALTIME) readings taken back
// to back, and converts a tick by interpolating between the two anchors around it. Anchors are
// added while the process runs (Refresh), so NTP slewing and counter drift are followed rather
// than extrapolated: the error is the anchors' bracket (tens of ns) plus how far the real rate
// strays from linear between two anchors. Ticks after the last anchor extrapolate with the
// median (Theil–Sen) rate of recent anchors. A step of CLOCK_REALTIME (a date set by hand or an
// NTP step) starts a new set of anchors instead of smearing the step.
type CPU struct {
	s        Sampler
	base     int64 // Unix ns that anchor times are relative to (float64 cannot hold Unix ns)
	anchors  []anchor
	rate     float64 // Unix ns per tick (robust)
	maxWidth float64 // widest bracket among anchors, in ns
	steps    int
}

type anchor struct {
	tick float64 // bracket midpoint
	unix float64 // Unix ns − base
}

const (
	maxAnchors     = 256
	samplesPerRead = 24
	stepNs         = 1e6 // a jump this far off the prediction is a clock step, not drift
)

// NewCPU takes a first anchor now. ticksPerNs seeds the rate until two anchors exist.
func NewCPU(s Sampler, ticksPerNs float64) *CPU {
	c := &CPU{s: s, rate: 1 / ticksPerNs}
	c.Refresh()
	return c
}

// Refresh adds an anchor (call it periodically, e.g. once per drained window batch).
func (c *CPU) Refresh() {
	sm := Best(c.s, samplesPerRead)
	if c.base == 0 {
		c.base = int64(sm.RealNs)
	}
	a := anchor{tick: float64(sm.Mid()), unix: float64(int64(sm.RealNs) - c.base)}
	w := float64(sm.Width()) * c.rate
	if n := len(c.anchors); n > 0 {
		last := c.anchors[n-1]
		if a.tick <= last.tick {
			return
		}
		if math.Abs(a.unix-c.extrapolate(last, a.tick)) > stepNs && n >= 2 {
			c.anchors = c.anchors[:0] // CLOCK_REALTIME stepped: start over from here
			c.maxWidth = 0
			c.steps++
		}
	}
	c.anchors = append(c.anchors, a)
	if len(c.anchors) > maxAnchors {
		c.anchors = slices.Delete(c.anchors, 0, len(c.anchors)-maxAnchors)
	}
	c.maxWidth = max(c.maxWidth, w)
	c.refit()
}

// refit computes the median rate over anchor pairs at least half the history apart (those
// pairs' slopes are the least sensitive to any one anchor's bracket).
func (c *CPU) refit() {
	n := len(c.anchors)
	if n < 2 {
		return
	}
	var slopes []float64
	gap := max(1, n/2)
	for i := 0; i+gap < n; i++ {
		for j := i + gap; j < n; j++ {
			a, b := c.anchors[i], c.anchors[j]
			if b.tick > a.tick {
				slopes = append(slopes, (b.unix-a.unix)/(b.tick-a.tick))
			}
		}
	}
	if len(slopes) > 0 {
		sort.Float64s(slopes)
		c.rate = slopes[len(slopes)/2]
	}
}

func (c *CPU) extrapolate(a anchor, tick float64) float64 { return a.unix + (tick-a.tick)*c.rate }

// UnixNs converts a tick.
func (c *CPU) UnixNs(tick uint64) int64 {
	t := float64(tick)
	n := len(c.anchors)
	i := sort.Search(n, func(i int) bool { return c.anchors[i].tick > t })
	var rel float64
	switch {
	case i == 0:
		rel = c.extrapolate(c.anchors[0], t)
	case i == n:
		rel = c.extrapolate(c.anchors[n-1], t)
	default:
		a, b := c.anchors[i-1], c.anchors[i]
		rel = a.unix + (t-a.tick)*(b.unix-a.unix)/(b.tick-a.tick)
	}
	return c.base + int64(math.Round(rel))
}

// Info describes the conversion for the trace header.
type Info struct {
	Anchors      int     `json:"anchors"`
	NsPerTick    float64 `json:"ns_per_tick"`
	ErrorBoundNs float64 `json:"error_bound_ns"`
	ClockSteps   int     `json:"clock_steps"`
}

// Info is the converter's state. ErrorBoundNs is half the widest anchor bracket plus 1 µs for
// the rate between anchors, the bound the tests hold it to.
func (c *CPU) Info() Info {
	return Info{Anchors: len(c.anchors), NsPerTick: c.rate, ErrorBoundNs: c.maxWidth/2 + 1000,
		ClockSteps: c.steps}
}
