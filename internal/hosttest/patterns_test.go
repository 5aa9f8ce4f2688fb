package hosttest

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// NCCL's proxy-thread patterns (docs/nccl-patterns.md, testhost/proxy_patterns.c), each
// replayed at 12,000 operations paced at 2,000 per second (as the issue measured) and unpaced.
// Unpaced, the windows are made large enough for the whole run, so that a drainer starved of
// CPU by the shared machine cannot drop operation records: what is under test is the arena
// (cells that NCCL never frees or frees once for many starts), which no window size helps.
// Before the fix, the paced nostop run lost 30,225 ProxyOps and 59,758 ProxySteps to a full
// arena, and restarted steps filled it within a few hundred operations.
var patternRuns = []struct {
	name string
	rate string
	env  []string
}{
	{"paced", "2000", nil},
	{"unpaced", "0", []string{"NCCLPROF_WINDOW_SLOTS=32768"}},
}

// runProxyPattern replays a pattern with the hang watchdog at 2 s and checks what every pattern
// must keep: operations, bytes, rank-pair and channel transfers exactly as the host counted
// them, nothing dropped, the summary complete, and no hang dump (nothing hung).
func runProxyPattern(t *testing.T, scenario, rate string, env []string) *Run {
	t.Helper()
	env = append([]string{"NCCLPROF_METRICS=none", "NCCLPROF_HANG_TIMEOUT_S=2"}, env...)
	r := Start(t, Options{Args: args(6, "--iters", "12000", "--rate", rate, scenario), Env: env})
	checkWhole(t, r)
	if n := r.Truth[0].Counter(t, "ARENA_FULL"); n != 0 {
		t.Errorf("the arena was full %d times", n)
	}
	if strings.Contains(string(r.Stderr), "dropped") {
		t.Errorf("the plugin warned of drops:\n%s", r.Stderr)
	}
	return r
}

// ProxyOps that proxy.cc starts and nothing stops (CollNet AllReduce), alternating with ring
// AllGathers over the network: each never-stopped ProxyOp is retired once a later ProxyOp of
// its communicator stops, every one of them (2 per channel of 6,000 CollNet operations), and
// none on weaker evidence; every AllGather transfer is kept and every AllGather completes.
func TestNeverStoppedProxyOpsAreRetired(t *testing.T) {
	for _, run := range patternRuns {
		t.Run(run.name, func(t *testing.T) {
			r := runProxyPattern(t, "nostop", run.rate, run.env)
			tr := r.Truth[0]
			tc := tr.Comms[0]
			s := r.Summary(tc.Hash, tc.Rank)
			const collnetOps, channels = 6000, 2
			// The last CollNet operation's ProxyOps have no later stop: finalize reads them.
			if got, want := tr.Counter(t, "OPS_RETIRED"), uint64(collnetOps*channels*2); got < want-4 || got > want {
				t.Errorf("%d ProxyOps retired, want %d (all but the last operation's)", got, want)
			}
			if n := tr.Counter(t, "OPS_RETIRED_OLD"); n != 0 {
				t.Errorf("%d ProxyOps retired without a later stop", n)
			}
			if s.Health.Expired != 0 || s.Counters["proxyops_retired"] != tr.Counter(t, "OPS_RETIRED") {
				t.Errorf("health: %d expired; the summary's proxyops_retired %d", s.Health.Expired,
					s.Counters["proxyops_retired"])
			}
			ag := s.Op("AllGather", "RING", "SIMPLE", channels)
			if ag == nil || ag.NoCompletion != 0 || ag.Incomplete != 0 {
				t.Errorf("AllGather: %+v, want every operation complete with its completion time", ag)
			}
			// CollNet operations say nothing of when they end (NCCL never reports on their
			// ProxyOps, which therefore leave no record), but none is left incomplete.
			if cn := s.Op("AllReduce", "COLLNET_DIRECT", "SIMPLE", channels); cn == nil || cn.Incomplete != 0 {
				t.Errorf("CollNet AllReduce: %+v, want none incomplete", cn)
			}
		})
	}
}

