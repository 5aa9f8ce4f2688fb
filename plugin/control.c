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
