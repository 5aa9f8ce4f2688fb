package aggregate

import (
	"fmt"
	"math"
	"slices"

	"github.com/ncclprof/ncclprof/internal/collective"
	"github.com/ncclprof/ncclprof/internal/linfit"
)

// Comm identifies a communicator as the plugin saw it. Hash is the same on every rank of the
// communicator, so results are keyed by (Hash, Rank).
type Comm struct {
	Index       uint32 `json:"-"`
	Incarnation uint64 `json:"-"`
	Hash        uint64 `json:"comm_hash"`
	Name        string `json:"name"`
	Rank        int    `json:"rank"`
	NRanks      int    `json:"nranks"`
	NNodes      int    `json:"nnodes"`
	ABI         int    `json:"abi_version"`
}

// Dist summarises a quantity: count, sum, min, max.
type Dist struct {
	N   uint64  `json:"n"`
	Sum float64 `json:"sum"`
	Min float64 `json:"min"`
	Max float64 `json:"max"`
}

func (d *Dist) add(v float64) {
	if d.N == 0 || v < d.Min {
		d.Min = v
	}
	if d.N == 0 || v > d.Max {
		d.Max = v
	}
	d.N++
	d.Sum += v
}

func (d *Dist) merge(o Dist) {
	if o.N == 0 {
		return
	}
	if d.N == 0 {
		*d = o
		return
	}
	d.Min = min(d.Min, o.Min)
	d.Max = max(d.Max, o.Max)
	d.N += o.N
	d.Sum += o.Sum
}

// Mean is Sum/N (0 when empty).
func (d Dist) Mean() float64 {
	if d.N == 0 {
		return 0
	}
	return d.Sum / float64(d.N)
}

// OpKey groups operations the way users compare them.
type OpKey struct {
	CommHash  uint64
	Rank      int
	Func      string
	Algo      string
	Proto     string
	NChannels int
}

// OpStats accumulate completed operations of one OpKey. Times are in ns.
type OpStats struct {
	Count        uint64 `json:"count"`
	Bytes        uint64 `json:"bytes"`
	Enqueue      Dist   `json:"enqueue_ns"`    // NCCL's Coll/P2p start → stop (the upload)
	Completion   Dist   `json:"completion_ns"` // start → last ProxyOp or KernelCh stop
	GPU          Dist   `json:"gpu_ns"`        // KernelCh: max over channels of GPU stop − start
	API          Dist   `json:"api_ns"`        // v5+: time inside the API call (CollApi/P2pApi)
	NoCompletion uint64 `json:"no_completion"` // ops without children to time their completion
	Incomplete   uint64 `json:"incomplete"`    // ops given up with children still open
	// Untimed operations are in Count and Bytes but have no times: their records found no
	// room (the plugin counted them in its lost-operation table instead).
	Untimed uint64 `json:"untimed"`
	// APIOnly operations are in Count and Bytes from their API events alone (NCCL started no
	// Coll for them: symmetric kernels, CE collectives, …): they have API times only.
	APIOnly       uint64  `json:"api_only"`
	Transfers     uint64  `json:"transfers"`      // send transfers of these operations
	TransferBytes uint64  `json:"transfer_bytes"` // their bytes
	TransferNs    float64 `json:"transfer_ns"`    // Σ of their times (SendWait → stop)
	AlgBW         Dist    `json:"algbw_gbps"`     // GB/s, per op
	BusBW         Dist    `json:"busbw_gbps"`
}

// PairKey is a directed rank pair on one communicator (Rank sends to Peer).
type PairKey struct {
	CommHash uint64
	Rank     int
	Peer     int
}

// PairStats hold what went between two ranks. Latency and bandwidth come from a fit of
// send-side transfer time on transfer size (see linfit); receive-side steps include waiting for
// the sender, so they count bytes but are not fitted.
type PairStats struct {
	SentBytes     uint64     `json:"sent_bytes"`
	RecvBytes     uint64     `json:"recv_bytes"`
	SendTransfers uint64     `json:"send_transfers"`
	RecvTransfers uint64     `json:"recv_transfers"`
	Fit           linfit.Acc `json:"-"`
}

// ChannelKey is one channel of one rank on one communicator.
type ChannelKey struct {
	CommHash uint64
	Rank     int
	Channel  int
}

// ChannelStats hold send-side transfers of one channel.
type ChannelStats struct {
	Transfers    uint64     `json:"transfers"`
	Bytes        uint64     `json:"bytes"`
	TransferSize Dist       `json:"transfer_size_bytes"`
	TransferTime Dist       `json:"transfer_time_ns"`
	Fit          linfit.Acc `json:"-"`
}

