package merge

import (
	"sort"
	"strconv"
)

// The order rule links what the launch rule could not (traces without KernelLaunch events:
// ABI < 5, NCCL's example plugin, CUDA-graph replays, dropped events, kernels whose launch call
// Kineto did not keep, operations enqueued before the Kineto window). NCCL launches a
// communicator's kernels on its stream in the order it enqueues the operations, and a stream
// runs its kernels in launch order, so within one (communicator ↔ process group and stream) the
// n-th operation by enqueue time runs as the n-th kernel by GPU start. (GPU start, not the
// launch call's time: only some kernels have a launch call in the trace, and mixing the two
// orders crosses the sequences.) Launch-rule links anchor the two sequences. Between two
// anchors, equal numbers of leftovers pair in order; unequal numbers pair only where the time
// leaves one choice, and the rest are reported as ambiguous. Before the first anchor and after
// the last, pairs are made outward from the anchor while each kernel starts after its
// operation (the two traces may start and stop at different times). A pair whose kernel
// contradicts its operation (function, count, datatype) stops the run: nothing after it in
// that direction is trusted.

// Reasons the order rule gives for what it leaves unlinked.
const (
	whyAmbiguous = "ambiguous: between the same launch-linked neighbours the operations and kernels left over differ in number, and their times allow more than one pairing"
	whyNoSeq     = "no process group in the Kineto trace matches its communicator"
)

// linkByOrder applies the order rule to the groups and kernels left unlinked.
func (r *rankState) linkByOrder() {
	seqOf := r.commToSeq()
	groups := map[string][]*opGroup{}
	for _, p := range r.px {
		for _, g := range p.groups {
			key, ok := seqOf[g.comm.Hash]
			if !ok {
				if g.link == nil && g.why == "" {
					g.why = whyNoSeq
				}
				continue
			}
			if g.link == nil && g.refused {
				continue
			}
			groups[key] = append(groups[key], g)
		}
	}
	kernels := map[string][]*kernel{}
	for _, k := range r.kx.kernels {
		if k.why != "" && k.link == nil {
			continue // the launch rule found this kernel's operation and refused it
		}
		kernels[k.seqKey()] = append(kernels[k.seqKey()], k)
	}
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		gs, ks := groups[key], kernels[key]
		sort.SliceStable(gs, func(i, j int) bool { return gs[i].at() < gs[j].at() })
		sort.SliceStable(ks, func(i, j int) bool { return ks[i].start < ks[j].start })
		r.orderSequences(gs, ks)
	}
}

// anchor is a launch-rule link inside one sequence: positions in the operation and kernel lists.
type anchor struct{ gi, ki int }

// anchors lists the launch-rule links of a sequence whose positions increase on both sides; a
// link that would cross another (it cannot, unless a trace is damaged) anchors nothing.
func anchors(gs []*opGroup, ks []*kernel) []anchor {
	pos := make(map[*kernel]int, len(ks))
	for i, k := range ks {
		pos[k] = i
	}
	var out []anchor
	for gi, g := range gs {
		if g.link == nil || g.link.rule != RuleLaunch || g.link.kernel.link != g.link {
			continue
		}
		ki, ok := pos[g.link.kernel]
		if !ok || (len(out) > 0 && ki <= out[len(out)-1].ki) {
			continue
		}
		out = append(out, anchor{gi, ki})
	}
	return out
}

// orderSequences pairs the unlinked members of one sequence (operations by enqueue time,
// kernels by GPU start), segment by segment between anchors.
func (r *rankState) orderSequences(gs []*opGroup, ks []*kernel) {
	d, tol := r.orderOffset(gs, ks)
	as := anchors(gs, ks)
	prev := anchor{-1, -1}
	for i := 0; i <= len(as); i++ {
		next := anchor{len(gs), len(ks)}
		if i < len(as) {
			next = as[i]
		}
		segG := unlinked(gs[prev.gi+1:next.gi], func(g *opGroup) bool { return g.link != nil })
		segK := unlinked(ks[prev.ki+1:next.ki], func(k *kernel) bool { return k.link != nil })
		switch first, last := i == 0, i == len(as); {
		case first && last:
			// No anchor at all: time alone decides (an ABI < 5 trace, or nothing launch-linked).
			r.pairUnique(segG, segK, d, tol)
		case first:
			r.pairOutward(segG, segK, true)
		case last:
			r.pairOutward(segG, segK, false)
		case len(segG) == len(segK):
			r.pairInOrder(segG, segK)
		default:
			r.pairUnique(segG, segK, d, tol)
		}
		prev = next
	}
}

