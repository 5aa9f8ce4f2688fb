package hosttest

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"testing"

	"github.com/ncclprof/ncclprof/internal/commops"
)

// Sampled, always-on tracing (NCCLPROF_TRACE_SAMPLE=N): the tests read the sampled trace back
// and check what it holds against what the host did.

// sampledOp is an operation of a sampled trace with what the trace holds of it.
type sampledOp struct {
	ev         *TraceEvent // its Coll/P2p slice (nil: only its completion span is there)
	proxies    []*TraceEvent
	steps      map[string]int // per ProxyOp id: its steps
	kernels    int
	completion *TraceEvent
}

// sampledTrace indexes a sampled trace's operations by their Coll/P2p id, and lists the
// records that belong to no operation it holds.
type sampledTrace struct {
	ops    map[string]*sampledOp
	stray  []string
	files  []*Trace
	header map[string]any
}

func readSampled(t *testing.T, dir string) *sampledTrace {
	t.Helper()
	st := &sampledTrace{ops: map[string]*sampledOp{}}
	for _, tr := range ReadTraces(t, dir) {
		if !sampledName.MatchString(filepath.Base(tr.Path)) {
			continue
		}
		st.files = append(st.files, tr)
		st.header, _ = tr.Meta["sampling"].(map[string]any)
		st.index(tr)
	}
	if len(st.files) == 0 {
		t.Fatalf("no sampled trace in %s", dir)
	}
	return st
}

var sampledName = regexp.MustCompile(`^ncclprof-.+-\d+-sampled-(\d+)(\.\d+)?\.trace\.json$`)

func (st *sampledTrace) op(id string) *sampledOp {
	o := st.ops[id]
	if o == nil {
		o = &sampledOp{steps: map[string]int{}}
		st.ops[id] = o
	}
	return o
}

func (st *sampledTrace) index(tr *Trace) {
	proxyOf := map[string]string{} // ProxyOp id → its operation's id
	evs := tr.Events
	for i := range evs {
		e := &evs[i]
		if e.Ph != "X" {
			continue
		}
		id, _ := e.Args["id"].(string)
		parent, _ := e.Args["parent"].(string)
		switch e.Cat {
		case "nccl_coll", "nccl_p2p":
			st.op(id).ev = e
		case "nccl_proxy":
			o := st.op(parent)
			o.proxies = append(o.proxies, e)
			proxyOf[id] = parent
		case "nccl_gpu":
			op, _ := e.Args["op"].(string)
			st.op(op).kernels++
		case "nccl_op":
			op, _ := e.Args["op"].(string)
			st.op(op).completion = e
		}
	}
	for i := range evs {
		e := &evs[i]
		if e.Ph != "X" {
			continue
		}
		if e.Cat == "nccl_step" {
			parent, _ := e.Args["parent"].(string)
			opID, ok := proxyOf[parent]
			if !ok {
				st.stray = append(st.stray, fmt.Sprintf("step %v of ProxyOp %s not in the trace", e.Args["step"], parent))
				continue
			}
			st.op(opID).steps[parent]++
		}
	}
	for id, o := range st.ops {
		if o.ev == nil && o.completion == nil {
			st.stray = append(st.stray, fmt.Sprintf("ProxyOps or KernelCh of operation %s, which is not in the trace", id))
		}
	}
}

// seqOf is an operation's seq (collectives) or P2P ordinal.
func (o *sampledOp) seqOf() int64 {
	e := o.ev
	if e == nil {
		e = o.completion
	}
	for _, k := range []string{"seq", "p2p_seq"} {
		if v, ok := e.Args[k].(float64); ok {
			return int64(v)
		}
	}
	return -1
}

func (o *sampledOp) mark() string {
	if o.completion != nil {
		s, _ := o.completion.Args["traced"].(string)
		return s
	}
	s, _ := o.ev.Args["traced"].(string)
	return s
}

// full reports what is missing for o to be traced in full: its Coll/P2p, its completion span,
// every ProxyOp with all its steps, and a KernelCh per channel when they are recorded.
func (o *sampledOp) full(wantProxies, wantKernels int) []string {
	var miss []string
	if o.ev == nil {
		miss = append(miss, "no Coll/P2p slice")
	}
	if o.completion == nil {
		miss = append(miss, "no completion span")
	}
	if len(o.proxies) != wantProxies {
		miss = append(miss, fmt.Sprintf("%d ProxyOps, want %d", len(o.proxies), wantProxies))
	}
	for _, p := range o.proxies {
		id, _ := p.Args["id"].(string)
		if n := int(p.Args["nsteps"].(float64)); o.steps[id] != n {
			miss = append(miss, fmt.Sprintf("ProxyOp %s: %d steps in the trace, nsteps %d", id, o.steps[id], n))
		}
	}
	if o.kernels != wantKernels {
		miss = append(miss, fmt.Sprintf("%d KernelCh, want %d", o.kernels, wantKernels))
	}
	return miss
}

