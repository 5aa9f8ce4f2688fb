package main

/*
#include <stdint.h>
#include <string.h>
#include "core.h"
*/
import "C"

import (
	"context"
	"os"
	"sync"
	"time"

	"github.com/ncclprof/ncclprof/internal/aggregate"
	"github.com/ncclprof/ncclprof/internal/event"
	"github.com/ncclprof/ncclprof/internal/telemetry"
)

// metricsSink exports what the drainer aggregates through OpenTelemetry (internal/telemetry,
// docs/metrics.md). Everything here runs on the drainer goroutine except
// ncclprof_metrics_flush, which the Python side may call at exit; none of it runs on NCCL's
// threads. The network is only used by the SDK's own goroutines, except for the bounded final
// export when the last communicator is finalized.
type metricsSink struct {
	d     *drain
	rec   *telemetry.Recorder // nil: metrics off
	warns chan string         // warnings raised on other goroutines, logged by the drainer
	// Step labels (ncclprof_set_step in control.c): the next label number to read, and a buffer.
	stepNext uint64
	stepBuf  [128]C.char
}

// The recorder, for ncclprof_metrics_flush (nil until the first communicator, or when off).
var (
	metricsMu  sync.Mutex
	metricsRec *telemetry.Recorder
)

func newMetricsSink(d *drain) *metricsSink {
	s := &metricsSink{d: d, warns: make(chan string, 16)}
	cfg, problems := telemetry.FromEnv(os.Getenv)
	for _, p := range problems {
		warnf("metrics: %s", p)
	}
	rec, err := telemetry.New(context.Background(), telemetry.Options{
		Config:   cfg,
		Host:     telemetry.ProcessHost(C.GoString(C.ncclprof_version())),
		Warn:     s.queueWarn,
		Counters: counters,
		Drops:    func() (untracked, trace map[string]uint64) { return readDrops().since(dropCounts{}) },
	})
	if err != nil {
		warnf("metrics are off: %v. The job and the other outputs continue; fix the "+
			"configuration (docs/metrics.md) or set NCCLPROF_METRICS=none.", cfg.Redact(err.Error()))
		rec = nil
	}
	s.rec = rec
	// Bytes the trace writer has written: it publishes them for the control API (trace.go);
	// read at collection, from the SDK's goroutine (an atomic load in C).
	rec.SetTraceBytes(func() uint64 {
		var st [C.NP_S_COUNT]C.uint64_t
		C.ncclprof_stats(&st[0], C.int(len(st)))
		return uint64(st[C.NP_S_TRACE_BYTES])
	})
	s.flushWarnings()
	metricsMu.Lock()
	metricsRec = rec
	metricsMu.Unlock()
	return s
}

// queueWarn is the recorder's warning callback: any goroutine, never blocks.
func (s *metricsSink) queueWarn(msg string) {
	select {
	case s.warns <- msg:
	default:
	}
}

func (s *metricsSink) flushWarnings() {
	for {
		select {
		case m := <-s.warns:
			warnf("metrics: %s", m)
		default:
			return
		}
	}
}

// op is the aggregator's OnOp hook.
func (s *metricsSink) op(o *aggregate.Op) { s.rec.RecordOp(o) }

// window picks up step labels before the window's operations complete (OnOp).
func (s *metricsSink) window(aggregate.Comm, []event.Record) {
	if s.rec != nil {
		s.stepLabels()
	}
}

// finalized publishes a communicator's final results; after the last communicator, it exports
// once more (bounded by NCCLPROF_METRICS_FINAL_TIMEOUT_MS) so short jobs lose nothing.
func (s *metricsSink) finalized(r *aggregate.Result) {
	if s.rec == nil {
		return
	}
	s.rec.FinalResult(r)
	if liveComms(r.Comm.Index) == 0 {
		_ = s.rec.FinalFlush() // failures are counted and warned about by the recorder
	}
	s.flushWarnings()
}

// stepLabels passes the step labels set since the last pass, each with the time it was set, so
// operations are labelled by the step they started in. A label set before the first
// communicator (before the hot path's clock was set up) applies from the start.
func (s *metricsSink) stepLabels() {
	n := uint64(C.np_step_count())
	first := event.Ticks(C.np_first_init())
	for ; s.stepNext < n; s.stepNext++ {
		var tick C.uint64_t
		if C.np_step_get(C.uint64_t(s.stepNext), &tick, &s.stepBuf[0], C.int(len(s.stepBuf))) == 0 {
			continue // overwritten in the control API's ring (more than 64 since the last pass)
		}
		at := event.Ticks(tick)
		if at < first {
			at = 0
		}
		s.rec.SetStepLabel(C.GoString(&s.stepBuf[0]), at)
	}
}

// tick runs once per drainer pass: it picks up new step labels, copies rank-pair and channel
// results for export at most every telemetry.SnapshotEvery, publishes export counts for
// ncclprof_stats, and logs queued warnings.
func (s *metricsSink) tick() {
	if s.rec == nil {
		return
	}
	s.stepLabels()
	s.rec.Pass()
	if s.rec.SnapshotDue(time.Now()) {
		s.d.syncAll()
		s.rec.ObserveResults(s.d.agg.Results())
	}
	st := s.rec.Stats()
	C.np_stat_set(C.NP_S_METRICS_EXPORTS, C.uint64_t(st.Exports))
	C.np_stat_set(C.NP_S_METRICS_FAILURES, C.uint64_t(st.ExportFailures))
	s.flushWarnings()
}

// liveComms counts the communicators other than `except` that NCCL has not finished with
// (the PXN communicator, which never ends, excluded).
func liveComms(except uint32) int {
	n := 0
	for i := uint32(0); i < C.NP_MAX_COMMS; i++ {
		var info C.np_comm_info
		if C.np_comm_get(C.uint32_t(i), &info) == 0 {
			break
		}
		if i == C.NP_PXN_COMM || i == except {
			continue
		}
		if info.state == C.NP_COMM_ACTIVE || info.state == C.NP_COMM_FINALIZING {
			n++
		}
	}
	return n
}

// np_go_metrics_flush is ncclprof_metrics_flush (control.c): exports now and waits up to
// timeout_ms. Returns 0 when exported, 1 on failure or timeout, 2 when metrics are off or not
// started.
//
//export np_go_metrics_flush
func np_go_metrics_flush(timeoutMs C.int) C.int {
	metricsMu.Lock()
	rec := metricsRec
	metricsMu.Unlock()
	if rec == nil {
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(timeoutMs)*time.Millisecond)
	defer cancel()
	if err := rec.ForceFlush(ctx); err != nil {
		return 1
	}
	return 0
}
