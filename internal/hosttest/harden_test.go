package hosttest

// Issue 23 (the second adversarial audit): plugin-side hostile inputs, each reproduced through
// the real dynamic loader and checked against what the job must see.

import (
	"path/filepath"
	"strings"
	"testing"
)

// Item 13: NCCLPROF_HANG_TIMEOUT_S=NaN was accepted (a timeout of about -292 years: a dump every
// 250 ms, "rewritten every -2562047h"), and so was any tiny value. Each hostile value now gives
// one message and the default (60 s), so a short run writes no dump at all.
func TestHangTimeoutRejectsNonNumbers(t *testing.T) {
	for _, v := range []string{"NaN", "-Inf", "0.001"} {
		t.Run(v, func(t *testing.T) {
			r := Start(t, Options{Args: args(6, "--iters", "20", "--logger", "allreduce"),
				Env: []string{"NCCLPROF_HANG_TIMEOUT_S=" + v}})
			want := `NCCLPROF_HANG_TIMEOUT_S="` + v + `" is not a number in [1, 86400]; using 60`
			if n := strings.Count(string(r.Stderr), want); n != 1 {
				t.Errorf("want the message %q once, got %d times; stderr:\n%s", want, n, r.Stderr)
			}
			if m, _ := filepath.Glob(filepath.Join(r.Dir, "ncclprof-hang-*.json")); len(m) != 0 {
				t.Errorf("a dump was written: %v", m)
			}
			CheckExact(t, r, r.Truth[0])
		})
	}
}
