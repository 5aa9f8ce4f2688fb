package tracecheck

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ncclprof/ncclprof/internal/jsonscan"
	"github.com/ncclprof/ncclprof/internal/testtraces"
	"github.com/ncclprof/ncclprof/internal/traceevent"
)

func real(t *testing.T, name string) string { return testtraces.Kineto(t, name) }

// The counts were taken from the files with Python (dangling flow starts, orphan ends, crossed
// slices, tid 0).
func TestRealTraces(t *testing.T) {
	cases := []struct {
		file                         string
		noEnd, orphan, overlap, tid0 int
	}{
		{"nccl_parser_config_nccl_data.json.gz", 88, 4878, 0, 0},
		{"negative_queue_length_values_check_rank0.json.gz", 0, 28167, 1, 0},
		{"triton_example_triton_example.json.gz", 1, 0, 0, 0},
		{"large_integer_trace.json.gz", 0, 0, 0, 1},
		{"trace_filter_sampled_rank-0.json.gz", 0, 0, 0, 0},
	}
	for _, c := range cases {
		r, err := File(real(t, c.file))
		if err != nil {
			t.Fatal(err)
		}
		if r.Count(CodeFlowNoEnd) != c.noEnd || r.Count(CodeFlowEndNoStart) != c.orphan ||
			r.Count(CodeOverlap) != c.overlap || r.Count(CodeTidZero) != c.tid0 {
			t.Errorf("%s: no end %d, orphan %d, overlap %d, tid0 %d", c.file, r.Count(CodeFlowNoEnd),
				r.Count(CodeFlowEndNoStart), r.Count(CodeOverlap), r.Count(CodeTidZero))
		}
		if r.OK() != (c.noEnd == 0) {
			t.Errorf("%s: OK %v", c.file, r.OK())
		}
	}
}

func TestRules(t *testing.T) {
	cases := map[string]struct {
		doc   string
		code  string
		count int
	}{
		"invalid json":           {`{"traceEvents":[{"ph":"X",}]}`, CodeInvalidJSON, 1},
		"missing dur":            {`{"traceEvents":[{"ph":"X","name":"a","ts":1,"pid":1,"tid":2}]}`, CodeMissingField, 1},
		"flow without end":       {`{"traceEvents":[{"ph":"s","id":1,"cat":"c","name":"n","ts":1,"pid":1,"tid":2}]}`, CodeFlowNoEnd, 1},
		"duplicate flow":         {`{"traceEvents":[{"ph":"s","id":1,"cat":"c","name":"n","ts":1,"pid":1,"tid":2},{"ph":"s","id":"0x1","cat":"c","name":"n","ts":2,"pid":1,"tid":2},{"ph":"f","id":1,"cat":"c","name":"n","ts":3,"pid":1,"tid":2}]}`, CodeFlowDuplicate, 1},
		"same id other name":     {`{"traceEvents":[{"ph":"s","id":1,"cat":"c","name":"n","ts":1,"pid":1,"tid":2},{"ph":"s","id":1,"cat":"c","name":"m","ts":2,"pid":1,"tid":2},{"ph":"f","id":1,"cat":"c","name":"n","ts":3,"pid":1,"tid":2},{"ph":"f","id":1,"cat":"c","name":"m","ts":3,"pid":1,"tid":2}]}`, CodeFlowDuplicate, 0},
		"crossing slices":        {`{"traceEvents":[{"ph":"X","name":"a","ts":1,"dur":10,"pid":1,"tid":2},{"ph":"X","name":"b","ts":5,"dur":10,"pid":1,"tid":2}]}`, CodeOverlap, 1},
		"nested slices":          {`{"traceEvents":[{"ph":"X","name":"a","ts":1,"dur":10,"pid":1,"tid":2},{"ph":"X","name":"b","ts":1,"dur":10,"pid":1,"tid":2},{"ph":"X","name":"c","ts":11,"dur":1,"pid":1,"tid":2}]}`, CodeOverlap, 0},
		"other tracks":           {`{"traceEvents":[{"ph":"X","name":"a","ts":1,"dur":10,"pid":1,"tid":2},{"ph":"X","name":"b","ts":5,"dur":10,"pid":1,"tid":3}]}`, CodeOverlap, 0},
		"tid 0 is pid":           {`{"traceEvents":[{"ph":"X","name":"a","ts":1,"dur":10,"pid":7,"tid":0},{"ph":"X","name":"b","ts":5,"dur":10,"pid":7,"tid":7}]}`, CodeOverlap, 1},
		"tid 0":                  {`{"traceEvents":[{"ph":"X","name":"a","ts":1,"dur":1,"pid":7,"tid":0}]}`, CodeTidZero, 1},
		"tid 0, thread instant":  {`{"traceEvents":[{"ph":"i","s":"t","name":"a","ts":1,"pid":7,"tid":0}]}`, CodeTidZero, 1},
		"tid 0, process instant": {`{"traceEvents":[{"ph":"i","s":"p","name":"ncclprof_step","ts":1,"pid":7,"tid":0}]}`, CodeTidZero, 0},
		"negative dur":           {`{"traceEvents":[{"ph":"X","name":"a","ts":1,"dur":-1,"pid":7,"tid":1}]}`, CodeNegativeDur, 1},
		"negative ts":            {`{"traceEvents":[{"ph":"X","name":"a","ts":-1,"dur":1,"pid":7,"tid":1}]}`, CodeNegativeTs, 1},
		"flow backwards":         {`{"traceEvents":[{"ph":"s","id":1,"cat":"c","name":"n","ts":5,"pid":1,"tid":2},{"ph":"f","id":1,"cat":"c","name":"n","ts":3,"pid":1,"tid":2}]}`, CodeFlowBackwards, 1},
		"B/E cross":              {`{"traceEvents":[{"ph":"B","name":"a","ts":1,"pid":1,"tid":2},{"ph":"X","name":"b","ts":2,"dur":10,"pid":1,"tid":2},{"ph":"E","ts":5,"pid":1,"tid":2}]}`, CodeOverlap, 1},
	}
	for name, c := range cases {
		r := Check(name, []byte(c.doc))
		if got := r.Count(c.code); got != c.count {
			t.Errorf("%s: %s = %d, want %d (%+v)", name, c.code, got, c.count, r.Findings)
		}
	}
}

