package merge

import (
	"fmt"
	"math"
	"sort"

	"github.com/ncclprof/ncclprof/internal/kineto"
	"github.com/ncclprof/ncclprof/internal/ptrace"
)

// rankState is one rank's inputs, indexes and links.
type rankState struct {
	opt    Options
	label  int // the rank's number in names ("rank N"), from distributedInfo or the plugin
	idx    int // position in the output
	kt     *kineto.Trace
	kx     *kinetoIndex
	px     []*pluginIndex
	byCorr map[uint64]*kernel
	links  []*link

	cpuOffset        int64
	cpuOffsetSamples int
	gpu              gpuClock
	// shift is added to every time of this rank on output (cross-host alignment).
	shift int64
	host  string
}

// gpuClock is the measured offset from GPU %globaltimer to Kineto's clock.
// gpuClock is the GPU clock offset a rank's channels are placed with: %globaltimer − Kineto
// time, the sign of the plugin's own gpu_clock.offset_ns.
type gpuClock struct {
	offset, mad int64
	samples     int
	from        string // "kernels" (measured), "plugin" (the plugin's own estimate) or ""
}

func (g gpuClock) placedBy() string {
	if g.from == "plugin" {
		return "ncclmerge (the plugin's own GPU clock offset)"
	}
	return "ncclmerge (median offset over linked kernels)"
}

// newRank indexes a Kineto trace (read by the caller with kx.visit) and its plugin traces.
func newRank(opt Options, kt *kineto.Trace, kx *kinetoIndex, plugins []*ptrace.Trace, index *pluginIndexes) *rankState {
	r := &rankState{opt: opt, kt: kt, kx: kx, byCorr: map[uint64]*kernel{}, label: kt.Rank}
	for _, k := range kx.kernels {
		if k.corr != 0 {
			r.byCorr[k.corr] = k
		}
	}
	for _, p := range plugins {
		r.px = append(r.px, index.of(p))
		if r.host == "" {
			r.host = p.Host
		}
	}
	if r.host == "" {
		r.host = kt.Host
	}
	if r.label < 0 {
		r.label = r.pluginRank()
	}
	return r
}

// pluginRank guesses the global rank from the plugin's communicators: the rank in the largest.
func (r *rankState) pluginRank() int {
	best, n := -1, 0
	for _, c := range r.comms() {
		if c.NRanks > n {
			best, n = c.Rank, c.NRanks
		}
	}
	return best
}

func (r *rankState) comms() []ptrace.Comm {
	var out []ptrace.Comm
	seen := map[uint64]bool{}
	for _, p := range r.px {
		for _, c := range p.t.Comms {
			if !seen[c.Hash] {
				seen[c.Hash] = true
				out = append(out, c)
			}
		}
	}
	return out
}

// link runs the rules in order: launch, then order, then measures the GPU clock.
func (r *rankState) link() {
	r.linkByLaunch()
	r.alignUnanchored()
	r.linkByOrder()
	r.estimateGPUOffset()
}

// alignUnanchored finds the offset of example-plugin traces (times since the plugin started)
// by the order rule's offset search over all their operations and the rank's kernels.
func (r *rankState) alignUnanchored() {
	for _, p := range r.px {
		if !p.t.Unanchored || len(p.groups) == 0 || len(r.kx.kernels) == 0 {
			continue
		}
		tol := max(20*us, medianGap(p.groups)*2/5)
		d := searchOffset(p.groups, r.kx.kernels, tol)
		p.shiftSamples = countPairs(p.groups, r.kx.kernels, d, tol) // before the shift moves at()
		p.shift, p.shiftApplied = d, true
	}
}

// estimateGPUOffset measures the GPU clock offset on linked kernels, with the plugin's sign
// (offset = %globaltimer − Kineto time, docs/trace-format.md): the earliest channel start minus
// the kernel's start, median over all links.
func (r *rankState) estimateGPUOffset() {
	var diffs []int64
	for _, l := range r.links {
		if first, ok := firstChannel(l.group); ok {
			diffs = append(diffs, first-l.kernel.start)
		}
	}
	if len(diffs) > 0 {
		sort.Slice(diffs, func(i, j int) bool { return diffs[i] < diffs[j] })
		// The lower median: with an even count, the smaller offset, which places no channel
		// before the start of its kernel.
		med := diffs[(len(diffs)-1)/2]
		dev := make([]int64, len(diffs))
		for i, d := range diffs {
			dev[i] = abs(d - med)
		}
		sort.Slice(dev, func(i, j int) bool { return dev[i] < dev[j] })
		r.gpu = gpuClock{offset: med, mad: dev[len(dev)/2], samples: len(diffs), from: "kernels"}
		return
	}
	for _, p := range r.px {
		if g := p.t.GPUClock; g.Method != "" && g.Method != "none" {
			r.gpu = gpuClock{offset: g.OffsetNs, mad: g.UncertaintyNs, samples: g.Samples, from: "plugin"}
			return
		}
	}
}

func firstChannel(g *opGroup) (int64, bool) {
	first := int64(math.MaxInt64)
	for _, o := range g.ops {
		for _, ch := range o.channels {
			if ch.gpuStart > 0 {
				first = min(first, ch.gpuStart)
			}
		}
	}
	return first, first != math.MaxInt64
}

// kernelWhy says why a kernel stayed unlinked.
func (r *rankState) kernelWhy(k *kernel) string {
	switch {
	case k.why != "":
		return k.why
	case len(r.px) == 0:
		return "no plugin trace for this process"
	}
	lo, hi, ok := r.pluginSpan()
	if !ok {
		return "the plugin trace has no NCCL operations"
	}
	if k.ref() < lo-10*ms || k.start > hi+10*ms {
		return "outside the time the plugin trace covers"
	}
	return "no NCCL operation of its process group and function pairs with it (dropped from the plugin trace?)"
}

// groupWhy says why an operation group stayed unlinked.
func (r *rankState) groupWhy(g *opGroup) string {
	if g.why != "" {
		return g.why
	}
	if g.at() < r.kx.minTs || g.at() > r.kx.maxTs {
		return "outside the Kineto trace's time window"
	}
	return "no NCCL kernel of its process group and function pairs with it"
}

func (r *rankState) pluginSpan() (lo, hi int64, ok bool) {
	lo, hi = math.MaxInt64, math.MinInt64
	for _, p := range r.px {
		for _, g := range p.groups {
			lo, hi = min(lo, g.at()), max(hi, g.at())
		}
	}
	return lo, hi, lo <= hi
}

// name is the rank's label for messages.
func (r *rankState) name() string {
	if r.label >= 0 {
		return fmt.Sprintf("rank %d", r.label)
	}
	return fmt.Sprintf("trace %d", r.idx)
}
