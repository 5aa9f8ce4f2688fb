/*
 * emit.c — builds each ABI version's descriptors and state arguments from a version-neutral
 * host_ev, and applies NCCL's activation rules (a child type implies its ancestors).
 */
#define _GNU_SOURCE
#include "emit.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "calllog.h"
#include "era.h"

/* ------------------------------------------------------------------- call log */
/* With NCCLPROF_HOST_CALLLOG=FILE the host writes every callback it makes (calllog.h), so a
 * test can compare what NCCL sent with what a plugin chained behind ncclprof received. */

static FILE* calllog;
static pthread_mutex_t calllog_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t calllog_once = PTHREAD_ONCE_INIT;

static void calllog_open(void) {
  const char* path = getenv("NCCLPROF_HOST_CALLLOG");
  if (path && *path) calllog = fopen(path, "a");
}

static void host_ref(const void* p, char* out, size_t cap) {
  if (p == NULL) snprintf(out, cap, "0");
  else snprintf(out, cap, "%#llx", (unsigned long long)(uintptr_t)p);
}

/* One line: what, then the context or handle, then fields. */
static void log_call(const char* what, const char* key, const void* ref, const char* fields) {
  pthread_once(&calllog_once, calllog_open);
  if (!calllog) return;
  char r[40];
  host_ref(ref, r, sizeof r);
  pthread_mutex_lock(&calllog_mu);
  fprintf(calllog, "T%ld %s %s=%s%s\n", (long)syscall(SYS_gettid), what, key, r, fields);
  fflush(calllog);
  pthread_mutex_unlock(&calllog_mu);
}

static void* call_start(host_plugin* p, void* ctx, const void* d) {
  void* h = HOST_POISON;
  ((npabi_result_t(*)(void*, void**, const void*))((const npabi_profiler_v1_t*)p->table)->startEvent)(ctx, &h, d);
  pthread_once(&calllog_once, calllog_open);
  if (calllog) {
    char hs[40], fields[1100];
    host_ref(h, hs, sizeof hs);
    int n = snprintf(fields, sizeof fields, " h=%s", hs);
    calllog_descr(fields + n, sizeof fields - (size_t)n, p->abi, d, host_ref);
    log_call("start", "ctx", ctx, fields);
  }
  return h;
}

static void call_record(host_plugin* p, void* h, int s, void* a) {
  ((const npabi_profiler_v1_t*)p->table)->recordEventState(h, (npabi_state_t)s, a);
  char fields[256];
  int n = snprintf(fields, sizeof fields, " s=%d", s);
  calllog_args(fields + n, sizeof fields - (size_t)n, p->abi >= 4 ? 4 : 1, s, a);
  log_call("record", "h", h, fields);
}

void host_load(host_plugin* p, const char* path, int abi) {
  memset(p, 0, sizeof *p);
  p->abi = abi;
  p->path = path;
  p->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL); /* what NCCL's ncclOsDlopen does */
  if (p->lib == NULL) {
    fprintf(stderr, "testhost: cannot load %s: %s\n", path, dlerror());
    exit(2);
  }
  char sym[32];
  snprintf(sym, sizeof sym, "ncclProfiler_v%d", abi);
  p->table = dlsym(p->lib, sym);
  if (p->table == NULL) {
    fprintf(stderr, "testhost: %s has no %s\n", path, sym);
    exit(2);
  }
}

void host_unload(host_plugin* p) {
  if (p->lib) dlclose(p->lib);
  p->lib = NULL;
  p->table = NULL;
}

int host_has_type(const host_plugin* p, uint64_t t) { return (npabi_types_of(p->abi) & t) != 0; }

/* NCCL starts an event when the mask holds its bit or any descendant's (§2.5). NCCL 2.23–2.25
 * (v1, v2) start P2p tasks only under the Coll, ProxyOp or ProxyStep bit, not P2p's own
 * (misc/profiler.cc, ncclProfilerStartTaskEvents). */
