package hosttest

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// Real NCCL, recorded on a GPU (tools/nccl/record/, testdata/nccl/README.md) and played back
// into the plugin call for call on as many threads as NCCL used (testhost/replay.c). Each
// recording holds, per rank, what the rank issued (truth-<rank>.json), every profiler call
// NCCL made (calls-<rank>.log.gz) and what ncclprof itself wrote on the GPU machine (real/).

// recTruth is ncclrec's account of what one rank issued.
type recTruth struct {
	Rank   int `json:"rank"`
	NRanks int `json:"nranks"`
	PID    int `json:"pid"`
	Calls  []struct {
		Pattern string `json:"pattern"`
		Comm    string `json:"comm"`
		Func    string `json:"func"`
		Count   uint64 `json:"count"`
		ESize   uint64 `json:"esize"`
		Times   uint64 `json:"times"`
	} `json:"calls"`
}

func readRecTruth(t *testing.T, path string) recTruth {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var tr recTruth
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return tr
}

// replayLog plays a recorded log back into the plugin at `speed` times the recorded pace (0: as
// fast as it goes), under a hang watchdog of hangS seconds.
func replayLog(t *testing.T, log string, pid int, speed string, hangS int, env ...string) *Run {
	t.Helper()
	return Start(t, Options{
		Args: []string{"--log", log, "--recorded-pid", fmt.Sprint(pid), "--speed", speed, "replay"},
		Env:  append([]string{fmt.Sprintf("NCCLPROF_HANG_TIMEOUT_S=%d", hangS)}, env...),
	})
}

// checkTransfers: every send step NCCL stopped in the log (logFacts) is a transfer of its
// operation.
func checkTransfers(t *testing.T, got map[string]opTotal, sendSteps int) {
	t.Helper()
	var transfers uint64
	for _, x := range got {
		transfers += x.transfers
	}
	if transfers != uint64(sendSteps) {
		t.Errorf("transfers %d, want %d (every send step NCCL stopped)", transfers, sendSteps)
	}
}

// opTotals adds up a run's operations by function: count, bytes, API-only, without completion.
type opTotal struct{ count, bytes, apiOnly, noCompletion, transfers uint64 }

func opTotals(sums []Summary) map[string]opTotal {
	out := map[string]opTotal{}
	for _, s := range sums {
		for _, o := range s.Ops {
			x := out[o.Func]
			x.count += o.Count
			x.bytes += o.Bytes
			x.apiOnly += o.APIOnly
			x.noCompletion += o.NoCompletion
			x.transfers += o.Transfers
			out[o.Func] = x
		}
	}
	return out
}

// logFacts reads what a call log itself says: send steps stopped (each is one network transfer
// the plugin must keep) and ProxyOps started (whether the network path was taken at all).
func logFacts(t *testing.T, path string) (sendSteps, proxyOps int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	type ev struct{ typ, parent, send string }
	evs := map[string]ev{}
	sc := bufio.NewScanner(z)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 {
			continue
		}
		kv := map[string]string{}
		for _, f := range fields[3:] {
			if k, v, ok := strings.Cut(f, "="); ok {
				kv[k] = v
			}
		}
		switch fields[2] {
		case "start":
			evs[kv["h"]] = ev{kv["type"], kv["parent"], kv["send"]}
			if kv["type"] == "8" {
				proxyOps++
			}
		case "stop":
			if e := evs[kv["h"]]; e.typ == "16" && evs[e.parent].send == "1" {
				sendSteps++
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return sendSteps, proxyOps
}

// checkReplayWhole: every summary complete, no ProxyOp retired or step orphaned (NCCL stopped them
// all: a retirement would be a live ProxyOp taken for abandoned), no hang dump.
func checkReplayWhole(t *testing.T, r *Run) {
	t.Helper()
	for _, s := range r.Summaries {
		if !s.Complete || len(s.Partial) != 0 {
			t.Errorf("comm %s: complete=%v partial=%q", s.Comm.Hash, s.Complete, s.Partial)
		}
	}
	if len(r.Summaries) > 0 {
		c := r.Summaries[0].Counters
		for _, k := range []string{"proxyops_retired", "proxyops_retired_old", "orphan_steps", "stale_handle",
			"arena_full", "dropped_windows_full", "lost_operations", "bad_handle", "foreign_context"} {
			if c[k] != 0 {
				t.Errorf("process counter %s = %d, want 0 (every ProxyOp of this log was stopped by NCCL)", k, c[k])
			}
		}
	}
	if m, _ := filepath.Glob(filepath.Join(r.Dir, "ncclprof-hang-*.json")); len(m) != 0 {
		t.Errorf("hang dumps written while nothing hung: %v", m)
	}
}

// recordedRanks: the ranks a recording folder holds (a truth file each), in order.
func recordedRanks(t *testing.T, dir string) []int {
	t.Helper()
	var ranks []int
	for rank := 0; rank < 64; rank++ {
		if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("truth-%d.json", rank))); err == nil {
			ranks = append(ranks, rank)
		}
	}
	if len(ranks) == 0 {
		t.Fatalf("%s: no truth-<rank>.json", dir)
	}
	return ranks
}

