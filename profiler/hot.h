/*
 * hot.h — the inline hot path: what runs on NCCL's threads for every callback.
 *
 * Cost model (measured on the development machine, AMD EPYC): rdtsc ≈ 12 ns, an uncontended
 * atomic ≈ 2.5 ns, a cache line bouncing between two threads ≈ 50+ ns. So a callback reads the
 * counter once, claims slots from a per-thread block (one atomic per NP block of events, not
 * per event, and no shared line written per event), and marks itself active with a plain
 * store: the drainer makes those stores visible with membarrier(2) before it reads a window.
 */
#ifndef NCCLPROF_HOT_H
#define NCCLPROF_HOT_H

#include <stddef.h>
#include <string.h>

#include "state.h"
#include "ticks.h"

/* The drainer's clock, read at its last pass (a few ms old at most), for a moment whose time
 * no figure is computed from: it saves the counter read that is most of a callback's cost. The
 * counter is read instead when `exact`, when a trace wants detail now, and before the
 * drainer's first pass. */
NP_HOT uint64_t np_coarse_unless(int exact) {
  uint64_t t = __atomic_load_n(&np_coarse.tsc, __ATOMIC_RELAXED);
  if (NP_LIKELY(t != 0) && !exact && !__atomic_load_n(&np_detail_on, __ATOMIC_RELAXED)) return t;
  return np_ticks();
}

/* The time of a ProxyStep moment no figure is computed from (its start, SendGPUWait,
 * SendPeerWait, RecvWait, RecvFlushWait, RecvGPUWait): the coarse clock (a hang dump's "in this
 * state since" needs no more). Read exactly when the step is recorded whole (a trace wants
 * detail, or sampled tracing chose its operation). A send's SendWait and stop, whose
 * difference is its transfer time, and every stop (its ProxyOp's latest activity, which says
 * when a ProxyOp NCCL leaves unstopped finished its steps) always read the counter. */
NP_HOT uint64_t np_step_clock(uint16_t sflags) {
  return np_coarse_unless(sflags & NP_F_SAMPLE_BITS);
}

/* Launch-side moments only a trace draws: a KernelLaunch's and a Group's start and stop, and
 * GroupApi's two states (ncclGroupStart returned, ncclGroupEnd called). The aggregator counts
 * these events and uses no time of theirs (the API time is CollApi/P2pApi's, the arrival Coll's
 * or P2p's), so they take the coarse clock unless a trace may draw them: a trace wants detail,
 * or sampled tracing is on (it chooses an operation after these events came, so they must be
 * exact when they come). On NCCL's user thread this halves the counter reads of a collective
 * call (docs/bench-nccl.md). */
NP_HOT int np_is_trace_timed(int type) { return type == NP_T_KERNEL_LAUNCH || type == NP_T_GROUP; }

NP_HOT int np_is_trace_state(int state) {
  return state == NPABI_GROUP_START_API_STOP || state == NPABI_GROUP_END_API_START;
}

NP_HOT uint64_t np_trace_clock(void) {
  return np_coarse_unless(__atomic_load_n(&np_sample_n, __ATOMIC_RELAXED) != 0);
}

/* The start or stop time of a window event of `type`. */
NP_HOT uint64_t np_event_clock(int type) {
  return np_is_trace_timed(type) ? np_trace_clock() : np_ticks();
}

/* Enter/leave a callback. Between them the drainer will not read a window this thread may
 * write. With membarrier the entry needs no fence: the drainer's membarrier orders it. */
NP_HOT np_thread* np_enter(void) {
  np_thread* t = np_tls;
  if (NP_UNLIKELY(t == NULL)) {
    t = np_thread_attach();
    if (t == NULL) return NULL;
  }
#if defined(NP_TSAN)
  __atomic_fetch_add(&t->active, 1, __ATOMIC_SEQ_CST);
#else
  __atomic_store_n(&t->active, t->active + 1, __ATOMIC_RELAXED);
  if (NP_UNLIKELY(np_fence_mode)) __atomic_thread_fence(__ATOMIC_SEQ_CST);
  else __atomic_signal_fence(__ATOMIC_SEQ_CST);
#endif
  return t;
}

NP_HOT void np_leave(np_thread* t) {
#if defined(NP_TSAN)
  __atomic_fetch_add(&t->active, 1, __ATOMIC_SEQ_CST);
#else
  __atomic_store_n(&t->active, t->active + 1, __ATOMIC_RELEASE);
#endif
}

/* The entry a context points into, and the token it carries (np_ctx_of), whatever its
 * incarnation; NULL if it is not one of ours. Address arithmetic only: a foreign pointer is
 * never dereferenced. Entry 0 (PXN) is never a context. */
NP_HOT np_comm* np_ctx_entry(void* ctx, uint32_t* token) {
  uintptr_t off = (uintptr_t)ctx - (uintptr_t)np_comms;
  if (off >= sizeof(np_comms) || off < sizeof(np_comm)) return NULL;
  *token = (uint32_t)(off & (NP_CTX_TOKENS - 1));
  return &np_comms[off / sizeof(np_comm)];
}

/* A context NCCL passed, if it is one of ours and names the entry's current incarnation.
 * Whether that is live is checked again by np_begin inside the active section. */
NP_HOT np_comm* np_comm_of_ctx(void* ctx) {
  uint32_t token;
  np_comm* c = np_ctx_entry(ctx, &token);
  if (c == NULL) return NULL;
  uint32_t w = __atomic_load_n(&c->state, __ATOMIC_ACQUIRE);
  return (NP_CS_INC(w) & (NP_CTX_TOKENS - 1)) == token ? c : NULL;
}

/* Counts a context np_comm_of_ctx refused: one of a finalized communicator, or not ours. */
NP_HOT void np_count_bad_ctx(void* ctx) {
  uint32_t token;
  if (ctx != NULL) np_count(np_ctx_entry(ctx, &token) ? NP_C_STALE_CONTEXT : NP_C_FOREIGN_CONTEXT);
}

