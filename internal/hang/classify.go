package hang

import (
	"fmt"
	"slices"
	"strings"
)

// Rank states in a hung operation. The first four make a rank a suspect; the others are evidence.
const (
	StateAbsent   = "absent"    // never started the operation
	StateGPU      = "gpu"       // its GPU neither produces nor consumes (or never started the kernel)
	StateLinkSend = "link_send" // its send to a peer went to the network and never completed
	StateLinkRecv = "link_recv" // waits for that send (the other end of the link)
	StateUnknown  = "unknown"   // the others point at it, but without its dump the cause is not known

	StateWaitData    = "waits_for_data"    // a receive waits for data that was never sent (RecvWait)
	StateWaitBuffers = "waits_for_buffers" // a send waits for the receiver to post a buffer (SendPeerWait)
	StateWaitGPU     = "waits_for_gpu"     // sends wait for its GPU, which waits for input of its own
	StateInKernel    = "in_kernel"         // no network work open; its kernel runs
	StateEnqueued    = "enqueued"          // nothing but the operation itself seen
	StateFinished    = "finished"          // completed the operation
	StateNoDump      = "no_dump"           // no dump, and nothing else says where it is
	StateTookPart    = "took_part"         // no dump, but its peers show it took part
	StateNoReplays   = "no_replays"        // shows no CUDA graph replay: NCCL starts none where the graph has no proxy work
)

// kernelChBit is NCCL's activation bit of KernelCh events.
const kernelChBit = 1 << 6

// Head is the state of one open ProxyOp, as the evidence shows it.
type Head struct {
	Channel   int    `json:"channel"`
	Peer      int    `json:"peer"`
	Direction string `json:"direction"`
	StepsDone int    `json:"steps_done"`
	NSteps    int    `json:"nsteps"`
	Step      int    `json:"step"`  // the oldest open step (-1: none open)
	State     string `json:"state"` // its state
	Open      int    `json:"open_steps"`
	// Full: every open step of a receive holds data the GPU has not consumed.
	Full bool `json:"full,omitempty"`
}

// opFacts are what a rank's ProxyOps and kernel channels say about one operation.
type opFacts struct {
	heads          []Head
	kernelStarted  int
	kernelStopped  int
	kernelRecorded bool // the process asked NCCL for KernelCh events
	gpuHeld        bool // a receive holds data its GPU did not consume (RecvFlushWait/RecvGPUWait)
	netBlocked     bool // a send's oldest step waits for the peer or the network
	sendGPUWait    bool // a send's oldest step waits for the GPU
	starved        bool // a receive's oldest step waits for data
}

func factsOf(o *Op, mask int) opFacts {
	f := opFacts{kernelRecorded: mask&kernelChBit != 0}
	for _, k := range o.Kernel {
		if k.Started {
			f.kernelStarted++
		}
		if k.Stopped {
			f.kernelStopped++
		}
	}
	for i := range o.Proxy {
		p := &o.Proxy[i]
		if p.Stopped {
			continue
		}
		h := Head{Channel: p.Channel, Peer: p.Peer, Direction: p.Direction, StepsDone: p.StepsDone, NSteps: p.NSteps, Step: -1, Open: len(p.Open)}
		if s := p.Head(); s != nil {
			h.Step, h.State = s.Step, s.State
		}
		held := 0
		for _, s := range p.Open {
			if s.State == RecvGPUWait || s.State == RecvFlushWait {
				held++
			}
		}
		h.Full = held > 0 && held == len(p.Open)
		f.gpuHeld = f.gpuHeld || held > 0
		switch h.State {
		case SendPeerWait, SendWait:
			f.netBlocked = true
		case SendGPUWait:
			f.sendGPUWait = true
		case RecvWait:
			f.starved = true
		}
		f.heads = append(f.heads, h)
	}
	return f
}

// gpuStuck: the GPU holds received data it does not consume, while nothing on the network side
// holds it back (no send of the rank waits for a peer or the network): a healthy GPU consumes
// data as soon as it has room to send the result, so only a stuck one leaves it there. (A rank
// that waits for its downstream peer also leaves received data unconsumed, but then its own
// send waits for the peer: SendPeerWait.)
func (f *opFacts) gpuStuck() bool { return f.gpuHeld && !f.netBlocked }

