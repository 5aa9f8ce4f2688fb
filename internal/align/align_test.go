package align

import (
	"math"
	"math/rand"
	"testing"
)

// fakeClock is a counter at a known rate against a CLOCK_REALTIME with a known offset, a slew
// (rate error) and jitter in how long a reading takes.
type fakeClock struct {
	tick       float64 // current counter value
	ticksPerNs float64
	realBase   int64
	slewPPM    float64 // CLOCK_REALTIME runs this much fast (NTP slewing)
	rng        *rand.Rand
}

func (f *fakeClock) real(tick float64) int64 {
	ns := tick / f.ticksPerNs
	return f.realBase + int64(math.Round(ns*(1+f.slewPPM*1e-6)))
}

func (f *fakeClock) Sample() Sample {
	before := f.tick
	f.tick += (20 + f.rng.ExpFloat64()*200) * f.ticksPerNs // time to read the clocks
	mid := before + (f.tick-before)/2
	r := f.real(mid)
	return Sample{Before: uint64(before), After: uint64(f.tick), MonoNs: uint64(mid / f.ticksPerNs), RealNs: uint64(r)}
}

func absNs(a, b int64) float64 {
	if a > b {
		return float64(a - b)
	}
	return float64(b - a)
}

func (f *fakeClock) advance(ns float64) { f.tick += ns * f.ticksPerNs }

// Anchors every 100 ms over a minute of 80 ppm slewing: conversions stay within the reported
// bound, and within 2 µs.
func TestCPUFollowsSlew(t *testing.T) {
	f := &fakeClock{tick: 1e9, ticksPerNs: 2.4, realBase: 1_700_000_000_000_000_000, slewPPM: 80, rng: rand.New(rand.NewSource(1))}
	c := NewCPU(f, 2.4)
	var worst float64
	for i := 0; i < 600; i++ {
		start := f.tick
		f.advance(100e6)
		c.Refresh()
		for k := 0; k < 20; k++ { // events recorded during the interval just anchored
			tick := start + (f.tick-start)*float64(k)/20
			worst = max(worst, absNs(c.UnixNs(uint64(tick)), f.real(tick)))
		}
	}
	info := c.Info()
	if worst > info.ErrorBoundNs || worst > 2000 {
		t.Fatalf("worst error %.0f ns, bound %.0f ns", worst, info.ErrorBoundNs)
	}
	if math.Abs(info.NsPerTick*2.4-(1+80e-6)) > 1e-6 {
		t.Errorf("rate %.9f ns/tick, want %.9f", info.NsPerTick, (1+80e-6)/2.4)
	}
	t.Logf("worst error %.0f ns over 60 s of 80 ppm slew; bound %.0f ns", worst, info.ErrorBoundNs)
}

// A step of CLOCK_REALTIME (date set by hand) is not smeared over the interval before it.
func TestCPUClockStep(t *testing.T) {
	f := &fakeClock{tick: 1e9, ticksPerNs: 3, realBase: 1_700_000_000_000_000_000, rng: rand.New(rand.NewSource(2))}
	c := NewCPU(f, 3)
	for i := 0; i < 10; i++ {
		f.advance(100e6)
		c.Refresh()
	}
	f.realBase += 5e9 // the wall clock jumps 5 s
	f.advance(100e6)
	c.Refresh()
	tick := f.tick + 50e6*3
	f.advance(100e6)
	c.Refresh()
	if err := absNs(c.UnixNs(uint64(tick)), f.real(tick)); err > 2000 {
		t.Fatalf("error after a step: %.0f ns", err)
	}
	if c.Info().ClockSteps != 1 {
		t.Errorf("steps %d, want 1", c.Info().ClockSteps)
	}
}

