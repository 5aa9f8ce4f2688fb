package hosttest

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// NCCL's call patterns in which API events are all or part of what it reports
// (testhost/api_patterns.c, docs/nccl-api-patterns.md), each at 12,000 operations and 2,000 a
// second with the hang watchdog at 2 s: every operation counted exactly once against the host's
// truth, no hang dump while nothing hangs, and a summary that says complete.

const patternOps = "12000"

// checkWhole checks what every replayed NCCL pattern must give: operations, bytes, rank-pair
// and channel transfers exactly as the host counted them, and no hang dump (nothing hung).
func checkWhole(t *testing.T, r *Run) {
	t.Helper()
	CheckExact(t, r, r.Truth[0])
	if dumps, _ := filepath.Glob(filepath.Join(r.Dir, "ncclprof-hang-*")); len(dumps) != 0 {
		t.Errorf("hang dumps written while nothing hung: %v", dumps)
	}
}

// runPattern runs one scenario (its name last in host) and checks what every pattern must give.
func runPattern(t *testing.T, abi int, host []string, env ...string) (*Run, *Summary) {
	t.Helper()
	r := Start(t, Options{Args: args(abi, append([]string{"--iters", patternOps, "--nranks", "4"}, host...)...),
		Env: append([]string{"NCCLPROF_HANG_TIMEOUT_S=2"}, env...)})
	tr := r.Truth[0]
	checkWhole(t, r)
	s := r.Summary(tr.Comms[0].Hash, tr.Comms[0].Rank)
	if s == nil {
		t.Fatal("no summary")
	}
	return r, s
}

// Symmetric kernels, CE collectives and multi-root Broadcasts (GroupApi + CollApi, no Coll)
// among ordinary AllReduces, some in one user group: each counted once, the API-only ones
// marked, with their API time and nccl-tests' bytes (the truth's keys without algorithm).
// Below v5 NCCL reports them not at all, and nothing is made up for them.
func TestAPIOnlyOperationsCountedOnce(t *testing.T) {
	cases := []struct {
		abi  int
		mask string
	}{{4, "default"}, {5, "default"}, {6, "default"}, {6, "default,cecoll,cesync,cebatch"}}
	for _, c := range cases {
		t.Run(fmt.Sprintf("v%d-%s", c.abi, c.mask), func(t *testing.T) {
			r, s := runPattern(t, c.abi, []string{"apionly"}, "NCCLPROF_EVENT_MASK="+c.mask)
			var apiOnly, want uint64
			for _, o := range r.Truth[0].Comms[0].Ops {
				if o.Algo != "" {
					continue
				}
				want += o.Count
				got := s.Op(o.Func, "", "", 0)
				if got == nil || got.APIOnly != o.Count || got.API.N != o.Count || got.NoCompletion != o.Count {
					t.Errorf("%s known only from API events: %+v, want %d marked api_only with API times", o.Func, got, o.Count)
				}
			}
			for _, o := range s.Ops {
				apiOnly += o.APIOnly
			}
			if c.abi >= 5 && (want != 8000 || apiOnly != want) {
				t.Errorf("API-only operations: plugin %d, truth %d, want 8000 of 12000 (4 of every 6)", apiOnly, want)
			}
			if c.abi < 5 && apiOnly != 0 {
				t.Errorf("v%d has no API events, yet %d API-only operations", c.abi, apiOnly)
			}
		})
	}
}

// A CUDA graph of an all-to-all and an AllReduce, captured once and replayed 12,000 times on a
// host-callback thread: each replay is one operation (v5+: one AlltoAll rebuilt from its
// tasks; v4: its sends and receives), and the capture's API time is nobody's.
func TestGraphReplaysEachOneOperation(t *testing.T) {
	for _, abi := range []int{4, 6} {
		t.Run(fmt.Sprintf("v%d", abi), func(t *testing.T) {
			_, s := runPattern(t, abi, []string{"graphreplay"})
			if abi < 5 {
				return
			}
			a2a := s.Op("AlltoAll", "", "", 1)
			if a2a == nil || a2a.Count != 6000 || a2a.API.N != 0 {
				t.Errorf("replayed all-to-all: %+v, want 6000 AlltoAll without API time", a2a)
			}
			if ar := s.Op("AllReduce", "RING", "LL", 1); ar == nil || ar.API.N != 0 {
				t.Errorf("replayed AllReduce: %+v, want no API time", ar)
			}
		})
	}
}

