package main

/*
#include "core.h"
*/
import "C"

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/ncclprof/ncclprof/internal/aggregate"
	"github.com/ncclprof/ncclprof/internal/envnum"
	"github.com/ncclprof/ncclprof/internal/event"
	"github.com/ncclprof/ncclprof/internal/quantile"
)

// Sampled, always-on tracing (NCCLPROF_TRACE_SAMPLE=N). The hot path chooses, at each Coll/P2p
// start, whether the operation is traced in full (np_sample_flags in hot.h): by its seq (P2P:
// the plugin's ordinal) % N == 0, alike on every rank, or because a slow operation triggered the
// next K of its communicator. The choice travels in the record flags (event.Sampled,
// event.Triggered) to its ProxyOps and steps; the sampled trace (a traceSink with a sampler)
// writes those operations whole and nothing of the others. This file is the part that decides:
// which records are written, the trigger, and what the trace says about both.

// sampleConfig is the sampled trace's configuration.
type sampleConfig struct {
	every    uint64 // N: 1 in N operations per communicator
	maxBytes int64  // NCCLPROF_TRACE_MAX_MB: the files kept on disk, in all
	trigger  triggerConfig
}

// triggerConfig: an operation slower than factor × its running p99 (after warmup operations of
// its key) has the next `next` operations of its communicator traced in full.
type triggerConfig struct {
	on     bool
	factor float64
	next   uint32
	warmup uint64
}

const (
	defaultTraceMaxMB = 1024
	defaultTrigger    = "3,100"
	defaultWarmup     = 200
	// runningHalfLife: the trigger's p99 follows the last few thousand operations of a key.
	runningHalfLife = 2048
	// maxTriggerKeys bounds the operation keys the trigger keeps a p99 for (comm, func, algo,
	// proto, nchannels): past it, new keys are not watched (counted in the closing metadata).
	maxTriggerKeys = 4096
)

// readSampleConfig reads NCCLPROF_TRACE_SAMPLE (through the C side, which decides with it),
// NCCLPROF_TRACE_MAX_MB and NCCLPROF_TRACE_TRIGGER. ok is false when sampling is off.
func readSampleConfig() (cfg sampleConfig, ok bool) {
	cfg.every = uint64(C.np_sample_every())
	if cfg.every == 0 {
		if os.Getenv("NCCLPROF_TRACE_TRIGGER") != "" || os.Getenv("NCCLPROF_TRACE_MAX_MB") != "" {
			warnf("NCCLPROF_TRACE_TRIGGER and NCCLPROF_TRACE_MAX_MB apply to the sampled trace, " +
				"which is off: set NCCLPROF_TRACE_SAMPLE=N (1 in N operations) to turn it on")
		}
		return cfg, false
	}
	mb := int64(defaultTraceMaxMB)
	mb, msg := envnum.Int("NCCLPROF_TRACE_MAX_MB", os.Getenv("NCCLPROF_TRACE_MAX_MB"), mb, 1, 1<<24)
	if msg != "" {
		warnf("%s (MiB)", msg)
	}
	cfg.maxBytes = mb << 20
	spec := os.Getenv("NCCLPROF_TRACE_TRIGGER")
	if spec == "" {
		spec = defaultTrigger
	}
	t, err := parseTrigger(spec)
	if err != nil {
		warnf("NCCLPROF_TRACE_TRIGGER=%s: %v; using %s", spec, err, defaultTrigger)
		t, _ = parseTrigger(defaultTrigger)
	}
	cfg.trigger = t
	return cfg, true
}

// parseTrigger reads "factor,K[,warmup]" (e.g. 3,100), or "off".
func parseTrigger(s string) (triggerConfig, error) {
	if s == "off" || s == "0" {
		return triggerConfig{}, nil
	}
	parts := strings.Split(s, ",")
	if len(parts) < 2 || len(parts) > 3 {
		return triggerConfig{}, fmt.Errorf("want factor,K or factor,K,warmup (e.g. 3,100: the next 100 operations after one slower than 3 × its p99), or off")
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(parts[0]), 64)
	if err != nil || !(f > 1) || f > 1e6 {
		return triggerConfig{}, fmt.Errorf("the factor %q is not a number above 1", parts[0])
	}
	k, err := strconv.ParseUint(strings.TrimSpace(parts[1]), 10, 32)
	if err != nil || k < 1 || k > 1<<30 {
		return triggerConfig{}, fmt.Errorf("K %q is not a count of operations ≥ 1", parts[1])
	}
	t := triggerConfig{on: true, factor: f, next: uint32(k), warmup: defaultWarmup}
	if len(parts) == 3 {
		w, err := strconv.ParseUint(strings.TrimSpace(parts[2]), 10, 32)
		if err != nil || w < 100 {
			return triggerConfig{}, fmt.Errorf("the warm-up %q is not a count ≥ 100 (a p99 needs 100 operations)", parts[2])
		}
		t.warmup = w
	}
	return t, nil
}