func sampleEnv(n int, extra ...string) []string {
	return append([]string{"NCCLPROF_TRACE_SAMPLE=" + strconv.Itoa(n)}, extra...)
}

// Exactly the collectives with seq % N == 0 are in the sampled trace, each in full (its
// ProxyOps with every step and their states, its KernelCh, its completion span), and nothing
// of any other: no ProxyOp, step or KernelCh whose operation is not there. Every ABI version
// whose events the sampling needs (v1-v3 decide from the same seq).
func TestSampledExactlySeqModN(t *testing.T) {
	const n, iters, channels = 4, 41, 2
	for _, abi := range []int{2, 4, 6} {
		t.Run(fmt.Sprintf("v%d", abi), func(t *testing.T) {
			r := Start(t, Options{Args: args(abi, "--iters", strconv.Itoa(iters), "--kernel", "--channels",
				strconv.Itoa(channels), "--fast", "allreduce"),
				Env: sampleEnv(n, "NCCLPROF_EVENT_MASK=default,kernelch", "NCCLPROF_TRACE_TRIGGER=off", "NCCLPROF_WINDOW_MS=20")})
			st := readSampled(t, r.Dir)
			for _, s := range st.stray {
				t.Error(s)
			}
			wantKernels := channels
			if abi < 3 {
				wantKernels = 0 // KernelCh arrived with v3
			}
			var seqs []int64
			for id, o := range st.ops {
				seq := o.seqOf()
				seqs = append(seqs, seq)
				if seq%n != 0 {
					t.Errorf("operation %s seq %d is in the trace; seq %% %d != 0", id, seq, n)
				}
				// A ring AllReduce on 4 ranks: per channel a send and a receive ProxyOp.
				for _, m := range o.full(2*channels, wantKernels) {
					t.Errorf("seq %d: %s", seq, m)
				}
				if o.mark() != "sampled" {
					t.Errorf("seq %d marked %q, want sampled", seq, o.mark())
				}
			}
			sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
			var want []int64
			for s := int64(0); s < iters; s += n {
				want = append(want, s)
			}
			if !slices.Equal(seqs, want) {
				t.Errorf("traced seqs %v, want %v", seqs, want)
			}
			if st.files[0].Count("X", "nccl_step_state") == 0 {
				t.Error("no step state slices: steps were not traced with their states")
			}
			end := sampledEnd(t, st.files[len(st.files)-1])
			if end["operations_traced"] != float64(len(want)) || end["operations_sampled_away"] != float64(iters-len(want)) {
				t.Errorf("closing metadata %v, want %d traced and %d sampled away", end, len(want), iters-len(want))
			}
			if st.header["every"] != float64(n) {
				t.Errorf("header sampling %v, want every %d", st.header, n)
			}
		})
	}
}

// A CUDA graph's collective replayed: NCCL gives every replay the seq of the next eager one
// (from 2.26, unless KernelCh is on), so seq % N traced all 20 replays of `mixed` or none (on
// real NCCL 2.28.9, 50 replays of a captured AllReduce were all traced and counted 10 times
// each). 1 in N of them is traced: the first where its seq is a multiple of N, and every N-th
// repeat after it.
func TestSampledGraphReplaysOneInN(t *testing.T) {
	const n, replays = 4, 20
	r := Start(t, Options{Args: args(6, "--iters", "12", "mixed"),
		Env: sampleEnv(n, "NCCLPROF_TRACE_TRIGGER=off", "NCCLPROF_WINDOW_MS=20")})
	st := readSampled(t, r.Dir)
	traced, seqs := 0, map[int64]bool{}
	for _, o := range st.ops {
		// The replays are the AllReduce of protocol LL (the other collectives are SIMPLE).
		if o.ev != nil && o.ev.Name == "AllReduce" && o.ev.Args["proto"] == "LL" {
			traced++
			seqs[o.seqOf()] = true
		}
	}
	if len(seqs) != 1 {
		t.Fatalf("traced replays with seqs %v, want one seq (NCCL does not advance it)", seqs)
	}
	if want := (replays + n - 1) / n; traced != want { // the replays k = 0, n, 2n, … of 0 … replays-1
		t.Errorf("%d of the %d graph replays traced, want %d (1 in %d)", traced, replays, want, n)
	}
}

