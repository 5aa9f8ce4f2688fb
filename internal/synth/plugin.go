// Package synth makes traces for tests and the demo: plugin traces derived from real Kineto
// traces (each NCCL kernel given the plugin events NCCL would have emitted around its real
// launch call, with known clock offsets and dropped events, and the ground truth of every
// link), and Kineto traces derived from plugin traces (for `ncclmerge demo`, labelled as
// simulated).
package synth

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand"
	"sort"
	"strconv"
	"strings"

	"github.com/ncclprof/ncclprof/internal/collective"
	"github.com/ncclprof/ncclprof/internal/jsonscan"
	"github.com/ncclprof/ncclprof/internal/kineto"
)

// PluginOptions shape a plugin trace synthesized from a Kineto trace.
type PluginOptions struct {
	// CPUOffsetNs: the plugin's clock runs this far behind Kineto's (plugin = Kineto − offset);
	// a merge should measure +CPUOffsetNs.
	CPUOffsetNs int64
	// GPUOffsetNs: the GPU clock offset, %globaltimer − Unix (Kineto) time, the sign the
	// plugin's gpu_clock uses (docs/trace-format.md): the GPU timer runs this far ahead. A merge
	// should measure it (to within the channels' start delay, < 1 µs).
	GPUOffsetNs int64
	// GPUDriftPPM makes the GPU timer drift against Kineto's clock: the offset grows by this
	// many ns per ms from the first kernel's start on (real timers: tens of ppm).
	GPUDriftPPM float64
	// DropLaunchEvery n > 0 leaves out the KernelLaunch of every n-th operation (the order
	// rule must link it); DropOpEvery leaves out every m-th operation entirely.
	DropLaunchEvery, DropOpEvery int
	// NoAPI writes what ABI < 5 records: no GroupApi, CollApi/P2pApi or KernelLaunch.
	NoAPI bool
	// Mismatch gives the n-th operation's API call a wrong count (0: none), so the launch
	// rule must refuse the kernel.
	Mismatch int
	// WrongType gives the n-th operation (0: none) a datatype other than its kernel's.
	WrongType int
	Channels  int
	Seed      int64
	Host      string
	// ErrorBoundNs is the clock error the plugin declares.
	ErrorBoundNs int64
}

// Expected is the ground truth of one NCCL kernel.
type Expected struct {
	Corr   uint64 // the kernel's correlation (0 when it has none)
	Offset int64  // the kernel event's offset in the Kineto file
	// Rule is the rule that must link it ("launch", "order"), or "" when it must stay
	// unlinked (its operation was dropped, or mismatches).
	Rule string
	Ops  []string // the plugin handles of its Coll/P2p events
}

// Truth is the ground truth of a synthesized plugin trace.
type Truth struct {
	Kernels  []Expected
	Pid      int64
	Events   int // events written
	Comms    int
	Channels int // KernelCh events written
}

// kern is what the synthesizer needs of a Kineto NCCL kernel.
type kern struct {
	off        int64
	corr       uint64
	start, end int64
	name       string
	spec       collective.Kernel
	comms      kineto.CommsArgs
	pg         string
	stream     string
	launch     *call
	enq        int64 // when its operation was enqueued (see enqueueTimes)
}

// enqueueTimes gives each kernel the time its operation was enqueued: its launch call where
// Kineto has one. A kernel without one (launched before the Kineto window began, or its call
// not kept) gets a time 20 µs before it starts, but never after the enqueue of the kernel
// that follows it on its stream: a stream runs kernels in launch order, so a kernel that runs
// before one launched at t was launched before t — for the first kernels of a trace that is
// before the Kineto window, and so is the operation the plugin recorded.
func enqueueTimes(ks []*kern) {
	next := map[string]int64{} // stream → enqueue of the next kernel on it
	for i := len(ks) - 1; i >= 0; i-- {
		k := ks[i]
		if k.launch != nil {
			k.enq = k.launch.start
		} else {
			k.enq = k.start - 20*1000
			if n, ok := next[k.stream]; ok {
				k.enq = min(k.enq, n-60*1000)
			}
		}
		next[k.stream] = k.enq
	}
}

type call struct {
	pid, tid   int64
	start, end int64
}

