/*
 * scenarios.c — NCCL's call sequences (docs/nccl-profiler-api.md §3.1–§3.10), replayed on the
 * user thread, the proxy thread and a CUDA-callback thread, with ground truth kept in world.
 */
#define _GNU_SOURCE
#include "scenarios.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "world.h"

size_t dtype_size(const char* d) {
  if (!strcmp(d, "ncclFloat32") || !strcmp(d, "ncclInt32") || !strcmp(d, "ncclUint32")) return 4;
  if (!strcmp(d, "ncclFloat64") || !strcmp(d, "ncclInt64") || !strcmp(d, "ncclUint64")) return 8;
  if (!strcmp(d, "ncclFloat16") || !strcmp(d, "ncclBfloat16")) return 2;
  return 1;
}

static int func_idx(const char* f) {
  static const char* const names[] = {"Broadcast", "Reduce", "AllGather", "ReduceScatter",
                                      "AllReduce", "SendRecv", "Send", "Recv"};
  for (int i = 0; i < 8; i++)
    if (!strcmp(f, names[i])) return i;
  return 15;
}

/* nccl-tests' size of an operation from the count the Coll event carries. What the plugin can
 * report: ABI v1–v3 do not pass the communicator size, so there it stays per rank. */
static uint64_t op_bytes(const op_spec* o, int nranks) {
  uint64_t b = (uint64_t)o->count * dtype_size(o->dtype);
  if ((!strcmp(o->func, "AllGather") || !strcmp(o->func, "ReduceScatter")) && W.plugin.abi >= 4)
    b *= (uint64_t)nranks;
  return b;
}

/* The bytes the network moves for an operation (independent of what the plugin can know). */
static uint64_t wire_bytes(const op_spec* o, int nranks) {
  uint64_t b = (uint64_t)o->count * dtype_size(o->dtype);
  if (!strcmp(o->func, "AllGather") || !strcmp(o->func, "ReduceScatter")) b *= (uint64_t)nranks;
  return b;
}

/* nccl-tests' size of a call from its API event (v5+, which passes the communicator size). */
uint64_t api_bytes(const host_ev* api, int nranks) {
  uint64_t b = (uint64_t)api->count * dtype_size(api->dtype);
  if (!strcmp(api->func, "AllGather") || !strcmp(api->func, "ReduceScatter")) b *= (uint64_t)nranks;
  return b;
}

/* Splits `bytes` into steps of at most `chunk`. */
static int split_steps(uint64_t bytes, size_t chunk, size_t* sizes, int max) {
  int n = 0;
  while (bytes > 0 && n < max) {
    size_t s = bytes > chunk ? chunk : (size_t)bytes;
    sizes[n++] = s;
    bytes -= s;
  }
  return n;
}

/* The network work of one operation on one channel: ring collectives send to the next rank
 * and receive from the previous; P2P talks to its peer. Returns jobs queued. */
static int plan_jobs(hcomm* c, const op_spec* o, void* handle, int truth, int ch, job* out) {
  int n = 0;
  int next = (c->rank + 1) % c->nranks, prev = (c->rank + c->nranks - 1) % c->nranks;
  uint64_t total = wire_bytes(o, c->nranks);
  size_t chunk = o->chunk ? o->chunk : 128 * 1024;
  job base = {.comm = c, .ctx = c->ctx, .parent = handle, .pid = getpid(), .channel = ch,
              .truth_op = truth, .t_op_start = 0, .kernel = o->kernel, .slice_steps = 1};
  /* NCCL's ring collectives on SIMPLE move sliceSteps = NCCL_STEPS/4 raw steps per transfer
   * (enqueue.cc); LL, LL128 and P2P one. */
  if (!o->is_p2p && o->proto && !strcmp(o->proto, "SIMPLE")) base.slice_steps = 2;
  if (o->is_p2p) {
    if (o->peer == c->rank) { /* self send/recv: no proxy work, maybe a kernel channel */
      if (o->kernel) {
        out[n] = base;
        out[n].peer = o->peer;
        n++;
      }
      return n;
    }
    out[n] = base;
    out[n].peer = o->peer;
    out[n].is_send = !strcmp(o->func, "Send");
    out[n].nsteps = split_steps(total / (uint64_t)o->nchannels, chunk, out[n].sizes, 64);
    return n + 1;
  }
  if (c->nranks < 2) return 0;
  if (o->collnet) { /* a send and a receive ProxyOp toward the CollNet, neither one net.cc's */
    for (int k = 0; k < 2; k++) {
      out[n] = base;
      out[n].peer = k ? prev : next;
      out[n].no_stop = 1;
      out[n].kernel = k ? 0 : o->kernel;
      out[n].nsteps = split_steps(total / (uint64_t)o->nchannels, chunk, out[n].sizes, 64);
      n++;
    }
    return n;
  }
  base.restarts = o->restarts;
  uint64_t per_ch = total * 2 * (uint64_t)(c->nranks - 1) / (uint64_t)c->nranks / (uint64_t)o->nchannels;
  out[n] = base;
  out[n].peer = next;
  out[n].is_send = 1;
  out[n].nsteps = split_steps(per_ch, chunk, out[n].sizes, 64);
  n++;
  out[n] = base;
  out[n].peer = prev;
  out[n].is_send = 0;
  out[n].kernel = 0;
  out[n].nsteps = split_steps(per_ch, chunk, out[n].sizes, 64);
  return n + 1;
}