/* The communicator a handle belongs to, if the handle is well formed and that comm is live. */
NP_HOT np_comm* np_comm_of_handle(uint64_t h) {
  if (!(h & 1)) return NULL;
  np_comm* c = &np_comms[np_h_comm(h)];
  _Static_assert(NP_MAX_COMMS == 1024, "handles have 10 comm bits");
  uint32_t st = np_comm_state(c);
  if (st != NP_COMM_ACTIVE && st != NP_COMM_FINALIZING) return NULL;
  /* The window index needs no check: 3 bits index an array of 8, and windows past nwin keep
   * epoch 0, which no handle carries. Slot and cell indexes must stay inside their arrays. */
  if (np_h_is_cell(h)) return np_h_cell(h) < c->ncells ? c : NULL;
  if (np_h_slot(h) >= c->set[np_h_set(h)].nslots) return NULL;
  return c;
}

/* The slot a window handle names while its window still accepts writes (FILLING or CLOSING),
 * with `readable` also while SEALED. Must be called between np_enter and np_leave. */
NP_HOT np_event* np_slot_of(np_comm* c, uint64_t h, int readable) {
  np_window* w = &c->set[np_h_set(h)].win[np_h_win(h)];
  uint64_t se = __atomic_load_n(&w->se, __ATOMIC_ACQUIRE);
  uint32_t st = NP_SE_STATE(se);
  if (NP_SE_EPOCH(se) != np_h_epoch(h)) return NULL;
  if (st == NP_W_FILLING || st == NP_W_CLOSING || (readable && st == NP_W_SEALED))
    return &w->slots[np_h_slot(h)];
  return NULL;
}

/* The cell a cell handle names while it is in use by that handle's event (the handle may be
 * made up: its index is checked here, not trusted from where it came). */
NP_HOT np_cell* np_cell_of(np_comm* c, uint64_t h) {
  if (NP_UNLIKELY(np_h_cell(h) >= c->ncells)) return NULL;
  np_cell* cell = &c->cells[np_h_cell(h)];
  uint64_t gs = __atomic_load_n(&cell->gs, __ATOMIC_ACQUIRE);
  if (!(gs & 1) || ((uint32_t)(gs >> 1) & NP_GEN_MASK) != np_h_gen(h)) return NULL;
  return cell;
}

/* The thread's block for a communicator's window set: direct-mapped (a thread rarely serves
 * more than a few communicators at once; a collision just claims a new block). */
NP_HOT np_tcache* np_tcache_for(np_thread* t, uint32_t comm, uint32_t set) {
  np_tcache* e = &t->cache[(comm * 2 + set) % NP_TCACHE];
  if (NP_UNLIKELY(e->comm != comm || e->set != set)) {
    e->epoch = 0;
    e->comm = comm;
    e->set = set;
  }
  return e;
}

/* Detail events go to the detail windows, and only while a trace wants them: nothing else
 * reads them, and a flood of them must never take an operation's slot. */
NP_HOT int np_is_detail_type(int type) {
  return type == NP_T_PROXY_STEP || type == NP_T_NET_PLUGIN || type == NP_T_PROXY_CTRL;
}

/* Slots this many events ahead of the one being claimed are fetched for writing now. */
#define NP_PREFETCH_AHEAD 4

/* The slots the thread will write a few events from now (in its block, below `end`) are
 * fetched now: their two lines each (which the drainer read a lap ago, or which left the
 * cache as the windows cycled) then arrive while NCCL does its own work, instead of stalling
 * the event that writes them. A fresh block (`fresh`) fetches its first slots at once. */
NP_HOT void np_prefetch_write(const void* p) {
#if defined(__x86_64__)
  /* PREFETCHW: the line arrives owned, so the store that follows needs no second trip to
   * take it from the drainer's core (a plain prefetch brings it shared). A no-op where the
   * CPU lacks it. */
  __asm__ __volatile__("prefetchw %0" : : "m"(*(const char*)p));
#else
  __builtin_prefetch(p, 1, 3);
#endif
}

NP_HOT void np_slot_prefetch(np_window* w, uint32_t s, uint32_t end, int fresh) {
  for (uint32_t k = fresh ? 1 : NP_PREFETCH_AHEAD; k <= NP_PREFETCH_AHEAD; k++) {
    if (s + k >= end) return;
    np_prefetch_write(&w->slots[s + k]);
    np_prefetch_write((char*)&w->slots[s + k] + 64);
  }
}

/* A slot in the current window of a communicator's set; the thread must have entered. */
NP_HOT np_event* np_claim(np_comm* c, np_thread* t, uint32_t set, uint32_t* win, uint32_t* slot,
                          uint32_t* epoch) {
  np_wset* ws = &c->set[set];
  np_tcache* e = np_tcache_for(t, c->idx, set);
  for (int attempt = 0; attempt < 3; attempt++) {
    uint32_t wi = __atomic_load_n(&ws->cur, __ATOMIC_ACQUIRE);
    np_window* w = &ws->win[wi];
    uint64_t se = __atomic_load_n(&w->se, __ATOMIC_ACQUIRE);
    uint32_t st = NP_SE_STATE(se), ep = NP_SE_EPOCH(se);
    if (NP_UNLIKELY(st != NP_W_FILLING && st != NP_W_CLOSING)) continue; /* rotating */
    uint32_t s;
    int fresh = 0;
    if (e->epoch == ep && e->win == wi && e->next < e->end) { /* epoch 0: no block */
      s = e->next++;
    } else {
      s = __atomic_fetch_add(&w->claimed, ws->block, __ATOMIC_RELAXED);
      if (NP_UNLIKELY(s >= ws->nslots)) {
        e->epoch = 0;
        np_rotate(c, set, wi);
        /* No window free (the drainer is behind): give up now, so a drop stays cheaper than a
         * record, rather than claim from the same full window again. */
        if (__atomic_load_n(&ws->cur, __ATOMIC_ACQUIRE) == wi) return NULL;
        continue;
      }
      e->win = wi;
      e->epoch = ep;
      e->next = s + 1;
      fresh = 1;
      e->end = s + ws->block < ws->nslots ? s + ws->block : ws->nslots;
      if (NP_UNLIKELY(s < ws->trigger && s + ws->block >= ws->trigger)) np_rotate(c, set, wi);
    }
    np_slot_prefetch(w, s, e->end, fresh);
    *win = wi;
    *slot = s;
    *epoch = ep;
    return &w->slots[s];
  }
  return NULL;
}

