package synth

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/ncclprof/ncclprof/internal/chrome"
)

// JobOptions describe a multi-rank job whose plugin traces Job writes: every rank runs the same
// AllReduces on one communicator; a rank arrives at collective i at i·Period plus a jitter, plus
// SlowNs for SlowRank on every SlowEvery-th collective; the collective completes on every rank
// when the last has arrived plus its duration (size / BusGBps, as nccl-tests' bus bandwidth).
// It is for benchmarks at sizes the test host cannot reach in reasonable time; the test host's
// skew scenario, which runs the real plugin, is the ground truth for tests.
type JobOptions struct {
	Ranks, Ops int
	// Detail writes every event NCCL gives the plugin for an operation (API, launch, group, send
	// and receive ProxyOps with their steps and states, KernelCh, flows), as a real trace has;
	// otherwise only the Coll and its completion span.
	Detail bool
	// TargetBytes: keep adding operations until each file is at least this large (0: Ops).
	TargetBytes        int64
	SlowRank           int // -1: none
	SlowNs             int64
	SlowEvery          int
	JitterNs, PeriodNs int64
	Bytes              uint64
	BusGBps            float64
	Channels           int
	Seed               uint64
	Host               string
	// Only writes the traces of these ranks (nil: all), e.g. one rank of a large job.
	Only []int
	// Sample > 0 writes sampled traces, as the plugin's NCCLPROF_TRACE_SAMPLE=Sample does:
	// collective i only when i % Sample == 0 (marked "sampled") or it is in Triggered (traced
	// after a slow one: "triggered"), with the header's sampling.every.
	Sample    int
	Triggered []int
	// GPUSlowRank's GPU starts the collectives in GPUSlowOps GPUSlowNs late while its CPU calls
	// NCCL on time (its KernelCh and proxy work move, its Coll does not); the others wait for it.
	// Only with Detail (the plugin's GPU-side events).
	GPUSlowRank int
	GPUSlowNs   int64
	GPUSlowOps  []int
	// The transfers of NetSlowRanks in the collectives NetSlowOps take NetSlowNs longer (their
	// steps run slower, and they complete later). Only with Detail.
	NetSlowRanks []int
	NetSlowNs    int64
	NetSlowOps   []int
}

// traced is why a sampled trace holds collective i ("" in a full trace, or when it does not).
func (o *JobOptions) traced(i int) (mark string, written bool) {
	switch {
	case o.Sample <= 0:
		return "", true
	case i%o.Sample == 0:
		return "sampled", true
	case slices.Contains(o.Triggered, i):
		return "triggered", true
	}
	return "", false
}

// DefaultJob is a 1 MiB AllReduce every 2 ms at 10 GB/s bus bandwidth with 20 µs of jitter, and
// rank 1 late by 1 ms on every 10th collective.
func DefaultJob(ranks, ops int) JobOptions {
	return JobOptions{Ranks: ranks, Ops: ops, SlowRank: min(1, ranks-1), SlowNs: 1_000_000, SlowEvery: 10,
		JitterNs: 20_000, PeriodNs: 2_000_000, Bytes: 1 << 20, BusGBps: 10, Channels: 2, Seed: 1, Host: "synth"}
}

// mix is splitmix64: every rank's file draws the same jitter for the same (op, rank).
func mix(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
	x = (x ^ (x >> 27)) * 0x94D049BB133111EB
	return x ^ (x >> 31)
}

// arrival of rank r at collective i, ns after the job's start.
func (o *JobOptions) arrival(i, r int) int64 {
	t := int64(i)*o.PeriodNs + int64(mix(o.Seed^mix(uint64(i)<<16|uint64(r)))%uint64(max(o.JitterNs, 1)))
	if r == o.SlowRank && o.SlowEvery > 0 && i%o.SlowEvery == o.SlowEvery-1 {
		t += o.SlowNs
	}
	return t
}

// gpuDelay is how long after its arrival rank r's GPU starts collective i.
func (o *JobOptions) gpuDelay(i, r int) int64 {
	d := int64(gpuStartNs)
	if o.Detail && o.GPUSlowNs > 0 && r == o.GPUSlowRank && slices.Contains(o.GPUSlowOps, i) {
		d += o.GPUSlowNs
	}
	return d
}

// gpuStartNs: a kernel starts this long after its Coll start on a rank whose GPU keeps up.
const gpuStartNs = 1500

// duration of a collective: nccl-tests' size × 2(n−1)/n / busbw.
func (o *JobOptions) duration() int64 {
	n := float64(o.Ranks)
	return int64(float64(o.Bytes) * 2 * (n - 1) / n / o.BusGBps)
}

