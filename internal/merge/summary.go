package merge

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"

	"github.com/ncclprof/ncclprof/internal/words"
)

// Summary is what a merge did: it goes into the output (the "ncclmerge" key) and to stderr.
type Summary struct {
	Output    string         `json:"output,omitempty"`
	Ranks     []*RankSummary `json:"ranks"`
	Alignment *Alignment     `json:"alignment,omitempty"`
}

// RankSummary is one rank's part of the summary.
type RankSummary struct {
	Rank       int      `json:"rank"`
	Host       string   `json:"host,omitempty"`
	Kineto     string   `json:"kineto"`
	NCCL       []string `json:"nccl"`
	KinetoTime string   `json:"kineto_time"`
	Simulated  bool     `json:"simulated,omitempty"`
	Truncated  bool     `json:"nccl_truncated,omitempty"`
	Unanchored bool     `json:"nccl_unanchored,omitempty"`
	EventsIn   EventsIn `json:"events_in"`
	EventsOut  int      `json:"events_out"`
	Added      int      `json:"events_added"`
	Dropped    int      `json:"events_dropped"`
	DroppedWhy string   `json:"events_dropped_why,omitempty"`
	// InvalidUTF8 counts input bytes that were not UTF-8, written as '?'.
	InvalidUTF8 int `json:"invalid_utf8_bytes,omitempty"`
	// DuplicateIDs counts plugin slices whose handle an earlier slice had: kept, linking nothing.
	DuplicateIDs int `json:"nccl_duplicate_ids,omitempty"`
	NCCLKernels  int `json:"nccl_kernels"`
	Operations   int `json:"nccl_operation_groups"`
	// Linked counts kernels linked by each rule.
	Linked          map[string]int `json:"linked"`
	UnlinkedKernels map[string]int `json:"unlinked_kernels"`
	UnlinkedOps     map[string]int `json:"unlinked_operation_groups"`
	Clock           ClockSummary   `json:"clock"`
}

// EventsIn counts the events read.
type EventsIn struct {
	Kineto int `json:"kineto"`
	NCCL   int `json:"nccl"`
}

// ClockSummary reports the clock offsets measured between the inputs.
type ClockSummary struct {
	CPUOffsetNs      int64  `json:"cpu_offset_ns"`
	CPUOffsetSamples int    `json:"cpu_offset_samples"`
	CPUOffsetApplied bool   `json:"cpu_offset_applied"`
	GPUOffsetNs      int64  `json:"gpu_offset_ns,omitempty"` // %globaltimer − Kineto time, as plugin_gpu_offset_ns
	GPUOffsetMADNs   int64  `json:"gpu_offset_mad_ns,omitempty"`
	GPUOffsetSamples int    `json:"gpu_offset_samples,omitempty"`
	GPUOffsetFrom    string `json:"gpu_offset_from,omitempty"`
	// GPUDriftPPM: how fast the GPU clock offset moved over the run (the slope of the local
	// estimates channels were placed with), in parts per million.
	GPUDriftPPM     float64 `json:"gpu_drift_ppm,omitempty"`
	PluginGPUOffset int64   `json:"plugin_gpu_offset_ns,omitempty"` // the plugin's gpu_clock.offset_ns: %globaltimer − Unix
	ShiftNs         int64   `json:"alignment_shift_ns,omitempty"`
}

// Alignment reports the cross-host alignment on collective ends.
type Alignment struct {
	Method      string           `json:"method"`
	Collectives int              `json:"collectives"`
	HostShiftNs map[string]int64 `json:"host_shift_ns"`
	// Residual: spread (max − min) of a collective's kernel end across ranks after alignment.
	ResidualMedianNs int64 `json:"residual_median_ns"`
	ResidualP90Ns    int64 `json:"residual_p90_ns"`
	BeforeMedianNs   int64 `json:"before_median_ns"`
}

