// Package hang is the plugin's in-flight dump — what every rank had open inside NCCL when the job
// stopped moving — and the analysis that names the rank, the operation and the link to blame.
//
// One file per process, ncclprof-hang-<host>-<pid>.json, written by the plugin (Write) when an
// operation has been in flight for NCCLPROF_HANG_TIMEOUT_S, rewritten every period while the hang
// lasts, and on request (ncclprof_dump_inflight). The format is specified in docs/hang.md; the
// types below are that specification in Go, and Marshal gives the exact bytes of a file.
package hang

import (
	"fmt"
	"regexp"

	"github.com/ncclprof/ncclprof/internal/collective"
	"github.com/ncclprof/ncclprof/internal/event"
)

// Version is the format version this package writes and reads (ncclprof_hang_version).
const Version = 1

// Reasons a dump was written.
const (
	ReasonTimeout = "timeout" // an operation was in flight longer than the timeout
	ReasonRequest = "request" // ncclprof_dump_inflight() was called
)

// Kinds of operation.
const (
	KindColl = "coll"
	KindP2p  = "p2p"
)

// Directions of a ProxyOp.
const (
	Send = "send"
	Recv = "recv"
)

// ProxyStep states, named as NCCL's profiler API names them (ncclProfilerProxyStep*), in the order
// net.cc records them: a send step waits for the GPU to fill its buffer (SendGPUWait), for the
// receiver to have posted a buffer (SendPeerWait: isend returned no request), for the network to
// complete it (SendWait); a receive step waits for the data (RecvWait), for the flush of GPU
// Direct RDMA (RecvFlushWait), for the GPU to consume it (RecvGPUWait).
const (
	SendGPUWait   = "SendGPUWait"
	SendPeerWait  = "SendPeerWait"
	SendWait      = "SendWait"
	RecvWait      = "RecvWait"
	RecvFlushWait = "RecvFlushWait"
	RecvGPUWait   = "RecvGPUWait"
)

// stepCellNames are the states' names by their cell in event.Record.States.
var stepCellNames = [...]string{
	event.SendGPUWait: SendGPUWait, event.SendPeerWait: SendPeerWait, event.SendWait: SendWait,
	event.RecvWait: RecvWait, event.RecvFlushWait: RecvFlushWait, event.RecvGPUWait: RecvGPUWait,
}

var stepStates = map[string]string{
	SendGPUWait: Send, SendPeerWait: Send, SendWait: Send,
	RecvWait: Recv, RecvFlushWait: Recv, RecvGPUWait: Recv,
}

// StepState maps NCCL's numeric ProxyStep state (ncclProfilerEventState_t) to its name; ok is false
// for values that are not ProxyStep states.
func StepState(v int) (name string, ok bool) {
	if v < 0 {
		return "", false
	}
	cell, ok := event.StepCell(uint32(v))
	if !ok {
		return "", false
	}
	return stepCellNames[cell], true
}

// Dump is one process's in-flight state.
type Dump struct {
	FormatVersion int    `json:"ncclprof_hang_version"`
	Host          string `json:"host"`
	PID           int    `json:"pid"`
	PluginVersion string `json:"plugin_version"`
	// Simulated: written from the test host that stands in for NCCL (NCCLPROF_SIMULATED=1).
	Simulated bool   `json:"simulated"`
	Reason    string `json:"reason"`
	// TimeoutS is NCCLPROF_HANG_TIMEOUT_S (0: the watchdog is off; the dump was requested).
	TimeoutS float64 `json:"timeout_s"`
	// EventMask is NCCL's activation mask (NCCL's bits): it says which events could be seen, e.g.
	// whether KernelCh (1<<6) was recorded at all.
	EventMask     int   `json:"event_mask"`
	WrittenUnixNs int64 `json:"written_unix_ns"`
	// FirstDetectedUnixNs: when the watchdog first found an operation past the timeout in this
	// hang (0: nothing was, as in a requested dump of a healthy process).
	FirstDetectedUnixNs int64  `json:"first_detected_unix_ns"`
	DumpsWritten        int    `json:"dumps_written"` // this one included
	Health              Health `json:"health"`
	Comms               []Comm `json:"comms"`
}

// Health says whether the plugin's own view is complete: with Partial, an operation or state may be
// missing from the dump because the plugin could not record it.
type Health struct {
	Partial bool `json:"partial"` // set by Write when any counter below is not 0
	// EventsDropped: events NCCL delivered that the plugin dropped since it started (windows full).
	EventsDropped uint64 `json:"events_dropped"`
	// CommsNotTracked: communicators beyond the plugin's table (their operations are not here).
	CommsNotTracked uint64 `json:"comms_not_tracked"`
	// OpsNotListed: open operations or ProxyOps left out of this file to bound its size.
	OpsNotListed uint64 `json:"ops_not_listed"`
}

