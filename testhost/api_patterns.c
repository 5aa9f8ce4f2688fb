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
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

/* An AllReduce NCCL runs with a symmetric kernel: GroupApi and CollApi only. */
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

/* ---- v1order: NCCL 2.23's sends (ABI v1; transport/net.cc sendProxyProgress at v2.23.4-1) */

enum { V1_TRANSFERS = 4, V1_SLICE_STEPS = 2, V1_CHUNK = 65536 };

static void v1_op_state(void* op, int state, size_t total, int steps) {
  npabi_args_v1_t a;
  memset(&a, 0, sizeof a);
  a.proxyOp.transSize = total;
  a.proxyOp.steps = steps;
  host_raw_state(&W.plugin, op, state, &a);
}

/* One send ProxyOp as 2.23 runs it: a ProxyStep per raw step (sliceSteps of them per network
 * transfer, numbered raw), and SendTransmitted recorded before the transfer's size is added
 * to the op's total, so it carries the bytes of the transfers before it. */
static void v1_send(hcomm* c, void* coll, int peer) {
  host_plugin* p = &W.plugin;
  host_ev e = {.type = NPABI_PROXY_OP, .parent = coll, .rank = c->rank, .pid = getpid(), .peer = peer,
               .nsteps = V1_TRANSFERS * V1_SLICE_STEPS, .chunk = V1_CHUNK, .is_send = 1};
  void* op = start_event(c->ctx, &e, 0);
  size_t total = 0;
  for (int k = 0; k < V1_TRANSFERS; k++) {
    void* steps[V1_SLICE_STEPS];
    for (int r = 0; r < V1_SLICE_STEPS; r++) {
      host_ev se = {.type = NPABI_PROXY_STEP, .parent = op, .rank = c->rank, .step = k * V1_SLICE_STEPS + r};
      steps[r] = start_event(c->ctx, &se, 0);
    }
    int posted = (k + 1) * V1_SLICE_STEPS;
    v1_op_state(op, NPABI_PROXY_OP_SEND_POSTED, total, posted);
    for (int r = 0; r < V1_SLICE_STEPS; r++) host_raw_state(p, steps[r], NPABI_PROXY_STEP_SEND_GPU_WAIT, NULL);
    v1_op_state(op, NPABI_PROXY_OP_SEND_TRANSMITTED, total, posted); /* before the add, as 2.23 */
    for (int r = 0; r < V1_SLICE_STEPS; r++) host_raw_state(p, steps[r], NPABI_PROXY_STEP_SEND_WAIT, NULL);
    total += V1_CHUNK;
    if (W.realtime) spin_until(now_ns() + 5000);
    for (int r = 0; r < V1_SLICE_STEPS; r++) host_stop(p, steps[r]);
    v1_op_state(op, NPABI_PROXY_OP_SEND_DONE, total, posted);
  }
  host_stop(p, op);
  pthread_mutex_lock(&c->mu); /* what went on the wire */
  c->pairs[peer].sent_bytes += total;
  c->pairs[peer].send_transfers += V1_TRANSFERS;
  c->ch_transfers[0] += V1_TRANSFERS;
  c->ch_bytes[0] += total;
  if (c->used_channels < 1) c->used_channels = 1;
  pthread_mutex_unlock(&c->mu);
}

/* --iters AllReduces of one send each, NCCL 2.23's way (use with --abi 1). */
void scenario_v1order(const opts* op) {
  hcomm* c = world_comm("v1order", 0x1230000000000000ull + (uint64_t)op->seed, op->nranks, op->rank, 1);
  op_spec o = allreduce();
  o.count = V1_TRANSFERS * V1_CHUNK / 4;
  for (int i = 0; i < op->iters; i++) {
    host_ev ge = {.type = NPABI_GROUP};
    void* grp = start_event(c->ctx, &ge, 0);
    host_ev ce = {.type = NPABI_COLL, .parent = grp, .parent_group = grp, .rank = c->rank,
                  .comm_name = c->name, .comm_hash = c->hash, .seq = (uint64_t)i, .func = o.func,
                  .count = o.count, .dtype = o.dtype, .algo = o.algo, .proto = o.proto,
                  .nchannels = 1, .nwarps = 16};
    void* coll = start_event(c->ctx, &ce, 0);
    if (coll) truth_op_add(c, o.func, o.algo, o.proto, 1, (uint64_t)o.count * 4);
    v1_send(c, coll, (c->rank + 1) % c->nranks);
    host_stop(&W.plugin, coll);
    host_stop(&W.plugin, grp);
  }
}

/* ---- pxn: a rank whose sends go through another process's proxy (NCCL_PXN_DISABLE=0) */

/* Rank 0 of two nodes of two ranks: each step it sends to and receives from rank 2 on the
 * other node. Its send's network work runs in the proxy of the local rank on rank 2's rail, in
 * another process (enqueue.cc ncclProfilerAddPidToProxyOp: that proxy reports it with our pid
 * and parent), so no ProxyOp of the Send reaches this process; its receive runs here. This
 * process's proxy in turn runs a send of the other local rank (pxn_ops: a ProxyOp whose pid and
 * parent are that process's). */