/* NCCL keeps the CollApi handle in thread-local state and never clears it at the stop
 * (plugin/profiler.cc ncclProfilerStopCollApiEvent, 2.28–2.30): a collective whose CollApi the
 * mask no longer starts stops the last one started on the thread again. P2pApi's is cleared. */
static void* api_handle_kept(int p2p, void* started) {
  static __thread void* coll_api;
  if (p2p) return started;
  if (started) coll_api = started;
  return coll_api;
}

/* The API side of one ncclGroupEnd's worth of work, in NCCL's order (§3.2): the GroupApi
 * (`depth` 1 for a lone call; captured in a CUDA graph with `graph`), each call's API event
 * (handles in api[]), and the KernelLaunch when a call has a task on the plan's queues
 * (ncclProfilerStartKernelLaunchEvent looks for its mask there; api_only ones have none). Returns the
 * GroupApi, still open. Calls NCCL runs without a Coll (op_spec.api_only) get their truth here
 * and, for CE collectives, their CE events. */
void* api_calls(hcomm* c, op_spec* ops, int n, int depth, int graph, void** api) {
  host_plugin* p = &W.plugin;
  host_ev ga = {.type = NPABI_GROUP_API, .depth = depth, .graph = graph};
  void* gapi = start_event(c->ctx, &ga, 0);
  host_group_api_state(p, gapi, NPABI_GROUP_START_API_STOP);
  int launch = 0;
  for (int i = 0; i < n; i++) {
    op_spec* o = &ops[i];
    host_ev e = {.type = o->is_p2p ? NPABI_P2P_API : NPABI_COLL_API, .parent = gapi,
                 .func = o->api_func ? o->api_func : o->func, .count = o->api_count ? o->api_count : o->count,
                 .dtype = o->api_dtype ? o->api_dtype : o->dtype, .root = o->root,
                 .stream = (void*)0x5000, .graph = graph};
    api[i] = start_event(c->ctx, &e, 0);
    if (api[i] && o->api_only && !graph)
      truth_op_add(c, e.func, "", "", 0, api_bytes(&e, c->nranks));
    if (o->api_only == API_ONLY_CE) ce_events(c, api[i]);
    host_stop(p, api_handle_kept(o->is_p2p, api[i]));
    launch |= !o->api_only;
  }
  host_group_api_state(p, gapi, NPABI_GROUP_END_API_START);
  if (launch) {
    host_ev kl = {.type = NPABI_KERNEL_LAUNCH, .parent = gapi, .stream = (void*)0x5000};
    host_stop(p, start_event(c->ctx, &kl, 0));
  }
  return gapi;
}

/* One ncclGroupEnd's worth of work: the API calls, the launch, and the plan's tasks. */
void launch_group(hcomm* c, op_spec* ops, int n, int depth) {
  void* api[64];
  void* gapi = api_calls(c, ops, n, depth, 0, api);
  plan_tasks(c, ops, n, api);
  host_stop(&W.plugin, gapi);
}

/* What hostStreamPlanTask does for a plan (enqueue.cc): the Group and each task NCCL plans (not
 * the api_only ones), each with its API call as parent, their proxy work queued. A CUDA graph
 * replay does this again with the capture's API handles. */
