/*
 * adapters.c — the exported ncclProfiler_v1 … ncclProfiler_v6 tables and one thin adapter per
 * ABI version. An adapter reads its version's descriptor and state arguments and calls the
 * version-free starters below; nothing past this file knows about versions.
 *
 * Differences handled here (docs/nccl-profiler-api.md §1, §2.6, §7):
 *   - init argument order: v1–v3 (ctx, mask); v4 (ctx, mask, name, hash, …); v5/v6 (ctx, id,
 *     mask, name, …). v1–v3 learn the communicator's hash, name and rank from Coll/P2p.
 *   - `type` is uint8_t up to v4 and uint64_t from v5.
 *   - v1 passes func/datatype/algo/proto as enum values; they become the same strings v2+ use.
 *   - Coll/P2p parent: the Group event up to v4; the CollApi/P2pApi event from v5, with the
 *     Group in parentGroup.
 *   - State arguments: v1–v3 carry cumulative bytes on ProxyOp states; v4+ carry per-step bytes
 *     on ProxyStep states, the GPU stop time on KernelChStop, payloads on NetPluginUpdate.
 *   - PXN: a ProxyOp whose pid is not ours comes from another process; its context and parent
 *     are that process's pointers and are never dereferenced.
 */
#include "chain.h"
#include "hot.h"

/* ------------------------------------------------------------------- v1 enum names */

const char* const np_func_names[8] = {"Broadcast", "Reduce",   "AllGather", "ReduceScatter",
                                      "AllReduce", "SendRecv", "Send",      "Recv"};
const char* const np_dtype_names[12] = {
    "ncclInt8",    "ncclUint8",   "ncclInt32",   "ncclUint32",     "ncclInt64",     "ncclUint64",
    "ncclFloat16", "ncclFloat32", "ncclFloat64", "ncclBfloat16", "ncclFloat8e4m3", "ncclFloat8e5m2"};
const char* const np_algo_names[7] = {"TREE", "RING",      "COLLNET_DIRECT", "COLLNET_CHAIN",
                                      "NVLS", "NVLS_TREE", "PAT"};
const char* const np_proto_names[3] = {"LL", "LL128", "SIMPLE"};
static const char np_unknown[] = "Unknown";

#define NP_NAME(table, v) \
  ((v) < sizeof(table) / sizeof(table[0]) ? table[(v)] : np_unknown)

/* ------------------------------------------------------------------- common starters */

/* Checks the handle pointer, writes a safe default, filters the type by the mask, and maps the
 * NCCL type bit to the internal type. Returns 0 when there is nothing to record. */
NP_HOT int np_admit(void** eHandle, const void* d, uint64_t bit, int* type) {
  if (NP_UNLIKELY(eHandle == NULL)) {
    np_count(NP_C_NULL_HANDLE);
    return 0;
  }
  *eHandle = (void*)NP_H_DISABLED; /* NCCL may reuse a stale slot if we leave it unwritten */
  if (NP_UNLIKELY(d == NULL)) {
    np_count(NP_C_NULL_DESCR);
    return 0;
  }
  if (NP_UNLIKELY(bit == 0 || (bit & (bit - 1)) != 0 || bit > NPABI_CE_BATCH)) {
    np_count(NP_C_UNKNOWN_TYPE);
    return 0;
  }
  if (!(__atomic_load_n(&np_record_mask, __ATOMIC_RELAXED) & bit)) {
    *eHandle = (void*)NP_H_SKIPPED;
    return 0;
  }
  *type = __builtin_ctzll(bit) + 1;
  return 1;
}

/* The communicator an event is recorded in. Proxy children follow their parent's handle, which
 * is always ours, so PXN steps land beside their foreign op without touching the context. */
NP_HOT np_comm* np_target(void* ctx, int type, uint64_t parent) {
  np_comm* c = NULL;
  if (type == NP_T_PROXY_STEP || type == NP_T_NET_PLUGIN) c = np_comm_of_handle(parent);
  if (c == NULL) c = np_comm_of_ctx(ctx);
  if (NP_UNLIKELY(c == NULL)) np_count_bad_ctx(ctx);
  return c;
}

NP_HOT int np_rank_or_comm(np_comm* c, int rank) { return rank ? rank : np_comm_rank(c); }

/* A lost Coll's CollApi (v5+), in the lost table's type above the event type (the drainer's
 * LostOp.API): recorded, so the aggregator must not count the call as an operation of its own
 * too, or dropped as well, so the call is no lost API-only operation
 * (internal/aggregate/apionly.go). */
enum { NP_LOST_API_KEPT = 1 << 8, NP_LOST_API_DROPPED = 2 << 8 };
static int np_lost_api(int abi, uint64_t parent) {
  if (abi < 5) return 0;
  return (parent & 1) ? NP_LOST_API_KEPT : parent == NP_H_DROPPED ? NP_LOST_API_DROPPED : 0;
}

