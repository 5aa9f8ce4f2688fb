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
