//go:build ncclprof_front

/*
 * control.c — the plugin's control API, exported for Python (ctypes) and the test host.
 *
 * These are plain C functions so they work from any thread at any time: before NCCL has loaded
 * the library, before (or without) the Go drainer, and while NCCL's callbacks run. Requests that
 * need the drainer (flush) are posted as counters it picks up; the one call into Go (the
 * metrics flush) goes through the pointer the Go side registered when it started.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hot.h"

#define NP_API __attribute__((visibility("default")))

static uint64_t np_flush_req, np_flush_ack;

/* A forked child (a DataLoader worker) of a process whose drainer had started has a copy of the
 * plugin's memory but no drainer, and a Go runtime that must not be entered: calls that wait
 * for the drainer or enter Go return at once there (NP_IN_CHILD). */
static int np_in_child(void) {
  int owner = np_drain_owner();
  return owner != 0 && owner != (int)getpid();
}
#define NP_IN_CHILD 3

/* Version of the plugin. */
NP_API const char* ncclprof_version(void) { return NCCLPROF_VERSION; }

/* 1 once NCCL has created a communicator in this process (the plugin's first init ran): the
 * settings are read then, so from then on NCCLPROF_* and OTEL_* variables are fixed. Loading
 * the library and the other control calls before it fix nothing. */
NP_API int ncclprof_started(void) { return np_first_init() != 0; }

/* Present in builds whose Go side takes NCCLPROF_* and OTEL_* variables as they are when the
 * first communicator starts the plugin (plugin/env.go), not as the process started: the
 * Python package checks for it before promising that settings made from Python are seen. */
NP_API const int ncclprof_reads_live_env = 1;

/* The Go side's metrics flush (plugin/metrics.go), registered when the drainer starts; never
 * set in the C-only sanitizer builds. */
static np_go_flush_fn np_go_metrics_flush;

void np_set_go_hooks(np_go_flush_fn metrics_flush) {
  __atomic_store_n(&np_go_metrics_flush, metrics_flush, __ATOMIC_RELEASE);
}

/* Exports the metrics now and waits up to timeout_ms, for programs that exit without
 * destroying their communicators (call it at exit, never from NCCL's threads). Returns 0 when
 * exported, 1 on failure or timeout, 2 when metrics are off or not started, 3 in a forked
 * child. */
NP_API int ncclprof_metrics_flush(int timeout_ms) {
  if (np_in_child()) return NP_IN_CHILD;
  np_go_flush_fn f = __atomic_load_n(&np_go_metrics_flush, __ATOMIC_ACQUIRE);
  return f ? f(timeout_ms) : 2;
}

/* Changes the activation mask NCCL reads per operation (and what the plugin records).
 * Returns the previous mask. Before NCCL's first init the new mask applies from that init. */
NP_API int ncclprof_set_event_mask(int mask) {
  int prev = (int)np_get_mask();
  np_set_mask((uint32_t)mask);
  return prev;
}

NP_API int ncclprof_get_event_mask(void) { return (int)np_get_mask(); }

/* The one list of counter and statistic names: the trace's and the summary's health sections,
 * the metrics and Python's counters()/stats() all take their names from here. Designated
 * initializers tie each name to its enum value, so the order cannot slip; a counter added to the
 * enum without a name here reads as NULL, which TestCounterNames (internal/hosttest) fails. */