// Receive steps that net.cc starts again on every progress pass until their irecv is posted
// (20 starts each here): each restart reuses the step's cell, so the arena holds one cell per
// step in flight, every transfer is kept once, and the restarts are counted.
func TestRestartedReceiveStepsReuseTheirCell(t *testing.T) {
	for _, run := range patternRuns {
		t.Run(run.name, func(t *testing.T) {
			r := runProxyPattern(t, "restart", run.rate, run.env)
			tr := r.Truth[0]
			const ops, channels, steps, restarts = 12000, 2, 4, 19
			if got, want := tr.Counter(t, "STEP_RESTARTS"), uint64(ops*channels*steps*restarts); got != want {
				t.Errorf("%d restarts counted, want %d", got, want)
			}
			if n := tr.TypeCounts[4]; n != ops*channels*steps*(restarts+2) {
				t.Errorf("the host started %d ProxySteps: the pattern is not the one intended", n)
			}
		})
	}
}

// Receive ProxyOps queued behind their connection (proxy.cc ProxyAppend `nextPeer`, section 3
// of docs/nccl-patterns.md), as real NCCL did: none is taken for a ProxyOp NCCL never stops.
//   - queued: as 2.30.7 did under a burst, 300 operations' receives wait on each of 4
//     channels (1,200 at once, more than the retirement ring) with no state and no step while
//     every send runs and stops. The plugin before the fix retired 47,995 of 48,000 and lost
//     their 95,990 steps.
//   - queuedp2p: P2P receives over the network wait in one queue per channel whatever their
//     peer (net.cc recvConnect, shared buffers), so a receive from one peer waits behind
//     another peer's while later sends stop. Keyed on (channel, peer), the plugin retired
//     21,998 of 24,000 at 94ff611, their steps orphaned (real NCCL 2.28.9 did this to rank 2
//     of a recording, testdata/nccl/2.28.9-net-shared).
func TestQueuedProxyOpsAreKept(t *testing.T) {
	for _, scenario := range []string{"queued", "queuedp2p"} {
		for _, run := range patternRuns {
			t.Run(scenario+"/"+run.name, func(t *testing.T) {
				r := runProxyPattern(t, scenario, run.rate, run.env)
				tr := r.Truth[0]
				for _, c := range []string{"OPS_RETIRED", "OPS_RETIRED_OLD", "ORPHAN_STEPS", "STALE_HANDLE"} {
					if n := tr.Counter(t, c); n != 0 {
						t.Errorf("%s = %d, want 0 (NCCL stops every one of these ProxyOps)", c, n)
					}
				}
				tc := tr.Comms[0]
				s := r.Summary(tc.Hash, tc.Rank)
				if len(s.Ops) == 0 {
					t.Fatal("no operations in the summary")
				}
				for _, op := range s.Ops { // counts and bytes: checked against the truth above
					if op.NoCompletion != 0 || op.Incomplete != 0 {
						t.Errorf("%s: %d without completion, %d incomplete; want every one complete", op.Func, op.NoCompletion, op.Incomplete)
					}
				}
			})
		}
	}
}

// Proxy threads that end, one after another (NCCL runs one per communicator and ends it with
// the communicator; the PXN communicator outlives them all): 400 of them, two ring AllReduces
// each, on an arena of 256 cells (16 blocks). Each thread ends owning the block of cells it
// claimed last (profiler/threads.c gives them back; kept, 16 ended threads filled the arena:
// 464 events untracked at b7c8317^), and its transfer sums were kept per thread slot, with
// slots chosen by thread id (400 threads filled the sum table: 4,592 transfers unkeyed at
// b7c8317): a thread now takes the lowest free slot and goes on with its sums.
func TestProxyThreadChurn(t *testing.T) {
	env := []string{"NCCLPROF_METRICS=none", "NCCLPROF_INFLIGHT_CELLS=256"}
	r := Start(t, Options{Args: args(6, "--iters", "800", "--channels", "2", "--fast", "proxychurn"), Env: env})
	checkWhole(t, r)
	tr := r.Truth[0]
	if n := tr.Counter(t, "ARENA_FULL"); n != 0 {
		t.Errorf("the arena was full %d times", n)
	}
	tc := tr.Comms[0]
	s := r.Summary(tc.Hash, tc.Rank)
	if op := s.Op("AllReduce", "RING", "SIMPLE", 2); op == nil || op.Count != 800 || op.NoCompletion != 0 || op.Incomplete != 0 {
		t.Errorf("AllReduce: %+v, want 800, every one complete", op)
	}
}

