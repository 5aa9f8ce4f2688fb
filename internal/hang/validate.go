package hang

import (
	"fmt"
	"slices"
)

// MaxChannels is NCCL's MAXCHANNELS: channel ids are below it.
const MaxChannels = 64

// MaxOpenSteps is NCCL_STEPS: a ProxyOp has at most this many steps in flight.
const MaxOpenSteps = 8

// Validate checks what the analysis relies on; the error names the field (as a JSON path) and what
// is wrong with it. Write refuses an invalid dump, so a plugin bug shows at once; the reader
// refuses one, so a damaged file is reported rather than misread.
func (d *Dump) Validate() error {
	switch {
	case d.FormatVersion != Version:
		return fmt.Errorf("ncclprof_hang_version %d: this ncclmerge reads version %d", d.FormatVersion, Version)
	case d.Host == "" || d.PID <= 0:
		return fmt.Errorf("host %q, pid %d: both are needed", d.Host, d.PID)
	case d.Reason != ReasonTimeout && d.Reason != ReasonRequest:
		return fmt.Errorf("reason %q: want %q or %q", d.Reason, ReasonTimeout, ReasonRequest)
	case d.WrittenUnixNs <= 0:
		return fmt.Errorf("written_unix_ns %d: not a time", d.WrittenUnixNs)
	}
	for i := range d.Comms {
		if err := d.Comms[i].validate(); err != nil {
			return fmt.Errorf("comms[%d]: %w", i, err)
		}
	}
	return nil
}

func (c *Comm) validate() error {
	if !hashRE.MatchString(c.Hash) {
		return fmt.Errorf("comm_hash %q: want 0x and 16 lower-case hex digits", c.Hash)
	}
	// nranks 0: not known (NCCL 2.23-2.26, profiler ABI v1-v3, do not tell the plugin).
	if c.NRanks > MaxRanks {
		return fmt.Errorf("nranks %d: more ranks than the %d this reader accepts", c.NRanks, MaxRanks)
	}
	if c.NRanks < 0 || !rankIn(c.Rank, c.NRanks) {
		return fmt.Errorf("rank %d of nranks %d", c.Rank, c.NRanks)
	}
	for i, d := range c.Completed {
		if d.LastRepeat < 0 {
			return fmt.Errorf("completed[%d]: last_repeat %d", i, d.LastRepeat)
		}
	}
	for i, p := range c.P2pCompleted {
		if !rankIn(p.Peer, c.NRanks) {
			return fmt.Errorf("p2p_completed[%d]: peer %d of nranks %d", i, p.Peer, c.NRanks)
		}
	}
	if len(c.Recent) > FlightRecord {
		return fmt.Errorf("recent_ops: %d operations, at most %d are written", len(c.Recent), FlightRecord)
	}
	for i := range c.Recent {
		if err := c.Recent[i].validate(c.NRanks); err != nil {
			return fmt.Errorf("recent_ops[%d]: %w", i, err)
		}
	}
	for i := range c.Open {
		if err := c.Open[i].validate(c.NRanks); err != nil {
			return fmt.Errorf("open_ops[%d]: %w", i, err)
		}
	}
	return nil
}

// validate checks what every operation must carry: a kind, a function, a seq, a peer for P2P
// only, a root below nranks for rooted collectives only.
func (o *Call) validate(nranks int) error {
	switch o.Kind {
	case KindColl:
		if o.Peer != nil {
			return fmt.Errorf("a collective with a peer")
		}
	case KindP2p:
		if o.Peer == nil || !rankIn(*o.Peer, nranks) {
			return fmt.Errorf("a point-to-point operation needs a peer below nranks %d", nranks)
		}
	default:
		return fmt.Errorf("kind %q: want %q or %q", o.Kind, KindColl, KindP2p)
	}
	if o.Func == "" || o.Seq < 0 || o.Repeat < 0 || (o.Repeat != 0 || o.GraphReplay) && o.Kind != KindColl {
		return fmt.Errorf("func %q, seq %d, repeat %d, graph replay %v (repeat and replay: a collective's only)", o.Func, o.Seq, o.Repeat, o.GraphReplay)
	}
	if o.Root != nil && (!Rooted(o.Func) || !rankIn(*o.Root, nranks)) {
		return fmt.Errorf("root %d of %s on nranks %d (only Broadcast and Reduce have one)", *o.Root, o.Func, nranks)
	}
	return nil
}

func (o *Op) validate(nranks int) error {
	c := o.Call()
	if err := c.validate(nranks); err != nil {
		return err
	}
	for i, k := range o.Kernel {
		if k.Channel < 0 || k.Channel >= MaxChannels {
			return fmt.Errorf("kernel_channels[%d]: channel %d", i, k.Channel)
		}
	}
	for i := range o.Proxy {
		if err := o.Proxy[i].validate(nranks); err != nil {
			return fmt.Errorf("proxy_ops[%d]: %w", i, err)
		}
	}
	return nil
}

func (p *ProxyOp) validate(nranks int) error {
	switch {
	case p.Channel < 0 || p.Channel >= MaxChannels:
		return fmt.Errorf("channel %d", p.Channel)
	case !rankIn(p.Peer, nranks):
		return fmt.Errorf("peer %d of nranks %d", p.Peer, nranks)
	case p.Direction != Send && p.Direction != Recv:
		return fmt.Errorf("direction %q: want %q or %q", p.Direction, Send, Recv)
	case p.NSteps < 0 || p.StepsDone < 0 || p.StepsDone > p.NSteps:
		return fmt.Errorf("steps_done %d of nsteps %d", p.StepsDone, p.NSteps)
	case len(p.Open) > MaxOpenSteps:
		return fmt.Errorf("%d open steps: NCCL has at most %d in flight", len(p.Open), MaxOpenSteps)
	case p.Stopped && len(p.Open) > 0:
		return fmt.Errorf("stopped with %d steps open", len(p.Open))
	case p.State != "" && !slices.Contains(OpStates[:], p.State):
		return fmt.Errorf("state %q: want one of %v", p.State, OpStates)
	}
	prev := p.StepsDone - 1
	for i, s := range p.Open {
		if s.Step <= prev || s.Step >= p.NSteps {
			return fmt.Errorf("open_steps[%d]: step %d after %d of nsteps %d (steps are open in order, after the done ones)", i, s.Step, prev, p.NSteps)
		}
		if dir, ok := stepStates[s.State]; !ok || dir != p.Direction {
			return fmt.Errorf("open_steps[%d]: state %q on a %s", i, s.State, p.Direction)
		}
		prev = s.Step
	}
	return nil
}

// rankIn: a rank of a communicator of nranks (0: of unknown size, at most MaxRanks).
func rankIn(r, nranks int) bool { return r >= 0 && r < MaxRanks && (nranks == 0 || r < nranks) }

// MaxRanks bounds the communicators a reader accepts: ten times the largest jobs run today, and
// few enough that the analysis, which keeps a state per rank, stays within memory.
const MaxRanks = 1 << 20
