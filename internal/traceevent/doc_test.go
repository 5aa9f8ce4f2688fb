package traceevent

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestReadAndWalk(t *testing.T) {
	doc := `{"a": 1, "traceEvents": [ {"ph":"X","name":"n\"q","pid":"Spans","tid":3,"ts":"1.5","dur":2,"args":{"x":[1]}} , {"ph":"M","name":"m","pid":1} ], "z": {"k": []}}`
	var names []string
	d, err := Read("t.json", []byte(doc), Options{}, func(e *Event) error {
		names = append(names, e.Name)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if d.Events != 2 || strings.Join(names, ",") != `n"q,m` || d.Member("z") != `{"k": []}` || d.Member("a") != "1" {
		t.Fatalf("%+v %v", d, names)
	}
	var first Event
	d.Walk(func(e *Event) bool { first = *e; return false })
	if !first.Pid.IsStr || first.Pid.Str != "Spans" || first.Tid.Num != 3 || first.Ts != 1500 || first.Dur != 2000 ||
		first.Raw[first.ArgsSpan.Start:first.ArgsSpan.End] != `{"x":[1]}` {
		t.Fatalf("%+v", first)
	}
}

// With Truncated, a file cut inside traceEvents keeps its complete events; without, it is an
// error at the end of the data that says the file was cut.
func TestTruncated(t *testing.T) {
	doc := `{"traceEvents":[{"ph":"X","ts":1,"dur":1,"pid":1,"tid":1},{"ph":"X","ts":2,"du`
	d, err := Read("t.json", []byte(doc), Options{Truncated: true}, nil)
	if err != nil || !d.Truncated || d.Events != 1 || d.TruncatedAt != 57 {
		t.Fatalf("%v %+v", err, d)
	}
	_, err = Read("t.json", []byte(doc), Options{}, nil)
	if err == nil || !strings.Contains(err.Error(), "ends early") || !strings.HasPrefix(err.Error(), "t.json: byte ") {
		t.Fatalf("%v", err)
	}
}

// The parallel walk gives exactly the sequential result, whatever the chunk boundaries: real
// events, false boundaries inside multi-line nested arrays, errors and truncation in late
// chunks.
func TestParallelMatchesSequential(t *testing.T) {
	var b strings.Builder
	b.WriteString("{\"traceEvents\": [\n")
	for i := 0; i < 400000; i++ {
		switch {
		case i > 300000 && i < 340000:
			b.WriteString(", ") // 3 MB of events on one line: chunks without a boundary
		case i > 0:
			b.WriteString(",\n  ")
		}
		if i == 200000 {
			// One event longer than two chunks: the chunks it covers have no boundary.
			b.WriteString(`{"ph": "X", "name": "giant", "ts": 1, "dur": 1, "pid": 1, "tid": 1, "args": {"s": "` + strings.Repeat("g", 3*chunkSize) + `"}}`)
			continue
		}
		if i%1000 == 7 {
			// A nested multi-line array of objects: ",\n {" inside an event.
			b.WriteString("{\"ph\": \"X\", \"name\": \"nested\", \"ts\": 1, \"dur\": 1, \"pid\": 1, \"tid\": 1, \"args\": {\"a\": [\n {\"x\": 1},\n {\"y\": 2}\n]}}")
			continue
		}
		b.WriteString(`{"ph": "X", "name": "e` + strings.Repeat("x", i%50) + `", "ts": ` + itoa(i) + `, "dur": 1, "pid": 1, "tid": 2}`)
	}
	b.WriteString("\n]}\n")
	doc := b.String()
	if len(doc) < minParallel {
		t.Fatalf("test document too small (%d) to go parallel", len(doc))
	}
	collect := func(data string, opt Options) ([]string, error, *Doc) {
		var names []string
		d, err := Read("p.json", []byte(data), opt, func(e *Event) error {
			names = append(names, e.Name+"@"+itoa(int(e.Ts)))
			return nil
		})
		return names, err, d
	}
	got, err, d := collect(doc, Options{})
	if err != nil || len(got) != 400000 || d.Events != 400000 {
		t.Fatalf("parallel walk: %v, %d events", err, len(got))
	}
	for i, g := range got {
		want := "e" + strings.Repeat("x", i%50) + "@" + itoa(i*1000)
		if i%1000 == 7 {
			want = "nested@1000"
		}
		if i == 200000 {
			want = "giant@1000"
		}
		if g != want {
			t.Fatalf("event %d: %s, want %s", i, g, want)
		}
	}
	// A second pass shared between goroutines sees the same events in the same order, the
	// truncated document's too.
	checkWalkParallel(t, d, got)
	// An error late in the file is reported at its offset, as sequentially.
	bad := strings.Replace(doc, `"ts": 399990,`, `"ts": 399990 x,`, 1)
	if _, err, _ := collect(bad, Options{}); err == nil || !strings.Contains(err.Error(), "byte "+itoa(strings.Index(bad, " x,")+1)) {
		t.Fatalf("late error: %v", err)
	}
	// A late cut is read up to the last complete event.
	cut := doc[:len(doc)-5000]
	names, err, d := collect(cut, Options{Truncated: true})
	if err != nil || !d.Truncated || len(names) < 399000 || names[len(names)-1] != got[len(names)-1] {
		t.Fatalf("truncated: %v %d", err, len(names))
	}
	checkWalkParallel(t, d, names)
}

// checkWalkParallel walks d with WalkParallel (several goroutines, small results reused) and
// compares the events emitted with want, event by event.
func checkWalkParallel(t *testing.T, d *Doc, want []string) {
	t.Helper()
	var got []string
	err := WalkParallel(d, func(from, to int, r *[]string) {
		*r = (*r)[:0]
		d.WalkRange(from, to, func(e *Event) bool {
			*r = append(*r, e.Name+"@"+itoa(int(e.Ts)))
			return true
		})
	}, func(r *[]string) error {
		got = append(got, *r...)
		return nil
	})
	if err != nil || len(got) != len(want) {
		t.Fatalf("WalkParallel: %v, %d events of %d", err, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("WalkParallel event %d: %s, want %s", i, got[i], want[i])
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// Flow ids read as Perfetto reads them: numbers, and strings of hex digits with or without 0x.
func TestFlowID(t *testing.T) {
	for raw, want := range map[string]struct {
		id uint64
		ok bool
	}{
		`42`: {42, true}, `"2a"`: {42, true}, `"0x2A"`: {42, true}, `"0X2a"`: {42, true},
		`18446744073709551615`: {1<<64 - 1, true}, `"g1"`: {0, false}, `1.5`: {0, false}, `-1`: {0, false},
	} {
		if id, ok := FlowID(raw); id != want.id || ok != want.ok {
			t.Errorf("FlowID(%s) = %d, %v; want %d, %v", raw, id, ok, want.id, want.ok)
		}
	}
}

// validUTF8 with a release checks piece by piece and says what utf8.Valid says, whatever piece
// boundary falls inside a multi-byte sequence; the offsets it gives back only grow, and it ends
// by starting over (0) for the walk.
func TestValidUTF8InPieces(t *testing.T) {
	defer func(n int) { utf8Piece = n }(utf8Piece)
	good := []byte(strings.Repeat(`{"name":"é→𝄞 kernel"},`, 40))
	bad := append(append([]byte{}, good[:500]...), 0xff)
	bad = append(bad, good[500:]...)
	cut := append([]byte{}, good[:len(good)-1]...)
	cut = append(cut[:len(cut)-2], 0xe2, 0x86) // a sequence cut short at the end
	for _, piece := range []int{1, 2, 3, 5, 7, 64, 1 << 20} {
		utf8Piece = piece
		for name, data := range map[string][]byte{"good": good, "bad": bad, "cut": cut} {
			var got []int64
			ok := validUTF8(data, func(upTo int64) { got = append(got, upTo) })
			if ok != utf8.Valid(data) {
				t.Errorf("piece %d, %s: validUTF8 %v, utf8.Valid %v", piece, name, ok, !ok)
			}
			for i := 1; i < len(got); i++ {
				if got[i] < got[i-1] && (i != len(got)-1 || got[i] != 0) {
					t.Errorf("piece %d, %s: offsets given back went from %d to %d", piece, name, got[i-1], got[i])
				}
			}
			if ok && (len(got) == 0 || got[len(got)-1] != 0) {
				t.Errorf("piece %d, %s: a valid document ends without starting over (%v)", piece, name, got)
			}
		}
	}
}
