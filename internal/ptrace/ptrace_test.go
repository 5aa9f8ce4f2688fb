package ptrace

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The values below are the fixture's, read by eye.
func TestSmallTrace(t *testing.T) {
	tr, err := Parse("small.trace.json", readFixture(t, "small.trace.json"))
	if err != nil {
		t.Fatal(err)
	}
	if tr.Host != "node7" || tr.Pid != 4242 || !tr.Simulated || tr.Base != 1763790000000000000 || !tr.Complete || tr.Truncated {
		t.Fatalf("header: %+v", tr)
	}
	if tr.Clock.Source != "tsc" || tr.Clock.ErrorBoundNs != 900 || tr.Clock.Anchors != 64 || tr.Clock.NsPerTick != 0.41841004184100417 || tr.GPUClock.OffsetNs != 1763789995000000000 {
		t.Errorf("clocks: %+v %+v", tr.Clock, tr.GPUClock)
	}
	if len(tr.Comms) != 1 || tr.Comms[0] != (Comm{Hash: 0xaa, Name: "world", Rank: 1, NRanks: 2, NNodes: 1, ABI: 6}) {
		t.Errorf("comms: %+v", tr.Comms)
	}
	kinds := map[Kind]*Event{}
	for i := range tr.Events {
		kinds[tr.Events[i].Kind] = &tr.Events[i]
	}
	l := kinds[KernelLaunch]
	if l == nil || l.GroupAPI != 1 || l.Start != 1763790000001010000 || l.End != 1763790000001022500 || l.Tid.Num != 4243 {
		t.Errorf("launch: %+v", l)
	}
	c := kinds[Coll]
	if c == nil || c.Seq != 7 || c.Func != "AllReduce" || c.Parent != 2 || c.Algo != "RING" || c.Proto != "LL" || c.NChannels != 2 || c.Bytes != 4096 || c.Comm != 0xaa || c.Rank != 1 {
		t.Errorf("coll: %+v", c)
	}
	api := kinds[CollAPI]
	if api == nil || api.Parent != 1 || api.Count != 1024 || api.Datatype != "ncclFloat32" {
		t.Errorf("coll api: %+v", api)
	}
	k := kinds[KernelCh]
	if k == nil || k.Op != 4 || k.Channel != 1 || k.GPUStart != 5000100000 || k.GPUStop != 5000120000 {
		t.Errorf("kernel channel: %+v", k)
	}
	if kinds[GroupAPI] == nil || kinds[GroupAPI].ID != 1 {
		t.Errorf("group api: %+v", kinds[GroupAPI])
	}
}

// A file cut at any byte is read up to its last complete event, or fails with a message that
// names the file; it never panics, and a longer prefix never yields fewer events.
func TestTruncatedAnywhere(t *testing.T) {
	full := readFixture(t, "small.trace.json")
	start := strings.Index(string(full), `"traceEvents"`)
	last := -1
	for n := start + 20; n < len(full); n++ {
		tr, err := Parse("cut.json", full[:n])
		if err != nil {
			if !strings.Contains(err.Error(), "cut.json") {
				t.Fatalf("cut at %d: error without the file name: %v", n, err)
			}
			continue
		}
		got := len(tr.Events)
		if got < last {
			t.Fatalf("cut at %d: %d events, fewer than a shorter cut (%d)", n, got, last)
		}
		last = got
		if n < len(full)-200 && !tr.Truncated {
			t.Fatalf("cut at %d not reported as truncated", n)
		}
	}
	if last != 10 {
		t.Fatalf("the longest cuts read %d events, want 10", last)
	}
}