// TestRealNCCLReplay: each recording, each rank. The trace is what Perfetto reads whole; counts
// and bytes by function equal what the rank issued (a communicator of one rank excepted: NCCL 2.28–2.30 emit nothing for it,
// enqueue.cc taskAppend → ncclLaunchOneRank) and what ncclprof wrote on the GPU machine; every
// send step is a transfer; only operations without network work lack a completion.
func TestRealNCCLReplay(t *testing.T) {
	root := filepath.Join(Root(t), "testdata", "nccl")
	for _, rec := range []string{"2.30.7-net", "2.28.9-net", "2.30.7-p2p", "2.28.9-net-shared"} {
		rec := rec
		for _, rank := range recordedRanks(t, filepath.Join(root, rec)) {
			rank := rank
			t.Run(fmt.Sprintf("%s/rank%d", rec, rank), func(t *testing.T) {
				t.Parallel()
				dir := filepath.Join(root, rec)
				tr := readRecTruth(t, filepath.Join(dir, fmt.Sprintf("truth-%d.json", rank)))
				log := filepath.Join(dir, fmt.Sprintf("calls-%d.log.gz", rank))
				// The slowest operation of these recordings was in flight 1.6 s (2.28.9's
				// AllReduce of 4 MiB): a 10 s watchdog stays quiet unless something hangs.
				r := replayLog(t, log, tr.PID, "1", 10, "NCCLPROF_TRACE=1")
				checkReplayWhole(t, r)
				traces := ReadTraces(t, r.Dir)
				if len(traces) == 0 {
					t.Error("no trace written (NCCLPROF_TRACE=1)")
				}
				for _, x := range traces {
					for _, err := range x.Check() {
						t.Errorf("trace of real NCCL's calls: %v", err)
					}
				}
				got := opTotals(r.Summaries)
				net := strings.Contains(rec, "-net")
				if net {
					checkReplaysMarked(t, tr, traces)
				}
				checkAgainstTruth(t, tr, got, net)
				checkAgainstReal(t, filepath.Join(dir, "real"), tr.PID, r.Summaries)
				sendSteps, proxyOps := logFacts(t, log)
				checkTransfers(t, got, sendSteps)
				if strings.HasSuffix(rec, "-p2p") && proxyOps != 0 {
					t.Errorf("the P2P recording has %d ProxyOps: it took the network path", proxyOps)
				}
			})
		}
	}
}

// checkReplaysMarked: every replay of the recording's CUDA graph that completed is marked in the
// trace (graph_replay on its nccl_op slice, from the captured CollApi), and no eager collective
// is: the graph's AllReduces as issued, none more.
func checkReplaysMarked(t *testing.T, tr recTruth, traces []*Trace) {
	t.Helper()
	var want, marked uint64
	for _, c := range tr.Calls {
		if c.Pattern == "graph" && c.Func == "AllReduce" {
			want += c.Times
		}
	}
	for _, x := range traces {
		for _, e := range x.Events {
			if e.Cat == "nccl_op" && e.Name == "AllReduce" && e.Args["graph_replay"] == true {
				marked++
			}
		}
	}
	if marked != want || want == 0 {
		t.Errorf("%d AllReduce marked graph replays, the rank replayed %d", marked, want)
	}
}

