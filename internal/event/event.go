// Package event is the version-free model of what the plugin recorded: one Record per NCCL
// profiler event, whatever ABI version delivered it. The plugin's C adapters produce these
// (through np_export); aggregation, metrics and the trace consume them.
package event

import "fmt"

// Type is the internal event type. Values match the C side (NP_T_* in profiler/core.h):
// log2 of NCCL's type bit plus one.
type Type uint8

// Event types.
const (
	None Type = iota
	Group
	Coll
	P2p
	ProxyOp
	ProxyStep
	ProxyCtrl
	KernelCh
	NetPlugin
	GroupAPI
	CollAPI
	P2pAPI
	KernelLaunch
	CeColl
	CeSync
	CeBatch
	// Late carries a stop or a state for an event whose window was already processed.
	Late
)

var typeNames = [...]string{"None", "Group", "Coll", "P2p", "ProxyOp", "ProxyStep", "ProxyCtrl",
	"KernelCh", "NetPlugin", "GroupApi", "CollApi", "P2pApi", "KernelLaunch", "CeColl", "CeSync",
	"CeBatch", "Late"}

func (t Type) String() string {
	if int(t) < len(typeNames) {
		return typeNames[t]
	}
	return fmt.Sprintf("Type(%d)", uint8(t))
}

// Bit is NCCL's activation-mask bit for the type (0 for Late and None).
func (t Type) Bit() uint32 {
	if t == None || t >= Late {
		return 0
	}
	return 1 << (t - 1)
}

// Flags describe how an event was recorded (NP_F_* in profiler/core.h).
type Flags uint16

// Record flags.
const (
	// Foreign: a ProxyOp started for another process (PXN); its parent is not ours.
	Foreign Flags = 1 << iota
	// ParentStale: the parent handle was ours but its window had been read already (the
	// parent is carried over, or gone if it was a CUDA-graph capture-time handle).
	ParentStale
	// ParentDropped: the parent could not be recorded (windows full).
	ParentDropped
	// StopTwice: NCCL stopped the event more than once.
	StopTwice
	// AfterStop: a state arrived after the stop and was ignored.
	AfterStop
	// Open: the event had not stopped when its window was read.
	Open
	// Routed: recorded in its parent's closing window.
	Routed
	// NoOp: a ProxyStep whose ProxyOp was not recorded: its transfer has no pair or channel
	// and was not counted.
	NoOp
	// Sampled: sampled tracing (NCCLPROF_TRACE_SAMPLE) chose the operation, by its seq (P2P:
	// its ordinal) % N == 0; its ProxyOps and steps carry the mark too.
	Sampled
	// Triggered: one of the operations traced in full after a slow one (the trigger).
	Triggered
	// Mark: a P2p record, or a CollApi/P2pApi captured in a CUDA graph (also bit 30 of its
	// handle, for the plugin's own use: profiler/core.h NP_F_MARK).
	Mark
)

// Step state cells (Record.States for ProxyStep), in NCCL's order of occurrence.
const (
	SendGPUWait = iota
	SendPeerWait
	SendWait
	RecvWait
	RecvFlushWait
	RecvGPUWait
)

// StepCell maps an NCCL ProxyStep state to its cell in Record.States (as the C side does).
func StepCell(state uint32) (int, bool) {
	switch state {
	case 8:
		return SendGPUWait, true
	case 20:
		return SendPeerWait, true
	case 9:
		return SendWait, true
	case 10:
		return RecvWait, true
	case 11:
		return RecvFlushWait, true
	case 12:
		return RecvGPUWait, true
	}
	return 0, false
}

// NCCL event-state values (npabi_state_t) that records and late records carry.
const (
	StateProxyOpInProgress  = 19
	StateKernelChStop       = 22
	StateNetPluginUpdate    = 21
	StateGroupStartAPIStop  = 23
	StateGroupEndAPIStart   = 24
	StateProxyCtrlIdle      = 13
	StateProxyCtrlActive    = 14
	StateProxyCtrlSleep     = 15
	StateProxyCtrlWakeup    = 16
	StateProxyCtrlAppend    = 17
	StateProxyCtrlAppendEnd = 18
	// LateStop marks a late record that carries a stop rather than a state.
	LateStop = 0xffffffff
)

// Ticks is a reading of the hot path's counter (TSC, aarch64 virtual counter, or ns).
type Ticks uint64

