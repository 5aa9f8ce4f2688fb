package aggregate

import "github.com/ncclprof/ncclprof/internal/event"

// LostOp is one key of the plugin's lost-operation table (np_lost_op in plugin/core.h): Coll
// or P2p events that found no slot, counted so operation counts and bytes stay exact. Counts
// are cumulative since the communicator started.
type LostOp struct {
	Type                     event.Type // Coll or P2p; CollApi: a call that may be API-only
	API                      uint8      // a lost Coll's CollApi (v5+): LostAPIKept, LostAPIDropped or 0
	Func, Dtype, Algo, Proto string
	NChannels                int
	N, SumCount              uint64
}

// What became of a lost Coll's CollApi (plugin/adapters.c np_lost_api).
const (
	LostAPIKept    = 1 // recorded: the call must not also count as an API-only operation
	LostAPIDropped = 2 // lost too
)

type lostKey struct {
	typ                    event.Type
	api                    uint8
	fn, dtype, algo, proto string
	nch                    int
}

// SetLost takes the current lost-operation table of communicator c: what it added since the
// last call goes into the operation stats (counts and bytes, as untimed operations) and to
// OnOp, once.
func (a *Aggregator) SetLost(c Comm, lost []LostOp) {
	cs := a.state(c)
	if cs.lostSeen == nil {
		cs.lostSeen = map[lostKey][2]uint64{}
	}
	for _, l := range lost {
		k := lostKey{l.Type, l.API, l.Func, l.Dtype, l.Algo, l.Proto, l.NChannels}
		seen := cs.lostSeen[k]
		if l.N <= seen[0] {
			continue
		}
		dn, dc := l.N-seen[0], l.SumCount-seen[1]
		cs.lostSeen[k] = [2]uint64{l.N, l.SumCount}
		o := &Op{Comm: cs.info, Func: l.Func, Algo: l.Algo, Proto: l.Proto, Dtype: l.Dtype,
			NChannels: l.NChannels, Peer: -1, Root: -1, Untimed: dn}
		_, mul := Factor(l.Func, cs.info.NRanks)
		o.Bytes = dc * event.DtypeSize(l.Dtype) * mul
		if a.lostCall(cs, l, dn, o.Bytes) {
			continue
		}
		a.emitUntimed(cs, o)
	}
}

// emitUntimed records operations counted without records (o.Untimed of them) and hands them on.
func (a *Aggregator) emitUntimed(cs *commState, o *Op) {
	s := cs.res.Ops[opKey(o)]
	if s == nil {
		s = &OpStats{}
		cs.res.Ops[opKey(o)] = s
	}
	s.Count += o.Untimed
	s.Bytes += o.Bytes
	s.Untimed += o.Untimed
	if o.APIOnly {
		s.APIOnly += o.Untimed
	}
	cs.res.Health.UntimedOps += o.Untimed
	if a.OnOp != nil {
		a.OnOp(o)
	}
}

// SetDrops records what the plugin could not keep for communicator c, per event type:
// untracked events (missing from every figure), detail records the trace did not get, and
// ProxySteps whose ProxyOp was not recorded (their transfers have no pair or channel).
func (a *Aggregator) SetDrops(c Comm, untracked, traceDropped map[string]uint64, orphanSteps uint64) {
	cs := a.state(c)
	cs.res.Health.Untracked = untracked
	cs.res.Health.TraceDropped = traceDropped
	cs.res.Health.OrphanSteps = orphanSteps
}
