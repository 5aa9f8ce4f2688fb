package main

import (
	"fmt"
	"regexp"
	"testing"
)

// Every counter of the plugin's one list (np_counter_names in control.c, read by the trace, the
// summary, the metrics and Python) has its own name: a counter added to the NP_C_* enum without
// a name there, or two with the same name, fails here.
func TestCounterNames(t *testing.T) {
	if len(counterNames) < 20 {
		t.Fatalf("%d counters; the plugin has had 20 since the reserve for operation events", len(counterNames))
	}
	snake := regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	seen := map[string]int{}
	for i, n := range counterNames {
		if n == fmt.Sprintf("counter_%d", i) {
			t.Errorf("counter %d (NP_C_* in core.h) has no name in np_counter_names (control.c)", i)
		} else if !snake.MatchString(n) {
			t.Errorf("counter %d: name %q is not snake_case (it becomes a metrics attribute and a JSON key)", i, n)
		}
		if j, dup := seen[n]; dup {
			t.Errorf("counters %d and %d are both named %q", j, i, n)
		}
		seen[n] = i
	}
	// The health section of the summary and of the trace is read through counters().
	if m := counters(); len(m) != len(counterNames) {
		t.Errorf("counters() has %d names for %d counters", len(m), len(counterNames))
	}
}
