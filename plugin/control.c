/*
 * control.c — the plugin's control API, exported for Python (ctypes) and the test host.
 *
 * These are plain C functions so they work from any thread at any time: before NCCL has loaded
 * the library, before the Go runtime has started, and while NCCL's callbacks run. Requests that
 * need the drainer (flush) are posted as counters it picks up; nothing here calls into Go.
 */
#define _GNU_SOURCE
#include <string.h>
#include <time.h>

#include "hot.h"

#define NP_API __attribute__((visibility("default")))

int np_set_mask(uint32_t mask);
uint32_t np_get_mask(void);

static uint64_t np_flush_req, np_flush_ack;

/* Version of the plugin. */
NP_API const char* ncclprof_version(void) { return NCCLPROF_VERSION; }

/* Changes the activation mask NCCL reads per operation (and what the plugin records).
 * Returns the previous mask. Before NCCL's first init the new mask applies from that init. */
NP_API int ncclprof_set_event_mask(int mask) {
  int prev = (int)np_get_mask();
  np_set_mask((uint32_t)mask);
  return prev;
}

NP_API int ncclprof_get_event_mask(void) { return (int)np_get_mask(); }

/* Copies up to n process-wide counters (order: NP_C_* in core.h); returns how many exist. */
NP_API int ncclprof_counters(uint64_t* out, int n) {
  uint64_t all[NP_C_COUNT];
  np_counters_read(all);
  for (int i = 0; i < n && i < NP_C_COUNT; i++) out[i] = all[i];
  return NP_C_COUNT;
}

/* Processes everything recorded so far (seals every window). Waits up to timeout_ms for the
 * drainer; returns 0 when done, 1 on timeout, 2 when nothing was ever initialized. */
NP_API int ncclprof_flush(int timeout_ms) {
  if (np_cfg.nslots == 0) return 2;
  uint64_t want = __atomic_add_fetch(&np_flush_req, 1, __ATOMIC_ACQ_REL);
  np_kick();
  for (int waited = 0; waited <= timeout_ms; waited++) {
    if (__atomic_load_n(&np_flush_ack, __ATOMIC_ACQUIRE) >= want) return 0;
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  return 1;
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
static uint64_t np_trace_seq;
static int np_trace_on;
static char np_trace_dir[1024];
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

/* Starts a trace window: events processed from now on go to a new trace file in dir (NULL or
 * "": NCCLPROF_TRACE_DIR, else NCCLPROF_OUTPUT_DIR). Returns 0. */
NP_API int ncclprof_trace_start(const char* dir) {
  np_ctl_acquire();
  np_copy_str(np_trace_dir, sizeof np_trace_dir, dir);
  np_trace_on = 1;
  __atomic_add_fetch(&np_trace_seq, 1, __ATOMIC_RELEASE);
  np_ctl_release();
  np_kick();
  return 0;
}

/* Ends the trace window: the file is completed and closed. Returns 0. */
NP_API int ncclprof_trace_stop(void) {
  np_ctl_acquire();
  np_trace_on = 0;
  __atomic_add_fetch(&np_trace_seq, 1, __ATOMIC_RELEASE);
  np_ctl_release();
  np_kick();
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

/* Copies up to n of the drainer's statistics (order: NP_S_* in core.h); returns how many exist. */
NP_API int ncclprof_stats(uint64_t* out, int n) {
  for (int i = 0; i < n && i < NP_S_COUNT; i++) out[i] = __atomic_load_n(&np_stats[i], __ATOMIC_RELAXED);
  return NP_S_COUNT;
}

/* Drainer side. */
uint64_t np_trace_poll(int* on, char* dir, int cap) {
  np_ctl_acquire();
  uint64_t seq = np_trace_seq;
  *on = np_trace_on;
  np_copy_str(dir, (size_t)cap, np_trace_dir);
  np_ctl_release();
  return seq;
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
