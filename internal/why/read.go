package why

import (
	"errors"
	"sync"

	"github.com/ncclprof/ncclprof/internal/commops"
	"github.com/ncclprof/ncclprof/internal/parallel"
	"github.com/ncclprof/ncclprof/internal/ptrace"
	"github.com/ncclprof/ncclprof/internal/traceevent"
	"github.com/ncclprof/ncclprof/internal/tracefile"
)

// Reading: in the same pass as commops reads the operations (Collector), or afterwards (ReadAll).

// Activity is what one trace file holds for Analyze, rank by rank.
type Activity struct{ groups fileActivity }

// HasKineto reports whether the file recorded torch.profiler's side of a rank (kernels or CPU
// operators): a merged trace or a Kineto trace, not a plugin trace alone.
func (a Activity) HasKineto() bool {
	for _, g := range a.groups {
		if g.Kineto() {
			return true
		}
	}
	return false
}

// readActivity reads one trace: a merged rank, a timeline, or a plugin trace alone (then only its
// transfers). Its spans are kept until digested (ReadAll).
func readActivity(path string) (Activity, error) {
	in, err := tracefile.ReadPass(path) // one pass, its pages given back behind it
	if err != nil {
		return Activity{}, err
	}
	defer in.Done()
	r := &fileReader{a: &Activity{fileActivity{}}}
	t, err := ptrace.Stream(path, in.Data, traceevent.Options{Release: in.Release}, r.Visit)
	if err != nil {
		return Activity{}, err
	}
	r.Done(t)
	return *r.a, nil
}

// fileReader gathers a file's activity as its events go by (commops.EventVisitor).
type fileReader struct {
	a  *Activity
	ev ptrace.Event
	// the group of the last event and its activity: a file's events are mostly one rank's
	last  int64
	lastA *activity
}

// group is the activity of the event's rank.
func (r *fileReader) group(pid int64) *activity {
	if g := pid >> timelineShift; r.lastA == nil || g != r.last {
		r.last, r.lastA = g, r.a.groups.group(pid)
	}
	return r.lastA
}

func (r *fileReader) Visit(t *ptrace.Trace, e *traceevent.Event) error {
	return r.VisitDecoded(t, e, nil)
}

// VisitDecoded takes the plugin's fields from dec where commops decoded them already
// (commops.DecodedVisitor): a Coll, a ProxyOp, a first step.
func (r *fileReader) VisitDecoded(t *ptrace.Trace, e *traceevent.Event, dec *ptrace.Event) error {
	if e.Ph != "X" {
		return nil
	}
	a := r.group(e.Pid.Num)
	switch k := ptrace.KindOf(e.Cat, e.Name); k {
	case ptrace.Coll, ptrace.ProxyOp, ptrace.ProxyStep:
		if dec == nil {
			if err := t.Decode(e, &r.ev); err != nil {
				return err
			}
			dec = &r.ev
		}
		a.plugin(dec)
	case ptrace.KindOther:
		a.kineto(e, span{start: e.Ts, end: e.Ts + e.Dur, tid: e.Tid.Num})
	}
	return nil
}

// Done puts the file's activity on the Unix clock once its base is known.
func (r *fileReader) Done(t *ptrace.Trace) {
	for _, a := range r.a.groups {
		a.finish(t.Base)
	}
}

// Ops digests the file's operations as soon as they are final (commops.OpsVisitor), and drops
// its spans: what is held until every file is read is the digests.
func (r *fileReader) Ops(ops []commops.Op) {
	r.a.digest(byProcess(ops), func(o *commops.Op) bool { return true })
}

// digest digests the operations of ops (sorted by process, then arrival) that are this file's
// (mine), each in its rank's activity, and drops the spans.
func (a *Activity) digest(ops []*commops.Op, mine func(*commops.Op) bool) {
	acts := make([]*activity, 0, len(a.groups))
	for _, act := range a.groups {
		acts = append(acts, act)
	}
	digestAll(ops, func(o *commops.Op) *activity {
		if !mine(o) {
			return nil
		}
		return a.groups[o.Ref.Pid>>timelineShift]
	}, acts)
}

// Collector gathers what Analyze needs while commops reads the traces, in the same pass: set
// commops.Options.Also to its Hook, then take Activities.
type Collector struct {
	mu    sync.Mutex
	files map[int32]*Activity
}

// NewCollector is an empty Collector.
func NewCollector() *Collector { return &Collector{files: map[int32]*Activity{}} }

// Hook is commops.Options.Also.
func (c *Collector) Hook(file int32) commops.EventVisitor {
	a := &Activity{fileActivity{}}
	c.mu.Lock()
	c.files[file] = a
	c.mu.Unlock()
	return &fileReader{a: a}
}

// Activities is what was gathered from the files of s, in order.
func (c *Collector) Activities(s *commops.Set) []Activity {
	out := make([]Activity, len(s.Files))
	for i := range out {
		if a := c.files[int32(i)]; a != nil {
			out[i] = *a
		}
	}
	return out
}

// ReadAll reads the activity of every file of s, in order, several files at once (for a Set read
// without it), each digested with s's operations as soon as it is read.
func ReadAll(s *commops.Set) ([]Activity, error) {
	acts := make([]Activity, len(s.Files))
	errs := make([]error, len(s.Files))
	ops := make([]*commops.Op, len(s.Ops)) // s orders them by process, then arrival
	for i := range s.Ops {
		ops[i] = &s.Ops[i]
	}
	parallel.Each(len(s.Files), func(i int) {
		if acts[i], errs[i] = readActivity(s.Files[i]); errs[i] == nil {
			acts[i].digest(ops, func(o *commops.Op) bool { return o.Ref.File == int32(i) })
		}
	})
	return acts, errors.Join(errs...)
}
