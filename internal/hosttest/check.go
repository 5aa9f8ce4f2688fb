package hosttest

import (
	"math"
	"testing"
)

// FitTolerance is how close the MIN-mode fit must come to the host's latency/bandwidth model.
// The host busy-waits each transfer's modelled duration on a shared 2-core machine, so the
// plugin sees the model plus scheduling noise; preemption only adds time, which MIN mode
// discards, leaving the cost of the callbacks themselves (tens of ns) as the bias.
type FitTolerance struct {
	LatencyNs    float64 // absolute
	BandwidthRel float64 // relative
}

// DefaultFit is stated in docs/testing.md: latency within 300 ns, bandwidth within 3 %.
var DefaultFit = FitTolerance{LatencyNs: 300, BandwidthRel: 0.03}

// CheckExact compares every communicator of the truth with the plugin's summary: operation
// counts and bytes, rank-pair bytes and transfers, channel transfers, exactly; and no drops.
func CheckExact(t *testing.T, r *Run, tr Truth) {
	t.Helper()
	if tr.UnwrittenHandles != 0 {
		t.Errorf("plugin left *eHandle unwritten %d times", tr.UnwrittenHandles)
	}
	for _, tc := range tr.Comms {
		s := r.Summary(tc.Hash, tc.Rank)
		if s == nil {
			t.Errorf("no summary for communicator %s (%s) rank %d", tc.Name, tc.Hash, tc.Rank)
			continue
		}
		checkOps(t, tc, s)
		checkPairs(t, tc, s)
		checkChannels(t, tc, s)
		h := s.Health
		for k, v := range map[string]uint64{"orphan_steps": h.OrphanSteps, "orphan_proxyops": h.OrphanProxy,
			"orphan_kernelch": h.OrphanKernel, "late_unmatched": h.LateUnmatched,
			"untimed_ops": h.UntimedOps, "transfers_unkeyed": h.TransfersUnkeyed} {
			if v != 0 {
				t.Errorf("%s: health %s = %d, want 0", tc.Name, k, v)
			}
		}
		if len(h.Untracked) != 0 || len(h.TraceDropped) != 0 || !s.Complete {
			t.Errorf("%s: untracked %v, trace dropped %v, complete %v (%v)", tc.Name, h.Untracked,
				h.TraceDropped, s.Complete, s.Partial)
		}
		if d := s.Counters["dropped_windows_full"] + s.Counters["dropped_too_many_threads"] +
			s.Counters["dropped_detail"]; d != 0 {
			t.Errorf("%s: %d events dropped", tc.Name, d)
		}
	}
}

func checkOps(t *testing.T, tc TruthComm, s *Summary) {
	t.Helper()
	for _, o := range tc.Ops {
		got := s.Op(o.Func, o.Algo, o.Proto, o.NChannels)
		if got == nil {
			t.Errorf("%s: %s/%s/%s/%dch missing from the summary", tc.Name, o.Func, o.Algo, o.Proto, o.NChannels)
			continue
		}
		if got.Count != o.Count || got.Bytes != o.Bytes {
			t.Errorf("%s: %s/%s/%s/%dch: plugin %d ops %d bytes, truth %d ops %d bytes",
				tc.Name, o.Func, o.Algo, o.Proto, o.NChannels, got.Count, got.Bytes, o.Count, o.Bytes)
		}
	}
	if len(s.Ops) != len(tc.Ops) {
		t.Errorf("%s: plugin reports %d operation keys, truth has %d: %+v", tc.Name, len(s.Ops), len(tc.Ops), s.Ops)
	}
}

func checkPairs(t *testing.T, tc TruthComm, s *Summary) {
	t.Helper()
	for _, p := range tc.Pairs {
		got := s.Pair(tc.Rank, p.Peer)
		if got == nil {
			t.Errorf("%s: pair %d→%d missing", tc.Name, tc.Rank, p.Peer)
			continue
		}
		if got.SentBytes != p.SentBytes || got.SendTransfers != p.SendTransfers ||
			got.RecvBytes != p.RecvBytes || got.RecvTransfers != p.RecvTransfers {
			t.Errorf("%s: pair %d→%d: plugin sent %d B/%d, recv %d B/%d; truth sent %d B/%d, recv %d B/%d",
				tc.Name, tc.Rank, p.Peer, got.SentBytes, got.SendTransfers, got.RecvBytes, got.RecvTransfers,
				p.SentBytes, p.SendTransfers, p.RecvBytes, p.RecvTransfers)
		}
	}
}

func checkChannels(t *testing.T, tc TruthComm, s *Summary) {
	t.Helper()
	for _, c := range tc.Channels {
		if c.Transfers == 0 {
			continue
		}
		var got *SummaryChannel
		for i := range s.Channels {
			if s.Channels[i].Rank == tc.Rank && s.Channels[i].Channel == c.Channel {
				got = &s.Channels[i]
			}
		}
		if got == nil || got.Transfers != c.Transfers || got.Bytes != c.Bytes {
			t.Errorf("%s: channel %d: plugin %+v, truth %d transfers %d bytes", tc.Name, c.Channel, got, c.Transfers, c.Bytes)
		}
	}
}

// CheckFits checks that every peer's MIN-mode fit is trusted and recovers the host's model.
func CheckFits(t *testing.T, r *Run, tr Truth, tol FitTolerance) {
	t.Helper()
	for _, tc := range tr.Comms {
		s := r.Summary(tc.Hash, tc.Rank)
		if s == nil {
			continue // reported by CheckExact
		}
		for _, p := range tc.Pairs {
			got := s.Pair(tc.Rank, p.Peer)
			if got == nil || p.SendTransfers == 0 {
				continue
			}
			f := got.FitMin
			if !f.Trusted {
				t.Errorf("%s: pair %d→%d fit not trusted: %+v", tc.Name, tc.Rank, p.Peer, f)
				continue
			}
			t.Logf("%s: pair %d→%d: latency %.0f ns (model %.0f), bandwidth %.2f GB/s (model %.2f), R² %.4f, %d transfers",
				tc.Name, tc.Rank, p.Peer, f.LatencyNs, p.LatencyNs, f.BandwidthBps/1e9, p.BandwidthBps/1e9, f.R2, f.Points)
			if math.Abs(f.LatencyNs-p.LatencyNs) > tol.LatencyNs {
				t.Errorf("%s: pair %d→%d latency %.0f ns, model %.0f ns (±%.0f)", tc.Name, tc.Rank, p.Peer,
					f.LatencyNs, p.LatencyNs, tol.LatencyNs)
			}
			if rel := math.Abs(f.BandwidthBps-p.BandwidthBps) / p.BandwidthBps; rel > tol.BandwidthRel {
				t.Errorf("%s: pair %d→%d bandwidth %.3g B/s, model %.3g B/s (%.1f%% off, ±%.0f%%)", tc.Name,
					tc.Rank, p.Peer, f.BandwidthBps, p.BandwidthBps, rel*100, tol.BandwidthRel*100)
			}
		}
	}
}