static int host_wants(const host_plugin* p, uint64_t t) {
  int m = __atomic_load_n(&((host_plugin*)p)->mask, __ATOMIC_RELAXED);
  if (p->nccl) return nccl_mask_wants(p->nccl, m, t); /* --nccl: that release's rules (era.c) */
  if (p->abi <= 2 && t == NPABI_P2P) return m & (NPABI_COLL | NPABI_PROXY_OP | NPABI_PROXY_STEP);
  return host_mask_wants(m, t);
}

int host_mask_wants(int m, uint64_t t) { return npabi_mask_wants(m, t); }

npabi_logger_t host_logger;

void host_log(int level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  (void)flags;
  (void)line;
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "NCCL %s %s: %s\n", level == NPABI_LOG_WARN ? "WARN" : "INFO", file ? file : "", msg);
}

void* host_init(host_plugin* p, const char* name, uint64_t hash, int nnodes, int nranks,
                int rank) {
  void* ctx = NULL;
  switch (p->abi) {
  case 1: ((const npabi_profiler_v1_t*)p->table)->init(&ctx, &p->mask); break;
  case 2: ((const npabi_profiler_v2_t*)p->table)->init(&ctx, &p->mask); break;
  case 3: ((const npabi_profiler_v3_t*)p->table)->init(&ctx, &p->mask); break;
  case 4:
    ((const npabi_profiler_v4_t*)p->table)->init(&ctx, &p->mask, name, hash, nnodes, nranks, rank,
                                                 host_logger);
    break;
  case 5:
    ((const npabi_profiler_v5_t*)p->table)->init(&ctx, hash, &p->mask, name, nnodes, nranks, rank,
                                                 host_logger);
    break;
  default:
    ((const npabi_profiler_v6_t*)p->table)->init(&ctx, hash, &p->mask, name, nnodes, nranks, rank,
                                                 host_logger);
  }
  char fields[256] = "";
  if (p->abi >= 4)
    snprintf(fields, sizeof fields, " id=%llu name=%s nnodes=%d nranks=%d rank=%d",
             (unsigned long long)hash, name ? name : "(null)", nnodes, nranks, rank);
  log_call("init", "ctx", ctx, fields);
  return ctx;
}

void host_finalize(host_plugin* p, void* ctx) {
  /* Since 2.28 NCCL skips finalize for a NULL context; older releases call it anyway. */
  if (ctx == NULL && p->abi >= 5) return;
  ((const npabi_profiler_v1_t*)p->table)->finalize(ctx); /* same slot in every version */
  log_call("finalize", "ctx", ctx, "");
}

/* NCCL's call sites test the handle before stopping (§3); the fuzzer calls the table itself. */
void host_stop(host_plugin* p, void* h) {
  if (!h) return;
  __atomic_fetch_add(&host_calls, 1, __ATOMIC_RELAXED);
  ((const npabi_profiler_v1_t*)p->table)->stopEvent(h);
  log_call("stop", "h", h, "");
}

/* ------------------------------------------------------------------- descriptors */

static uint8_t idx_of(const char* s, const char* const* names, int n, uint8_t dflt) {
  for (int i = 0; s && i < n; i++)
    if (strcmp(s, names[i]) == 0) return (uint8_t)i;
  return dflt;
}
static const char* const v1_funcs[] = {"Broadcast", "Reduce",   "AllGather", "ReduceScatter",
                                       "AllReduce", "SendRecv", "Send",      "Recv"};
static const char* const v1_dtypes[] = {"ncclInt8",    "ncclUint8",   "ncclInt32",  "ncclUint32",
                                        "ncclInt64",   "ncclUint64",  "ncclFloat16", "ncclFloat32",
                                        "ncclFloat64", "ncclBfloat16"};
static const char* const v1_algos[] = {"TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN",
                                       "NVLS", "NVLS_TREE", "PAT"};
static const char* const v1_protos[] = {"LL", "LL128", "SIMPLE"};

