/*
 * races.c — communicator lifetimes that overlap with callbacks, as an audit found them
 * (issue 14, item 10), replayed for the real plugin and for the sanitizer builds:
 *   stalefin  a finalize of a communicator's context after its table entry was reused
 *   finwhile  finalize while callbacks keep arriving on the communicator being finalized
 *   reinit    callbacks on a context while its entry is finalized and initialized again
 *   late      stops and states for events whose windows were already recycled, while other
 *             threads fill the same slots
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "scenarios.h"

static void run_ops(hcomm* c, int n, int kernel) {
  for (int i = 0; i < n; i++) {
    op_spec o = {.func = "AllReduce", .count = 4096, .dtype = "ncclFloat32", .algo = "RING",
                 .proto = "SIMPLE", .nchannels = 2, .chunk = 8192, .kernel = kernel};
    launch_group(c, &o, 1, 1);
  }
  proxy_drain();
}

/* Finalize of a context NCCL holds, timed as world_finalize_all does. */
static void finalize_timed(hcomm* c) {
  double t0 = now_ns();
  host_finalize(&W.plugin, c->ctx);
  double took = now_ns() - t0;
  if (took > W.finalize_max_ns) W.finalize_max_ns = took;
  c->ctx = NULL;
}

/* A finalize of communicator A's context arrives after A was destroyed and B took its table
 * entry (a double destroy in the application): it must not finalize B, whose summary then
 * holds every one of its operations. */
void scenario_stalefin(const opts* o) {
  proxy_start();
  hcomm* a = world_comm("stale-a", 0x57A1E00000000001ull, o->nranks, o->rank, 1);
  run_ops(a, o->iters / 4, o->kernel);
  void* a_ctx = a->ctx;
  finalize_timed(a);
  hcomm* b = world_comm("stale-b", 0x57A1E00000000002ull, o->nranks, o->rank, 1);
  run_ops(b, o->iters / 2, o->kernel);
  host_finalize(&W.plugin, a_ctx); /* stale */
  run_ops(b, o->iters - o->iters / 2, o->kernel);
  proxy_stop();
}

/* Callbacks that keep arriving on one communicator: GroupApi events started, given a state
 * and stopped in a loop (they fill the operation windows as fast as one thread can), until
 * told to stop. */
typedef struct rogue {
  void* volatile ctx;
  volatile int stop;
  unsigned long long calls;
} rogue;

static void* rogue_main(void* arg) {
  rogue* r = (rogue*)arg;
  while (!__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE)) {
    host_ev e = {.type = NPABI_GROUP_API, .depth = 1};
    void* ctx = __atomic_load_n(&r->ctx, __ATOMIC_ACQUIRE);
    void* h = host_start(&W.plugin, ctx, &e);
    host_group_api_state(&W.plugin, h, NPABI_GROUP_START_API_STOP);
    host_stop(&W.plugin, h);
    __atomic_fetch_add(&r->calls, 3, __ATOMIC_RELAXED);
  }
  return NULL;
}

/* Finalize while another thread keeps calling into the communicator: finalize waits for what
 * started before it, not for the stream of later callbacks, and never past its timeout. With
 * --slack-ms the finalizing thread's timer slack is raised (each of its sleeps may then last
 * that much longer, as on a loaded or power-saving machine): the wait is bounded by the clock,
 * so it stays within the timeout plus one sleep. */
void scenario_finwhile(const opts* o) {
  proxy_start();
  hcomm* c = world_comm("finwhile", 0xF1A1E00000000001ull, o->nranks, o->rank, 1);
  run_ops(c, o->iters, o->kernel);
  rogue r = {.ctx = c->ctx};
  pthread_t t;
  pthread_create(&t, NULL, rogue_main, &r);
  while (__atomic_load_n(&r.calls, __ATOMIC_RELAXED) < 30000) { /* it is well under way */
  }
  if (o->slack_ms > 0) prctl(PR_SET_TIMERSLACK, (unsigned long)o->slack_ms * 1000000ul, 0, 0, 0);
  finalize_timed(c);
  prctl(PR_SET_TIMERSLACK, 50000ul, 0, 0, 0); /* the default */
  __atomic_store_n(&r.stop, 1, __ATOMIC_RELEASE);
  pthread_join(t, NULL);
  proxy_stop();
}

