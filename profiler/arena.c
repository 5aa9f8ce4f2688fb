/*
 * arena.c — ProxyOps and ProxySteps in flight: their states, stops and retirement, and the
 * lost-operation table. One section of the C library's core; state.h declares what the sections
 * share.
 */
#define _GNU_SOURCE

#include "state.h"
#include "hot.h"

static int np_step_cell(int state) {
  switch (state) {
  case NPABI_PROXY_STEP_SEND_GPU_WAIT: return NP_ST_SEND_GPU_WAIT;
  case NPABI_PROXY_STEP_SEND_PEER_WAIT: return NP_ST_SEND_PEER_WAIT;
  case NPABI_PROXY_STEP_SEND_WAIT: return NP_ST_SEND_WAIT;
  case NPABI_PROXY_STEP_RECV_WAIT: return NP_ST_RECV_WAIT;
  case NPABI_PROXY_STEP_RECV_FLUSH_WAIT: return NP_ST_RECV_FLUSH_WAIT;
  case NPABI_PROXY_STEP_RECV_GPU_WAIT: return NP_ST_RECV_GPU_WAIT;
  default: return -1;
  }
}

/* A state of a ProxyOp or ProxyStep in flight (the inline path takes most step states). */
void np_cell_state(np_cell* cell, int state, uint64_t a0, int has_args, uint64_t now) {
  __atomic_store_n(&cell->nstates, (uint16_t)(cell->nstates + 1), __ATOMIC_RELAXED);
  if (cell->type == NP_T_PROXY_STEP) {
    int k = np_step_cell(state);
    if (k >= 0) {
      if (k == NP_ST_SEND_PEER_WAIT) cell->u.step.npeerwait++;
      if (cell->u.step.t_state[k] == 0) cell->u.step.t_state[k] = now;
      if ((k == NP_ST_SEND_WAIT || k == NP_ST_RECV_FLUSH_WAIT) && has_args)
        cell->u.step.trans_size = a0;
      cell->last_state = state;
      cell->t_last = now;
      return;
    }
  } else if (state == NPABI_PROXY_OP_IN_PROGRESS ||
             (state >= NPABI_PROXY_OP_SEND_POSTED && state <= NPABI_PROXY_OP_RECV_DONE)) {
    np_op_progress* pg = &cell->u.op.prog;
    if (pg->t_progress == 0) pg->t_progress = now;
    if (has_args && a0 > pg->trans_size) pg->trans_size = a0; /* v1–v3 total */
    cell->last_state = state;
    cell->t_last = now;
    return;
  }
  np_count(NP_C_UNKNOWN_STATE);
}

/* v1–v3: a ProxyOp state carrying the op's running total; returns the bytes it adds (the
 * transfer the step state that follows on this thread is about), or 0 if unknown. */
uint64_t np_op_running_total(void* handle, int state, uint64_t total) {
  uint64_t h = (uint64_t)(uintptr_t)handle, added = 0;
  if (np_is_sentinel(h)) return 0;
  if (!np_h_is_cell(h)) { /* not a ProxyOp of ours: let the general path judge it */
    np_state(handle, state, total, 0, 1);
    return 0;
  }
  np_thread* t = np_enter();
  if (t == NULL) return 0;
  np_comm* c = np_handle_comm(h);
  np_cell* cell = c ? np_cell_of(c, h) : NULL;
  if (cell != NULL && cell->type == NP_T_PROXY_OP) {
    uint64_t had = cell->u.op.prog.trans_size;
    added = total > had ? total - had : 0;
    if (cell->u.op.record == 0) np_op_record(c, t, cell, h); /* its first sign of life */
    np_cell_state(cell, state, total, 1, np_ticks());
  } else if (c != NULL) {
    np_count(NP_C_STALE_HANDLE);
  }
  np_leave(t);
  return added;
}