static void* start_v1(host_plugin* p, void* ctx, const host_ev* e) {
  npabi_descr_v1_t d;
  memset(&d, 0, sizeof d);
  d.type = (uint8_t)e->type;
  d.parentObj = e->type == NPABI_COLL || e->type == NPABI_P2P ? e->parent_group : e->parent;
  d.rank = e->rank;
  switch (e->type) {
  case NPABI_COLL:
    d.coll.name = e->comm_name;
    d.coll.commHash = e->comm_hash;
    d.coll.seqNumber = e->seq;
    d.coll.func = idx_of(e->func, v1_funcs, 8, 6);
    d.coll.count = e->count;
    d.coll.root = e->root;
    d.coll.datatype = idx_of(e->dtype, v1_dtypes, 10, 0);
    d.coll.nMaxChannels = e->nchannels;
    d.coll.nWarps = e->nwarps;
    d.coll.algo = idx_of(e->algo, v1_algos, 7, 6);
    d.coll.proto = idx_of(e->proto, v1_protos, 3, 2);
    break;
  case NPABI_P2P:
    d.p2p.name = e->comm_name;
    d.p2p.commHash = e->comm_hash;
    d.p2p.func = idx_of(e->func, v1_funcs, 8, 6);
    d.p2p.datatype = idx_of(e->dtype, v1_dtypes, 10, 0);
    d.p2p.count = e->count;
    d.p2p.peer = e->peer;
    break;
  case NPABI_PROXY_OP:
    d.proxyOp.pid = e->pid;
    d.proxyOp.channelId = e->channel;
    d.proxyOp.peer = e->peer;
    d.proxyOp.nSteps = e->nsteps;
    d.proxyOp.chunkSize = e->chunk;
    d.proxyOp.isSend = e->is_send;
    break;
  case NPABI_PROXY_STEP: d.proxyStep.step = e->step; break;
  }
  return call_start(p, ctx, &d);
}

/* v2 and v3 share the layout of every member the host fills, except coll's tail. */
#define FILL_V2_V3(d, e)                                                                         \
  do {                                                                                           \
    (d).type = (uint8_t)(e)->type;                                                              \
    (d).parentObj =                                                                              \
        (e)->type == NPABI_COLL || (e)->type == NPABI_P2P ? (e)->parent_group : (e)->parent;    \
    (d).rank = (e)->rank;                                                                        \
    switch ((e)->type) {                                                                         \
    case NPABI_COLL:                                                                             \
      (d).coll.name = (e)->comm_name;                                                            \
      (d).coll.commHash = (e)->comm_hash;                                                        \
      (d).coll.seqNumber = (e)->seq;                                                             \
      (d).coll.func = (e)->func;                                                                 \
      (d).coll.count = (e)->count;                                                               \
      (d).coll.root = (e)->root;                                                                 \
      (d).coll.datatype = (e)->dtype;                                                            \
      (d).coll.nMaxChannels = (e)->nchannels;                                                    \
      (d).coll.nWarps = (e)->nwarps;                                                             \
      (d).coll.algo = (e)->algo;                                                                 \
      (d).coll.proto = (e)->proto;                                                               \
      break;                                                                                     \
    case NPABI_P2P:                                                                              \
      (d).p2p.name = (e)->comm_name;                                                             \
      (d).p2p.commHash = (e)->comm_hash;                                                         \
      (d).p2p.func = (e)->func;                                                                  \
      (d).p2p.datatype = (e)->dtype;                                                             \
      (d).p2p.count = (e)->count;                                                                \
      (d).p2p.peer = (e)->peer;                                                                  \
      break;                                                                                     \
    case NPABI_PROXY_OP:                                                                         \
      (d).proxyOp.pid = (e)->pid;                                                                \
      (d).proxyOp.channelId = (e)->channel;                                                      \
      (d).proxyOp.peer = (e)->peer;                                                              \
      (d).proxyOp.nSteps = (e)->nsteps;                                                          \
      (d).proxyOp.chunkSize = (e)->chunk;                                                        \
      (d).proxyOp.isSend = (e)->is_send;                                                         \
      break;                                                                                     \
    case NPABI_PROXY_STEP: (d).proxyStep.step = (e)->step; break;                               \
    }                                                                                            \
  } while (0)

static void* start_v2(host_plugin* p, void* ctx, const host_ev* e) {
  npabi_descr_v2_t d;
  memset(&d, 0, sizeof d);
  FILL_V2_V3(d, e);
  return call_start(p, ctx, &d);
}

