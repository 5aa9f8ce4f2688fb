package chrome

import (
	"encoding/json"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// The file is a complete JSON document after every flush, and Close adds the closing members.
func TestValidAfterEveryFlush(t *testing.T) {
	dir := t.TempDir()
	w, err := New(newFile(t, dir), 1_700_000_000_000_000_000, []byte(`"schemaVersion":1,"baseTimeNanoseconds":1700000000000000000`))
	if err != nil {
		t.Fatal(err)
	}
	check := func(wantEvents int) map[string]any {
		b, err := os.ReadFile(w.Path())
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatalf("not valid JSON after a flush: %v\n%s", err, b)
		}
		if n := len(doc["traceEvents"].([]any)); n != wantEvents {
			t.Fatalf("%d events, want %d", n, wantEvents)
		}
		return doc
	}
	check(0)
	for i := 0; i < 3; i++ {
		e := w.Event('X', "Send \"x\"\n", "nccl_p2p", 42, 7)
		e.Ts("ts", 1_700_000_000_000_000_000+int64(i)*1500+7).Dur("dur", 999)
		e.Args().Hex("id", 0xabc).Int("peer", int64(i)).Str("label", "\xff bad utf8").End()
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		check(i + 1)
	}
	if err := w.Close([]byte(`"ncclprofEnd":{"complete":true}`)); err != nil {
		t.Fatal(err)
	}
	doc := check(3)
	ev := doc["traceEvents"].([]any)[2].(map[string]any)
	if ev["ts"].(float64) != 3.007 || ev["dur"].(float64) != 0.999 || ev["name"] != "Send \"x\"\n" {
		t.Errorf("event %v", ev)
	}
	args := ev["args"].(map[string]any)
	if args["id"] != "0x0000000000000abc" || args["peer"].(float64) != 2 || !strings.Contains(args["label"].(string), "\ufffd") {
		t.Errorf("args %v", args)
	}
	if doc["ncclprofEnd"].(map[string]any)["complete"] != true {
		t.Error("closing members missing")
	}
}

func newFile(t *testing.T, dir string) *os.File {
	f, err := os.Create(filepath.Join(dir, "t.trace.json"))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// Random overlapping intervals: every lane's slices nest or are disjoint.
func TestLanesNest(t *testing.T) {
	var l Lanes
	rng := rand.New(rand.NewSource(1))
	placed := map[int][]span{}
	for i := 0; i < 3000; i++ {
		s := int64(rng.Intn(100000))
		e := s + int64(rng.Intn(5000))
		lane := l.Place(s, e)
		placed[lane] = append(placed[lane], span{s, e})
	}
	checkLanes(t, &l, placed, 3000)
	if len(placed) < 2 {
		t.Errorf("overlapping slices all on one lane")
	}
}

// A proxy thread as the drainer sees it: slices arrive in order of their stop, most short
// (states, steps), a few lasting thousands of times longer (a step waiting for its peer), each
// followed by hundreds of short slices before the next long one starts inside it. Every pair on
// a lane must nest or be disjoint, however far apart they arrived.
func TestLanesRememberLongSlices(t *testing.T) {
	var l Lanes
	rng := rand.New(rand.NewSource(2))
	type arrival struct{ s, e int64 }
	var all []arrival
	for now := int64(0); now < 2_000_000; now += 100 {
		all = append(all, arrival{now, now + 40 + int64(rng.Intn(40))})
		if rng.Intn(200) == 0 { // a long step: starts now, stops 2 ms later
			all = append(all, arrival{now + 10, now + 2_000_000/10})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].e < all[j].e }) // stop order
	placed := map[int][]span{}
	for _, a := range all {
		lane := l.Place(a.s, a.e)
		placed[lane] = append(placed[lane], span{a.s, a.e})
	}
	checkLanes(t, &l, placed, len(all))
}

