package traceevent

import (
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/ncclprof/ncclprof/internal/jsonscan"
)

// fastSeeds are events of every shape the readers meet: Kineto's spaced style and the plugin's
// compact one, string and numeric ids, every time encoding, escapes, nested args, and broken
// ones the general reader must be the one to reject.
var fastSeeds = []string{
	`{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "pid": 0, "tid": 7, "ts": 1000010.000, "dur": 18.765, "args": {"External id": 1, "grid": [1024, 1, 1], "est. achieved occupancy %": 100}}`,
	`{"ph":"X","name":"AllReduce","cat":"nccl_coll","pid":4242,"tid":4242,"ts":1000060.893,"dur":1.800,"args":{"id":"0x0000000000001004","parent":"0x0000000000001003","seq":0}}`,
	`{"ph":"s","name":"nccl","cat":"nccl_flow","pid":4242,"tid":4242,"ts":1000163.027,"id":2}`,
	`{"ph":"f","bp":"e","id":"0x2a","cat":"ac2g","name":"ac2g","pid":0,"tid":"stream 7","ts":"1716423323009853"}`,
	`{"name": "process_name", "ph": "M", "ts": 0, "pid": "Spans", "tid": "", "args": {"name": "python"}}`,
	`{"ph":"X","name":"n\"q\u00e9","pid":"17","tid":-3,"ts":1.5e3,"dur":2,"args":{"x":[1,{"y":null}],"b":true}}`,
	`{ "ph" : "i" , "s" : "t" , "ts" : 12 }`,
	`{}`,
	`{ }`,
	`{"ph":"X","ts":1712195495406752.8,"dur":0.0001}`,
	`{"ph":"X","ts":"x","dur":1}`,
	`{"ph":"X","dur":true}`,
	`{"ph":"X","ts":1,}`,
	`{"ph":"X" "ts":1}`,
	`{"ph":"X","ts":01}`,
	`{"p\h":"X"}`,
	`{"ph":"X","name":"a` + "\x01" + `b"}`,
	`{"ph":"X","args":[1,2]}`,
	`{"ph":"X","pid":123456789012345678901234,"tid":1.5}`,
	`{"ph":"X","ts":1,"ts":2}`,
	// The numbers ts, dur, pid and tid are read as they are delimited: every edge of that.
	`{"ph":"X","ts":0,"dur":0.5,"pid":0,"tid":9}`,
	`{"ph":"X","ts":1.2345,"dur":1.23,"pid":00,"tid":1}`,
	`{"ph":"X","ts":9223372036854775.807,"dur":9223372036854775.808,"pid":123456789012345678,"tid":1234567890123456789}`,
	`{"ph":"X","ts":1234567890123456,"dur":12345678901234567,"pid":1.0,"tid":1e3}`,
	`{"ph":"X","ts":1.,"dur":1.E5,"pid":-1,"tid":7 }`,
	`{"ph":"X","ts":5-,"dur":2}`,
	`{"ph":"X","ts":12x,"dur":2}`,
	`{"ph":"X","ts":00.5}`,
	`{"ph":"X","dur":3.000e1,"ts":17}`,
	`{"ph":"X","ts":1` + "\n" + `}`,
	`{"ph":"X","name":"cut`,
	`{"ph":"X","ts":1`,
	`{"ph":`,
	`{`,
}

// parseFast gives exactly what the general reader gives, or declines: same event, same end,
// and never accepts what the general reader rejects.
func checkFastMatchesSlow(t *testing.T, doc string, start int) {
	t.Helper()
	var fast, slow, valid Event
	end, ok := parseFast(&fast, doc, start, false, -1)
	slowEnd, err := parseSlow(&slow, doc, start)
	if err == nil {
		// What the general reader accepts, ParseValid reads the same on a second pass.
		if vEnd, vErr := ParseValid(&valid, doc, start); vErr != nil || vEnd != slowEnd || !reflect.DeepEqual(valid, slow) {
			t.Fatalf("ParseValid differs on %q:\nvalid %d %v %+v\nslow  %d %+v", doc[start:], vEnd, vErr, valid, slowEnd, slow)
		}
	}
	if !ok {
		return
	}
	if err != nil {
		t.Fatalf("parseFast accepted what the general reader rejects (%v): %q", err, doc[start:])
	}
	if end != slowEnd || !reflect.DeepEqual(fast, slow) {
		t.Fatalf("parseFast differs on %q:\nfast %d %+v\nslow %d %+v", doc[start:], end, fast, slowEnd, slow)
	}
}

func TestParseFastMatchesSlow(t *testing.T) {
	accepted := 0
	for _, s := range fastSeeds {
		checkFastMatchesSlow(t, s, 0)
		var ev Event
		if _, ok := parseFast(&ev, s, 0, false, -1); ok {
			accepted++
		}
	}
	if accepted < 10 {
		t.Fatalf("parseFast took only %d of the well-formed seeds", accepted)
	}
	// Every event of the repository's Kineto and plugin test traces.
	for _, path := range []string{"../merge/testdata/tiny_kineto.json", "../merge/testdata/tiny_nccl.trace.json", "../ptrace/testdata/small.trace.json"} {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		if _, err := Read(path, data, Options{}, func(e *Event) error {
			checkFastMatchesSlow(t, string(data), int(e.Off))
			n++
			return nil
		}); err != nil || n == 0 {
			t.Fatalf("%s: %v (%d events)", path, err, n)
		}
	}
}

