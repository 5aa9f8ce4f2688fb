/*
 * ncclbench.c — callback cost on NCCL's real call sequence, with the drainer working beside it
 * (`bench-nccl`, run by `make bench`).
 *
 * bench.c times bursts that fit in the windows and flushes the plugin between them, untimed,
 * so the drainer works in the gaps and the timed callbacks seldom find a cache line it took.
 * Here nothing is flushed: the drainer runs while the callbacks are made, as in a job.
 *
 * One thread calls as NCCL's user and proxy threads do for an AllReduce (v6): GroupApi,
 * CollApi, KernelLaunch, Group, Coll, and per channel a send and a receive ProxyOp progressed
 * as net.cc's sendProxyProgress / recvProxyProgress do: up to NCCL_STEPS (8) steps in flight,
 * each started, given its three state records in net.cc's order (send: SendGPUWait when
 * posted, SendPeerWait, SendWait; receive: RecvWait once its irecv is posted, RecvFlushWait,
 * RecvGPUWait) and stopped, oldest first; ProxyOp InProgress on the first pass; KernelCh when
 * the mask asks for it. Three of NCCL's patterns have rows of their own (docs/nccl-patterns.md):
 * receive steps started again before their irecv is posted, CollNet ProxyOps never stopped, and
 * receive ProxyOps queued behind their connection (started when appended, progressed
 * NB_QUEUE AllReduces later, the head of each channel's queue given its first pass at once).
 *
 * Every row alternates the floor (the empty plugin plus one TSC read per callback) and ncclprof
 * under the same mask and pacing, --reps times. Each AllReduce's callbacks are timed alone (a
 * paced run's waits are not timed); a run's figure is its median AllReduce's ns per callback,
 * and a row's ratio the median over reps of ncclprof's figure over the floor's of the same rep
 * (the ratio of the runs' means is printed beside it). NCCLPROF_BENCH_ROWS=TEXT runs only the
 * rows whose name contains TEXT (to profile one).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "../profiler/core.h"
#include "scenarios.h"

#define NB_STEPS_IN_FLIGHT 8 /* NCCL_STEPS */
#define NB_RESTARTS 2        /* restart row: each receive step started 3 times in all */
#define NB_QUEUE 64          /* queued rows: receive ProxyOps waiting per channel */

typedef struct nb_row {
  const char* name;
  int mask_all, channels, steps;
  double rate; /* AllReduces per second; 0: unpaced */
  int restarts, collnet, queued;
} nb_row;

typedef struct nb_cb {
  bench_lib* L;
  uint64_t n; /* callbacks made */
} nb_cb;

static npabi_descr_v6_t nb_op, nb_step, nb_kch;

static void* nb_start(nb_cb* b, npabi_descr_v6_t* d) {
  void* h = NULL;
  if (!host_mask_wants(b->L->mask, d->type)) return NULL;
  BENCH_CALL(b->L->t->startEvent(b->L->ctx, &h, d));
  b->n++;
  return h;
}
static void nb_state(nb_cb* b, void* h, int s, npabi_args_v4_t* a) {
  if (!h) return;
  BENCH_CALL(b->L->t->recordEventState(h, s, a));
  b->n++;
}
static void nb_stop(nb_cb* b, void* h) {
  if (!h) return;
  BENCH_CALL(b->L->t->stopEvent(h));
  b->n++;
}

/* Posts step s of a ProxyOp: net.cc starts it (a receive step again `restarts` times, as
 * recvProxyProgress does on passes that could not post the irecv), then records the state that
 * follows the post. */
static void* nb_post(nb_cb* b, void* op, int s, int send, int restarts) {
  static npabi_args_v4_t none;
  nb_step.parentObj = op;
  nb_step.proxyStep.step = s;
  void* st = NULL;
  for (int r = 0; r <= (send ? 0 : restarts); r++) st = nb_start(b, &nb_step);
  nb_state(b, st, send ? NPABI_PROXY_STEP_SEND_GPU_WAIT : NPABI_PROXY_STEP_RECV_WAIT, &none);
  return st;
}

/* Completes the oldest step: its remaining two states, then the stop. */
static void nb_finish(nb_cb* b, void* st, int send) {
  static npabi_args_v4_t none, size = {.proxyStep = {.transSize = 1 << 19}};
  if (send) {
    nb_state(b, st, NPABI_PROXY_STEP_SEND_PEER_WAIT, &none);
    nb_state(b, st, NPABI_PROXY_STEP_SEND_WAIT, &size);
  } else {
    nb_state(b, st, NPABI_PROXY_STEP_RECV_FLUSH_WAIT, &size);
    nb_state(b, st, NPABI_PROXY_STEP_RECV_GPU_WAIT, &none);
  }
  nb_stop(b, st);
}