/* A ProxyStep recorded whole into the detail windows (a trace wants it). */
static void np_step_record(np_comm* c, np_thread* t, const np_cell* s, uint64_t h, uint64_t now) {
  uint32_t wi, slot, ep;
  np_event* ev = np_claim(c, t, NP_SET_DETAIL, &wi, &slot, &ep);
  if (ev == NULL) {
    np_count_trace_drop(c, NP_T_PROXY_STEP);
    return;
  }
  ev->parent = s->parent;
  ev->t_start = s->t_start;
  ev->t_stop = now;
  ev->tid = s->tid;
  ev->rank = s->rank;
  ev->nstates = s->nstates;
  ev->sflags = s->sflags;
  memset(&ev->u.step, 0, sizeof ev->u.step);
  memcpy(ev->u.step.t_state, s->u.step.t_state, sizeof ev->u.step.t_state);
  ev->u.step.trans_size = s->u.step.trans_size;
  ev->u.step.cell = h;
  ev->u.step.step = s->u.step.step;
  ev->u.step.npeerwait = s->u.step.npeerwait;
  ev->done = 1;
  __atomic_store_n(&ev->hdr, (uint64_t)ep | ((uint64_t)NP_T_PROXY_STEP << 32) |
                                 ((uint64_t)s->abi << 40) | ((uint64_t)s->sflags << 48),
                   __ATOMIC_RELEASE);
}

/* A ProxyOp's record in the operation windows (how the drainer links it to its operation),
 * written at its first sign of life (a state, a step, its stop) rather than at its start: a
 * ProxyOp NCCL never reports on (CollNet, P2P/SHM copy engine: docs/nccl-patterns.md) then
 * costs no record, and its operation completes without it. The record keeps the start time. */
void np_op_record(np_comm* c, np_thread* t, np_cell* op, uint64_t h) {
  uint64_t wh = 0, hdr = 0;
  np_event* ev = np_slot_new(c, t, NP_T_PROXY_OP, op->abi, op->parent, op->rank, op->sflags, &wh, &hdr);
  if (ev == NULL) { /* its steps still count: the cell has what they need */
    __atomic_store_n(&op->u.op.record, NP_H_DROPPED, __ATOMIC_RELAXED);
    np_count_drop(c, NP_T_PROXY_OP);
    return;
  }
  ev->t_start = op->t_start;
  memset(&ev->u.op, 0, sizeof ev->u.op);
  ev->u.op.arena = h;
  ev->u.op.pid = op->u.op.pid;
  ev->u.op.channel = op->channel;
  ev->u.op.peer = op->peer;
  ev->u.op.nsteps = op->u.op.nsteps;
  ev->u.op.chunk = op->chunk;
  ev->u.op.is_send = op->is_send;
  __atomic_store_n(&ev->hdr, hdr, __ATOMIC_RELEASE);
  __atomic_store_n(&op->u.op.record, wh, __ATOMIC_RELAXED); /* np_op_retire reads it */
}

/* A ProxyOp stopped: its record in the operation windows gets the stop and what the cell
 * gathered, in place while its window accepts writes, else as a late record. */
static void np_op_finish(np_comm* c, np_thread* t, np_cell* op, uint64_t h, uint64_t now) {
  if (op->u.op.record == 0) np_op_record(c, t, op, h); /* stopped without a state or a step */
  uint64_t rec = op->u.op.record;
  if (rec == NP_H_DROPPED) return; /* it got no slot (counted) */
  np_event* ev = np_slot_of(c, rec, 0);
  if (ev == NULL || np_ev_type(ev) != NP_T_PROXY_OP) {
    np_late(c, t, h, NP_LATE_STOP, 0, 0, 0, op);
    return;
  }
  ev->u.op.prog = op->u.op.prog;
  ev->nstates = op->nstates;
  ev->t_stop = now;
  __atomic_store_n(&ev->done, 1, __ATOMIC_RELEASE);
}

/* The queue a receive ProxyOp waits in, by the peer it is keyed on: NCCL's proxy appends a
 * ProxyOp behind what its connection's `proxyAppendPtr` names (proxy.cc ProxyAppend). A P2P
 * receive over the network shares one queue per channel with every peer's (net.cc
 * recvConnect: `localPeers[tpLocalRank]->recv.proxyAppend + channelId` when the connection uses
 * shared buffers, which P2P connections do unless NCCL_NET_SHARED_BUFFERS is 0; recvSetup,
 * v2.23.4-1 to v2.30.7-1); a collective's has its own (channel, peer) connection. A P2P receive
 * is keyed on its channel alone even where its connection is its own (shared buffers off, or a
 * transport other than the network): waiting for other peers' receives only delays a
 * retirement, never makes a wrong one. So is one whose parent is not a record of ours (its
 * Coll or P2p found no slot: a sentinel handle), which could be either. */