// header is the trace header's "sampling" member: how operations were chosen.
func (c sampleConfig) header() map[string]any {
	h := map[string]any{"every": c.every, "max_bytes": c.maxBytes,
		"collectives": "seq % every == 0",
		"p2p":         "ordinal % every == 0, the ordinal counted per (communicator, peer, direction) from 0",
		"trigger":     nil}
	if c.trigger.on {
		h["trigger"] = map[string]any{"factor": c.trigger.factor, "next": c.trigger.next,
			"warmup": c.trigger.warmup, "quantile": 0.99,
			"key": "communicator, function, algorithm, protocol, channels"}
	}
	return h
}

// sampleCounts is what the sampled trace did with operations and events (c* indexes).
type sampleCounts [nCounts]uint64

const (
	cTraced     = iota // operations written in full (sampled or triggered)
	cTriggered         // of those, traced because of the trigger
	cAway              // operations sampled away (not written: not drops)
	cSlow              // operations slower than the trigger's threshold (each fired it)
	cSlowKept          // of those, written only because they were slow (completion span)
	cEventsAway        // records not written because their operation was sampled away
	nCounts
)

var countNames = [nCounts]string{"operations_traced", "operations_triggered", "operations_sampled_away",
	"triggers", "trigger_operations_kept", "events_sampled_away"}

func (n *sampleCounts) json() map[string]uint64 {
	m := make(map[string]uint64, nCounts)
	for k, v := range n {
		m[countNames[k]] = v
	}
	return m
}

// verdict is what the sampled trace does with a record.
type verdict uint8

const (
	drop verdict = iota // sampled away
	keep                // written
	hold                // an API event, kept until an operation it leads to is seen
)

// sampler decides which records the sampled trace writes. API events (GroupApi, CollApi,
// P2pApi, KernelLaunch, Group) come before the operation they lead to, whose choice they do
// not carry: they are held (a bounded while) and written when a sampled operation names them,
// so ncclmerge can still link the sampled operations' kernels.
type sampler struct {
	cfg       sampleConfig
	kept      handleRing // sampled Coll/P2p/CeColl handles (their KernelCh and CE parts find them)
	want      handleRing // API events a written operation leads back to
	held      map[uint64]*heldRec
	order     []heldRef
	launches  map[uint64][]uint64 // GroupApi → KernelLaunch handles held
	gen       uint64              // windows seen (held records expire by it)
	trig      map[triggerKey]*quantile.Running
	unwatched uint64       // operations of keys past maxTriggerKeys
	file      sampleCounts // since the file opened
	total     sampleCounts
	free      []*heldRec // held records given back, for reuse (the drainer must not allocate per event)
}

type heldRec struct {
	rec  event.Record
	comm aggregate.Comm
}

type heldRef struct {
	h   uint64
	gen uint64
}

type triggerKey struct {
	comm            uint32
	incarnation     uint64
	fn, algo, proto string
	nchannels       int
}

const (
	maxHeld     = 1 << 14 // API events held at once
	holdWindows = 16      // windows an API event is held for before it is sampled away
	maxKept     = 1 << 16 // operations remembered as sampled (for their KernelCh)
	maxWant     = 1 << 14
)

func newSampler(cfg sampleConfig) *sampler {
	return &sampler{cfg: cfg, kept: newHandleRing(maxKept), want: newHandleRing(maxWant),
		held: map[uint64]*heldRec{}, launches: map[uint64][]uint64{},
		trig: map[triggerKey]*quantile.Running{}}
}

const sampleBits = event.Sampled | event.Triggered