static npabi_args_v4_t nb_none;

/* A ProxyOp as proxy.cc appends it (started, nothing else yet). */
static void* nb_append(nb_cb* b, void* coll, int ch, int send, const nb_row* r) {
  nb_op.parentObj = coll;
  nb_op.proxyOp.channelId = (uint8_t)ch;
  nb_op.proxyOp.isSend = send;
  nb_op.proxyOp.nSteps = r->steps;
  return nb_start(b, &nb_op);
}

/* A ProxyOp's steps as net.cc progresses them, after its first pass: up to 8 in flight,
 * completed in order; then its stop. */
static void nb_progress(nb_cb* b, void* op, int send, const nb_row* r) {
  void* fl[NB_STEPS_IN_FLIGHT];
  int posted = 0, done = 0;
  while (done < r->steps) {
    while (posted < r->steps && posted - done < NB_STEPS_IN_FLIGHT)
      fl[posted % NB_STEPS_IN_FLIGHT] = op ? nb_post(b, op, posted, send, r->restarts) : NULL, posted++;
    nb_finish(b, fl[done % NB_STEPS_IN_FLIGHT], send);
    done++;
  }
  nb_stop(b, op);
}

/* One ProxyOp as net.cc progresses it at once. */
static void nb_proxy_op(nb_cb* b, void* coll, int ch, int send, const nb_row* r) {
  void* op = nb_append(b, coll, ch, send, r);
  nb_state(b, op, NPABI_PROXY_OP_IN_PROGRESS, &nb_none);
  nb_progress(b, op, send, r);
}

/* Receive ProxyOps queued behind their connection: one queue per channel. */
static void* nb_q[64][NB_QUEUE + 1];
static int nb_qhead[64], nb_qn[64];

static void nb_queue_pop(nb_cb* b, int ch, const nb_row* r) {
  void* op = nb_q[ch][nb_qhead[ch]];
  nb_qhead[ch] = (nb_qhead[ch] + 1) % (NB_QUEUE + 1);
  nb_qn[ch]--;
  nb_progress(b, op, 0, r);
  if (nb_qn[ch] > 0) nb_state(b, nb_q[ch][nb_qhead[ch]], NPABI_PROXY_OP_IN_PROGRESS, &nb_none);
}

static void nb_queued_recv(nb_cb* b, void* coll, int ch, const nb_row* r) {
  void* op = nb_append(b, coll, ch, 0, r);
  nb_q[ch][(nb_qhead[ch] + nb_qn[ch]) % (NB_QUEUE + 1)] = op;
  if (nb_qn[ch]++ == 0) nb_state(b, op, NPABI_PROXY_OP_IN_PROGRESS, &nb_none);
  if (nb_qn[ch] > NB_QUEUE) nb_queue_pop(b, ch, r);
}

/* What a queued row left waiting: progressed, untimed, before the next run (whose plugin may
 * be the other library). */
static void nb_queue_flush(nb_cb* b, const nb_row* r) {
  for (int ch = 0; ch < 64; ch++)
    while (nb_qn[ch] > 0) nb_queue_pop(b, ch, r);
}

/* A CollNet ProxyOp: proxy.cc starts it, nothing records a state, a step or a stop. */
static void nb_collnet_op(nb_cb* b, void* coll, int ch) {
  nb_op.parentObj = coll;
  nb_op.proxyOp.channelId = (uint8_t)ch;
  nb_op.proxyOp.isSend = 0;
  nb_op.proxyOp.nSteps = 4;
  (void)nb_start(b, &nb_op);
}

/* The proxy thread's part of AllReduce i. */
static void nb_proxy_part(nb_cb* b, void* coll, const nb_row* r, uint64_t i) {
  static npabi_args_v4_t kstop = {.kernelCh = {.pTimer = 5000}};
  for (int ch = 0; ch < r->channels; ch++) {
    nb_kch.parentObj = coll;
    nb_kch.kernelCh.channelId = (uint8_t)ch;
    nb_kch.kernelCh.pTimer = 1000;
    void* kc = nb_start(b, &nb_kch);
    if (r->collnet && i % 2 == 0) {
      nb_collnet_op(b, coll, ch);
      nb_collnet_op(b, coll, ch);
    } else if (r->queued) {
      nb_proxy_op(b, coll, ch, 1, r);
      nb_queued_recv(b, coll, ch, r);
    } else {
      nb_proxy_op(b, coll, ch, 1, r);
      nb_proxy_op(b, coll, ch, 0, r);
    }
    nb_state(b, kc, NPABI_KERNEL_CH_STOP, &kstop);
    nb_stop(b, kc);
  }
}

