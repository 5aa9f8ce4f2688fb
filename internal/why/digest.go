package why

import (
	"cmp"
	"slices"
	"sort"

	"github.com/ncclprof/ncclprof/internal/commops"
)

// What the causes need of each operation is taken from its rank's spans as soon as its file is
// read (a digest: the time per kernel and per CPU slice in its interval, what its kernel waited
// for, how long it sat queued), and the spans are dropped then: a job kept about 40 spans per
// operation (1.9 KB) until every file was read; a digest is a tenth of that.

// opRef names an operation in its rank's activity: its slice and its arrival.
type opRef struct{ pid, tid, ts, arrive int64 }

func refOf(o *commops.Op) opRef { return opRef{o.Ref.Pid, o.Ref.Tid, o.Ref.TsNs, o.Arrive} }

func (r opRef) compare(q opRef) int {
	return cmp.Or(cmp.Compare(r.pid, q.pid), cmp.Compare(r.tid, q.tid), cmp.Compare(r.ts, q.ts), cmp.Compare(r.arrive, q.arrive))
}

// nameNs is the time one kernel or CPU slice name took in an operation's interval; for a
// kernel, launcher names what launched its first one there.
type nameNs struct {
	name, launcher int32
	ns             int64
}

// noName: in a thread's time, the gap (nothing recorded); as a launcher, not recorded.
const noName int32 = -1

// digest is what the causes need of one operation. Its kernels and thread are ranges of its
// activity's arena.
type digest struct {
	ref opRef
	// queued: its NCCL kernel's start − the end of the runtime call that launched it (0: not
	// recorded); blocker: the kernel it waited for on its GPU (blocked: one was found).
	queued  int64
	blocker span
	blocked bool
	// kernels: compute-stream kernels in its GPU interval; thread: its launching thread's
	// top-level slices in its CPU interval, and the gap.
	kernelsAt, kernelsN, threadAt, threadN int32
}

// gpuFrom is where operation o's GPU interval starts, p its process's previous operation (nil:
// none): p's GPU arrival (the compute before a collective overlaps the previous one's
// communication), else p's Coll start, else o's own.
func gpuFrom(o, p *commops.Op) int64 {
	switch {
	case p == nil:
		return o.Arrive
	case p.GPUFrom != commops.NoGPU:
		return p.GPUArrive
	}
	return p.Arrive
}

// cpuFrom is where its CPU interval starts: p's Coll start, else its own.
func cpuFrom(o, p *commops.Op) int64 {
	if p == nil {
		return o.Arrive
	}
	return p.Arrive
}

// digestAll digests every operation of ops (sorted by process, then arrival, as commops.Set
// orders them) in its rank's activity (actOf; nil: none read), then drops the spans.
func digestAll(ops []*commops.Op, actOf func(*commops.Op) *activity, acts []*activity) {
	for i, o := range ops {
		var p *commops.Op
		if i > 0 && ops[i-1].Proc == o.Proc {
			p = ops[i-1]
		}
		if act := actOf(o); act != nil && act.Kineto() {
			act.digestOp(o, p)
		}
	}
	for _, act := range acts {
		act.seal()
	}
}

// digestOp takes operation o's digest, p its process's previous operation (nil: none).
func (a *activity) digestOp(o, p *commops.Op) {
	d := digest{ref: refOf(o)}
	from := gpuFrom(o, p)
	nk := a.kernelAt(o.GPUArrive)
	if b := a.blocker(o.GPUArrive, from, nk); b >= 0 {
		d.blocker, d.blocked = a.kernels[b], true
	}
	tid := a.busiest
	if nk >= 0 {
		if c, ok := a.launch(&a.kernels[nk]); ok {
			d.queued, tid = o.GPUArrive-c.end, c.tid
		}
	}
	d.kernelsAt = int32(len(a.arena))
	a.kernelTime(from, o.GPUArrive)
	d.kernelsN = int32(len(a.arena)) - d.kernelsAt
	d.threadAt = int32(len(a.arena))
	a.threadTime(cpuFrom(o, p), o.Arrive, tid)
	d.threadN = int32(len(a.arena)) - d.threadAt
	a.digests = append(a.digests, d)
}