#define NP_QUEUE_SHARED ((int32_t)0xfffffe) /* a key no peer has, never 0 (np_conn_of) */
static int32_t np_queue_peer(const np_cell* op) {
  uint64_t parent = __atomic_load_n(&op->parent, __ATOMIC_RELAXED);
  int coll = (parent & 3u) == 1u && !np_h_mark(parent); /* a window record, not a P2p */
  return coll ? __atomic_load_n(&op->peer, __ATOMIC_RELAXED) : NP_QUEUE_SHARED;
}

/* The receive queue of a ProxyOp (channel, peer) in the communicator's table; with
 * `take`, an entry another connection held is taken over (its counts start again). NULL when
 * the connection is not there. Only NCCL's proxy thread of the communicator comes here; the
 * relaxed atomics keep other callers (the fuzzer's threads) defined, not right. */
static np_conn* np_conn_of(np_comm* c, uint8_t channel, int32_t peer, int take) {
  uint32_t key = (((uint32_t)channel << 24) | ((uint32_t)peer & 0xffffffu)) + 1;
  np_conn* e = &c->conn[((key * 2654435761u) >> 16) & (NP_CONNS - 1)];
  if (__atomic_load_n(&e->key, __ATOMIC_RELAXED) == key) return e;
  if (!take) return NULL;
  __atomic_store_n(&e->key, key, __ATOMIC_RELAXED);
  __atomic_store_n(&e->started, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&e->ended, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&e->t_stop, 0, __ATOMIC_RELAXED);
  return e;
}

/* A receive ProxyOp started: its place in its queue's order. A load and a store, not an atomic
 * add: only the communicator's proxy thread counts here (np_conn_of), and the locked add cost
 * the CollNet row of bench-nccl 0.05-0.1 of the floor. */
void np_conn_started(np_comm* c, np_cell* op) {
  np_conn* e = np_conn_of(c, op->channel, np_queue_peer(op), 1);
  uint32_t seq = __atomic_load_n(&e->started, __ATOMIC_RELAXED);
  __atomic_store_n(&e->started, seq + 1, __ATOMIC_RELAXED);
  __atomic_store_n(&op->conn_seq, seq, __ATOMIC_RELAXED);
}

/* The queue a receive ProxyOp started in, or NULL when its entry went to another queue. */
static np_conn* np_queue_of(np_comm* c, const np_cell* op) {
  return np_conn_of(c, __atomic_load_n(&op->channel, __ATOMIC_RELAXED), np_queue_peer(op), 0);
}

