package merge

import (
	"sort"
	"strconv"
)

// The order rule links what the launch rule could not (traces without KernelLaunch events:
// ABI < 5, NCCL's example plugin, CUDA-graph replays, dropped events, kernels whose launch
// call Kineto did not keep). Within one (communicator ↔ process group, kernel function), NCCL
// launches kernels in the order it enqueues operations, so the n-th operation runs as the n-th
// kernel. Launch-rule links anchor the two sequences; between two anchors, equal numbers of
// leftover operations and kernels are paired in order; elsewhere pairs must also agree in time.

type orderKey struct {
	pg    string
	kfunc string
}

// linkByOrder applies the order rule to the groups and kernels left unlinked.
func (r *rankState) linkByOrder() {
	pgOf := r.commToPG()
	groups := map[orderKey][]*opGroup{}
	for _, p := range r.px {
		for _, g := range p.groups {
			pg, ok := pgOf[g.comm.Hash]
			if !ok {
				if g.link == nil && g.why == "" {
					g.why = "no process group in the Kineto trace matches its communicator"
				}
				continue
			}
			if g.link == nil && g.why != "" && g.refused {
				continue
			}
			k := orderKey{pg, g.kfunc}
			groups[k] = append(groups[k], g)
		}
	}
	kernels := map[orderKey][]*kernel{}
	for _, k := range r.kx.kernels {
		if k.why != "" && k.link == nil {
			continue // the launch rule found this kernel's operation and refused it
		}
		key := orderKey{k.pgKey(), k.spec.Func}
		kernels[key] = append(kernels[key], k)
	}
	keys := make([]orderKey, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].pg+keys[i].kfunc < keys[j].pg+keys[j].kfunc
	})
	for _, key := range keys {
		gs, ks := groups[key], kernels[key]
		sort.SliceStable(gs, func(i, j int) bool { return gs[i].at() < gs[j].at() })
		sort.SliceStable(ks, func(i, j int) bool { return ks[i].ref() < ks[j].ref() })
		r.orderSequences(gs, ks)
	}
}

// orderSequences pairs the unlinked members of two time-ordered sequences, using the linked
// members as anchors.
func (r *rankState) orderSequences(gs []*opGroup, ks []*kernel) {
	d, tol := r.orderOffset(gs, ks)
	inSeq := make(map[*kernel]bool, len(ks))
	for _, k := range ks {
		inSeq[k] = true
	}
	isAnchor := func(g *opGroup) bool { return g.link != nil && inSeq[g.link.kernel] && g.link.kernel.link == g.link }
	var segG []*opGroup
	var segK []*kernel
	afterAnchor := false
	gi, ki := 0, 0
	for {
		for ; gi < len(gs) && !isAnchor(gs[gi]); gi++ {
			if gs[gi].link == nil {
				segG = append(segG, gs[gi])
			}
		}
		var anchor *kernel
		if gi < len(gs) {
			anchor = gs[gi].link.kernel
		}
		for ; ki < len(ks) && ks[ki] != anchor; ki++ {
			if ks[ki].link == nil {
				segK = append(segK, ks[ki])
			}
		}
		closed := anchor != nil && ki < len(ks)
		switch {
		case afterAnchor && closed && len(segG) == len(segK):
			// Between two anchors, equal numbers left on each side: the n-th is the n-th.
			for i := range segG {
				r.orderLink(segK[i], segG[i])
			}
		case closed && !afterAnchor:
			// Before the first anchor the traces may cover different spans: pair outward from
			// the anchor, in order, while each kernel starts after its operation.
			r.pairOutward(segG, segK, true)
		case afterAnchor && !closed && anchor == nil:
			r.pairOutward(segG, segK, false)
		default:
			r.pairInTime(segG, segK, d, tol)
		}
		segG, segK = segG[:0], segK[:0]
		if !closed {
			return
		}
		afterAnchor = true
		gi++
		ki++
	}
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

func (r *rankState) pairInTime(gs []*opGroup, ks []*kernel, d, tol int64) {
	if len(gs) == 0 || len(ks) == 0 {
		return
	}
	walkPairs(gs, ks, d, tol, func(g *opGroup, k *kernel) {
		if g.link == nil && k.link == nil {
			r.orderLink(k, g)
		}
	})
}

// pairOutward pairs two runs in order starting from the anchored end (fromEnd: the anchor
// follows the runs), stopping at the first pair where the kernel would precede its operation.
func (r *rankState) pairOutward(gs []*opGroup, ks []*kernel, fromEnd bool) {
	n := min(len(gs), len(ks))
	for i := 0; i < n; i++ {
		g, k := gs[i], ks[i]
		if fromEnd {
			g, k = gs[len(gs)-1-i], ks[len(ks)-1-i]
		}
		if k.ref() < g.at()-causalSlack {
			return
		}
		r.orderLink(k, g)
	}
}

// causalSlack is how early a kernel's launch may seem to come before its operation's enqueue
// (clock noise between the two traces).
const causalSlack = 20 * us

// orderLink links a pair the order rule found, unless the kernel contradicts the operation.
func (r *rankState) orderLink(k *kernel, g *opGroup) {
	if why := disagreement(k, g); why != "" {
		g.why = "paired in order but " + why
		k.why = g.why
		return
	}
	r.addLink(RuleOrder, k, g)
}

// commToPG maps each communicator of the plugin trace to the process-group key of the Kineto
// kernels: by the launch-rule links first (majority), then by size where a single unclaimed
// process group fits, then — with one communicator and one process group — directly.
func (r *rankState) commToPG() map[uint64]string {
	out := map[uint64]string{}
	votes := map[uint64]map[string]int{}
	for _, l := range r.links {
		c := l.group.comm.Hash
		if votes[c] == nil {
			votes[c] = map[string]int{}
		}
		votes[c][l.kernel.pgKey()]++
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
	sizes := map[string]int{} // pg → group size (0 unknown)
	for _, k := range r.kx.kernels {
		sizes[k.pgKey()] = max(sizes[k.pgKey()], k.comms.GroupSize)
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
