package synth

import (
	"bufio"
	"fmt"
	"os"
	"strconv"

	"github.com/ncclprof/ncclprof/internal/jsonscan"
	"github.com/ncclprof/ncclprof/internal/kineto"
	"github.com/ncclprof/ncclprof/internal/traceevent"
	"github.com/tidwall/gjson"
)

// RepeatKineto writes a Kineto trace of at least size bytes made of copies of src's events,
// each copy later in time than the one before and with its own correlation and flow ids, so
// that the result is a valid trace a merge links like the original, only longer. It returns
// the number of copies.
func RepeatKineto(src, dst string, size int64) (int, error) {
	var evs []string
	var spans []copySpans
	var lo, hi int64 = 1<<63 - 1, -1 << 63
	kt, err := kineto.Read(src, kineto.Options{}, func(e *kineto.Event) error {
		evs = append(evs, e.Raw)
		spans = append(spans, spansOf(&e.Event))
		if e.HasTs && e.Ph != "M" {
			lo, hi = min(lo, e.Ts), max(hi, e.Ts+e.Dur)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	f, err := os.Create(dst)
	if err != nil {
		return 0, err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	fmt.Fprintf(w, "{\n  \"schemaVersion\": 1,\n")
	for _, m := range kt.Members {
		if m.Key != "schemaVersion" {
			fmt.Fprintf(w, "  %q: %s,\n", m.Key, m.Raw)
		}
	}
	w.WriteString("  \"traceEvents\": [\n")
	period := hi - lo + 1_000_000 // each copy starts 1 ms after the previous one ends
	var written int64
	copies := 0
	first := true
	var buf []byte
	for ; written < size; copies++ {
		shift := int64(copies) * period
		idShift := uint64(copies) * 100_000_000
		for i, raw := range evs {
			buf = spans[i].rewrite(buf[:0], raw, shift, idShift, kt.Absolute)
			if !first {
				w.WriteString(",\n  ")
			}
			first = false
			w.Write(buf)
			written += int64(len(buf)) + 4
		}
	}
	w.WriteString("\n  ]\n}\n")
	if err := w.Flush(); err != nil {
		f.Close()
		return 0, err
	}
	return copies, f.Close()
}

// copySpans are the values a copy changes: its time, flow id and correlation.
type copySpans struct {
	ts, id, corr traceevent.Span
}

func spansOf(e *traceevent.Event) copySpans {
	s := copySpans{id: e.IDSpan}
	if e.Ph != "M" {
		s.ts = e.TsSpan
	}
	if e.ArgsSpan.Valid() {
		args := e.Raw[e.ArgsSpan.Start:e.ArgsSpan.End]
		if c := gjson.Get(args, "correlation"); c.Exists() && c.Type == gjson.Number {
			at := int32(c.Index) + e.ArgsSpan.Start
			s.corr = traceevent.Span{Start: at, End: at + int32(len(c.Raw))}
		}
	}
	return s
}

func (s copySpans) rewrite(b []byte, raw string, shift int64, idShift uint64, absolute bool) []byte {
	type rep struct {
		sp  traceevent.Span
		add func([]byte, string) []byte
	}
	reps := []rep{}
	if s.ts.Valid() {
		reps = append(reps, rep{s.ts, func(b []byte, v string) []byte {
			ns, err := jsonscan.Scaled(v, 3)
			if err != nil {
				return append(b, v...)
			}
			if absolute {
				// Keep the integer-µs form of old traces.
				return strconv.AppendInt(b, (ns+shift)/1000, 10)
			}
			return jsonscan.AppendMicros(b, ns+shift)
		}})
	}
	bump := func(b []byte, v string) []byte {
		n, err := jsonscan.Uint(v)
		if err != nil || len(v) == 0 || v[0] == '"' {
			return append(b, v...)
		}
		return strconv.AppendUint(b, n+idShift, 10)
	}
	if s.id.Valid() {
		reps = append(reps, rep{s.id, bump})
	}
	if s.corr.Valid() {
		reps = append(reps, rep{s.corr, bump})
	}
	// Spans are in order of appearance except the ts/id, which may come in any order.
	for i := 1; i < len(reps); i++ {
		for j := i; j > 0 && reps[j].sp.Start < reps[j-1].sp.Start; j-- {
			reps[j], reps[j-1] = reps[j-1], reps[j]
		}
	}
	pos := int32(0)
	for _, r := range reps {
		b = append(b, raw[pos:r.sp.Start]...)
		b = r.add(b, raw[r.sp.Start:r.sp.End])
		pos = r.sp.End
	}
	return append(b, raw[pos:]...)
}