/* A slot in the parent's window when that window is CLOSING, so a collective's ProxyOps and
 * KernelCh close with it. Returns NULL to use the current window instead. */
NP_HOT np_event* np_claim_routed(np_comm* c, uint64_t parent, uint32_t* win, uint32_t* slot,
                                 uint32_t* epoch, uint16_t* flags) {
  np_wset* ws = &c->set[NP_SET_OP];
  if (np_h_is_cell(parent) || np_h_comm(parent) != c->idx || np_h_set(parent) != NP_SET_OP ||
      np_h_win(parent) >= ws->nwin)
    return NULL;
  uint32_t wi = np_h_win(parent);
  np_window* w = &ws->win[wi];
  uint64_t se = __atomic_load_n(&w->se, __ATOMIC_ACQUIRE);
  if (NP_SE_EPOCH(se) != np_h_epoch(parent)) {
    *flags |= NP_F_PARENT_STALE;
    return NULL;
  }
  if (NP_SE_STATE(se) != NP_W_CLOSING) return NULL;
  uint32_t s = __atomic_fetch_add(&w->claimed, 1, __ATOMIC_RELAXED);
  if (s >= ws->nslots) return NULL;
  *flags |= NP_F_ROUTED;
  *win = wi;
  *slot = s;
  *epoch = NP_SE_EPOCH(se);
  return &w->slots[s];
}

/* A claimed slot being filled: publish with np_commit. */
typedef struct np_pending {
  np_event* ev;
  np_thread* t;
  uint64_t hdr;
} np_pending;

NP_HOT int np_is_routed_type(int type) { return type == NP_T_PROXY_OP || type == NP_T_KERNEL_CH; }

/* Counts an event that could not be tracked (its figures are missing), per type. */
NP_HOT void np_count_drop(np_comm* c, int type) {
  __atomic_fetch_add(&c->dropped, 1, __ATOMIC_RELAXED);
  __atomic_fetch_add(&c->dropped_type[type], 1, __ATOMIC_RELAXED);
  __atomic_fetch_add(&np_dropped_type[type], 1, __ATOMIC_RELAXED);
  np_count(NP_C_DROPPED_FULL);
}

/* Counts a detail record a trace wanted but the detail windows had no room for, per type. */
NP_HOT void np_count_trace_drop(np_comm* c, int type) {
  __atomic_fetch_add(&c->trace_dropped[type], 1, __ATOMIC_RELAXED);
  __atomic_fetch_add(&np_trace_dropped_type[type], 1, __ATOMIC_RELAXED);
  np_count(NP_C_DROPPED_DETAIL);
}

/* A slot for an event of `type` (the thread has entered): the set it belongs to, routed to its
 * parent's CLOSING window where that keeps an operation's children together. Fills the common
 * fields; the caller fills ev->u and publishes with hdr. Returns NULL when no slot is free. */
NP_HOT np_event* np_slot_new(np_comm* c, np_thread* t, int type, int abi, uint64_t parent,
                             int32_t rank, uint16_t flags, uint64_t* handle, uint64_t* hdr) {
  uint32_t set = np_is_detail_type(type) ? NP_SET_DETAIL : NP_SET_OP;
  uint32_t wi = 0, s = 0, ep = 0;
  np_event* ev = NULL;
  if (parent == NP_H_DROPPED) flags |= NP_F_PARENT_DROPPED;
  if ((parent & 1) && np_is_routed_type(type))
    ev = np_claim_routed(c, parent, &wi, &s, &ep, &flags);
  if (ev == NULL) ev = np_claim(c, t, set, &wi, &s, &ep);
  if (NP_UNLIKELY(ev == NULL)) return NULL;
  *handle = np_handle(c->idx, set, wi, s, ep, flags);
  ev->parent = parent;
  ev->t_start = np_event_clock(type);
  ev->t_stop = 0;
  ev->tid = t->tid;
  ev->rank = rank;
  ev->done = 0;
  ev->nstates = 0;
  ev->sflags = 0;
  *hdr = (uint64_t)ep | ((uint64_t)type << 32) | ((uint64_t)abi << 40) | ((uint64_t)flags << 48);
  return ev;
}

/* Whether an event may start on communicator c (checked inside the active section:
 * np_init_comm waits for active callbacks before it resets a recycled entry, so a callback
 * that raced with finalize bails here). Once NCCL finalized it, nothing new starts (counted):
 * finalize waits only for what started before it. */
NP_HOT int np_comm_starts(np_comm* c) {
  uint32_t st = np_comm_state(c);
  if (NP_LIKELY(st == NP_COMM_ACTIVE)) return 1;
  if (st == NP_COMM_FINALIZING) np_count(NP_C_AFTER_FINALIZE);
  return 0;
}

/* Enters a callback on communicator c and checks it is live; returns the thread, or NULL
 * (the handle then says why: dropped for want of a thread slot, disabled). */
NP_HOT np_thread* np_enter_comm(np_comm* c, void** eHandle) {
  np_thread* t = np_enter();
  if (NP_UNLIKELY(t == NULL)) {
    np_count(NP_C_DROPPED_THREADS);
    *eHandle = (void*)NP_H_DROPPED;
    return NULL;
  }
  if (NP_UNLIKELY(!np_comm_starts(c))) {
    np_leave(t);
    *eHandle = (void*)NP_H_DISABLED;
    return NULL;
  }
  return t;
}

