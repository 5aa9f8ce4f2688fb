// Package align maps the plugin's clocks onto each other: the hot path's counter (TSC, the
// aarch64 virtual counter, or CLOCK_MONOTONIC ns) to nanoseconds and to Unix time.
package align

import "time"

// Sample is one reading of the counter bracketing reads of CLOCK_MONOTONIC_RAW and
// CLOCK_REALTIME: Before ≤ the clock reads ≤ After, in counter ticks.
type Sample struct {
	Before, After  uint64
	MonoNs, RealNs uint64
}

// Width is the bracket in ticks: the smaller, the more exactly the sample pairs the clocks.
func (s Sample) Width() uint64 { return s.After - s.Before }

// Mid is the counter value the clock reads are attributed to.
func (s Sample) Mid() uint64 { return s.Before + (s.After-s.Before)/2 }

// Sampler takes samples.
type Sampler interface{ Sample() Sample }

// Best takes n samples and returns the one with the tightest bracket.
func Best(s Sampler, n int) Sample {
	best := s.Sample()
	for i := 1; i < n; i++ {
		if x := s.Sample(); x.Width() < best.Width() {
			best = x
		}
	}
	return best
}

// TickClock estimates the counter's rate against CLOCK_MONOTONIC_RAW (which NTP does not
// slew). The estimate improves as the baseline between the first and the latest sample grows:
// with brackets of ~50 ns, a 20 ms baseline gives ~5 ppm and a minute ~2 ppb.
type TickClock struct {
	s       Sampler
	anchor  Sample
	latest  Sample
	nominal float64 // ticks per second when the hardware states it; 0 to calibrate
	rate    float64 // ticks per ns
}

// NewTickClock calibrates over a short first baseline (2 ms: about 25 ppm with ~50 ns
// brackets) unless nominalHz is known; Refresh then refines the rate as the baseline grows.
// The plugin's drainer cannot read a window before this returns, so it is kept short.
func NewTickClock(s Sampler, nominalHz float64) *TickClock {
	c := &TickClock{s: s, nominal: nominalHz}
	c.anchor = Best(s, 16)
	if nominalHz > 0 {
		c.rate = nominalHz / 1e9
		return c
	}
	time.Sleep(2 * time.Millisecond)
	c.Refresh()
	return c
}

// Refresh takes a new sample and re-estimates the rate over the whole baseline.
func (c *TickClock) Refresh() {
	if c.nominal > 0 {
		return
	}
	c.latest = Best(c.s, 8)
	dn := float64(c.latest.MonoNs) - float64(c.anchor.MonoNs)
	dt := float64(c.latest.Mid()) - float64(c.anchor.Mid())
	if dn > 0 && dt > 0 {
		c.rate = dt / dn
	}
}

// TicksPerNs is the current rate estimate.
func (c *TickClock) TicksPerNs() float64 { return c.rate }