// A step and its states go to one lane where all of them fit: a state that partly overlaps
// another step already on the lane where the step alone would fit sends the group further.
// (Placing the step alone and adding its states blindly drew real NCCL's steps wrongly.)
func TestLanesPlaceGroup(t *testing.T) {
	var l Lanes
	if got := l.Place(100, 200); got != 0 { // another step on lane 0
		t.Fatalf("first slice on lane %d", got)
	}
	// A step [50, 300] would nest [100, 200] on lane 0, but its state [150, 250] overlaps it.
	lane := l.PlaceGroup([][2]int64{{50, 300}, {50, 150}, {150, 250}, {250, 300}})
	if lane != 1 {
		t.Errorf("step with a conflicting state placed on lane %d, want 1", lane)
	}
	// A group that fits lane 0 whole goes there.
	if lane := l.PlaceGroup([][2]int64{{400, 500}, {400, 450}}); lane != 0 {
		t.Errorf("a free group placed on lane %d, want 0", lane)
	}
	if l.Overflow != 0 {
		t.Errorf("overflow %d", l.Overflow)
	}
}

// Max bounds the lanes; beyond it slices share the last lane and are counted.
func TestLanesMax(t *testing.T) {
	l := Lanes{Max: 3}
	for i := int64(0); i < 5; i++ { // five staggered slices, each partly overlapping the next
		if lane := l.Place(i*10, i*10+100); lane > 2 {
			t.Fatalf("lane %d beyond Max 3", lane)
		}
	}
	if l.Overflow != 2 {
		t.Errorf("overflow %d, want 2 (the 4th and 5th found no lane)", l.Overflow)
	}
	var d Lanes // the default is 64 lanes
	for i := int64(0); i < 70; i++ {
		d.Place(i, i+1000)
	}
	if d.Overflow != 6 {
		t.Errorf("default lanes: overflow %d, want 6 of 70 staggered slices", d.Overflow)
	}
}

// checkLanes: no two slices placed on one lane within `reach` arrivals of each other overlap
// partially, and no slice was placed despite a conflict.
func checkLanes(t *testing.T, l *Lanes, placed map[int][]span, reach int) {
	t.Helper()
	if l.Overflow != 0 {
		t.Fatalf("%d overflows", l.Overflow)
	}
	for lane, sps := range placed {
		for i := range sps {
			for j := i + 1; j < len(sps) && j < i+reach; j++ {
				if conflicts(sps[i], sps[j]) {
					t.Fatalf("lane %d: %v and %v overlap partially", lane, sps[i], sps[j])
				}
			}
		}
	}
}

// What reaches the file before a crash holds whole units: Spill never separates the two ends of
// a flow written between two calls, whichever event crosses the flush threshold.
func TestSpillKeepsUnitsWhole(t *testing.T) {
	dir := t.TempDir()
	w, err := New(newFile(t, dir), 0, []byte(`"schemaVersion":1`))
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(0); w.Events() == 0 || w.Pending() > 0; i++ { // until a spill has happened
		w.Event('s', "nccl", "nccl_flow", 1, 2).Ts("ts", int64(i)).Uint("id", i).End()
		w.Event('f', "nccl", "nccl_flow", 1, 3).Ts("ts", int64(i)+5).Uint("id", i).Str("bp", "e").End()
		w.Spill()
		if i > 100000 {
			t.Fatal("no spill after 100000 flows")
		}
	}
	// The process dies here: only what was spilled is on disk.
	b, err := os.ReadFile(w.Path())
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		TraceEvents []struct {
			Ph string `json:"ph"`
			ID uint64 `json:"id"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("not valid JSON: %v", err)
	}
	ends := map[uint64]int{}
	for _, e := range doc.TraceEvents {
		if e.Ph == "s" {
			ends[e.ID]++
		} else {
			ends[e.ID]--
		}
	}
	for id, n := range ends {
		if n != 0 {
			t.Fatalf("flow %d is cut in half in the file (%d of %d events)", id, n, len(doc.TraceEvents))
		}
	}
	if len(doc.TraceEvents) < 1000 {
		t.Fatalf("only %d events spilled", len(doc.TraceEvents))
	}
}
