package commops

import (
	"fmt"
	"slices"
	"sort"

	"github.com/ncclprof/ncclprof/internal/collective"
	"github.com/ncclprof/ncclprof/internal/ptrace"
	"github.com/tidwall/gjson"
)

// finish puts a file's operations on the Unix clock (its base is known only now: a merged trace
// may write it after its events), applies the kernel links and names the processes.
func (r *reader) finish(t *ptrace.Trace) error {
	r.applyGPU()
	dead := r.applyKernels()
	base := t.Base
	// Where each operation goes once the group members are dropped (-1: dropped).
	moved := make([]int32, len(r.p.ops))
	ops := make([]Op, 0, len(r.p.ops)-len(dead))
	for i := range r.p.ops {
		moved[i] = -1
		if dead[int32(i)] {
			continue
		}
		o := r.p.ops[i]
		o.Arrive += base
		if o.Source != NoTime {
			o.Done += base
		}
		if o.GPUFrom != NoGPU {
			o.GPUArrive += base
		}
		moved[i] = int32(len(ops))
		ops = append(ops, o)
	}
	r.p.ops = ops
	r.keepMembers(moved)
	r.sampling(t)
	for i := range r.p.steps {
		r.p.steps[i].at += base
	}
	for i := range r.p.comms {
		c := &r.p.comms[i]
		if tc, ok := t.Comm(c.Hash); ok {
			c.Name, c.NRanks = r.intern(tc.Name), tc.NRanks
		}
	}
	if r.opt.Legs {
		for k, legs := range r.legs {
			if i, ok := r.keys[k]; ok && moved[i] >= 0 {
				r.p.ops[moved[i]].Legs = distinctLegs(legs)
			}
		}
	}
	r.nameProcs(t)
	if t.Truncated {
		r.p.notes = append(r.p.notes, fmt.Sprintf("%s ends early (cut at byte %d: the job was killed or the copy is incomplete); its operations after that are missing", r.path, t.TruncatedAt))
	}
	return nil
}

// sampling gives each operation of a sampled trace the N it was sampled with: the file's own
// (a plugin trace, a merged rank), or in a timeline its rank's plugin header.
func (r *reader) sampling(t *ptrace.Trace) {
	ranks := gjson.Parse(t.Member("ncclmergeRanks"))
	every := map[int32]int32{} // local proc → N
	for g, i := range r.groups {
		n := int32(t.SampleEvery)
		if ranks.IsArray() && g > 0 {
			for _, h := range headersOf(ranks.Get(fmt.Sprint(g - 1)).Get("ncclprof")) {
				if v := h.Get("sampling.every").Int(); v > 0 {
					n = int32(v)
				}
			}
		}
		every[i] = n
	}
	unknown := 0
	for i := range r.p.ops {
		o := &r.p.ops[i]
		if o.Traced == Full {
			continue
		}
		if o.Every = every[o.Proc]; o.Every == 0 && o.Traced == Sampled {
			unknown++
			o.Every = 1
		}
	}
	if unknown > 0 {
		r.p.notes = append(r.p.notes, fmt.Sprintf("%s: %d operations are marked sampled but the file does not say 1 in how many (no ncclprof.sampling header): each counts once", r.path, unknown))
	}
}

// headersOf is a header member's objects: one, or an array of them.
func headersOf(v gjson.Result) []gjson.Result {
	if v.IsArray() {
		return v.Array()
	}
	if v.IsObject() {
		return []gjson.Result{v}
	}
	return nil
}