// Traced, each replay's operation says it is one (graph_replay on its nccl_op slice: its API
// call was captured), so that the analyses match replays apart from eager collectives (NCCL
// starts replays only on ranks with proxy work in the graph); eager ones say nothing
// (TestAPIOnlyInTheTrace).
func TestGraphReplaysMarkedInTheTrace(t *testing.T) {
	r := Start(t, Options{Args: args(6, "--iters", "600", "--nranks", "4", "graphreplay"), Env: []string{"NCCLPROF_TRACE=1", "NCCLPROF_HANG_TIMEOUT_S=2"}})
	traces := ReadTraces(t, r.Dir)
	if len(traces) != 1 {
		t.Fatalf("%d trace files, want 1", len(traces))
	}
	marked := map[string]int{}
	for _, e := range traces[0].Events {
		if e.Cat == "nccl_op" {
			if e.Args["graph_replay"] != true {
				t.Fatalf("a replay's operation not marked: %+v", e)
			}
			marked[e.Name]++
		}
	}
	if marked["AllReduce"] != 300 || marked["AlltoAll"] != 300 {
		t.Errorf("marked replays %v, want 300 AllReduce and 300 AlltoAll", marked)
	}
}

// A mask naming only a lower event type: NCCL starts the events above it anyway (and NCCL
// 2.23–2.25 start P2p only under the Coll, ProxyOp or ProxyStep bit), so ncclprof asks for and
// records the operations and ProxyOps above what was named. Before, `proxystep` alone recorded
// 16,000 orphan steps and no operation, and `p2p` on 2.24 got nothing from NCCL; both said complete.
func TestMaskAncestorsCounted(t *testing.T) {
	cases := []struct {
		abi      int
		mask     string
		scenario string
		nccl     int // the mask NCCL is handed
		said     int // times the plugin says it added types (-1: v1–v3 NCCL passes no logger)
	}{
		{6, "proxystep", "p2p", 0x1e, 1},
		{1, "proxystep", "allreduce", 0x1e, -1},
		{6, "kernelch", "allreduce", 0x46, 1},
		{2, "p2p", "p2p", 0x6, -1},
		{6, "p2p", "p2p", 0x4, 0},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("v%d-%s", c.abi, c.mask), func(t *testing.T) {
			r := Start(t, Options{Args: args(c.abi, "--iters", "200", "--kernel", "--fast", "--logger", c.scenario),
				Env: []string{"NCCLPROF_EVENT_MASK=" + c.mask}})
			tr := r.Truth[0]
			CheckExact(t, r, tr)
			if tr.Mask != c.nccl {
				t.Errorf("NCCL's mask %#x, want %#x", tr.Mask, c.nccl)
			}
			said := strings.Count(string(r.Stderr), "NCCL also starts the events above the types asked for")
			if c.said >= 0 && said != c.said {
				t.Errorf("the added types said %d times through NCCL's logger, want %d; stderr:\n%s", said, c.said, r.Stderr)
			}
			var ops uint64
			for _, o := range tr.Comms[0].Ops {
				ops += o.Count
			}
			if ops == 0 {
				t.Error("the host started no operation: nothing was checked")
			}
		})
	}
}

