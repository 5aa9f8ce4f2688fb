/*
 * recorder.c — a profiler plugin that writes every call it gets to a file, one line each (the
 * format of calllog.c), for the tests of NCCLPROF_CHAIN: chained behind ncclprof, its log must
 * hold exactly what the test host (NCCL) sent, translated to its own contexts and handles.
 *
 * Environment:
 *   NCCLPROF_RECORDER_LOG   the file to append to (nothing is written without it)
 *   NCCLPROF_RECORDER_MASK  the activation mask its init writes (default: every type)
 *   NCCLPROF_RECORDER_FAIL  init | start | stop | record | finalize: that call returns
 *                           ncclInternalError (once, the first time)
 *   NCCLPROF_RECORDER_NULL_CTX=1  init succeeds with a NULL context
 *   NCCLPROF_RECORDER_CLOCK=1  each line also says when (`@<ns>` of CLOCK_MONOTONIC after the
 *                           thread), for logs of real NCCL that a replay paces by
 *   NCCLPROF_RECORDER_STRICT=1  behaves like a plugin that frees a context in finalize: any
 *                           call naming a finalized context, or an event handle of one, aborts
 *                           the process with a message (a real plugin would read freed memory)
 * Build flags: -DREC_ONLY=N exports only ncclProfiler_vN (default: v1 … v6); -DREC_BAD_TABLE=K
 * exports a broken v6 table: K=1 its startEvent is NULL, K=2 its startEvent points into the
 * library's data, K=3 its init is libc's _exit (each must be refused before it is called).
 *
 * Its contexts and handles are addresses inside two static arrays, so the log names them by
 * number (C<k>, R<n>) and prints any other pointer (a foreign one, a parent it never issued)
 * as hex, without dereferencing anything.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../profiler/abi.h"
#include "calllog.h"

#define REC_HANDLES (1 << 24)
static char rec_handles[REC_HANDLES]; /* never touched: the addresses are the handles */
static char rec_ctxs[4096];
static unsigned long long rec_next_handle, rec_next_ctx;
static pthread_mutex_t rec_mu = PTHREAD_MUTEX_INITIALIZER;
static FILE* rec_log;
static int rec_mask = NPABI_ALL_TYPES, rec_null_ctx, rec_strict, rec_clock, rec_setup_done;
/* Strict mode: whether each context is live, and the context of each handle issued. */
static unsigned char rec_live[sizeof rec_ctxs];
static uint16_t rec_hctx[REC_HANDLES];
#define REC_FOREIGN 0xFFFF
static const char* rec_fail = "";

static void rec_setup(void) {
  pthread_mutex_lock(&rec_mu);
  if (!rec_setup_done) {
    rec_setup_done = 1;
    const char* p = getenv("NCCLPROF_RECORDER_LOG");
    if (p && *p) rec_log = fopen(p, "a");
    const char* m = getenv("NCCLPROF_RECORDER_MASK");
    if (m && *m) rec_mask = (int)strtol(m, NULL, 0);
    const char* f = getenv("NCCLPROF_RECORDER_FAIL");
    if (f) rec_fail = f;
    const char* n = getenv("NCCLPROF_RECORDER_NULL_CTX");
    rec_null_ctx = n && strcmp(n, "1") == 0;
    const char* s = getenv("NCCLPROF_RECORDER_STRICT");
    rec_strict = s && strcmp(s, "1") == 0;
    const char* k = getenv("NCCLPROF_RECORDER_CLOCK");
    rec_clock = k && strcmp(k, "1") == 0;
  }
  pthread_mutex_unlock(&rec_mu);
}

static void rec_ref(const void* p, char* out, size_t cap) {
  uintptr_t a = (uintptr_t)p;
  if (p == NULL) snprintf(out, cap, "0");
  else if (a >= (uintptr_t)rec_handles && a < (uintptr_t)rec_handles + REC_HANDLES)
    snprintf(out, cap, "R%llu", (unsigned long long)(a - (uintptr_t)rec_handles));
  else if (a >= (uintptr_t)rec_ctxs && a < (uintptr_t)rec_ctxs + sizeof rec_ctxs)
    snprintf(out, cap, "C%llu", (unsigned long long)(a - (uintptr_t)rec_ctxs));
  else snprintf(out, cap, "%#llx", (unsigned long long)a);
}

