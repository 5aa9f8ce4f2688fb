/*
 * api_patterns.c — call patterns of NCCL 2.28+ (ABI v5/v6) in which the API events are all or
 * part of what NCCL reports (docs/nccl-api-patterns.md):
 *
 *   apionly      collectives NCCL runs without a Coll event, among ordinary ones: symmetric
 *                kernels (scheduler/symmetric_sched.cc frees the task before any Coll),
 *                CE collectives (ce_coll.cc: CeColl under the CollApi when the mask asks,
 *                no kernel launch), and Broadcasts of several roots in one group (2.29+,
 *                ncclTaskBcast), each beside ordinary AllReduces in the same group;
 *   graphreplay  a CUDA graph capturing an all-to-all and an AllReduce (API events once, no
 *                tasks), then replayed on a host-callback thread: each replay is
 *                hostStreamPlanTask's Group and tasks, parented by the capture-time handles.
 *
 * Both run --iters operations at --rate per second (default 2000), so a test can ask for
 * 12,000 operations with the hang watchdog on and check every one is counted once.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "scenarios.h"
#include "world.h"

/* Paces operation i of a run that started at t0 to `rate` per second. */
static void pace(double t0, int i, double rate) {
  double due = t0 + (double)i * 1e9 / (rate > 0 ? rate : 2000);
  double now = now_ns();
  if (due > now) {
    long ns = (long)(due - now);
    struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
    nanosleep(&ts, NULL);
  }
}

static op_spec allreduce(void) {
  return (op_spec){.func = "AllReduce", .count = 4096, .dtype = "ncclFloat32", .algo = "RING",
                   .proto = "LL", .nchannels = 1, .chunk = 16384};
}

/* An AllReduce NCCL runs with a symmetric kernel: GroupApi, CollApi, KernelLaunch, no Coll. */
static op_spec symmetric(void) {
  op_spec o = allreduce();
  o.count = 8192;
  o.dtype = "ncclBfloat16";
  o.api_only = API_ONLY_KERNEL;
  return o;
}

/* A Broadcast of one root among several in a group (2.29+: it stays an ncclTaskBcast). */
static op_spec bcast(int root) {
  return (op_spec){.func = "Broadcast", .count = 1024, .dtype = "ncclFloat32", .root = root,
                   .api_only = API_ONLY_KERNEL};
}

void scenario_apionly(const opts* op) {
  hcomm* c = world_comm("apionly", 0xA910000000000000ull + (uint64_t)op->seed, op->nranks, op->rank, 1);
  proxy_start();
  double t0 = now_ns();
  for (int i = 0, round = 0; i < op->iters; round++) {
    op_spec g[3];
    int n = 0, depth = 1;
    switch (round % 4) {
    case 0: g[n++] = allreduce(); break;
    case 1: g[n++] = symmetric(); break;
    case 2: /* a CE AllGather: no kernel; CeColl events when the mask asks for them */
      g[n++] = (op_spec){.func = "AllGather", .count = 1 << 16, .dtype = "ncclFloat32",
                         .api_only = API_ONLY_CE};
      break;
    default: /* the user's group: two Broadcast roots (no Coll) beside an ordinary AllReduce */
      g[n++] = bcast(0);
      g[n++] = bcast(1 % c->nranks);
      g[n++] = allreduce();
      depth = 2;
    }
    launch_group(c, g, n, depth);
    for (int k = 0; k < n; k++) pace(t0, i++, op->rate);
  }
  proxy_stop();
}

/* ---- graphreplay */

typedef struct capture {
  op_spec ops[2 * MAX_PEERS];
  void* api[2 * MAX_PEERS];
  int n;
} capture;

/* cudaStreamBeginCapture … ncclAlltoAll … EndCapture: the API events, graph-captured, and the
 * launch into the graph; no tasks (their Group and P2p come at each replay). */
static void capture_alltoall(hcomm* c, capture* cap) {
  cap->n = 0;
  for (int peer = 0; peer < c->nranks; peer++)
    for (int send = 1; send >= 0; send--)
      cap->ops[cap->n++] = (op_spec){.func = send ? "Send" : "Recv", .count = 2048, .dtype = "ncclFloat32",
                                     .nchannels = 1, .is_p2p = 1, .peer = peer, .chunk = 8192,
                                     .no_truth = 1};
  host_stop(&W.plugin, api_calls(c, cap->ops, cap->n, 1, 1, cap->api));
}

static void capture_allreduce(hcomm* c, capture* cap) {
  cap->n = 1;
  cap->ops[0] = allreduce();
  host_stop(&W.plugin, api_calls(c, cap->ops, 1, 1, 1, cap->api));
}

typedef struct replayer {
  hcomm* c;
  capture *a2a, *ar;
  int iters;
  double rate;
} replayer;

/* cudaGraphLaunch, over and over: the host callback runs hostStreamPlanTask for the plan. */
static void* replay_thread(void* arg) {
  replayer* r = (replayer*)arg;
  double t0 = now_ns();
  for (int i = 0; i < r->iters; i++) {
    capture* cap = i % 2 ? r->ar : r->a2a;
    plan_tasks(r->c, cap->ops, cap->n, cap->api);
    if (cap == r->a2a && cap->api[0]) /* rebuilt from its tasks by its API calls */
      truth_op_add(r->c, "AlltoAll", "", "", 1, 2048ull * 4 * (uint64_t)r->c->nranks);
    pace(t0, i + 1, r->rate);
  }
  return NULL;
}

void scenario_graphreplay(const opts* op) {
  hcomm* c = world_comm("graphreplay", 0x6AA9000000000000ull + (uint64_t)op->seed, op->nranks, op->rank, 1);
  static capture a2a, ar;
  proxy_start();
  capture_alltoall(c, &a2a);
  capture_allreduce(c, &ar);
  /* Without API events (v1–v4, or a mask without P2pApi) a replayed all-to-all is its sends
   * and receives, as NCCL reports them: its tasks carry the truth. */
  for (int k = 0; k < a2a.n; k++) a2a.ops[k].no_truth = a2a.api[0] != NULL;
  replayer r = {c, &a2a, &ar, op->iters, op->rate};
  pthread_t t;
  pthread_create(&t, NULL, replay_thread, &r);
  pthread_join(t, NULL);
  proxy_stop();
}
