/*
 * bench.c — callback cost, measured in one process for the empty plugin (the floor) and
 * ncclprof, alternating, so both see the same machine state.
 *
 * The workload is one AllReduce as NCCL 2.29+ (v6) emits it: API events, launch, Group, Coll,
 * and per channel a send and a receive ProxyOp of 4 steps each plus a KernelCh. Descriptors are
 * built once, so the loop costs little beyond the callbacks themselves. NCCL's activation rules
 * decide which callbacks happen under each mask, exactly as in the scenarios.
 *
 * Work runs in bursts that fit in the plugin's windows; between bursts (untimed) the plugin is
 * flushed, so the numbers are for zero drops, which the report checks.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "../profiler/core.h"
#include "scenarios.h"

#define CHANNELS_MAX 8

/* Steps per ProxyOp (4 in the callback-cost bench; the drain bench sets its own). */
int bench_steps = 4;

typedef struct cbcount {
  uint64_t n;
} cbcount;

static npabi_descr_v6_t d_gapi, d_capi, d_kl, d_grp, d_coll, d_op, d_step, d_kch;

void bench_descriptors(void) {
  memset(&d_gapi, 0, sizeof d_gapi);
  d_gapi.type = NPABI_GROUP_API;
  d_gapi.groupApi.groupDepth = 1;
  d_capi = d_gapi;
  d_capi.type = NPABI_COLL_API;
  d_capi.collApi.func = "AllReduce";
  d_capi.collApi.count = 1 << 20;
  d_capi.collApi.datatype = "ncclFloat32";
  d_kl = d_gapi;
  d_kl.type = NPABI_KERNEL_LAUNCH;
  d_grp = d_gapi;
  d_grp.type = NPABI_GROUP;
  memset(&d_coll, 0, sizeof d_coll);
  d_coll.type = NPABI_COLL;
  d_coll.coll.func = "AllReduce";
  d_coll.coll.count = 1 << 20;
  d_coll.coll.datatype = "ncclFloat32";
  d_coll.coll.algo = "RING";
  d_coll.coll.proto = "SIMPLE";
  d_coll.coll.nChannels = 2;
  memset(&d_op, 0, sizeof d_op);
  d_op.type = NPABI_PROXY_OP;
  d_op.proxyOp.pid = getpid();
  d_op.proxyOp.peer = 1;
  d_op.proxyOp.nSteps = bench_steps;
  d_op.proxyOp.chunkSize = 1 << 19;
  memset(&d_step, 0, sizeof d_step);
  d_step.type = NPABI_PROXY_STEP;
  memset(&d_kch, 0, sizeof d_kch);
  d_kch.type = NPABI_KERNEL_CH;
}

int bench_pos_side = -1, bench_pos_next;
/* Each position's times (ticks), the first BENCH_POS_SAMPLES of them: the median is printed,
 * which a preempted AllReduce does not move (a mean moved by 2x on a shared machine). */
#define BENCH_POS_SAMPLES 4096
static double bench_pos_t[2][BENCH_POSITIONS][BENCH_POS_SAMPLES];
static int bench_pos_n[2][BENCH_POSITIONS];

uint64_t bench_tsc(void) {
#if defined(__x86_64__)
  return __rdtsc();
#else
  return (uint64_t)now_ns();
#endif
}

/* The callback at the next position took from `since` (bench_tsc) to now. */
void bench_pos_add(uint64_t since) {
  int k = bench_pos_next++;
  if (bench_pos_side < 0 || k >= BENCH_POSITIONS) return;
  int* n = &bench_pos_n[bench_pos_side][k];
  if (*n < BENCH_POS_SAMPLES) bench_pos_t[bench_pos_side][k][(*n)++] = (double)(bench_tsc() - since);
}

static double bench_pos_median(int side, int k) {
  int n = bench_pos_n[side][k];
  return n ? median(bench_pos_t[side][k], n) : 0.0;
}

/* Prints the median ns of each position (ncclprof, floor's plugin) and starts again. */
void bench_pos_print(const char* row, double ns_per_tick) {
  fprintf(stderr, "positions of %s: position, ncclprof ns, floor's plugin ns (medians)\n", row);
  for (int k = 0; k < BENCH_POSITIONS && bench_pos_n[0][k]; k++)
    fprintf(stderr, "%3d %8.1f %8.1f\n", k, bench_pos_median(0, k) * ns_per_tick,
            bench_pos_median(1, k) * ns_per_tick);
  memset(bench_pos_n, 0, sizeof bench_pos_n);
}