void plan_tasks(hcomm* c, op_spec* ops, int n, void** api) {
  host_plugin* p = &W.plugin;
  host_ev ge = {.type = NPABI_GROUP};
  void* grp = start_event(c->ctx, &ge, 0);
  job jobs[128];
  int nj = 0;
  static uint64_t plans;
  uint64_t plan = ++plans;
  for (int i = 0; i < n; i++) {
    op_spec* o = &ops[i];
    if (o->api_only) continue;
    host_ev e = {.type = o->is_p2p ? NPABI_P2P : NPABI_COLL, .parent = api[i],
                 .parent_group = grp, .rank = c->rank, .comm_name = c->name,
                 .comm_hash = c->hash, .func = o->func, .count = o->count, .dtype = o->dtype,
                 .algo = o->algo, .proto = o->proto, .root = o->root, .peer = o->peer,
                 .nchannels = (uint8_t)o->nchannels, .nwarps = 16};
    if (!o->is_p2p) e.seq = c->seq[func_idx(o->func)]++;
    /* The completion truth starts here, just before the plugin stamps the Coll/P2p: from the
     * Group's start it also held the earlier operations' planning and any preemption in it. */
    double t0 = now_ns();
    void* h = start_event(c->ctx, &e, 1);
    double t0_after = now_ns();
    int truth = -1;
    if (h && !o->no_truth)
      truth = truth_op_add(c, o->func, o->is_p2p ? "" : o->algo, o->is_p2p ? "" : o->proto,
                           o->is_p2p && p->abi < 4 ? 0 : o->nchannels, op_bytes(o, c->nranks));
    int first = nj;
    for (int ch = 0; ch < o->nchannels && nj < 120 && !o->pxn; ch++) nj += plan_jobs(c, o, h, truth, ch, &jobs[nj]);
    for (int k = first; k < nj; k++) {
      jobs[k].t_op_start = t0;
      jobs[k].t_op_started = t0_after;
      jobs[k].last_of_op = k == nj - 1;
      jobs[k].plan = plan;
      /* A planted slow send: its steps share the delay (ProxyOps run one after another). */
      jobs[k].slow_ns = o->slow_ns + (jobs[k].is_send && jobs[k].nsteps > 0 ? o->send_slow_ns / jobs[k].nsteps : 0);
      jobs[k].gpu_delay_ns = o->gpu_delay_ns;
      jobs[k].arrived = W.op_barrier;
    }
    host_stop(p, h); /* "enqueued", long before the proxy finishes */
  }
  for (int k = 0; k < nj; k++) proxy_submit(&jobs[k]);
  host_stop(p, grp);
}

/* ------------------------------------------------------------------- scenarios */

static const char* const dtypes[] = {"ncclFloat32", "ncclBfloat16", "ncclFloat16", "ncclInt64"};
static const size_t counts[] = {1 << 14, 1 << 16, 1 << 18, 1 << 20, 3 << 19};

static op_spec coll_spec(const char* func, int nch, int kernel) {
  op_spec o = {.func = func, .count = counts[rnd() % 5], .dtype = dtypes[rnd() % 4],
               .algo = rnd() % 3 ? "RING" : "TREE", .proto = "SIMPLE", .nchannels = nch,
               .kernel = kernel, .chunk = 256 * 1024};
  if (!strcmp(func, "AllGather") || !strcmp(func, "Broadcast")) {
    /* NCCL turns these into byte counts of ncclInt8 on the Coll event (§3.7). */
    o.api_func = func;
    o.api_count = o.count;
    o.api_dtype = o.dtype;
    o.count = o.count * dtype_size(o.dtype);
    o.dtype = "ncclInt8";
  }
  return o;
}

/* The plugin's control API, as Python calls it through ctypes (NULL when the library has none). */
typedef struct control {
  int (*trace_start)(const char*);
  int (*trace_stop)(void);
  int (*set_step)(const char*);
  int (*flush)(int);
} control;

static control control_api(void) {
  control k = {(int (*)(const char*))dlsym(W.plugin.lib, "ncclprof_trace_start"),
               (int (*)(void))dlsym(W.plugin.lib, "ncclprof_trace_stop"),
               (int (*)(const char*))dlsym(W.plugin.lib, "ncclprof_set_step"),
               (int (*)(int))dlsym(W.plugin.lib, "ncclprof_flush")};
  return k;
}

