package merge

import (
	"math"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/ncclprof/ncclprof/internal/synth"
	"github.com/ncclprof/ncclprof/internal/traceevent"
	"github.com/ncclprof/ncclprof/internal/tracefile"
)

// A GPU timer that drifts against the host's clock: every channel ncclmerge places lands where
// the plugin itself put it (the synthesizer writes each KernelCh slice at its true Kineto time)
// to within the GPU offset bound, and the summary measures the drift. One offset for the whole
// run, what ncclmerge used before, misses by many times the bound on the same input (checked
// here, so the test cannot pass on a trace too short for the drift to show).
func TestGPUDriftFollowed(t *testing.T) {
	for _, sc := range []scenario{
		{"100 ppm", "nccl_parser_config_nccl_data.json.gz", synth.PluginOptions{GPUOffsetNs: 3_000_000, GPUDriftPPM: 100, Seed: 21}, nil},
		{"-60 ppm, dropped launches", "negative_queue_length_values_check_rank0.json.gz",
			synth.PluginOptions{GPUOffsetNs: -5_000, GPUDriftPPM: -60, DropLaunchEvery: 3, Seed: 22}, nil},
	} {
		t.Run(sc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "merged.json")
			sum, _, _ := runScenario(t, sc, out)
			clock := sum.Ranks[0].Clock
			if math.Abs(clock.GPUDriftPPM-sc.opt.GPUDriftPPM) > math.Abs(sc.opt.GPUDriftPPM)/10 {
				t.Errorf("drift measured %.3f ppm, planted %.0f", clock.GPUDriftPPM, sc.opt.GPUDriftPPM)
			}
			local, single, n := placementErrors(t, out, clock.GPUOffsetNs)
			if n < 20 {
				t.Fatalf("%d placed channels", n)
			}
			if local > gpuOffsetBound {
				t.Errorf("placed channels up to %d ns from the plugin's own (bound %d ns)", local, gpuOffsetBound)
			}
			if single < 5*gpuOffsetBound {
				t.Errorf("one offset for the run misses by %d ns only: the input does not test drift", single)
			}
			t.Logf("%d channels: placed within %d ns of the truth; one offset for the run would miss by %d ns; drift %.3f ppm",
				n, local, single, clock.GPUDriftPPM)
		})
	}
}

// placementErrors compares every channel ncclmerge placed with the plugin's own slice of that
// channel (same op and channel): the worst error as placed, and as it would be with one offset
// (the run's median) instead of each link's local one.
func placementErrors(t *testing.T, path string, runOffset int64) (local, single int64, n int) {
	t.Helper()
	data, err := tracefile.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		op string
		ch int64
	}
	truth, placed := map[key]int64{}, map[key][2]int64{} // start (ns, output time); offset used
	_, err = traceevent.Read(path, data, traceevent.Options{}, func(ev *traceevent.Event) error {
		if ev.Cat != "nccl_gpu" {
			return nil
		}
		e := gjson.Parse(ev.Raw)
		k := key{e.Get("args.op").Str, e.Get("args.channel").Int()}
		ts := int64(math.Round(e.Get("ts").Float() * 1000))
		if e.Get("args.placed_by").Exists() {
			off, _ := strconv.ParseInt(e.Get("args.gpu_offset_ns").Str, 10, 64)
			placed[k] = [2]int64{ts, off}
		} else {
			truth[k] = ts
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for k, p := range placed {
		want, ok := truth[k]
		if !ok {
			t.Fatalf("placed channel %v has no slice in the plugin trace", k)
		}
		local = max(local, abs(p[0]-want))
		single = max(single, abs(p[0]+p[1]-runOffset-want))
		n++
	}
	return local, single, n
}

// The fitted slope ignores a few damaged timestamps and refuses an impossible one: 40 kernels
// 1 ms apart drifting 50 ppm with start delays of 0–900 ns, then with 3 channel starts at
// absurd values, then with most starts absurd (no believable drift: held at 0).
func TestMedianSlopeRobust(t *testing.T) {
	mk := func(damage func(i int) int64) []offsetSample {
		s := make([]offsetSample, 40)
		for i := range s {
			at := int64(i) * 1_000_000
			s[i] = offsetSample{at: at, diff: 7_000 + at*50/1_000_000 + int64(i*37%10)*100 + damage(i)}
		}
		return s
	}
	cases := []struct {
		name   string
		damage func(i int) int64
		want   float64 // ppm
		tol    float64
	}{
		{"clean", func(int) int64 { return 0 }, 50, 5},
		{"three absurd starts", func(i int) int64 {
			if i == 3 || i == 17 || i == 30 {
				return 1 << 50
			}
			return 0
		}, 50, 5},
		// The same absurd shift on every other kernel cancels in pairs half the run apart.
		{"every other start shifted alike", func(i int) int64 { return int64(i%2) << 50 }, 50, 5},
		{"three in four starts absurd", func(i int) int64 {
			if i%4 == 0 {
				return 0
			}
			return int64(i*7919%101-50) << 40
		}, 0, 0},
	}
	for _, c := range cases {
		if got := medianSlope(mk(c.damage)) * 1e6; math.Abs(got-c.want) > c.tol {
			t.Errorf("%s: slope %.3f ppm, want %.0f ± %.0f", c.name, got, c.want, c.tol)
		}
	}
}