#define START(L, D, H)                                                                          \
  do {                                                                                          \
    (H) = NULL;                                                                                 \
    if (host_mask_wants((L)->mask, (D).type)) {                                                \
      BENCH_CALL((L)->t->startEvent((L)->ctx, &(H), &(D)));                                     \
      n++;                                                                                      \
    }                                                                                           \
  } while (0)
#define STOP(L, H)                                                                              \
  do {                                                                                          \
    if (H) {                                                                                    \
      BENCH_CALL((L)->t->stopEvent(H));                                                         \
      n++;                                                                                      \
    }                                                                                           \
  } while (0)
#define STATE(L, H, S, A)                                                                       \
  do {                                                                                          \
    if (H) {                                                                                    \
      BENCH_CALL((L)->t->recordEventState((H), (S), (A)));                                      \
      n++;                                                                                      \
    }                                                                                           \
  } while (0)

/* The user thread's part of one collective; returns the Coll handle in *coll. */
uint64_t user_part(bench_lib* L, void** coll, int tsc) {
  uint64_t n = 0;
  void *g, *c, *k, *grp;
  START(L, d_gapi, g);
  STATE(L, g, NPABI_GROUP_START_API_STOP, NULL);
  d_capi.parentObj = g;
  START(L, d_capi, c);
  STOP(L, c);
  STATE(L, g, NPABI_GROUP_END_API_START, NULL);
  d_kl.parentObj = g;
  START(L, d_kl, k);
  STOP(L, k);
  START(L, d_grp, grp);
  d_coll.parentObj = c;
  d_coll.coll.parentGroup = grp;
  d_coll.coll.seqNumber++; /* NCCL's per-function seq: sampled tracing chooses by it */
  START(L, d_coll, *coll);
  STOP(L, *coll);
  STOP(L, grp);
  STOP(L, g);
  (void)tsc;
  return n;
}

/* The proxy thread's part: ProxyOps, steps and KernelCh of every channel. */
uint64_t proxy_part(bench_lib* L, void* coll, int channels) {
  uint64_t n = 0;
  npabi_args_v4_t a = {.proxyStep = {.transSize = 1 << 19}};
  npabi_args_v4_t none = {.proxyStep = {.transSize = 0}};
  for (int ch = 0; ch < channels; ch++) {
    void* kc;
    d_kch.parentObj = coll;
    d_kch.kernelCh.channelId = (uint8_t)ch;
    d_kch.kernelCh.pTimer = 1000;
    START(L, d_kch, kc);
    for (int send = 1; send >= 0; send--) {
      void* op;
      d_op.parentObj = coll;
      d_op.proxyOp.channelId = (uint8_t)ch;
      d_op.proxyOp.isSend = send;
      d_op.proxyOp.nSteps = bench_steps;
      START(L, d_op, op);
      STATE(L, op, NPABI_PROXY_OP_IN_PROGRESS, &none);
      for (int s = 0; s < bench_steps; s++) {
        void* st;
        d_step.parentObj = op;
        d_step.proxyStep.step = s;
        START(L, d_step, st);
        if (send) {
          STATE(L, st, NPABI_PROXY_STEP_SEND_GPU_WAIT, &none);
          STATE(L, st, NPABI_PROXY_STEP_SEND_WAIT, &a);
        } else {
          STATE(L, st, NPABI_PROXY_STEP_RECV_WAIT, &none);
          STATE(L, st, NPABI_PROXY_STEP_RECV_FLUSH_WAIT, &a);
          STATE(L, st, NPABI_PROXY_STEP_RECV_GPU_WAIT, &none);
        }
        STOP(L, st);
      }
      STOP(L, op);
    }
    npabi_args_v4_t stop = {.kernelCh = {.pTimer = 5000}};
    STATE(L, kc, NPABI_KERNEL_CH_STOP, &stop);
    STOP(L, kc);
  }
  return n;
}

/* One thread doing everything: `bursts` bursts of `per` collectives. With tsc, the empty
 * plugin's loop also reads the TSC once per callback (the floor the target is stated on). */
run run_one(bench_lib* L, int channels, int bursts, int per, int tsc) {
  run r = {0, 0, 0, 0};
  for (int b = 0; b < bursts; b++) {
    double t0 = now_ns();
    uint64_t n = 0;
    volatile uint64_t sink = 0;
    for (int i = 0; i < per; i++) {
      void* coll = NULL;
      uint64_t k = user_part(L, &coll, tsc);
      k += proxy_part(L, coll, channels);
#if defined(__x86_64__)
      if (tsc)
        for (uint64_t j = 0; j < k; j++) sink += __rdtsc();
#endif
      n += k;
    }
    r.ns += now_ns() - t0;
    r.callbacks += n;
    r.collectives += (uint64_t)per;
    double f0 = now_ns();
    if (L->flush) L->flush(10000);
    r.flush_ns += now_ns() - f0;
  }
  return r;
}