static void rec_line(const char* fmt, const char* a, const char* b) {
  if (!rec_log) return;
  pthread_mutex_lock(&rec_mu);
  fprintf(rec_log, "T%ld ", (long)syscall(SYS_gettid));
  if (rec_clock) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    fprintf(rec_log, "@%lld ", (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
  }
  fprintf(rec_log, fmt, a, b);
  fputc('\n', rec_log);
  fflush(rec_log);
  pthread_mutex_unlock(&rec_mu);
}

/* Strict mode: a call naming a context (or a handle of one) already finalized is a use after
 * free in a real plugin; it aborts here so a test cannot miss it. */
static void rec_check_ctx(const char* call, const void* ctx) {
  uintptr_t a = (uintptr_t)ctx;
  if (!rec_strict || a < (uintptr_t)rec_ctxs || a >= (uintptr_t)rec_ctxs + sizeof rec_ctxs) return;
  if (!__atomic_load_n(&rec_live[a - (uintptr_t)rec_ctxs], __ATOMIC_ACQUIRE)) {
    fprintf(stderr, "recorder: %s on context C%lu after its finalize (use after free)\n", call,
            (unsigned long)(a - (uintptr_t)rec_ctxs));
    abort();
  }
}
static void rec_check_handle(const char* call, const void* eh) {
  uintptr_t a = (uintptr_t)eh;
  if (!rec_strict || a < (uintptr_t)rec_handles || a >= (uintptr_t)rec_handles + REC_HANDLES) return;
  uint16_t k = __atomic_load_n(&rec_hctx[a - (uintptr_t)rec_handles], __ATOMIC_RELAXED);
  if (k != REC_FOREIGN) rec_check_ctx(call, rec_ctxs + k);
}

/* The first call of the kind named by NCCLPROF_RECORDER_FAIL fails. */
static int rec_fails(const char* call) {
  static int failed;
  if (strcmp(rec_fail, call) != 0) return 0;
  return !__atomic_exchange_n(&failed, 1, __ATOMIC_RELAXED);
}

static npabi_result_t rec_init(int v, void** ctx, int* mask, uint64_t id, const char* name,
                               int nnodes, int nranks, int rank) {
  rec_setup();
  *ctx = rec_null_ctx ? NULL : rec_ctxs + __atomic_fetch_add(&rec_next_ctx, 1, __ATOMIC_RELAXED) % sizeof rec_ctxs;
  *mask = rec_mask;
  if (*ctx) __atomic_store_n(&rec_live[(char*)*ctx - rec_ctxs], 1, __ATOMIC_RELEASE);
  char c[40], buf[256];
  rec_ref(*ctx, c, sizeof c);
  if (v >= 4)
    snprintf(buf, sizeof buf, "id=%llu name=%s nnodes=%d nranks=%d rank=%d mask=%d",
             (unsigned long long)id, name ? name : "(null)", nnodes, nranks, rank, *mask);
  else snprintf(buf, sizeof buf, "mask=%d", *mask);
  rec_line("init ctx=%s %s", c, buf);
  return rec_fails("init") ? NPABI_INTERNAL_ERROR : NPABI_SUCCESS;
}

static npabi_result_t rec_init1(void** ctx, int* mask) { return rec_init(1, ctx, mask, 0, NULL, 0, 0, 0); }
static npabi_result_t rec_init4(void** ctx, int* mask, const char* name, uint64_t hash, int nnodes,
                                int nranks, int rank, npabi_logger_t log) {
  return rec_init(4, ctx, mask, hash, name, nnodes, nranks, rank);
}
static npabi_result_t rec_init5(void** ctx, uint64_t id, int* mask, const char* name, int nnodes,
                                int nranks, int rank, npabi_logger_t log) {
  return rec_init(5, ctx, mask, id, name, nnodes, nranks, rank);
}

static npabi_result_t rec_start(int v, void* ctx, void** eh, const void* d) {
  rec_check_ctx("startEvent", ctx);
  *eh = rec_handles + __atomic_fetch_add(&rec_next_handle, 1, __ATOMIC_RELAXED) % REC_HANDLES;
  if (rec_strict) /* a foreign context (PXN: another process's) is not checked */
    __atomic_store_n(&rec_hctx[(char*)*eh - rec_handles],
                     ctx >= (void*)rec_ctxs && ctx < (void*)(rec_ctxs + sizeof rec_ctxs)
                         ? (uint16_t)((char*)ctx - rec_ctxs) : REC_FOREIGN, __ATOMIC_RELAXED);
  char c[40], h[40], head[128], fields[1024];
  rec_ref(ctx, c, sizeof c);
  rec_ref(*eh, h, sizeof h);
  snprintf(head, sizeof head, "ctx=%s h=%s", c, h);
  calllog_descr(fields, sizeof fields, v, d, rec_ref);
  rec_line("start %s%s", head, fields);
  return rec_fails("start") ? NPABI_INTERNAL_ERROR : NPABI_SUCCESS;
}
#define REC_START(N)                                                                             \
  static npabi_result_t rec_start##N(void* ctx, void** eh, npabi_descr_v##N##_t* d) {            \
    return rec_start(N, ctx, eh, d);                                                             \
  }