void scenario_pxn(const opts* op) {
  hcomm* c = world_comm("pxnsender", 0x9C40000000000000ull + (uint64_t)op->seed, 4, 0, 2);
  proxy_start();
  double t0 = now_ns();
  for (int i = 0; i < op->iters; i += 2) {
    op_spec g[2] = {{.func = "Send", .count = 1 << 14, .dtype = "ncclFloat32", .nchannels = 1,
                     .is_p2p = 1, .peer = 2, .chunk = 1 << 15, .pxn = 1},
                    {.func = "Recv", .count = 1 << 14, .dtype = "ncclFloat32", .nchannels = 1,
                     .is_p2p = 1, .peer = 2, .chunk = 1 << 15}};
    launch_group(c, g, 2, 2);
    pxn_ops(c);
    pace(t0, i + 2, op->rate);
  }
  proxy_stop();
}

/* ---- maskchange: the event mask changed at run time (ncclprof_set_event_mask) */

/* AllReduces in three thirds: the mask in force; then p2p,p2papi, under which NCCL starts no
 * CollApi but stops the thread's last one again at every collective (api_handle_kept,
 * scenarios.c), and none of these collectives is asked for; then the first mask again. With
 * --kernel the middle third adds KernelCh instead: operations enqueued before it get no kernel
 * channels (NCCL fixed their mask at enqueue) and must not be taken for hung. The proxy's work
 * is drained at each change, since the host's proxy reads the mask when it runs. */
void scenario_maskchange(const opts* op) {
  hcomm* c = world_comm("maskchange", 0x3A5C000000000000ull + (uint64_t)op->seed, op->nranks, op->rank, 1);
  int (*set_mask)(int) = (int (*)(int))dlsym(W.plugin.lib, "ncclprof_set_event_mask");
  int (*get_mask)(void) = (int (*)(void))dlsym(W.plugin.lib, "ncclprof_get_event_mask");
  int first = get_mask ? get_mask() : W.plugin.mask;
  proxy_start();
  double t0 = now_ns();
  for (int i = 0; i < op->iters; i++) {
    if (set_mask && (i == op->iters / 3 || i == 2 * op->iters / 3)) {
      proxy_drain();
      set_mask(i != op->iters / 3 ? first : op->kernel ? first | NPABI_KERNEL_CH : NPABI_P2P | NPABI_P2P_API);
    }
    op_spec o = allreduce();
    o.kernel = op->kernel;
    launch_group(c, &o, 1, 1);
    pace(t0, i + 1, op->rate);
  }
  proxy_stop();
}

/* ---- nonblocking: a communicator created with config.blocking = 0 */

typedef struct plan_arg {
  hcomm* c;
  op_spec* ops;
  int n;
  void** api;
} plan_arg;

static void* plan_thread(void* arg) {
  plan_arg* a = (plan_arg*)arg;
  plan_tasks(a->c, a->ops, a->n, a->api);
  return NULL;
}

/* ncclGroupEnd on a non-blocking communicator returns ncclInProgress and leaves the launch to a
 * thread it starts for that group (group.cc: a new thread per ncclGroupEnd): the API events on
 * the user's thread, the GroupApi stopped while the Group and Coll/P2p start on a thread that
 * lives for one group, 12,000 of them. Every other operation is a symmetric-kernel AllReduce
 * (no Coll), whose count must not be confused with the launched ones' late Coll. */
void scenario_nonblocking(const opts* op) {
  hcomm* c = world_comm("nonblocking", 0x90B1000000000000ull + (uint64_t)op->seed, op->nranks, op->rank, 1);
  proxy_start();
  double t0 = now_ns();
  for (int i = 0; i < op->iters; i++) {
    op_spec o = i % 2 ? symmetric() : allreduce();
    void* api[1];
    void* gapi = api_calls(c, &o, 1, 1, 0, api);
    plan_arg a = {c, &o, 1, api};
    pthread_t t;
    pthread_create(&t, NULL, plan_thread, &a);
    host_stop(&W.plugin, gapi); /* ncclGroupEnd has returned */
    pthread_join(t, NULL);      /* ncclCommGetAsyncError until ncclSuccess */
    pace(t0, i + 1, op->rate);
  }
  proxy_stop();
}

/* ---- netstops: NetPlugin stops of events never started */

/* NCCL's net plugins stop each request's NetPlugin events through ncclProfilerCallback, which
 * calls stopEvent(*eHandle) whether or not the start was made (plugin/profiler.cc at 2.30.7: the
 * start is gated by the mask, the stop is not). Under a mask without NetPlugin, the request's
 * handle slot holds NULL (or what an earlier request left): two such stops per AllReduce, one
 * per direction. */
void scenario_netstops(const opts* op) {
  hcomm* c = world_comm("netstops", 0x3E75000000000000ull + (uint64_t)op->seed, op->nranks, op->rank, 1);
  npabi_result_t (*stop)(void*) = ((const npabi_profiler_v1_t*)W.plugin.table)->stopEvent;
  proxy_start();
  double t0 = now_ns();
  for (int i = 0; i < op->iters; i++) {
    op_spec o = allreduce();
    launch_group(c, &o, 1, 1);
    stop(NULL);
    stop(NULL);
    pace(t0, i + 1, op->rate);
  }
  proxy_stop();
}