void scenario_allreduce(const opts* op) {
  hcomm* c = world_comm("allreduce", 0xA11EDCE000000001ull + (uint64_t)op->seed, op->nranks, op->rank, 1);
  control k = control_api();
  proxy_start();
  for (int i = 0; i < op->iters; i++) {
    if ((op->control || op->labels) && k.set_step) {
      char label[32];
      snprintf(label, sizeof label, "iter %d", i);
      k.set_step(label);
    }
    /* As Python calls them: no flush before a start or a stop. The window is the interval
     * between the two calls, whatever the drainer has read by then. */
    if (op->control && k.trace_start && i == op->iters / 3) {
      proxy_drain(); /* the previous operation has finished: it is outside the window */
      k.trace_start(NULL);
    }
    if (op->control && k.trace_stop && i == 2 * op->iters / 3) {
      proxy_drain(); /* the last operation of the window has finished */
      k.trace_stop();
      k.flush(5000);
    }
    op_spec o = coll_spec("AllReduce", op->channels, op->kernel);
    o.algo = "RING";
    if (i == op->slow_op) {
      o.slow_ns = op->slow_us * 1e3;
      fprintf(stderr, "testhost: AllReduce seq %llu is planted slow (+%.0f us per step)\n",
              (unsigned long long)c->seq[4], op->slow_us);
    }
    launch_group(c, &o, 1, 1);
    if (op->pace_us > 0) {
      long us = (long)op->pace_us;
      struct timespec ts = {(time_t)(us / 1000000), (us % 1000000) * 1000};
      nanosleep(&ts, NULL);
    }
  }
  proxy_stop();
}

/* Sends and receives with every peer (and itself) of distinct latency and bandwidth: the
 * ground truth for the rank-pair regression. */
void scenario_p2p(const opts* op) {
  hcomm* c = world_comm("p2p", 0x9292929200000002ull + (uint64_t)op->seed, op->nranks, op->rank, 2);
  static const size_t sizes[] = {64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20};
  proxy_start();
  for (int i = 0; i < op->iters; i++) {
    op_spec ops[2 * MAX_PEERS];
    int n = 0;
    for (int peer = 0; peer < c->nranks; peer++) {
      size_t bytes = sizes[rnd() % 6];
      for (int send = 1; send >= 0; send--) {
        op_spec o = {.func = send ? "Send" : "Recv", .count = bytes / 4, .dtype = "ncclFloat32",
                     .nchannels = 1, .is_p2p = 1, .peer = peer, .kernel = op->kernel,
                     .chunk = 512 * 1024};
        ops[n++] = o;
      }
    }
    launch_group(c, ops, n, 2); /* the user's own ncclGroupStart/End */
  }
  proxy_stop();
}

/* ncclAlltoAll as NCCL expands it: one implicit group (depth 1) of Send/Recv P2pApi calls. */
static void alltoall(hcomm* c, size_t count, int kernel, int truth) {
  op_spec ops[2 * MAX_PEERS];
  int n = 0;
  for (int peer = 0; peer < c->nranks; peer++)
    for (int send = 1; send >= 0; send--) {
      op_spec o = {.func = send ? "Send" : "Recv", .count = count, .dtype = "ncclFloat32",
                   .nchannels = 2, .is_p2p = 1, .peer = peer, .kernel = kernel,
                   .chunk = 128 * 1024, .no_truth = W.plugin.abi >= 5 || !truth};
      ops[n++] = o;
    }
  launch_group(c, ops, n, 1);
  if (W.plugin.abi >= 5 && truth)
    truth_op_add(c, "AlltoAll", "", "", 2, (uint64_t)count * 4 * (uint64_t)c->nranks);
}

void scenario_alltoall(const opts* op) {
  hcomm* c = world_comm("alltoall", 0xA2A0000000000003ull + (uint64_t)op->seed, op->nranks, op->rank, 1);
  proxy_start();
  for (int i = 0; i < op->iters; i++) alltoall(c, (1 << 16) << (rnd() % 4), op->kernel, 1);
  proxy_stop();
}

/* ---- mixed: every event type, three NCCL threads, several communicators, PXN, graphs */