// The eager collective whose seq a CUDA graph's replays carried is sampled by its seq alone,
// so alike on a rank that saw the replays and on one that did not (a plan without proxy work
// on that rank: NCCL starts no replay events there). Before, a seq's repeats were counted
// together, replays and eager: after 20 replays the eager AllReduce was chosen by 20 % N, on a
// rank without them by seq % N.
func TestSampledEagerAfterReplaysAlikeOnEveryRank(t *testing.T) {
	const n = 3
	seqLine := regexp.MustCompile(`mixed: eager AllReduce after \d+ replays: seq (\d+)`)
	for _, replays := range []int{0, 20, 21} {
		t.Run(fmt.Sprintf("%d replays", replays), func(t *testing.T) {
			r := Start(t, Options{Args: args(6, "--iters", "12", "--replays", strconv.Itoa(replays), "mixed"),
				Env: sampleEnv(n, "NCCLPROF_TRACE_TRIGGER=off", "NCCLPROF_WINDOW_MS=20")})
			m := seqLine.FindSubmatch(r.Stderr)
			if m == nil {
				t.Fatalf("the host did not say the eager AllReduce's seq:\n%s", r.Stderr)
			}
			seq, _ := strconv.ParseInt(string(m[1]), 10, 64)
			traced := false
			for _, o := range readSampled(t, r.Dir).ops {
				if o.ev != nil && o.ev.Name == "AllReduce" && o.ev.Args["proto"] != "LL" &&
					o.ev.Args["comm"] == "0x3170000000000001" && o.seqOf() == seq {
					traced = true
				}
			}
			if want := seq%n == 0; traced != want {
				t.Errorf("the eager AllReduce of seq %d after %d replays: traced %v, want %v (seq %% %d == 0)", seq, replays, traced, want, n)
			}
		})
	}
}

func sampledEnd(t *testing.T, tr *Trace) map[string]any {
	t.Helper()
	var end map[string]any
	if err := json.Unmarshal(tr.End["sampling"], &end); err != nil {
		t.Fatalf("%s: ncclprofEnd.sampling: %v", tr.Path, err)
	}
	return end
}

// P2P: each (peer, direction) is sampled by the plugin's ordinal % N, in full (its ProxyOp and
// steps); a self send/receive has no network work, only its slices.
func TestSampledP2PByOrdinal(t *testing.T) {
	const n, iters, nranks = 3, 10, 4
	for _, abi := range []int{2, 6} {
		t.Run(fmt.Sprintf("v%d", abi), func(t *testing.T) {
			r := Start(t, Options{Args: args(abi, "--iters", strconv.Itoa(iters), "--nranks", strconv.Itoa(nranks), "--fast", "p2p"),
				Env: sampleEnv(n, "NCCLPROF_TRACE_TRIGGER=off", "NCCLPROF_WINDOW_MS=20")})
			st := readSampled(t, r.Dir)
			for _, s := range st.stray {
				t.Error(s)
			}
			got := map[string][]int64{}
			for _, o := range st.ops {
				peer := int(o.ev.Args["peer"].(float64))
				k := fmt.Sprintf("%s peer %d", o.ev.Name, peer)
				got[k] = append(got[k], o.seqOf())
				miss := o.full(1, 0)
				if peer == 0 { // rank 0 with itself: no network work, so no ProxyOp and no completion
					miss = nil
					if o.ev == nil || len(o.proxies) > 0 || o.completion != nil {
						miss = []string{"a self send/receive with more than its slice"}
					}
				}
				for _, m := range miss {
					t.Errorf("%s #%d: %s", k, o.seqOf(), m)
				}
			}
			for peer := 0; peer < nranks; peer++ {
				for _, fn := range []string{"Send", "Recv"} {
					k := fmt.Sprintf("%s peer %d", fn, peer)
					s := got[k]
					sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
					if want := []int64{0, 3, 6, 9}; !slices.Equal(s, want) {
						t.Errorf("%s: ordinals %v traced, want %v", k, s, want)
					}
				}
			}
		})
	}
}