// The GPU timer runs 1.234567 ms ahead and drifts 20 ppm; callbacks arrive 0.3–5 µs after the
// GPU event. The estimate recovers the mapping within 1 µs, below the truth (it is a bound).
func TestGPUOffsetAndDrift(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	const base = int64(1_700_000_000_000_000_000)
	truth := func(unix int64) uint64 { return uint64(unix + 1234567 + int64(float64(unix-base)*20e-6)) }
	g := NewGPU()
	for i := 0; i < 20000; i++ {
		u := base + int64(i)*250_000 // 5 s of events
		lat := int64(300 + rng.ExpFloat64()*2000)
		g.Observe(u+lat, truth(u))
	}
	info := g.Info()
	if info.Method != "kernelch_min_gap" || math.Abs(info.DriftPPM-20) > 0.5 {
		t.Fatalf("info %+v", info)
	}
	var worst float64
	for i := 0; i < 1000; i++ {
		u := base + int64(i)*5_000_000
		got := g.UnixNs(truth(u))
		if got < u-5 { // the estimate can only be late by the quickest latency, never early
			t.Fatalf("converted %d ns before the truth", u-got)
		}
		worst = max(worst, absNs(got, u))
	}
	if worst > 1000 {
		t.Fatalf("worst error %.0f ns", worst)
	}
	t.Logf("worst GPU→Unix error %.0f ns (quickest callback 300 ns)", worst)
}

func TestGPUNone(t *testing.T) {
	if info := NewGPU().Info(); info.Method != "none" {
		t.Errorf("%+v", info)
	}
}

// The audit's attacks on the GPU clock fit: 1 % of pTimers (start and stop alike) replaced by
// INT64_MAX (which gave an offset of 7.4e18 ns), by UINT64_MAX, or by a value an hour off
// (possible as a number, impossible for this clock). Each is rejected and counted; the fit
// and the conversion of every good reading stay as accurate as with clean input.
func TestGPURejectsImpossibleTimestamps(t *testing.T) {
	const base = int64(1_700_000_000_000_000_000)
	truth := func(unix int64) uint64 { return uint64(unix + 1234567 + int64(float64(unix-base)*20e-6)) }
	for _, tc := range []struct {
		name string
		bad  func(good uint64) uint64
	}{
		{"int64max", func(uint64) uint64 { return math.MaxInt64 }},
		{"uint64max", func(uint64) uint64 { return math.MaxUint64 }},
		{"hour_ahead", func(g uint64) uint64 { return g + 3600e9 }},
		{"hour_behind", func(g uint64) uint64 { return g - 3600e9 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewSource(5))
			g := NewGPU()
			type reading struct {
				cb     int64
				ptimer uint64
				u      int64 // when the GPU event really happened
				bad    bool
			}
			var rs []reading
			planted := 0
			for i := 0; i < 6000; i++ { // 6000 KernelCh: a start and a stop reading each
				for _, dt := range []int64{0, 40_000} {
					u := base + int64(i)*500_000 + dt // 3 s of events
					r := reading{cb: u + int64(300+rng.ExpFloat64()*2000), ptimer: truth(u), u: u}
					if (2*i+len(rs)%2)%99 == 0 { // about 1 % of readings, starts and stops
						r.ptimer, r.bad = tc.bad(r.ptimer), true
						planted++
					}
					g.Observe(r.cb, r.ptimer)
					rs = append(rs, r)
				}
			}
			info := g.Info()
			if math.Abs(info.OffsetNs-1234567-20e-6*float64(rs[len(rs)-1].cb-base)) > 3000 || math.Abs(info.DriftPPM-20) > 0.5 {
				t.Fatalf("fit poisoned: %+v", info)
			}
			var worst float64
			converted := 0
			for _, r := range rs {
				got, ok := g.Convert(r.cb, r.ptimer)
				if ok == r.bad {
					t.Fatalf("reading %d (planted %v): accepted %v", r.ptimer, r.bad, ok)
				}
				if ok {
					worst = max(worst, absNs(got, r.u))
					converted++
				}
			}
			if worst > 1000 {
				t.Errorf("worst error of a good reading %.0f ns", worst)
			}
			if got := g.Info().Rejected; got != planted {
				t.Errorf("rejected %d, planted %d", got, planted)
			}
			if converted != len(rs)-planted {
				t.Errorf("converted %d of %d good readings", converted, len(rs)-planted)
			}
		})
	}
}