// kernelNeverStarted: the process records KernelCh, yet no channel of this operation's kernel
// started while other ranks' kernels did (others is how many ranks have started channels).
func (f *opFacts) kernelNeverStarted(others int) bool {
	return f.kernelRecorded && f.kernelStarted == 0 && others > 0
}

// linkSends are the rank's sends whose oldest step went to the network and never completed.
func (f *opFacts) linkSends() []Head {
	var out []Head
	for _, h := range f.heads {
		if h.Direction == Send && h.State == SendWait {
			out = append(out, h)
		}
	}
	return out
}

// waiting classifies a rank that is not a suspect from what its ProxyOps and kernel wait for.
func (f *opFacts) waiting() string {
	switch {
	case f.starved:
		return StateWaitData
	case f.netBlocked:
		return StateWaitBuffers
	case f.sendGPUWait:
		return StateWaitGPU
	case f.kernelStarted > f.kernelStopped:
		return StateInKernel
	}
	return StateEnqueued
}

// describe says what the heads and the kernel show, without step numbers (so that ranks in the
// same situation read the same and are grouped); peers are named only when they are suspects.
func (f *opFacts) describe(o *Op, suspect func(peer int) bool) string {
	type key struct {
		dir, state string
		peer       int
		full       bool
	}
	count := map[key]int{}
	var order []key
	for _, h := range f.heads {
		k := key{h.Direction, h.State, -1, h.Full}
		if suspect(h.Peer) {
			k.peer = h.Peer
		}
		if count[k] == 0 {
			order = append(order, k)
		}
		count[k]++
	}
	slices.SortStableFunc(order, func(a, b key) int { return strings.Compare(a.dir+a.state, b.dir+b.state) })
	var parts []string
	for _, k := range order {
		s := k.dir + " " + k.state
		if k.state == "" {
			s = k.dir + " with no step open"
		}
		if k.peer >= 0 {
			if k.dir == Send {
				s += fmt.Sprintf(" to rank %d", k.peer)
			} else {
				s += fmt.Sprintf(" from rank %d", k.peer)
			}
		}
		if k.full {
			s += " (buffers full)"
		}
		parts = append(parts, s+" on "+plural(count[k], "channel"))
	}
	if f.kernelRecorded {
		switch n := max(o.NChannels, f.kernelStarted); {
		case f.kernelStarted == 0 && o.Launched != nil && *o.Launched:
			parts = append(parts, "kernel launched, not started")
		case f.kernelStarted == 0:
			parts = append(parts, "kernel not started")
		case f.kernelStopped == 0:
			parts = append(parts, fmt.Sprintf("kernel running on %d/%d channels", f.kernelStarted, n))
		case f.kernelStopped < f.kernelStarted:
			parts = append(parts, fmt.Sprintf("kernel running on %d/%d channels (%d finished)", f.kernelStarted-f.kernelStopped, n, f.kernelStopped))
		default:
			parts = append(parts, fmt.Sprintf("kernel finished on %d/%d channels", f.kernelStopped, n))
		}
	}
	if len(parts) == 0 {
		return "no network work or kernel channel seen"
	}
	return strings.Join(parts, ", ")
}

// headSteps is the range of the oldest open steps (-1, -1: none).
func (f *opFacts) headSteps() (lo, hi int) {
	lo, hi = -1, -1
	for _, h := range f.heads {
		if h.Step < 0 {
			continue
		}
		if lo < 0 || h.Step < lo {
			lo = h.Step
		}
		hi = max(hi, h.Step)
	}
	return lo, hi
}

func plural(n int, what string) string {
	switch {
	case n == 1:
		return "1 " + what
	case strings.HasSuffix(what, "y"):
		return fmt.Sprintf("%d %sies", n, what[:len(what)-1])
	}
	return fmt.Sprintf("%d %ss", n, what)
}
