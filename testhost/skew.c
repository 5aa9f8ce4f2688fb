/*
 * skew.c — a job whose ranks share one schedule, with a planted straggler: the ground truth for
 * `ncclmerge skew` and `ncclmerge stats`.
 *
 * Every rank is its own process, started with the same --seed and --start-ns (a CLOCK_REALTIME
 * instant a little in the future). From them each process computes, for every collective, the
 * arrival of every rank: the operation's slot in the schedule, plus a small jitter, plus --slow-us
 * for --slow-rank on every collective of the slow steps (chosen by the seed). A rank sleeps
 * until its own arrival, starts the operation (Group, Coll, a ProxyOp with one step per channel,
 * KernelCh with --kernel), and completes it when the last rank has arrived plus the operation's
 * planted duration — what a real collective does: everyone waits for the last rank. Durations are
 * set so that nccl-tests' bus bandwidth of each size is a known value. Each step is labelled with
 * the plugin's ncclprof_set_step. The truth (--truth) has the slow steps, the delay and the
 * bandwidths.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "scenarios.h"
#include "world.h"

/* One collective of every step: on the world communicator, or on the rank's pair (2p, 2p+1). */
typedef struct skew_op {
  const char* func;
  int pair;       /* on the pair communicator */
  size_t count;   /* ncclFloat32 elements per rank's buffer, as NCCL's count */
  double busbw;   /* planted nccl-tests bus bandwidth, GB/s */
} skew_op;

static const skew_op step_ops[] = {
    {"AllReduce", 0, 256 << 10, 1.0}, /* 1 MiB */
    {"AllReduce", 0, 1 << 20, 2.0},   /* 4 MiB */
    {"AllReduce", 0, 4 << 20, 5.0},   /* 16 MiB */
    {"AllGather", 1, 1 << 20, 3.0},   /* 4 MiB per rank, 8 MiB in all */
};
#define NOPS ((int)(sizeof step_ops / sizeof step_ops[0]))

typedef struct skew_cfg {
  const char *lib, *truth;
  int rank, nranks, steps, channels, kernel, slow_rank;
  unsigned long long seed, start_ns;
  double slow_us, jitter_us;
  /* Per (step, op), as run: took from before the first start to after the last stop, took_min
   * from after the last start to before the first stop. Whatever the plugin times lies between,
   * however late the machine woke this rank or preempted it between callbacks. */
  double *took, *took_min;
} skew_cfg;

/* splitmix64 of a tuple: every process draws the same numbers for the same (step, op, rank). */
static uint64_t draw(const skew_cfg* c, uint64_t a, uint64_t b, uint64_t d) {
  return mix64(mix64(mix64(c->seed ^ mix64(a)) ^ b) ^ d);
}

static int op_ranks(const skew_op* o, const skew_cfg* c) { return o->pair ? 2 : c->nranks; }

/* nccl-tests' size of the operation and the duration that gives its planted bus bandwidth. */
static uint64_t op_size(const skew_op* o, const skew_cfg* c) {
  uint64_t b = (uint64_t)o->count * 4;
  return strcmp(o->func, "AllGather") ? b : b * (uint64_t)op_ranks(o, c);
}

static double bus_factor(const skew_op* o, int n) {
  return strcmp(o->func, "AllReduce") ? (double)(n - 1) / n : 2.0 * (n - 1) / n;
}

static double op_duration_ns(const skew_op* o, const skew_cfg* c) {
  int n = op_ranks(o, c);
  return (double)op_size(o, c) * bus_factor(o, n) / o->busbw; /* bytes / (GB/s) = ns */
}

static int is_slow_step(const skew_cfg* c, int step) {
  return c->slow_rank >= 0 && draw(c, 0x5105, (uint64_t)step, 0) % 4 == 0;
}

static double jitter_ns(const skew_cfg* c, int step, int op, int rank) {
  return (double)(draw(c, (uint64_t)step, (uint64_t)op, (uint64_t)rank) >> 11) / 9007199254740992.0 * c->jitter_us * 1e3;
}

/* Each operation owns a slot long enough for the latest arrival and its duration, plus 1 ms. */
static double slot_ns(const skew_cfg* c, int op) {
  return c->slow_us * 1e3 + c->jitter_us * 1e3 + op_duration_ns(&step_ops[op], c) + 1e6;
}

static double arrival_ns(const skew_cfg* c, int step, int op, int rank) {
  double t = 0;
  for (int s = 0; s <= step; s++)
    for (int k = 0; k < NOPS && (s < step || k < op); k++) t += slot_ns(c, k);
  t += jitter_ns(c, step, op, rank);
  if (rank == c->slow_rank && is_slow_step(c, step)) t += c->slow_us * 1e3; /* slow all step long */
  return t; /* from --start-ns */
}

/* The collective completes on every rank when the last has arrived plus its duration. */
static double completion_ns(const skew_cfg* c, int step, int op) {
  int me = c->rank, n = op_ranks(&step_ops[op], c), first = step_ops[op].pair ? me - me % 2 : 0;
  double last = 0;
  for (int r = first; r < first + n; r++) {
    double a = arrival_ns(c, step, op, r);
    if (a > last) last = a;
  }
  return last + op_duration_ns(&step_ops[op], c);
}

