/*
 * clock.c — which counter the hot path reads, and its rate and samples for the drainer. One section
 * of the C library's core; state.h declares what the sections share.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <strings.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "state.h"
#include "ticks.h"

static int np_tsc_invariant(void) {
#if defined(__x86_64__)
  unsigned a, b, c, d;
  if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u) return 0;
  __get_cpuid(0x80000007u, &a, &b, &c, &d);
  return (d >> 8) & 1;
#else
  return 0;
#endif
}

void np_pick_clock(void) {
  const char* want = getenv("NCCLPROF_CLOCK");
  int force_mono = want && strcasecmp(want, "monotonic") == 0;
#if defined(__x86_64__)
  if (!force_mono && (np_tsc_invariant() || (want && strcasecmp(want, "tsc") == 0))) {
    np_clock = NP_CLOCK_TSC;
    return;
  }
  if (!force_mono)
    np_log(NPABI_LOG_INFO, "TSC is not invariant on this CPU; timestamps use CLOCK_MONOTONIC");
#elif defined(__aarch64__)
  if (!force_mono) {
    np_clock = NP_CLOCK_CNTVCT;
    return;
  }
#endif
  np_clock = NP_CLOCK_MONO;
}

uint64_t np_now(void) { return np_ticks(); }
uint64_t np_first_init(void) { return np_setup_tick; }
int np_clock_kind(void) { return np_clock; }

uint64_t np_clock_nominal_hz(void) {
#if defined(__aarch64__)
  if (np_clock == NP_CLOCK_CNTVCT) {
    uint64_t f;
    __asm__ __volatile__("mrs %0, cntfrq_el0" : "=r"(f));
    return f;
  }
#endif
  return np_clock == NP_CLOCK_MONO ? 1000000000ull : 0;
}

void np_clock_sample(uint64_t* before, uint64_t* mono_raw_ns, uint64_t* real_ns, uint64_t* after) {
  struct timespec m, r;
  *before = np_ticks();
  clock_gettime(CLOCK_MONOTONIC_RAW, &m);
  clock_gettime(CLOCK_REALTIME, &r);
  *after = np_ticks();
  *mono_raw_ns = (uint64_t)m.tv_sec * 1000000000ull + (uint64_t)m.tv_nsec;
  *real_ns = (uint64_t)r.tv_sec * 1000000000ull + (uint64_t)r.tv_nsec;
}

void np_set_tick_rate(double ticks_per_ns) {
  if (ticks_per_ns > 0) np_ticks_per_ns = ticks_per_ns;
}