static void* start_v3(host_plugin* p, void* ctx, const host_ev* e) {
  npabi_descr_v3_t d;
  memset(&d, 0, sizeof d);
  FILL_V2_V3(d, e);
  if (e->type == NPABI_KERNEL_CH) d.kernelCh.channelId = e->channel;
  if (e->type == NPABI_NET_PLUGIN) {
    d.netPlugin.id = e->net_id;
    d.netPlugin.data = e->net_data;
  }
  return call_start(p, ctx, &d);
}

/* v4, v5 and v6 share proxy/kernel/net members at the same offsets. */
#define FILL_PROXY_V4(d, e)                                                                      \
  do {                                                                                           \
    switch ((e)->type) {                                                                         \
    case NPABI_PROXY_OP:                                                                         \
      (d).proxyOp.pid = (e)->pid;                                                                \
      (d).proxyOp.channelId = (e)->channel;                                                      \
      (d).proxyOp.peer = (e)->peer;                                                              \
      (d).proxyOp.nSteps = (e)->nsteps;                                                          \
      (d).proxyOp.chunkSize = (e)->chunk;                                                        \
      (d).proxyOp.isSend = (e)->is_send;                                                         \
      break;                                                                                     \
    case NPABI_PROXY_STEP: (d).proxyStep.step = (e)->step; break;                               \
    case NPABI_KERNEL_CH:                                                                        \
      (d).kernelCh.channelId = (e)->channel;                                                     \
      (d).kernelCh.pTimer = (e)->ptimer;                                                         \
      break;                                                                                     \
    case NPABI_NET_PLUGIN:                                                                       \
      (d).netPlugin.id = (e)->net_id;                                                            \
      (d).netPlugin.data = (e)->net_data;                                                        \
      break;                                                                                     \
    }                                                                                            \
  } while (0)

static void* start_v4(host_plugin* p, void* ctx, const host_ev* e) {
  npabi_descr_v4_t d;
  memset(&d, 0, sizeof d);
  d.type = (uint8_t)e->type;
  d.parentObj = e->type == NPABI_COLL || e->type == NPABI_P2P ? e->parent_group : e->parent;
  d.rank = e->rank;
  if (e->type == NPABI_COLL) {
    d.coll.seqNumber = e->seq;
    d.coll.func = e->func;
    d.coll.count = e->count;
    d.coll.root = e->root;
    d.coll.datatype = e->dtype;
    d.coll.nChannels = e->nchannels;
    d.coll.nWarps = e->nwarps;
    d.coll.algo = e->algo;
    d.coll.proto = e->proto;
  } else if (e->type == NPABI_P2P) {
    d.p2p.func = e->func;
    d.p2p.datatype = e->dtype;
    d.p2p.count = e->count;
    d.p2p.peer = e->peer;
    d.p2p.nChannels = e->nchannels;
  }
  FILL_PROXY_V4(d, e);
  return call_start(p, ctx, &d);
}

static void fill_v5(npabi_descr_v5_t* d, const host_ev* e) {
  d->type = e->type;
  d->parentObj = e->parent;
  d->rank = e->rank;
  switch (e->type) {
  case NPABI_GROUP_API:
    d->groupApi.graphCaptured = e->graph;
    d->groupApi.groupDepth = e->depth;
    break;
  case NPABI_COLL_API:
    d->collApi.func = e->func;
    d->collApi.count = e->count;
    d->collApi.datatype = e->dtype;
    d->collApi.root = e->root;
    d->collApi.stream = e->stream;
    d->collApi.graphCaptured = e->graph;
    break;
  case NPABI_P2P_API:
    d->p2pApi.func = e->func;
    d->p2pApi.count = e->count;
    d->p2pApi.datatype = e->dtype;
    d->p2pApi.stream = e->stream;
    d->p2pApi.graphCaptured = e->graph;
    break;
  case NPABI_KERNEL_LAUNCH: d->kernelLaunch.stream = e->stream; break;
  case NPABI_COLL:
    d->coll.seqNumber = e->seq;
    d->coll.func = e->func;
    d->coll.count = e->count;
    d->coll.root = e->root;
    d->coll.datatype = e->dtype;
    d->coll.nChannels = e->nchannels;
    d->coll.nWarps = e->nwarps;
    d->coll.algo = e->algo;
    d->coll.proto = e->proto;
    d->coll.parentGroup = e->parent_group;
    break;
  case NPABI_P2P:
    d->p2p.func = e->func;
    d->p2p.datatype = e->dtype;
    d->p2p.count = e->count;
    d->p2p.peer = e->peer;
    d->p2p.nChannels = e->nchannels;
    d->p2p.parentGroup = e->parent_group;
    break;
  default: FILL_PROXY_V4(*d, e);
  }
}

