package traceevent

import (
	"os"
	"reflect"
	"strings"
	"testing"
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
	end, ok := parseFast(&fast, doc, start, false)
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
		if _, ok := parseFast(&ev, s, 0, false); ok {
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