/* A thread keeps calling into whatever context the host last published while the main thread
 * finalizes that communicator and creates the next one on the same table entry, --cycles
 * times. Nothing the callbacks do may race with init writing the entry, and each lifetime's
 * operations stay its own. */
void scenario_reinit(const opts* o) {
  proxy_start();
  rogue r = {0};
  pthread_t t;
  for (int cyc = 0; cyc < o->cycles; cyc++) {
    char name[32];
    snprintf(name, sizeof name, "reinit%d", cyc);
    hcomm* c = world_comm(name, 0x4E1A000000000000ull + (uint64_t)cyc, o->nranks, o->rank, 1);
    __atomic_store_n(&r.ctx, c->ctx, __ATOMIC_RELEASE);
    if (cyc == 0) pthread_create(&t, NULL, rogue_main, &r);
    run_ops(c, o->iters, o->kernel);
    finalize_timed(c);
  }
  __atomic_store_n(&r.stop, 1, __ATOMIC_RELEASE);
  pthread_join(t, NULL);
  proxy_stop();
}

/* Handles kept well past their windows: one thread starts Coll events (and ProxyOps under
 * them), another stops them and records states on them once many windows have gone by, so
 * their slots have been recycled and refilled by the first thread meanwhile. */
#define LATE_RING 8192
typedef struct late_ring {
  void* coll[LATE_RING];
  void* op[LATE_RING];
  unsigned long long head, tail; /* written by the starter, by the stopper */
  int done;
} late_ring;

/* How far the stopper stays behind, in events, changing every 1000 stops: about a window's
 * worth (the event's window is being closed, sealed or read: a stop then races with the
 * window's release and refill) and far more (recycled long ago). */
static const unsigned long long late_lags[] = {150, 200, 260, 400, LATE_RING / 2};

static void* late_stopper(void* arg) {
  late_ring* q = (late_ring*)arg;
  for (unsigned long long tail = 0;; ) {
    unsigned long long head = __atomic_load_n(&q->head, __ATOMIC_ACQUIRE);
    int done = __atomic_load_n(&q->done, __ATOMIC_ACQUIRE);
    if (tail == head && done) return NULL;
    unsigned long long lag = late_lags[tail / 1000 % (sizeof late_lags / sizeof late_lags[0])];
    if (head - tail < lag && !done) continue;
    unsigned long long i = tail % LATE_RING;
    host_op_in_progress(&W.plugin, q->op[i]);
    host_stop(&W.plugin, q->op[i]);
    host_stop(&W.plugin, q->coll[i]);
    __atomic_store_n(&q->tail, ++tail, __ATOMIC_RELEASE);
  }
}

void scenario_late(const opts* o) {
  hcomm* c = world_comm("late", 0x1A7E000000000001ull, o->nranks, o->rank, 1);
  late_ring* q = calloc(1, sizeof *q);
  pthread_t t;
  pthread_create(&t, NULL, late_stopper, q);
  double start = now_ns(), end = start + o->seconds * 1e9;
  for (unsigned long long n = 0; now_ns() < end; n++) {
    while (n - __atomic_load_n(&q->tail, __ATOMIC_ACQUIRE) >= LATE_RING) { /* full */
    }
    /* Every other 100 ms, one pair per 5 us: unpaced, a slow (sanitized) drainer leaves the
     * operation windows full, the ProxyOps get no record and no stop can come late. */
    if ((unsigned long long)((now_ns() - start) / 1e8) & 1) {
      double next = now_ns() + 5000;
      while (now_ns() < next) {
      }
    }
    unsigned long long i = n % LATE_RING;
    host_ev e = {.type = NPABI_COLL, .func = "AllReduce", .count = 64, .dtype = "ncclFloat32",
                 .algo = "RING", .proto = "LL", .nchannels = 1, .seq = n};
    q->coll[i] = host_start(&W.plugin, c->ctx, &e);
    host_ev p = {.type = NPABI_PROXY_OP, .parent = q->coll[i], .pid = getpid(), .peer = 1,
                 .nsteps = 1, .chunk = 64, .is_send = 1};
    q->op[i] = host_start(&W.plugin, c->ctx, &p);
    __atomic_store_n(&q->head, n + 1, __ATOMIC_RELEASE);
  }
  __atomic_store_n(&q->done, 1, __ATOMIC_RELEASE);
  pthread_join(t, NULL);
  free(q);
}

