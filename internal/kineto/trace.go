// Package kineto reads torch.profiler (Kineto) Chrome traces of every era: absolute integer µs
// (PyTorch ≤ 2.3), relative µs with baseTimeNanoseconds (2.4+), displayTimeUnit "ns", string
// tids and 2021 category names, metadata before or after traceEvents, and bare event arrays.
//
// The file is held in memory once and read without copying (traceevent validates each event
// and reads its fields in one pass; args are read with gjson), so that a writer may copy the
// events to its output byte for byte.
package kineto

import (
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/ncclprof/ncclprof/internal/jsonscan"
	"github.com/ncclprof/ncclprof/internal/traceevent"
	"github.com/ncclprof/ncclprof/internal/tracefile"
	"github.com/tidwall/gjson"
)

// absoluteMinNs: a ts at or above this many ns (1e14 µs, 1973) is absolute Unix time. Relative
// Kineto ts stay below 7.9e12 µs (the 3-month window of its base).
const absoluteMinNs = 1e17

// AbsoluteMinNs is absoluteMinNs for readers that locate absolute times themselves.
const AbsoluteMinNs = absoluteMinNs

// Trace is a Kineto trace held in memory.
type Trace struct {
	*traceevent.Doc

	// Base is baseTimeNanoseconds (HasBase), or 0 where ts are absolute.
	Base    int64
	HasBase bool
	// Absolute: ts are Unix µs since the epoch (PyTorch ≤ 2.3), not relative to Base.
	Absolute        bool
	DisplayTimeUnit string

	// Rank and WorldSize come from distributedInfo (-1 when absent).
	Rank, WorldSize int
	// Host is the host name from the trace's metadata, or from a tensorboard_trace_handler
	// file name ("host_pid.time.pt.trace.json"); HostFrom says which.
	Host, HostFrom string
	// Pid is the process of the CPU events (0 when the trace has none).
	Pid int64
}

// Unix converts a ts read from this trace to Unix ns.
func (t *Trace) Unix(ts int64) int64 { return t.Base + ts }

// Options tune reading.
type Options struct {
	// Progress, if set, is called now and then with the bytes walked so far.
	Progress func(done, total int64)
	// Base supplies the base (Unix ns) of a trace whose ts are relative but which has no
	// baseTimeNanoseconds (a hand-edited or filtered file). A base in the file wins.
	Base *int64
	// RepairUTF8: see traceevent.Options (the data must be the caller's to change).
	RepairUTF8 bool
	// Decode gives each visited event its Decoded facts, read on the parsing goroutines.
	Decode bool
}

const syntaxHint = "the file is not valid JSON; check that it is a trace written by torch.profiler"

// Read loads and validates a Kineto trace, calling visit for every event in file order. The
// Event passed to visit is reused: copy what must outlive the call (its strings point into
// the trace and stay valid as long as it does). Event times are on the file's scale until Read
// returns; convert them with Trace.Unix afterwards (a base written after traceEvents is only
// known at the end).
func Read(path string, opt Options, visit func(*Event) error) (*Trace, error) {
	data, err := tracefile.ReadFile(path)
	if err != nil {
		return nil, err
	}
	opt.RepairUTF8 = true // the buffer is ours
	return Parse(path, data, opt, visit)
}

// Parse is Read on a document already in memory.
func Parse(path string, data []byte, opt Options, visit func(*Event) error) (*Trace, error) {
	// Each event is read into a decodedEvent where it is parsed (the parsing goroutines fold
	// its category and, with Decode, read its facts), and visited there: no copy.
	parse := func(d *decodedEvent, doc string, start int) (int, error) {
		end, err := traceevent.Parse(&d.Event.Event, doc, start)
		d.Event.Cat, d.Event.Decoded, d.facts = CatOf(d.Event.Event.Cat), nil, Decoded{}
		if err == nil && opt.Decode {
			decode(&d.Event.Event, &d.facts)
		}
		return end, err
	}
	var v func(*decodedEvent) error
	if visit != nil {
		v = func(d *decodedEvent) error {
			if opt.Decode {
				d.Event.Decoded = &d.facts
			}
			return visit(&d.Event)
		}
	}
	doc, err := traceevent.ReadWith(path, data, traceevent.Options{Progress: opt.Progress, Hint: syntaxHint, RepairUTF8: opt.RepairUTF8},
		traceevent.Reader[decodedEvent]{Parse: parse, Event: func(d *decodedEvent) *traceevent.Event { return &d.Event.Event }, Visit: v})
	if err != nil {
		return nil, err
	}
	t := &Trace{Doc: doc, Rank: -1, WorldSize: -1}
	if err := t.finishTime(opt); err != nil {
		return nil, err
	}
	t.readMetadata()
	return t, nil
}

// decodedEvent is an event as read, with room for its Decoded facts.
type decodedEvent struct {
	Event
	facts Decoded
}