typedef struct nb_run {
  double mean, med; /* ns per callback: over the whole run, and the median AllReduce's */
} nb_run;

static double nb_tick_ns; /* ns per TSC tick, measured at start */

static double nb_ticks_ns(uint64_t t) {
  return (double)t * nb_tick_ns;
}

/* `count` AllReduces under row r, paced with a busy wait that is not timed. Each AllReduce's
 * callbacks are timed on their own (TSC): on a machine shared with other work the median
 * AllReduce is the figure preemption cannot move; the mean over the run is reported beside. */
static int nb_positions; /* NCCLPROF_BENCH_POSITIONS=1 */

static nb_run nb_measure(bench_lib* L, const nb_row* r, int count, int tsc) {
  static double per[4096];
  nb_cb b = {.L = L};
  L->mask = r->mask_all ? NPABI_ALL_TYPES : BENCH_DEFAULT_MASK;
  if (L->set_mask) L->set_mask(L->mask);
  double period = r->rate > 0 ? 1e9 / r->rate : 0, t0 = now_ns();
  volatile uint64_t sink = 0;
  uint64_t total = 0;
  if (count > 4096) count = 4096;
  bench_pos_side = nb_positions ? (tsc ? 1 : 0) : -1;
  for (int i = 0; i < count; i++) {
    if (period > 0) spin_until(t0 + (double)i * period);
    bench_pos_next = 0;
    uint64_t n0 = b.n, a = bench_tsc();
    void* coll = NULL;
    b.n += user_part(L, &coll, 0);
    nb_proxy_part(&b, coll, r, (uint64_t)i);
#if defined(__x86_64__)
    if (tsc)
      for (uint64_t j = n0; j < b.n; j++) sink += __rdtsc();
#endif
    uint64_t dt = bench_tsc() - a;
    total += dt;
    per[i] = nb_ticks_ns(dt) / (double)(b.n - n0);
  }
  (void)sink;
  bench_pos_side = -1;
  nb_queue_flush(&b, r);
  nb_run out = {nb_ticks_ns(total) / (double)b.n, median(per, count)};
  return out;
}

/* ns per TSC tick, over 50 ms. */
static void nb_calibrate(void) {
  double a = now_ns();
  uint64_t ta = bench_tsc();
  spin_until(a + 50e6);
  nb_tick_ns = (now_ns() - a) / (double)(bench_tsc() - ta);
}

static uint64_t nb_dropped(bench_lib* L) {
  uint64_t c[NP_C_COUNT] = {0};
  if (!L->counters) return 0;
  L->counters(c, NP_C_COUNT);
  return c[NP_C_DROPPED_FULL] + c[NP_C_DROPPED_THREADS] + c[NP_C_DROPPED_DETAIL];
}

static const nb_row nb_rows[] = {
    {"default 2ch x 4 steps, paced", 0, 2, 4, 5000, 0, 0},
    {"default 2ch x 4 steps, unpaced", 0, 2, 4, 0, 0, 0},
    {"default 2ch x 16 steps, paced", 0, 2, 16, 5000, 0, 0},
    {"default 2ch x 16 steps, unpaced", 0, 2, 16, 0, 0, 0},
    {"default 4ch x 4 steps, paced", 0, 4, 4, 5000, 0, 0},
    {"default 4ch x 4 steps, unpaced", 0, 4, 4, 0, 0, 0},
    {"default 4ch x 16 steps, paced", 0, 4, 16, 5000, 0, 0},
    {"default 4ch x 16 steps, unpaced", 0, 4, 16, 0, 0, 0},
    {"all 2ch x 4 steps, paced", 1, 2, 4, 5000, 0, 0},
    {"all 2ch x 4 steps, unpaced", 1, 2, 4, 0, 0, 0},
    {"all 2ch x 16 steps, paced", 1, 2, 16, 5000, 0, 0},
    {"all 2ch x 16 steps, unpaced", 1, 2, 16, 0, 0, 0},
    {"all 4ch x 4 steps, paced", 1, 4, 4, 5000, 0, 0},
    {"all 4ch x 4 steps, unpaced", 1, 4, 4, 0, 0, 0},
    {"all 4ch x 16 steps, paced", 1, 4, 16, 5000, 0, 0},
    {"all 4ch x 16 steps, unpaced", 1, 4, 16, 0, 0, 0},
    {"default 2ch x 4 steps, receive steps restarted, paced", 0, 2, 4, 5000, NB_RESTARTS, 0},
    {"default 2ch x 4 steps, receive steps restarted, unpaced", 0, 2, 4, 0, NB_RESTARTS, 0},
    {"default 2ch x 4 steps, CollNet ProxyOps never stopped, paced", 0, 2, 4, 5000, 0, 1},
    {"default 2ch x 4 steps, CollNet ProxyOps never stopped, unpaced", 0, 2, 4, 0, 0, 1},
    {"default 2ch x 4 steps, receive ProxyOps queued 64 deep, paced", 0, 2, 4, 5000, 0, 0, 1},
    {"default 2ch x 4 steps, receive ProxyOps queued 64 deep, unpaced", 0, 2, 4, 0, 0, 0, 1},
    /* Operations with no network work (intra-node: NCCL starts no ProxyOp): the user thread's
     * events alone, which every row above also makes once per AllReduce. */
    {"default, no network (user thread's events only), paced", 0, 0, 4, 5000, 0, 0},
    {"default, no network (user thread's events only), unpaced", 0, 0, 4, 0, 0, 0},
};
#define NB_NROWS ((int)(sizeof nb_rows / sizeof nb_rows[0]))

