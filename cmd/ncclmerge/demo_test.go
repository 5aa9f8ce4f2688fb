package main

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/ncclprof/ncclprof/internal/tracecheck"
	"github.com/ncclprof/ncclprof/internal/traceevent"
	"github.com/ncclprof/ncclprof/internal/tracefile"
	"github.com/tidwall/gjson"
)

// The demo runs the real plugin in the C test host (built by make) for 3 ranks, and every
// simulated kernel is linked by the launch rule.
func TestDemo(t *testing.T) {
	host, lib := "../../build/ncclprof-testhost", "../../build/libnccl-profiler-ncclprof.so"
	for _, p := range []string{host, lib} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("%s is not built (run make first): %v", p, err)
		}
	}
	dir := t.TempDir()
	if err := runDemo(dir, host, lib, "allreduce", 3, 6); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "timeline.json.gz")
	rep, err := tracecheck.File(out)
	if err != nil || !rep.OK() || rep.Total(tracecheck.Warning) != 0 {
		t.Fatalf("check: %v %+v", err, rep.Findings)
	}
	data, _ := tracefile.ReadFile(out)
	doc, err := traceevent.Read(out, data, traceevent.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ranks := gjson.Get(doc.Member("ncclmerge"), "ranks")
	if n := len(ranks.Array()); n != 3 {
		t.Fatalf("%d ranks in the summary", n)
	}
	ranks.ForEach(func(_, r gjson.Result) bool {
		if r.Get("nccl_kernels").Int() != 6 || r.Get("linked.launch").Int() != 6 || !r.Get("simulated").Bool() {
			t.Errorf("rank summary %s", r.Raw)
		}
		// One sign for the GPU clock offset (%globaltimer − Unix), measured by the plugin and by
		// ncclmerge alike: the host's GPU timer runs 1.234567 ms ahead (testhost/world.c).
		plugin, merged := r.Get("clock.plugin_gpu_offset_ns").Int(), r.Get("clock.gpu_offset_ns").Int()
		if abs64(plugin-1_234_567) > gpuClockBound || abs64(merged-1_234_567) > gpuClockBound {
			t.Errorf("GPU clock offset: plugin %d ns, ncclmerge %d ns, want 1234567 ± %d", plugin, merged, gpuClockBound)
		}
		return true
	})
	kernelsInsideOperations(t, out)
}

// gpuClockBound: how far a GPU time converted to Unix time may be off (README: the plugin's
// estimate is tested within 3 µs).
const gpuClockBound = 3000

// kernelsInsideOperations: every NCCL kernel (linked through args.nccl.op) and every KernelCh
// slice ncclmerge placed on a GPU track (args.op) lies inside its operation's span, Coll start to
// last ProxyOp/KernelCh stop (the plugin's "completion" slice of that op on the same rank).
func kernelsInsideOperations(t *testing.T, path string) {
	t.Helper()
	type span struct {
		what       string
		start, end float64
	}
	ops := map[string]span{} // rank/op → completion span
	gpu := map[string][]span{}
	data, _ := tracefile.ReadFile(path)
	_, err := traceevent.Read(path, data, traceevent.Options{}, func(ev *traceevent.Event) error {
		e := gjson.Parse(ev.Raw)
		// The timeline numbers each rank's processes (rank index + 1) << 22 | pid (merge's timelinePid).
		rank := strconv.FormatInt(e.Get("pid").Int()>>22, 10) + "/"
		sp := span{e.Get("name").Str, e.Get("ts").Float(), e.Get("ts").Float() + e.Get("dur").Float()}
		switch {
		case e.Get("cat").Str == "nccl_op" && e.Get("args.interval").Str == "completion":
			ops[rank+e.Get("args.op").Str] = sp
		case e.Get("cat").Str == "kernel" && e.Get("args.nccl.op").Exists():
			gpu[rank+e.Get("args.nccl.op").Str] = append(gpu[rank+e.Get("args.nccl.op").Str], sp)
		case e.Get("cat").Str == "nccl_gpu" && e.Get("args.placed_by").Exists():
			gpu[rank+e.Get("args.op").Str] = append(gpu[rank+e.Get("args.op").Str], sp)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	const tol = gpuClockBound / 1e3 // µs
	checked := 0
	for key, slices := range gpu {
		op, ok := ops[key]
		if !ok {
			t.Errorf("%s: no completion slice of operation %s", slices[0].what, key)
			continue
		}
		for _, g := range slices {
			if g.start < op.start-tol || g.end > op.end+tol {
				t.Errorf("%s at %.3f–%.3f µs lies outside its operation %s, %.3f–%.3f µs",
					g.what, g.start, g.end, key, op.start, op.end)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no linked kernel found in the timeline")
	}
	t.Logf("%d kernels and GPU channel slices inside their operations", checked)
}

func abs64(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}
