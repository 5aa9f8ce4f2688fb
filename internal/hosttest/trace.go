package hosttest

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"testing"
)

// Trace is a plugin trace file as the tests read it.
type Trace struct {
	Path    string
	BaseNs  int64                      `json:"baseTimeNanoseconds"`
	Meta    map[string]any             `json:"ncclprof"`
	End     map[string]json.RawMessage `json:"ncclprofEnd"`
	Events  []TraceEvent               `json:"traceEvents"`
	Schema  int                        `json:"schemaVersion"`
	RawSize int
}

// TraceEvent is one event of it.
type TraceEvent struct {
	Ph   string         `json:"ph"`
	Name string         `json:"name"`
	Cat  string         `json:"cat"`
	Pid  int64          `json:"pid"`
	Tid  int64          `json:"tid"`
	Ts   float64        `json:"ts"`
	Dur  float64        `json:"dur"`
	ID   uint64         `json:"id"`
	BP   string         `json:"bp"`
	Args map[string]any `json:"args"`
}

// UnixNs is the event's start in Unix ns.
func (tr *Trace) UnixNs(e *TraceEvent) int64 { return tr.BaseNs + int64(math.Round(e.Ts*1000)) }

// ReadTraces parses every plugin trace in dir; each must be valid JSON.
func ReadTraces(t testing.TB, dir string) []*Trace {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "ncclprof-*.trace.json"))
	sort.Strings(files)
	var out []*Trace
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		tr := &Trace{Path: f, RawSize: len(b)}
		if err := json.Unmarshal(b, tr); err != nil {
			t.Fatalf("%s is not valid JSON: %v", f, err)
		}
		out = append(out, tr)
	}
	return out
}

// Check reports what Perfetto's JSON importer would reject or misdraw: slices that do not nest
// on their track, flows without exactly one start and one end, and duplicate event ids.
func (tr *Trace) Check() []error {
	var errs []error
	type slice struct{ s, e int64 }
	tracks := map[[2]int64][]slice{}
	ids := map[string]bool{}
	flows := map[uint64][2]int{}
	for i := range tr.Events {
		e := &tr.Events[i]
		switch e.Ph {
		case "X":
			s := int64(math.Round(e.Ts * 1000))
			tracks[[2]int64{e.Pid, e.Tid}] = append(tracks[[2]int64{e.Pid, e.Tid}], slice{s, s + int64(math.Round(e.Dur*1000))})
			if id, ok := e.Args["id"].(string); ok {
				if ids[id] {
					errs = append(errs, fmt.Errorf("event id %s appears twice", id))
				}
				ids[id] = true
			}
		case "s", "f":
			f := flows[e.ID]
			if e.Ph == "s" {
				f[0]++
			} else {
				f[1]++
			}
			flows[e.ID] = f
		}
	}
	for id, f := range flows {
		if f != [2]int{1, 1} {
			errs = append(errs, fmt.Errorf("flow %d has %d starts and %d ends", id, f[0], f[1]))
		}
	}
	for k, sl := range tracks {
		sort.Slice(sl, func(i, j int) bool {
			if sl[i].s != sl[j].s {
				return sl[i].s < sl[j].s
			}
			return sl[i].e > sl[j].e
		})
		var stack []slice
		for _, x := range sl {
			for len(stack) > 0 && stack[len(stack)-1].e <= x.s {
				stack = stack[:len(stack)-1]
			}
			if len(stack) > 0 && x.e > stack[len(stack)-1].e {
				errs = append(errs, fmt.Errorf("track %v: slice [%d,%d] overlaps [%d,%d] without nesting",
					k, x.s, x.e, stack[len(stack)-1].s, stack[len(stack)-1].e))
				break
			}
			stack = append(stack, x)
		}
	}
	return errs
}

// Count is the number of events of a phase and category.
func (tr *Trace) Count(ph, cat string) int {
	n := 0
	for i := range tr.Events {
		if tr.Events[i].Ph == ph && tr.Events[i].Cat == cat {
			n++
		}
	}
	return n
}

// ByID indexes slices by their args.id.
func (tr *Trace) ByID() map[string]*TraceEvent {
	m := map[string]*TraceEvent{}
	for i := range tr.Events {
		if id, ok := tr.Events[i].Args["id"].(string); ok && tr.Events[i].Ph == "X" {
			m[id] = &tr.Events[i]
		}
	}
	return m
}