static void* start_v5(host_plugin* p, void* ctx, const host_ev* e) {
  npabi_descr_v5_t d;
  memset(&d, 0, sizeof d);
  fill_v5(&d, e);
  return call_start(p, ctx, &d);
}

static void* start_v6(host_plugin* p, void* ctx, const host_ev* e) {
  npabi_descr_v6_t d;
  memset(&d, 0, sizeof d);
  if (e->type >= NPABI_CE_COLL) {
    d.type = e->type;
    d.parentObj = e->parent;
    d.rank = e->rank;
    if (e->type == NPABI_CE_COLL) {
      d.ceColl.seqNumber = e->seq;
      d.ceColl.func = e->func;
      d.ceColl.count = e->count;
      d.ceColl.root = e->root;
      d.ceColl.datatype = e->dtype;
      d.ceColl.syncStrategy = e->sync;
      d.ceColl.intraBatchSync = e->flag;
      d.ceColl.batchSize = e->batch_size;
      d.ceColl.numBatches = e->num_batches;
      d.ceColl.ceSeqNum = e->ce_seq;
      d.ceColl.stream = e->stream;
    } else if (e->type == NPABI_CE_SYNC) {
      d.ceCollSync.isComplete = e->flag;
      d.ceCollSync.nRanks = e->n;
    } else {
      d.ceCollBatch.numOps = e->n;
      d.ceCollBatch.totalBytes = e->total_bytes;
      d.ceCollBatch.useIntraSync = e->flag;
    }
  } else {
    fill_v5((npabi_descr_v5_t*)&d, e);
  }
  return call_start(p, ctx, &d);
}

void* host_start(host_plugin* p, void* ctx, const host_ev* e) {
  if (!host_has_type(p, e->type) || !host_wants(p, e->type)) return NULL;
  if (p->abi <= 3 && e->comm_name) { /* NCCL 2.23–2.26 never set comm->commName: always NULL */
    host_ev unnamed = *e;
    unnamed.comm_name = NULL;
    return host_start_raw(p, ctx, &unnamed);
  }
  return host_start_raw(p, ctx, e);
}

uint64_t host_unwritten_handles;
uint64_t host_calls; /* callbacks made (the soak test's rate) */

void* host_start_raw(host_plugin* p, void* ctx, const host_ev* e) {
  void* h;
  switch (p->abi) {
  case 1: h = start_v1(p, ctx, e); break;
  case 2: h = start_v2(p, ctx, e); break;
  case 3: h = start_v3(p, ctx, e); break;
  case 4: h = start_v4(p, ctx, e); break;
  case 5: h = start_v5(p, ctx, e); break;
  default: h = start_v6(p, ctx, e);
  }
  __atomic_fetch_add(&host_calls, 1, __ATOMIC_RELAXED);
  if (h == HOST_POISON) { /* the plugin left *eHandle as it was: NCCL would reuse garbage */
    __atomic_fetch_add(&host_unwritten_handles, 1, __ATOMIC_RELAXED);
    h = NULL;
  }
  return h;
}

/* ------------------------------------------------------------------- states */

static void record_v1(host_plugin* p, void* h, int s, npabi_args_v1_t* a) {
  if (!h) return;
  __atomic_fetch_add(&host_calls, 1, __ATOMIC_RELAXED);
  call_record(p, h, s, a);
}
static void record_v4(host_plugin* p, void* h, int s, npabi_args_v4_t* a) {
  if (!h) return;
  __atomic_fetch_add(&host_calls, 1, __ATOMIC_RELAXED);
  call_record(p, h, s, a);
}

void host_raw_state(host_plugin* p, void* h, int s, void* args) { call_record(p, h, s, args); }