/* Group, ProxyCtrl, and other events with no fields of their own. */
NP_HOT void np_start_plain(void* ctx, int type, int abi, void** eh, uint64_t parent) {
  np_comm* c = np_target(ctx, type, parent);
  np_pending p;
  if (!c || !np_begin(c, type, abi, parent, np_comm_rank(c), 0, eh, &p)) return;
  if (type == NP_T_PROXY_CTRL) memset(&p.ev->u.ctrl, 0, sizeof p.ev->u.ctrl);
  np_commit(&p);
}

NP_HOT void np_start_coll(void* ctx, int abi, void** eh, uint64_t parent, int rank,
                                 uint64_t seq, const char* func, uint64_t count, const char* dtype,
                                 const char* algo, const char* proto, int root, uint8_t nch,
                                 uint8_t nwarps, uint64_t parent_group) {
  np_comm* c = np_target(ctx, NP_T_COLL, parent);
  np_pending p;
  if (!c) return;
  if (!np_begin(c, NP_T_COLL, abi, parent, rank, np_sample_flags(c, func, seq, np_replay_of(abi, parent)), eh, &p)) {
    if (*eh == (void*)NP_H_DROPPED) np_lost_add(c, NP_T_COLL | np_lost_api(abi, parent), func, dtype,
                                                algo, proto, nch, count);
    return;
  }
  p.ev->u.coll.seq = seq;
  p.ev->u.coll.func = func;
  p.ev->u.coll.count = count;
  p.ev->u.coll.dtype = dtype;
  p.ev->u.coll.algo = algo;
  p.ev->u.coll.proto = proto;
  p.ev->u.coll.root = root;
  p.ev->u.coll.nchannels = nch;
  p.ev->u.coll.nwarps = nwarps;
  p.ev->u.coll.parent_group = parent_group;
  np_commit(&p);
}

NP_HOT void np_start_p2p(void* ctx, int abi, void** eh, uint64_t parent, int rank,
                                const char* func, uint64_t count, const char* dtype, int peer,
                                uint8_t nch, uint64_t parent_group) {
  np_comm* c = np_target(ctx, NP_T_P2P, parent);
  np_pending p;
  if (!c) return;
  np_thread* t = np_enter_comm(c, eh);
  if (!t) return;
  /* The ordinal is counted inside the active section: a recycled communicator's table is reset
   * only once no callback is inside. */
  uint64_t ord = np_p2p_next(c, peer, func != NULL && func[0] == 'S'); /* "Send" / "Recv" */
  if (!np_begin_in(c, t, NP_T_P2P, abi, parent, rank, np_sample_flags(c, NULL, ord, 0) | NP_F_MARK, eh, &p)) {
    if (*eh == (void*)NP_H_DROPPED) np_lost_add(c, NP_T_P2P, func, dtype, NULL, NULL, nch, count);
    return;
  }
  p.ev->u.p2p.seq = ord;
  p.ev->u.p2p.func = func;
  p.ev->u.p2p.count = count;
  p.ev->u.p2p.dtype = dtype;
  p.ev->u.p2p.peer = peer;
  p.ev->u.p2p.nchannels = nch;
  p.ev->u.p2p.parent_group = parent_group;
  np_commit(&p);
}

/* A cell for a ProxyOp or ProxyStep; NULL (counted, handle dropped) when the arena is full. */
NP_HOT np_cell* np_cell_for(np_comm* c, np_thread* t, int type, void** eh, uint64_t* h) {
  np_cell* cell = np_cell_claim(c, t, h);
  if (NP_UNLIKELY(cell == NULL)) {
    np_count(NP_C_ARENA_FULL);
    np_count_drop(c, type);
    *eh = (void*)NP_H_DROPPED;
  }
  return cell;
}

/* A ProxyOp: its progress lives in an arena cell (the handle NCCL gets, which its steps name
 * as parent), its record in the operation windows (how the drainer links it to its operation). */