static const char* const np_counter_names[NP_C_COUNT] = {
    [NP_C_EVENTS] = "events",
    [NP_C_DROPPED_FULL] = "dropped_windows_full",
    [NP_C_DROPPED_THREADS] = "dropped_too_many_threads",
    [NP_C_NULL_HANDLE] = "null_handle",
    [NP_C_STALE_HANDLE] = "stale_handle",
    [NP_C_BAD_HANDLE] = "bad_handle",
    [NP_C_NULL_DESCR] = "null_descriptor",
    [NP_C_UNKNOWN_TYPE] = "unknown_type",
    [NP_C_UNKNOWN_STATE] = "unknown_state",
    [NP_C_STOP_TWICE] = "stop_twice",
    [NP_C_AFTER_STOP] = "state_after_stop",
    [NP_C_FOREIGN_EVENT] = "foreign_pxn_events",
    [NP_C_FOREIGN_CONTEXT] = "foreign_context",
    [NP_C_LATE] = "late_records",
    [NP_C_QUIESCE_TIMEOUT] = "quiesce_timeouts",
    [NP_C_INIT_DISABLED] = "init_disabled",
    [NP_C_NULL_FINALIZE] = "null_finalize",
    [NP_C_WINDOWS_SEALED] = "windows_processed",
    [NP_C_SEALED_AT_MAX_GRACE] = "sealed_at_max_grace",
    [NP_C_DROPPED_DETAIL] = "dropped_detail",
    [NP_C_ARENA_FULL] = "arena_full",
    [NP_C_XFER_UNKEYED] = "transfers_unkeyed",
    [NP_C_LOST_OPS] = "lost_operations",
    [NP_C_LOST_UNKEYED] = "lost_operations_unkeyed",
    [NP_C_ORPHAN_STEPS] = "orphan_steps",
    [NP_C_STALE_CONTEXT] = "stale_context",
    [NP_C_STALE_FINALIZE] = "stale_finalize",
    [NP_C_AFTER_FINALIZE] = "after_finalize",
    [NP_C_OPS_RETIRED] = "proxyops_retired",
    [NP_C_OPS_RETIRED_OLD] = "proxyops_retired_old",
    [NP_C_STEP_RESTARTS] = "step_restarts",
};
static const char* const np_stat_names[NP_S_COUNT] = {
    [NP_S_TRACE_FILES] = "trace_files",
    [NP_S_TRACE_EVENTS] = "trace_events",
    [NP_S_TRACE_BYTES] = "trace_bytes",
    [NP_S_TRACE_ERRORS] = "trace_errors",
    [NP_S_TRACE_SKIPPED] = "trace_skipped",
    [NP_S_SUMMARIES] = "summaries",
    [NP_S_METRICS_EXPORTS] = "metrics_exports",
    [NP_S_METRICS_FAILURES] = "metrics_failures",
    [NP_S_OPS_COMPLETED] = "ops_completed",
    [NP_S_GOROUTINES] = "goroutines",
    [NP_S_GO_HEAP] = "go_heap_bytes",
    [NP_S_DRAIN_CPU_NS] = "drain_cpu_ns",
    [NP_S_DRAIN_RECORDS] = "drain_records",
    [NP_S_MEM_DEGRADED] = "memory_degraded",
    [NP_S_SAMPLED_FILES] = "sampled_files",
    [NP_S_SAMPLED_DELETED] = "sampled_files_deleted",
    [NP_S_SAMPLED_BYTES] = "sampled_bytes",
    [NP_S_SAMPLED_OPS] = "sampled_operations",
    [NP_S_SAMPLED_AWAY] = "sampled_away",
    [NP_S_SAMPLED_TRIGGERS] = "sampled_triggers",
};

NP_API const char* ncclprof_counter_name(int i) { return i >= 0 && i < NP_C_COUNT ? np_counter_names[i] : NULL; }
NP_API const char* ncclprof_stat_name(int i) { return i >= 0 && i < NP_S_COUNT ? np_stat_names[i] : NULL; }

/* Copies up to n process-wide counters (order: NP_C_* in core.h); returns how many exist. */
NP_API int ncclprof_counters(uint64_t* out, int n) {
  uint64_t all[NP_C_COUNT];
  np_counters_read(all);
  for (int i = 0; i < n && i < NP_C_COUNT; i++) out[i] = all[i];
  return NP_C_COUNT;
}

static int np_flushed(void* want) {
  return __atomic_load_n(&np_flush_ack, __ATOMIC_ACQUIRE) >= *(uint64_t*)want || !np_drain_live();
}

/* Processes everything recorded so far (seals every window). Waits up to timeout_ms for the
 * drainer; returns 0 when done, 1 on timeout, 2 when no drainer runs (nothing was initialized,
 * or the plugin turned itself off), 3 in a forked child. */
NP_API int ncclprof_flush(int timeout_ms) {
  if (np_in_child()) return NP_IN_CHILD;
  if (np_cfg.nslots == 0 || !np_drain_live()) return 2;
  uint64_t want = __atomic_add_fetch(&np_flush_req, 1, __ATOMIC_ACQ_REL);
  np_kick();
  if (!np_wait_until(np_flushed, &want, (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms) * 1000000ull))
    return 1;
  return np_drain_live() ? 0 : 2;
}