static void sleep_until(const skew_cfg* c, double t) {
  uint64_t at = c->start_ns + (uint64_t)t;
  struct timespec ts = {.tv_sec = (time_t)(at / 1000000000ull), .tv_nsec = (long)(at % 1000000000ull)};
  while (clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, NULL) == EINTR) {
  }
}

/* Runs one collective on this rank: starts at its arrival, completes with the last rank. */
static void run_op(const skew_cfg* c, hcomm* comm, int step, int op) {
  host_plugin* p = &W.plugin;
  const skew_op* o = &step_ops[op];
  sleep_until(c, arrival_ns(c, step, op, c->rank));
  double began = real_ns();
  host_ev ge = {.type = NPABI_GROUP};
  void* grp = start_event(comm->ctx, &ge, 0);
  host_ev ce = {.type = NPABI_COLL, .parent_group = grp, .rank = comm->rank, .comm_name = comm->name,
                .comm_hash = comm->hash, .seq = comm->seq[strcmp(o->func, "AllReduce") != 0]++, .func = o->func, .count = o->count,
                .dtype = "ncclFloat32", .algo = "RING", .proto = "SIMPLE", .nchannels = (uint8_t)c->channels,
                .nwarps = 16};
  void* coll = start_event(comm->ctx, &ce, 0);
  host_stop(p, coll);
  void *proxy[32], *step_h[32], *kch[32] = {0};
  size_t per_ch = (size_t)(op_size(o, c) / (uint64_t)c->channels), cum = 0;
  for (int ch = 0; ch < c->channels; ch++) {
    host_ev pe = {.type = NPABI_PROXY_OP, .parent = coll, .rank = comm->rank, .pid = getpid(), .channel = (uint8_t)ch,
                  .peer = (comm->rank + 1) % comm->nranks, .nsteps = 1, .chunk = (int)per_ch, .is_send = 1};
    proxy[ch] = start_event(comm->ctx, &pe, 0);
    host_op_in_progress(p, proxy[ch]);
    host_ev se = {.type = NPABI_PROXY_STEP, .parent = proxy[ch], .rank = comm->rank, .step = 0};
    step_h[ch] = start_event(comm->ctx, &se, 0);
    host_step_state(p, proxy[ch], step_h[ch], NPABI_PROXY_STEP_SEND_GPU_WAIT, 0, &cum);
    host_step_state(p, proxy[ch], step_h[ch], NPABI_PROXY_STEP_SEND_WAIT, per_ch, &cum);
    if (c->kernel) {
      host_ev ke = {.type = NPABI_KERNEL_CH, .parent = coll, .channel = (uint8_t)ch, .ptimer = gpu_ns()};
      kch[ch] = start_event(comm->ctx, &ke, 0);
    }
  }
  host_stop(p, grp);
  double started = real_ns();
  sleep_until(c, completion_ns(c, step, op));
  double stopping = real_ns();
  for (int ch = 0; ch < c->channels; ch++) {
    host_stop(p, step_h[ch]);
    host_stop(p, proxy[ch]);
    if (kch[ch]) {
      host_kernel_stop(p, kch[ch], gpu_ns());
      host_stop(p, kch[ch]);
    }
  }
  c->took[step * NOPS + op] = real_ns() - began;
  c->took_min[step * NOPS + op] = stopping - started;
}

static void write_truth(const skew_cfg* c, hcomm* world, hcomm* pair) {
  FILE* f = fopen(c->truth, "w");
  if (!f) {
    perror(c->truth);
    exit(1);
  }
  fprintf(f, "{\"scenario\":\"skew\",\"pid\":%d,\"rank\":%d,\"nranks\":%d,\"seed\":%llu,\"start_ns\":\"%llu\",", (int)getpid(),
          c->rank, c->nranks, c->seed, c->start_ns);
  fprintf(f, "\"slow_rank\":%d,\"slow_us\":%.1f,\"jitter_us\":%.1f,\"steps\":%d,\"step_label\":\"train step %%d\",\"slow_steps\":[",
          c->slow_rank, c->slow_us, c->jitter_us, c->steps);
  for (int s = 0, n = 0; s < c->steps; s++)
    if (is_slow_step(c, s)) fprintf(f, "%s%d", n++ ? "," : "", s);
  /* This rank's planned arrivals, in the order it runs them: a test checks the machine kept the
   * schedule (a process woken late arrives late) before it trusts the truth. */
  fprintf(f, "],\"arrivals_ns\":[");
  for (int s = 0; s < c->steps; s++)
    for (int k = 0; k < NOPS; k++) fprintf(f, "%s%.0f", s || k ? "," : "", arrival_ns(c, s, k, c->rank));
  /* How long each took as run: a busy machine wakes a process late, and the bandwidths the plugin
   * measures are those of the run, not of the plan. */
  fprintf(f, "],\"took_ns\":[");
  for (int i = 0; i < c->steps * NOPS; i++) fprintf(f, "%s%.0f", i ? "," : "", c->took[i]);
  fprintf(f, "],\"took_min_ns\":[");
  for (int i = 0; i < c->steps * NOPS; i++) fprintf(f, "%s%.0f", i ? "," : "", c->took_min[i]);
  fprintf(f, "],\"slow_ops\":\"all\",\"ops\":[");
  for (int k = 0; k < NOPS; k++) {
    const skew_op* o = &step_ops[k];
    hcomm* cm = o->pair ? pair : world;
    fprintf(f, "%s{\"comm\":\"%s\",\"hash\":\"0x%016llx\",\"nranks\":%d,\"func\":\"%s\",\"bytes\":%llu,\"busbw_GBps\":%.3f,\"duration_ns\":%.0f}",
            k ? "," : "", cm->name, (unsigned long long)cm->hash, cm->nranks, o->func, (unsigned long long)op_size(o, c),
            o->busbw, op_duration_ns(o, c));
  }
  fprintf(f, "]}\n");
  fclose(f);
}