/* A receive ProxyOp of queue e ended: stopped by NCCL (`stopped`, at `now`) or retired. */
static void np_conn_ended(np_conn* e, int stopped, uint64_t now) {
  if (e == NULL) return;
  __atomic_store_n(&e->ended, __atomic_load_n(&e->ended, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
  if (stopped) __atomic_store_n(&e->t_stop, now, __ATOMIC_RELAXED);
}

/* Whether a silent receive ProxyOp of queue e may only be waiting behind the queue's earlier
 * ones: one of them has not ended, or the last ended after the evidence (a ProxyOp that started
 * at `evidence`) began, so its first pass may still be to come. */
static int np_conn_queued(const np_conn* e, const np_cell* op, uint64_t evidence) {
  if (e == NULL) return 0; /* its entry went to another queue: nothing known */
  uint32_t ended = __atomic_load_n(&e->ended, __ATOMIC_RELAXED);
  uint32_t seq = __atomic_load_n(&op->conn_seq, __ATOMIC_RELAXED);
  return (int32_t)(ended - seq) < 0 || __atomic_load_n(&e->t_stop, __ATOMIC_RELAXED) > evidence;
}

/* What np_op_retire did. */
enum { NP_RETIRE_NO, NP_RETIRE_DONE, NP_RETIRE_QUEUED };

/* Retires a ProxyOp NCCL will never stop, if it is one: no state and no step since it started
 * (net.cc records InProgress and starts steps on its first pass over an operation, so a
 * ProxyOp of net.cc's that had passes has both; one without has no record either), and not
 * queued behind its connection (NP_RETIRE_QUEUED: its first pass may come after `evidence`).
 * A compare-and-swap frees the generation its handle names, so a cell stopped or reused
 * meanwhile is left alone. The fields are read atomically: the generation was checked first,
 * but another thread may be reusing the cell as they are read (never under NCCL, whose proxy
 * thread alone starts and stops a communicator's ProxyOps). */
static int np_op_retire(np_comm* c, np_thread* t, np_cell* op, uint64_t h, int counter,
                        uint64_t evidence) {
  (void)t;
  uint64_t gs = __atomic_load_n(&op->gs, __ATOMIC_ACQUIRE);
  if (!(gs & 1) || ((uint32_t)(gs >> 1) & NP_GEN_MASK) != np_h_gen(h)) return NP_RETIRE_NO;
  if (__atomic_load_n(&op->type, __ATOMIC_RELAXED) != NP_T_PROXY_OP ||
      __atomic_load_n(&op->nstates, __ATOMIC_RELAXED) != 0 ||
      __atomic_load_n(&op->u.op.record, __ATOMIC_RELAXED) != 0)
    return NP_RETIRE_NO;
  np_conn* e = np_queue_of(c, op);
  if (np_conn_queued(e, op, evidence)) return NP_RETIRE_QUEUED;
  if (!__atomic_compare_exchange_n(&op->gs, &gs, gs + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
    return NP_RETIRE_NO;
  np_conn_ended(e, 0, 0);
  np_count(counter);
  return NP_RETIRE_DONE;
}

/* A ProxyOp stopped after it started at `started`: net.cc progressed it to the end, so every
 * ProxyOp this communicator's proxy thread started before it has had progress passes since,
 * and the operations they belong to are over (a later operation's network work completed).
 * Those still without a state or a step are none of net.cc's: they are retired. Except one
 * queued behind its own connection (np_conn): it waits at the head for later evidence. */
static void np_retire_due(np_comm* c, np_thread* t, uint64_t started) {
  uint32_t head = __atomic_load_n(&c->rq_head, __ATOMIC_RELAXED);
  uint32_t n = __atomic_load_n(&c->rq_tail, __ATOMIC_RELAXED) - head;
  /* Callers racing on one communicator (never NCCL's one proxy thread) can make the two
   * indexes disagree: at most one lap is looked at, so the loop is bounded whatever they read. */
  if (n > NP_RETIRE_RING) n = NP_RETIRE_RING;
  for (; n > 0; n--, head++) {
    uint64_t h = __atomic_load_n(&c->rq[head & (NP_RETIRE_RING - 1)], __ATOMIC_ACQUIRE);
    np_cell* op = np_cell_of(c, h);
    if (op != NULL && __atomic_load_n(&op->t_start, __ATOMIC_RELAXED) > started)
      break; /* started after the evidence */
    if (op != NULL && np_op_retire(c, t, op, h, NP_C_OPS_RETIRED, started) == NP_RETIRE_QUEUED)
      break; /* it stays at the head for later evidence */
  }
  __atomic_store_n(&c->rq_head, head, __ATOMIC_RELAXED);
}

/* The ring is full: its oldest ProxyOp has seen NP_RETIRE_RING others start after it and no
 * ProxyOp stop (a communicator whose every operation is CollNet, say). Retired if it still has
 * no state and no step; counted apart, since no stop proved its operation over. One queued
 * behind its connection is left to NCCL (a burst of operations posted at once, as 200
 * back-to-back ring Send/Recv groups on the socket transport queue over a thousand receive
 * ProxyOps): only its place in the ring goes. */
void np_retire_oldest(np_comm* c, np_thread* t) {
  uint32_t head = __atomic_load_n(&c->rq_head, __ATOMIC_RELAXED);
  uint64_t h = __atomic_load_n(&c->rq[head & (NP_RETIRE_RING - 1)], __ATOMIC_ACQUIRE);
  np_cell* op = np_cell_of(c, h);
  if (op != NULL) (void)np_op_retire(c, t, op, h, NP_C_OPS_RETIRED_OLD, UINT64_MAX);
  __atomic_store_n(&c->rq_head, head + 1, __ATOMIC_RELAXED);
}

/* stopEvent of a ProxyOp or ProxyStep: fold, record where wanted, free the cell. */
void np_cell_stop(np_comm* c, np_thread* t, np_cell* cell, uint64_t h, uint64_t now) {
  if (cell->type == NP_T_PROXY_STEP) {
    np_cell* op = np_h_is_cell(cell->parent) && np_h_comm(cell->parent) == c->idx
                      ? np_cell_of(c, cell->parent) : NULL;
    if (cell->sflags & NP_F_NO_OP) op = NULL; /* no pair or channel to fold into */
    else np_step_fold(c, t, cell, op, now);
    /* Recorded whole for a trace: every step while a trace window wants detail, else the
     * steps of operations sampled for the sampled trace. */
    if (__atomic_load_n(&np_detail_on, __ATOMIC_RELAXED) || (cell->sflags & NP_F_SAMPLE_BITS))
      np_step_record(c, t, cell, h, now);
    np_cell_free(cell);
    return;
  }
  uint64_t started = cell->t_start;
  np_op_finish(c, t, cell, h, now);
  if (!cell->is_send && !(cell->sflags & NP_F_FOREIGN))
    np_conn_ended(np_queue_of(c, cell), 1, now);
  np_cell_free(cell);
  if (__atomic_load_n(&c->rq_head, __ATOMIC_RELAXED) != __atomic_load_n(&c->rq_tail, __ATOMIC_RELAXED))
    np_retire_due(c, t, started);
}

/* A Coll or P2p that found no slot: its count goes into the lost-operation table, keyed like
 * an operation, so counts and bytes stay exact (only its timings are missing). */
void np_lost_add(np_comm* c, int type, const char* func, const char* dtype, const char* algo,
                 const char* proto, uint32_t nch, uint64_t count) {
  uint64_t tag = ((uint64_t)(uintptr_t)func * 31 + (uint64_t)(uintptr_t)dtype) * 31 +
                 (uint64_t)(uintptr_t)algo;
  tag = ((tag * 31 + (uint64_t)(uintptr_t)proto) * 31 + nch) * 31 + (uint64_t)type;
  tag = (tag * 0x9E3779B97F4A7C15ull) | 1;
  np_count(NP_C_LOST_OPS);
  for (uint32_t k = 0; k < NP_LOST_KEYS; k++) {
    np_lost* e = &c->lost[(tag + k) % NP_LOST_KEYS];
    uint64_t cur = __atomic_load_n(&e->tag, __ATOMIC_ACQUIRE);
    if (cur == 0) {
      uint64_t zero = 0;
      if (__atomic_compare_exchange_n(&e->tag, &zero, tag, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        e->func = func;
        e->dtype = dtype;
        e->algo = algo;
        e->proto = proto;
        e->type = (uint32_t)type;
        e->nchannels = nch;
        __atomic_store_n(&e->sum_count, count, __ATOMIC_RELAXED);
        __atomic_store_n(&e->n, 1, __ATOMIC_RELEASE); /* publishes the fields */
        return;
      }
      cur = zero;
    }
    /* Another thread may still be writing the fields of an entry it just claimed: only a
     * published entry (n > 0) is compared, and a duplicate entry for one key is harmless. */
    if (cur == tag && __atomic_load_n(&e->n, __ATOMIC_ACQUIRE) > 0 && e->func == func &&
        e->dtype == dtype && e->algo == algo && e->proto == proto && e->nchannels == nch &&
        e->type == (uint32_t)type) {
      __atomic_fetch_add(&e->sum_count, count, __ATOMIC_RELAXED);
      __atomic_fetch_add(&e->n, 1, __ATOMIC_RELEASE);
      return;
    }
  }
  np_count(NP_C_LOST_UNKEYED);
}