static void proxy_ctrl_burst(hcomm* c) {
  host_plugin* p = &W.plugin;
  host_ev e = {.type = NPABI_PROXY_CTRL};
  void* h = start_event(c->ctx, &e, 0);
  host_ctrl_state(p, h, NPABI_PROXY_CTRL_SLEEP, 0);
  host_ctrl_state(p, h, NPABI_PROXY_CTRL_WAKEUP, 0);
  host_stop(p, h);
  h = start_event(c->ctx, &e, 0);
  host_ctrl_state(p, h, NPABI_PROXY_CTRL_APPEND, 0);
  host_ctrl_state(p, h, NPABI_PROXY_CTRL_APPEND_END, 3);
  host_stop(p, h);
  h = start_event(c->ctx, &e, 0);
  host_ctrl_state(p, h, NPABI_PROXY_CTRL_ACTIVE, 0);
  host_stop(p, h);
}

/* A network-plugin event under a ProxyStep (IB queue pair), as net plugins emit them. */
static void net_events(hcomm* c, void* step) {
  host_plugin* p = &W.plugin;
  static npabi_net_ib_v1_t ib = {.type = 1, .qp = {.device = 3, .wr_id = 77, .opcode = 2, .qpNum = 9, .length = 4096}};
  host_ev e = {.type = NPABI_NET_PLUGIN, .parent = step, .rank = c->rank,
               .net_id = NPABI_NET_TYPE_IB | 1, .net_data = &ib};
  void* h = start_event(c->ctx, &e, 0);
  host_net_update(p, h, &ib);
  host_stop(p, h);
}

/* PXN: another process's proxy runs our... no: we run *another process's* op. Its context and
 * parent are that process's pointers; the plugin must not dereference them. */
void pxn_ops(hcomm* c) {
  host_plugin* p = &W.plugin;
  static char foreign_ctx[64];
  host_ev e = {.type = NPABI_PROXY_OP, .parent = (void*)0x7f00deadbeef, .rank = (c->rank + 1) % c->nranks,
               .pid = getpid() + 100000, .channel = 3, .peer = c->rank, .nsteps = 2,
               .chunk = 65536, .is_send = 1};
  void* op = start_event(foreign_ctx, &e, 0);
  host_op_in_progress(p, op);
  size_t cum = 0;
  for (int s = 0; s < 2; s++) {
    host_ev se = {.type = NPABI_PROXY_STEP, .parent = op, .rank = e.rank, .step = s};
    void* st = start_event(foreign_ctx, &se, 0);
    host_step_state(p, op, st, NPABI_PROXY_STEP_SEND_GPU_WAIT, 0, &cum);
    host_step_state(p, op, st, NPABI_PROXY_STEP_SEND_WAIT, 65536, &cum);
    if (s == 0) net_events(c, st);
    host_stop(p, st);
  }
  host_stop(p, op);
}

/* CUDA graph replay on a host-callback thread: Group/Coll fire again with the CollApi handle
 * captured long ago as parent (§3.6). Every replay carries the seq of the next eager collective
 * of its function, not advanced, unless KernelCh is on (src/plugin/profiler.cc
 * ncclProfilerStartTaskEvents, the `persistent` test, v2.26.2-1 to v2.30.7-1). */
typedef struct replay_arg {
  hcomm* c;
  void* stale_api;
  int n, kernel;
} replay_arg;

static void* replay_main(void* a) {
  replay_arg* r = (replay_arg*)a;
  host_plugin* p = &W.plugin;
  for (int i = 0; i < r->n; i++) {
    host_ev ge = {.type = NPABI_GROUP};
    void* grp = start_event(r->c->ctx, &ge, 0);
    host_ev e = {.type = NPABI_COLL, .parent = r->stale_api, .parent_group = grp, .rank = r->c->rank,
                 .comm_name = r->c->name, .comm_hash = r->c->hash, .func = "AllReduce",
                 .count = 4096, .dtype = "ncclFloat32", .algo = "RING", .proto = "LL",
                 .nchannels = 1};
    e.seq = r->kernel ? r->c->seq[func_idx("AllReduce")]++ : r->c->seq[func_idx("AllReduce")];
    void* h = start_event(r->c->ctx, &e, 1);
    if (h) truth_op_add(r->c, "AllReduce", "RING", "LL", 1, 4096 * 4);
    job j = {.comm = r->c, .ctx = r->c->ctx, .parent = h, .pid = getpid(), .channel = 0,
             .peer = (r->c->rank + 1) % r->c->nranks, .is_send = 1, .nsteps = 1, .truth_op = -1};
    j.sizes[0] = 16384;
    run_job(&j); /* replays run their proxy work right away */
    host_stop(p, h);
    host_stop(p, grp);
  }
  return NULL;
}

