// Package ptrace reads the ncclprof plugin's trace (docs/trace-format.md): the header, the
// communicators, and every NCCL event with its handles and type-specific arguments. A file cut
// anywhere (a job killed mid-write) is read up to its last complete event, as Perfetto does.
//
// It also reads the output of NCCL's example profiler plugin (a bare array of async b/e
// events, with unquoted values in NCCL 2.28–2.29.2 and a {} sentinel), whose times are relative
// to the plugin's start and whose threads are not real: such a trace is marked Unanchored.
package ptrace

import (
	"bytes"
	"fmt"
	"math"
	"strings"

	"github.com/ncclprof/ncclprof/internal/jsonscan"
	"github.com/ncclprof/ncclprof/internal/traceevent"
	"github.com/ncclprof/ncclprof/internal/tracefile"
	"github.com/tidwall/gjson"
)

// Kind is the NCCL event type of a slice.
type Kind uint8

// Event kinds (docs/trace-format.md, "Slices").
const (
	KindOther Kind = iota
	GroupAPI
	CollAPI
	P2pAPI
	KernelLaunch
	Group
	Coll
	P2p
	ProxyOp
	ProxyStep
	StepState
	ProxyCtrl
	KernelCh
	Net
	CeColl
	CeSync
	CeBatch
	Completion
)

var kindNames = [...]string{"Other", "GroupApi", "CollApi", "P2pApi", "KernelLaunch", "Group", "Coll",
	"P2p", "ProxyOp", "ProxyStep", "StepState", "ProxyCtrl", "KernelCh", "NetPlugin", "CeColl", "CeSync",
	"CeBatch", "Completion"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", k)
}

// kindOf classifies a slice by its category (and name where a category holds several types).
func kindOf(cat, name string) Kind {
	switch cat {
	case "nccl_api":
		switch name {
		case "ncclGroup":
			return GroupAPI
		case "ncclSend", "ncclRecv":
			return P2pAPI
		}
		return CollAPI
	case "nccl_launch":
		return KernelLaunch
	case "nccl_group":
		return Group
	case "nccl_coll":
		return Coll
	case "nccl_p2p":
		return P2p
	case "nccl_proxy":
		return ProxyOp
	case "nccl_step":
		return ProxyStep
	case "nccl_step_state":
		return StepState
	case "nccl_ctrl":
		return ProxyCtrl
	case "nccl_gpu":
		return KernelCh
	case "nccl_net":
		return Net
	case "nccl_ce":
		switch name {
		case "CeSync":
			return CeSync
		case "CeBatch":
			return CeBatch
		}
		return CeColl
	case "nccl_op":
		return Completion
	}
	return KindOther
}

// Event is one event of the plugin trace: the standard fields (times in Unix ns) and the NCCL
// arguments ncclmerge links by.
type Event struct {
	traceevent.Event
	Fields
}

// Fields are what an Event adds to the standard fields.
type Fields struct {
	Kind Kind
	// Start and End are Unix ns (Trace.Base + ts).
	Start, End int64

	ID, Parent uint64 // handles ("0x…")
	Comm       uint64
	Rank       int
	Func       string
	Datatype   string
	Count      uint64
	Bytes      uint64
	Seq        int64 // NCCL's per-(communicator, function) sequence number; -1 when absent
	Algo       string
	Proto      string
	NChannels  int
	Channel    int
	Peer       int
	GroupAPI   uint64 // KernelLaunch: the GroupApi handle
	Group      uint64 // Coll/P2p: the Group (ncclGroupLaunch) handle
	Op         uint64 // KernelCh, completion: the Coll/P2p handle
	GPUStart   int64  // KernelCh: raw %globaltimer ns
	GPUStop    int64
	Graph      bool  // API events: captured in a CUDA graph; completion: one of a graph's replays
	IsSend     bool  // ProxyOp: a send (else a receive)
	TransSize  int64 // ProxyOp, ProxyStep: the bytes it moves (trans_size)
	// Traced: why a sampled trace holds the operation (Coll/P2p, completion): "sampled" (its seq
	// % N == 0), "triggered" (after a slow one), "trigger" (the slow one: its completion span
	// only); "" in a full trace.
	Traced string
}