// first classifies a record the first time the trace sees it (finished, or open and to be
// carried to its stop), counting operations traced and sampled away.
func (s *sampler) first(r *event.Record) verdict {
	v := s.classify(r)
	if r.Type == event.Coll || r.Type == event.P2p {
		switch {
		case v != keep:
			s.bump(cAway)
		case r.Flags&event.Sampled == 0:
			s.bump(cTraced)
			s.bump(cTriggered)
		default:
			s.bump(cTraced)
		}
	}
	if v == keep && (r.Type == event.Coll || r.Type == event.P2p || r.Type == event.CeColl) {
		s.kept.add(r.Handle)
	}
	if v == drop {
		s.bump(cEventsAway)
	}
	return v
}

// again classifies a carried record once it stopped: an API event may have become wanted.
func (s *sampler) again(r *event.Record) verdict { return s.classify(r) }

func (s *sampler) classify(r *event.Record) verdict {
	switch r.Type {
	case event.Coll, event.P2p, event.ProxyOp, event.ProxyStep:
		if r.Flags&sampleBits != 0 {
			return keep
		}
	case event.KernelCh, event.CeSync, event.CeBatch:
		if s.kept.has(r.Parent) {
			return keep
		}
	case event.CeColl: // copy-engine collectives: chosen here, by their seq, as the hot path would
		if r.Seq%s.cfg.every == 0 {
			return keep
		}
	case event.GroupAPI, event.CollAPI, event.P2pAPI, event.KernelLaunch, event.Group:
		if s.want.has(r.Handle) || (r.Type == event.KernelLaunch && s.want.has(r.Parent)) {
			return keep
		}
		return hold
	}
	return drop
}

func (s *sampler) bump(k int) {
	s.file[k]++
	s.total[k]++
}

// hold keeps an API event until an operation names it or it expires.
func (s *sampler) hold(c aggregate.Comm, r *event.Record) {
	if _, ok := s.held[r.Handle]; ok {
		return
	}
	hr := &heldRec{}
	if n := len(s.free); n > 0 {
		hr, s.free = s.free[n-1], s.free[:n-1]
	}
	hr.rec, hr.comm = *r, c
	s.held[r.Handle] = hr
	s.order = append(s.order, heldRef{r.Handle, s.gen})
	if r.Type == event.KernelLaunch && event.IsHandle(r.Parent) {
		s.launches[r.Parent] = append(s.launches[r.Parent], r.Handle)
	}
	s.expire()
}

// ancestors returns, parents first, the held API events a sampled operation leads back to
// (its CollApi/P2pApi and Group, their GroupApi and its KernelLaunch), and marks every one of
// them wanted, so those still open or still to come are written when they arrive.
func (s *sampler) ancestors(r *event.Record) []*heldRec {
	var out []*heldRec
	var visit func(h uint64)
	visit = func(h uint64) {
		if !event.IsHandle(h) || s.want.has(h) {
			return
		}
		s.want.add(h)
		hr := s.held[h]
		if hr != nil {
			delete(s.held, h)
			visit(hr.rec.Parent)
			out = append(out, hr)
		}
		for _, lh := range s.launches[h] {
			if l := s.held[lh]; l != nil {
				delete(s.held, lh)
				s.want.add(lh)
				out = append(out, l)
			}
		}
		delete(s.launches, h)
	}
	visit(r.Parent)
	if r.ParentGroup != r.Parent {
		visit(r.ParentGroup)
	}
	return out
}

// release gives a held record back once it is written or expired.
func (s *sampler) release(hr *heldRec) {
	if len(s.free) < maxHeld {
		s.free = append(s.free, hr)
	}
}

// windowDone ends a window: held API events expire after holdWindows windows.
func (s *sampler) windowDone() {
	s.gen++
	s.expire()
}

func (s *sampler) expire() {
	n := 0
	for n < len(s.order) && (s.order[n].gen+holdWindows < s.gen || len(s.held) > maxHeld) {
		h := s.order[n].h
		if hr := s.held[h]; hr != nil {
			delete(s.held, h)
			if hr.rec.Type == event.KernelLaunch {
				delete(s.launches, hr.rec.Parent)
			}
			s.bump(cEventsAway)
			s.release(hr)
		}
		n++
	}
	if n > 0 {
		s.order = append(s.order[:0], s.order[n:]...)
	}
}