// PluginFromKineto derives a plugin trace from the NCCL kernels of a Kineto trace.
func PluginFromKineto(path string, opt PluginOptions) ([]byte, *Truth, error) {
	ks, kt, err := readKernels(path)
	if err != nil {
		return nil, nil, err
	}
	if opt.Channels == 0 {
		opt.Channels = 2
	}
	g := &gen{opt: opt, rnd: rand.New(rand.NewSource(opt.Seed)), kt: kt, handle: 0x1000,
		comms: map[string]*comm{}, truth: &Truth{Pid: kt.Pid}, lanes: map[int64][]int64{}}
	g.base = kt.Base
	if !kt.HasBase {
		const window = int64(7889238) * 1e9
		g.base = ks[0].start / window * window
	}
	g.t0 = ks[0].start
	enqueueTimes(ks)
	// Events are written in enqueue order (each thread's slices must follow one another);
	// i stays the kernel's position by GPU start, which the Drop*/Mismatch options count.
	order := make([]int, len(ks))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return ks[order[a]].enq < ks[order[b]].enq })
	for _, i := range order {
		g.kernel(i, ks[i])
	}
	return g.finish(), g.truth, nil
}

func readKernels(path string) ([]*kern, *kineto.Trace, error) {
	var ks []*kern
	byCorr := map[uint64]*call{}
	var calls []*call
	var annots kineto.Annotations
	kt, err := kineto.Read(path, kineto.Options{}, func(e *kineto.Event) error {
		annots.Add(e)
		switch {
		case e.Ph != "X":
		case (e.Cat == kineto.CatRuntime || e.Cat == kineto.CatDriver) && kineto.IsLaunch(e.Name) && !e.Pid.IsStr && !e.Tid.IsStr:
			c := &call{pid: e.Pid.Num, tid: e.Tid.Num, start: e.Ts, end: e.Ts + e.Dur}
			byCorr[e.Correlation()] = c
			calls = append(calls, c)
		case e.Cat == kineto.CatKernel && kineto.IsNCCLKernel(e.Name):
			spec, _ := collective.ParseKernel(e.Name)
			k := &kern{off: e.Off, corr: e.Correlation(), start: e.Ts, end: e.Ts + e.Dur, name: e.Name, spec: spec, comms: e.Comms()}
			k.stream = e.Pid.String() + "/" + e.Tid.String()
			k.pg = "stream " + e.Tid.String()
			if k.comms.PGName != "" {
				k.pg = "pg " + k.comms.PGName
			}
			ks = append(ks, k)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	for _, c := range calls {
		c.start, c.end = kt.Unix(c.start), kt.Unix(c.end)
	}
	annots.Finish(kt)
	for _, k := range ks {
		k.start, k.end = kt.Unix(k.start), kt.Unix(k.end)
		if k.corr != 0 {
			k.launch = byCorr[k.corr]
		}
		if !k.comms.Present && k.launch != nil {
			if a := annots.Around(k.launch.pid, k.launch.tid, k.launch.start, k.launch.end); a != nil {
				k.comms = a.Comms // what the merge compares the plugin's count and dtype with
			}
		}
	}
	if len(ks) == 0 {
		return nil, nil, fmt.Errorf("%s has no NCCL kernels", path)
	}
	sort.SliceStable(ks, func(i, j int) bool { return ks[i].start < ks[j].start })
	return ks, kt, nil
}

type comm struct {
	hash            uint64
	name            string
	rank, nranks    int
	index           int
	seq             map[string]int64
	lastChannelStop map[int]int64 // per channel track
}

type gen struct {
	opt    PluginOptions
	rnd    *rand.Rand
	kt     *kineto.Trace
	base   int64
	t0     int64 // the first kernel's start: where the GPU timer's drift starts
	handle uint64
	comms  map[string]*comm
	order  []*comm
	events []string
	flows  int
	truth  *Truth
	// lanes: per proxy thread, the end of each lane (the plugin's rule: a new lane opens when
	// a slice would overlap every open one).
	lanes    map[int64][]int64
	lastUser map[int64]int64
}

func (g *gen) next() uint64 { g.handle++; return g.handle }

// gpuTime is what the GPU's %globaltimer reads at Kineto time t.
func (g *gen) gpuTime(t int64) int64 {
	return t + g.opt.GPUOffsetNs + int64(math.Round(g.opt.GPUDriftPPM*1e-6*float64(t-g.t0)))
}

func (g *gen) comm(k *kern) *comm {
	if c := g.comms[k.pg]; c != nil {
		return c
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", k.pg, g.opt.Seed)
	n := k.comms.GroupSize
	if n <= 0 {
		n = max(g.kt.WorldSize, 2)
	}
	rank := max(g.kt.Rank, 0) % n
	c := &comm{hash: h.Sum64(), name: strings.ReplaceAll(k.pg, " ", "_"), rank: rank, nranks: n, index: len(g.order), seq: map[string]int64{}, lastChannelStop: map[int]int64{}}
	g.comms[k.pg] = c
	g.order = append(g.order, c)
	return c
}

// plugin clock of a Kineto time.
func (g *gen) p(t int64) int64 { return t - g.opt.CPUOffsetNs }

func (g *gen) ts(t int64) string { return string(jsonscan.AppendMicros(nil, g.p(t)-g.base)) }

func (g *gen) us(d int64) string { return string(jsonscan.AppendMicros(nil, d)) }

func hx(h uint64) string { return fmt.Sprintf("\"0x%016x\"", h) }

// slice writes an X event; args is the type-specific part.
func (g *gen) slice(cat, name string, tid int64, start, end int64, id, parent uint64, c *comm, args string) {
	a := fmt.Sprintf(`"id":%s`, hx(id))
	if parent != 0 {
		a += `,"parent":` + hx(parent)
	}
	a += fmt.Sprintf(`,"comm":%s,"rank":%d`, hx(c.hash), c.rank)
	if args != "" {
		a += "," + args
	}
	g.events = append(g.events, fmt.Sprintf(`{"ph":"X","cat":%q,"name":%q,"pid":%d,"tid":%d,"ts":%s,"dur":%s,"args":{%s}}`,
		cat, name, g.kt.Pid, tid, g.ts(start), g.us(max(end-start, 0)), a))
}

func (g *gen) flow(fromTid int64, from int64, toTid int64, to int64) {
	g.flows++
	g.events = append(g.events,
		fmt.Sprintf(`{"ph":"s","id":%d,"cat":"nccl_flow","name":"nccl","pid":%d,"tid":%d,"ts":%s}`, g.flows, g.kt.Pid, fromTid, g.ts(from)),
		fmt.Sprintf(`{"ph":"f","bp":"e","id":%d,"cat":"nccl_flow","name":"nccl","pid":%d,"tid":%d,"ts":%s}`, g.flows, g.kt.Pid, toTid, g.ts(to)))
}

// dtypeOf is the NCCL datatype of a kernel: PyTorch's dtype, else the kernel name's type.
func dtypeOf(k *kern) string {
	if k.comms.Dtype != "" {
		if d, sz := collective.Datatype(k.comms.Dtype); sz > 0 {
			return d
		}
	}
	for tok, d := range map[string]string{"_float": "ncclFloat32", "_f32": "ncclFloat32", "_half": "ncclFloat16",
		"_f16": "ncclFloat16", "_bf16": "ncclBfloat16", "_int8_t": "ncclInt8", "_i8": "ncclInt8", "_double": "ncclFloat64"} {
		if strings.Contains(k.name, tok+"(") || strings.Contains(k.name, tok+"_") {
			return d
		}
	}
	return "ncclFloat32"
}

type opSpec struct {
	fn, apiFn, dtype string
	count            uint64
	p2p              bool
	peer             int
}

func (g *gen) opsOf(k *kern, c *comm) []opSpec {
	dt := dtypeOf(k)
	count := uint64(4096)
	if k.comms.InNelems > 0 {
		count = uint64(k.comms.InNelems)
	}
	if k.spec.Func == "SendRecv" {
		peer := (c.rank + 1) % c.nranks
		return []opSpec{{fn: "Send", apiFn: "Send", dtype: dt, count: count, p2p: true, peer: peer},
			{fn: "Recv", apiFn: "Recv", dtype: dt, count: count, p2p: true, peer: (c.rank + c.nranks - 1) % c.nranks}}
	}
	return []opSpec{{fn: k.spec.Func, apiFn: k.spec.Func, dtype: dt, count: count}}
}

// kernel writes the plugin events NCCL would have emitted for one kernel.
func (g *gen) kernel(i int, k *kern) {
	exp := Expected{Corr: k.corr, Offset: k.off}
	defer func() { g.truth.Kernels = append(g.truth.Kernels, exp) }()
	if g.opt.DropOpEvery > 0 && i%g.opt.DropOpEvery == g.opt.DropOpEvery-1 {
		return // the plugin dropped this operation: the kernel must stay unlinked
	}
	c := g.comm(k)
	tid := g.kt.Pid // the main thread, where the launch call is missing
	ls, le := k.enq, k.enq+5*1000
	if k.launch != nil {
		tid, ls, le = k.launch.tid, k.launch.start, k.launch.end
	}
	withLaunch := !g.opt.NoAPI && k.launch != nil && !(g.opt.DropLaunchEvery > 0 && i%g.opt.DropLaunchEvery == g.opt.DropLaunchEvery-1)
	mismatch := g.opt.Mismatch > 0 && i == g.opt.Mismatch && !g.opt.NoAPI
	wrongType := g.opt.WrongType > 0 && i == g.opt.WrongType
	// A wrong type shows where PyTorch recorded the dtype, or the kernel is a reduction
	// specialized for one.
	typeShows := k.comms.Dtype != "" || (collective.Reduces(k.spec.Func) && k.spec.Datatype != "")
	switch {
	case mismatch && withLaunch && k.comms.Present, wrongType && withLaunch && typeShows:
		exp.Rule = "" // the launch rule must refuse it; order must not take it either
	case withLaunch:
		exp.Rule = "launch"
	default:
		exp.Rule = "order"
	}
	if mismatch && !(withLaunch && k.comms.Present) {
		mismatch = false
	}
	// The launch interval wraps the real call; the operation's enqueue precedes it, after
	// whatever this thread did before (so the plugin's own track nests).
	a, b := int64(500+g.rnd.Intn(2500)), int64(500+g.rnd.Intn(2500))
	lStart, lEnd := ls-a, le+b
	prev := g.lastUserEnd(tid)
	room := min(lStart-prev-200, 36*1000)
	if room < 0 {
		room = 0
	}
	w0 := lStart - room
	specs := g.opsOf(k, c)
	if wrongType {
		for j := range specs {
			specs[j].dtype = "ncclFloat16"
			if dtypeOf(k) == "ncclFloat16" {
				specs[j].dtype = "ncclFloat64"
			}
		}
	}
	gapi := g.next()
	if !g.opt.NoAPI {
		g.slice("nccl_api", "ncclGroup", tid, w0, lEnd+100, gapi, 0, c, `"depth":1,"graph_captured":false`)
	}
	grp := g.next()
	g.slice("nccl_group", "ncclGroupLaunch", tid, w0+room*3/10, w0+room*95/100, grp, 0, c, "")
	var ops []uint64
	for j, s := range specs {
		api := g.next()
		// Operation j's API call and enqueue sit in their own slots, so the track nests.
		frac := int64(j) * room / 20
		if !g.opt.NoAPI {
			count := s.count
			if mismatch {
				count++
			}
			cat, name := "nccl_api", "nccl"+s.apiFn
			args := fmt.Sprintf(`"func":%q,"count":%d,"datatype":%q,"root":0,"stream":"0x5000","graph_captured":false`, s.apiFn, count, s.dtype)
			g.slice(cat, name, tid, w0+room/40+frac, w0+room*2/40+frac, api, gapi, c, args)
		}
		opID := g.next()
		ops = append(ops, opID)
		parent := api
		if g.opt.NoAPI {
			parent = grp
		}
		cs, ce := w0+room*35/100+frac, w0+room*40/100+frac
		nbytes := collective.Size(s.fn, s.count, s.dtype, c.nranks)
		if s.p2p {
			args := fmt.Sprintf(`"func":%q,"count":%d,"datatype":%q,"peer":%d,"nchannels":%d,"bytes":%d,"interval":"enqueue"`,
				s.fn, s.count, s.dtype, s.peer, g.opt.Channels, nbytes)
			g.slice("nccl_p2p", s.fn, tid, cs, ce, opID, parent, c, args)
		} else {
			seq := c.seq[s.fn]
			c.seq[s.fn]++
			args := fmt.Sprintf(`"seq":%d,"func":%q,"count":%d,"datatype":%q,"algo":"RING","proto":"LL","nchannels":%d,"nwarps":16,"root":0,"bytes":%d,"interval":"enqueue"`,
				seq, s.fn, s.count, s.dtype, g.opt.Channels, nbytes)
			g.slice("nccl_coll", s.fn, tid, cs, ce, opID, parent, c, args)
		}
		if !g.opt.NoAPI {
			g.flow(tid, w0+room/40+frac, tid, cs)
		}
		g.proxyAndChannels(k, c, opID, s)
	}
	if withLaunch {
		g.slice("nccl_launch", "ncclKernelLaunch", tid, lStart, lEnd, g.next(), 0, c, fmt.Sprintf(`"stream":"0x5000","group_api":%s`, hx(gapi)))
	}
	g.lastUser[tid] = lEnd + 100
	for _, o := range ops {
		exp.Ops = append(exp.Ops, fmt.Sprintf("0x%016x", o))
	}
}

func (g *gen) lastUserEnd(tid int64) int64 {
	if g.lastUser == nil {
		g.lastUser = map[int64]int64{}
	}
	return g.lastUser[tid]
}

// proxyAndChannels writes an operation's proxy ops (with two steps each) and its kernel
// channels, timed from the kernel.
func (g *gen) proxyAndChannels(k *kern, c *comm, op uint64, s opSpec) {
	proxyTid := int64(g.kt.Pid + 7)
	for ch := 0; ch < g.opt.Channels; ch++ {
		for _, send := range []bool{true, false} {
			if s.p2p && send != (s.fn == "Send") {
				continue
			}
			start, end := k.start+int64(1000+g.rnd.Intn(1000)), max(k.end-int64(500+g.rnd.Intn(500)), k.start+2000)
			lane := g.lane(proxyTid, start, end)
			tid := 2000000000 + proxyTid%1000000*100 + int64(lane)
			dir := "recv"
			if send {
				dir = "send"
			}
			pid := g.next()
			g.slice("nccl_proxy", "ProxyOp "+dir, tid, start, end, pid, op, c,
				fmt.Sprintf(`"channel":%d,"peer":%d,"nsteps":2,"chunk_size":131072,"trans_size":262144,"is_send":%v,"pid":%d`,
					ch, (c.rank+1)%c.nranks, send, g.kt.Pid))
			mid := start + (end-start)/2
			g.slice("nccl_step", "Step 0", tid, start, mid, g.next(), pid, c, `"step":0,"trans_size":131072`)
			g.slice("nccl_step", "Step 1", tid, mid, end, g.next(), pid, c, `"step":1,"trans_size":131072`)
		}
		// Channels start a little after the kernel and stop a little before it ends.
		gs := k.start + int64(200+g.rnd.Intn(600))
		ge := max(k.end-int64(200+g.rnd.Intn(600)), gs+100)
		tid := int64(2200000000 + c.index*4096 + (c.rank%64)*64 + ch)
		if gs < c.lastChannelStop[ch] {
			continue // a channel's track holds one kernel at a time
		}
		c.lastChannelStop[ch] = ge
		g.slice("nccl_gpu", s.fn+" ch"+strconv.Itoa(ch), tid, gs, ge, g.next(), op, c,
			fmt.Sprintf(`"channel":%d,"gpu_start_ns":"%d","gpu_stop_ns":"%d","clock":"gpu","op":%s`, ch, g.gpuTime(gs), g.gpuTime(ge), hx(op)))
		g.truth.Channels++
	}
}

func (g *gen) lane(thread, start, end int64) int {
	ends := g.lanes[thread]
	for i, e := range ends {
		if e <= start {
			ends[i] = end
			return i
		}
	}
	g.lanes[thread] = append(ends, end)
	return len(ends)
}

func (g *gen) finish() []byte {
	pid := g.kt.Pid
	host := g.opt.Host
	var b strings.Builder
	fmt.Fprintf(&b, "{\n\"schemaVersion\": 1,\n\"displayTimeUnit\": \"ms\",\n\"baseTimeNanoseconds\": %d,\n", g.base)
	fmt.Fprintf(&b, "\"ncclprof\": {\"format\": 1, \"version\": \"0.1.0\", \"host\": %q, \"pid\": %d, \"simulated\": true, \"clock\": {\"anchors\": 64, \"clock_steps\": 0, \"error_bound_ns\": %d, \"ns_per_tick\": 0.4166666666666667, \"source\": \"tsc\"}},\n",
		host, pid, g.opt.ErrorBoundNs)
	b.WriteString("\"traceEvents\": [\n")
	meta := []string{fmt.Sprintf(`{"ph":"M","name":"process_name","pid":%d,"tid":0,"args":{"name":"ncclprof %s pid %d"}}`, pid, host, pid)}
	var comms []string
	for _, c := range g.order {
		cj := fmt.Sprintf(`{"comm":%s,"name":%q,"rank":%d,"nranks":%d,"nnodes":1,"abi":6,"local_index":%d}`, hx(c.hash), c.name, c.rank, c.nranks, c.index)
		comms = append(comms, cj)
		meta = append(meta, fmt.Sprintf(`{"ph":"M","name":"ncclprof_comm","pid":%d,"tid":0,"args":%s}`, pid, cj))
	}
	all := append(meta, g.events...)
	b.WriteString(strings.Join(all, ",\n"))
	fmt.Fprintf(&b, "\n],\n\"ncclprofEnd\": {\"complete\": true, \"communicators\": [%s], \"gpu_clock\": {\"method\": \"none\"}, \"counters\": {\"recorded\": %d, \"dropped\": 0}, \"events\": %d}\n}\n",
		strings.Join(comms, ","), len(g.events), len(all))
	g.truth.Events = len(all)
	g.truth.Comms = len(g.order)
	return []byte(b.String())
}