// NCCL 2.23's sends (ABI v1): a ProxyStep per raw step, 2 per network transfer, and
// SendTransmitted recorded before the transfer's size is added. Each transfer counts once (it
// counted twice before), and since 2.23 gives a send step no size, the summary says so instead
// of reporting 0 bytes as complete.
func TestV1SendsOfNCCL223(t *testing.T) {
	r := Start(t, Options{Args: args(1, "--iters", "1000", "v1order")})
	tc := r.Truth[0].Comms[0]
	s := r.Summary(tc.Hash, tc.Rank)
	if s == nil {
		t.Fatal("no summary")
	}
	checkOps(t, tc, s)
	for _, p := range tc.Pairs {
		if p.SendTransfers == 0 {
			continue
		}
		got := s.Pair(tc.Rank, p.Peer)
		if got == nil || got.SendTransfers != p.SendTransfers || got.SentBytes != 0 {
			t.Errorf("pair %d→%d: %+v, want %d transfers (the truth's) without size", tc.Rank, p.Peer, got, p.SendTransfers)
		}
	}
	if s.Complete || len(s.Partial) != 1 || !strings.Contains(s.Partial[0], "NCCL 2.23") {
		t.Errorf("complete %v, partial %q: want the sizeless sends said", s.Complete, s.Partial)
	}
}

// PXN, rank 0 of two nodes: its sends' ProxyOps run in another process's proxy, while its own
// proxy runs another rank's send. Its Sends count exactly (count and bytes, none lost, none
// hung), without completion time, and its pair to the remote rank shows only what this process
// moved (the receives); the relayed send is counted as another process's (foreign_pxn_events)
// and enters none of this rank's figures.
func TestPXNSenderCountsOnce(t *testing.T) {
	r, s := runPattern(t, 6, []string{"pxn"})
	send := s.Op("Send", "", "", 1)
	if send == nil || send.Count != 6000 || send.NoCompletion != 6000 || send.Transfers != 0 {
		t.Errorf("PXN sends: %+v, want 6000 counted, none with completion or transfers", send)
	}
	var recvs uint64
	for _, tp := range r.Truth[0].Comms[0].Pairs {
		if tp.Peer == 2 {
			recvs = tp.RecvTransfers
		}
	}
	if p := s.Pair(0, 2); p == nil || p.SentBytes != 0 || p.RecvTransfers != recvs || recvs != 12000 {
		t.Errorf("pair 0→2: %+v, want the receives only (%d)", p, recvs)
	}
	if got := s.Counters["foreign_pxn_events"]; got != 6000 {
		t.Errorf("ProxyOps run for another process: %d, want 6000", got)
	}
}

// The event mask changed at run time (ncclprof_set_event_mask) for the middle third of 12,000
// AllReduces. To p2p,p2papi: NCCL starts no CollApi then but stops the thread's last one again at
// every collective; those stops are recognised and counted, and move nothing.
// Adding KernelCh: the operations enqueued before it get no kernel channels; they are not waited
// for (before, a hang dump was written 2 s later while nothing hung).
func TestMaskChangedAtRunTime(t *testing.T) {
	t.Run("p2p", func(t *testing.T) {
		_, s := runPattern(t, 6, []string{"maskchange"})
		if ar := s.Op("AllReduce", "RING", "LL", 1); ar == nil || ar.Count != 8000 {
			t.Errorf("AllReduce %+v, want the 8000 of the first and last thirds", ar)
		}
		// Recognised as a second stop while the handle's window is open, as a late stop after it
		// was read (which moves nothing), as stale once its slot was reused. late_records also
		// counts ordinary stops that came after their window was read (a loaded machine's
		// drainer reads early: 4001 was seen once at load 15), so at least the 4000.
		twice, late, stale := s.Counters["stop_twice"], s.Counters["late_records"], s.Counters["stale_handle"]
		if twice+late+stale < 4000 || twice+stale > 4000 {
			t.Errorf("stops of the stale CollApi handle: %d twice + %d late + %d stale, want 4000", twice, late, stale)
		}
	})
	t.Run("kernelch", func(t *testing.T) {
		_, s := runPattern(t, 6, []string{"--kernel", "maskchange"})
		if ar := s.Op("AllReduce", "RING", "LL", 1); ar == nil || ar.Count != 12000 || ar.GPU.N != 4000 {
			t.Errorf("AllReduce %+v, want 12000, 4000 with GPU times", ar)
		}
	})
}