/* np_begin once the thread has entered (np_enter_comm): leaves it when nothing was recorded. */
NP_HOT int np_begin_in(np_comm* c, np_thread* t, int type, int abi, uint64_t parent,
                       int32_t rank, uint16_t flags, void** eHandle, np_pending* p) {
  uint64_t h;
  np_event* ev = np_slot_new(c, t, type, abi, parent, rank, flags, &h, &p->hdr);
  if (NP_UNLIKELY(ev == NULL)) {
    /* Counted before leaving: the entry's counters are reset only once no callback is in. */
    if (np_is_detail_type(type)) np_count_trace_drop(c, type);
    else np_count_drop(c, type);
    np_leave(t);
    *eHandle = (void*)NP_H_DROPPED;
    return 0;
  }
  p->ev = ev; /* the starter sets every field of its union member */
  p->t = t;
  *eHandle = (void*)h;
  return 1;
}

/* Starts an event in a window: claims a slot, stamps the time and the common fields, and
 * writes the handle NCCL gets (a sentinel when nothing could be recorded). The caller fills
 * ev->u and calls np_commit. Returns 0 when nothing was recorded. */
NP_HOT int np_begin(np_comm* c, int type, int abi, uint64_t parent, int32_t rank,
                    uint16_t flags, void** eHandle, np_pending* p) {
  if (np_is_detail_type(type) && !__atomic_load_n(&np_detail_on, __ATOMIC_RELAXED)) {
    *eHandle = (void*)NP_H_SKIPPED; /* no trace wants detail now */
    return 0;
  }
  np_thread* t = np_enter_comm(c, eHandle);
  if (NP_UNLIKELY(t == NULL)) return 0;
  return np_begin_in(c, t, type, abi, parent, rank, flags, eHandle, p);
}

NP_HOT void np_commit(const np_pending* p) {
  __atomic_store_n(&p->ev->hdr, p->hdr, __ATOMIC_RELEASE);
  np_leave(p->t);
}

/* The communicator's rank (v1–v3 learn it from the first Coll/P2p, on any thread). */
NP_HOT int32_t np_comm_rank(const np_comm* c) {
  return __atomic_load_n(&c->rank, __ATOMIC_RELAXED);
}

NP_HOT int np_ev_type(const np_event* ev) { return (int)((ev->hdr >> 32) & 0xff); }

/* ------------------------------------------------------------------- sampled tracing */

/* Whether a Coll is a CUDA graph's replay: 1 when its parent, the CollApi NCCL started at
 * capture, was captured (its handle's mark), 0 when its CollApi was not; -1 when that is not
 * known (below ABI v5 there is no CollApi; or the CollApi was not recorded). */
NP_HOT int np_replay_of(int abi, uint64_t parent) {
  if (abi < 5 || (parent & 3u) != 1u) return -1;
  return np_h_mark(parent);
}

/* Whether a collective of `func` with this seq is 1 in n, alike on every rank. NCCL gives a CUDA
 * graph's replays the seq of the next eager collective (from 2.26, unless KernelCh is on), and
 * only ranks whose plan has proxy work see them (enqueue.cc ncclLaunchPrepare, hasProxyOps):
 *   - an eager collective (replay 0): seq % n, whatever replays came before it;
 *   - a replay (replay 1): its count among the replays of that seq, k % n, so 1 in n of the
 *     replays is traced, on every rank that sees them;
 *   - unknown (replay -1, below v5): seq % n at a seq's first occurrence, then the count of its
 *     repeats back to back (replays and the eager one together, which cannot be told apart).
 * func NULL (a P2P's ordinal, which never repeats): seq % n. */
NP_HOT int np_sample_pick(np_comm* c, const char* func, uint64_t seq, uint32_t n, int replay) {
  if (func == NULL || replay == 0) return seq % n == 0;
  np_repeat* e = &c->rep[(((uintptr_t)func * 0x9E3779B97F4A7C15ull) >> 40) % NP_REPEATS];
  uint64_t k = 0;
  if (__atomic_load_n(&e->func, __ATOMIC_RELAXED) == func &&
      __atomic_load_n(&e->seq, __ATOMIC_RELAXED) == seq) {
    k = __atomic_load_n(&e->k, __ATOMIC_RELAXED) + 1;
  } else {
    __atomic_store_n(&e->func, func, __ATOMIC_RELAXED);
    __atomic_store_n(&e->seq, seq, __ATOMIC_RELAXED);
  }
  __atomic_store_n(&e->k, k, __ATOMIC_RELAXED);
  if (replay == 1) return k % n == 0;
  return k == 0 ? seq % n == 0 : k % n == 0;
}

/* Whether the Coll/P2p with this seq (a collective's NCCL seq, with its function and whether it
 * is a replay: np_replay_of; a P2P's ordinal, func NULL) is traced in full: 1 in N
 * (np_sample_pick), which every rank decides alike, so sampled operations line up across ranks;
 * or the communicator is counting down the operations after a slow one. Returns NP_F_SAMPLED /
 * NP_F_TRIGGERED bits; 0 and one load when sampling is off. */
NP_HOT uint16_t np_sample_flags(np_comm* c, const char* func, uint64_t seq, int replay) {
  uint32_t n = __atomic_load_n(&np_sample_n, __ATOMIC_RELAXED);
  if (NP_LIKELY(n == 0)) return 0;
  uint16_t f = np_sample_pick(c, func, seq, n, replay) ? NP_F_SAMPLED : 0;
  uint32_t left = __atomic_load_n(&c->trig_left, __ATOMIC_RELAXED);
  while (NP_UNLIKELY(left > 0)) {
    if (__atomic_compare_exchange_n(&c->trig_left, &left, left - 1, 1, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED)) {
      f |= NP_F_TRIGGERED;
      break;
    }
  }
  return f;
}