// Job writes one plugin trace per rank into dir and returns their paths.
func Job(dir string, opt JobOptions) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var paths []string
	var lastArrival []int64 // per collective: the last rank's arrival
	for r := 0; r < opt.Ranks; r++ {
		if opt.Only != nil && !slices.Contains(opt.Only, r) {
			continue
		}
		p := filepath.Join(dir, fmt.Sprintf("ncclprof-%s-%d-0.trace.json", opt.Host, 1000+r))
		if err := opt.writeRank(p, r, &lastArrival); err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// rankWriter writes one rank's trace.
type rankWriter struct {
	w      *chrome.Writer
	o      *JobOptions
	rank   int
	pid    int64
	base   int64
	handle uint64
	flows  int64
}

const jobBase = int64(1_760_000_000_000_000_000)

func (o *JobOptions) writeRank(path string, r int, last *[]int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	pid := int64(1000 + r)
	sampling := ""
	if o.Sample > 0 {
		sampling = fmt.Sprintf(`,"sampling":{"every":%d}`, o.Sample)
	}
	header := fmt.Appendf(nil, `"schemaVersion":1,"displayTimeUnit":"ms","baseTimeNanoseconds":%d,"ncclprof":{"format":1,"version":"synth","host":%q,"pid":%d,"simulated":true,"clock":{"source":"synth","error_bound_ns":0}%s}`,
		jobBase, o.Host, pid, sampling)
	w, err := chrome.New(f, jobBase, header)
	if err != nil {
		return err
	}
	rw := &rankWriter{w: w, o: o, rank: r, pid: pid, base: jobBase}
	comm := uint64(0x5EED000000000000) | o.Seed&0xffff
	w.Event('M', "process_name", "", pid, 0).Args().Str("name", fmt.Sprintf("ncclprof %s pid %d", o.Host, pid)).End()
	w.Event('M', "ncclprof_comm", "", pid, 0).Args().Hex("comm", comm).Str("name", "world").Int("rank", int64(r)).
		Int("nranks", int64(o.Ranks)).Int("nnodes", 1).Int("abi", 6).Int("local_index", 0).End()
	for i := 0; o.TargetBytes > 0 || i < o.Ops; i++ {
		if o.TargetBytes > 0 && w.Bytes()+int64(w.Pending()) >= o.TargetBytes {
			break
		}
		if i == len(*last) {
			*last = append(*last, o.lastArrival(i))
		}
		if i%10 == 0 {
			w.Event('i', "ncclprof_step", "ncclprof", pid, 0).Ts("ts", jobBase+o.arrival(i, r)-1000).Str("s", "p").
				Args().Str("step", fmt.Sprintf("step %d", i/10)).End()
		}
		if mark, ok := o.traced(i); ok {
			rw.op(i, comm, (*last)[i], mark)
		}
	}
	end := `"ncclprofEnd":{"complete":true}`
	if o.Detail { // KernelCh's GPU times are Unix ns: the GPU clock's offset is 0
		end = `"ncclprofEnd":{"complete":true,"gpu_clock":{"method":"synth","offset_ns":0}}`
	}
	return w.Close([]byte(end))
}

func (o *JobOptions) lastArrival(i int) int64 {
	var m int64
	for r := 0; r < o.Ranks; r++ {
		m = max(m, o.arrival(i, r)+o.gpuDelay(i, r)-gpuStartNs)
	}
	return m
}

func (rw *rankWriter) next() uint64 { rw.handle++; return rw.handle<<8 | uint64(rw.rank) }

// slice starts an X event of the plugin's with its common args (id, parent, comm, rank).
func (rw *rankWriter) slice(cat, name string, tid, start, end int64, id, parent, comm uint64) *chrome.Event {
	e := rw.w.Event('X', name, cat, rw.pid, tid).Ts("ts", rw.base+start).Dur("dur", end-start).Args().Hex("id", id)
	if parent != 0 {
		e.Hex("parent", parent)
	}
	return e.Hex("comm", comm).Int("rank", int64(rw.rank))
}

// op writes collective i: its Coll (at this rank's arrival) and completion span (the last rank's
// arrival plus the duration), and with Detail the rest of what NCCL reports.
func (rw *rankWriter) op(i int, comm uint64, last int64, mark string) {
	o := rw.o
	at, done := o.arrival(i, rw.rank), last+o.duration()
	var slowNet int64 // its steps take this much longer in all
	if o.NetSlowNs > 0 && slices.Contains(o.NetSlowRanks, rw.rank) && slices.Contains(o.NetSlowOps, i) {
		slowNet = o.NetSlowNs
	}
	tid := rw.pid
	var api uint64
	if o.Detail {
		g := rw.next()
		rw.slice("nccl_api", "ncclGroup", tid, at-3000, at+9000, g, 0, comm).Int("depth", 1).Bool("graph_captured", false).End()
		api = rw.next()
		rw.slice("nccl_api", "ncclAllReduce", tid, at-2500, at-1500, api, g, comm).Str("func", "AllReduce").
			Uint("count", o.Bytes/4).Str("datatype", "ncclFloat32").Int("root", 0).Hex("stream", 0x5000).Bool("graph_captured", false).End()
		rw.slice("nccl_launch", "ncclKernelLaunch", tid, at-1000, at-900, rw.next(), g, comm).Hex("stream", 0x5000).Hex("group_api", g).End()
	}
	coll := rw.next()
	args := func(e *chrome.Event) *chrome.Event {
		e.Str("func", "AllReduce").Uint("count", o.Bytes/4).Str("datatype", "ncclFloat32").Str("algo", "RING").
			Str("proto", "SIMPLE").Int("nchannels", int64(o.Channels)).Uint("bytes", o.Bytes).Int("seq", int64(i))
		if mark != "" {
			e.Str("traced", mark)
		}
		return e
	}
	args(rw.slice("nccl_coll", "AllReduce", tid, at, at+8000, coll, api, comm)).Int("nwarps", 16).Str("interval", "enqueue").End()
	if o.Detail {
		rw.detail(at+o.gpuDelay(i, rw.rank)-gpuStartNs, done, slowNet, coll, comm)
	}
	done += slowNet
	args(rw.slice("nccl_op", "AllReduce", 2_100_000_000+int64(rw.rank%64), at, done, 1<<63|coll, 0, comm)).Hex("op", coll).
		Str("interval", "completion").End()
}

// detail writes an operation's proxy work and GPU channels (at: the arrival, moved by how late its
// GPU is).
func (rw *rankWriter) detail(at, done, slowNet int64, coll, comm uint64) {
	o := rw.o
	proxyTid := int64(2_000_000_000) + rw.pid%1_000_000*100
	per := o.Bytes * 2 / uint64(max(o.Channels, 1))
	const steps = 4
	span := (done-at)/(steps+1) + slowNet/steps
	done += slowNet
	for ch := 0; ch < o.Channels; ch++ {
		for send := 1; send >= 0; send-- {
			peer := (rw.rank + 1) % o.Ranks
			if send == 0 {
				peer = (rw.rank + o.Ranks - 1) % o.Ranks
			}
			pop := rw.next()
			name := map[int]string{1: "ProxyOp send", 0: "ProxyOp recv"}[send]
			rw.slice("nccl_proxy", name, proxyTid+int64(ch*2+send), at+2000, done, pop, coll, comm).Int("channel", int64(ch)).
				Int("peer", int64(peer)).Int("nsteps", steps).Uint("chunk_size", per/steps).Uint("trans_size", per).
				Bool("is_send", send == 1).Int("pid", rw.pid).End()
			rw.flow(rw.pid, at, proxyTid+int64(ch*2+send), at+2000)
			for s := int64(0); s < steps; s++ {
				s0, s1 := at+2000+s*span, at+2000+(s+1)*span
				rw.slice("nccl_step", fmt.Sprintf("Step %d", s), proxyTid+int64(ch*2+send), s0, s1, rw.next(), pop, comm).
					Int("step", s).Uint("trans_size", per/steps).Int("peer_waits", 0).Ts("SendGPUWait", rw.base+s0+100).
					Ts("SendWait", rw.base+s0+span/3).End()
				for k, st := range []string{"SendGPUWait", "SendWait", "RecvWait"} {
					a := s0 + 100 + int64(k)*span/3
					rw.w.Event('X', st, "nccl_step_state", rw.pid, proxyTid+int64(ch*2+send)).Ts("ts", rw.base+a).Dur("dur", span/3-200).End()
				}
			}
		}
		rw.slice("nccl_gpu", fmt.Sprintf("AllReduce ch%d", ch), 2_200_000_000+int64(rw.rank%64)*64+int64(ch), at+1500, done-500,
			rw.next(), coll, comm).Int("channel", int64(ch)).Str("gpu_start_ns", fmt.Sprint(rw.base+at+1500)).
			Str("gpu_stop_ns", fmt.Sprint(rw.base+done-500)).Str("clock", "gpu").Hex("op", coll).End()
	}
}

func (rw *rankWriter) flow(fromTid, from, toTid, to int64) {
	rw.flows++
	rw.w.Event('s', "nccl", "nccl_flow", rw.pid, fromTid).Ts("ts", rw.base+from).Int("id", rw.flows).End()
	rw.w.Event('f', "nccl", "nccl_flow", rw.pid, toTid).Ts("ts", rw.base+to).Int("id", rw.flows).Str("bp", "e").End()
}