func TestExamplePluginQuirks(t *testing.T) {
	tr, err := Parse("example.json", readFixture(t, "example-2.28.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !tr.Unanchored || tr.Pid != 777 {
		t.Fatalf("header: unanchored %v pid %d", tr.Unanchored, tr.Pid)
	}
	var coll, ch, launch *Event
	for i := range tr.Events {
		e := &tr.Events[i]
		switch {
		case e.Kind == Coll && e.IsSlice():
			coll = e
		case e.Kind == KernelCh && e.IsSlice():
			ch = e
		case e.Kind == KernelLaunch && e.IsSlice():
			launch = e
		}
	}
	if coll == nil || coll.Seq != 3 || coll.Comm != 12345678901234567890 || coll.Datatype != "ncclFloat32" || coll.Algo != "RING" || coll.Start != 21000 || coll.End != 41000 {
		t.Errorf("coll: %+v", coll)
	}
	if ch == nil || ch.GPUStart != 1756135989724672000 || ch.GPUStop-ch.GPUStart != 18000 || ch.Channel != 1 {
		t.Errorf("kernel channel: %+v", ch)
	}
	if launch == nil || launch.End-launch.Start != 7000 {
		t.Errorf("launch: %+v", launch)
	}
}

func TestQuoteBareWords(t *testing.T) {
	in := `{"datatype": ncclFloat32, "Stream": 0x262ca50, "n": -1.5e3, "b": true, "s": "a: b, c", "z": (nil)}`
	out := string(QuoteBareWords([]byte(in)))
	want := `{"datatype": "ncclFloat32", "Stream": "0x262ca50", "n": -1.5e3, "b": true, "s": "a: b, c", "z": "(nil)"}`
	if out != want {
		t.Fatalf("got  %s\nwant %s", out, want)
	}
	if !json.Valid([]byte(out)) {
		t.Fatal("not valid JSON")
	}
}

func TestNotAPluginTrace(t *testing.T) {
	_, err := Parse("k.json", []byte(`{"schemaVersion":1,"traceEvents":[],"baseTimeNanoseconds":1}`))
	if err == nil || !strings.Contains(err.Error(), "not an ncclprof trace") {
		t.Fatalf("want a clear refusal, got %v", err)
	}
	_, err = Parse("k.json", []byte("\x1f\x8b\x08garbage"))
	if err == nil || !strings.Contains(err.Error(), "k.json") {
		t.Fatalf("want an error naming the file, got %v", err)
	}
}

// FuzzParse: any input gives a trace or an error, never a panic.
func FuzzParse(f *testing.F) {
	f.Add(readFixture(f, "small.trace.json"))
	f.Add(readFixture(f, "example-2.28.json"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := Parse("fuzz.json", data)
		if err == nil && tr == nil {
			t.Fatal("nil trace without error")
		}
	})
}

// The header's clock is read with the names drainer/trace.go (clockInfo) writes. The reader once
// used names that only the docs had (ticks_per_ns, fit_pairs) and read 0 from every real trace.
func TestClockWriterFields(t *testing.T) {
	// As json.Marshal writes clockInfo's map (keys sorted); error_bound_ns is a float there.
	head := `{"schemaVersion":1,"displayTimeUnit":"ms","baseTimeNanoseconds":1763790000000000000,` +
		`"ncclprof":{"clock":{"anchors":17,"clock_steps":1,"error_bound_ns":1012.25,"ns_per_tick":0.4166,"source":"tsc"},` +
		`"format":1,"host":"node7","pid":4242,"simulated":false,"version":"0.1.0"},"traceEvents":[]}`
	tr, err := Parse("head.trace.json", []byte(head))
	if err != nil {
		t.Fatal(err)
	}
	want := Clock{Source: "tsc", NsPerTick: 0.4166, Anchors: 17, ErrorBoundNs: 1013, ClockSteps: 1}
	if tr.Clock != want {
		t.Errorf("clock: %+v, want %+v", tr.Clock, want)
	}
	// The writer still writes these names (a rename there must come here, and to the docs).
	src, err := os.ReadFile("../../drainer/trace.go")
	if err != nil {
		t.Skip("plugin source not present:", err)
	}
	for _, k := range []string{"source", "ns_per_tick", "anchors", "error_bound_ns", "clock_steps"} {
		if !strings.Contains(string(src), `"`+k+`"`) {
			t.Errorf("drainer/trace.go no longer writes clock field %q: update ptrace.Clock and docs/trace-format.md", k)
		}
	}
}

// The lean reader's kept events come out in order and complete however their share of the
// file changes along it (the slice is sized from the first sixteenth): even, denser early (the
// estimate too large: trimmed), denser late (too small: the rest in blocks), too few to estimate.
func TestKeptEventsInOrder(t *testing.T) {
	const size = 1 << 20
	for name, keepAt := range map[string]func(off int) bool{
		"even":        func(off int) bool { return off%7 == 0 },
		"dense early": func(off int) bool { return off < size/8 || off%50 == 0 },
		"dense late":  func(off int) bool { return off > size/2 || off%50 == 0 },
		"few":         func(off int) bool { return off%9000 == 0 },
		"none":        func(off int) bool { return false },
	} {
		k := keptEvents{size: size}
		var want []int64
		for off := 0; off < size; off += 3 {
			if keepAt(off) {
				e := Event{}
				e.Off, e.ID = int64(off), uint64(off)*3
				k.add(&e)
				want = append(want, int64(off))
			}
		}
		got := k.done()
		if len(got) != len(want) || cap(got) > len(got)+len(got)/8+1 {
			t.Fatalf("%s: %d events (capacity %d), want %d", name, len(got), cap(got), len(want))
		}
		for i := range got {
			if got[i].Off != want[i] || got[i].ID != uint64(want[i])*3 {
				t.Fatalf("%s: event %d is %+v, want offset %d", name, i, got[i].Off, want[i])
			}
		}
	}
}
