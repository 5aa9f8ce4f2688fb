package merge

import (
	"fmt"
	"math"
	"sort"
	"strconv"

	"github.com/ncclprof/ncclprof/internal/kineto"
	"github.com/ncclprof/ncclprof/internal/ptrace"
	"github.com/ncclprof/ncclprof/internal/quantile"
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

// gpuClock is the GPU clock offset a rank's channels are placed with: %globaltimer − Kineto
// time, the sign of the plugin's own gpu_clock.offset_ns. offset is the median over the run;
// each link's channels are placed with its own local estimate (link.gpuOffset).
type gpuClock struct {
	offset, mad int64
	samples     int
	driftPPM    float64 // how fast the local estimates move against Kineto time
	from        string  // "kernels" (measured), "plugin" (the plugin's own estimate) or ""
}

func (g gpuClock) placedBy() string {
	if g.from == "plugin" {
		return "ncclmerge (the plugin's own GPU clock offset)"
	}
	return "ncclmerge (GPU clock offset fitted to the " + strconv.Itoa(gpuBlock) + " linked kernels around it)"
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

// gpuBlock is how many linked kernels, consecutive in time, share one fitted line of the GPU
// clock offset. One offset for a whole run misplaces channels by the GPU timer's drift against
// the host clock (20 ppm is 200 µs over a 10 s trace); a line per block follows the drift, even
// where it changes over the run (host clock slews), and a median fit moves nothing for one
// channel that starts late (a delayed block).
const gpuBlock = 64

// estimateGPUOffset measures the GPU clock offset on linked kernels, with the plugin's sign
// (offset = %globaltimer − Kineto time, docs/trace-format.md): the earliest channel start minus
// the kernel's start. The run's figure is the lower median over all links; each link places its
// channels with its block's line (fitOffsets). Without a linked kernel that has channel times,
// the plugin's own estimate serves every link.
func (r *rankState) estimateGPUOffset() {
	var s []offsetSample
	for _, l := range r.links {
		if first, ok := firstChannel(l.group); ok {
			s = append(s, offsetSample{l.kernel.start, first - l.kernel.start, l})
		}
	}
	if len(s) == 0 {
		for _, p := range r.px {
			if g := p.t.GPUClock; g.Method != "" && g.Method != "none" {
				r.gpu = gpuClock{offset: g.OffsetNs, mad: g.UncertaintyNs, samples: g.Samples, from: "plugin"}
				for _, l := range r.links {
					l.gpuOffset = g.OffsetNs
				}
				return
			}
		}
		return
	}
	diffs := make([]int64, len(s))
	for i, x := range s {
		diffs[i] = x.diff
	}
	med := lowerMedian(diffs)
	for i, d := range diffs {
		diffs[i] = abs(d - med)
	}
	r.gpu = gpuClock{offset: med, mad: quantile.KthInPlace(diffs, len(diffs)/2), samples: len(s), from: "kernels"}
	for _, l := range r.links { // no channel times: nothing to place; the run's figure
		l.gpuOffset = med
	}
	sort.Slice(s, func(i, j int) bool { return s[i].at < s[j].at })
	r.gpu.driftPPM = medianSlope(s) * 1e6
	fitOffsets(s)
}

// offsetSample is one linked kernel's GPU clock offset: its first channel's start on
// %globaltimer minus its start in Kineto time (at).
type offsetSample struct {
	at, diff int64
	l        *link
}

// fitOffsets gives each sample's link the offset of a line fitted to its block of gpuBlock
// samples (sorted by time; the last block takes a remainder under half a block): the median
// slope, then the lower median of what the line leaves, as for the run's figure.
func fitOffsets(s []offsetSample) {
	rest := make([]int64, 0, 2*gpuBlock)
	for lo := 0; lo < len(s); {
		hi := lo + gpuBlock
		if len(s)-hi < gpuBlock/2 {
			hi = len(s)
		}
		block := s[lo:hi]
		b := medianSlope(block)
		rest = rest[:0]
		for _, x := range block {
			rest = append(rest, x.diff-int64(math.Round(b*float64(x.at-block[0].at))))
		}
		a := lowerMedian(rest)
		for _, x := range block {
			x.l.gpuOffset = a + int64(math.Round(b*float64(x.at-block[0].at)))
		}
		lo = hi
	}
}

// minSlopeSamples: with fewer samples a fitted slope follows the channels' start jitter more
// than any drift, so the offset is held constant.
const minSlopeSamples = 16

// maxDrift bounds a believable slope: GPU timers drift tens of ppm against the host; a steeper
// median slope comes from damaged timestamps, and the offset is then held constant.
const maxDrift = 1e-3

// medianSlope is the median of the slopes between each sample of the first half and its
// partner half the samples later (s sorted by time): each pair spans half the samples, so a
// channel's start delay moves a slope little, and one late start moves the median nothing.
func medianSlope(s []offsetSample) float64 {
	if len(s) < minSlopeSamples {
		return 0
	}
	h := (len(s) + 1) / 2
	var slopes []float64
	for i := 0; i+h < len(s); i++ {
		if dt := s[i+h].at - s[i].at; dt > 0 {
			slopes = append(slopes, float64(s[i+h].diff-s[i].diff)/float64(dt))
		}
	}
	if len(slopes) == 0 {
		return 0
	}
	if b := quantile.KthInPlace(slopes, len(slopes)/2); math.Abs(b) <= maxDrift {
		return b
	}
	return 0
}

// lowerMedian is v's lower median (v is reordered): with an even count the smaller middle
// value, an offset that places no channel before the start of its kernel.
func lowerMedian(v []int64) int64 { return quantile.KthInPlace(v, (len(v)-1)/2) }

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

// whyOutsideWindow: an operation enqueued (launched) before the Kineto trace's first event or
// after its last, whose kernel no rule found in the trace.
const whyOutsideWindow = "outside the Kineto trace's time window"

// groupWhy says why an operation group stayed unlinked.
func (r *rankState) groupWhy(g *opGroup) string {
	if g.why != "" {
		return g.why
	}
	if g.at() < r.kx.minTs || g.at() > r.kx.maxTs {
		return whyOutsideWindow
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