// Health counts what the aggregation could not use, per communicator.
type Health struct {
	Records       uint64 `json:"records"`
	Windows       uint64 `json:"windows"`
	LateApplied   uint64 `json:"late_applied"`
	LateUnmatched uint64 `json:"late_unmatched"`
	OrphanSteps   uint64 `json:"orphan_steps"`    // ProxyStep whose ProxyOp was not recorded (not folded)
	OrphanProxy   uint64 `json:"orphan_proxyops"` // ProxyOp whose Coll/P2p was not recorded
	OrphanKernel  uint64 `json:"orphan_kernelch"`
	LateChildren  uint64 `json:"late_children"`  // ProxyOp/KernelCh that came after their operation completed
	ParentCarried uint64 `json:"parent_carried"` // child started after its parent's window was read (normal)
	Foreign       uint64 `json:"foreign_pxn"`
	Expired       uint64 `json:"expired"`       // pending entries given up after MaxAgeWindows
	NeverStopped  uint64 `json:"never_stopped"` // ProxyOps NCCL never stopped, every step done
	NotHeld       uint64 `json:"not_held"`      // given up before the hang watchdog's hold: over HoldMax pending
	// What the plugin could not keep (profiler/core.h), per event type: Untracked events are
	// missing from every figure; TraceDropped ones only from the trace (detail records).
	Untracked        map[string]uint64 `json:"untracked,omitempty"`
	TraceDropped     map[string]uint64 `json:"trace_dropped,omitempty"`
	TransfersUnkeyed uint64            `json:"transfers_unkeyed"` // counted in no pair or channel
	UntimedOps       uint64            `json:"untimed_ops"`       // see OpStats.Untimed
	// APIOnlyRecounted: operations counted from their API events alone whose Coll came later
	// (more than QuietNs after their group ended): the summary took them back, the metrics
	// already exported have them twice.
	APIOnlyRecounted uint64 `json:"api_only_recounted"`
}

// Partial says, in words, which figures of the result are incomplete and why; empty when
// everything recorded is exact.
func (r *Result) Partial() []string {
	h := &r.Health
	var out []string
	say := func(n uint64, format string) {
		if n > 0 {
			out = append(out, fmt.Sprintf(format, n))
		}
	}
	say(h.UntimedOps, "%d operations have no times (their records found no room): "+
		"counts and bytes include them, time figures do not")
	for _, t := range sortedKeys(h.Untracked) {
		say(h.Untracked[t], "%d "+t+" events were not tracked: "+untrackedEffect(t))
	}
	for _, c := range []struct {
		n    uint64
		what string
	}{
		{h.OrphanSteps, "%d ProxySteps came without a tracked ProxyOp (not in the event mask, " +
			"dropped, or retired before NCCL progressed it): their transfers are missing from " +
			"rank-pair and channel figures and fits"},
		{h.OrphanProxy, "%d ProxyOps came for an operation that was not tracked (its Coll or P2p " +
			"not recorded, or given up): no operation has their completion or transfers"},
		{h.OrphanKernel, "%d KernelCh events came for an operation that was not tracked: no " +
			"operation has their GPU times"},
		{h.TransfersUnkeyed, "%d transfers are in no rank pair or channel (the sum table was full)"},
		{r.sizelessSends(), "%d send transfers have no size: NCCL 2.23 (ABI v1) records a send's " +
			"size only after its step, so rank-pair and channel bytes and fits miss them (NCCL " +
			"2.24 and later pass it)"},
		{h.APIOnlyRecounted, "%d operations first counted from their API events alone got their " +
			"Coll later: the summary counts them once, the metrics exported before count them twice"},
		{h.Expired, "%d events were given up waiting for their stop: their operations are marked " +
			"incomplete"},
		{h.LateChildren, "%d ProxyOp or KernelCh events came after their operation was closed " +
			"(NCCL started them that late): their transfers are in the rank-pair and channel " +
			"figures, not in their operations' transfers and completion times"},
	} {
		say(c.n, c.what)
	}
	return out
}

// sizelessSends counts the send transfers of rank pairs that moved no bytes: NCCL 2.23 records
// SendTransmitted before adding the transfer's size (transport/net.cc at v2.23.4-1), so ABI v1
// send steps come without one.
func (r *Result) sizelessSends() uint64 {
	var n uint64
	for _, p := range r.Pairs {
		if r.Comm.ABI == 1 && p.SendTransfers > 0 && p.SentBytes == 0 {
			n += p.SendTransfers
		}
	}
	return n
}

// untrackedEffect names the figures an untracked event of type t leaves out.
func untrackedEffect(t string) string {
	switch t {
	case "ProxyStep":
		return "their transfers are missing from rank-pair and channel figures and fits"
	case "ProxyOp":
		return "their operations' completion times and transfers are missing"
	case "KernelCh":
		return "their operations' GPU times are missing"
	case "Late":
		return "their events' stops were lost; those operations are incomplete"
	}
	return "they are missing from the trace and from the operations they belong to"
}

func sortedKeys(m map[string]uint64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Factor is nccl-tests' bus-bandwidth factor for an operation on n ranks, and the factor that
// turns the per-rank count into nccl-tests' "size" (total bytes of the operation).
func Factor(fn string, n int) (bus float64, sizeMul uint64) {
	bus = collective.BusFactor(fn, max(n, 1))
	switch fn {
	case "AllGather", "ReduceScatter", "AlltoAll":
		return bus, uint64(max(n, 1))
	}
	return bus, 1
}

// bandwidths in GB/s (bytes per ns) as nccl-tests defines them: algbw = size/time,
// busbw = algbw × factor.
func bandwidths(fn string, n int, bytes uint64, ns float64) (alg, bus float64) {
	if ns <= 0 || bytes == 0 {
		return 0, 0
	}
	f, _ := Factor(fn, n)
	alg = float64(bytes) / ns
	return alg, alg * f
}

func finite(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}
