package hosttest

import (
	"encoding/json"
	"fmt"

	"github.com/ncclprof/ncclprof/internal/aggregate"
)

// Truth is what the host knows it did (testhost/world.c truth_write).
type Truth struct {
	Scenario         string  `json:"scenario"`
	ABI              int     `json:"abi"`
	PID              int     `json:"pid"`
	Rank             int     `json:"rank"`
	NRanks           int     `json:"nranks"`
	GPUOffsetNs      float64 `json:"gpu_offset_ns"`
	GPUDriftPPM      float64 `json:"gpu_drift_ppm"`
	Mask             int     `json:"mask"`
	UnwrittenHandles int     `json:"unwritten_handles"`
	BadPTimers       int     `json:"bad_ptimers"` // planted impossible GPU timestamps (--bad-ptimer)
	Threads          int     `json:"threads"`
	// FinalizeMaxNs is the longest a communicator's finalize took: what the plugin made
	// NCCL's destroy wait.
	FinalizeMaxNs float64       `json:"finalize_max_ns"`
	TypeCounts    []uint64      `json:"type_counts"` // recorded starts, NCCL bit order
	ClockSamples  []ClockSample `json:"clock_samples"`
	GPUBaseRealNs int64         `json:"gpu_base_real_ns,string"`
	Comms         []TruthComm   `json:"comms"`
	// PluginCounters are the plugin's process-wide counters when the truth was written, in
	// NP_C_* order (Counter reads one by name): the sanitizer builds write no summaries.
	PluginCounters []uint64 `json:"plugin_counters"`
}

// ClockSample is CLOCK_REALTIME (ns) read just before and after a callback that got Handle.
type ClockSample struct {
	Handle        string
	Before, After int64
}

// UnmarshalJSON reads the host's ["0x…", before, after] (integers: doubles would round them).
func (c *ClockSample) UnmarshalJSON(b []byte) error {
	var a []json.RawMessage
	if err := json.Unmarshal(b, &a); err != nil || len(a) != 3 {
		return fmt.Errorf("clock sample %s", b)
	}
	if err := json.Unmarshal(a[0], &c.Handle); err != nil {
		return err
	}
	if err := json.Unmarshal(a[1], &c.Before); err != nil {
		return err
	}
	return json.Unmarshal(a[2], &c.After)
}

// TruthComm is one communicator's ground truth.
type TruthComm struct {
	Name     string         `json:"name"`
	Hash     string         `json:"hash"`
	Rank     int            `json:"rank"`
	NRanks   int            `json:"nranks"`
	Ops      []TruthOp      `json:"ops"`
	Pairs    []TruthPair    `json:"pairs"`
	Channels []TruthChannel `json:"channels"`
}

// TruthOp counts the operations of one key and their total bytes.
type TruthOp struct {
	Func             string  `json:"func"`
	Algo             string  `json:"algo"`
	Proto            string  `json:"proto"`
	NChannels        int     `json:"nchannels"`
	Count            uint64  `json:"count"`
	Bytes            uint64  `json:"bytes"`
	CompletionMeanNs float64 `json:"completion_ns_mean"`
	// CompletionMinMeanNs: the mean from after the start callback returned to before the last
	// stop was called; the plugin's mean lies between it and CompletionMeanNs.
	CompletionMinMeanNs float64 `json:"completion_ns_mean_min"`
}

// TruthPair is the model and the traffic of one peer.
type TruthPair struct {
	Peer          int     `json:"peer"`
	LatencyNs     float64 `json:"latency_ns"`
	BandwidthBps  float64 `json:"bandwidth_Bps"`
	SentBytes     uint64  `json:"sent_bytes"`
	SendTransfers uint64  `json:"send_transfers"`
	RecvBytes     uint64  `json:"recv_bytes"`
	RecvTransfers uint64  `json:"recv_transfers"`
}

// TruthChannel is the send traffic of one channel.
type TruthChannel struct {
	Channel   int    `json:"channel"`
	Transfers uint64 `json:"transfers"`
	Bytes     uint64 `json:"bytes"`
}

