package hosttest

import (
	"fmt"
	"strings"
	"testing"
)

// A process with more communicators than the plugin's table (1023 slots): the ones beyond get
// a disabled context, NCCL keeps the mask the others need, the overflow is warned about once
// and counted, and every communicator that was profiled gets its exact summary.
func TestMoreCommunicatorsThanSlots(t *testing.T) {
	const profiled, total = 1023, 1100
	r := Start(t, Options{
		Args: args(6, "--comms", fmt.Sprint(total), "--fast", "manycomms"),
		// Small windows keep the 1023 mappings at 2 × 256 slots each.
		Env: []string{"NCCLPROF_WINDOW_SLOTS=256", "NCCLPROF_WINDOWS=2", "NCCLPROF_METRICS=none"},
	})
	tr := r.Truth[0]
	if len(tr.Comms) != total {
		t.Fatalf("host made %d communicators, want %d", len(tr.Comms), total)
	}
	if tr.Mask == 0 {
		t.Errorf("the overflow cleared NCCL's process-wide activation mask")
	}
	if len(r.Summaries) != profiled {
		t.Errorf("%d summaries, want %d", len(r.Summaries), profiled)
	}
	head := tr
	head.Comms = tr.Comms[:profiled]
	CheckExact(t, r, head)
	for _, tc := range tr.Comms[profiled:] {
		if r.Summary(tc.Hash, tc.Rank) != nil {
			t.Errorf("%s is beyond the table yet has a summary", tc.Name)
		}
	}
	var disabled uint64
	for _, s := range r.Summaries {
		disabled = max(disabled, s.Counters["init_disabled"])
	}
	if disabled != total-profiled {
		t.Errorf("init_disabled = %d, want %d", disabled, total-profiled)
	}
	if n := strings.Count(string(r.Stderr), "more than 1023 communicators"); n != 1 {
		t.Errorf("overflow warned %d times, want once; stderr:\n%s", n, r.Stderr)
	}
}

// fork() halfway through a busy run, as DataLoader workers do: the child runs NCCL-free code
// and exits normally (destructors and atexit handlers run in a process whose copy of the
// plugin has no drainer thread); the parent's summary stays exact.
func TestForkedChildExitsCleanly(t *testing.T) {
	r := Start(t, Options{Args: args(6, "--iters", "200", "--kernel", "--fast", "fork")})
	CheckExact(t, r, r.Truth[0])
	if strings.Contains(string(r.Stderr), "forked child failed") {
		t.Errorf("child failed: %s", r.Stderr)
	}
}