// FuzzParseFast: on any input parseFast agrees with the general reader or declines.
func FuzzParseFast(f *testing.F) {
	for _, s := range fastSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if strings.HasPrefix(s, "{") {
			checkFastMatchesSlow(t, s, 0)
		}
		var ev Event
		if end, err := Parse(&ev, s, 0); err == nil && (end > len(s) || ev.Raw != s[:end]) {
			t.Fatalf("end %d, raw %q", end, ev.Raw)
		}
	})
}

// parseLine reads what ParseValid reads wherever Read marked a run as one event per line with
// its args last, and Read marks no run where that would go wrong: an event over several
// lines, a second args object (the first would be taken for the last, and the ts after it
// lost), args before another member, no newline after the last event. (args that is not an
// object is read as usual, so it may be in a marked run.)
func TestLineRuns(t *testing.T) {
	plain := `{"ph":"X","cat":"nccl_proxy","name":"ProxyOp send","pid":4242,"tid":2000424900,"ts":1000041.305,"dur":9.939,"args":{"id":"0x0000000000001005","parent":"0x0000000000001004","name":"a}b\"}","x":{"y":[1,{"z":2}]}}}`
	spaced := `{ "ph": "X", "name": "k", "ts": 5, "dur": 1, "args": { "External id": 1 } }`
	noArgs := `{"ph":"s","id":1,"cat":"nccl_flow","name":"nccl","pid":4242,"tid":4242,"ts":999994.277}`
	bad := map[string]string{
		"two args":       `{"ph":"X","name":"two","args":{"a":1},"ts":5,"args":{"b":2}}`,
		"args not last":  `{"ph":"X","name":"notlast","args":{"a":"}"},"ts":7}`,
		"several lines":  "{\"ph\":\"X\",\"name\":\"lines\",\"ts\":8,\"args\":{\"a\":1,\n\"b\":{\"c\":2}}}",
		"args not {":     `{"ph":"X","name":"num","args":5,"ts":9}`,
		"args then args": `{"ph":"X","name":"num2","args":{"a":1},"args":5}`,
	}
	type run struct {
		bad  string // the key of bad planted in the run, or ""
		want bool
	}
	var runs []run
	for k := range bad {
		// args that is not an object is delimited as usual: harmless.
		runs = append(runs, run{k, k == "args not {"})
	}
	runs = append(runs, run{"", true}, run{"", true})
	var b strings.Builder
	b.WriteString("{\"traceEvents\": [\n")
	for r, ru := range runs {
		for i := 0; i < markEvery; i++ {
			if r > 0 || i > 0 {
				b.WriteString(",\n")
			}
			ev := []string{plain, spaced, noArgs}[i%3]
			if ru.bad != "" && i == markEvery/2 {
				ev = bad[ru.bad]
			}
			b.WriteString(ev)
		}
	}
	b.WriteString("]}\n") // the last event is not followed by a newline
	runs = append(runs[:len(runs)-1], run{"no newline after the last event", false})
	doc := b.String()
	d, err := Read("l.json", []byte(doc), Options{LineRuns: true}, nil)
	if err != nil || len(d.lines) != len(runs) {
		t.Fatalf("%v: %d runs marked, want %d", err, len(d.lines), len(runs))
	}
	for k, ru := range runs {
		if d.lines[k] != ru.want {
			t.Errorf("run %d (%s): marked %v, want %v", k, ru.bad, d.lines[k], ru.want)
		}
	}
	// Every event of every run, marked or not, as ParseValid reads it.
	for _, sp := range d.spans() {
		for i := sp[0]; i < sp[1]; {
			var want, got Event
			wantEnd, err := ParseValid(&want, doc, i)
			if err != nil {
				t.Fatal(err)
			}
			gotEnd, err := parseLine(&got, doc, i)
			if k := sort.SearchInts(d.marks, sp[0]); d.lines[k] && (err != nil || gotEnd != wantEnd || !reflect.DeepEqual(got, want)) {
				t.Fatalf("parseLine at %d: %d %v %+v, want %d %+v", i, gotEnd, err, got, wantEnd, want)
			}
			i = jsonscan.SkipWS(doc, wantEnd)
			if i < len(doc) && doc[i] == ',' {
				i = jsonscan.SkipWS(doc, i+1)
			}
		}
		var walked []Event
		d.WalkRange(sp[0], sp[1], func(e *Event) bool { walked = append(walked, *e); return true })
		for _, e := range walked {
			var want Event
			if _, err := ParseValid(&want, doc, int(e.Off)); err != nil || !reflect.DeepEqual(e, want) {
				t.Fatalf("WalkRange at %d: %+v, want %+v", e.Off, e, want)
			}
		}
		if len(walked) != markEvery {
			t.Fatalf("WalkRange from %d: %d events, want %d", sp[0], len(walked), markEvery)
		}
	}
}