NP_HOT void np_start_proxy_op(void* ctx, int abi, void** eh, uint64_t parent, int rank,
                                     pid_t pid, uint8_t channel, int peer, int nsteps, int chunk,
                                     int is_send) {
  np_comm* c;
  uint16_t flags = 0;
  if (pid != np_pid) { /* PXN: context and parent belong to the originating process */
    c = np_pxn_target();
    flags = NP_F_FOREIGN;
    parent = 0;
    np_count(NP_C_FOREIGN_EVENT);
  } else {
    c = np_target(ctx, NP_T_PROXY_OP, parent);
  }
  if (!c) return;
  np_thread* t = np_enter_comm(c, eh);
  if (!t) return;
  uint64_t ch;
  np_cell* cell = np_cell_for(c, t, NP_T_PROXY_OP, eh, &ch);
  if (!cell) {
    np_leave(t);
    return;
  }
  /* Sampled tracing: the operation's choice goes with its ProxyOp (record and cell) and, from
   * the cell, with its steps. PXN ProxyOps of another process cannot read their parent. */
  if (NP_UNLIKELY(np_sample_n != 0) && !(flags & NP_F_FOREIGN)) flags |= np_parent_sample(c, parent);
  np_cell_init(cell, t, NP_T_PROXY_OP, abi, parent, rank, np_ticks());
  cell->sflags = flags; /* its record's flags (np_op_record) */
  /* Atomic (plain moves): a retirement on the proxy thread reads them (np_op_retire). */
  __atomic_store_n(&cell->peer, peer, __ATOMIC_RELAXED);
  __atomic_store_n(&cell->channel, channel, __ATOMIC_RELAXED);
  cell->is_send = (uint8_t)(is_send != 0);
  memset(&cell->u.op.prog, 0, sizeof cell->u.op.prog);
  __atomic_store_n(&cell->u.op.record, 0, __ATOMIC_RELAXED); /* np_op_retire reads it */
  cell->u.op.last_step = 0;
  cell->u.op.nsteps = nsteps;
  cell->u.op.pid = pid;
  cell->chunk = chunk;
  /* Receive-side ProxyOps may be ones NCCL never stops (only net.cc stops ProxyOps, and it
   * is the only one that reports isSend): they wait for evidence that they are over. Not
   * below ABI v4: NCCL before 2.27 (which calls v1-v3) starts ProxyOps only in net.cc's
   * progress functions, which stop each one (v2.23.4-1 to v2.26.6-1), and starts one at its
   * first pass, which may post no step yet (a receive waiting for shared buffers): such a one
   * has no state and no step for a while, and was retired as none of net.cc's. Its record in
   * the operation windows waits for its first sign of life (np_op_record). */
  if (!is_send && !(flags & NP_F_FOREIGN) && abi >= 4) {
    np_conn_started(c, cell);
    np_retire_push(c, t, ch);
  }
  *eh = (void*)ch;
  np_leave(t);
}

/* A ProxyStep: a cell only. It takes its pair and channel from its ProxyOp's cell now, so its
 * stop can fold the transfer without looking anything up. */
NP_HOT void np_start_proxy_step(void* ctx, int abi, void** eh, uint64_t parent, int rank,
                                       int step) {
  np_comm* c = np_target(ctx, NP_T_PROXY_STEP, parent);
  if (!c) return;
  np_thread* t = np_enter_comm(c, eh);
  if (!t) return;
  np_cell* op = np_h_is_cell(parent) && np_h_comm(parent) == c->idx ? np_cell_of(c, parent) : NULL;
  uint64_t h = op ? np_step_restarted(c, op, parent, step) : 0;
  if (h != 0) { /* the same step started again: it keeps its cell (net.cc's recvProxyProgress) */
    *eh = (void*)h;
    np_leave(t);
    return;
  }
  np_cell* s = np_cell_for(c, t, NP_T_PROXY_STEP, eh, &h);
  if (!s) {
    np_leave(t);
    return;
  }
  np_cell_init(s, t, NP_T_PROXY_STEP, abi, parent, op ? op->rank : rank,
               np_step_clock(op ? op->sflags : NP_F_SAMPLE_BITS));
  memset(s->u.step.t_state, 0, sizeof s->u.step.t_state);
  s->u.step.trans_size = 0;
  s->u.step.npeerwait = 0;
  s->u.step.nrestarts = 0;
  __atomic_store_n(&s->u.step.step, step, __ATOMIC_RELAXED); /* np_step_restarted reads it */
  if (NP_LIKELY(op != NULL)) {
    if (NP_UNLIKELY(op->u.op.record == 0)) np_op_record(c, t, op, parent);
    op->u.op.last_step = h;
    s->peer = op->peer;
    s->channel = op->channel;
    s->is_send = op->is_send;
    s->sflags = op->sflags & NP_F_SAMPLE_BITS; /* recorded whole at its stop if sampled */
  } else {
    s->peer = -1;
    s->channel = 0;
    s->is_send = 0;
    s->sflags = NP_F_NO_OP | (parent == NP_H_DROPPED ? NP_F_PARENT_DROPPED : 0);
    __atomic_fetch_add(&c->orphan_steps, 1, __ATOMIC_RELAXED);
    np_count(NP_C_ORPHAN_STEPS);
  }
  *eh = (void*)h;
  np_leave(t);
}