// A non-blocking communicator: each of 12,000 groups launched on a thread of its own after
// ncclGroupEnd returned (the GroupApi stopped before its Coll starts), every other one a
// symmetric kernel. The per-thread state of 12,000 short-lived threads is reclaimed (nothing
// dropped), and no launched collective is also counted from its API events.
func TestNonBlockingCommunicator(t *testing.T) {
	_, s := runPattern(t, 6, []string{"nonblocking"})
	ring, api := s.Op("AllReduce", "RING", "LL", 1), s.Op("AllReduce", "", "", 0)
	if ring == nil || api == nil || ring.Count != 6000 || ring.APIOnly != 0 || api.APIOnly != 6000 {
		t.Errorf("launched %+v, API-only %+v: want 6000 each", ring, api)
	}
	if s.Health.APIOnlyRecounted != 0 {
		t.Errorf("%d counted from API events before their Coll came", s.Health.APIOnlyRecounted)
	}
}

// Traced, an operation known only from its API events is an `nccl_op_api` slice over its API
// call, marked api_only and with no seq; the trace stays valid.
func TestAPIOnlyInTheTrace(t *testing.T) {
	r := Start(t, Options{Args: args(6, "--iters", "600", "apionly"), Env: []string{"NCCLPROF_TRACE=1"}})
	traces := ReadTraces(t, r.Dir)
	if len(traces) != 1 {
		t.Fatalf("%d trace files, want 1", len(traces))
	}
	var want uint64
	for _, o := range r.Truth[0].Comms[0].Ops {
		if o.Algo == "" {
			want += o.Count
		}
	}
	n := 0
	for _, e := range traces[0].Events {
		if e.Args["graph_replay"] != nil {
			t.Fatalf("an eager operation marked a graph replay: %+v", e)
		}
		if e.Cat != "nccl_op_api" {
			continue
		}
		n++
		if e.Args["api_only"] != true || e.Args["interval"] != "api" || e.Args["seq"] != nil || e.Dur <= 0 {
			t.Fatalf("API-only slice %+v", e)
		}
	}
	if uint64(n) != want || want != 400 {
		t.Errorf("%d nccl_op_api slices, want %d (400)", n, want)
	}
	for _, err := range traces[0].Check() {
		t.Error(err)
	}
}

// Windows far too small for 12,000 unpaced calls: CollApi and Coll records are lost, some calls
// keeping one and losing the other. Counts and bytes per function stay exact all the same (the
// lost table counts lost CollApi calls, and what became of their Coll, API-only included), and
// the summary says it is partial.
func TestAPIOnlyExactWhenRecordsAreLost(t *testing.T) {
	r := Start(t, Options{Args: args(6, "--iters", patternOps, "--rate", "1000000", "apionly"),
		Env: []string{"NCCLPROF_WINDOW_SLOTS=256", "NCCLPROF_WINDOWS=2"}})
	tc := r.Truth[0].Comms[0]
	s := r.Summary(tc.Hash, tc.Rank)
	if s == nil {
		t.Fatal("no summary")
	}
	checkOps(t, tc, s)
	var apiOnly uint64
	for _, o := range s.Ops {
		apiOnly += o.APIOnly
	}
	if apiOnly != 8000 {
		t.Errorf("API-only operations %d, want 8000", apiOnly)
	}
	if s.Health.UntimedOps == 0 || s.Complete {
		t.Errorf("untimed %d, complete %v: the windows did not overflow, nothing was tested",
			s.Health.UntimedOps, s.Complete)
	}
}

// NCCL stops each network request's NetPlugin events whether or not it started them (the start
// is gated by the mask, the stop is not): 24,000 stops of NULL beside 12,000 AllReduces are
// counted and move nothing.
func TestNetPluginStopsOfEventsNeverStarted(t *testing.T) {
	_, s := runPattern(t, 6, []string{"netstops"})
	if got := s.Counters["null_handle"]; got != 24000 {
		t.Errorf("NULL stops counted %d, want 24000", got)
	}
}