// checkAgainstTruth: counts by function as issued; completions on the network path for all but
// the operations with no network work (a rank's Send/Recv to itself in the all-to-alls, and
// collectives NCCL reports by API events alone); on the P2P path none (the default mask has no
// KernelCh, and no proxy runs).
func checkAgainstTruth(t *testing.T, tr recTruth, got map[string]opTotal, network bool) {
	t.Helper()
	want := map[string]uint64{}
	self := map[string]uint64{}
	for _, c := range tr.Calls {
		if c.Comm == "solo" {
			continue
		}
		want[c.Func] += c.Times
		if c.Pattern == "alltoall_p2p" || c.Pattern == "graph" {
			if c.Func == "Send" || c.Func == "Recv" {
				self[c.Func] += c.Times / uint64(tr.NRanks)
			}
		}
	}
	funcs := map[string]bool{}
	for f := range want {
		funcs[f] = true
	}
	for f := range got {
		funcs[f] = true
	}
	names := make([]string, 0, len(funcs))
	for f := range funcs {
		names = append(names, f)
	}
	sort.Strings(names)
	for _, f := range names {
		g := got[f]
		if g.count != want[f] {
			t.Errorf("%s: %d operations, the rank issued %d", f, g.count, want[f])
		}
		wantNo := g.count
		if network {
			wantNo = self[f] + g.apiOnly
		}
		if g.noCompletion != wantNo {
			t.Errorf("%s: %d operations without completion, want %d (self %d, API-only %d)",
				f, g.noCompletion, wantNo, self[f], g.apiOnly)
		}
	}
}

// checkAgainstReal: what the replay gives equals what ncclprof wrote beside real NCCL, for the
// figures exact by construction (operations, bytes, API-only, per communicator and function).
func checkAgainstReal(t *testing.T, dir string, pid int, replay []Summary) {
	t.Helper()
	byHash := map[string]Summary{}
	for _, s := range replay {
		byHash[s.Comm.Hash] = s
	}
	n := 0
	for _, real := range ReadSummaries(t, dir) {
		if real.PID != pid {
			continue
		}
		n++
		rep, ok := byHash[real.Comm.Hash]
		if !ok {
			t.Errorf("communicator %s of the real run is missing from the replay", real.Comm.Hash)
			continue
		}
		want, got := opTotals([]Summary{real}), opTotals([]Summary{rep})
		for fn, x := range want {
			y := got[fn]
			if x.count != y.count || x.bytes != y.bytes || x.apiOnly != y.apiOnly {
				t.Errorf("comm %s %s: real run %d ops, %d bytes, %d API-only; replay %d, %d, %d",
					real.Comm.Hash, fn, x.count, x.bytes, x.apiOnly, y.count, y.bytes, y.apiOnly)
			}
		}
	}
	if n == 0 {
		t.Fatalf("no real summaries of pid %d in %s", pid, dir)
	}
}