void ce_events(hcomm* c, void* coll_api) {
  host_plugin* p = &W.plugin;
  host_ev e = {.type = NPABI_CE_COLL, .parent = coll_api, .rank = c->rank, .func = "AllGather",
               .count = 1 << 20, .dtype = "ncclInt8", .sync = "UC", .ce_seq = 5, .seq = 5,
               .stream = (void*)0x5000};
  void* ce = start_event(c->ctx, &e, 0);
  host_ev s = {.type = NPABI_CE_SYNC, .parent = ce, .rank = c->rank, .n = c->nranks, .flag = 1};
  void* sh = start_event(c->ctx, &s, 0);
  host_stop(p, sh);
  host_ev b = {.type = NPABI_CE_BATCH, .parent = ce, .rank = c->rank, .n = 4, .total_bytes = 1 << 20};
  void* bh = start_event(c->ctx, &b, 0);
  host_stop(p, bh);
  host_stop(p, ce);
}

void scenario_mixed(const opts* op) {
  int ncomms = op->comms > 0 ? op->comms : 3;
  hcomm* cs[MAX_COMMS];
  for (int i = 0; i < ncomms; i++) {
    char name[32];
    snprintf(name, sizeof name, "mixed%d", i);
    cs[i] = world_comm(name, 0x3170000000000000ull + (uint64_t)i * 0x1111 + (uint64_t)op->seed,
                       op->nranks, op->rank, 2);
  }
  proxy_start();
  /* Capture: the CollApi handle of a captured AllReduce, replayed later. */
  op_spec capture = {.func = "AllReduce", .count = 4096, .dtype = "ncclFloat32"};
  void* captured;
  host_stop(&W.plugin, api_calls(cs[0], &capture, 1, 1, 1, &captured));

  static const char* const funcs[] = {"AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Reduce"};
  for (int i = 0; i < op->iters; i++) {
    hcomm* c = cs[i % ncomms];
    switch (i % 6) {
    case 0: case 1: case 2: {
      op_spec o = coll_spec(funcs[rnd() % 5], 1 + (int)(rnd() % 4), op->kernel);
      launch_group(c, &o, 1, 1);
      break;
    }
    case 3: { /* a user group of collectives on one communicator */
      op_spec g[3] = {coll_spec("AllReduce", 2, op->kernel), coll_spec("AllGather", 2, op->kernel),
                      coll_spec("ReduceScatter", 1, op->kernel)};
      launch_group(c, g, 3, 2);
      break;
    }
    case 4: {
      op_spec g[2] = {{.func = "Send", .count = 1 << 16, .dtype = "ncclFloat32", .nchannels = 1,
                       .is_p2p = 1, .peer = (c->rank + 1) % c->nranks, .chunk = 1 << 17},
                      {.func = "Recv", .count = 1 << 16, .dtype = "ncclFloat32", .nchannels = 1,
                       .is_p2p = 1, .peer = c->rank, .chunk = 1 << 17}};
      launch_group(c, g, 2, 2);
      break;
    }
    default:
      alltoall(c, 1 << 14, op->kernel, 1);
    }
    if (i % 10 == 0) {
      proxy_drain();
      proxy_ctrl_burst(c);
      pxn_ops(c);
      if (W.plugin.abi >= 6) ce_events(c, captured);
    }
  }
  proxy_drain();
  pthread_t replay;
  replay_arg ra = {.c = cs[0], .stale_api = captured, .n = op->replays, .kernel = op->kernel};
  pthread_create(&replay, NULL, replay_main, &ra);
  pthread_join(replay, NULL);
  /* The eager AllReduce whose seq the replays carried (a rank whose plan has no proxy work
   * sees no replay: enqueue.cc ncclLaunchPrepare, hasProxyOps): said on stderr for the tests. */
  fprintf(stderr, "mixed: eager AllReduce after %d replays: seq %llu\n", op->replays,
          (unsigned long long)cs[0]->seq[func_idx("AllReduce")]);
  op_spec after = coll_spec("AllReduce", 1, op->kernel);
  launch_group(cs[0], &after, 1, 1);
  proxy_stop();
}