// observe feeds a completed operation to the trigger and reports whether it was slow: found
// slow while pending (the aggregator's OnSlow hook, fire, acted then), or slower than factor ×
// its key's running p99 now, once the key has seen warmup operations. Firing has the C side
// trace the communicator's next K operations in full.
func (s *sampler) observe(o *aggregate.Op) bool {
	t := s.cfg.trigger
	if !t.on || !o.HasCompletion || o.Untimed > 0 {
		return false
	}
	q := s.running(o)
	if q == nil {
		return false
	}
	th, warm := s.threshold(q)
	slow := o.Slow || warm && o.CompletionNs > th
	q.Add(o.CompletionNs)
	if slow && !o.Slow {
		s.fire(o)
	}
	return slow
}

// running is the trigger's running quantile of o's key, made on first use (nil past
// maxTriggerKeys keys: that operation is not watched, and counted).
func (s *sampler) running(o *aggregate.Op) *quantile.Running {
	k := triggerKeyOf(o)
	q := s.trig[k]
	if q == nil {
		if len(s.trig) >= maxTriggerKeys {
			s.unwatched++
			return nil
		}
		q = quantile.NewRunning(runningHalfLife)
		s.trig[k] = q
	}
	return q
}

// slowNs is the aggregator's SlowNs hook: the threshold an operation is slow past, from its
// key's p99 when it is read (0 until the key has seen warmup operations). The aggregator then
// reports it (OnSlow: fire) as soon as a child's stop carries its span past it, QuietNs before it
// completes: the K operations traced are the ones right after the slow moment.
func (s *sampler) slowNs(o *aggregate.Op) float64 {
	if q := s.trig[triggerKeyOf(o)]; q != nil {
		if th, warm := s.threshold(q); warm {
			return th
		}
	}
	return 0
}

// threshold is the span past which an operation of q's key is slow, factor × its running p99,
// once the key has seen warmup operations (warm false before): the one rule observe and slowNs
// both apply.
func (s *sampler) threshold(q *quantile.Running) (th float64, warm bool) {
	if q.Seen() < s.cfg.trigger.warmup {
		return 0, false
	}
	return s.cfg.trigger.factor * q.Quantile(0.99), true
}

// triggerKeyOf is the kind of operation the trigger keeps a p99 for.
func triggerKeyOf(o *aggregate.Op) triggerKey {
	return triggerKey{o.Comm.Index, o.Comm.Incarnation, o.Func, o.Algo, o.Proto, o.NChannels}
}

// fire has the C side trace the communicator's next K operations in full.
func (s *sampler) fire(o *aggregate.Op) {
	C.np_trigger(C.uint32_t(o.Comm.Index), C.uint64_t(o.Comm.Incarnation), C.uint32_t(s.cfg.trigger.next))
	s.bump(cSlow)
}

// forgetComm drops the trigger's state of a communicator NCCL destroyed.
func (s *sampler) forgetComm(idx uint32) {
	for k := range s.trig {
		if k.comm == idx {
			delete(s.trig, k)
		}
	}
}

// opMark says why a completed operation is in the sampled trace ("" when it is not):
// "sampled", "triggered", or "trigger" for one written only because it was slow.
func (s *sampler) opMark(o *aggregate.Op, slow bool) string {
	switch {
	case o.Sample&event.Sampled != 0:
		return "sampled"
	case o.Sample&event.Triggered != 0:
		return "triggered"
	case slow:
		s.bump(cSlowKept)
		return "trigger"
	}
	return ""
}

// recordMark is opMark for a Coll/P2p record.
func recordMark(f event.Flags) string {
	if f&event.Sampled != 0 {
		return "sampled"
	}
	return "triggered"
}

// handleRing is a set of handles that remembers the last n added.
type handleRing struct {
	set  map[uint64]struct{}
	ring []uint64
	next int
}

func newHandleRing(n int) handleRing {
	return handleRing{set: make(map[uint64]struct{}, n), ring: make([]uint64, 0, n)}
}

func (r *handleRing) add(h uint64) {
	if _, ok := r.set[h]; ok {
		return
	}
	if len(r.ring) < cap(r.ring) {
		r.ring = append(r.ring, h)
	} else {
		delete(r.set, r.ring[r.next])
		r.ring[r.next] = h
		r.next = (r.next + 1) % len(r.ring)
	}
	r.set[h] = struct{}{}
}

func (r *handleRing) has(h uint64) bool {
	_, ok := r.set[h]
	return ok
}