// Ranks decide alone, yet alike: four simulated ranks (separate processes) trace the same
// collective seqs, and for every pair the sends one traced are the receives the other traced.
func TestSampledLinesUpAcrossRanks(t *testing.T) {
	const n, nranks = 5, 4
	t.Run("allreduce", func(t *testing.T) {
		var first []int64
		for rank := 0; rank < nranks; rank++ {
			r := Start(t, Options{Args: args(6, "--rank", strconv.Itoa(rank), "--nranks", strconv.Itoa(nranks),
				"--iters", "33", "--fast", "allreduce"), Env: sampleEnv(n, "NCCLPROF_TRACE_TRIGGER=off")})
			var seqs []int64
			for _, o := range readSampled(t, r.Dir).ops {
				seqs = append(seqs, o.seqOf())
			}
			sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
			if rank == 0 {
				first = seqs
				if len(first) != 7 {
					t.Fatalf("rank 0 traced seqs %v, want 7 (0, 5, …, 30)", first)
				}
			} else if !slices.Equal(seqs, first) {
				t.Errorf("rank %d traced seqs %v, rank 0 %v", rank, seqs, first)
			}
		}
	})
	t.Run("p2p", func(t *testing.T) {
		// sent[a][b]: ordinals rank a traced of its sends to b; recvd[b][a] of b's receives from a.
		sent, recvd := map[[2]int][]int64{}, map[[2]int][]int64{}
		for rank := 0; rank < nranks; rank++ {
			r := Start(t, Options{Args: args(6, "--rank", strconv.Itoa(rank), "--nranks", strconv.Itoa(nranks),
				"--iters", "12", "--fast", "p2p"), Env: sampleEnv(n, "NCCLPROF_TRACE_TRIGGER=off")})
			for _, o := range readSampled(t, r.Dir).ops {
				peer := int(o.ev.Args["peer"].(float64))
				if o.ev.Name == "Send" {
					sent[[2]int{rank, peer}] = append(sent[[2]int{rank, peer}], o.seqOf())
				} else {
					recvd[[2]int{peer, rank}] = append(recvd[[2]int{peer, rank}], o.seqOf())
				}
			}
		}
		for a := 0; a < nranks; a++ {
			for b := 0; b < nranks; b++ {
				s, v := sent[[2]int{a, b}], recvd[[2]int{a, b}]
				sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
				sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
				if len(s) != 3 || !slices.Equal(s, v) {
					t.Errorf("rank %d → %d: sends traced %v, receives traced %v (want the same 3)", a, b, s, v)
				}
			}
		}
	})
}

// Rotation: with every operation traced and a 1 MiB bound, files rotate at half of it and the
// oldest are deleted: what is left is under the bound, the newest files, each valid JSON and
// complete, and holds the latest operations.
func TestSampledRotationStaysUnderBound(t *testing.T) {
	const bound = 1 << 20
	r := Start(t, Options{Args: args(6, "--iters", "400", "--channels", "2", "--fast", "allreduce"),
		Env: sampleEnv(1, "NCCLPROF_TRACE_MAX_MB=1", "NCCLPROF_TRACE_TRIGGER=off", "NCCLPROF_WINDOW_MS=10")})
	var total int64
	var idx []int
	for _, tr := range ReadTraces(t, r.Dir) { // each must parse
		m := sampledName.FindStringSubmatch(filepath.Base(tr.Path))
		if m == nil {
			continue
		}
		i, _ := strconv.Atoi(m[1])
		idx = append(idx, i)
		total += int64(tr.RawSize)
		if c, _ := tr.End["complete"]; string(c) != "true" {
			t.Errorf("%s is not complete (ncclprofEnd.complete %s)", tr.Path, c)
		}
		if tr.RawSize > bound/2 {
			t.Errorf("%s holds %d bytes, over half the bound (%d)", tr.Path, tr.RawSize, bound/2)
		}
		for _, err := range tr.Check() {
			t.Errorf("%s: %v", tr.Path, err)
		}
	}
	sort.Ints(idx)
	if total > bound {
		t.Errorf("%d bytes of sampled trace on disk, bound %d", total, bound)
	}
	if len(idx) == 0 || idx[0] == 0 {
		t.Fatalf("sampled files %v: the oldest (0) was never deleted; the test wrote too little to rotate", idx)
	}
	for k := 1; k < len(idx); k++ {
		if idx[k] != idx[k-1]+1 {
			t.Errorf("files kept %v are not the newest in a row", idx)
		}
	}
	st := readSampled(t, r.Dir)
	var maxSeq int64
	for _, o := range st.ops {
		maxSeq = max(maxSeq, o.seqOf())
	}
	if maxSeq != 399 {
		t.Errorf("the newest operation kept is seq %d, want 399", maxSeq)
	}
	t.Logf("%d files written, %d kept (%v), %d bytes on disk of %d", idx[len(idx)-1]+1, len(idx), idx, total, bound)
}