/* Writes this process's hang dump (ncclprof-hang-<host>-<pid>.json in NCCLPROF_OUTPUT_DIR: what
 * is in flight inside NCCL now, docs/hang.md) at once, e.g. from a PyTorch timeout handler before
 * the process is torn down. Waits up to 10 s for the drainer. Returns 0 when written, 1 when the
 * drainer did not answer in time, 2 when no drainer runs (no communicator yet, or the plugin
 * turned itself off), 3 in a forked child, 4 when the dump could not be written (the reason:
 * ncclprof_dump_error()). */
static uint64_t np_dump_req, np_dump_ack, np_dump_status;
static char np_dump_why[512]; /* written before the acknowledgement that publishes it */
static int np_dumped(void* want) {
  return __atomic_load_n(&np_dump_ack, __ATOMIC_ACQUIRE) >= *(uint64_t*)want || !np_drain_live();
}
NP_API int ncclprof_dump_inflight(void) {
  if (np_in_child()) return NP_IN_CHILD;
  if (np_cfg.nslots == 0 || !np_drain_live()) return 2;
  uint64_t want = __atomic_add_fetch(&np_dump_req, 1, __ATOMIC_ACQ_REL);
  np_kick();
  if (!np_wait_until(np_dumped, &want, 10000 * 1000000ull) || !np_drain_live()) return 1;
  return __atomic_load_n(&np_dump_status, __ATOMIC_ACQUIRE) ? 4 : 0;
}

/* Why the last dump request failed (return value 4 of ncclprof_dump_inflight); "" if none did. */
NP_API const char* ncclprof_dump_error(void) {
  return __atomic_load_n(&np_dump_status, __ATOMIC_ACQUIRE) ? np_dump_why : "";
}

/* Drainer side: the dump request to serve (0 if none), and its acknowledgement with status. */
uint64_t np_dump_pending(void) {
  uint64_t r = __atomic_load_n(&np_dump_req, __ATOMIC_ACQUIRE);
  return r > __atomic_load_n(&np_dump_ack, __ATOMIC_ACQUIRE) ? r : 0;
}
void np_dump_failed(uint64_t req, const char* why) {
  (void)req;
  snprintf(np_dump_why, sizeof np_dump_why, "%s", why ? why : "");
}
void np_dump_done(uint64_t req, int failed) {
  __atomic_store_n(&np_dump_status, (uint64_t)failed, __ATOMIC_RELEASE);
  __atomic_store_n(&np_dump_ack, req, __ATOMIC_RELEASE);
}

/* Drainer side: the flush request to serve (0 if none), and its acknowledgement. */
uint64_t np_flush_pending(void) {
  uint64_t r = __atomic_load_n(&np_flush_req, __ATOMIC_ACQUIRE);
  return r > __atomic_load_n(&np_flush_ack, __ATOMIC_ACQUIRE) ? r : 0;
}
void np_flush_done(uint64_t req) { __atomic_store_n(&np_flush_ack, req, __ATOMIC_RELEASE); }

/* ------------------------------------------------------------------- trace window, step label */

/* Strings handed over from any thread: writers take a tiny spin lock (control calls only, never
 * NCCL's threads) and bump a sequence number the drainer compares. */
static int np_ctl_lock;
/* Trace window requests (start/stop), each with the time of the call: a ring the drainer
 * empties in order, so a start and a stop made between two of its passes are both applied. */
#define NP_TRACE_REQS 8
static uint64_t np_trace_seq; /* requests ever made */
static struct {
  uint64_t tick; /* np_now() of the call: where the window begins or ends */
  int on;
  char dir[1024];
} np_trace_reqs[NP_TRACE_REQS];
/* Step labels, each with the time it was set: a ring the drainer empties. */
#define NP_STEPS 64
static uint64_t np_step_seq; /* labels ever set */
static struct {
  uint64_t tick;
  char label[120];
} np_steps[NP_STEPS];
static uint64_t np_stats[NP_S_COUNT];

static void np_ctl_acquire(void) {
  while (__atomic_exchange_n(&np_ctl_lock, 1, __ATOMIC_ACQUIRE)) {
  }
}
static void np_ctl_release(void) { __atomic_store_n(&np_ctl_lock, 0, __ATOMIC_RELEASE); }

static void np_copy_str(char* dst, size_t cap, const char* src) {
  size_t n = src ? strnlen(src, cap - 1) : 0;
  if (n) memcpy(dst, src, n);
  dst[n] = 0;
}