// TestRealNCCLQueuedProxyOps: 200 back-to-back ring and all-to-all Send/Recv groups on the
// socket transport (2.30.7, rank 0's point_to_point phase of a 200-iteration recording). NCCL
// queues each receive ProxyOp behind the one its connection runs (proxy.cc ProxyAppend,
// `nextPeer`): over a thousand wait at once, some for 60 ms, with no state and no step, while
// other connections finish operations. None is abandoned: before, the plugin retired 172 of
// them as never-stopped (and lost their 1,320 steps), and filled its arena on the cursor's next
// lap over the queued run of cells.
func TestRealNCCLQueuedProxyOps(t *testing.T) {
	dir := filepath.Join(Root(t), "testdata", "nccl", "2.30.7-net-burst")
	tr := readRecTruth(t, filepath.Join(dir, "truth-0.json"))
	log := filepath.Join(dir, "calls-0.log.gz")
	sendSteps, _ := logFacts(t, log)
	// As fast as it goes, and at twice the recorded pace (26 s). The slowest operation was in
	// flight 7.6 s as recorded (grouped AllReduce behind the burst): the watchdog's 10 s is
	// past it at either pace.
	for _, speed := range []string{"0", "2"} {
		t.Run("speed"+speed, func(t *testing.T) {
			// As fast as it goes is over a million calls a second: windows of 16,384 slots
			// hold them while a loaded machine's drainer catches up (what is checked here is
			// the ProxyOps' bookkeeping, not the drop path).
			r := replayLog(t, log, tr.PID, speed, 10, "NCCLPROF_WINDOW_SLOTS=16384")
			checkReplayWhole(t, r)
			got := opTotals(r.Summaries)
			var ring, a2a, selfA2A uint64
			for _, c := range tr.Calls {
				switch c.Pattern {
				case "ring":
					ring = c.Times
				case "alltoall_p2p":
					a2a = c.Times
					selfA2A = c.Times / uint64(tr.NRanks)
				}
			}
			for _, f := range []string{"Send", "Recv"} {
				if g := got[f]; g.count != ring+a2a || g.noCompletion != selfA2A {
					t.Errorf("%s: %d operations, %d without completion; want %d and %d (to itself)",
						f, g.count, g.noCompletion, ring+a2a, selfA2A)
				}
			}
			checkTransfers(t, got, sendSteps)
		})
	}
}

// The replay against a run it recorded: the stand-in's `mixed` scenario (user, proxy and
// CUDA-callback threads, three communicators, PXN operations of another process, graph
// replays) with the recorder chained behind ncclprof, then its log played back into ncclprof.
// Every figure exact by construction, and the completions, must come out as they did.
// (The replay of real NCCL cannot show this: the plugin beside real NCCL had the bug since fixed.)
func TestReplayEqualsTheRunItRecorded(t *testing.T) {
	log := filepath.Join(t.TempDir(), "calls.log")
	orig := Start(t, Options{
		Args: []string{"--chain", Path(t, "libnccl-profiler-recorder.so"), "--iters", "200", "mixed"},
		Env:  []string{"NCCLPROF_RECORDER_LOG=" + log, "NCCLPROF_RECORDER_CLOCK=1"},
	})
	if len(orig.Summaries) == 0 {
		t.Fatal("the recorded run wrote no summary")
	}
	rep := replayLog(t, log, orig.Summaries[0].PID, "1", 10)
	byHash := map[string]Summary{}
	for _, s := range rep.Summaries {
		byHash[s.Comm.Hash] = s
	}
	if len(rep.Summaries) != len(orig.Summaries) {
		t.Errorf("%d communicators replayed, %d recorded", len(rep.Summaries), len(orig.Summaries))
	}
	for _, o := range orig.Summaries {
		r, ok := byHash[o.Comm.Hash]
		if !ok {
			t.Errorf("communicator %s missing from the replay", o.Comm.Hash)
			continue
		}
		// Completions and an operation's transfers also depend on when its children came:
		// compared where neither run had one come after its operation closed (a machine
		// stalled past QuietNs), which each run's health says.
		timed := o.Health.LateChildren == 0 && r.Health.LateChildren == 0
		want, got := opTotals([]Summary{o}), opTotals([]Summary{r})
		for fn, x := range want {
			y := got[fn]
			if !timed {
				x.noCompletion, x.transfers, y.noCompletion, y.transfers = 0, 0, 0, 0
			}
			if y != x {
				t.Errorf("comm %s %s: recorded run %+v, replay %+v", o.Comm.Hash, fn, x, y)
			}
		}
		if a, b := o.Counters["foreign_pxn_events"], r.Counters["foreign_pxn_events"]; a == 0 || a != b {
			t.Errorf("PXN events of another process: %d in the recorded run, %d replayed (want equal, not 0)", a, b)
		}
	}
}