// The trigger: an operation planted slow (each of its steps 100 ms longer: 400 ms, so that a
// loaded machine's p99 × 20 stays below it) is kept though not
// sampled — its completion span, marked as the trigger — and the next K operations of its
// communicator after the plugin saw it are traced in full, starting a few windows after it.
func TestSampledTriggerCapturesSlowOperation(t *testing.T) {
	// The slow operation comes after the warm-up has been seen complete when it is read
	// (operations complete QuietNs = 200 ms after their last child: ~200 of them at this pace).
	const k, slowSeq = 5, 450
	var st *sampledTrace
	var bySeq map[int64]*sampledOp
	var lost uint64
	// 10 ms windows (for a prompt trigger) in 8: a drainer starved for 70 ms by a loaded machine
	// leaves operations without records (exact counts, no times: lost_operations), and an
	// untimed operation cannot fire the trigger. Such a run proves nothing either way and is
	// run again, once.
	for try := 1; ; try++ {
		r := Start(t, Options{Args: args(6, "--iters", "800", "--kernel", "--channels", "2", "--slow-op", strconv.Itoa(slowSeq),
			"--slow-us", "100000", "--pace-us", "1000", "allreduce"),
			Env: sampleEnv(1000, "NCCLPROF_EVENT_MASK=default,kernelch", "NCCLPROF_TRACE_TRIGGER=20,"+strconv.Itoa(k)+",100",
				"NCCLPROF_WINDOW_MS=10", "NCCLPROF_WINDOWS=8")})
		st = readSampled(t, r.Dir)
		bySeq = map[int64]*sampledOp{}
		for _, o := range st.ops {
			bySeq[o.seqOf()] = o
		}
		lost = r.Truth[0].Counter(t, "LOST_OPS")
		if slow := bySeq[slowSeq]; (slow == nil || slow.completion == nil) && lost > 0 && try == 1 {
			t.Logf("run %d: %d operations without records (a starved drainer), the slow one among them: again", try, lost)
			continue
		}
		if lost > 0 {
			t.Logf("run %d: %d operations without records", try, lost)
		}
		break
	}
	for _, s := range st.stray {
		t.Error(s)
	}
	slow := bySeq[slowSeq]
	if slow == nil || slow.completion == nil {
		t.Fatalf("the planted slow operation (seq %d) is not in the trace; seqs traced: %v; operations without records: %d; closing %v",
			slowSeq, keys(bySeq), lost, sampledEnd(t, st.files[len(st.files)-1]))
	}
	if m := slow.mark(); m != "trigger" || slow.completion.Args["trigger"] != true {
		t.Errorf("the slow operation is marked %q (trigger %v), want trigger", m, slow.completion.Args["trigger"])
	}
	if slow.ev != nil || len(slow.proxies) > 0 {
		t.Errorf("the slow operation was not sampled, yet its Coll or ProxyOps are in the trace")
	}
	if d := slow.completion.Dur; d < 100000 {
		t.Errorf("the slow operation's span is %.0f µs, planted ≥ 100000", d)
	}
	// The triggered run: K operations in a row after the slow one, each in full.
	var trig []int64
	for s, o := range bySeq {
		if o.mark() == "triggered" {
			trig = append(trig, s)
			for _, m := range o.full(4, 2) {
				t.Errorf("triggered seq %d: %s", s, m)
			}
			if s <= slowSeq {
				t.Errorf("seq %d traced by the trigger before the slow operation %d", s, slowSeq)
			}
		}
	}
	sort.Slice(trig, func(i, j int) bool { return trig[i] < trig[j] })
	if len(trig) < k || trig[k-1]-trig[0] != k-1 {
		t.Errorf("operations traced by the trigger: %v, want a run of %d in a row", trig, k)
	}
	// The trigger acts as soon as a child's stop carries the slow operation's span past the
	// threshold (here its first ProxyOp's, while it still runs), not when it completes (QuietNs
	// = 200 ms after its last child): the triggered run starts within a few windows (10 ms
	// each) of that, before the slow operation even ended. Those operations queued behind it,
	// their ProxyOps starting after their own windows were reused: they read the choice from
	// their parent's handle.
	if len(trig) > 0 && bySeq[trig[0]].completion != nil {
		after := bySeq[trig[0]].completion.Ts - (slow.completion.Ts + slow.completion.Dur) // µs
		if after > 150e3 {
			t.Errorf("the first triggered operation starts %.1f ms after the slow one ended, want < 150 ms", after/1e3)
		}
		t.Logf("the first triggered operation starts %.1f ms after the slow one ended", after/1e3)
	}
	end := sampledEnd(t, st.files[len(st.files)-1])
	if end["triggers"].(float64) < 1 || end["operations_triggered"].(float64) < k {
		t.Errorf("closing metadata %v: no trigger counted", end)
	}
	t.Logf("slow seq %d (%.1f ms) fired the trigger; traced after it: %v; closing %v", slowSeq, slow.completion.Dur/1000, trig, end)
}