// unlinked keeps the members of a run that no rule has linked yet.
func unlinked[T any](run []T, linked func(T) bool) []T {
	var out []T
	for _, x := range run {
		if !linked(x) {
			out = append(out, x)
		}
	}
	return out
}

// pairInOrder links the n-th operation to the n-th kernel of two runs of equal length between
// two anchors. A pair that contradicts itself means the runs do not correspond: none is linked.
func (r *rankState) pairInOrder(gs []*opGroup, ks []*kernel) {
	for i := range gs {
		if why := pairProblem(ks[i], gs[i]); why != "" {
			for j := range gs {
				gs[j].why = "paired in order between launch-linked neighbours but the " + ordinal(i+1) + " pair fails: " + why
				ks[j].why = gs[j].why
			}
			return
		}
	}
	for i := range gs {
		r.addLink(RuleOrder, ks[i], gs[i])
	}
}

// pairProblem says why a kernel cannot be an operation's: it starts before the operation was
// enqueued, or it contradicts it.
func pairProblem(k *kernel, g *opGroup) string {
	if k.start < g.at()-causalSlack {
		return "the kernel starts before the operation was enqueued"
	}
	return disagreement(k, g)
}

func ordinal(n int) string {
	switch n {
	case 1:
		return "1st"
	case 2:
		return "2nd"
	case 3:
		return "3rd"
	}
	return strconv.Itoa(n) + "th"
}

// orderOffset is the expected (kernel reference time − operation start) and how far a pair
// may stray from it: measured on the launch-rule links where there are any, else the offset
// that pairs the most operations with kernels.
func (r *rankState) orderOffset(gs []*opGroup, ks []*kernel) (d, tol int64) {
	var diffs []int64
	for _, g := range gs {
		if g.link != nil && g.link.rule == RuleLaunch {
			diffs = append(diffs, g.link.kernel.ref()-g.at())
		}
	}
	if len(diffs) >= minSamples {
		sort.Slice(diffs, func(i, j int) bool { return diffs[i] < diffs[j] })
		d = diffs[len(diffs)/2]
		dev := make([]int64, len(diffs))
		for i, x := range diffs {
			dev[i] = abs(x - d)
		}
		sort.Slice(dev, func(i, j int) bool { return dev[i] < dev[j] })
		return d, max(20*us, 4*dev[len(dev)/2], dev[len(dev)*9/10])
	}
	tol = max(20*us, medianGap(gs)*2/5)
	return searchOffset(gs, ks, tol), tol
}

func medianGap(gs []*opGroup) int64 {
	if len(gs) < 2 {
		return 0
	}
	gaps := make([]int64, 0, len(gs)-1)
	for i := 1; i < len(gs); i++ {
		gaps = append(gaps, gs[i].at()-gs[i-1].at())
	}
	sort.Slice(gaps, func(i, j int) bool { return gaps[i] < gaps[j] })
	return gaps[len(gaps)/2]
}

// searchOffset tries the offsets that put one of the first operations on one of the first
// kernels and keeps the one that pairs the most (the smallest offset among equals).
func searchOffset(gs []*opGroup, ks []*kernel, tol int64) int64 {
	best, bestN := int64(0), -1
	for i := 0; i < len(gs) && i < 16; i++ {
		for j := 0; j < len(ks) && j < 256; j++ {
			d := ks[j].ref() - gs[i].at()
			n := countPairs(gs, ks, d, tol)
			if n > bestN || (n == bestN && abs(d) < abs(best)) {
				best, bestN = d, n
			}
		}
	}
	return best
}

func countPairs(gs []*opGroup, ks []*kernel, d, tol int64) int {
	n := 0
	walkPairs(gs, ks, d, tol, func(*opGroup, *kernel) { n++ })
	return n
}

// walkPairs runs the time-ordered two-pointer match: a kernel pairs with the operation whose
// predicted time (start + d) it falls within tol of.
func walkPairs(gs []*opGroup, ks []*kernel, d, tol int64, pair func(*opGroup, *kernel)) {
	i, j := 0, 0
	for i < len(gs) && j < len(ks) {
		pred := gs[i].at() + d
		switch u := ks[j].ref(); {
		case u < pred-tol:
			j++
		case u > pred+tol:
			i++
		default:
			pair(gs[i], ks[j])
			i++
			j++
		}
	}
}