int scenario_bench_nccl(const opts* o) {
  bench_descriptors();
  memset(&nb_op, 0, sizeof nb_op);
  nb_op.type = NPABI_PROXY_OP;
  nb_op.proxyOp.pid = getpid();
  nb_op.proxyOp.peer = 1;
  nb_op.proxyOp.chunkSize = 1 << 19;
  memset(&nb_step, 0, sizeof nb_step);
  nb_step.type = NPABI_PROXY_STEP;
  memset(&nb_kch, 0, sizeof nb_kch);
  nb_kch.type = NPABI_KERNEL_CH;
  bench_lib empty, prof;
  open_lib(&empty, o->empty_lib, "bench-nccl-empty");
  open_lib(&prof, o->lib, "bench-nccl");
  int reps = o->reps >= 3 ? (o->reps > 32 ? 32 : o->reps) : 3;
  const int paced_count = 500, unpaced_count = 2000; /* 0.1 s per paced run */
  static double floor_med[NB_NROWS][32], prof_med[NB_NROWS][32], ratio[NB_NROWS][32];
  static double ratio_mean[NB_NROWS][32];
  static uint64_t drops[NB_NROWS];
  nb_calibrate();
  const char* only = getenv("NCCLPROF_BENCH_ROWS"); /* rows whose name contains it (profiling) */
  /* Each callback timed alone by its position in the AllReduce (two TSC reads around each, so
   * the row's own figures are not the bench's): where a row's time goes, best with one row. */
  const char* pos = getenv("NCCLPROF_BENCH_POSITIONS");
  nb_positions = pos != NULL && strcmp(pos, "1") == 0;
  for (int rep = 0; rep < reps; rep++) {
    for (int i = 0; i < NB_NROWS; i++) {
      const nb_row* r = &nb_rows[i];
      if (only && !strstr(r->name, only)) continue;
      int count = r->rate > 0 ? paced_count : unpaced_count;
      nb_run f = nb_measure(&empty, r, count, 1);
      /* Untimed: the drainer first catches up with the row before (an unpaced row leaves
       * windows full), so a row's drops are its own: a paced row after an unpaced one dropped
       * the backlog's 13 to 4,500 events as if it outran the drainer itself. Within the row
       * nothing is flushed. */
      if (prof.flush) prof.flush(30000);
      uint64_t d0 = nb_dropped(&prof);
      nb_run p = nb_measure(&prof, r, count, 0);
      drops[i] += nb_dropped(&prof) - d0;
      floor_med[i][rep] = f.med;
      prof_med[i][rep] = p.med;
      ratio[i][rep] = p.med / f.med; /* the two runs side by side */
      ratio_mean[i][rep] = p.mean / f.mean;
    }
  }
  if (nb_positions) bench_pos_print(only ? only : "every row", nb_tick_ns);
  printf("{\"scenario\":\"bench-nccl\",\"reps\":%d,\"rows\":[", reps);
  for (int i = 0; i < NB_NROWS; i++)
    printf("%s{\"row\":\"%s\",\"floor_ns_per_callback\":%.2f,\"ncclprof_ns_per_callback\":%.2f,"
           "\"ratio\":%.3f,\"ratio_of_means\":%.3f,\"dropped\":%llu}",
           i ? "," : "", nb_rows[i].name, median(floor_med[i], reps), median(prof_med[i], reps),
           median(ratio[i], reps), median(ratio_mean[i], reps), (unsigned long long)drops[i]);
  printf("]}\n");
  return 0;
}
