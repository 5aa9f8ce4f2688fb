package hosttest

import (
	"encoding/json"
	"testing"
)

// The audit's attack on the GPU clock fit, end to end: about 1 % of the KernelCh GPU
// timestamps NCCL passes (starts and stops) are INT64_MAX or UINT64_MAX. Before the fix,
// INT64_MAX made the offset 7.4e18 ns and only 30 of 6000 KernelCh slices reached the trace.
// Now every slice is there: the poisoned ones at their CPU callback times, marked and
// counted, the others in GPU time as accurate as without the attack.
func TestGPUClockSurvivesImpossibleTimestamps(t *testing.T) {
	for _, bad := range []string{"0x7fffffffffffffff", "0xffffffffffffffff"} {
		t.Run(bad, func(t *testing.T) {
			r := Start(t, Options{Args: args(6, "--iters", "3000", "--kernel", "--channels", "2",
				"--bad-ptimer", bad, "--bad-ptimer-every", "99", "allreduce"),
				Env: []string{"NCCLPROF_TRACE=1", "NCCLPROF_EVENT_MASK=coll,kernelch"}})
			traces := ReadTraces(t, r.Dir)
			if len(traces) != 1 {
				t.Fatalf("%d trace files", len(traces))
			}
			tr, truth := traces[0], r.Truth[0]
			if truth.BadPTimers < 100 {
				t.Fatalf("only %d bad timestamps planted", truth.BadPTimers)
			}
			var clock struct {
				OffsetNs float64 `json:"offset_ns"`
				Rejected int     `json:"rejected"`
			}
			if err := json.Unmarshal(tr.End["gpu_clock"], &clock); err != nil {
				t.Fatal(err)
			}
			if clock.Rejected != truth.BadPTimers {
				t.Errorf("gpu_clock.rejected %d, planted %d", clock.Rejected, truth.BadPTimers)
			}
			kinds := map[any]int{}
			for i := range tr.Events {
				if e := &tr.Events[i]; e.Ph == "X" && e.Cat == "nccl_gpu" {
					kinds[e.Args["clock"]]++
				}
			}
			if n := kinds["gpu"] + kinds["cpu_callback_gpu_rejected"]; uint64(n) != truth.TypeCounts[6] {
				t.Errorf("%d KernelCh slices in the trace (%v), %d recorded", n, kinds, truth.TypeCounts[6])
			}
			// The period is odd, so no KernelCh has both readings planted: one slice per reading.
			if kinds["cpu_callback_gpu_rejected"] != truth.BadPTimers {
				t.Errorf("%d slices marked rejected, %d readings planted", kinds["cpu_callback_gpu_rejected"], truth.BadPTimers)
			}
			checkGPU(t, tr, truth)
		})
	}
}