// Summary is the plugin's per-communicator JSON (drainer/summary.go).
type Summary struct {
	Version  int               `json:"ncclprof_summary_version"`
	Host     string            `json:"host"`
	PID      int               `json:"pid"`
	Comm     SummaryComm       `json:"comm"`
	Ops      []SummaryOp       `json:"operations"`
	Pairs    []SummaryPair     `json:"rank_pairs"`
	Channels []SummaryChannel  `json:"channels"`
	Health   aggregate.Health  `json:"health"`
	Counters map[string]uint64 `json:"process_counters"`
	Complete bool              `json:"complete"`
	Partial  []string          `json:"partial"`
}

// SummaryComm identifies the communicator.
type SummaryComm struct {
	Hash   string `json:"comm_hash"`
	Name   string `json:"name"`
	Rank   int    `json:"rank"`
	NRanks int    `json:"nranks"`
	NNodes int    `json:"nnodes"`
	ABI    int    `json:"abi_version"`
}

// Dist is the summary's distribution: the aggregate's own type, written as is.
type Dist = aggregate.Dist

// SummaryOp is one operation key's stats.
type SummaryOp struct {
	Func          string `json:"func"`
	Algo          string `json:"algo"`
	Proto         string `json:"proto"`
	NChannels     int    `json:"nchannels"`
	Count         uint64 `json:"count"`
	Bytes         uint64 `json:"bytes"`
	Enqueue       Dist   `json:"enqueue_ns"`
	Completion    Dist   `json:"completion_ns"`
	GPU           Dist   `json:"gpu_ns"`
	API           Dist   `json:"api_ns"`
	NoCompletion  uint64 `json:"no_completion"`
	Incomplete    uint64 `json:"incomplete"`
	APIOnly       uint64 `json:"api_only"`
	Transfers     uint64 `json:"transfers"`
	TransferBytes uint64 `json:"transfer_bytes"`
	BusBW         Dist   `json:"busbw_gbps"`
}

// Fit mirrors linfit.Result.
type Fit struct {
	Points        uint64  `json:"points"`
	DistinctSizes int     `json:"distinct_sizes"`
	R2            float64 `json:"r2"`
	LatencyNs     float64 `json:"latency_ns"`
	BandwidthBps  float64 `json:"bandwidth_bytes_per_s"`
	Trusted       bool    `json:"trusted"`
}

// SummaryPair is one rank pair.
type SummaryPair struct {
	Rank          int    `json:"rank"`
	Peer          int    `json:"peer"`
	SentBytes     uint64 `json:"sent_bytes"`
	RecvBytes     uint64 `json:"recv_bytes"`
	SendTransfers uint64 `json:"send_transfers"`
	RecvTransfers uint64 `json:"recv_transfers"`
	FitAvg        Fit    `json:"fit_avg"`
	FitMin        Fit    `json:"fit_min"`
}

// SummaryChannel is one channel.
type SummaryChannel struct {
	Rank      int    `json:"rank"`
	Channel   int    `json:"channel"`
	Transfers uint64 `json:"transfers"`
	Bytes     uint64 `json:"bytes"`
	FitMin    Fit    `json:"fit_min"`
}

// Op finds an operation key in the summary.
func (s *Summary) Op(fn, algo, proto string, nch int) *SummaryOp {
	for i := range s.Ops {
		o := &s.Ops[i]
		if o.Func == fn && o.Algo == algo && o.Proto == proto && o.NChannels == nch {
			return o
		}
	}
	return nil
}

// Pair finds a rank pair in the summary.
func (s *Summary) Pair(rank, peer int) *SummaryPair {
	for i := range s.Pairs {
		if s.Pairs[i].Rank == rank && s.Pairs[i].Peer == peer {
			return &s.Pairs[i]
		}
	}
	return nil
}

// CompletionHolds reports whether a plugin's mean completion time fits the host's bracket for
// the operation, each end widened by slack (a fraction): the host read its clock on both sides
// of the start and the last stop, so a preemption there widens the bracket, not the error.
func (o TruthOp) CompletionHolds(mean, slack float64) bool {
	lo := o.CompletionMinMeanNs
	if lo <= 0 || lo > o.CompletionMeanNs { // a truth file from before the bracket
		lo = o.CompletionMeanNs
	}
	return mean >= lo*(1-slack) && mean <= o.CompletionMeanNs*(1+slack)
}