/* A forked child that creates a communicator (a worker of a process that runs NCCL): its
 * parent had started the plugin's drainer, so the child must not start another Go runtime.
 * Its init succeeds with a disabled context and mask 0 (one message), and it stays one thread. */
void scenario_forkinit(const opts* o) {
  proxy_start();
  hcomm* c = world_comm("forkinit", 0xF02C000000000002ull, o->nranks, o->rank, 1);
  run_ops(c, o->iters / 2, o->kernel);
  pid_t child = fork();
  if (child == 0) {
    host_plugin p = W.plugin;
    void* ctx = host_init(&p, "child", 0xF02C0000000000C1ull, 1, 1, 0);
    host_ev e = {.type = NPABI_GROUP_API, .depth = 1};
    void* h = host_start(&p, ctx, &e);
    host_stop(&p, h);
    host_finalize(&p, ctx);
    struct timespec ts = {0, 200000000}; /* long enough for a loader thread to show */
    nanosleep(&ts, NULL);
    FILE* f = fopen("/proc/self/status", "r");
    char line[256];
    int threads = -1;
    while (f && fgets(line, sizeof line, f))
      if (!strncmp(line, "Threads:", 8)) threads = atoi(line + 8);
    if (f) fclose(f);
    if (ctx != NULL || p.mask != 0 || threads != 1) {
      fprintf(stderr, "testhost: forked child: ctx %p mask %#x threads %d\n", ctx, p.mask, threads);
      _exit(7);
    }
    _exit(0);
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status) ||
      WEXITSTATUS(status) != 0) {
    fprintf(stderr, "testhost: forked child failed (status %d)\n", status);
    exit(4);
  }
  run_ops(c, o->iters - o->iters / 2, o->kernel);
  proxy_stop();
}

/* Address space left after the job grows (under ulimit -v). */
static long long as_left_mib(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return -1;
  FILE* f = fopen("/proc/self/statm", "r");
  unsigned long long pages = 0;
  if (f) {
    if (fscanf(f, "%llu", &pages) != 1) pages = 0;
    fclose(f);
  }
  return ((long long)rl.rlim_cur - (long long)(pages * (unsigned long long)sysconf(_SC_PAGESIZE))) >> 20;
}

/* The job grows into its own ulimit -v while the plugin runs: after the first half of the
 * operations and 1.2 s, it reserves address space until only --leave-mib is left (default
 * 150), then runs the rest for 2.5 s or more. The plugin must not grow into what is left: it stops
 * tracing (one message) and goes on with its summaries. */
void scenario_asgrow(const opts* o) {
  proxy_start();
  hcomm* c = world_comm("asgrow", 0xA5A5000000000001ull, o->nranks, o->rank, 1);
  run_ops(c, o->iters / 2, o->kernel);
  struct timespec settle = {1, 200000000}; /* the plugin reads its first windows meanwhile */
  nanosleep(&settle, NULL);
  long long left = as_left_mib(), leave = o->leave_mib > 0 ? o->leave_mib : 150;
  if (left < 0) {
    fprintf(stderr, "testhost: asgrow needs a ulimit -v\n");
    exit(2);
  }
  if (left > leave) {
    size_t bytes = (size_t)(left - leave) << 20;
    if (mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0) == MAP_FAILED) {
      perror("testhost: asgrow mmap");
      exit(2);
    }
  }
  double end = now_ns() + 2.5e9;
  int done = o->iters / 2;
  while (now_ns() < end || done < o->iters) {
    run_ops(c, 1, o->kernel);
    done++;
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
  }
  proxy_stop();
}
