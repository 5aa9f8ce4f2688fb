// Package pprofout writes where communication time goes as a pprof profile, so that
// `go tool pprof -http` draws it as a flame graph: each NCCL operation is a sample whose stack is
// rank → communicator → operation (function and size bucket) → channel and peer where the trace
// knows them, with the operation's time, bytes and count as values and its algorithm, protocol
// and step as labels.
package pprofout

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/google/pprof/profile"
	"github.com/ncclprof/ncclprof/internal/commops"
	"github.com/ncclprof/ncclprof/internal/stats"
	"github.com/ncclprof/ncclprof/internal/words"
)

// Value indices of every sample.
const (
	ValueTime = iota
	ValueBytes
	ValueCount
)

// builder interns frames and merges samples with the same stack and labels.
type builder struct {
	p       *profile.Profile
	locs    map[string]*profile.Location
	samples map[string]*profile.Sample
}

// Build makes the profile of s's operations. Its totals are the trace's: the time values add up
// to the operations' times (ns), the bytes to their sizes, the counts to their number. From a
// sampled trace each operation counts for the N it was sampled from (the values are estimates,
// and a comment says so); the operations its trigger added are left out.
func Build(s *commops.Set) *profile.Profile {
	b := &builder{
		p: &profile.Profile{
			SampleType: []*profile.ValueType{
				{Type: "time", Unit: "nanoseconds"}, {Type: "bytes", Unit: "bytes"}, {Type: "operations", Unit: "count"}},
			DefaultSampleType: "time",
			Comments: []string{"NCCL communication time from ncclprof traces (ncclmerge pprof): " +
				"stacks are rank → communicator → operation → channel/peer"},
		},
		locs: map[string]*profile.Location{}, samples: map[string]*profile.Sample{},
	}
	if l := s.Sampling.Label(); l != "" {
		b.p.Comments = append(b.p.Comments, l+": time, bytes and counts are scaled up from the sampled operations (estimates)")
	}
	lo, hi := int64(0), int64(0)
	for i := range s.Ops {
		o := &s.Ops[i]
		w := o.Weight()
		if w == 0 {
			continue
		}
		b.op(s, o, w)
		if lo == 0 || o.Arrive < lo {
			lo = o.Arrive
		}
		hi = max(hi, o.Done, o.Arrive)
	}
	b.p.TimeNanos, b.p.DurationNanos = lo, hi-lo
	b.finish()
	return b.p
}

// op adds one operation: a sample at the operation for its count, and one per leg (channel and
// peer) with an equal share of its time and bytes — exact integer shares, so the totals are kept.
func (b *builder) op(s *commops.Set, o *commops.Op, w int64) {
	p, c := s.Procs[o.Proc], s.Comms[o.Comm]
	stack := []string{
		fmt.Sprintf("rank %d (%s pid %d)", p.Rank, p.Host, p.Pid),
		fmt.Sprintf("%s [%s] rank %d", c.Label(), words.Count(c.NRanks, "rank"), o.Rank),
		fmt.Sprintf("%s %s", o.Func, stats.BucketLabel(stats.Bucket(o.Bytes))),
	}
	labels := map[string][]string{"algo": {dash(o.Algo)}, "proto": {dash(o.Proto)}}
	if o.Step >= 0 {
		labels["step"] = []string{s.Steps[o.Step]}
	}
	if len(o.Legs) == 0 {
		b.add(stack, labels, o.Time*w, int64(o.Bytes)*w, w)
		return
	}
	b.add(stack, labels, 0, 0, w)
	n := int64(len(o.Legs))
	for i, l := range o.Legs {
		leg := fmt.Sprintf("channel %d", l.Channel)
		if l.Peer >= 0 {
			leg += fmt.Sprintf(" → peer %d", l.Peer)
		}
		t, by := share(o.Time*w, n, i), share(int64(o.Bytes)*w, n, i)
		b.add(append(stack[:3:3], leg), labels, t, by, 0)
	}
}

// share is leg i's part of v split n ways, the remainder going to the first legs.
func share(v, n int64, i int) int64 {
	q, r := v/n, v%n
	if int64(i) < r {
		return q + 1
	}
	return q
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// add merges a sample into the one with the same stack (root first) and labels.
func (b *builder) add(stack []string, labels map[string][]string, t, by, n int64) {
	key := strings.Join(stack, "\x00") + "\x01" + labels["algo"][0] + "\x00" + labels["proto"][0] + "\x00" + strings.Join(labels["step"], "")
	if sm := b.samples[key]; sm != nil {
		sm.Value[ValueTime] += t
		sm.Value[ValueBytes] += by
		sm.Value[ValueCount] += n
		return
	}
	locs := make([]*profile.Location, len(stack))
	for i, name := range stack {
		locs[len(stack)-1-i] = b.loc(name) // pprof lists the leaf first
	}
	b.samples[key] = &profile.Sample{Location: locs, Value: []int64{t, by, n}, Label: labels}
}

func (b *builder) loc(name string) *profile.Location {
	if l := b.locs[name]; l != nil {
		return l
	}
	id := uint64(len(b.locs) + 1)
	f := &profile.Function{ID: id, Name: name, SystemName: name}
	l := &profile.Location{ID: id, Line: []profile.Line{{Function: f}}}
	b.p.Function = append(b.p.Function, f)
	b.p.Location = append(b.p.Location, l)
	b.locs[name] = l
	return l
}

// finish lists the samples in a stable order (same input, same file).
func (b *builder) finish() {
	keys := make([]string, 0, len(b.samples))
	for k := range b.samples {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b.p.Sample = append(b.p.Sample, b.samples[k])
	}
}

// Write writes the profile gzip-compressed, as pprof reads it.
func Write(w io.Writer, p *profile.Profile) error {
	if err := p.CheckValid(); err != nil {
		return fmt.Errorf("internal error: invalid profile: %w", err)
	}
	return p.Write(w)
}

// Totals adds up the values of a profile's samples.
func Totals(p *profile.Profile) (timeNs, bytes, count int64) {
	for _, s := range p.Sample {
		timeNs += s.Value[ValueTime]
		bytes += s.Value[ValueBytes]
		count += s.Value[ValueCount]
	}
	return
}
