// Package commops reads the NCCL operations out of any trace that ncclprof or ncclmerge writes —
// the plugin's trace of one process, ncclmerge's merged output of one rank or of all ranks — into
// one flat list that the analyses (stats, skew, pprof, report) share: which process ran which
// operation of which communicator, when it arrived and completed, its size and time, its training
// step, and where it is in the trace.
package commops

import (
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/ncclprof/ncclprof/internal/parallel"
	"github.com/ncclprof/ncclprof/internal/ptrace"
	"github.com/ncclprof/ncclprof/internal/traceevent"
	"github.com/ncclprof/ncclprof/internal/words"
)

// Source says where an operation's time comes from.
type Source uint8

const (
	// NoTime: only the enqueue is known (no network or KernelCh child: intra-node without
	// KernelCh, self send/recv), or the trace was cut before the operation completed.
	NoTime Source = iota
	// Completion: the plugin's completion span, Coll/P2p start → its last ProxyOp or KernelCh stop.
	Completion
	// Kernel: the GPU kernel ncclmerge linked to the operation (torch.profiler's kernel duration),
	// what nccl-tests times.
	Kernel
)

func (s Source) String() string {
	return [...]string{"none", "completion", "kernel"}[s]
}

// Traced says why an operation is in its trace: every operation is in a full trace; a sampled
// trace (the plugin's NCCLPROF_TRACE_SAMPLE=N) holds 1 in N of them, chosen alike on every rank,
// plus those its trigger added around a slow one.
type Traced uint8

const (
	// Full: from a full trace, where every operation is.
	Full Traced = iota
	// Sampled: chosen by seq (P2P: ordinal) % N == 0; it stands for N operations.
	Sampled
	// Triggered: traced in full because an operation before it was slow. Not part of the
	// uniform sample: it stands for no other operation.
	Triggered
	// Trigger: the slow operation itself, kept though not sampled (its completion span only).
	Trigger
)

func (t Traced) String() string {
	return [...]string{"full", "sampled", "triggered", "trigger"}[t]
}

// tracedOf reads a slice's args.traced.
func tracedOf(s string) Traced {
	switch s {
	case "sampled":
		return Sampled
	case "triggered":
		return Triggered
	case "trigger":
		return Trigger
	}
	return Full
}

// Ref is where a slice is in its trace, in the terms Perfetto shows: the file, the pid and tid
// as written, and ts as written (µs relative to the file's base) in ns.
type Ref struct {
	File     int32
	Pid, Tid int64
	TsNs     int64
}

// Leg is one channel's share of an operation's work, with the peer it sent to (-1: unknown, as
// for a KernelCh).
type Leg struct {
	Channel, Peer int32
}

// Op is one NCCL operation on one rank.
type Op struct {
	Proc      int32 // index in Set.Procs
	Comm      int32 // index in Set.Comms
	Rank      int32 // rank in the communicator
	Func      string
	Algo      string
	Proto     string
	Seq       int64 // NCCL's per-(communicator, function) sequence number; -1 for P2P
	Peer      int32 // P2P peer; -1 otherwise
	NChannels int32
	Count     uint64
	Bytes     uint64 // nccl-tests' size
	// Arrive is when the operation reached NCCL on this rank (its Coll/P2p start), Done when it
	// completed (0: unknown), both Unix ns.
	Arrive, Done int64
	// Time is the duration bandwidth is computed from (ns; 0 when Source is NoTime).
	Time   int64
	Source Source
	Step   int32 // index in Set.Steps of the step label current at Arrive; -1: none
	Ref    Ref   // the slice that shows the operation: its kernel, else its completion span
	Legs   []Leg // with Options.Legs: its channels (and peers) in order
	// Traced: why its trace holds it; Every: N of its sampled trace (0 in a full trace).
	Traced Traced
	Every  int32
	// GPUArrive is when the operation started on its GPU (Unix ns; 0: not known), from GPUFrom.
	// In a PyTorch job the CPU enqueues collectives ahead of the GPU: a rank whose GPU is behind
	// calls NCCL on time while the other ranks' kernels wait for its kernel.
	GPUArrive int64
	GPUFrom   GPUSource
	// GraphReplay: one of a CUDA graph's replays (its completion says graph_replay). NCCL gives
	// replays the seq of the next eager collective (2.26+) and starts them only on ranks whose
	// part of the graph has proxy work, so they are matched apart from eager collectives.
	GraphReplay bool
	// Repeat: a collective's place among its rank's collectives of its function and kind
	// (GraphReplay) that came with its seq back to back (0: the first; NumberRepeats). The same
	// collective has the same (seq, GraphReplay, Repeat) on every rank that sees it.
	Repeat int32
	// Handle is the plugin's handle of its Coll/P2p, unique in its process.
	Handle uint64
}