// pairUnique links the operations and kernels of two runs whose counts differ (or that no
// anchor ties together) only where the time leaves one choice. A kernel fits an operation when
// its reference time is within tol of the operation's start plus the expected delay d, and it
// does not start before the operation. The in-order matching that takes the earliest fitting
// kernel each time and the one that takes the latest (from the other end) are both as large as
// can be; a pair both make is the only one possible, the rest are ambiguous.
func (r *rankState) pairUnique(gs []*opGroup, ks []*kernel, d, tol int64) {
	if len(gs) == 0 || len(ks) == 0 {
		return
	}
	fits := func(g *opGroup, k *kernel) int { // <0: k too early, >0: too late
		switch u, pred := k.ref(), g.at()+d; {
		case u < pred-tol || k.start < g.at()-causalSlack:
			return -1
		case u > pred+tol:
			return 1
		}
		return 0
	}
	early := make(map[*opGroup]*kernel)
	for i, j := 0, 0; i < len(gs) && j < len(ks); {
		switch fits(gs[i], ks[j]) {
		case -1:
			j++
		case 1:
			i++
		default:
			early[gs[i]] = ks[j]
			i, j = i+1, j+1
		}
	}
	late := make(map[*opGroup]*kernel)
	for i, j := len(gs)-1, len(ks)-1; i >= 0 && j >= 0; {
		switch fits(gs[i], ks[j]) {
		case 1:
			j--
		case -1:
			i--
		default:
			late[gs[i]] = ks[j]
			i, j = i-1, j-1
		}
	}
	for _, g := range gs {
		k := early[g]
		switch {
		case k == nil && late[g] == nil:
			continue
		case k == nil || k != late[g]:
			g.why = whyAmbiguous
			for _, x := range []*kernel{k, late[g]} {
				if x != nil && x.link == nil {
					x.why = whyAmbiguous
				}
			}
			continue
		}
		if why := disagreement(k, g); why != "" {
			g.why = "paired in time but " + why
			k.why = g.why
			continue
		}
		k.why = ""
		r.addLink(RuleOrder, k, g)
	}
}

// pairOutward pairs two runs in order starting from the anchored end (fromEnd: the anchor
// follows the runs), stopping at the first pair that cannot be (the kernel would precede its
// operation, or contradicts it): past it, the runs no longer correspond.
func (r *rankState) pairOutward(gs []*opGroup, ks []*kernel, fromEnd bool) {
	n := min(len(gs), len(ks))
	for i := 0; i < n; i++ {
		g, k := gs[i], ks[i]
		if fromEnd {
			g, k = gs[len(gs)-1-i], ks[len(ks)-1-i]
		}
		if why := pairProblem(k, g); why != "" {
			g.why = "paired in order outward from a launch-linked neighbour but " + why
			k.why = g.why
			return
		}
		r.addLink(RuleOrder, k, g)
	}
}

// causalSlack is how early a kernel may seem to start before its operation's enqueue (clock
// noise between the two traces).
const causalSlack = 20 * us

// commToSeq maps each communicator of the plugin trace to a sequence of Kineto kernels (process
// group and stream): by the launch-rule links first (majority), then by size where a single
// unclaimed sequence fits.
func (r *rankState) commToSeq() map[uint64]string {
	out := map[uint64]string{}
	votes := map[uint64]map[string]int{}
	for _, l := range r.links {
		c := l.group.comm.Hash
		if votes[c] == nil {
			votes[c] = map[string]int{}
		}
		votes[c][l.kernel.seqKey()]++
	}
	claimed := map[string]bool{}
	for c, v := range votes {
		best, n := "", 0
		for pg, k := range v {
			if k > n || (k == n && pg < best) {
				best, n = pg, k
			}
		}
		out[c] = best
		claimed[best] = true
	}
	sizes := map[string]int{} // sequence → group size (0 unknown)
	for _, k := range r.kx.kernels {
		sizes[k.seqKey()] = max(sizes[k.seqKey()], k.comms.GroupSize)
	}
	comms := r.comms()
	for _, c := range comms {
		if _, ok := out[c.Hash]; ok {
			continue
		}
		var fit []string
		for pg, n := range sizes {
			if !claimed[pg] && (n == 0 || c.NRanks == 0 || n == c.NRanks) {
				fit = append(fit, pg)
			}
		}
		if len(fit) == 1 {
			out[c.Hash] = fit[0]
			claimed[fit[0]] = true
		}
	}
	return out
}

// commLabel is a communicator's name for messages.
func commLabel(name string, hash uint64) string {
	if name != "" {
		return name
	}
	return "0x" + strconv.FormatUint(hash, 16)
}