REC_START(1)
REC_START(2)
REC_START(3)
REC_START(4)
REC_START(5)
REC_START(6)

static npabi_result_t rec_stop(void* eh) {
  rec_check_handle("stopEvent", eh);
  char h[40];
  rec_ref(eh, h, sizeof h);
  rec_line("stop h=%s%s", h, "");
  return rec_fails("stop") ? NPABI_INTERNAL_ERROR : NPABI_SUCCESS;
}

static npabi_result_t rec_record(int layout, void* eh, npabi_state_t s, const void* args) {
  rec_check_handle("recordEventState", eh);
  char h[40], fields[256];
  rec_ref(eh, h, sizeof h);
  int n = snprintf(fields, sizeof fields, " s=%d", (int)s);
  calllog_args(fields + n, sizeof fields - (size_t)n, layout, (int)s, args);
  rec_line("record h=%s%s", h, fields);
  return rec_fails("record") ? NPABI_INTERNAL_ERROR : NPABI_SUCCESS;
}
static npabi_result_t rec_record1(void* eh, npabi_state_t s, npabi_args_v1_t* a) { return rec_record(1, eh, s, a); }
static npabi_result_t rec_record4(void* eh, npabi_state_t s, npabi_args_v4_t* a) { return rec_record(4, eh, s, a); }

static npabi_result_t rec_finalize(void* ctx) {
  rec_check_ctx("finalize", ctx);
  uintptr_t a = (uintptr_t)ctx;
  if (a >= (uintptr_t)rec_ctxs && a < (uintptr_t)rec_ctxs + sizeof rec_ctxs)
    __atomic_store_n(&rec_live[a - (uintptr_t)rec_ctxs], 0, __ATOMIC_RELEASE);
  char c[40];
  rec_ref(ctx, c, sizeof c);
  rec_line("finalize ctx=%s%s", c, "");
  return rec_fails("finalize") ? NPABI_INTERNAL_ERROR : NPABI_SUCCESS;
}

#define REC_TABLE(N, INIT, START, RECORD)                                                        \
  __attribute__((visibility("default"))) npabi_profiler_v##N##_t ncclProfiler_v##N = {           \
      "recorder", INIT, START, rec_stop, RECORD, rec_finalize};
#if REC_BAD_TABLE == 1
REC_TABLE(6, rec_init5, NULL, rec_record4)
#elif REC_BAD_TABLE == 2
REC_TABLE(6, rec_init5, (void*)rec_ctxs, rec_record4)
#elif REC_BAD_TABLE == 3
REC_TABLE(6, (void*)_exit, rec_start6, rec_record4)
#else
#if !defined(REC_ONLY) || REC_ONLY == 1
REC_TABLE(1, rec_init1, rec_start1, rec_record1)
#endif
#if !defined(REC_ONLY) || REC_ONLY == 2
REC_TABLE(2, rec_init1, rec_start2, rec_record1)
#endif
#if !defined(REC_ONLY) || REC_ONLY == 3
REC_TABLE(3, rec_init1, rec_start3, rec_record1)
#endif
#if !defined(REC_ONLY) || REC_ONLY == 4
REC_TABLE(4, rec_init4, rec_start4, rec_record4)
#endif
#if !defined(REC_ONLY) || REC_ONLY == 5
REC_TABLE(5, rec_init5, rec_start5, rec_record4)
#endif
#if !defined(REC_ONLY) || REC_ONLY == 6
REC_TABLE(6, rec_init5, rec_start6, rec_record4)
#endif
#endif