// GPUSource says where an operation's GPU-side arrival comes from, best first.
type GPUSource uint8

const (
	// NoGPU: not known.
	NoGPU GPUSource = iota
	// FromKernel: the start of the Kineto kernel ncclmerge linked to it.
	FromKernel
	// FromKernelCh: its earliest KernelCh start, placed by the plugin's GPU clock estimate.
	FromKernelCh
	// FromSendGPUWait: its earliest release from SendGPUWait (the proxy saw the GPU's data
	// ready to send): later than the kernel's start by the time the kernel took to fill a slot.
	FromSendGPUWait
)

func (g GPUSource) String() string {
	return [...]string{"none", "kernel", "kernelch", "send_gpu_wait"}[g]
}

// better reports whether a GPU arrival from g should replace one from h.
func (g GPUSource) better(h GPUSource) bool { return h == NoGPU || g != NoGPU && g < h }

// Weight is how many operations o stands for in counts and totals: 1 from a full trace, N when
// a sampled trace chose it (1 in N), and 0 when the trigger added it (the operations around a
// slow one are not a uniform sample: counting them would overweight slow moments).
func (o *Op) Weight() int64 {
	switch o.Traced {
	case Full:
		return 1
	case Sampled:
		return int64(max(o.Every, 1))
	}
	return 0
}

// Proc is one process (one rank's NCCL).
type Proc struct {
	Files     []string
	Host      string
	Pid       int64
	Rank      int // rank in the largest communicator it took part in (-1: none seen)
	Truncated bool
	Ops       int
}

// Comm is a communicator.
type Comm struct {
	Hash   uint64
	Name   string
	NRanks int
}

// Label names a communicator for people: its name (escaped: the application chooses it, and a
// CR, LF or ESC in it must not forge a line of a text output), else its hash.
func (c Comm) Label() string {
	if c.Name != "" {
		return words.Printable(c.Name)
	}
	return fmt.Sprintf("0x%016x", c.Hash)
}

// Set is every operation read from a group of traces.
type Set struct {
	Files []string
	Procs []Proc
	Comms []Comm
	Steps []string
	Ops   []Op
	// Notes say what was read with reservations (cut files, operations without a time).
	Notes []string
	// Sampling sums up the sampled traces among the inputs (zero when every trace is full).
	Sampling Sampling
	// Others counts what the inputs hold that is no plugin operation, so that inputs with none
	// can be told apart: a CPU-only (gloo) run, or torch.profiler traces without the plugin's.
	Others Others

	marks []stepMark // step labels, until finish gives them to the operations
}

// Others counts torch.profiler events that tell what kind of run a trace without plugin
// operations comes from.
type Others struct {
	// Gloo: gloo collectives (torch.distributed's CPU backend: "gloo:all_reduce", ...).
	Gloo int `json:"gloo_ops"`
	// NCCLKernels: NCCL kernels that carry no plugin operation (no "nccl" argument from a merge).
	NCCLKernels int `json:"nccl_kernels_unlinked"`
}

// Options tune reading.
type Options struct {
	// Legs also collects each operation's channels and peers (pprof's leaf frames).
	Legs bool
	// Log receives progress: a line per file read when there are many, and every few seconds
	// inside a large one (nil: silent).
	Log io.Writer
	// Also, when set, sees every event of file i (in Files order) as it is read, and the file's
	// trace (its base, header) once it is read: so that another analysis reads the files in the
	// same pass (ncclmerge why). Files are read several at once; calls for one file come from
	// one goroutine.
	Also func(file int32) EventVisitor
}