static void skew_usage(void) {
  fprintf(stderr,
          "usage: ncclprof-testhost --lib PLUGIN.so --rank R --nranks N --start-ns UNIX_NS [--seed S]\n"
          "         [--steps N (24)] [--slow-rank R (-1: none)] [--slow-us D (3000)] [--jitter-us J (30)]\n"
          "         [--channels C (2)] [--kernel] [--truth FILE] skew\n"
          "  every rank of the job is started with the same --seed and --start-ns (a CLOCK_REALTIME\n"
          "  instant far enough ahead for all to have started)\n");
  exit(2);
}

/* Reads the skew scenario's own options (the other scenarios' parser does not know them). */
static skew_cfg parse(int argc, char** argv) {
  skew_cfg c = {.nranks = 4, .steps = 24, .channels = 2, .slow_rank = -1, .seed = 1, .slow_us = 3000, .jitter_us = 30};
  const struct {
    const char* flag;
    char kind; /* s: string, i: int, u: unsigned long long, d: double */
    void* dst;
  } opts[] = {{"--lib", 's', &c.lib}, {"--truth", 's', &c.truth}, {"--rank", 'i', &c.rank},
              {"--nranks", 'i', &c.nranks}, {"--steps", 'i', &c.steps}, {"--channels", 'i', &c.channels},
              {"--slow-rank", 'i', &c.slow_rank}, {"--seed", 'u', &c.seed}, {"--start-ns", 'u', &c.start_ns},
              {"--slow-us", 'd', &c.slow_us}, {"--jitter-us", 'd', &c.jitter_us}};
  for (int i = 1; i < argc - 1; i++) {
    if (!strcmp(argv[i], "--kernel")) {
      c.kernel = 1;
      continue;
    }
    size_t k = 0;
    while (k < sizeof opts / sizeof opts[0] && strcmp(argv[i], opts[k].flag)) k++;
    if (k == sizeof opts / sizeof opts[0] || i + 1 >= argc - 1) skew_usage();
    const char* v = argv[++i];
    switch (opts[k].kind) {
    case 's': *(const char**)opts[k].dst = v; break;
    case 'i': *(int*)opts[k].dst = atoi(v); break;
    case 'u': *(unsigned long long*)opts[k].dst = strtoull(v, NULL, 0); break;
    default: *(double*)opts[k].dst = atof(v);
    }
  }
  if (!c.lib || !c.start_ns || c.nranks < 2 || c.nranks % 2 || c.nranks > MAX_PEERS || c.rank < 0 ||
      c.rank >= c.nranks || c.channels < 1 || c.channels > 32 || c.steps < 1 || c.slow_rank >= c.nranks)
    skew_usage();
  return c;
}

int scenario_skew(int argc, char** argv) {
  skew_cfg c = parse(argc, argv);
  c.took = calloc((size_t)c.steps * NOPS, sizeof *c.took);
  c.took_min = calloc((size_t)c.steps * NOPS, sizeof *c.took_min);
  if (!c.took || !c.took_min) return 1;
  world_init(c.lib, 6, c.rank, c.nranks, 1, c.seed);
  int (*set_step)(const char*) = (int (*)(const char*))dlsym(W.plugin.lib, "ncclprof_set_step");
  hcomm* world = world_comm("world", 0x5CE3000000000000ull + c.seed, c.nranks, c.rank, 1);
  char pname[32];
  snprintf(pname, sizeof pname, "pair%d", c.rank / 2);
  hcomm* pair = world_comm(pname, 0x5CE3000000010000ull + c.seed * 0x100 + (uint64_t)(c.rank / 2), 2, c.rank % 2, 1);
  for (int s = 0; s < c.steps; s++)
    for (int k = 0; k < NOPS; k++) {
      if (k == 0 && set_step) {
        char label[32];
        sleep_until(&c, arrival_ns(&c, s, 0, c.rank) - 200e3); /* the step's work begins */
        snprintf(label, sizeof label, "train step %d", s);
        set_step(label);
      }
      run_op(&c, step_ops[k].pair ? pair : world, s, k);
    }
  world_finalize_all();
  if (c.truth) write_truth(&c, world, pair);
  return 0;
}