/* The next ordinal of a P2P with `peer` in one direction: NCCL gives P2P no seq, so the plugin
 * counts each (communicator, peer, direction) from 0; the n-th send of a rank to a peer is the
 * n-th receive of that peer from it, so both ends of a transfer get the same ordinal. Operations
 * on one communicator come from one thread at a time (NCCL's rule for a communicator), so the
 * counter is a plain load and store, no atomic read-modify-write. Counted whether or not the
 * event then gets a slot: a rank whose windows were full must not fall out of step. */
NP_HOT uint64_t np_p2p_next(np_comm* c, int32_t peer, int send) {
  uint32_t n = c->p2p_peers;
  if (NP_UNLIKELY(n == 0)) return 0; /* no table (mapping it failed: said at init) */
  uint32_t p = (uint32_t)peer;
  if (NP_UNLIKELY(p >= n)) p %= n; /* v1-v3's fixed table, or a peer out of range */
  uint64_t* ctr = &c->p2p_ord[p * 2 + (send != 0)];
  uint64_t v = __atomic_load_n(ctr, __ATOMIC_RELAXED);
  __atomic_store_n(ctr, v + 1, __ATOMIC_RELAXED);
  return v;
}

/* A ProxyOp inherits its operation's sample bits from the parent handle NCCL passes (the bits
 * are part of a window record's handle), valid even after the operation's window was reused:
 * in a busy job ProxyOps start long after their operation is enqueued. */
NP_HOT uint16_t np_parent_sample(np_comm* c, uint64_t parent) {
  if (!(parent & 1) || np_h_is_cell(parent) || np_h_comm(parent) != c->idx ||
      np_h_set(parent) != NP_SET_OP)
    return 0;
  return np_h_sample(parent);
}

/* ------------------------------------------------------------------- arena */

/* The word that marks a block of cells as this thread's in this incarnation of the
 * communicator: never 0, and two threads (or two incarnations) never write the same one. */
NP_HOT uint32_t np_block_tag(const np_thread* t, uint32_t inc) {
  _Static_assert(NP_MAX_THREADS < 0xffff, "a thread's slot fits 16 bits of the tag");
  return (inc << 16) | (uint32_t)(t - np_threads + 1);
}

/* Gives back the block the thread's cache holds, if any (cells in it still in flight stay
 * in use: the next owner skips them). Only a block still this thread's is freed: a
 * communicator opened again meanwhile reset its owners, and may have given the block on. */
NP_HOT void np_block_release(np_thread* t, np_acache* a) {
  if (a->blk == 0) return;
  np_comm* o = &np_comms[a->comm];
  uint32_t mine = np_block_tag(t, a->inc);
  __atomic_compare_exchange_n(&o->owner[a->blk - 1], &mine, 0, 0, __ATOMIC_RELEASE,
                              __ATOMIC_RELAXED);
  a->blk = 0;
  a->next = a->end = 0;
}