// distinctLegs keeps an operation's sends (channel and peer) where it has network work, else its
// GPU channels, each once (a merged trace has a KernelCh on the plugin's track and on the GPU's).
func distinctLegs(legs []Leg) []Leg {
	sends := slices.ContainsFunc(legs, func(l Leg) bool { return l.Peer >= 0 })
	var out []Leg
	for _, l := range legs {
		if (l.Peer >= 0) == sends && !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	return out
}

// applyKernels gives linked operations their kernel's time. A kernel of one operation times it; a
// kernel of a group (a Send and a Recv, a user's group of collectives) becomes one operation of
// the kernel's function that stands for the group, whose members are returned to be dropped.
func (r *reader) applyKernels() map[int32]bool {
	dead := map[int32]bool{}
	for _, k := range r.kerns {
		var members []int32
		for _, h := range k.handles {
			if i, ok := r.keys[opKey{k.group, h}]; ok {
				members = append(members, i)
			}
		}
		var o *Op
		if len(members) == 1 && len(k.handles) == 1 {
			o = &r.p.ops[members[0]]
		} else {
			o = r.groupOp(k, members, dead)
		}
		o.Time, o.Source, o.Done, o.Ref = k.dur, Kernel, k.start+k.dur, k.ref
		o.GPUArrive, o.GPUFrom = k.start, FromKernel
		n := k.nccl
		o.Comm, o.Rank = r.comm(hashOf(n.Get("comm"))), int32(n.Get("rank").Int())
		if cn := n.Get("comm_name").Str; cn != "" && r.p.comms[o.Comm].Name == "" {
			r.p.comms[o.Comm].Name = r.intern(cn)
		}
		if nr := int(n.Get("nranks").Int()); nr > 0 {
			r.p.comms[o.Comm].NRanks = nr
		}
		r.fillArgs(o, n.Get("func").Str, n.Get("algo").Str, n.Get("proto").Str, seqOf(n.Get("seq")),
			n.Get("count").Uint(), n.Get("bytes").Uint(), int(n.Get("nchannels").Int()))
	}
	return dead
}

// groupOp makes the operation that stands for a kernel's group.
func (r *reader) groupOp(k kernelLink, members []int32, dead map[int32]bool) *Op {
	fn := "Generic"
	if spec, ok := collective.ParseKernel(k.name); ok {
		fn = spec.Func
	}
	g := Op{Proc: r.proc(k.ref.Pid), Func: r.intern(fn), Seq: -1, Peer: -1, Step: -1, Arrive: k.start,
		Bytes: k.nccl.Get("bytes").Uint()}
	for n, i := range members {
		m := r.p.ops[i]
		if n == 0 || m.Arrive < g.Arrive {
			g.Arrive = m.Arrive
		}
		g.Proc = m.Proc
		dead[i] = true
		r.groupOf[i] = int32(len(r.p.ops))
	}
	r.p.ops = append(r.p.ops, g)
	r.arrive = append(r.arrive, true)
	return &r.p.ops[len(r.p.ops)-1]
}

func hashOf(v gjson.Result) uint64 {
	h, _ := handleOf(v)
	return h
}

func seqOf(v gjson.Result) int64 {
	if !v.Exists() {
		return -1
	}
	return v.Int()
}

// nameProcs sets each process's host and pid: a timeline keeps every rank's plugin header under
// ncclmergeRanks; a plugin trace or merged rank has its own.
func (r *reader) nameProcs(t *ptrace.Trace) {
	ranks := gjson.Parse(t.Member("ncclmergeRanks"))
	for g, i := range r.groups {
		p := &r.p.procs[i]
		switch {
		case ranks.IsArray() && g > 0:
			h := ranks.Get(fmt.Sprint(g - 1))
			p.Host, p.Pid = h.Get("ncclprof.host").Str, h.Get("ncclprof.pid").Int()
			if p.Host == "" {
				p.Host = h.Get("metadata.host_name").Str
			}
		case t.Host != "" || t.Pid != 0:
			p.Host, p.Pid = t.Host, t.Pid
		}
		if p.Host == "" {
			// Unknown host: its clock is its own.
			p.Host = r.path
		}
		p.Host = r.intern(p.Host)
		p.Truncated = t.Truncated
	}
}

// add appends a file's part, merging processes (a process may have written several files) and
// communicators by identity.
func (s *Set) add(p *part) {
	procMap := make([]int32, len(p.procs))
	for i, pr := range p.procs {
		procMap[i] = s.procIndex(pr)
	}
	commMap := make([]int32, len(p.comms))
	for i, c := range p.comms {
		commMap[i] = s.commIndex(c)
	}
	for i := range p.ops {
		o := &p.ops[i]
		o.Proc, o.Comm = procMap[o.Proc], commMap[o.Comm]
	}
	s.Ops = append(s.Ops, p.ops...)
	p.ops = nil
	for _, m := range p.steps {
		m.proc = procMap[m.proc]
		s.marks = append(s.marks, m)
	}
	s.Notes = append(s.Notes, p.notes...)
	s.Others.Gloo += p.others.Gloo
	s.Others.NCCLKernels += p.others.NCCLKernels
}

func (s *Set) procIndex(pr Proc) int32 {
	for i := range s.Procs {
		q := &s.Procs[i]
		if q.Host == pr.Host && q.Pid == pr.Pid {
			q.Files = append(q.Files, pr.Files...)
			q.Truncated = q.Truncated || pr.Truncated
			return int32(i)
		}
	}
	s.Procs = append(s.Procs, pr)
	return int32(len(s.Procs) - 1)
}

func (s *Set) commIndex(c Comm) int32 {
	for i := range s.Comms {
		if s.Comms[i].Hash == c.Hash {
			if s.Comms[i].Name == "" {
				s.Comms[i].Name = c.Name
			}
			s.Comms[i].NRanks = max(s.Comms[i].NRanks, c.NRanks)
			return int32(i)
		}
	}
	s.Comms = append(s.Comms, c)
	return int32(len(s.Comms) - 1)
}

// finish labels every operation with its step, sorts operations by process and arrival, and
// gives each process its rank.
func (s *Set) finish() {
	s.validateRanks()
	s.labelSteps()
	sort.SliceStable(s.Ops, func(i, j int) bool {
		a, b := &s.Ops[i], &s.Ops[j]
		return a.Proc < b.Proc || a.Proc == b.Proc && a.Arrive < b.Arrive
	})
	s.NumberRepeats()
	best := make([]int, len(s.Procs))
	for i := range s.Procs {
		s.Procs[i].Ops = 0
	}
	untimed := 0
	for i := range s.Ops {
		o := &s.Ops[i]
		p := &s.Procs[o.Proc]
		p.Ops++
		if n := s.Comms[o.Comm].NRanks; n > best[o.Proc] || p.Rank < 0 {
			best[o.Proc], p.Rank = n, int(o.Rank)
		}
		if o.Source == NoTime {
			untimed++
		}
	}
	s.summarizeSampling()
	if untimed > 0 {
		s.Notes = append(s.Notes, fmt.Sprintf("%d of %d operations have no completion time (no network or KernelCh child: record KernelCh with NCCLPROF_EVENT_MASK=default,kernelch; or the trace ends before they completed): counted, but not timed", untimed, len(s.Ops)))
	}
}

// NumberRepeats numbers each rank's collectives that repeat a seq (Op.Repeat), in arrival order,
// replays apart from eager collectives (collective.Repeats): NCCL gives every replay of a
// CUDA-graph-captured collective the seq of the next eager one (from 2.26, unless KernelCh is on:
// src/plugin/profiler.cc ncclProfilerStartTaskEvents), and the n-th of a run on every rank is
// the same collective. What a trigger traced around a slow operation is that rank's alone and is
// not counted (nor matched): only collectives every rank traced line up. Read numbers them; a
// caller that changes operations' seqs or marks numbers them again.
func (s *Set) NumberRepeats() {
	type runKey struct {
		comm, rank int32
		fn         string
		replay     bool
	}
	runs := collective.Repeats[runKey]{}
	for i := range s.Ops {
		o := &s.Ops[i]
		if o.Seq < 0 || o.Rank < 0 || o.Traced == Triggered || o.Traced == Trigger {
			continue
		}
		o.Repeat = int32(runs.Next(runKey{o.Comm, o.Rank, o.Func, o.GraphReplay}, o.Seq))
	}
}

// validateRanks takes a rank for what it claims only when it lies inside its communicator:
// 0 ≤ rank < nranks (nranks unknown, 0: any rank ≥ 0). An operation claiming another rank (a
// damaged or hostile file: rank = INT_MAX) is kept, counted and timed, but has no rank (-1), so
// nothing is matched or sized by it; a note says so once per communicator.
func (s *Set) validateRanks() {
	bad := make([]int, len(s.Comms))
	example := make([]int32, len(s.Comms))
	for i := range s.Ops {
		o := &s.Ops[i]
		if n := s.Comms[o.Comm].NRanks; o.Rank < -1 || n > 0 && int(o.Rank) >= n {
			bad[o.Comm]++
			example[o.Comm] = o.Rank
			o.Rank = -1
		}
	}
	for c, n := range bad {
		if n > 0 {
			cm := s.Comms[c]
			s.Notes = append(s.Notes, fmt.Sprintf("communicator %s: %d operations claim a rank outside 0..%d, its size (e.g. %d): counted, but not matched across ranks",
				cm.Label(), n, cm.NRanks-1, example[c]))
		}
	}
}

// labelSteps gives each operation the step label last set on its process at or before it arrived.
func (s *Set) labelSteps() {
	byProc := map[int32][]stepMark{}
	ids := map[string]int32{}
	for _, m := range s.marks {
		byProc[m.proc] = append(byProc[m.proc], m)
		if _, ok := ids[m.label]; !ok {
			ids[m.label] = int32(len(s.Steps))
			s.Steps = append(s.Steps, m.label)
		}
	}
	for _, marks := range byProc {
		slices.SortStableFunc(marks, func(a, b stepMark) int { return cmpInt(a.at, b.at) })
	}
	for i := range s.Ops {
		o := &s.Ops[i]
		marks := byProc[o.Proc]
		j := sort.Search(len(marks), func(j int) bool { return marks[j].at > o.Arrive }) - 1
		if j >= 0 {
			o.Step = ids[marks[j].label]
		}
	}
	s.marks = nil
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// summarizeSampling sums up the sampled traces among the inputs, with what a reader of the
// analyses must know: counts are scaled, what the trigger added is left out of them, and how a
// process read from both a sampled and a full trace is counted (dedupe keeps the full copy).
func (s *Set) summarizeSampling() {
	sm := &s.Sampling
	kinds := map[int32][2]bool{} // proc → (has full, has sampled)
	count := [...]*int{Full: &sm.Full, Sampled: &sm.Sampled, Triggered: &sm.Triggered, Trigger: &sm.Trigger}
	for i := range s.Ops {
		o := &s.Ops[i]
		*count[o.Traced]++
		k := kinds[o.Proc]
		if o.Traced == Full {
			k[0] = true
		} else {
			k[1] = true
		}
		kinds[o.Proc] = k
		if o.Traced != Full {
			switch e := int(o.Every); {
			case sm.Every == 0:
				sm.Every = e
			case sm.Every != e && e > 0:
				sm.Every = -1
			}
		}
	}
	if !sm.On() {
		return
	}
	s.Notes = append(s.Notes, fmt.Sprintf("%s: %d operations read from sampled traces, each standing for the operations it was sampled from: counts, bytes and times derived from them are estimates (scaled), not exact", sm.Label(), sm.Sampled))
	if sm.Extra() > 0 {
		s.Notes = append(s.Notes, fmt.Sprintf("%d operations the trigger traced around slow ones (%d of them the slow ones themselves) are in the traces but not in counts, totals or percentiles: they are not a uniform sample", sm.Extra(), sm.Trigger))
	}
	for p := range s.Procs {
		if k := kinds[int32(p)]; k[0] && k[1] {
			s.Notes = append(s.Notes, fmt.Sprintf("process %s pid %d was read from both a sampled and a full trace: an operation in both counts once, from the full trace; its sampled operations outside the full trace stand for the operations they were sampled from", s.Procs[p].Host, s.Procs[p].Pid))
		}
	}
}
