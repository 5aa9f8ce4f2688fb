package merge

import (
	"slices"
	"strconv"
	"strings"

	"github.com/ncclprof/ncclprof/internal/align"
	"github.com/ncclprof/ncclprof/internal/kineto"
	"github.com/ncclprof/ncclprof/internal/ptrace"
	"github.com/ncclprof/ncclprof/internal/quantile"
)

// maxTimelineRanks: pids are remapped to (index+1)·2^22 + pid, which must fit Perfetto's uint32.
const maxTimelineRanks = 1023

// timelineMap renames processes and flows so that several ranks share one trace: every rank
// has its own pids (GPU 0 of every rank is pid 0 in Kineto), names and flow ids.
type timelineMap struct {
	// flows numbers each rank's Kineto flows in order of first appearance (their dense ids).
	flows map[*rankState]map[flowKey]int
}

// kinetoFlow returns the dense number of a Kineto flow of rank r, numbered as met: the writer
// meets every flow event in file order, dangling starts included.
func (tl *timelineMap) kinetoFlow(r *rankState, k flowKey) int {
	if tl.flows == nil {
		tl.flows = map[*rankState]map[flowKey]int{}
	}
	m := tl.flows[r]
	if m == nil {
		m = map[flowKey]int{}
		tl.flows[r] = m
	}
	n, ok := m[k]
	if !ok {
		n = len(m)
		m[k] = n
	}
	return n
}

func (*timelineMap) pid(b []byte, r *rankState, id kineto.ID) []byte {
	if id.IsStr {
		return appendJSONString(b, "rank "+strconv.Itoa(r.label)+" "+id.Str)
	}
	return strconv.AppendInt(b, timelinePid(r.idx, id.Num), 10)
}

func timelinePid(idx int, pid int64) int64 {
	return int64(idx+1)<<22 | (pid & (1<<22 - 1))
}

func (*timelineMap) flowID(r *rankState, n uint64) uint64 { return uint64(r.idx+1)<<32 | n }

// processMeta renames a rank's processes ("rank 3 python (pid 1234)", "rank 3 GPU 0") and
// orders them rank by rank, CPU before GPUs. It returns the new args, or nil to keep them.
func (*timelineMap) processMeta(r *rankState, ev *kineto.Event) []byte {
	if ev.Pid.IsStr {
		return nil
	}
	pid := ev.Pid.String()
	gpu := r.kx.gpuPids[ev.Pid.Num] || strings.HasPrefix(r.kx.labels[pid], "GPU")
	switch ev.Name {
	case "process_name":
		name := "rank " + strconv.Itoa(r.label) + " " + ev.Arg("name").String() + " (pid " + pid + ")"
		if gpu {
			name = "rank " + strconv.Itoa(r.label) + " GPU " + pid
		}
		return newObj(nil).str("name", name).done()
	case "process_sort_index":
		idx := int64(r.idx) * 100
		if gpu {
			idx += 50 + ev.Pid.Num%50
		}
		return newObj(nil).int("sort_index", idx).done()
	}
	return nil
}

// idSpace hands out flow ids that cannot collide between ranks or sources.
type idSpace struct {
	link, plugin map[*rankState]*uint64
}

func newIDSpace() *idSpace {
	return &idSpace{link: map[*rankState]*uint64{}, plugin: map[*rankState]*uint64{}}
}

func counter(m map[*rankState]*uint64, r *rankState) *uint64 {
	if m[r] == nil {
		m[r] = new(uint64)
	}
	return m[r]
}

func (s *idSpace) linkFlow(r *rankState) uint64 {
	c := counter(s.link, r)
	*c++
	return uint64(r.idx+1)<<32 | 3<<30 | *c
}

func (s *idSpace) pluginFlows(r *rankState) *uint64 { return counter(s.plugin, r) }

func (s *idSpace) pluginFlow(r *rankState, n uint64) uint64 { return uint64(r.idx+1)<<32 | 1<<31 | n }

// collectiveKey names one collective across ranks: NCCL's (communicator, function, seq).
type collectiveKey struct {
	comm uint64
	fn   string
	seq  int64
}

// alignHosts shifts every host but the first rank's so that the kernels of the same
// collective end together (they finish at nearly the same instant on all ranks), and reports
// what is left: the spread of kernel ends per collective.
func alignHosts(ranks []*rankState) *Alignment {
	ends := map[collectiveKey]map[*rankState]int64{}
	for _, r := range ranks {
		for _, l := range r.links {
			if len(l.group.ops) != 1 || l.group.ops[0].ev.Kind != ptrace.Coll || l.group.ops[0].ev.Seq < 0 {
				continue
			}
			op := l.group.ops[0].ev
			k := collectiveKey{op.Comm, op.Func, op.Seq}
			if ends[k] == nil {
				ends[k] = map[*rankState]int64{}
			}
			ends[k][r] = l.kernel.end
		}
	}
	res := align.Ends(ends, func(r *rankState) string { return r.host }, ranks[0].host)
	a := &Alignment{Method: "median difference of collective kernel ends, per host", HostShiftNs: map[string]int64{},
		Collectives: res.Collectives, BeforeMedianNs: res.BeforeMedian,
		ResidualMedianNs: res.ResidualMedian, ResidualP90Ns: res.ResidualP90}
	for _, r := range ranks {
		r.shift = res.Shift[r.host]
		a.HostShiftNs[r.host] = r.shift
	}
	return a
}

// median is v's upper median (v is left as it is).
func median(v []int64) int64 { return quantile.KthInPlace(slices.Clone(v), len(v)/2) }