/* Takes the block of cells that starts at cursor position p, if no other thread owns it. */
NP_HOT int np_block_take(np_comm* c, np_thread* t, np_acache* a, uint32_t p) {
  uint32_t b = (p / NP_CELL_BLOCK) & (c->ncells / NP_CELL_BLOCK - 1), free_ = 0;
  if (!__atomic_compare_exchange_n(&c->owner[b], &free_, np_block_tag(t, a->inc), 0,
                                   __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
    return 0;
  a->blk = b + 1;
  a->next = p;
  a->end = p + NP_CELL_BLOCK;
  return 1;
}

/* Cells this many claims ahead of the one being claimed are fetched for writing now. */
#define NP_CELL_AHEAD 4

NP_HOT void np_cell_prefetch(np_comm* c, uint32_t at) {
  np_cell* n = &c->cells[at & (c->ncells - 1)];
  np_prefetch_write(n);
  np_prefetch_write((char*)n + 64);
}

/* Claims a free arena cell (the thread has entered). Cells are handed out in blocks that a
 * thread owns until it has taken each of their cells (one compare-and-swap to take a block
 * and one to give it back, per NP_CELL_BLOCK claims), so a free cell of the thread's block is
 * claimed with plain stores: no other thread claims in that block, and the threads that free
 * cells only ever free a cell in use. A block another thread still owns (it holds it across
 * a lap of the cursor) is skipped, as is a cell still in use from a previous lap (a long
 * transfer). The block's cells are fetched for writing NP_CELL_AHEAD claims ahead: the arena is
 * walked a lap at a time, so a cell's lines have left the core's cache since it was last used,
 * and would otherwise stall its claim (one claim ahead was too late after a pause between
 * operations: docs/bench-nccl.md). (A freed cell is not reused at once: a stop or
 * state that races with its stop, from another thread, then still finds it stale, not another
 * event's.) Returns NULL when the arena is full (every cell tried was in flight). */
NP_HOT np_cell* np_cell_claim(np_comm* c, np_thread* t, uint64_t* handle) {
  np_acache* a = &t->acache[c->idx % NP_ACACHE];
  uint32_t inc = (uint32_t)__atomic_load_n(&c->incarnation, __ATOMIC_RELAXED);
  if (NP_UNLIKELY(a->comm != c->idx || a->inc != inc)) {
    np_block_release(t, a); /* another communicator's, or this one's before it was reopened */
    a->comm = c->idx;
    a->inc = inc;
  }
  /* Cells are taken in cursor order, so ProxyOps NCCL keeps queued (a burst of operations
   * posted at once) hold a run of consecutive cells that the cursor meets again on its next
   * lap. A block found busy makes the next one further away (twice as far each time), so one
   * claim crosses a run of thousands of cells in a few blocks, and every later claim starts
   * past it. */
  uint32_t jump = NP_CELL_BLOCK;
  for (int tries = 0; tries < 8 * NP_CELL_BLOCK; tries++) {
    if (a->next == a->end) {
      np_block_release(t, a);
      uint32_t p = __atomic_fetch_add(&c->cursor, jump, __ATOMIC_RELAXED);
      if (tries > 0) jump <<= 1;
      if (!np_block_take(c, t, a, p)) continue;
      for (uint32_t k = 1; k < NP_CELL_AHEAD && a->next + k < a->end; k++)
        np_cell_prefetch(c, a->next + k);
    }
    uint32_t i = a->next++ & (c->ncells - 1);
    np_cell* cell = &c->cells[i];
    if (a->next + NP_CELL_AHEAD - 1 < a->end) np_cell_prefetch(c, a->next + NP_CELL_AHEAD - 1);
    /* Acquire (a plain load on x86): what the thread that freed the cell did with it before
     * its release store happens before what this claim writes into it. */
    uint64_t gs = __atomic_load_n(&cell->gs, __ATOMIC_ACQUIRE);
    if (gs & 1) continue;
    /* A plain store: only this thread claims in its block. The fields are written after it
     * (readers of an in-use cell check its generation, not the order of its fields). */
    __atomic_store_n(&cell->gs, gs | 1, __ATOMIC_RELAXED);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    *handle = np_ahandle(c->idx, i, (uint32_t)(gs >> 1));
    return cell;
  }
  return NULL;
}

/* Frees a cell: the next generation, not in use. Stale handles of this one stop matching. */
NP_HOT void np_cell_free(np_cell* cell) {
  uint64_t gs = __atomic_load_n(&cell->gs, __ATOMIC_RELAXED);
  __atomic_store_n(&cell->gs, (gs | 1) + 1, __ATOMIC_RELEASE);
}

/* Starts a cell event's common fields. */
NP_HOT void np_cell_init(np_cell* cell, np_thread* t, int type, int abi, uint64_t parent,
                         int32_t rank, uint64_t now) {
  /* parent, t_start, type and nstates are read by np_retire_due and np_step_restarted, which
   * check a cell's generation first but may still race a thread that reuses it: relaxed
   * atomics (plain moves) keep those reads defined. */
  __atomic_store_n(&cell->parent, parent, __ATOMIC_RELAXED);
  __atomic_store_n(&cell->t_start, now, __ATOMIC_RELAXED);
  cell->t_last = now;
  cell->tid = t->tid;
  cell->rank = rank;
  __atomic_store_n(&cell->type, (uint8_t)type, __ATOMIC_RELAXED);
  cell->abi = (uint8_t)abi;
  __atomic_store_n(&cell->nstates, 0, __ATOMIC_RELAXED);
  cell->sflags = 0;
  cell->last_state = -1;
}

/* ------------------------------------------------------------------- NCCL's patterns */

/* Whether cell s is a step of the ProxyOp `parent` with no state yet: one a restart reuses. */
NP_HOT int np_step_unstated(const np_cell* s, uint64_t parent) {
  return __atomic_load_n(&s->type, __ATOMIC_RELAXED) == NP_T_PROXY_STEP &&
         __atomic_load_n(&s->parent, __ATOMIC_RELAXED) == parent &&
         __atomic_load_n(&s->nstates, __ATOMIC_RELAXED) == 0;
}

/* NCCL 2.23 (v1) starts a pass's sliceSteps raw steps in one call, in order
 * (ncclProfilerStartRecvProxyStepEvents, misc/profiler.cc at v2.23.4-1), and a restart pass
 * starts them again from the first. The cells of one pass were claimed one after another by
 * the communicator's proxy thread, so the one of `step` is `back` cells before the last one's
 * (handle `last`), unless the thread's next block was not the adjacent one (another thread held
 * it): then it is not found, the restart takes new cells and the pass's old ones stay taken
 * (the next pass finds the new ones). Returns its handle if it is that step of the same
 * ProxyOp, still without a state, else 0. */
static uint64_t np_run_step(np_comm* c, uint64_t last, uint64_t parent, int32_t step, uint32_t back) {
  if (back >= 8) return 0; /* NCCL_STEPS raw steps at most in one pass */
  /* The next block is the next one in the arena unless another thread held it: the cells of a
   * pass are adjacent, across the arena's end too. */
  uint32_t idx = (np_h_cell(last) + c->ncells - back) % c->ncells;
  np_cell* s = &c->cells[idx];
  uint64_t gs = __atomic_load_n(&s->gs, __ATOMIC_ACQUIRE);
  if (!(gs & 1) || !np_step_unstated(s, parent) ||
      __atomic_load_n(&s->u.step.step, __ATOMIC_RELAXED) != step)
    return 0;
  return np_ahandle(c->idx, idx, (uint32_t)(gs >> 1));
}

/* A ProxyStep start for a step its ProxyOp started last, which has had no state since:
 * net.cc's recvProxyProgress starts a receive step before checks that may postpone its irecv
 * to a later pass, and starts it again there into the same handle slot (only the last handle
 * gets states and the stop). Returns that step's handle (the cell is reused, its restarts
 * counted), or 0 for a new step. */
NP_HOT uint64_t np_step_restarted(np_comm* c, np_cell* op, uint64_t parent, int32_t step) {
  uint64_t prev = op->u.op.last_step;
  if (prev == 0) return 0;
  np_cell* s = np_cell_of(c, prev);
  if (s == NULL || !np_step_unstated(s, parent)) return 0;
  int32_t last = __atomic_load_n(&s->u.step.step, __ATOMIC_RELAXED);
  if (last != step) {
    if (NP_LIKELY(op->abi != 1 || step > last)) return 0;
    prev = np_run_step(c, prev, parent, step, (uint32_t)last - (uint32_t)step); /* last > step */
    if (prev == 0) return 0;
    s = &c->cells[np_h_cell(prev)];
  }
  if (s->u.step.nrestarts != UINT16_MAX) s->u.step.nrestarts++;
  np_count(NP_C_STEP_RESTARTS);
  return prev;
}

void np_retire_oldest(np_comm* c, np_thread* t);
void np_conn_started(np_comm* c, np_cell* op);

/* Queues a ProxyOp that NCCL may never stop (np_retire_due decides). When the ring is full
 * its oldest entry is decided first: NP_RETIRE_RING ProxyOps started after it. */
NP_HOT void np_retire_push(np_comm* c, np_thread* t, uint64_t h) {
  uint32_t tail = __atomic_load_n(&c->rq_tail, __ATOMIC_RELAXED);
  if (NP_UNLIKELY(tail - __atomic_load_n(&c->rq_head, __ATOMIC_RELAXED) >= NP_RETIRE_RING))
    np_retire_oldest(c, t);
  /* Release: whoever retires the cell from here sees its start complete. */
  __atomic_store_n(&c->rq[tail & (NP_RETIRE_RING - 1)], h, __ATOMIC_RELEASE);
  __atomic_store_n(&c->rq_tail, tail + 1, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------------- transfer sums */

NP_HOT uint64_t np_xfer_key(int kind, uint32_t writer, int32_t rank, int32_t id) {
  return ((uint64_t)kind << 60) | ((uint64_t)(writer & 0xfff) << 48) |
         ((uint64_t)((uint32_t)rank & 0xffffff) << 24) | (uint64_t)((uint32_t)id & 0xffffff);
}

/* The bucket of (key, size), inserted if new. Only the writer named in the key inserts or
 * updates buckets of that key, so a match needs no ordering beyond the key's publication. */
NP_HOT np_xbucket* np_xfer_bucket(np_comm* c, uint64_t key, uint64_t size) {
  uint64_t hh = (key ^ (size * 0x9E3779B97F4A7C15ull)) * 0xff51afd7ed558ccdull;
  uint32_t i = (uint32_t)(hh >> 40);
  for (int probe = 0; probe < 32; probe++, i++) {
    np_xbucket* b = &c->xfer[i & (NP_XFER_BUCKETS - 1)];
    uint64_t k = __atomic_load_n(&b->key, __ATOMIC_ACQUIRE);
    if (k == key && __atomic_load_n(&b->size, __ATOMIC_RELAXED) == size) return b;
    if (k == 0) {
      /* Claim the empty bucket, then give it its size: readers trust the size only once n
       * is non-zero, and n is published after it. */
      uint64_t zero = 0;
      if (__atomic_compare_exchange_n(&b->key, &zero, key, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
        __atomic_store_n(&b->size, size, __ATOMIC_RELAXED);
        return b;
      }
    }
  }
  return NULL;
}

/* Adds one transfer (t in ticks; has_t 0 for receives, which are not timed). */
NP_HOT void np_xfer_add(np_comm* c, np_thread* t, int kind, int32_t rank, int32_t id,
                        uint64_t size, uint64_t dt, int has_t) {
  uint32_t writer = (uint32_t)(t - np_threads);
  np_xbucket* b = np_xfer_bucket(c, np_xfer_key(kind, writer, rank, id), size);
  if (NP_UNLIKELY(b == NULL)) { /* table full: counted in the communicator's totals only */
    __atomic_fetch_add(&c->xun_n[kind], 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&c->xun_bytes[kind], size, __ATOMIC_RELAXED);
    np_count(NP_C_XFER_UNKEYED);
    return;
  }
  uint64_t n = __atomic_load_n(&b->n, __ATOMIC_RELAXED);
  __atomic_store_n(&b->bytes, b->bytes + size, __ATOMIC_RELAXED);
  if (has_t) {
    __atomic_store_n(&b->sum_t, b->sum_t + dt, __ATOMIC_RELAXED);
    double t2;
    uint64_t bits = b->sum_t2;
    memcpy(&t2, &bits, sizeof t2);
    t2 += (double)dt * (double)dt;
    memcpy(&bits, &t2, sizeof bits);
    __atomic_store_n(&b->sum_t2, bits, __ATOMIC_RELAXED);
    if (n == 0 || dt < b->t_min) __atomic_store_n(&b->t_min, dt, __ATOMIC_RELAXED);
    if (dt > b->t_max) __atomic_store_n(&b->t_max, dt, __ATOMIC_RELAXED);
  }
  __atomic_store_n(&b->n, n + 1, __ATOMIC_RELEASE);
}

/* A ProxyStep stopped: its transfer goes into the sums (a send step that reached the network:
 * time = stop − SendWait; a receive: bytes only) and into its ProxyOp's cell. */
NP_HOT void np_step_fold(np_comm* c, np_thread* t, np_cell* s, np_cell* op, uint64_t stop) {
  uint64_t size = s->u.step.trans_size;
  if (s->is_send) {
    uint64_t sw = s->u.step.t_state[NP_ST_SEND_WAIT];
    if (sw != 0 && stop >= sw) {
      uint64_t dt = stop - sw;
      np_xfer_add(c, t, NP_X_SEND, s->rank, s->peer, size, dt, 1);
      np_xfer_add(c, t, NP_X_CHANNEL, s->rank, s->channel, size, dt, 1);
      if (op) {
        op->u.op.prog.x_n++;
        op->u.op.prog.x_bytes += size;
        op->u.op.prog.x_time += dt;
      }
    }
  } else if (size > 0) {
    np_xfer_add(c, t, NP_X_RECV, s->rank, s->peer, size, 0, 0);
  }
  if (op) {
    op->u.op.prog.steps_done++;
    op->t_last = stop;
  }
}

/* ------------------------------------------------------------------- late records */

/* Resolves a handle for stop/record, inside the active section: counts and returns NULL for
 * sentinels and bad or stale handles. */
NP_HOT np_comm* np_handle_comm(uint64_t h) {
  np_comm* c = np_comm_of_handle(h);
  if (NP_UNLIKELY(c == NULL)) np_count(NP_C_STALE_HANDLE);
  return c;
}

/* ProxyStep states map to cells of t_state (NP_ST_*); -1: not a step state. */
static const int8_t np_step_cells[32] = {
    -1, -1, -1, -1, -1, -1, -1, -1,
    NP_ST_SEND_GPU_WAIT,   /* 8 */
    NP_ST_SEND_WAIT,       /* 9 */
    NP_ST_RECV_WAIT,       /* 10 */
    NP_ST_RECV_FLUSH_WAIT, /* 11 */
    NP_ST_RECV_GPU_WAIT,   /* 12 */
    -1, -1, -1, -1, -1, -1, -1,
    NP_ST_SEND_PEER_WAIT,  /* 20 */
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
};
_Static_assert(NPABI_PROXY_STEP_SEND_GPU_WAIT == 8 && NPABI_PROXY_STEP_RECV_GPU_WAIT == 12 &&
                   NPABI_PROXY_STEP_SEND_PEER_WAIT == 20,
               "np_step_cells follows the state numbering");

/* A ProxyStep state, inline (most records are these). Returns 0 to take the general path. */
NP_HOT int np_step_fast(np_cell* s, int state, uint64_t a0, int has_args, uint64_t now) {
  if ((unsigned)state >= 32) return 0;
  int cell = np_step_cells[state];
  if (cell < 0 || cell == NP_ST_SEND_PEER_WAIT) return 0;
  __atomic_store_n(&s->nstates, (uint16_t)(s->nstates + 1), __ATOMIC_RELAXED);
  s->last_state = state;
  s->t_last = now;
  if (s->u.step.t_state[cell] == 0) s->u.step.t_state[cell] = now;
  if ((cell == NP_ST_SEND_WAIT || cell == NP_ST_RECV_FLUSH_WAIT) && has_args) s->u.step.trans_size = a0;
  return 1;
}

/* Handles with bit 0 clear are NULL or our sentinels: nothing to do (NULL and unknown values
 * are counted). */
NP_HOT int np_is_sentinel(uint64_t h) {
  if (NP_LIKELY(h & 1)) return 0;
  if (h != NP_H_DROPPED && h != NP_H_SKIPPED && h != NP_H_DISABLED)
    np_count(h == 0 ? NP_C_NULL_HANDLE : NP_C_BAD_HANDLE);
  return 1;
}

/* stopEvent of a window event. */
NP_HOT void np_stop_slot(np_comm* c, np_thread* t, uint64_t h) {
  np_event* ev = np_slot_of(c, h, 0);
  if (NP_UNLIKELY(ev == NULL)) {
    np_late(c, t, h, NP_LATE_STOP, 0, 0, 0, NULL);
    return;
  }
  if (NP_UNLIKELY(ev->done)) {
    ev->sflags |= NP_F_STOP_TWICE;
    np_count(NP_C_STOP_TWICE);
    return;
  }
  /* NCCL stops a KernelCh right after recording KernelChStop: that reading serves. */
  int type = np_ev_type(ev);
  uint64_t kst = type == NP_T_KERNEL_CH ? ev->u.kch.t_stop_state : 0;
  if (kst == 0) {
    kst = np_event_clock(type);
    /* A coarse stop is never before its start (a trace that ended between the two). */
    if (kst < ev->t_start) kst = ev->t_start;
  }
  ev->t_stop = kst;
  __atomic_store_n(&ev->done, 1, __ATOMIC_RELEASE);
}

/* stopEvent, every version. */
NP_HOT void np_stop(void* handle) {
  uint64_t h = (uint64_t)(uintptr_t)handle;
  if (np_is_sentinel(h)) return;
  np_thread* t = np_enter();
  if (NP_UNLIKELY(t == NULL)) return;
  np_comm* c = np_handle_comm(h);
  if (c == NULL) {
    np_leave(t);
    return;
  }
  if (np_h_is_cell(h)) {
    np_cell* cell = np_cell_of(c, h);
    if (NP_LIKELY(cell != NULL)) np_cell_stop(c, t, cell, h, np_ticks());
    else np_count(NP_C_STALE_HANDLE); /* stopped twice, or after its communicator was reset */
  } else {
    np_stop_slot(c, t, h);
  }
  np_leave(t);
}

/* recordEventState, every version, after the adapter turned its arguments into (a0, a1). */
NP_HOT void np_state(void* handle, int state, uint64_t a0, uint64_t a1, int has_args) {
  uint64_t h = (uint64_t)(uintptr_t)handle;
  if (np_is_sentinel(h)) return;
  np_thread* t = np_enter();
  if (NP_UNLIKELY(t == NULL)) return;
  np_comm* c = np_handle_comm(h);
  if (c == NULL) {
    np_leave(t);
    return;
  }
  if (np_h_is_cell(h)) {
    np_cell* cell = np_cell_of(c, h);
    if (NP_UNLIKELY(cell == NULL)) {
      np_count(NP_C_STALE_HANDLE);
    } else {
      int step = cell->type == NP_T_PROXY_STEP;
      if (!step && cell->u.op.record == 0) np_op_record(c, t, cell, h); /* its first sign of life */
      uint64_t now = step && state != NPABI_PROXY_STEP_SEND_WAIT ? np_step_clock(cell->sflags)
                                                                 : np_ticks();
      if (!(step && np_step_fast(cell, state, a0, has_args, now)))
        np_cell_state(cell, state, a0, has_args, now);
    }
    np_leave(t);
    return;
  }
  np_event* ev = np_slot_of(c, h, 0);
  if (NP_LIKELY(ev != NULL)) {
    if (NP_UNLIKELY(ev->done)) {
      ev->sflags |= NP_F_AFTER_STOP;
      np_count(NP_C_AFTER_STOP);
    } else {
      np_apply_state(ev, state, a0, a1, has_args,
                     np_is_trace_state(state) ? np_trace_clock() : np_ticks());
    }
  } else {
    np_late(c, t, h, (uint32_t)state, a0, a1, has_args, NULL);
  }
  np_leave(t);
}

#endif /* NCCLPROF_HOT_H */