/* Two threads on one communicator: the user thread enqueues, the proxy thread progresses. */
typedef struct ring2 {
  void* h[1024];
  volatile uint64_t head, tail;
} ring2;
typedef struct proxy_arg {
  bench_lib* L;
  ring2* q;
  int channels, count;
  double ns;
  uint64_t n;
} proxy_arg;

static void* proxy_thread(void* a) {
  proxy_arg* p = (proxy_arg*)a;
  double t0 = now_ns();
  for (int i = 0; i < p->count; i++) {
    while (__atomic_load_n(&p->q->tail, __ATOMIC_ACQUIRE) == p->q->head) {
    }
    void* coll = p->q->h[p->q->head % 1024];
    __atomic_store_n(&p->q->head, p->q->head + 1, __ATOMIC_RELEASE);
    p->n += proxy_part(p->L, coll, p->channels);
  }
  p->ns = now_ns() - t0;
  return NULL;
}

static run run_two(bench_lib* L, int channels, int bursts, int per) {
  run r = {0, 0, 0, 0};
  for (int b = 0; b < bursts; b++) {
    static ring2 q;
    q.head = q.tail = 0;
    proxy_arg pa = {.L = L, .q = &q, .channels = channels, .count = per};
    pthread_t th;
    pthread_create(&th, NULL, proxy_thread, &pa);
    double t0 = now_ns();
    uint64_t n = 0;
    for (int i = 0; i < per; i++) {
      void* coll = NULL;
      n += user_part(L, &coll, 0);
      while (q.tail - __atomic_load_n(&q.head, __ATOMIC_ACQUIRE) >= 1024) {
      }
      q.h[q.tail % 1024] = coll;
      __atomic_store_n(&q.tail, q.tail + 1, __ATOMIC_RELEASE);
    }
    double user_ns = now_ns() - t0;
    pthread_join(th, NULL);
    /* Per-callback cost of each thread over its own callbacks, averaged. */
    r.ns += user_ns + pa.ns;
    r.callbacks += n + pa.n;
    r.collectives += (uint64_t)per;
    if (L->flush) L->flush(10000);
  }
  return r;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

double median(double* v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void open_lib(bench_lib* L, const char* path, const char* name) {
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "bench: cannot load %s: %s\n", path, dlerror());
    exit(2);
  }
  memset(L, 0, sizeof *L);
  L->t = (const npabi_profiler_v6_t*)dlsym(h, "ncclProfiler_v6");
  L->set_mask = (int (*)(int))dlsym(h, "ncclprof_set_event_mask");
  L->flush = (int (*)(int))dlsym(h, "ncclprof_flush");
  L->counters = (int (*)(uint64_t*, int))dlsym(h, "ncclprof_counters");
  L->stats = (int (*)(uint64_t*, int))dlsym(h, "ncclprof_stats");
  L->trace_start = (int (*)(const char*))dlsym(h, "ncclprof_trace_start");
  L->trace_stop = (int (*)(void))dlsym(h, "ncclprof_trace_stop");
  L->dropped = (int (*)(uint64_t*, uint64_t*, int))dlsym(h, "ncclprof_dropped");
  L->t->init(&L->ctx, 0xBE4C000000000001ull, &L->mask, name, 1, 2, 0, NULL);
  /* ncclprof (it can flush) that gave no context, or whose drainer is not running once it has
   * started (a flush says: 2 when ncclprof turned itself off, e.g. libncclprof-drain.so is not
   * beside it, as its message above says), records nothing: timing it would report figures at
   * or under the floor as if they were ncclprof's. */
  int off = L->flush && (L->ctx == NULL || L->flush(30000) != 0);
  if (off) {
    fprintf(stderr, "bench: %s is off in this process or its drainer does not answer (see its "
            "message above): its figures would be those of a plugin that records nothing; fix "
            "that and run again\n", path);
    exit(2);
  }
}

static uint64_t dropped(bench_lib* L) {
  uint64_t c[32] = {0};
  if (!L->counters) return 0;
  L->counters(c, 32);
  return c[NP_C_DROPPED_FULL] + c[NP_C_DROPPED_THREADS] + c[NP_C_DROPPED_DETAIL];
}