static void np_trace_request(int on, const char* dir) {
  /* Detail (whole ProxySteps, NetPlugin, ProxyCtrl) is recorded from this call on; the drainer
   * turns it off once it has applied a stop (steps that started before it still belong). */
  if (on) np_set_detail(1);
  uint64_t now = np_now();
  np_ctl_acquire();
  uint64_t i = np_trace_seq % NP_TRACE_REQS;
  np_trace_reqs[i].tick = now;
  np_trace_reqs[i].on = on;
  np_copy_str(np_trace_reqs[i].dir, sizeof np_trace_reqs[i].dir, dir);
  __atomic_add_fetch(&np_trace_seq, 1, __ATOMIC_RELEASE);
  np_ctl_release();
  np_kick();
}

/* Starts a trace window: events that start from this call on go to a new trace file in dir
 * (NULL or "": NCCLPROF_TRACE_DIR, else NCCLPROF_OUTPUT_DIR). Returns 0. */
NP_API int ncclprof_trace_start(const char* dir) {
  np_trace_request(1, dir);
  return 0;
}

/* Ends the trace window at this call: the file gets the events that started before it and
 * finish, and is completed and closed. Returns 0. */
NP_API int ncclprof_trace_stop(void) {
  np_trace_request(0, NULL);
  return 0;
}

/* Names the current training step (e.g. "step 12"): it goes into the trace as an instant
 * event and into the metrics as an attribute. NULL or "" clears it. */
NP_API int ncclprof_set_step(const char* label) {
  uint64_t now = np_now();
  np_ctl_acquire();
  uint64_t i = np_step_seq % NP_STEPS;
  np_steps[i].tick = now;
  np_copy_str(np_steps[i].label, sizeof np_steps[i].label, label);
  __atomic_add_fetch(&np_step_seq, 1, __ATOMIC_RELEASE);
  np_ctl_release();
  return 0;
}

/* Events dropped, per type (order: NP_T_* in core.h, up to n of each): untracked (their
 * figures are missing) and trace detail the trace could not get. Returns how many types exist. */
NP_API int ncclprof_dropped(uint64_t* untracked, uint64_t* trace, int n) {
  uint64_t u[NP_T_COUNT], t[NP_T_COUNT];
  np_dropped_read(u, t);
  for (int i = 0; i < n && i < NP_T_COUNT; i++) {
    if (untracked) untracked[i] = u[i];
    if (trace) trace[i] = t[i];
  }
  return NP_T_COUNT;
}

/* Copies up to n of the drainer's statistics (order: NP_S_* in core.h); returns how many exist. */
NP_API int ncclprof_stats(uint64_t* out, int n) {
  for (int i = 0; i < n && i < NP_S_COUNT; i++) out[i] = __atomic_load_n(&np_stats[i], __ATOMIC_RELAXED);
  return NP_S_COUNT;
}

/* Drainer side. */
uint64_t np_trace_count(void) { return __atomic_load_n(&np_trace_seq, __ATOMIC_ACQUIRE); }

/* Request number `seq` (0-based); returns 0 if it is no longer in the ring or not made yet. */
int np_trace_get(uint64_t seq, int* on, uint64_t* tick, char* dir, int cap) {
  np_ctl_acquire();
  int ok = seq < np_trace_seq && np_trace_seq - seq <= NP_TRACE_REQS;
  if (ok) {
    *on = np_trace_reqs[seq % NP_TRACE_REQS].on;
    *tick = np_trace_reqs[seq % NP_TRACE_REQS].tick;
    np_copy_str(dir, (size_t)cap, np_trace_reqs[seq % NP_TRACE_REQS].dir);
  }
  np_ctl_release();
  return ok;
}

/* Label number `seq` (0-based) and when it was set; returns 0 if it is no longer in the ring
 * (more than NP_STEPS labels since) or not set yet. */
int np_step_get(uint64_t seq, uint64_t* tick, char* label, int cap) {
  np_ctl_acquire();
  int ok = seq < np_step_seq && np_step_seq - seq <= NP_STEPS;
  if (ok) {
    *tick = np_steps[seq % NP_STEPS].tick;
    np_copy_str(label, (size_t)cap, np_steps[seq % NP_STEPS].label);
  }
  np_ctl_release();
  return ok;
}

uint64_t np_step_count(void) { return __atomic_load_n(&np_step_seq, __ATOMIC_ACQUIRE); }

void np_stat_set(int i, uint64_t v) {
  if (i >= 0 && i < NP_S_COUNT) __atomic_store_n(&np_stats[i], v, __ATOMIC_RELAXED);
}
