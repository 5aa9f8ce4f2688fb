package aggregate

// Transfer stats come from the plugin's hot path, not from records: every ProxyStep's stop
// folds its transfer into sums kept per (kind, rank, peer or channel, size, writer thread)
// (profiler/core.h). Sums per size are exactly what both fits need (a least-squares line is
// additive over groups of equal x, and the MIN fit wants the fastest transfer of each size),
// so pair and channel figures are exact whatever happens to the event records.

// Bucket kinds, as NP_X_* in profiler/core.h.
const (
	BucketSend    = 1 // a send step that reached the network, to peer ID
	BucketRecv    = 2 // a receive step with a size, from peer ID (not timed)
	BucketChannel = 3 // a send step on channel ID
)

// Bucket is one set of transfer sums (np_xfer in profiler/core.h). Times are in ticks.
type Bucket struct {
	Kind                       int
	Rank, ID                   int
	Size                       uint64
	N, Bytes, SumT, TMin, TMax uint64
	SumT2                      float64
}

// Unkeyed are transfers the plugin could count only in totals (its sum table was full), per
// kind: they are in SentBytes/RecvBytes-style totals of Health, not in any pair or channel.
type Unkeyed struct {
	N, Bytes [4]uint64
}

// SetTransfers replaces communicator c's rank-pair and channel stats with those the buckets
// give (they are cumulative since the communicator started). ticksPerNs converts the times.
func (a *Aggregator) SetTransfers(c Comm, buckets []Bucket, un Unkeyed) {
	cs := a.state(c)
	res := cs.res
	res.Pairs = map[PairKey]*PairStats{}
	res.Channels = map[ChannelKey]*ChannelStats{}
	res.Health.TransfersUnkeyed = 0
	for k := 1; k < 4; k++ {
		res.Health.TransfersUnkeyed += un.N[k]
	}
	tpn := a.TicksPerNs
	if tpn <= 0 {
		tpn = 1
	}
	for i := range buckets {
		b := &buckets[i]
		if b.N == 0 {
			continue
		}
		sumNs, sumNs2 := float64(b.SumT)/tpn, b.SumT2/(tpn*tpn)
		minNs, maxNs := float64(b.TMin)/tpn, float64(b.TMax)/tpn
		switch b.Kind {
		case BucketSend:
			p := entry(res.Pairs, PairKey{CommHash: c.Hash, Rank: b.Rank, Peer: b.ID})
			p.SentBytes += b.Bytes
			p.SendTransfers += b.N
			p.Fit.AddGroup(b.Size, b.N, sumNs, sumNs2, minNs)
		case BucketRecv:
			p := entry(res.Pairs, PairKey{CommHash: c.Hash, Rank: b.Rank, Peer: b.ID})
			p.RecvBytes += b.Bytes
			p.RecvTransfers += b.N
		case BucketChannel:
			ch := entry(res.Channels, ChannelKey{CommHash: c.Hash, Rank: b.Rank, Channel: b.ID})
			ch.Transfers += b.N
			ch.Bytes += b.Bytes
			ch.TransferSize.merge(Dist{N: b.N, Sum: float64(b.Bytes), Min: float64(b.Size), Max: float64(b.Size)})
			ch.TransferTime.merge(Dist{N: b.N, Sum: sumNs, Min: minNs, Max: maxNs})
			ch.Fit.AddGroup(b.Size, b.N, sumNs, sumNs2, minNs)
		}
	}
}

// entry is m's value for k, a new zero one added if it had none.
func entry[K comparable, V any](m map[K]*V, k K) *V {
	v := m[k]
	if v == nil {
		v = new(V)
		m[k] = v
	}
	return v
}
