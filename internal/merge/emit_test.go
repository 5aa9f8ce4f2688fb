package merge

import (
	"strings"
	"testing"
)

// recorder is an output that keeps what it is given, in order.
type recorder struct{ got strings.Builder }

func (r *recorder) Buffer() []byte             { return make([]byte, 0, 64) }
func (r *recorder) Submit(b []byte) error      { r.got.Write(b); return nil }
func (r *recorder) WriteStable(s string) error { r.got.WriteString(s); return nil }

// Events formatted elsewhere and handed on whole keep their place among the emitter's own
// writes, with one separator between events, whether they come first, after others, or are
// none at all.
func TestEmitterKeepsOrder(t *testing.T) {
	run := func(n int) []byte {
		var b []byte
		for i := 0; i < n; i++ {
			b = append(b, ",\n{\"run\":"...)
			b = append(b, byte('0'+i))
			b = append(b, '}')
		}
		return b
	}
	for name, c := range map[string]struct {
		steps func(e *emitter)
		want  string
	}{
		"run first": {func(e *emitter) {
			e.writeString("[")
			e.submitEvents(run(2), 2)
			e.event([]byte(`{"own":1}`))
		}, "[\n{\"run\":0},\n{\"run\":1},\n{\"own\":1}"},
		"run after events": {func(e *emitter) {
			e.writeString("[")
			e.event([]byte(`{"own":1}`))
			e.submitEvents(run(1), 1)
			e.writeInput(strings.Repeat(" ", 70<<10))
			e.event([]byte(`{"own":2}`))
		}, "[\n{\"own\":1},\n{\"run\":0}" + strings.Repeat(" ", 70<<10) + ",\n{\"own\":2}"},
		"empty run": {func(e *emitter) {
			e.writeString("[")
			e.submitEvents(run(0), 0)
			e.event([]byte(`{"own":1}`))
			e.submitEvents(nil, 0)
		}, "[\n{\"own\":1}"},
	} {
		out := &recorder{}
		e := newEmitter(out, 0)
		c.steps(e)
		e.flush()
		if got := out.got.String(); got != c.want || e.err != nil {
			t.Errorf("%s: wrote %q (%v), want %q", name, got, e.err, c.want)
		}
	}
}