NP_HOT void np_start_kernel_ch(void* ctx, int abi, void** eh, uint64_t parent,
                                      uint8_t channel, uint64_t ptimer) {
  np_comm* c = np_target(ctx, NP_T_KERNEL_CH, parent);
  np_pending p;
  if (!c || !np_begin(c, NP_T_KERNEL_CH, abi, parent, np_comm_rank(c), 0, eh, &p)) return;
  p.ev->u.kch.channel = channel;
  p.ev->u.kch.ptimer_start = ptimer;
  p.ev->u.kch.ptimer_stop = 0;
  p.ev->u.kch.t_stop_state = 0;
  np_commit(&p);
}

NP_HOT void np_start_net(void* ctx, int abi, void** eh, uint64_t parent, int rank,
                                int64_t id, const void* data) {
  np_comm* c = np_target(ctx, NP_T_NET_PLUGIN, parent);
  np_pending p;
  if (!c || !np_begin(c, NP_T_NET_PLUGIN, abi, parent, rank, 0, eh, &p)) return;
  memset(&p.ev->u.net, 0, sizeof p.ev->u.net);
  p.ev->u.net.id = id;
  np_net_start_payload(p.ev, data);
  np_commit(&p);
}

/* ------------------------------------------------------------------- v1–v3 */

static void np_learn(void* ctx, uint64_t hash, const char* name, int rank) {
  np_comm* c = np_comm_of_ctx(ctx);
  if (c && NP_UNLIKELY(!__atomic_load_n(&c->learned, __ATOMIC_ACQUIRE)))
    np_learn_comm(c, hash, name, rank);
}

static npabi_result_t np_own_start_v1(void* ctx, void** eh, npabi_descr_v1_t* d) {
  int type;
  if (!np_admit(eh, d, d ? d->type : 0, &type)) return NPABI_SUCCESS;
  uint64_t parent = (uint64_t)(uintptr_t)d->parentObj;
  switch (type) {
  case NP_T_COLL:
    np_learn(ctx, d->coll.commHash, d->coll.name, d->rank);
    np_start_coll(ctx, 1, eh, parent, d->rank, d->coll.seqNumber,
                  NP_NAME(np_func_names, d->coll.func), d->coll.count,
                  NP_NAME(np_dtype_names, d->coll.datatype), NP_NAME(np_algo_names, d->coll.algo),
                  NP_NAME(np_proto_names, d->coll.proto), d->coll.root, d->coll.nMaxChannels,
                  d->coll.nWarps, parent);
    break;
  case NP_T_P2P:
    np_learn(ctx, d->p2p.commHash, d->p2p.name, d->rank);
    np_start_p2p(ctx, 1, eh, parent, d->rank, NP_NAME(np_func_names, d->p2p.func), d->p2p.count,
                 NP_NAME(np_dtype_names, d->p2p.datatype), d->p2p.peer, 0, parent);
    break;
  case NP_T_PROXY_OP:
    np_start_proxy_op(ctx, 1, eh, parent, d->rank, d->proxyOp.pid, d->proxyOp.channelId,
                      d->proxyOp.peer, d->proxyOp.nSteps, d->proxyOp.chunkSize, d->proxyOp.isSend);
    break;
  case NP_T_PROXY_STEP:
    np_start_proxy_step(ctx, 1, eh, parent, d->rank, d->proxyStep.step);
    break;
  case NP_T_GROUP:
  case NP_T_PROXY_CTRL:
    np_start_plain(ctx, type, 1, eh, parent);
    break;
  default:
    np_count(NP_C_UNKNOWN_TYPE);
  }
  return NPABI_SUCCESS;
}

/* v2 and v3 differ only in where coll's trailing fields sit and in v3's two new members. */
#define NP_START_V2_V3(N)                                                                         \
  static npabi_result_t np_own_start_v##N(void* ctx, void** eh, npabi_descr_v##N##_t* d) {        \
    int type;                                                                                     \
    if (!np_admit(eh, d, d ? d->type : 0, &type)) return NPABI_SUCCESS;                           \
    uint64_t parent = (uint64_t)(uintptr_t)d->parentObj;                                          \
    switch (type) {                                                                               \
    case NP_T_COLL:                                                                               \
      np_learn(ctx, d->coll.commHash, d->coll.name, d->rank);                                     \
      np_start_coll(ctx, N, eh, parent, d->rank, d->coll.seqNumber, d->coll.func, d->coll.count,  \
                    d->coll.datatype, d->coll.algo, d->coll.proto, d->coll.root,                  \
                    d->coll.nMaxChannels, d->coll.nWarps, parent);                                \
      break;                                                                                      \
    case NP_T_P2P:                                                                                \
      np_learn(ctx, d->p2p.commHash, d->p2p.name, d->rank);                                       \
      np_start_p2p(ctx, N, eh, parent, d->rank, d->p2p.func, d->p2p.count, d->p2p.datatype,       \
                   d->p2p.peer, 0, parent);                                                       \
      break;                                                                                      \
    case NP_T_PROXY_OP:                                                                           \
      np_start_proxy_op(ctx, N, eh, parent, d->rank, d->proxyOp.pid, d->proxyOp.channelId,        \
                        d->proxyOp.peer, d->proxyOp.nSteps, d->proxyOp.chunkSize,                 \
                        d->proxyOp.isSend);                                                       \
      break;                                                                                      \
    case NP_T_PROXY_STEP:                                                                         \
      np_start_proxy_step(ctx, N, eh, parent, d->rank, d->proxyStep.step);                        \
      break;                                                                                      \
    NP_START_V3_EXTRA_##N                                                                         \
    case NP_T_GROUP:                                                                              \
    case NP_T_PROXY_CTRL:                                                                         \
      np_start_plain(ctx, type, N, eh, parent);                                                   \
      break;                                                                                      \
    default:                                                                                      \
      np_count(NP_C_UNKNOWN_TYPE);                                                                \
    }                                                                                             \
    return NPABI_SUCCESS;                                                                         \
  }
