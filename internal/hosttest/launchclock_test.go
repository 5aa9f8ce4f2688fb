package hosttest

import (
	"fmt"
	"testing"
)

// A KernelLaunch's and a Group's start and stop, and GroupApi's two states, take the drainer's
// clock (read at its last pass, up to 10 ms old) unless a trace may draw them (profiler/hot.h
// np_trace_clock): no figure is computed from them. A trace of the whole run and the sampled
// trace must still draw them where NCCL made them: every KernelLaunch inside the GroupApi
// that is its parent, every Group inside a GroupApi of its thread. With the drainer's clock
// they would start up to a pass earlier than their GroupApi.
func TestLaunchSideTimesExactWhenTraced(t *testing.T) {
	for _, c := range []struct {
		name string
		env  []string
	}{
		{"whole run", []string{"NCCLPROF_TRACE=1"}},
		{"sampled", sampleEnv(1, "NCCLPROF_TRACE_TRIGGER=off")},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := Start(t, Options{Args: args(6, "--iters", "300", "allreduce"),
				Env: append(c.env, "NCCLPROF_WINDOW_MS=20")})
			launches, groups := 0, 0
			for _, tr := range ReadTraces(t, r.Dir) {
				l, g, errs := launchesInsideGroups(tr)
				launches, groups = launches+l, groups+g
				for i, e := range errs {
					if i == 5 {
						t.Errorf("%s: and %d more", tr.Path, len(errs)-i)
						break
					}
					t.Errorf("%s: %s", tr.Path, e)
				}
			}
			// 300 AllReduces on each of the host's ranks, each a launch and a Group.
			if launches < 300 || groups < 300 {
				t.Fatalf("%d KernelLaunch and %d Group slices checked, want at least 300 each", launches, groups)
			}
		})
	}
}

// launchesInsideGroups checks a trace's KernelLaunch and Group slices against the GroupApi
// slices (ncclGroup) around them; it returns how many of each it checked and what is wrong.
func launchesInsideGroups(tr *Trace) (launches, groups int, errs []string) {
	type span struct{ from, to float64 }
	api := map[string]span{}       // GroupApi by id
	byThread := map[int64][]span{} // GroupApi spans by thread
	inside := func(s span, e *TraceEvent) bool {
		const slack = 0.002 // µs: the trace's rounding
		return e.Ts >= s.from-slack && e.Ts+e.Dur <= s.to+slack
	}
	for i := range tr.Events {
		e := &tr.Events[i]
		if e.Ph == "X" && e.Cat == "nccl_api" && e.Name == "ncclGroup" {
			id, _ := e.Args["id"].(string)
			s := span{e.Ts, e.Ts + e.Dur}
			api[id] = s
			byThread[e.Tid] = append(byThread[e.Tid], s)
		}
	}
	for i := range tr.Events {
		e := &tr.Events[i]
		if e.Ph != "X" {
			continue
		}
		switch e.Cat {
		case "nccl_launch":
			launches++
			parent, _ := e.Args["parent"].(string)
			if s, ok := api[parent]; ok && !inside(s, e) {
				errs = append(errs, fmt.Sprintf("KernelLaunch %v at %.3f–%.3f µs outside its GroupApi %.3f–%.3f",
					e.Args["id"], e.Ts, e.Ts+e.Dur, s.from, s.to))
			}
		case "nccl_group":
			groups++
			found := false
			for _, s := range byThread[e.Tid] {
				found = found || inside(s, e)
			}
			if !found {
				errs = append(errs, fmt.Sprintf("Group %v at %.3f–%.3f µs inside no GroupApi of its thread",
					e.Args["id"], e.Ts, e.Ts+e.Dur))
			}
		}
	}
	return launches, groups, errs
}