// add adds ns to name's time in the arena's entries from at.
func (a *activity) add(at int, name int32, ns int64) {
	for j := at; j < len(a.arena); j++ {
		if a.arena[j].name == name {
			a.arena[j].ns += ns
			return
		}
	}
	a.arena = append(a.arena, nameNs{name: name, launcher: noName, ns: ns})
}

// kernelTime adds the time each non-NCCL kernel name ran on the compute stream in [from, to],
// and the operator that launched the first kernel of that name there (the innermost cpu_op
// around its runtime call, else the call).
func (a *activity) kernelTime(from, to int64) {
	at := len(a.arena)
	win := window(a.kernels, a.longestKernel, from, to)
	for _, k := range win {
		if k.end > from && !k.nccl && k.tid == a.compute {
			a.add(at, k.name, min(k.end, to)-max(k.start, from))
		}
	}
	named := a.arena[at:]
	seen := make([]bool, len(named))
	for _, k := range win {
		j := slices.IndexFunc(named, func(n nameNs) bool { return n.name == k.name })
		if k.end <= from || j < 0 || seen[j] || k.corr == 0 {
			continue
		}
		seen[j] = true
		if c, ok := a.launch(&k); ok {
			named[j].launcher = c.name
			if op := a.enclosing(c); op >= 0 {
				named[j].launcher = a.cpu[op].name
			}
		}
	}
}

// threadTime adds what thread tid did in [from, to]: time per top-level slice name (clipped),
// and the time nothing was recorded (noName).
func (a *activity) threadTime(from, to, tid int64) {
	at := len(a.arena)
	covered, end := int64(0), from
	for _, s := range window(a.cpu, a.longestCPU, from, to) {
		if s.end <= from || s.tid != tid || s.start < end && s.end <= end {
			continue // another thread, or nested in what is counted
		}
		st, en := max(s.start, end, from), min(s.end, to)
		if en <= st {
			continue
		}
		a.add(at, s.name, en-st)
		covered += en - st
		end = en
	}
	a.add(at, noName, to-from-covered)
}

// seal keeps the digests, sorted for digestOf, and drops the spans they were taken from.
func (a *activity) seal() {
	slices.SortFunc(a.digests, func(x, y digest) int { return x.ref.compare(y.ref) })
	// Copies that fit: append leaves up to half of a slice's room unused, for the whole job.
	a.digests, a.arena = slices.Clone(a.digests), slices.Clone(a.arena)
	a.kernels, a.calls, a.cpu = nil, nil, nil
}

// digestOf is operation o's digest (empty: none taken).
func (a *activity) digestOf(o *commops.Op) *digest {
	ref := refOf(o)
	i, ok := slices.BinarySearchFunc(a.digests, ref, func(d digest, r opRef) int { return d.ref.compare(r) })
	if !ok {
		return &digest{}
	}
	return &a.digests[i]
}

// times is a digest's range as a map by name (gapName for the gap).
func (a *activity) times(at, n int32) map[string]int64 {
	out := make(map[string]int64, n)
	for _, e := range a.arena[at : at+n] {
		name := gapName
		if e.name != noName {
			name = a.names[e.name]
		}
		out[name] += e.ns
	}
	return out
}

// launcherOf names what launched the first kernel of that name in the digest's interval.
func (a *activity) launcherOf(d *digest, name string) string {
	for _, e := range a.arena[d.kernelsAt : d.kernelsAt+d.kernelsN] {
		if a.names[e.name] == name && e.launcher != noName {
			return a.names[e.launcher]
		}
	}
	return "(launch not recorded)"
}

// byProcess is ops sorted by process, then arrival (stable), as commops.Set orders them.
func byProcess(ops []commops.Op) []*commops.Op {
	out := make([]*commops.Op, len(ops))
	for i := range ops {
		out[i] = &ops[i]
	}
	sort.SliceStable(out, func(i, j int) bool {
		return out[i].Proc < out[j].Proc || out[i].Proc == out[j].Proc && out[i].Arrive < out[j].Arrive
	})
	return out
}