#define NP_START_V3_EXTRA_2
#define NP_START_V3_EXTRA_3                                                                       \
  case NP_T_KERNEL_CH:                                                                            \
    np_start_kernel_ch(ctx, 3, eh, parent, d->kernelCh.channelId, 0);                            \
    break;                                                                                        \
  case NP_T_NET_PLUGIN:                                                                           \
    np_start_net(ctx, 3, eh, parent, d->rank, d->netPlugin.id, d->netPlugin.data);                \
    break;
NP_START_V2_V3(2)
NP_START_V2_V3(3)

/* v1–v3 state arguments: ProxyOp states carry cumulative bytes, ProxyCtrl the appended count.
 * A transfer's size reaches its ProxyStep through the op state NCCL records right before the
 * step state, on the same thread: the bytes that state adds to the op's running total are
 * remembered there and handed to that step as its own size.
 * NCCL 2.23 (v1 only) starts a ProxyStep per raw step, sliceSteps per network transfer, and
 * records the step states of all of them after one op state (transport/net.cc at v2.23.4-1):
 * the first takes the size, the others are not transfers and do not count as ones. */
static npabi_result_t np_own_record_v1(void* h, npabi_state_t s, npabi_args_v1_t* a) {
  if ((s == NPABI_PROXY_STEP_SEND_WAIT || s == NPABI_PROXY_STEP_RECV_FLUSH_WAIT) && a == NULL) {
    np_thread* t = np_tls;
    if (t && t->memo_valid) {
      t->memo_valid = 0;
      np_state(h, s, t->memo_size, 0, 1);
    }
    return NPABI_SUCCESS; /* no op state before it: another raw step of 2.23's transfer */
  }
  if ((s == NPABI_PROXY_OP_SEND_TRANSMITTED || s == NPABI_PROXY_OP_RECV_RECEIVED) && a) {
    uint64_t added = np_op_running_total(h, s, a->proxyOp.transSize);
    np_thread* t = np_tls ? np_tls : np_thread_attach();
    if (t) {
      t->memo_size = added;
      t->memo_valid = 1;
    }
    return NPABI_SUCCESS;
  }
  if (s <= NPABI_PROXY_OP_RECV_DONE)
    np_state(h, s, a ? a->proxyOp.transSize : 0, a ? (uint64_t)a->proxyOp.steps : 0, a != NULL);
  else if (s >= NPABI_PROXY_CTRL_IDLE && s <= NPABI_PROXY_CTRL_APPEND_END)
    np_state(h, s, a ? (uint64_t)(uint32_t)a->proxyCtrl.appendedProxyOps : 0, 0, a != NULL);
  else
    np_state(h, s, 0, 0, 0);
  return NPABI_SUCCESS;
}

/* ------------------------------------------------------------------- v4 */

static npabi_result_t np_own_start_v4(void* ctx, void** eh, npabi_descr_v4_t* d) {
  int type;
  if (!np_admit(eh, d, d ? d->type : 0, &type)) return NPABI_SUCCESS;
  uint64_t parent = (uint64_t)(uintptr_t)d->parentObj;
  switch (type) {
  case NP_T_COLL:
    np_start_coll(ctx, 4, eh, parent, d->rank, d->coll.seqNumber, d->coll.func, d->coll.count,
                  d->coll.datatype, d->coll.algo, d->coll.proto, d->coll.root, d->coll.nChannels,
                  d->coll.nWarps, parent);
    break;
  case NP_T_P2P:
    np_start_p2p(ctx, 4, eh, parent, d->rank, d->p2p.func, d->p2p.count, d->p2p.datatype,
                 d->p2p.peer, d->p2p.nChannels, parent);
    break;
  case NP_T_PROXY_OP:
    np_start_proxy_op(ctx, 4, eh, parent, d->rank, d->proxyOp.pid, d->proxyOp.channelId,
                      d->proxyOp.peer, d->proxyOp.nSteps, d->proxyOp.chunkSize, d->proxyOp.isSend);
    break;
  case NP_T_PROXY_STEP:
    np_start_proxy_step(ctx, 4, eh, parent, d->rank, d->proxyStep.step);
    break;
  case NP_T_KERNEL_CH:
    np_start_kernel_ch(ctx, 4, eh, parent, d->kernelCh.channelId, d->kernelCh.pTimer);
    break;
  case NP_T_NET_PLUGIN:
    np_start_net(ctx, 4, eh, parent, d->rank, d->netPlugin.id, d->netPlugin.data);
    break;
  case NP_T_GROUP:
  case NP_T_PROXY_CTRL:
    np_start_plain(ctx, type, 4, eh, parent);
    break;
  default:
    np_count(NP_C_UNKNOWN_TYPE);
  }
  return NPABI_SUCCESS;
}