func keys(m map[int64]*sampledOp) []int64 {
	var out []int64
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// The hot path's sampling (a ProxyOp reading its parent's record, P2P ordinals, steps recorded
// for sampled operations, the trigger's countdown) under AddressSanitizer/UBSan and
// ThreadSanitizer, with every thread of the mixed scenario and the fuzzer's malformed calls
// (made-up parent handles included); and the real plugin's sampled trace under the fuzzer.
func TestSampledUnderSanitizers(t *testing.T) {
	for _, variant := range []string{"asan", "tsan", ""} {
		for _, scenario := range []string{"mixed", "fuzz"} {
			name := variant
			if name == "" {
				name = "plugin"
			}
			t.Run(name+"/"+scenario, func(t *testing.T) {
				a := args(6, "--iters", "120", "--kernel", "mixed")
				if scenario == "fuzz" {
					a = args(6, "--seconds", fuzzSeconds(), "--seed", "7", "fuzz")
				}
				r := Start(t, Options{Variant: variant, Args: a,
					Env: sampleEnv(2, "NCCLPROF_WINDOW_SLOTS=2048", "NCCLPROF_WINDOW_MS=5", "NCCLPROF_EVENT_MASK=all")})
				if m := sanitizerReport.Find(r.Stderr); m != nil {
					t.Fatalf("sanitizer report (%s):\n%s", m, r.Stderr)
				}
				if variant == "" {
					for _, tr := range ReadTraces(t, r.Dir) { // each parses
						for _, err := range tr.Check() {
							t.Errorf("%s: %v", tr.Path, err)
						}
					}
				}
			})
		}
	}
}

// A P2P operation's completion span carries its ordinal as p2p_seq, never as seq: analyses match
// collectives across ranks by (communicator, function, seq), and rank 0's third Send to rank 1
// is not rank 2's third Send to rank 3. (The span used to say seq 0 for every P2P, so every
// rank's P2P operations read as one collective, seq 0.)
func TestP2PSeqIsNotACollectiveSeq(t *testing.T) {
	r := Start(t, Options{Args: args(6, "--iters", "6", "--nranks", "4", "--fast", "p2p"),
		Env: []string{"NCCLPROF_TRACE=1"}})
	var paths []string
	for _, tr := range ReadTraces(t, r.Dir) {
		paths = append(paths, tr.Path)
		for _, e := range tr.Events {
			if e.Cat == "nccl_op" || e.Cat == "nccl_p2p" {
				if _, ok := e.Args["seq"]; ok {
					t.Fatalf("%s slice %s has a seq: %v", e.Cat, e.Name, e.Args)
				}
				if _, ok := e.Args["p2p_seq"]; !ok {
					t.Fatalf("%s slice %s has no p2p_seq: %v", e.Cat, e.Name, e.Args)
				}
			}
		}
	}
	s, err := commops.Read(paths, commops.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p2p := 0
	for _, o := range s.Ops {
		if o.Func == "Send" || o.Func == "Recv" {
			p2p++
			if o.Seq != -1 {
				t.Errorf("%s with peer %d read with seq %d, want -1 (no collective seq)", o.Func, o.Peer, o.Seq)
			}
		}
	}
	if p2p != 6*4*2 {
		t.Errorf("%d P2P operations read, want %d", p2p, 6*4*2)
	}
}
