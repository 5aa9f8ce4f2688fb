package merge

import (
	"fmt"
	"sort"

	"github.com/ncclprof/ncclprof/internal/collective"
	"github.com/ncclprof/ncclprof/internal/kineto"
	"github.com/ncclprof/ncclprof/internal/ptrace"
)

// Link rules, as the output names them.
const (
	RuleLaunch = "launch" // plugin KernelLaunch ⊃ Kineto launch call → correlation → kernel
	RuleOrder  = "order"  // n-th operation ↔ n-th kernel per (communicator ↔ process group, function)
)

// link ties an operation group to its GPU kernel.
type link struct {
	rule   string
	kernel *kernel
	group  *opGroup
	// gpuOffset is the GPU clock offset (%globaltimer − Kineto time) its channels are placed
	// with: its block's fitted line (estimateGPUOffset), so placement follows drift.
	gpuOffset int64
}

const (
	us = int64(1000)
	ms = 1000 * us
	// offsetSearch bounds the CPU clock offset the launch rule can find between the plugin
	// and Kineto (both on CLOCK_REALTIME, so normally within a few µs).
	offsetSearch = 5 * ms
	// minSamples: fewer matched launches than this and no offset is estimated.
	minSamples = 3
	// coarseLaunches: launches the coarse offset search looks around.
	coarseLaunches = 512
)

// slack is how far a launch call may stick out of a KernelLaunch interval: the plugin's
// declared clock error plus a microsecond for Kineto's own conversion.
func (r *rankState) slack(p *pluginIndex) int64 {
	if r.opt.LaunchSlack > 0 {
		return r.opt.LaunchSlack
	}
	return max(p.t.Clock.ErrorBoundNs, 0) + us
}

func mid(a, b int64) int64 { return a + (b-a)/2 }

// estimateCPUOffset finds the offset (Kineto − plugin) that lines the plugin's KernelLaunch
// intervals up with Kineto's launch calls on the same threads: the mode of the differences of
// their midpoints, taken over NCCL launches only.
func (r *rankState) estimateCPUOffset(p *pluginIndex) {
	if r.opt.CPUOffset != nil {
		p.shift, p.shiftApplied = *r.opt.CPUOffset, true
		r.cpuOffset = p.shift
		return
	}
	// The coarse mode looks ±offsetSearch around at most coarseLaunches launches spread over
	// the trace (every launch against every NCCL call within 5 ms was a fifth of a merge on
	// NCCL-heavy traces); then every launch votes with its own difference nearest it, so that
	// neighbouring launches inside the coarse window do not pull the median.
	slack := r.slack(p)
	var diffs []int64
	step := max(1, len(p.launches)/coarseLaunches)
	for i := 0; i < len(p.launches); i += step {
		l := p.launches[i]
		lm := mid(l.Start, l.End)
		for _, c := range r.callsNear(l.Pid.Num, l.Tid, lm-offsetSearch, lm+offsetSearch, true) {
			diffs = append(diffs, mid(c.start, c.end())-lm)
		}
	}
	coarse, n := mode(diffs, 2*slack)
	if n < minSamples {
		p.shiftSamples = n
		return
	}
	var best []int64
	for _, l := range p.launches {
		lm := mid(l.Start, l.End)
		b, found := int64(0), false
		for _, c := range r.callsNear(l.Pid.Num, l.Tid, lm+coarse-2*slack, lm+coarse+2*slack, true) {
			if d := mid(c.start, c.end()) - lm; !found || abs(d-coarse) < abs(b-coarse) {
				b, found = d, true
			}
		}
		if found && abs(b-coarse) <= 2*slack {
			best = append(best, b)
		}
	}
	off := median(best)
	n = len(best)
	p.shiftSamples = n
	p.shift = off
	// Within the plugin's declared clock error the two clocks agree: leave the plugin's times
	// as written (the estimate is then mostly where the call sits inside the interval).
	p.shiftApplied = abs(off) > max(p.t.Clock.ErrorBoundNs, us)
	if !p.shiftApplied {
		p.shift = 0
	}
	r.cpuOffset, r.cpuOffsetSamples = off, n
}