// Comm is one communicator of the process, as NCCL gave it to the plugin's init.
type Comm struct {
	Hash   string `json:"comm_hash"` // "0x" and 16 hex digits, the same on every rank
	Name   string `json:"name"`
	Rank   int    `json:"rank"`
	NRanks int    `json:"nranks"`
	NNodes int    `json:"nnodes"`
	ABI    int    `json:"abi_version"` // the profiler ABI NCCL drives the plugin with (1-6)
	// Completed counts, per collective function, the operations this rank completed and the
	// last one's seq. NCCL numbers collectives per (communicator, function), so the seq of an
	// AllReduce and that of an AllGather are unrelated.
	Completed []Completed `json:"completed"`
	// P2pCompleted counts, per peer, the sends and receives completed (the plugin's ordinals).
	P2pCompleted []P2pCompleted `json:"p2p_completed"`
	OpsCompleted uint64         `json:"ops_completed"` // every kind together
	// Recent is the flight record: the last operations (at most FlightRecord) this rank
	// completed on the communicator, in the order they completed. With the open operations it
	// shows what each rank called at the point where the ranks stopped agreeing.
	Recent []Call `json:"recent_ops"`
	Open   []Op   `json:"open_ops"` // oldest first
}

// FlightRecord is how many completed operations per communicator a dump lists (recent_ops):
// enough to show the last operation the ranks agree on, bounded so a dump stays small.
const FlightRecord = 16

// Call is an operation as the application called it: what ranks must agree on. Root is set for
// the collectives that have one (Broadcast, Reduce), Peer for point-to-point operations. NCCL's
// profiler API gives no reduction operator (no descriptor of ABI v1-v6 has one), so a dump
// cannot carry it.
type Call struct {
	Kind        string `json:"kind"` // coll or p2p
	Func        string `json:"func"`
	Seq         int64  `json:"seq"`                    // as Op.Seq
	Repeat      int64  `json:"repeat,omitempty"`       // as Op.Repeat
	GraphReplay bool   `json:"graph_replay,omitempty"` // as Op.GraphReplay
	Peer        *int   `json:"peer,omitempty"`
	Count       uint64 `json:"count"`
	Datatype    string `json:"datatype"`
	Root        *int   `json:"root,omitempty"`
}

// place is where the call stands among its function's collectives.
func (c *Call) place() collective.Place {
	return collective.Place{Seq: c.Seq, Replay: c.GraphReplay, Repeat: c.Repeat}
}

// Equal says whether two calls are the same in every field.
func (c Call) Equal(d Call) bool {
	return c.Kind == d.Kind && c.Func == d.Func && c.place() == d.place() && c.Count == d.Count && c.Datatype == d.Datatype &&
		eqPtr(c.Peer, d.Peer) && eqPtr(c.Root, d.Root)
}

func eqPtr(a, b *int) bool { return a == nil && b == nil || a != nil && b != nil && *a == *b }

// Rooted says whether a collective function has a root rank that every rank must agree on.
func Rooted(fn string) bool { return fn == "Broadcast" || fn == "Reduce" }

// Completed is the progress of one collective function on one rank: the operations completed
// (Replays of them a CUDA graph's replays) and the furthest of them, in the order NCCL runs
// them (a seq's replays before its eager collective: collective.Place).
type Completed struct {
	Func       string `json:"func"`
	Ops        uint64 `json:"ops"`
	Replays    uint64 `json:"replays,omitempty"`
	LastSeq    int64  `json:"last_seq"`
	LastRepeat int64  `json:"last_repeat,omitempty"`       // as Op.Repeat
	LastReplay bool   `json:"last_graph_replay,omitempty"` // as Op.GraphReplay
}

// P2pCompleted is the progress of point-to-point operations with one peer.
type P2pCompleted struct {
	Peer  int    `json:"peer"`
	Sends uint64 `json:"sends"`
	Recvs uint64 `json:"recvs"`
}