// EventVisitor sees the events of one file: Visit each, then Done with the trace read.
type EventVisitor interface {
	Visit(t *ptrace.Trace, e *traceevent.Event) error
	Done(t *ptrace.Trace)
}

// DecodedVisitor is an EventVisitor that takes the plugin's fields of an event where commops
// decoded them already (dec; nil where it did not: a ProxyStep after the first, a Kineto
// slice), instead of decoding them again: VisitDecoded is called instead of Visit.
type DecodedVisitor interface {
	VisitDecoded(t *ptrace.Trace, e *traceevent.Event, dec *ptrace.Event) error
}

// OpsVisitor is an EventVisitor that is also given the file's operations once they are final
// (after Done): their arrivals on the Unix clock, their Proc an index local to the file, in the
// file's order. So it can take from its events what it needs of each operation and drop the
// rest before the next file, instead of holding every file's until the Set is whole.
type OpsVisitor interface {
	Ops(ops []Op)
}

// Read reads the operations of every trace in paths (several at once, in file order).
func Read(paths []string, opt Options) (*Set, error) {
	parts := make([]*part, len(paths))
	errs := make([]error, len(paths))
	var mu sync.Mutex
	done, start := 0, time.Now()
	parallel.Each(len(paths), func(i int) {
		parts[i], errs[i] = readFile(int32(i), paths[i], opt)
		mu.Lock()
		done++
		if opt.Log != nil && len(paths) > 4 && (done%16 == 0 || done == len(paths)) {
			fmt.Fprintf(opt.Log, "read %d of %d traces in %.1f s\n", done, len(paths), time.Since(start).Seconds())
		}
		mu.Unlock()
	})
	s := &Set{Files: paths}
	n := 0
	for i, p := range parts {
		if errs[i] != nil {
			return nil, errs[i]
		}
		n += len(p.ops)
	}
	dup := dedupe(parts)
	s.Ops = make([]Op, 0, n-dup)
	for _, p := range parts {
		s.add(p)
	}
	if dup > 0 {
		s.Notes = append(s.Notes, duplicateNote(dup))
	}
	s.finish()
	return s, nil
}

// Sampling sums up what sampled traces contributed to a Set.
type Sampling struct {
	// Every: N of the sampled traces (1 in N operations); 0 when no input is sampled, -1 when
	// inputs were sampled with different N.
	Every int `json:"every"`
	// Sampled, Triggered and Trigger count the operations read of each kind; Full those from
	// full traces.
	Sampled   int `json:"sampled_ops"`
	Triggered int `json:"triggered_ops"`
	Trigger   int `json:"trigger_ops"`
	Full      int `json:"full_ops"`
}

// On reports whether any input was a sampled trace.
func (s Sampling) On() bool { return s.Every != 0 }

// Label is how analyses say it: "sampled 1/100", "sampled (1/N varies)", or "".
func (s Sampling) Label() string {
	switch {
	case s.Every > 0:
		return fmt.Sprintf("sampled 1/%d", s.Every)
	case s.Every < 0:
		return "sampled (1/N varies across inputs)"
	}
	return ""
}

// Extra is how many operations the trigger added (not part of the uniform sample).
func (s Sampling) Extra() int { return s.Triggered + s.Trigger }

// SeqText writes a collective's seq as the analyses show it: "100", "100+3" for the fourth in a
// row with seq 100, "100 replay 3" for a CUDA graph's fourth replay with it (replays share the
// seq of the next eager collective from NCCL 2.26; skew's matchKey, a hang dump's repeat).
func SeqText(seq, repeat int64, replay bool) string {
	switch {
	case replay:
		return strconv.FormatInt(seq, 10) + " replay " + strconv.FormatInt(repeat, 10)
	case repeat == 0:
		return strconv.FormatInt(seq, 10)
	}
	return strconv.FormatInt(seq, 10) + "+" + strconv.FormatInt(repeat, 10)
}