// mode returns the densest value of v: the densest window of the given width, narrowed down
// (a quarter each time, to 50 ns) within itself, and how many values the first window holds.
func mode(v []int64, width int64) (int64, int) {
	if len(v) == 0 {
		return 0, 0
	}
	sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
	w := densest(v, width)
	n := len(w)
	for width > 50 {
		width /= 4
		w = densest(w, width)
	}
	return w[len(w)/2], n
}

// densest returns the sub-slice of sorted v in the window of the given width holding the most.
func densest(v []int64, width int64) []int64 {
	best, bi, bj := 0, 0, 0
	j := 0
	for i := range v {
		for j < len(v) && v[j]-v[i] <= width {
			j++
		}
		if j-i > best {
			best, bi, bj = j-i, i, j
		}
	}
	return v[bi:bj]
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// callsNear returns the launch calls of a thread (those of NCCL kernels with ncclOnly) that
// overlap [from, to].
func (r *rankState) callsNear(pid, tid, from, to int64, ncclOnly bool) []*launchCall {
	calls := r.kx.threadCalls(pid, tid, ncclOnly)
	// Anything overlapping starts after from less the longest call (launch calls are short:
	// searching from a fixed second back walked thousands of calls per launch).
	i := sort.Search(len(calls), func(i int) bool { return calls[i].start >= from-r.kx.maxCallDur })
	var out []*launchCall
	for ; i < len(calls) && calls[i].start <= to; i++ {
		if calls[i].end() >= from {
			out = append(out, &calls[i])
		}
	}
	return out
}

// linkByLaunch applies the launch rule to every KernelLaunch of every plugin trace.
func (r *rankState) linkByLaunch() {
	for _, p := range r.px {
		if p.t.Unanchored {
			continue // the example plugin records no real threads
		}
		r.estimateCPUOffset(p)
		slack := r.slack(p)
		for _, l := range p.launches {
			r.linkLaunch(p, l, slack)
		}
	}
}

func (r *rankState) linkLaunch(p *pluginIndex, l *plEvent, slack int64) {
	groups := p.groupsOfLaunch(l)
	fail := func(why string) {
		for _, g := range groups {
			if g.why == "" {
				g.why = why
			}
		}
	}
	from, to := l.Start+p.shift-slack, l.End+p.shift+slack
	var best *launchCall
	for _, c := range r.callsNear(l.Pid.Num, l.Tid, from, to, false) {
		if r.kx.used[c] || c.start < from || c.end() > to {
			continue
		}
		// Prefer the call whose kernel is an NCCL kernel, then the one nearest the middle.
		if best == nil || (r.byCorr[c.corr] != nil && r.byCorr[best.corr] == nil) ||
			((r.byCorr[c.corr] != nil) == (r.byCorr[best.corr] != nil) &&
				abs(mid(c.start, c.end())-mid(from, to)) < abs(mid(best.start, best.end())-mid(from, to))) {
			best = c
		}
	}
	switch {
	case best == nil && (to < r.kx.minTs || from > r.kx.maxTs):
		// Launched before torch.profiler started (or after it stopped): its kernel may still
		// run inside the window, which the order rule links.
		fail(whyOutsideWindow)
		return
	case best == nil:
		fail("no Kineto launch call inside the KernelLaunch interval on its thread")
		return
	case r.byCorr[best.corr] == nil:
		fail("the launch call inside the KernelLaunch started a kernel that is not an NCCL kernel in the Kineto trace")
		return
	}
	k := r.byCorr[best.corr]
	if k.link != nil {
		fail("the launch call's kernel was already linked")
		return
	}
	if len(groups) == 0 {
		fail("the KernelLaunch's operations are missing from the plugin trace (dropped)")
		return
	}
	for _, g := range groups {
		if why := disagreement(k, g); why != "" {
			fail("launch matched but " + why)
			k.why = "launch matched but " + why
			for _, g := range groups {
				g.refused = true
			}
			return
		}
	}
	r.kx.used[best] = true
	for _, g := range groups {
		g.launch = l
		r.addLink(RuleLaunch, k, g)
		if p.launchLink[l] == nil {
			p.launchLink[l] = g.link
		}
	}
}

func (r *rankState) addLink(rule string, k *kernel, g *opGroup) {
	lk := &link{rule: rule, kernel: k, group: g}
	if k.link == nil {
		k.link = lk
	}
	g.link = lk
	r.links = append(r.links, lk)
}

// disagreement checks that a kernel can be the one that ran a group: it must be specialized
// for the group's function, and where Kineto recorded the collective's arguments, the
// function, element count and datatype must match the API call's.
func disagreement(k *kernel, g *opGroup) string {
	if k.spec.Func != "" {
		for _, o := range g.ops {
			f := o.ev.Func
			if o.ev.Kind == ptrace.P2p {
				f = "SendRecv"
			}
			if !collective.KernelRuns(k.spec.Func, f) {
				return fmt.Sprintf("the kernel is %s, the operation %s", k.spec.Func, o.ev.Func)
			}
		}
	}
	if why := kernelTypeDisagrees(k, g); why != "" {
		return why
	}
	if !k.comms.Present || len(g.ops) != 1 {
		return "" // coalesced groups record totals PyTorch-side; nothing to compare one to one
	}
	o := g.ops[0]
	src := o.api
	if src == nil {
		return "" // the Coll event's count/datatype are NCCL's rewrite (bytes of int8 for AllGather)
	}
	if f, ok := collective.FromC10d(k.comms.Collective); ok && collective.NormFunc(f) != collective.NormFunc(src.Func) &&
		!(f == "AlltoAll" && o.ev.Kind == ptrace.P2p) {
		return fmt.Sprintf("PyTorch says %s (%s), NCCL says %s", f, k.comms.Collective, src.Func)
	}
	if !countAgrees(src.Func, int64(src.Count), k.comms, o.comm.NRanks) && o.ev.Kind != ptrace.P2p {
		return fmt.Sprintf("counts differ: NCCL %d, PyTorch %d in / %d out", src.Count, k.comms.InNelems, k.comms.OutNelems)
	}
	if k.comms.Dtype != "" && src.Datatype != "" {
		a, _ := collective.Datatype(k.comms.Dtype)
		b, _ := collective.Datatype(src.Datatype)
		if a != b {
			return fmt.Sprintf("datatypes differ: NCCL %s, PyTorch %s", src.Datatype, k.comms.Dtype)
		}
	}
	return ""
}

// countAgrees: NCCL's count is per rank; PyTorch records the input's elements (and, in newer
// traces, the output's), which for ReduceScatter is the count times the ranks, for AllGather
// the output is. Unknown counts (-1) agree with anything.
func countAgrees(fn string, n int64, c kineto.CommsArgs, nranks int) bool {
	if c.InNelems < 0 && c.OutNelems < 0 {
		return true
	}
	if n == c.InNelems || n == c.OutNelems {
		return true
	}
	if nr := int64(nranks); nr > 1 {
		switch collective.NormFunc(fn) {
		case "ReduceScatter":
			return n*nr == c.InNelems
		case "AllGather":
			return n*nr == c.OutNelems
		}
	}
	return false
}

// kernelTypeDisagrees compares the datatype a reduction kernel is specialized for (its name
// says it in every NCCL era) with the operation's. Copies (AllGather, Broadcast, SendRecv) run
// as bytes whatever the user's type, so only reductions are compared.
func kernelTypeDisagrees(k *kernel, g *opGroup) string {
	if k.spec.Datatype == "" || !collective.Reduces(k.spec.Func) {
		return ""
	}
	for _, o := range g.ops {
		dt := o.ev.Datatype
		if o.api != nil && o.api.Datatype != "" {
			dt = o.api.Datatype
		}
		if d, size := collective.Datatype(dt); size > 0 && d != k.spec.Datatype {
			return fmt.Sprintf("datatypes differ: NCCL %s, the kernel is for %s", dt, k.spec.Datatype)
		}
	}
	return ""
}