/* v4+ state arguments: one 8-byte union whose meaning depends on the state. NCCL's v5 adapter
 * passes uninitialised args for states that carry none, so only the listed states read them. */
static npabi_result_t np_own_record_v4(void* h, npabi_state_t s, npabi_args_v4_t* a) {
  switch (s) {
  case NPABI_PROXY_STEP_SEND_WAIT:
  case NPABI_PROXY_STEP_RECV_FLUSH_WAIT:
    np_state(h, s, a ? a->proxyStep.transSize : 0, 0, a != NULL);
    break;
  case NPABI_PROXY_CTRL_APPEND_END:
    np_state(h, s, a ? (uint64_t)(uint32_t)a->proxyCtrl.appendedProxyOps : 0, 0, a != NULL);
    break;
  case NPABI_KERNEL_CH_STOP:
    np_state(h, s, a ? a->kernelCh.pTimer : 0, 0, a != NULL);
    break;
  case NPABI_NET_PLUGIN_UPDATE:
    np_state(h, s, a ? (uint64_t)(uintptr_t)a->netPlugin.data : 0, 0, a != NULL);
    break;
  default:
    np_state(h, s, 0, 0, 0);
  }
  return NPABI_SUCCESS;
}

/* ------------------------------------------------------------------- v5 and v6 */

/* The members v5 and v6 share (identical layout, pinned in abi.h). */
NP_HOT void np_start_v5_members(void* ctx, void** eh, int abi, int type,
                                       const npabi_descr_v5_t* d) {
  uint64_t parent = (uint64_t)(uintptr_t)d->parentObj;
  np_comm* c;
  np_pending p;
  switch (type) {
  case NP_T_COLL:
    np_start_coll(ctx, abi, eh, parent, d->rank, d->coll.seqNumber, d->coll.func, d->coll.count,
                  d->coll.datatype, d->coll.algo, d->coll.proto, d->coll.root, d->coll.nChannels,
                  d->coll.nWarps, (uint64_t)(uintptr_t)d->coll.parentGroup);
    return;
  case NP_T_P2P:
    np_start_p2p(ctx, abi, eh, parent, d->rank, d->p2p.func, d->p2p.count, d->p2p.datatype,
                 d->p2p.peer, d->p2p.nChannels, (uint64_t)(uintptr_t)d->p2p.parentGroup);
    return;
  case NP_T_PROXY_OP:
    np_start_proxy_op(ctx, abi, eh, parent, d->rank, d->proxyOp.pid, d->proxyOp.channelId,
                      d->proxyOp.peer, d->proxyOp.nSteps, d->proxyOp.chunkSize, d->proxyOp.isSend);
    return;
  case NP_T_PROXY_STEP:
    np_start_proxy_step(ctx, abi, eh, parent, d->rank, d->proxyStep.step);
    return;
  case NP_T_KERNEL_CH:
    np_start_kernel_ch(ctx, abi, eh, parent, d->kernelCh.channelId, d->kernelCh.pTimer);
    return;
  case NP_T_NET_PLUGIN:
    np_start_net(ctx, abi, eh, parent, d->rank, d->netPlugin.id, d->netPlugin.data);
    return;
  case NP_T_GROUP:
  case NP_T_PROXY_CTRL:
    np_start_plain(ctx, type, abi, eh, parent);
    return;
  case NP_T_GROUP_API:
    c = np_target(ctx, type, parent);
    if (!c || !np_begin(c, type, abi, parent, np_comm_rank(c), 0, eh, &p)) return;
    p.ev->u.gapi.t_start_api_stop = p.ev->u.gapi.t_end_api_start = 0;
    p.ev->u.gapi.depth = d->groupApi.groupDepth;
    p.ev->u.gapi.graph = d->groupApi.graphCaptured;
    np_commit(&p);
    return;
  case NP_T_COLL_API:
    c = np_target(ctx, type, parent);
    if (!c) return;
    if (!np_begin(c, type, abi, parent, np_comm_rank(c), d->collApi.graphCaptured ? NP_F_MARK : 0, eh, &p)) {
      /* An API-only operation must stay counted (a captured call never counts on its own). */
      if (*eh == (void*)NP_H_DROPPED && !d->collApi.graphCaptured)
        np_lost_add(c, NP_T_COLL_API, d->collApi.func, d->collApi.datatype, "", "", 0,
                    d->collApi.count);
      return;
    }
    p.ev->u.api.func = d->collApi.func;
    p.ev->u.api.count = d->collApi.count;
    p.ev->u.api.dtype = d->collApi.datatype;
    p.ev->u.api.root = d->collApi.root;
    p.ev->u.api.stream = (uint64_t)(uintptr_t)d->collApi.stream;
    p.ev->u.api.graph = d->collApi.graphCaptured;
    np_commit(&p);
    return;
  case NP_T_P2P_API:
    c = np_target(ctx, type, parent);
    if (!c || !np_begin(c, type, abi, parent, np_comm_rank(c), d->p2pApi.graphCaptured ? NP_F_MARK : 0, eh, &p))
      return;
    p.ev->u.api.func = d->p2pApi.func;
    p.ev->u.api.count = d->p2pApi.count;
    p.ev->u.api.dtype = d->p2pApi.datatype;
    p.ev->u.api.root = -1;
    p.ev->u.api.stream = (uint64_t)(uintptr_t)d->p2pApi.stream;
    p.ev->u.api.graph = d->p2pApi.graphCaptured;
    np_commit(&p);
    return;
  case NP_T_KERNEL_LAUNCH:
    c = np_target(ctx, type, parent);
    if (!c || !np_begin(c, type, abi, parent, np_comm_rank(c), 0, eh, &p)) return;
    p.ev->u.launch.stream = (uint64_t)(uintptr_t)d->kernelLaunch.stream;
    np_commit(&p);
    return;
  default:
    np_count(NP_C_UNKNOWN_TYPE);
  }
}

