package linfit

import (
	"math"
	"math/rand"
	"testing"
)

// Points drawn from time = 5000 ns + size / 10 GB/s recover both within 1%.
func TestRecoversLatencyAndBandwidthAVG(t *testing.T) {
	var a Acc
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 2000; i++ {
		size := uint64(1<<10) << uint(rng.Intn(12)) // 1 KiB … 2 MiB
		ns := 5000 + float64(size)/10.0             // 10 bytes/ns = 10 GB/s
		ns += rng.NormFloat64() * 50
		a.Add(size, ns)
	}
	r := a.Fit(AVG)
	if !r.Trusted {
		t.Fatalf("fit not trusted: %+v", r)
	}
	if math.Abs(r.LatencyNs-5000) > 50 {
		t.Errorf("latency %.1f ns, want 5000±50", r.LatencyNs)
	}
	if math.Abs(r.BandwidthBps-10e9)/10e9 > 0.01 {
		t.Errorf("bandwidth %.3g B/s, want 10e9±1%%", r.BandwidthBps)
	}
}

// MIN mode ignores one-sided delays (preemption) that bias AVG.
func TestMinModeResistsDelays(t *testing.T) {
	var a Acc
	rng := rand.New(rand.NewSource(2))
	for i := 0; i < 4000; i++ {
		size := uint64(4096) << uint(rng.Intn(8))
		ns := 2000 + float64(size)/25.0
		if rng.Intn(4) == 0 {
			ns += rng.ExpFloat64() * 200000 // a quarter of transfers wait behind other work
		}
		a.Add(size, ns)
	}
	r := a.Fit(MIN)
	if !r.Trusted || math.Abs(r.LatencyNs-2000) > 20 || math.Abs(r.BandwidthBps-25e9)/25e9 > 0.01 {
		t.Fatalf("MIN fit %+v, want latency 2000 ns and 25 GB/s", r)
	}
	if avg := a.Fit(AVG); math.Abs(avg.LatencyNs-2000) < 1000 {
		t.Fatalf("AVG latency %.0f should be biased by the delays (this test must be able to fail)", avg.LatencyNs)
	}
}

// Merging accumulators equals adding every point to one.
func TestMergeEqualsSingle(t *testing.T) {
	var all, a, b Acc
	rng := rand.New(rand.NewSource(3))
	for i := 0; i < 1000; i++ {
		size := uint64(rng.Intn(1<<20) + 1)
		ns := 300 + float64(size)*0.04 + rng.NormFloat64()*10
		all.Add(size, ns)
		if i%3 == 0 {
			a.Add(size, ns)
		} else {
			b.Add(size, ns)
		}
	}
	a.Merge(&b)
	fa, fall := a.Fit(AVG), all.Fit(AVG)
	if math.Abs(fa.SlopeNsPerB-fall.SlopeNsPerB) > 1e-12 || math.Abs(fa.InterceptNs-fall.InterceptNs) > 1e-6 ||
		math.Abs(fa.R2-fall.R2) > 1e-12 || fa.Points != fall.Points {
		t.Fatalf("merged %+v != single %+v", fa, fall)
	}
	var empty Acc
	empty.Merge(&all)
	if e := empty.Fit(MIN); e != all.Fit(MIN) {
		t.Fatalf("merge into empty: %+v != %+v", e, all.Fit(MIN))
	}
}

// Too few sizes, or noise that swamps the size dependence, is not trusted.
func TestUntrustworthyFits(t *testing.T) {
	var two Acc
	for i := 0; i < 100; i++ {
		two.Add(1024, 1000)
		two.Add(2048, 1100)
	}
	if r := two.Fit(AVG); r.Trusted {
		t.Errorf("two sizes trusted: %+v", r)
	}
	var noisy Acc
	rng := rand.New(rand.NewSource(4))
	for i := 0; i < 500; i++ {
		size := uint64(1024 * (1 + rng.Intn(8)))
		noisy.Add(size, 1000+rng.Float64()*100000)
	}
	if r := noisy.Fit(AVG); r.Trusted {
		t.Errorf("noise trusted: %+v", r)
	}
	var none Acc
	if r := none.Fit(AVG); r.Trusted || r.Points != 0 {
		t.Errorf("empty fit: %+v", r)
	}
}