// The proxy patterns as each NCCL release plays them (testhost --nccl): before 2.27 only
// net.cc's progress functions start ProxyOps, at their first pass (v2.23.4-1 to v2.26.6-1), so
// a CollNet ProxyOp is never started and a receive queued behind its connection has no record
// until it is its queue's head; from 2.27 proxy.cc starts every one when it is appended. Every
// release's figures are exact (2.23's send sizes aside), and no ProxyOp is retired but the
// never-stopped CollNet ones of 2.27+. Before ABI v4 a receive head started with no step yet (its
// shared buffers not free) was retired as none of net.cc's: 6,804 of the queued run's 2,000
// operations at 2.24 and 2.26 and 5,998 of queuedp2p's, their steps orphaned. And 2.23 restarts
// a transfer's 2 raw steps together, the first before the last: only a restart of the step
// started last was known, so each pass took new cells (the arena full 670,973 times, 7,894
// ProxyOps untracked in the restart run).
func TestProxyPatternsPerRelease(t *testing.T) {
	const iters, channels = 2000, 2
	for _, rel := range ncclReleases {
		for _, scenario := range []string{"nostop", "queued", "queuedp2p", "restart"} {
			t.Run(rel.name+"/"+scenario, func(t *testing.T) {
				env := []string{"NCCLPROF_METRICS=none", "NCCLPROF_HANG_TIMEOUT_S=2"}
				log := filepath.Join(t.TempDir(), "calls.log")
				if scenario == "queued" { // the calls, to count the ProxyOps open at once
					env = append(env, "NCCLPROF_HOST_CALLLOG="+log)
				}
				r := Start(t, Options{Args: []string{"--nccl", rel.name, "--iters", strconv.Itoa(iters), "--rate", "0", scenario}, Env: env})
				tr := r.Truth[0]
				if rel.name == "2.23" {
					check223(t, r, tr)
				} else {
					checkWhole(t, r)
				}
				appends := rel.abi >= 4
				retired := uint64(0)
				if scenario == "nostop" && appends {
					retired = iters / 2 * channels * 2 // every CollNet ProxyOp but the last operation's
				}
				if got := tr.Counter(t, "OPS_RETIRED"); got > retired || got+4 < retired {
					t.Errorf("%d ProxyOps retired, want %d", got, retired)
				}
				for _, c := range []string{"OPS_RETIRED_OLD", "ORPHAN_STEPS", "STALE_HANDLE", "ARENA_FULL"} {
					if n := tr.Counter(t, c); n != 0 {
						t.Errorf("%s = %d, want 0", c, n)
					}
				}
				switch scenario {
				case "nostop":
					wantOps := uint64(iters / 2 * channels * 2) // the AllGathers' ProxyOps
					if appends {
						wantOps *= 2 // and the CollNet AllReduces'
					}
					if tr.TypeCounts[3] != wantOps {
						t.Errorf("%d ProxyOps started, want %d (CollNet's are started from 2.27 on)", tr.TypeCounts[3], wantOps)
					}
				case "queued":
					switch open := maxOpenProxyOps(readCallLog(t, log)); {
					case appends && open < 1200:
						t.Errorf("at most %d ProxyOps open at once: from 2.27 receives queued 300 deep on 4 channels are started when appended", open)
					case !appends && open > 8:
						t.Errorf("%d ProxyOps open at once: before 2.27 a queued receive is started only as its queue's head", open)
					}
				case "restart": // every receive step started 20 times, each raw step on 2.23 (2 a transfer)
					if got, want := tr.Counter(t, "STEP_RESTARTS"), uint64(iters*channels*4*rel.perTransfer*19); got != want {
						t.Errorf("%d step restarts counted, want %d", got, want)
					}
				}
			})
		}
	}
}

// maxOpenProxyOps is the most ProxyOps that NCCL stops later open at once in a call log.
func maxOpenProxyOps(log []callLine) int {
	stopped := map[string]bool{}
	for _, l := range log {
		if l.kind == "stop" {
			stopped[l.ref] = true
		}
	}
	open, most := map[string]bool{}, 0
	for _, l := range log {
		switch h := l.get("h"); {
		case l.kind == "start" && l.get("type") == "8" && stopped[h]:
			open[h] = true
			most = max(most, len(open))
		case l.kind == "stop":
			delete(open, l.ref)
		}
	}
	return most
}