static npabi_result_t np_own_start_v5(void* ctx, void** eh, npabi_descr_v5_t* d) {
  int type;
  if (np_admit(eh, d, d ? d->type : 0, &type)) np_start_v5_members(ctx, eh, 5, type, d);
  return NPABI_SUCCESS;
}

/* CE events (v6): recorded with their CPU enqueue interval. Their GPU timing would need CUDA
 * events on ceColl.stream; the plugin does not link CUDA, so it is not measured. */
static npabi_result_t np_own_start_v6(void* ctx, void** eh, npabi_descr_v6_t* d) {
  int type;
  if (!np_admit(eh, d, d ? d->type : 0, &type)) return NPABI_SUCCESS;
  if (type < NP_T_CE_COLL) {
    np_start_v5_members(ctx, eh, 6, type, (const npabi_descr_v5_t*)d);
    return NPABI_SUCCESS;
  }
  uint64_t parent = (uint64_t)(uintptr_t)d->parentObj;
  np_comm* c = np_target(ctx, type, parent);
  np_pending p;
  if (!c || !np_begin(c, type, 6, parent, np_rank_or_comm(c, d->rank), 0, eh, &p))
    return NPABI_SUCCESS;
  if (type == NP_T_CE_COLL) {
    p.ev->u.ce.seq = d->ceColl.seqNumber;
    p.ev->u.ce.func = d->ceColl.func;
    p.ev->u.ce.count = d->ceColl.count;
    p.ev->u.ce.root = d->ceColl.root;
    p.ev->u.ce.dtype = d->ceColl.datatype;
    p.ev->u.ce.sync = d->ceColl.syncStrategy;
    p.ev->u.ce.intra_sync = d->ceColl.intraBatchSync;
    p.ev->u.ce.batch_size = d->ceColl.batchSize;
    p.ev->u.ce.num_batches = d->ceColl.numBatches;
    p.ev->u.ce.ce_seq = d->ceColl.ceSeqNum;
    p.ev->u.ce.stream = (uint64_t)(uintptr_t)d->ceColl.stream;
  } else if (type == NP_T_CE_SYNC) {
    p.ev->u.ceaux.total_bytes = 0;
    p.ev->u.ceaux.flag = d->ceCollSync.isComplete;
    p.ev->u.ceaux.n = d->ceCollSync.nRanks;
  } else {
    p.ev->u.ceaux.n = d->ceCollBatch.numOps;
    p.ev->u.ceaux.total_bytes = d->ceCollBatch.totalBytes;
    p.ev->u.ceaux.flag = d->ceCollBatch.useIntraSync;
  }
  np_commit(&p);
  return NPABI_SUCCESS;
}

/* ------------------------------------------------------------------- the exported callbacks */
/* Each is ncclprof's own, or, once a plugin is chained (NCCLPROF_CHAIN), chain.c's, which calls
 * ncclprof's own and the chained plugin's. */

