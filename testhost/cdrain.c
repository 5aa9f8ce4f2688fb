/*
 * cdrain.c — for the sanitizer builds only: the C core is linked without Go (AddressSanitizer
 * and ThreadSanitizer cannot share a process with a Go c-shared runtime), so this thread plays
 * the Go drainer's part of the window protocol: poll, export, release, acknowledge finalize
 * and flush. It checks what it reads, so the fuzzer also exercises export on every window.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../plugin/chain.h"
#include "../plugin/core.h"

static double calibrate(void) {
  uint64_t b0, m0, r0, a0, b1, m1, r1, a1;
  np_clock_sample(&b0, &m0, &r0, &a0);
  struct timespec ts = {0, 20000000};
  nanosleep(&ts, NULL);
  np_clock_sample(&b1, &m1, &r1, &a1);
  return (double)(b1 - b0) / (double)(m1 - m0);
}

static void* cdrain_main(void* arg) {
  (void)arg;
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
      if (info.state == NP_COMM_FINALIZING && info.open_windows == 0) np_comm_drained(i);
    }
    np_chain_report();
    if (req) np_flush_done(req);
  }
  return NULL;
}

__attribute__((constructor)) static void cdrain_start(void) {
  pthread_t t;
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  pthread_create(&t, &a, cdrain_main, NULL);
  pthread_attr_destroy(&a);
}