// Comm is a communicator as the plugin saw it (ncclprof_comm).
type Comm struct {
	Hash       uint64
	Name       string
	Rank       int
	NRanks     int
	NNodes     int
	ABI        int
	LocalIndex int
}

// Clock is how the plugin converted CPU timestamps (ncclprof.clock), with the writer's field
// names (drainer/trace.go clockInfo, align.Info).
type Clock struct {
	Source       string  // "tsc", "cntvct" or "monotonic"
	NsPerTick    float64 // ns_per_tick: the converter's rate, Unix ns per counter tick
	Anchors      int     // anchors: (counter, CLOCK_REALTIME) anchors held when the header was written
	ErrorBoundNs int64   // error_bound_ns, rounded up to whole ns
	ClockSteps   int     // clock_steps: CLOCK_REALTIME steps seen (each restarts the anchors)
}

// GPUClock is the plugin's own estimate of %globaltimer → Unix ns (ncclprofEnd.gpu_clock).
type GPUClock struct {
	Method        string
	OffsetNs      int64
	DriftPPM      float64
	Samples       int
	UncertaintyNs int64
}

// Trace is a plugin trace.
type Trace struct {
	*traceevent.Doc

	Format    int
	Version   string
	Host      string
	Pid       int64
	Simulated bool
	Base      int64
	Clock     Clock
	// Complete: the file has ncclprofEnd with complete:true (a clean finalize).
	Complete bool
	// SampleEvery: N of a sampled trace (NCCLPROF_TRACE_SAMPLE: 1 in N operations per
	// communicator, ncclprof.sampling); 0 for a full trace.
	SampleEvery int
	GPUClock    GPUClock
	Comms       []Comm
	// Unanchored: times are relative to the plugin's start with no tie to Unix time (NCCL's
	// example plugin); ncclmerge must estimate the offset.
	Unanchored bool
	// Events holds every event in file order.
	Events []Event
}

// Comm returns the communicator with the given hash.
func (t *Trace) Comm(hash uint64) (Comm, bool) {
	for _, c := range t.Comms {
		if c.Hash == hash {
			return c, true
		}
	}
	return Comm{}, false
}

const syntaxHint = "the file is not valid JSON; check that it is a trace written by the ncclprof plugin"