/* Communicators created and destroyed over and over, with NCCL's dlclose/dlopen in between. */
void scenario_cycles(const opts* op) {
  proxy_start();
  for (int cyc = 0; cyc < op->cycles; cyc++) {
    if (cyc > 0) {
      host_load(&W.plugin, W.plugin.path, W.plugin.abi);
      W.ncomms = 0;
    }
    hcomm* c = world_comm("cycle", 0xC1C1E00000000000ull + (uint64_t)cyc, op->nranks, op->rank, 1);
    for (int i = 0; i < op->iters; i++) {
      op_spec o = coll_spec("AllReduce", 2, op->kernel);
      launch_group(c, &o, 1, 1);
    }
    proxy_drain();
    if (cyc + 1 < op->cycles) {
      FILE* f = op->truth ? fopen(op->truth, cyc ? "a" : "w") : NULL;
      if (f) {
        truth_write(f, "cycles");
        fclose(f);
      }
      world_finalize_all();
      host_unload(&W.plugin);
    }
  }
  proxy_stop();
}

/* More communicators than the plugin's table holds (1023): the rest get a disabled context,
 * NCCL is not disturbed, and every communicator that was recorded gets its summary. */
void scenario_manycomms(const opts* op) {
  int n = op->comms > 0 ? op->comms : 1100;
  proxy_start();
  for (int i = 0; i < n && i < MAX_COMMS; i++) {
    char name[32];
    snprintf(name, sizeof name, "many%d", i);
    hcomm* c = world_comm(name, 0x3A3E000000000000ull + (uint64_t)i, op->nranks, op->rank, 1);
    op_spec o = {.func = "AllReduce", .count = 256, .dtype = "ncclFloat32", .algo = "RING",
                 .proto = "LL", .nchannels = 1, .chunk = 1024};
    launch_group(c, &o, 1, 1);
  }
  proxy_stop();
}

/* fork() after the plugin is loaded and busy: the child (a DataLoader worker, say) runs code
 * that never touches NCCL and exits normally; the parent carries on and finalizes. */
void scenario_fork(const opts* op) {
  hcomm* c = world_comm("fork", 0xF02C000000000001ull, op->nranks, op->rank, 1);
  proxy_start();
  for (int i = 0; i < op->iters; i++) {
    op_spec o = coll_spec("AllReduce", 2, op->kernel);
    launch_group(c, &o, 1, 1);
    if (i == op->iters / 2) {
      pid_t child = fork();
      if (child == 0) {
        volatile double x = 0;
        for (int k = 0; k < 20000000; k++) x += k * 0.5; /* NCCL-free work */
        /* An exit hook that flushes (the Python package has one) must not wait for a drainer
         * the child does not have, nor enter the Go runtime: both answer "forked child". */
        int (*flush)(int) = (int (*)(int))dlsym(W.plugin.lib, "ncclprof_flush");
        int (*mflush)(int) = (int (*)(int))dlsym(W.plugin.lib, "ncclprof_metrics_flush");
        if (flush && flush(5000) != 3) exit(5);
        if (mflush && mflush(5000) != 3) exit(6);
        exit(x > 0 ? 0 : 3); /* a normal exit: atexit handlers and destructors run */
      }
      int status = 0;
      if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status) ||
          WEXITSTATUS(status) != 0) {
        fprintf(stderr, "testhost: forked child failed (status %d)\n", status);
        exit(4);
      }
    }
  }
  proxy_stop();
}

/* One event type flooding: every AllReduce moves its bytes in 64-byte chunks, so each
 * operation brings 16384 ProxySteps, emitted as fast as the proxy thread can: many times what
 * the drainer reads per second, while the operations themselves come at a modest rate. The
 * steps must give way (dropped and counted) and every operation must still be recorded. */
void scenario_flood(const opts* op) {
  hcomm* c = world_comm("flood", 0xF100D00000000001ull + (uint64_t)op->seed, op->nranks, op->rank, 1);
  proxy_start();
  for (int i = 0; i < op->iters; i++) {
    op_spec o = {.func = "AllReduce", .count = 64 * 1024, .dtype = "ncclFloat32", .algo = "RING",
                 .proto = "SIMPLE", .nchannels = op->channels, .chunk = 64};
    launch_group(c, &o, 1, 1);
    proxy_drain(); /* like NCCL, the next collective waits for this one's network work */
  }
  proxy_stop();
}