// Walk visits the events again in file order (see traceevent.Doc.Walk).
func (t *Trace) Walk(visit func(*Event) bool) {
	var ev Event
	t.Doc.Walk(func(e *traceevent.Event) bool {
		ev.Event, ev.Cat = *e, CatOf(e.Cat)
		return visit(&ev)
	})
}

// finishTime settles the time base once all top-level keys are known.
func (t *Trace) finishTime(opt Options) error {
	if raw := t.Member("baseTimeNanoseconds"); raw != "" {
		v, err := jsonscan.Int(raw)
		if err != nil {
			return t.Errorf(0, "", "baseTimeNanoseconds is not an integer: %s", traceevent.Clip(raw))
		}
		t.Base, t.HasBase = v, true
	}
	if raw := t.Member("displayTimeUnit"); raw != "" {
		t.DisplayTimeUnit = jsonscan.String(raw)
	}
	first, ok := t.firstTs()
	switch {
	case t.HasBase:
	case !ok || first >= absoluteMinNs:
		t.Absolute = true
	case opt.Base != nil:
		t.Base, t.HasBase = *opt.Base, true
	default:
		return t.Errorf(t.EventsStart(), "pass the trace's base time (Unix ns) with --kineto-base",
			"ts values are relative (first %s µs) but the trace has no baseTimeNanoseconds", strconv.FormatInt(first/1000, 10))
	}
	return nil
}

// firstTs returns the ts of the first event that has one and is not metadata.
func (t *Trace) firstTs() (int64, bool) {
	var ts int64
	found := false
	t.Doc.Walk(func(e *traceevent.Event) bool {
		if e.HasTs && e.Ph != "M" {
			ts, found = e.Ts, true
			return false
		}
		return true
	})
	return ts, found
}

var handlerName = regexp.MustCompile(`^(.+)_(\d+)\.\d+\.pt\.trace\.json(\.gz)?$`)

// readMetadata picks rank, host and pid out of the header and the metadata events.
func (t *Trace) readMetadata() {
	if raw := t.Member("distributedInfo"); raw != "" {
		di := gjson.Parse(raw)
		if r := di.Get("rank"); r.Exists() {
			t.Rank = int(r.Int())
		}
		if w := di.Get("world_size"); w.Exists() {
			t.WorldSize = int(w.Int())
		}
	}
	for _, key := range []string{"hostname", "host_name", "host"} {
		if h := jsonscan.String(t.Member(key)); h != "" {
			t.Host, t.HostFrom = h, "metadata key "+key
			break
		}
	}
	t.Pid = t.cpuPid()
	if t.Host == "" {
		if mm := handlerName.FindStringSubmatch(filepath.Base(t.Path)); mm != nil {
			if pid, _ := strconv.ParseInt(mm[2], 10, 64); pid == t.Pid || t.Pid == 0 {
				t.Host, t.HostFrom = mm[1], "file name"
			}
		}
	}
}

// cpuPid is the pid of the CPU operators and runtime calls (the first one seen).
func (t *Trace) cpuPid() int64 {
	var pid int64
	t.Walk(func(e *Event) bool {
		switch e.Cat {
		case CatCPUOp, CatRuntime, CatDriver, CatUserAnnotation:
			if !e.Pid.IsStr {
				pid = e.Pid.Num
				return false
			}
		}
		return true
	})
	return pid
}

// IsNCCLKernel reports whether a kernel name is one of NCCL's, in every naming era
// (ncclKernel_…, ncclDevKernel_…, ncclAllReduceRingLLKernel_… before 2.9).
func IsNCCLKernel(name string) bool {
	if !strings.HasPrefix(name, "nccl") {
		return false
	}
	rest := name[4:]
	if strings.HasPrefix(rest, "Kernel_") || strings.HasPrefix(rest, "DevKernel_") {
		return true
	}
	// nccl<Func...>Kernel_ (NCCL ≤ 2.8)
	if len(rest) > 0 && rest[0] >= 'A' && rest[0] <= 'Z' {
		if k := strings.Index(rest, "Kernel_"); k > 0 && !strings.ContainsAny(rest[:k], "(<_ ") {
			return true
		}
	}
	return false
}

// IsLaunch reports whether a runtime or driver call launches a kernel (the call whose
// correlation names the GPU kernel).
func IsLaunch(name string) bool {
	if strings.HasPrefix(name, "cudaLaunchHostFunc") {
		return false
	}
	return strings.HasPrefix(name, "cudaLaunch") || strings.HasPrefix(name, "cuLaunch") ||
		strings.HasPrefix(name, "hipLaunch") || strings.HasPrefix(name, "hipExtLaunch") ||
		strings.HasPrefix(name, "hipModuleLaunch")
}

// IsGraphLaunch reports whether a call replays a CUDA graph (its kernels share its correlation).
func IsGraphLaunch(name string) bool {
	return strings.HasPrefix(name, "cudaGraphLaunch") || strings.HasPrefix(name, "cuGraphLaunch")
}