// Read loads a plugin trace.
func Read(path string) (*Trace, error) {
	data, err := tracefile.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// Parse reads a plugin trace held in memory.
func Parse(path string, data []byte) (*Trace, error) {
	return ParseLean(path, data, nil)
}

// ReadLean reads a plugin trace keeping in Events only what drop declines: drop sees every
// event decoded (the Event is reused: copy what it keeps; its Start and End are still relative
// to the base) and returns true for those it has taken what it needs from. A reader that only counts most events (proxy steps, network
// events…) holds a fraction of the memory of the file's events (an Event is about 450 bytes,
// twice the text it comes from). Doc.Events still counts every event, and Doc.Walk visits them
// all again. A large plain file is mapped rather than copied (tracefile.MapFile): the merge,
// the only caller, holds its plugin traces to its end.
func ReadLean(path string, drop func(*Event) bool) (*Trace, error) {
	data, err := tracefile.MapFile(path)
	if err != nil {
		return nil, err
	}
	return parseLean(path, data, drop, true)
}

// ParseLean is ReadLean on a trace held in memory (drop nil: keep every event).
func ParseLean(path string, data []byte, drop func(*Event) bool) (*Trace, error) {
	return parseLean(path, data, drop, false)
}

// parseLean reads with repair: replace bytes that are not UTF-8 in data (see traceevent).
func parseLean(path string, data []byte, drop func(*Event) bool, repair bool) (*Trace, error) {
	if looksLikeExamplePlugin(data) {
		return parseExample(path, data)
	}
	t := &Trace{Doc: &traceevent.Doc{Path: path}} // (a Doc for errors met while reading)
	var raw []Event
	if drop == nil {
		// Sized up front (every event has a "ph"): growing the slice by doubling would hold
		// two copies of it at once, each several times the file's size.
		raw = make([]Event, 0, bytes.Count(data, []byte(`"ph"`))+1)
	}
	// With drop, events are decoded on the goroutines that parse the file's chunks. The header
	// (and its base) may follow the events: times are made absolute at the end.
	parse := func(e *Event, doc string, start int) (int, error) {
		end, err := traceevent.Parse(&e.Event, doc, start)
		e.Fields = Fields{}
		if err == nil && drop != nil {
			err = t.decode(&e.Event, &e.Fields)
		}
		return end, err
	}
	kept := keptEvents{size: len(data)}
	visit := func(e *Event) error {
		if drop == nil {
			raw = append(raw, Event{Event: e.Event})
			return nil
		}
		if !drop(e) {
			kept.add(e)
		}
		return nil
	}
	// A lean reader's caller walks the file again (the merge's writer): LineRuns lets it skip
	// the args of the plugin's one-line events that time.
	opt := traceevent.Options{Truncated: true, Hint: syntaxHint, RepairUTF8: repair, LineRuns: drop != nil}
	doc, err := traceevent.ReadWith(path, data, opt,
		traceevent.Reader[Event]{Parse: parse, Event: func(e *Event) *traceevent.Event { return &e.Event }, Visit: visit})
	if err != nil {
		return nil, err
	}
	t.Doc = doc
	if err := t.readHeader(); err != nil {
		return nil, err
	}
	if drop != nil {
		raw = kept.done()
	}
	t.Events = raw
	for i := range t.Events {
		if drop != nil {
			e := &t.Events[i]
			e.Start, e.End = e.Start+t.Base, e.End+t.Base
			continue
		}
		if err := t.fill(&t.Events[i]); err != nil {
			return nil, err
		}
	}
	t.collectComms()
	return t, nil
}

// keptEvents gathers the events a lean reader keeps into one slice, copying each once where it
// can: in blocks until a sixteenth of the file is read, then into a slice sized from the share
// kept so far (a plugin trace repeats the same events operation after operation), any excess in
// blocks again. (A slice grown by appending copied them several times over, and gathering them
// all in blocks copied them twice: 75 MB of events with pointers, a tenth of reading an
// NCCL-heavy plugin trace.)
type keptEvents struct {
	size   int // bytes in the file
	n      int
	blocks [][]Event
	all    []Event
}

func (k *keptEvents) add(e *Event) {
	k.n++
	if k.all == nil && k.n >= 256 && e.Off > int64(k.size/16) {
		est := int(float64(k.n)*float64(k.size)/float64(e.Off)*1.1) + 1024
		k.all = make([]Event, 0, est)
		for _, b := range k.blocks {
			k.all = append(k.all, b...)
		}
		k.blocks = nil
	}
	if k.all != nil && len(k.all) < cap(k.all) {
		k.all = append(k.all, *e)
		return
	}
	if len(k.blocks) == 0 || len(k.blocks[len(k.blocks)-1]) == cap(k.blocks[len(k.blocks)-1]) {
		k.blocks = append(k.blocks, make([]Event, 0, 1024))
	}
	k.blocks[len(k.blocks)-1] = append(k.blocks[len(k.blocks)-1], *e)
}

// done returns the kept events, in order, in a slice at most an eighth larger than they are.
func (k *keptEvents) done() []Event {
	if len(k.blocks) == 0 && cap(k.all)-len(k.all) <= len(k.all)/8 {
		return k.all
	}
	out := make([]Event, 0, k.n)
	out = append(out, k.all...)
	for _, b := range k.blocks {
		out = append(out, b...)
	}
	return out
}

// Stream reads a trace that holds plugin events — a plugin trace, or ncclmerge's output of one
// rank or of all — without keeping them, so a large trace is read with the memory of the file
// alone. visit sees every event undecoded (the Event is reused between calls); it decodes the ones
// it wants with Decode, so the many it passes over cost no argument parsing. The Trace returned has
// the header where the file has one (Host, Pid, … stay zero otherwise), the base, the
// communicators (those announced before an event are known when it is visited) and no Events.
func Stream(path string, data []byte, opt traceevent.Options, visit func(t *Trace, e *traceevent.Event) error) (*Trace, error) {
	t := &Trace{Doc: &traceevent.Doc{Path: path}}
	opt.Truncated = true
	if opt.Hint == "" {
		opt.Hint = syntaxHint
	}
	doc, err := traceevent.Read(path, data, opt, func(e *traceevent.Event) error {
		if e.Ph == "M" && e.Name == "ncclprof_comm" {
			ev := Event{Event: *e}
			t.addComm(commOf(ev.ArgsResult()))
		}
		return visit(t, e)
	})
	if err != nil {
		return nil, err
	}
	t.Doc = doc
	if t.Member("ncclprof") != "" {
		if err := t.readHeader(); err != nil {
			return nil, err
		}
	} else if b := t.Member("baseTimeNanoseconds"); b != "" {
		t.Base, _ = jsonscan.Int(b)
	}
	return t, nil
}

// Decode fills out from a streamed event as Parse fills its events, except that Start and End are
// relative to the base (a merged trace may write its baseTimeNanoseconds after its events: add
// Trace.Base once Stream has returned).
func (t *Trace) Decode(e *traceevent.Event, out *Event) error {
	out.Event = *e
	return t.decode(e, &out.Fields)
}

// KindOf is the NCCL event type of a slice of the given category and name (KindOther for
// events that are not the plugin's).
func KindOf(cat, name string) Kind { return kindOf(cat, name) }

func (t *Trace) readHeader() error {
	base := t.Member("baseTimeNanoseconds")
	if base == "" {
		if t.Member("ncclprof") == "" {
			return t.Errorf(0, "pass the plugin's *.trace.json (NCCLPROF_TRACE_DIR), not a Kineto trace", "not an ncclprof trace: no ncclprof header")
		}
		return t.Errorf(0, "", "the ncclprof trace has no baseTimeNanoseconds")
	}
	var err error
	if t.Base, err = jsonscan.Int(base); err != nil {
		return t.Errorf(0, "", "baseTimeNanoseconds is not an integer: %s", traceevent.Clip(base))
	}
	// ncclmerge's output of a rank whose process wrote several plugin files (trace windows, a
	// sampled trace's rotated files) keeps their headers as an array: the process is the same.
	heads := headers(t.Member("ncclprof"))
	if len(heads) == 0 {
		return t.Errorf(0, "pass the plugin's *.trace.json (NCCLPROF_TRACE_DIR), not a Kineto trace", "not an ncclprof trace: no ncclprof header")
	}
	h := heads[0]
	for _, x := range heads {
		if n := x.Get("sampling.every").Int(); n > 0 && t.SampleEvery == 0 {
			t.SampleEvery = int(n)
		}
	}
	t.Format = int(h.Get("format").Int())
	if t.Format > 1 {
		return t.Errorf(0, "use an ncclmerge at least as new as the plugin", "plugin trace format %d is newer than this ncclmerge reads (1)", t.Format)
	}
	t.Version, t.Host, t.Pid = h.Get("version").Str, h.Get("host").Str, h.Get("pid").Int()
	t.Simulated = h.Get("simulated").Bool()
	c := h.Get("clock")
	t.Clock = Clock{Source: c.Get("source").Str, NsPerTick: c.Get("ns_per_tick").Float(),
		Anchors: int(c.Get("anchors").Int()), ErrorBoundNs: int64(math.Ceil(c.Get("error_bound_ns").Float())),
		ClockSteps: int(c.Get("clock_steps").Int())}
	ends := headers(t.Member("ncclprofEnd"))
	t.Complete = len(ends) > 0
	for _, end := range ends { // complete when every file is; the GPU clock of the last
		t.Complete = t.Complete && end.Get("complete").Bool()
		g := end.Get("gpu_clock")
		t.GPUClock = GPUClock{Method: g.Get("method").Str, OffsetNs: g.Get("offset_ns").Int(),
			DriftPPM: g.Get("drift_ppm").Float(), Samples: int(g.Get("samples").Int()),
			UncertaintyNs: g.Get("uncertainty_ns").Int()}
		end.Get("communicators").ForEach(func(_, v gjson.Result) bool {
			t.addComm(commOf(v))
			return true
		})
	}
	return nil
}

// headers are the objects of a header member: one, or an array of them (a merged rank).
func headers(raw string) []gjson.Result {
	v := gjson.Parse(raw)
	if v.IsObject() {
		return []gjson.Result{v}
	}
	var out []gjson.Result
	if v.IsArray() {
		for _, x := range v.Array() {
			if x.IsObject() {
				out = append(out, x)
			}
		}
	}
	return out
}

func commOf(v gjson.Result) Comm {
	h, _ := handle(v.Get("comm"))
	return Comm{Hash: h, Name: v.Get("name").Str, Rank: int(v.Get("rank").Int()),
		NRanks: int(v.Get("nranks").Int()), NNodes: int(v.Get("nnodes").Int()),
		ABI: int(v.Get("abi").Int()), LocalIndex: int(v.Get("local_index").Int())}
}

func (t *Trace) addComm(c Comm) {
	if _, ok := t.Comm(c.Hash); !ok {
		t.Comms = append(t.Comms, c)
	}
}

// collectComms adds the communicators announced by ncclprof_comm metadata events (a trace
// without ncclprofEnd has only those).
func (t *Trace) collectComms() {
	for i := range t.Events {
		e := &t.Events[i]
		if e.Ph == "M" && e.Name == "ncclprof_comm" {
			t.addComm(commOf(e.ArgsResult()))
		}
	}
}

// ArgsResult returns the event's args as a gjson value.
func (e *Event) ArgsResult() gjson.Result {
	if !e.ArgsSpan.Valid() {
		return gjson.Result{}
	}
	return gjson.Parse(e.Raw[e.ArgsSpan.Start:e.ArgsSpan.End])
}

// handle reads a "0x<hex>" handle (or a plain number).
func handle(v gjson.Result) (uint64, bool) {
	if !v.Exists() {
		return 0, false
	}
	raw := v.Raw
	if v.Type == gjson.String {
		raw = v.Str
	}
	h, err := jsonscan.Uint(raw)
	return h, err == nil
}

// fill sets the NCCL fields of an event from its category and args.
func (t *Trace) fill(e *Event) error {
	if err := t.decode(&e.Event, &e.Fields); err != nil {
		return err
	}
	e.Start += t.Base
	e.End += t.Base
	return nil
}

// decode sets f from the category and args of e, with times relative to the base. It reads
// nothing but its arguments (and the Doc's path, for errors): it runs on parsing goroutines.
func (t *Trace) decode(e *traceevent.Event, f *Fields) error {
	*f = Fields{Seq: -1, Start: e.Ts, End: e.Ts + e.Dur}
	if e.Ph != "X" {
		return nil
	}
	if !e.HasTs {
		return t.Errorf(int(e.Off), "", "slice %q has no ts", e.Name)
	}
	f.Kind = kindOf(e.Cat, e.Name)
	if e.ArgsSpan.Valid() {
		if bad := f.fillArgs(e.Raw[e.ArgsSpan.Start:e.ArgsSpan.End]); bad != "" {
			return t.Errorf(int(e.Off), "", "slice %q: args.%s is not a handle (\"0x…\")", e.Name, bad)
		}
	}
	if f.Func == "" && (f.Kind == Coll || f.Kind == P2p || f.Kind == CollAPI || f.Kind == P2pAPI) {
		// The name carries the function where args do not (ncclAllReduce, Send).
		f.Func = strings.TrimPrefix(e.Name, "nccl")
	}
	return nil
}