func (r *rankState) summary() *RankSummary {
	s := &RankSummary{Rank: r.label, Host: r.host, Kineto: r.kt.Path, EventsIn: EventsIn{Kineto: r.kt.Events},
		NCCLKernels: len(r.kx.kernels), Linked: map[string]int{}, UnlinkedKernels: map[string]int{},
		UnlinkedOps: map[string]int{}, Dropped: len(r.kx.dangling), InvalidUTF8: r.kt.InvalidUTF8}
	switch {
	case r.kt.HasBase:
		s.KinetoTime = "relative to baseTimeNanoseconds (PyTorch ≥ 2.4)"
	default:
		s.KinetoTime = "absolute µs (PyTorch ≤ 2.3)"
	}
	if s.Dropped > 0 {
		s.DroppedWhy = "Kineto flow starts with no end (their kernel is outside the trace window); Perfetto draws nothing for them"
	}
	for _, p := range r.px {
		s.NCCL = append(s.NCCL, p.t.Path)
		s.EventsIn.NCCL += p.t.Doc.Events
		s.Simulated = s.Simulated || p.t.Simulated
		s.Truncated = s.Truncated || p.t.Truncated
		s.Unanchored = s.Unanchored || p.t.Unanchored
		s.Operations += len(p.groups)
		s.DuplicateIDs += p.dupIDs
		s.InvalidUTF8 += p.t.Doc.InvalidUTF8
		for _, g := range p.groups {
			if g.link == nil {
				s.UnlinkedOps[r.groupWhy(g)]++
			}
		}
		if p.shiftApplied || p.shiftSamples > 0 {
			s.Clock.CPUOffsetNs, s.Clock.CPUOffsetSamples, s.Clock.CPUOffsetApplied = r.cpuOffset, p.shiftSamples, p.shiftApplied
			if p.t.Unanchored {
				s.Clock.CPUOffsetNs = p.shift
			}
		}
		if g := p.t.GPUClock; g.Method != "" && g.Method != "none" {
			s.Clock.PluginGPUOffset = g.OffsetNs
		}
	}
	for _, k := range r.kx.kernels {
		if k.link == nil {
			s.UnlinkedKernels[r.kernelWhy(k)]++
		} else {
			s.Linked[k.link.rule]++
		}
	}
	s.Clock.GPUOffsetNs, s.Clock.GPUOffsetMADNs, s.Clock.GPUOffsetSamples, s.Clock.GPUOffsetFrom =
		r.gpu.offset, r.gpu.mad, r.gpu.samples, r.gpu.from
	s.Clock.GPUDriftPPM = math.Round(r.gpu.driftPPM*1000) / 1000
	s.Clock.ShiftNs = r.shift
	return s
}