enum { E_FLOOR, E_FLOOR_TSC, P_DEFAULT, P_ALL, P_TRACED, E_TWO, P_TWO_ALL, P_COLL1, E_COLL1,
       P_COLL2, E_COLL2, P_COLL4, E_COLL4, P_TWO_DEFAULT, NCONF };

/* The configurations measured with a chained plugin: the floors and ncclprof's masks. */
static int bench_chain_config(int c) {
  return c == E_FLOOR || c == E_FLOOR_TSC || c == P_DEFAULT || c == P_ALL || c == E_TWO ||
         c == P_TWO_ALL || c == P_TWO_DEFAULT;
}

/* ncclprof with a plugin chained behind it (NCCL's mask is then ncclprof's | the chained
 * plugin's, so every configuration emits what that plugin asks for too). The bar: ncclprof's
 * own cost stays within 1.3x the floor, plus what the chained plugin costs by itself, which is
 * measured separately as the cost of calling it directly (empty_1thread when the chained plugin
 * is the empty one): the ratios below are (chained − that) / floor. */
static int bench_chain_report(const opts* o, int reps, int per_rep, uint64_t drops,
                              const char* const* names, const double* cb, const double* coll) {
  printf("{\"scenario\":\"bench\",\"chain\":\"%s\",\"reps\":%d,\"collectives_per_rep\":%d,"
         "\"dropped\":%llu,\"configs\":{", o->chain, reps, per_rep, (unsigned long long)drops);
  int first = 1;
  for (int c = 0; c < NCONF; c++) {
    if (!bench_chain_config(c)) continue;
    printf("%s\"%s%s\":{\"ns_per_callback\":%.2f,\"ns_per_collective\":%.1f}", first ? "" : ",",
           names[c], c == E_FLOOR || c == E_FLOOR_TSC || c == E_TWO ? "" : "_chained", cb[c], coll[c]);
    first = 0;
  }
  double own = cb[E_FLOOR]; /* the chained plugin by itself */
  printf("},\"chained_plugin_ns_per_callback\":%.2f,", own);
  printf("\"ratio_all_chained_minus_chained_plugin_vs_empty_plus_tsc\":%.3f,"
         "\"ratio_default_chained_minus_chained_plugin_vs_empty_plus_tsc\":%.3f,",
         (cb[P_ALL] - own) / cb[E_FLOOR_TSC], (cb[P_DEFAULT] - own) / cb[E_FLOOR_TSC]);
  printf("\"ratio_2threads_all_chained_minus_chained_plugin_vs_empty\":%.3f}\n",
         (cb[P_TWO_ALL] - cb[E_TWO]) / cb[E_TWO]);
  return 0;
}

#define DEFAULT_MASK BENCH_DEFAULT_MASK

