/*
 * empty.c — a profiler plugin that does nothing: the floor the benchmark measures ncclprof
 * against. Every callback writes a non-NULL handle (so NCCL keeps emitting children) and
 * returns. It asks for every event type, or for NCCLPROF_EMPTY_MASK's (a number): beside real
 * NCCL (tools/nccl/record/overhead.sh) the floor must ask for what ncclprof asks for, since
 * NCCL's own work per event type is part of what both pay.
 */
#include <stdlib.h>

#include "../profiler/abi.h"

static npabi_result_t e_init1(void** ctx, int* mask) {
  const char* m = getenv("NCCLPROF_EMPTY_MASK");
  *ctx = (void*)1;
  *mask = m && *m ? (int)strtol(m, NULL, 0) : NPABI_ALL_TYPES;
  return NPABI_SUCCESS;
}
static npabi_result_t e_init4(void** ctx, int* mask, const char* n, uint64_t h, int nn, int nr,
                              int r, npabi_logger_t l) {
  return e_init1(ctx, mask);
}
static npabi_result_t e_init5(void** ctx, uint64_t id, int* mask, const char* n, int nn, int nr,
                              int r, npabi_logger_t l) {
  return e_init1(ctx, mask);
}
static npabi_result_t e_start(void* ctx, void** h, void* d) {
  *h = (void*)1;
  return NPABI_SUCCESS;
}
static npabi_result_t e_stop(void* h) { return NPABI_SUCCESS; }
static npabi_result_t e_record(void* h, npabi_state_t s, void* a) { return NPABI_SUCCESS; }
static npabi_result_t e_finalize(void* ctx) { return NPABI_SUCCESS; }

#define E_TABLE(N, INIT)                                                                       \
  __attribute__((visibility("default"))) npabi_profiler_v##N##_t ncclProfiler_v##N = {         \
      "empty", INIT, (void*)e_start, e_stop, (void*)e_record, e_finalize};
E_TABLE(1, e_init1)
E_TABLE(2, e_init1)
E_TABLE(3, e_init1)
E_TABLE(4, e_init4)
E_TABLE(5, e_init5)
E_TABLE(6, e_init5)