#define NP_CHAINED NP_UNLIKELY(__atomic_load_n(&np_chain_on, __ATOMIC_RELAXED))

#define NP_START(N)                                                                              \
  static npabi_result_t np_start_v##N(void* ctx, void** eh, npabi_descr_v##N##_t* d) {          \
    if (NP_CHAINED) return np_chain_start(N, ctx, eh, d, (np_start_fn)np_own_start_v##N);     \
    return np_own_start_v##N(ctx, eh, d);                                                       \
  }
NP_START(1)
NP_START(2)
NP_START(3)
NP_START(4)
NP_START(5)
NP_START(6)

static npabi_result_t np_record_v1(void* h, npabi_state_t s, npabi_args_v1_t* a) {
  if (NP_CHAINED) return np_chain_record(1, h, s, a, (np_record_fn)np_own_record_v1);
  return np_own_record_v1(h, s, a);
}
static npabi_result_t np_record_v4(void* h, npabi_state_t s, npabi_args_v4_t* a) {
  if (NP_CHAINED) return np_chain_record(4, h, s, a, (np_record_fn)np_own_record_v4);
  return np_own_record_v4(h, s, a);
}

/* init: ncclprof's communicator first, then the chained plugin's (NCCLPROF_CHAIN is read at the
 * first init). v1–v3 NCCL passes no communicator details. */
#define NP_INIT_V1(N)                                                                            \
  static npabi_result_t np_init_v##N(void** ctx, int* mask) {                                   \
    if (ctx) *ctx = np_init_comm(N, 0, NULL, 0, 0, 0, NULL, mask);                              \
    if (ctx) np_chain_init(N, *ctx, 0, NULL, 0, 0, 0, NULL, mask);                              \
    return NPABI_SUCCESS;                                                                       \
  }
NP_INIT_V1(1)
NP_INIT_V1(2)
NP_INIT_V1(3)
static npabi_result_t np_init_v4(void** ctx, int* mask, const char* name, uint64_t hash,
                                 int nnodes, int nranks, int rank, npabi_logger_t log) {
  if (ctx) *ctx = np_init_comm(4, hash, name, nnodes, nranks, rank, log, mask);
  if (ctx) np_chain_init(4, *ctx, hash, name, nnodes, nranks, rank, log, mask);
  return NPABI_SUCCESS;
}
#define NP_INIT_V5(N)                                                                            \
  static npabi_result_t np_init_v##N(void** ctx, uint64_t id, int* mask, const char* name,      \
                                     int nnodes, int nranks, int rank, npabi_logger_t log) {    \
    if (ctx) *ctx = np_init_comm(N, id, name, nnodes, nranks, rank, log, mask);                 \
    if (ctx) np_chain_init(N, *ctx, id, name, nnodes, nranks, rank, log, mask);                 \
    return NPABI_SUCCESS;                                                                       \
  }
NP_INIT_V5(5)
NP_INIT_V5(6)

static npabi_result_t np_own_stop(void* h) {
  np_stop(h);
  return NPABI_SUCCESS;
}
static npabi_result_t np_stop_cb(void* h) {
  if (NP_CHAINED) return np_chain_stop(h, np_own_stop);
  return np_own_stop(h);
}

static npabi_result_t np_finalize_cb(void* ctx) {
  if (NP_CHAINED) np_chain_finalize(ctx); /* first: the index may be reused right after */
  np_finalize_comm(ctx);
  return NPABI_SUCCESS;
}

#define NP_EXPORT __attribute__((visibility("default")))
NP_EXPORT npabi_profiler_v1_t ncclProfiler_v1 = {"ncclprof", np_init_v1, np_start_v1, np_stop_cb,
                                                 np_record_v1, np_finalize_cb};
NP_EXPORT npabi_profiler_v2_t ncclProfiler_v2 = {"ncclprof", np_init_v2, np_start_v2, np_stop_cb,
                                                 np_record_v1, np_finalize_cb};
NP_EXPORT npabi_profiler_v3_t ncclProfiler_v3 = {"ncclprof", np_init_v3, np_start_v3, np_stop_cb,
                                                 np_record_v1, np_finalize_cb};
NP_EXPORT npabi_profiler_v4_t ncclProfiler_v4 = {"ncclprof", np_init_v4, np_start_v4, np_stop_cb,
                                                 np_record_v4, np_finalize_cb};
NP_EXPORT npabi_profiler_v5_t ncclProfiler_v5 = {"ncclprof", np_init_v5, np_start_v5, np_stop_cb,
                                                 np_record_v4, np_finalize_cb};
NP_EXPORT npabi_profiler_v6_t ncclProfiler_v6 = {"ncclprof", np_init_v6, np_start_v6, np_stop_cb,
                                                 np_record_v4, np_finalize_cb};
