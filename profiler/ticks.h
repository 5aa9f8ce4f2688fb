/*
 * ticks.h — the hot path's clock (np_ticks: TSC, the aarch64 virtual counter, or
 * CLOCK_MONOTONIC ns, chosen once by clock.c) and the conventions every inline hot function
 * follows. Files that read the clock without running the hot path include this, not hot.h.
 */
#ifndef NCCLPROF_TICKS_H
#define NCCLPROF_TICKS_H

#include <time.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "state.h"

/* The hot path is written as small functions for reading; each callback must still compile to
 * one flat function (calls cost register saves and argument marshalling per event). */
#define NP_HOT static inline __attribute__((always_inline))
#define NP_LIKELY(x) __builtin_expect(!!(x), 1)
#define NP_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* The hot path's clock: TSC, the aarch64 virtual counter, or CLOCK_MONOTONIC ns. */
NP_HOT uint64_t np_ticks(void) {
#if defined(__x86_64__)
  if (NP_LIKELY(np_clock == NP_CLOCK_TSC)) return __rdtsc();
#elif defined(__aarch64__)
  if (NP_LIKELY(np_clock == NP_CLOCK_CNTVCT)) {
    uint64_t v;
    __asm__ __volatile__("mrs %0, cntvct_el0" : "=r"(v));
    return v;
  }
#endif
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif /* NCCLPROF_TICKS_H */