// Op is one operation still open on the rank: started (its Coll or P2p event) and not complete
// (a ProxyOp or KernelCh child still open, or none seen yet).
type Op struct {
	Kind string `json:"kind"` // coll or p2p
	Func string `json:"func"`
	// Seq: for a collective NCCL's seq; for P2P the plugin's own ordinal of this (communicator,
	// peer, direction), from 0, since NCCL gives P2P no seq.
	Seq int64 `json:"seq"`
	// Repeat: for a collective, how many of its function's collectives of its kind (graph
	// replays, or eager) on the communicator came with the same seq right before it (0: the
	// first; absent when 0). NCCL gives every replay of a CUDA graph's collective the seq of the
	// next eager one (2.26+, unless KernelCh is on), so (seq, graph_replay, repeat) is what tells
	// one replay from the next, and the replays from the eager collective that shares their seq.
	// Dumps written before they were added have neither (all eager, repeat 0).
	Repeat int64 `json:"repeat,omitempty"`
	// GraphReplay: one of a CUDA graph's replays (its API call was captured; ABI v5+).
	GraphReplay bool `json:"graph_replay,omitempty"`
	Peer        *int `json:"peer,omitempty"` // P2P only
	// Root: rooted collectives only (Rooted), as NCCL's Coll event gives it.
	Root *int `json:"root,omitempty"`
	// As NCCL's Coll/P2p event gives them.
	Count     uint64 `json:"count"`
	Datatype  string `json:"datatype"`
	Algorithm string `json:"algorithm"`
	Protocol  string `json:"protocol"`
	NChannels int    `json:"nchannels"`
	// StartUnixNs: the Coll/P2p start; AgeNs: the dump's time minus that (set by Write).
	StartUnixNs int64 `json:"start_unix_ns"`
	AgeNs       int64 `json:"age_ns"`
	// Launched: a KernelLaunch event was seen for it (ABI v5+; absent on older ABIs).
	Launched *bool `json:"launched,omitempty"`
	// Kernel lists the channels whose KernelCh event started (the GPU began the channel's work).
	Kernel []KernelCh `json:"kernel_channels"`
	// Proxy lists the operation's ProxyOps (network work), stopped ones included.
	Proxy []ProxyOp `json:"proxy_ops"`
}

// KernelCh is one channel of the operation's kernel.
type KernelCh struct {
	Channel     int   `json:"channel"`
	Started     bool  `json:"started"`
	Stopped     bool  `json:"stopped"`
	StartUnixNs int64 `json:"start_unix_ns"` // when the plugin heard of the start
	// GPUStartNs and GPUStopNs are the GPU's %globaltimer (ABI v4+; 0: not known).
	GPUStartNs uint64 `json:"gpu_start_ns"`
	GPUStopNs  uint64 `json:"gpu_stop_ns"`
}

// ProxyOp is the network work of one channel with one peer in one direction.
type ProxyOp struct {
	Channel     int    `json:"channel"`
	Peer        int    `json:"peer"`
	Direction   string `json:"direction"` // send or recv
	NSteps      int    `json:"nsteps"`
	StepsDone   int    `json:"steps_done"` // steps stopped, in order (net.cc completes them in order)
	StartUnixNs int64  `json:"start_unix_ns"`
	Stopped     bool   `json:"stopped"`
	// State is the ProxyOp's own latest state, which NCCL before 2.27 (ABI v1-v3) records
	// (OpStates); absent from 2.27 on. Before 2.27 a send refused for want of a receive buffer
	// shows it only here: SendRemFifoWait, its step still in SendGPUWait (see peerWaitOf).
	State string `json:"state,omitempty"`
	// Open lists the steps started and not stopped (at most NCCL_STEPS, 8), oldest first.
	Open []Step `json:"open_steps"`
}

// ProxyOp states of NCCL before 2.27 (ncclProfilerProxyOp*, ABI v1-v3), by their value.
var OpStates = [...]string{"SendPosted", "SendRemFifoWait", "SendTransmitted", "SendDone",
	"RecvPosted", "RecvReceived", "RecvTransmitted", "RecvDone"}

// SendRemFifoWait: net.cc's sendProxyProgress (v2.23.4-1 to v2.26.6-1) records it on the ProxyOp
// before each isend try of a step whose data is ready, and SendTransmitted once one is taken.
const SendRemFifoWait = "SendRemFifoWait"

// OpState names a ProxyOp state of ABI v1-v3; ok is false for any other value.
func OpState(v int) (name string, ok bool) {
	if v < 0 || v >= len(OpStates) {
		return "", false
	}
	return OpStates[v], true
}

// Step is a ProxyStep in flight and the state it is in.
type Step struct {
	Step        int    `json:"step"`
	State       string `json:"state"`
	SinceUnixNs int64  `json:"since_unix_ns"` // when it entered that state
}

// Call is the operation as the application called it (what ranks must agree on).
func (o *Op) Call() Call {
	return Call{Kind: o.Kind, Func: o.Func, Seq: o.Seq, Repeat: o.Repeat, GraphReplay: o.GraphReplay, Peer: o.Peer, Count: o.Count, Datatype: o.Datatype, Root: o.Root}
}

// Head is the oldest open step of the ProxyOp (nil: none open).
func (p *ProxyOp) Head() *Step {
	if len(p.Open) == 0 {
		return nil
	}
	return &p.Open[0]
}

var hashRE = regexp.MustCompile(`^0x[0-9a-f]{16}$`)

// FormatHash writes a communicator hash as dumps carry it.
func FormatHash(h uint64) string { return fmt.Sprintf("0x%016x", h) }