/* The v1–v3 ProxyOp state NCCL records just before a step state (net.cc at 2.26). */
int v1_op_state_for(int step_state) {
  switch (step_state) {
  case NPABI_PROXY_STEP_SEND_GPU_WAIT: return NPABI_PROXY_OP_SEND_POSTED;
  case NPABI_PROXY_STEP_SEND_WAIT: return NPABI_PROXY_OP_SEND_TRANSMITTED;
  case NPABI_PROXY_STEP_RECV_WAIT: return NPABI_PROXY_OP_RECV_POSTED;
  case NPABI_PROXY_STEP_RECV_FLUSH_WAIT: return NPABI_PROXY_OP_RECV_RECEIVED;
  case NPABI_PROXY_STEP_RECV_GPU_WAIT: return NPABI_PROXY_OP_RECV_TRANSMITTED;
  default: return -1;
  }
}

void host_step_state(host_plugin* p, void* op, void* step, int s, size_t trans, size_t* cum) {
  if (p->abi >= 4) {
    npabi_args_v4_t a;
    memset(&a, 0, sizeof a);
    a.proxyStep.transSize = trans;
    record_v4(p, step, s, &a);
    return;
  }
  if (s == NPABI_PROXY_STEP_SEND_PEER_WAIT) return; /* v1–v3 have no PeerWait */
  int ops = v1_op_state_for(s);
  if (ops >= 0) {
    if (s == NPABI_PROXY_STEP_SEND_WAIT || s == NPABI_PROXY_STEP_RECV_FLUSH_WAIT) *cum += trans;
    npabi_args_v1_t a;
    memset(&a, 0, sizeof a);
    a.proxyOp.transSize = *cum;
    a.proxyOp.steps = 1;
    record_v1(p, op, ops, &a);
  }
  record_v1(p, step, s, NULL);
}

void host_op_state(host_plugin* p, void* op, int s, int steps, size_t cum) {
  npabi_args_v1_t a;
  memset(&a, 0, sizeof a);
  a.proxyOp.transSize = cum;
  a.proxyOp.steps = steps;
  record_v1(p, op, s, &a);
}

void host_step_only(host_plugin* p, void* step, int s, size_t trans) {
  if (p->abi < 4) {
    record_v1(p, step, s, NULL); /* v1–v3 step states carry no arguments */
    return;
  }
  npabi_args_v4_t a;
  memset(&a, 0, sizeof a);
  a.proxyStep.transSize = trans;
  record_v4(p, step, s, &a);
}

void host_op_in_progress(host_plugin* p, void* op) {
  if (p->abi < 4) return;
  npabi_args_v4_t a;
  memset(&a, 0, sizeof a);
  record_v4(p, op, NPABI_PROXY_OP_IN_PROGRESS, &a);
}

void host_ctrl_state(host_plugin* p, void* h, int s, int appended) {
  if (p->abi >= 4) {
    npabi_args_v4_t a;
    memset(&a, 0, sizeof a);
    a.proxyCtrl.appendedProxyOps = appended;
    record_v4(p, h, s, &a);
  } else {
    npabi_args_v1_t a;
    memset(&a, 0, sizeof a);
    a.proxyCtrl.appendedProxyOps = appended;
    record_v1(p, h, s, &a);
  }
}

void host_kernel_stop(host_plugin* p, void* h, uint64_t ptimer) {
  if (p->abi < 4) return; /* v3 has no KernelChStop state: NCCL only stops the event */
  npabi_args_v4_t a;
  memset(&a, 0, sizeof a);
  a.kernelCh.pTimer = ptimer;
  record_v4(p, h, NPABI_KERNEL_CH_STOP, &a);
}

void host_group_api_state(host_plugin* p, void* h, int s) {
  if (p->abi >= 5) record_v4(p, h, s, NULL); /* NCCL passes NULL args for these */
}

void host_net_update(host_plugin* p, void* h, void* data) {
  if (p->abi < 4) return;
  npabi_args_v4_t a;
  a.netPlugin.data = data;
  record_v4(p, h, NPABI_NET_PLUGIN_UPDATE, &a);
}
