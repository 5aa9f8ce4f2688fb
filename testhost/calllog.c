/*
 * calllog.c — text form of descriptors and state arguments (see calllog.h). Keys are the same
 * across versions where the field means the same (`nch` is v1–v3 nMaxChannels and v4+
 * nChannels), so a test can compare a version's line with another's.
 */
#include "calllog.h"

#include <stdarg.h>
#include <stdio.h>

#include "../profiler/abi.h"

typedef struct w {
  char* p;
  size_t left;
  calllog_ref ref;
} w;

static void put(w* o, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(o->p, o->left, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  size_t k = (size_t)n < o->left ? (size_t)n : o->left ? o->left - 1 : 0;
  o->p += k;
  o->left -= k;
}

static void put_ref(w* o, const char* key, const void* p) {
  char buf[40];
  o->ref(p, buf, sizeof buf);
  put(o, " %s=%s", key, buf);
}

static const char* str(const char* s) { return s ? s : "(null)"; }

#define KS(k, v) put(&o, " " k "=%s", str(v))
#define KI(k, v) put(&o, " " k "=%lld", (long long)(v))
#define KU(k, v) put(&o, " " k "=%llu", (unsigned long long)(v))
#define KP(k, v) put(&o, " " k "=%#llx", (unsigned long long)(uintptr_t)(v))

/* Proxy members: one layout from v1 (op, step) and v3 (kernel channel, net plugin) on. */
#define PROXY(d, ptimer)                                                                         \
  case NPABI_PROXY_OP:                                                                           \
    KI("pid", (d)->proxyOp.pid), KI("ch", (d)->proxyOp.channelId), KI("peer", (d)->proxyOp.peer); \
    KI("nsteps", (d)->proxyOp.nSteps), KI("chunk", (d)->proxyOp.chunkSize);                      \
    KI("send", (d)->proxyOp.isSend);                                                             \
    break;                                                                                       \
  case NPABI_PROXY_STEP: KI("step", (d)->proxyStep.step); break;

#define KCH_NET(d)                                                                               \
  case NPABI_KERNEL_CH: KI("ch", (d)->kernelCh.channelId); break;                                \
  case NPABI_NET_PLUGIN: KI("id", (d)->netPlugin.id), KP("data", (d)->netPlugin.data); break;

static void v1(w o, const npabi_descr_v1_t* d) {
  switch (d->type) {
  case NPABI_COLL:
    KS("name", d->coll.name), KU("hash", d->coll.commHash), KU("seq", d->coll.seqNumber);
    KI("func", d->coll.func), KP("send", d->coll.sendBuff), KP("recv", d->coll.recvBuff);
    KU("count", d->coll.count), KI("root", d->coll.root), KI("dtype", d->coll.datatype);
    KU("op", d->coll.op), KU("traffic", d->coll.trafficBytes), KI("nch", d->coll.nMaxChannels);
    KI("nwarps", d->coll.nWarps), KI("algo", d->coll.algo), KI("proto", d->coll.proto);
    KI("collnet", d->coll.isCollnet), KI("nvls", d->coll.isNvls);
    break;
  case NPABI_P2P:
    KS("name", d->p2p.name), KU("hash", d->p2p.commHash), KI("func", d->p2p.func);
    KP("buff", d->p2p.buff), KI("dtype", d->p2p.datatype), KU("count", d->p2p.count);
    KI("peer", d->p2p.peer);
    break;
    PROXY(d, 0)
  }
}

/* v2 and v3: the same but coll's tail and v3's kernel channel and net plugin members. */
#define V2_V3(o, d, N)                                                                           \
  switch ((d)->type) {                                                                           \
  case NPABI_COLL:                                                                               \
    KS("name", (d)->coll.name), KU("hash", (d)->coll.commHash), KU("seq", (d)->coll.seqNumber); \
    KS("func", (d)->coll.func), KP("send", (d)->coll.sendBuff), KP("recv", (d)->coll.recvBuff); \
    KU("count", (d)->coll.count), KI("root", (d)->coll.root), KS("dtype", (d)->coll.datatype);  \
    V2_TRAFFIC_##N(d) KI("nch", (d)->coll.nMaxChannels), KI("nwarps", (d)->coll.nWarps);         \
    KS("algo", (d)->coll.algo), KS("proto", (d)->coll.proto);                                    \
    break;                                                                                       \
  case NPABI_P2P:                                                                                \
    KS("name", (d)->p2p.name), KU("hash", (d)->p2p.commHash), KS("func", (d)->p2p.func);         \
    KP("buff", (d)->p2p.buff), KS("dtype", (d)->p2p.datatype), KU("count", (d)->p2p.count);     \
    KI("peer", (d)->p2p.peer);                                                                   \
    break;                                                                                       \
    PROXY(d, 0)                                                                                  \
    V3_EXTRA_##N(d)                                                                              \
  }
#define V2_TRAFFIC_2(d) KU("traffic", (d)->coll.trafficBytes);
#define V2_TRAFFIC_3(d)
#define V3_EXTRA_2(d)
#define V3_EXTRA_3(d) KCH_NET(d)

static void v2(w o, const npabi_descr_v2_t* d) { V2_V3(o, d, 2) }
static void v3(w o, const npabi_descr_v3_t* d) { V2_V3(o, d, 3) }

#define COLL_V4(d)                                                                               \
  KU("seq", (d)->coll.seqNumber), KS("func", (d)->coll.func), KP("send", (d)->coll.sendBuff);   \
  KP("recv", (d)->coll.recvBuff), KU("count", (d)->coll.count), KI("root", (d)->coll.root);      \
  KS("dtype", (d)->coll.datatype), KI("nch", (d)->coll.nChannels), KI("nwarps", (d)->coll.nWarps); \
  KS("algo", (d)->coll.algo), KS("proto", (d)->coll.proto)
#define P2P_V4(d)                                                                                \
  KS("func", (d)->p2p.func), KP("buff", (d)->p2p.buff), KS("dtype", (d)->p2p.datatype);         \
  KU("count", (d)->p2p.count), KI("peer", (d)->p2p.peer), KI("nch", (d)->p2p.nChannels)
#define KCH_V4(d)                                                                                \
  case NPABI_KERNEL_CH: KI("ch", (d)->kernelCh.channelId), KU("ptimer", (d)->kernelCh.pTimer); break; \
  case NPABI_NET_PLUGIN: KI("id", (d)->netPlugin.id), KP("data", (d)->netPlugin.data); break;

static void v4(w o, const npabi_descr_v4_t* d) {
  switch (d->type) {
  case NPABI_COLL: COLL_V4(d); break;
  case NPABI_P2P: P2P_V4(d); break;
    PROXY(d, 1)
    KCH_V4(d)
  }
}

static void v5(w o, const npabi_descr_v5_t* d) {
  switch (d->type) {
  case NPABI_GROUP_API: KI("graph", d->groupApi.graphCaptured), KI("depth", d->groupApi.groupDepth); break;
  case NPABI_COLL_API:
    KS("func", d->collApi.func), KU("count", d->collApi.count), KS("dtype", d->collApi.datatype);
    KI("root", d->collApi.root), KP("stream", d->collApi.stream), KI("graph", d->collApi.graphCaptured);
    break;
  case NPABI_P2P_API:
    KS("func", d->p2pApi.func), KU("count", d->p2pApi.count), KS("dtype", d->p2pApi.datatype);
    KP("stream", d->p2pApi.stream), KI("graph", d->p2pApi.graphCaptured);
    break;
  case NPABI_KERNEL_LAUNCH: KP("stream", d->kernelLaunch.stream); break;
  case NPABI_COLL: COLL_V4(d), put_ref(&o, "pgroup", d->coll.parentGroup); break;
  case NPABI_P2P: P2P_V4(d), put_ref(&o, "pgroup", d->p2p.parentGroup); break;
    PROXY(d, 1)
    KCH_V4(d)
  }
}

static void v6(w o, const npabi_descr_v6_t* d) {
  switch (d->type) {
  case NPABI_CE_COLL:
    KU("seq", d->ceColl.seqNumber), KS("func", d->ceColl.func), KP("send", d->ceColl.sendBuff);
    KP("recv", d->ceColl.recvBuff), KU("count", d->ceColl.count), KI("root", d->ceColl.root);
    KS("dtype", d->ceColl.datatype), KS("sync", d->ceColl.syncStrategy);
    KI("intra", d->ceColl.intraBatchSync), KU("batch", d->ceColl.batchSize);
    KU("nbatches", d->ceColl.numBatches), KU("ceseq", d->ceColl.ceSeqNum), KP("stream", d->ceColl.stream);
    break;
  case NPABI_CE_SYNC: KI("complete", d->ceCollSync.isComplete), KI("nranks", d->ceCollSync.nRanks); break;
  case NPABI_CE_BATCH:
    KI("nops", d->ceCollBatch.numOps), KU("total", d->ceCollBatch.totalBytes);
    KI("intra", d->ceCollBatch.useIntraSync);
    break;
  default: v5(o, (const npabi_descr_v5_t*)d);
  }
}

void calllog_descr(char* out, size_t cap, int abi, const void* descr, calllog_ref ref) {
  w o = {out, cap, ref};
  if (cap) *out = 0;
  const npabi_descr_v1_t* d1 = (const npabi_descr_v1_t*)descr;
  uint64_t type = abi >= 5 ? ((const npabi_descr_v5_t*)descr)->type : d1->type;
  KU("type", type);
  put_ref(&o, "parent", d1->parentObj); /* offset 8 in every version */
  KI("rank", d1->rank);
  switch (abi) {
  case 1: v1(o, d1); break;
  case 2: v2(o, (const npabi_descr_v2_t*)descr); break;
  case 3: v3(o, (const npabi_descr_v3_t*)descr); break;
  case 4: v4(o, (const npabi_descr_v4_t*)descr); break;
  case 5: v5(o, (const npabi_descr_v5_t*)descr); break;
  default: v6(o, (const npabi_descr_v6_t*)descr);
  }
}

void calllog_args(char* out, size_t cap, int layout, int s, const void* args) {
  w o = {out, cap, NULL};
  if (cap) *out = 0;
  if (args == NULL) {
    put(&o, " args=null");
    return;
  }
  if (layout < 4) {
    const npabi_args_v1_t* a = (const npabi_args_v1_t*)args;
    if (s <= NPABI_PROXY_OP_RECV_DONE) KU("trans", a->proxyOp.transSize), KI("steps", a->proxyOp.steps);
    else if (s >= NPABI_PROXY_CTRL_IDLE && s <= NPABI_PROXY_CTRL_APPEND_END) KI("appended", a->proxyCtrl.appendedProxyOps);
    else put(&o, " args=-");
    return;
  }
  const npabi_args_v4_t* a = (const npabi_args_v4_t*)args;
  if ((s >= NPABI_PROXY_STEP_SEND_GPU_WAIT && s <= NPABI_PROXY_STEP_RECV_GPU_WAIT) ||
      s == NPABI_PROXY_STEP_SEND_PEER_WAIT)
    KU("trans", a->proxyStep.transSize);
  else if (s >= NPABI_PROXY_CTRL_IDLE && s <= NPABI_PROXY_CTRL_APPEND_END)
    KI("appended", a->proxyCtrl.appendedProxyOps);
  else if (s == NPABI_NET_PLUGIN_UPDATE) KP("data", a->netPlugin.data);
  else if (s == NPABI_KERNEL_CH_STOP) KU("ptimer", a->kernelCh.pTimer);
  else put(&o, " args=-");
}