int scenario_bench(const opts* o) {
  /* Windows big enough that a traced burst fits: the numbers are for zero drops. */
  setenv("NCCLPROF_WINDOW_SLOTS", "16384", 0); /* both sets (operation, detail) within the 32 MiB cap */
  bench_descriptors();
  bench_lib empty, prof;
  open_lib(&empty, o->empty_lib, "bench-empty");
  open_lib(&prof, o->lib, "bench-ncclprof");
  int reps = o->reps >= 5 ? o->reps : 5;
  const int bursts = 20, per = 1000, channels = 2;
  static const char* const names[NCONF] = {
      "empty_1thread", "empty_plus_tsc_1thread", "ncclprof_default_1thread",
      "ncclprof_all_1thread", "ncclprof_all_1thread_traced", "empty_2threads",
      "ncclprof_all_2threads", "ncclprof_collp2pkch_1ch", "empty_collp2pkch_1ch",
      "ncclprof_collp2pkch_2ch", "empty_collp2pkch_2ch", "ncclprof_collp2pkch_4ch",
      "empty_collp2pkch_4ch", "ncclprof_default_2threads"};
  double per_cb[NCONF][64], per_coll[NCONF][64], flush_ns[NCONF][64];
  uint64_t trace0[8] = {0}, trace1[8] = {0};
  uint64_t drops0 = dropped(&prof);
  const int kch = NPABI_COLL | NPABI_P2P | NPABI_KERNEL_CH;
  /* With a chained plugin (--chain) only the configurations whose bar it changes are run. */
  const int chained = o->chain != NULL;
  for (int rep = 0; rep < reps && rep < 64; rep++) {
    for (int c = 0; c < NCONF; c++) {
      if (chained && !bench_chain_config(c)) continue;
      bench_lib* L = (c == P_DEFAULT || c == P_ALL || c == P_TRACED || c == P_TWO_ALL ||
                      c == P_COLL1 || c == P_COLL2 || c == P_COLL4 || c == P_TWO_DEFAULT)
                         ? &prof : &empty;
      int mask = c == P_DEFAULT || c == P_TWO_DEFAULT ? DEFAULT_MASK
               : (c >= P_COLL1) ? kch : NPABI_ALL_TYPES;
      L->mask = mask;
      if (L->set_mask) L->set_mask(mask);
      int ch = c == P_COLL1 || c == E_COLL1 ? 1 : c == P_COLL4 || c == E_COLL4 ? 4 : channels;
      if (c == P_TRACED && L->trace_start) {
        L->trace_start(getenv("NCCLPROF_BENCH_TRACE_DIR"));
        if (L->stats) L->stats(trace0, 8);
      }
      run r = (c == E_TWO || c == P_TWO_ALL || c == P_TWO_DEFAULT) ? run_two(L, ch, bursts, per)
                                              : run_one(L, ch, bursts, per, c == E_FLOOR_TSC);
      if (c == P_TRACED && L->trace_stop) {
        if (L->stats) L->stats(trace1, 8); /* before the stop: the writes of this run only */
        L->trace_stop();
        L->flush(10000);
      }
      per_cb[c][rep] = r.ns / (double)r.callbacks;
      per_coll[c][rep] = r.ns / (double)r.collectives;
      flush_ns[c][rep] = r.flush_ns;
    }
  }
  uint64_t drops = dropped(&prof) - drops0;
  double med_cb[NCONF], med_coll[NCONF];
  for (int c = 0; c < NCONF; c++) {
    med_cb[c] = median(per_cb[c], reps);
    med_coll[c] = median(per_coll[c], reps);
  }
  if (chained) return bench_chain_report(o, reps, bursts * per, drops, names, med_cb, med_coll);
  printf("{\"scenario\":\"bench\",\"reps\":%d,\"collectives_per_rep\":%d,\"dropped\":%llu,\"configs\":{",
         reps, bursts * per, (unsigned long long)drops);
  for (int c = 0; c < NCONF; c++)
    printf("%s\"%s\":{\"ns_per_callback\":%.2f,\"ns_per_collective\":%.1f}", c ? "," : "",
           names[c], med_cb[c], med_coll[c]);
  printf("},\"ratio_all_vs_empty_plus_tsc\":%.3f,\"ratio_default_vs_empty_plus_tsc\":%.3f,",
         med_cb[P_ALL] / med_cb[E_FLOOR_TSC], med_cb[P_DEFAULT] / med_cb[E_FLOOR_TSC]);
  printf("\"ratio_2threads_all_vs_empty\":%.3f,\"ratio_2threads_default_vs_empty\":%.3f,",
         med_cb[P_TWO_ALL] / med_cb[E_TWO], med_cb[P_TWO_DEFAULT] / med_cb[E_TWO]);
  printf("\"ratio_traced_vs_untraced\":%.3f,", med_cb[P_TRACED] / med_cb[P_ALL]);
  {
    /* NP_S_TRACE_EVENTS = 1, NP_S_TRACE_BYTES = 2: of the last traced run. */
    double ev = (double)(trace1[1] - trace0[1]), by = (double)(trace1[2] - trace0[2]);
    double extra = median(flush_ns[P_TRACED], reps) - median(flush_ns[P_ALL], reps);
    printf("\"trace\":{\"events\":%.0f,\"bytes_per_event\":%.1f,\"writer_events_per_s\":%.0f,"
           "\"flush_ms_per_burst_untraced\":%.2f},",
           ev, ev > 0 ? by / ev : 0, extra > 0 ? ev / (extra * 1e-9) : 0,
           /* How long ncclprof_flush takes after a burst: window close, grace period and the
            * drainer's poll, not its throughput. */
           median(flush_ns[P_ALL], reps) / bursts / 1e6);
  }
  printf("\"plugin_ns_per_collective_collp2pkch\":{\"1ch\":%.1f,\"2ch\":%.1f,\"4ch\":%.1f}}\n",
         med_coll[P_COLL1] - med_coll[E_COLL1], med_coll[P_COLL2] - med_coll[E_COLL2],
         med_coll[P_COLL4] - med_coll[E_COLL4]);
  (void)W;
  return 0;
}