// WriteText prints the summary for a person.
func (s *Summary) WriteText(w io.Writer) {
	for _, r := range s.Ranks {
		fmt.Fprintf(w, "rank %d", r.Rank)
		if r.Host != "" {
			fmt.Fprintf(w, " (%s)", r.Host)
		}
		if len(r.NCCL) == 0 {
			fmt.Fprintf(w, ": %s, and no plugin trace: no NCCL operation to link\n", r.Kineto)
		} else {
			fmt.Fprintf(w, ": %s + %s\n", r.Kineto, strings.Join(r.NCCL, ", "))
		}
		if r.Simulated {
			fmt.Fprintf(w, "  the NCCL trace is SIMULATED (ncclprof test host), not from a real job\n")
		}
		fmt.Fprintf(w, "  read %d Kineto events (%s) and %d NCCL events; wrote %d (%d added, %d dropped)\n",
			r.EventsIn.Kineto, r.KinetoTime, r.EventsIn.NCCL, r.EventsOut, r.Added, r.Dropped)
		if r.Dropped > 0 {
			fmt.Fprintf(w, "  dropped: %s\n", r.DroppedWhy)
		}
		if r.InvalidUTF8 > 0 {
			fmt.Fprintf(w, "  %d input bytes were not valid UTF-8 (JSON text must be): written as '?'\n", r.InvalidUTF8)
		}
		if r.DuplicateIDs > 0 {
			fmt.Fprintf(w, "  %d NCCL slices repeat the handle of an earlier one (a damaged file?): kept, but they link nothing\n", r.DuplicateIDs)
		}
		linked := r.Linked[RuleLaunch] + r.Linked[RuleOrder]
		fmt.Fprintf(w, "  NCCL kernels: %d, linked %d (%d by launch, %d by order)\n",
			r.NCCLKernels, linked, r.Linked[RuleLaunch], r.Linked[RuleOrder])
		writeReasons(w, "  unlinked kernels:", r.UnlinkedKernels)
		fmt.Fprintf(w, "  NCCL operation groups: %d\n", r.Operations)
		writeReasons(w, "  unlinked operation groups:", r.UnlinkedOps)
		c := r.Clock
		applied := "not applied: within the plugin's clock error"
		if c.CPUOffsetApplied {
			applied = "applied to the NCCL events"
		}
		switch {
		case r.Unanchored:
			fmt.Fprintf(w, "  the NCCL trace has no absolute clock (NCCL's example plugin): placed at Unix %d ns + its ts, where %d operations line up with kernels\n",
				c.CPUOffsetNs, c.CPUOffsetSamples)
		case c.CPUOffsetSamples > 0:
			fmt.Fprintf(w, "  CPU clock offset Kineto − plugin: %s over %d launches (%s)\n", fmtNs(c.CPUOffsetNs), c.CPUOffsetSamples, applied)
		}
		switch c.GPUOffsetFrom {
		case "kernels":
			placed := "channel times placed with it (too few linked kernels to follow drift)"
			if c.GPUOffsetSamples >= minSlopeSamples {
				placed = fmt.Sprintf("drifting %.3g ppm; channel times placed with a line per block of %d linked kernels", c.GPUDriftPPM, gpuBlock)
			}
			fmt.Fprintf(w, "  GPU clock offset %%globaltimer − Kineto: %d ns (median of %d linked kernels, MAD %s%s), %s\n",
				c.GPUOffsetNs, c.GPUOffsetSamples, fmtNs(c.GPUOffsetMADNs), pluginGPU(c), placed)
		case "plugin":
			fmt.Fprintf(w, "  GPU clock offset %%globaltimer − Unix: %d ns, the plugin's own estimate; channel times placed with it\n", c.GPUOffsetNs)
		}
		if c.ShiftNs != 0 {
			fmt.Fprintf(w, "  shifted by %s to align hosts\n", fmtNs(c.ShiftNs))
		}
	}
	if a := s.Alignment; a != nil && a.Collectives == 0 {
		fmt.Fprintf(w, "alignment on collective ends: no collective's end was seen on two hosts, so no host was shifted\n")
	} else if a != nil {
		fmt.Fprintf(w, "alignment on collective ends over %s: residual spread median %s, p90 %s (before: median %s)\n",
			words.Count(a.Collectives, "collective"), fmtNs(a.ResidualMedianNs), fmtNs(a.ResidualP90Ns), fmtNs(a.BeforeMedianNs))
		hosts := make([]string, 0, len(a.HostShiftNs))
		for h := range a.HostShiftNs {
			hosts = append(hosts, h)
		}
		sort.Strings(hosts)
		for _, h := range hosts {
			fmt.Fprintf(w, "  host %s shifted by %s\n", h, fmtNs(a.HostShiftNs[h]))
		}
	}
	if s.Output != "" {
		fmt.Fprintf(w, "wrote %s\n", s.Output)
	}
}

func writeReasons(w io.Writer, title string, m map[string]int) {
	if len(m) == 0 {
		return
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] || (m[keys[i]] == m[keys[j]] && keys[i] < keys[j]) })
	fmt.Fprintln(w, title)
	for _, k := range keys {
		fmt.Fprintf(w, "    %6d  %s\n", m[k], k)
	}
}

func fmtNs(ns int64) string {
	a := abs(ns)
	switch {
	case a >= 10*ms:
		return fmt.Sprintf("%.3f ms", float64(ns)/1e6)
	case a >= 10*us:
		return fmt.Sprintf("%.1f µs", float64(ns)/1e3)
	}
	return fmt.Sprintf("%d ns", ns)
}

// pluginGPU adds the plugin's own GPU clock estimate, for comparison (same sign).
func pluginGPU(c ClockSummary) string {
	if c.PluginGPUOffset == 0 {
		return ""
	}
	return fmt.Sprintf("; the plugin's own estimate %d ns", c.PluginGPUOffset)
}