// Two slices that meet exactly in decimal µs, far from the base: Perfetto rounds each ts and
// dur to the ns on its own, and the first then ends a ns after the second starts (Step 0 ends
// at …724287, Step 1 starts at …724286 in a merged real trace). check must see what Perfetto
// sees.
func TestNestingAsPerfettoRounds(t *testing.T) {
	var doc string
	for d := int64(0); d < 1000; d++ {
		ts, dur := int64(4_458_677_009_853_421)+d*7, int64(866)
		a, _ := traceevent.PerfettoNs(string(jsonscan.AppendMicros(nil, ts)))
		b, _ := traceevent.PerfettoNs(string(jsonscan.AppendMicros(nil, dur)))
		c, _ := traceevent.PerfettoNs(string(jsonscan.AppendMicros(nil, ts+dur)))
		if a+b > c {
			doc = fmt.Sprintf(`{"traceEvents": [
{"ph": "X", "name": "Step 0", "pid": 1, "tid": 2, "ts": %s, "dur": %s},
{"ph": "X", "name": "Step 1", "pid": 1, "tid": 2, "ts": %s, "dur": 1.000}]}`,
				jsonscan.AppendMicros(nil, ts), jsonscan.AppendMicros(nil, dur), jsonscan.AppendMicros(nil, ts+dur))
			break
		}
	}
	if doc == "" {
		t.Fatal("no overlapping pair found")
	}
	r := Check("t.json", []byte(doc))
	if r.Count(CodeOverlap) != 1 {
		t.Fatalf("want the 1 ns overlap Perfetto makes reported, got %+v", r.Findings)
	}
}

// Bytes that are not UTF-8 make a file JSON readers refuse: an error, not silence.
func TestInvalidUTF8IsAnError(t *testing.T) {
	r := Check("t.json", []byte("{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"gemm\xff\xfe\", \"pid\": 1, \"tid\": 2, \"ts\": 1, \"dur\": 1}]}"))
	if r.OK() || r.Count(CodeInvalidUTF8) != 1 {
		t.Fatalf("want one invalid_utf8 error, got %+v", r.Findings)
	}
	if ex := r.byCode[CodeInvalidUTF8].Examples[0]; !strings.Contains(ex, "2 bytes") || !strings.Contains(ex, "byte 42") {
		t.Errorf("the error should count the bytes and say where the first is: %s", ex)
	}
}