// Record is one event. Fields that do not apply to its Type are zero.
type Record struct {
	Handle      uint64 // the handle NCCL was given; unique while the event can be referenced
	Parent      uint64 // parentObj as NCCL passed it
	ParentGroup uint64 // v5+: the Group event of a Coll/P2p (v1–v4: same as Parent)
	Type        Type
	ABI         uint8 // profiler API version that delivered the event
	Flags       Flags
	Start, Stop Ticks // Stop is 0 while Open
	TID         uint32
	Rank        int32
	NStates     uint32

	// Coll, P2p, CollApi, P2pApi, CeColl.
	Seq                            uint64
	Count                          uint64
	Func, Dtype, Algo, Proto, Sync string
	Root, Peer                     int32
	NChannels, NWarps              uint8
	Stream                         uint64
	Graph                          bool // graph captured (API events); intra-batch sync (CE)

	// ProxyOp, ProxyStep, KernelCh, NetPlugin.
	PID, NSteps, Chunk, Step     int32
	Channel                      uint8
	IsSend                       bool
	Progress                     Ticks    // ProxyOp: first InProgress (v4+) or first op state (v1–v3)
	Bytes                        uint64   // ProxyStep: transfer size; ProxyOp (v1–v3): cumulative; CeBatch: total
	XferN, StepsDone             uint32   // ProxyOp: its send transfers; its steps stopped
	XferBytes, XferTime          uint64   // ProxyOp: its transfers' bytes and Σ ticks (SendWait → stop)
	States                       [6]Ticks // ProxyStep cells; ProxyCtrl first/last; GroupApi start-stop/end-start
	PeerWaits                    uint16
	PTimerStart, PTimerStop      uint64 // KernelCh: GPU globaltimer ns
	Aux                          Ticks  // KernelCh: stop-state time; NetPlugin: first update
	NetID                        int64
	NetPayload                   [40]byte
	N                            int32 // NetPlugin updates; ProxyCtrl appended ops; GroupApi depth; CeSync ranks; CeBatch ops
	FirstState, LastState        uint8 // ProxyCtrl
	CeSeq, BatchSize, NumBatches uint32

	// Late.
	LateTarget         uint64
	LateState          uint32
	LateArg0, LateArg1 uint64
	LateArgs           uint8 // 0: none, 1: LateArg0 is the value, 2: LateArg0 is a cumulative total
}

// IsHandle reports whether v is a handle the plugin issued (bit 0 set), as opposed to a
// sentinel or a foreign pointer.
func IsHandle(v uint64) bool { return v&1 == 1 }

// HandleMarked reports whether h is a window record's handle carrying the plugin's mark (bit
// 30, NP_F_MARK in profiler/core.h): a P2p; a CollApi or P2pApi captured in a CUDA graph.
func HandleMarked(h uint64) bool { return h&3 == 1 && h>>30&1 == 1 }

// HandleComm is the communicator index encoded in a handle.
func HandleComm(h uint64) uint32 { return uint32(h >> 54) }

// DtypeSize is the size in bytes of an NCCL datatype name. NCCL reports ncclUint8 as
// "Unknown"; unknown names count as one byte.
func DtypeSize(name string) uint64 {
	switch name {
	case "ncclInt32", "ncclUint32", "ncclFloat32":
		return 4
	case "ncclInt64", "ncclUint64", "ncclFloat64":
		return 8
	case "ncclFloat16", "ncclBfloat16":
		return 2
	default:
		return 1
	}
}

// ApplyLate applies a Late record (a stop or a state that arrived after the event's window was
// read) to the carried-over event, the way the C side applies them in place. It reports
// whether the event is now stopped.
func (r *Record) ApplyLate(l *Record) bool {
	if l.LateState == LateStop {
		r.Stop = l.Start
		r.Flags &^= Open
		if r.Type == ProxyOp { // what its arena cell gathered until the stop
			r.Progress, r.Bytes = l.Progress, l.Bytes
			r.XferN, r.XferBytes, r.XferTime, r.StepsDone = l.XferN, l.XferBytes, l.XferTime, l.StepsDone
		}
		return true
	}
	r.NStates++
	switch r.Type {
	case KernelCh:
		if l.LateState == StateKernelChStop {
			r.Aux = l.Start
			if l.LateArgs != 0 {
				r.PTimerStop = l.LateArg0
			}
		}
	case GroupAPI:
		switch l.LateState {
		case StateGroupStartAPIStop:
			r.States[0] = l.Start
		case StateGroupEndAPIStart:
			r.States[1] = l.Start
		}
	case ProxyCtrl:
		if r.States[0] == 0 {
			r.States[0], r.FirstState = l.Start, uint8(l.LateState)
		}
		r.States[1], r.LastState = l.Start, uint8(l.LateState)
		if l.LateState == StateProxyCtrlAppendEnd && l.LateArgs != 0 {
			r.N = int32(l.LateArg0)
		}
	case NetPlugin:
		if r.Aux == 0 {
			r.Aux = l.Start
		}
		r.N++
	}
	return false
}

// Level orders event types so that parents come before their children: API events, then
// launches and Coll/P2p, then ProxyOps and KernelCh, then steps. Late records come first, since
// they finish events of earlier windows.
func (t Type) Level() int {
	switch t {
	case Late:
		return 0
	case GroupAPI, Group:
		return 1
	case CollAPI, P2pAPI, KernelLaunch:
		return 2
	case Coll, P2p, CeColl:
		return 3
	case ProxyOp, KernelCh, CeSync, CeBatch:
		return 4
	case ProxyStep:
		return 5
	default:
		return 6
	}
}

const levels = 7

// ParentsFirst calls f on every record, all records of one Level before any of the next, each
// level in slice order (slots are claimed roughly in time order). A window's records are not
// in parent order, because each thread fills its own block of slots; a pass per level orders
// them without moving the (large) records.
func ParentsFirst(recs []Record, f func(*Record)) {
	var present [levels]bool
	for i := range recs {
		present[recs[i].Type.Level()] = true
	}
	for l := 0; l < levels; l++ {
		if !present[l] {
			continue
		}
		for i := range recs {
			if recs[i].Type.Level() == l {
				f(&recs[i])
			}
		}
	}
}
