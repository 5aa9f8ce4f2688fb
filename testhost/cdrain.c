/*
 * cdrain.c — for the sanitizer builds only: the C core is linked without Go (AddressSanitizer
 * and ThreadSanitizer cannot share a process with a Go c-shared runtime), so this thread plays
 * the Go drainer's part of the window protocol: poll, export, release, acknowledge finalize
 * and flush. It checks what it reads, so the fuzzer also exercises export on every window.
 * The loader (profiler/loader.c) starts it as it would load the Go library: at the first
 * communicator, after the same resource checks, on the same short-lived thread.
 *
 * NCCLPROF_CDRAIN_HOLD_MS=N (tests only): acknowledge no finalize for N ms after it was asked,
 * a drainer that is slow to finish (a stalled disk or network export in the real one).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../profiler/chain.h"
#include "../profiler/core.h"

static double calibrate(void) {
  uint64_t b0, m0, r0, a0, b1, m1, r1, a1;
  np_clock_sample(&b0, &m0, &r0, &a0);
  struct timespec ts = {0, 20000000};
  nanosleep(&ts, NULL);
  np_clock_sample(&b1, &m1, &r1, &a1);
  return (double)(b1 - b0) / (double)(m1 - m0);
}

/* When the communicators being finalized may be acknowledged (NCCLPROF_CDRAIN_HOLD_MS). */
static uint64_t hold_ns, fin_seen_ns[NP_MAX_COMMS];

static int cdrain_may_ack(uint32_t i) {
  if (hold_ns == 0) return 1;
  uint64_t now = np_mono_ns();
  if (fin_seen_ns[i] == 0) fin_seen_ns[i] = now;
  if (now - fin_seen_ns[i] < hold_ns) return 0;
  fin_seen_ns[i] = 0;
  return 1;
}

static void* cdrain_main(void* arg) {
  (void)arg;
  const char* hold = getenv("NCCLPROF_CDRAIN_HOLD_MS");
  hold_ns = hold ? strtoull(hold, NULL, 10) * 1000000ull : 0;
  np_wait(-1);
  np_set_tick_rate(calibrate());
  size_t cap = np_cfg.nslots;
  np_record* recs = malloc(cap * sizeof *recs);
  np_ready ready[64];
  for (;;) {
    np_wait(5);
    uint64_t req = np_flush_pending();
    int n;
    do {
      n = np_poll(ready, 64, req != 0, 3);
      for (int i = 0; i < n; i++) {
        int m = np_export(&ready[i], recs, (int)cap);
        for (int k = 0; k < m; k++)
          if (recs[k].type == 0 || recs[k].type >= NP_T_COUNT || !(recs[k].handle & 1)) {
            fprintf(stderr, "cdrain: bad record type %d handle %llx\n", recs[k].type,
                    (unsigned long long)recs[k].handle);
            abort();
          }
        np_release(&ready[i]);
      }
    } while (n == 64);
    for (uint32_t i = 1; i < NP_MAX_COMMS; i++) {
      np_comm_info info;
      if (!np_comm_get(i, &info)) break;
      if (info.state == NP_COMM_FINALIZING && info.open_windows == 0 && cdrain_may_ack(i))
        np_comm_drained(i);
    }
    np_chain_report();
    if (req) np_flush_done(req);
  }
  return NULL;
}

/* What profiler/loader.c calls in place of the Go library's np_drain_start. */
int np_builtin_drain_start(const np_drain_api* api, int64_t budget) {
  (void)budget;
  if (api->version != NP_DRAIN_API_VERSION || api->size != sizeof *api) return 1;
  pthread_t t;
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  int err = pthread_create(&t, &a, cdrain_main, NULL);
  pthread_attr_destroy(&a);
  return err;
}
