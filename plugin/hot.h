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
#if defined(__x86_64__)
#include <x86intrin.h>
#endif
#include <time.h>

#include "core.h"

/* The hot path is written as small functions for reading; each callback must still compile to
 * one flat function (calls cost register saves and argument marshalling per event). */
#define NP_HOT static inline __attribute__((always_inline))
#define NP_LIKELY(x) __builtin_expect(!!(x), 1)
#define NP_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* Window states, packed with the epoch in one word: se = epoch << 8 | state. */
enum { NP_W_FREE = 0, NP_W_FILLING = 1, NP_W_CLOSING = 2, NP_W_SEALED = 3 };
#define NP_SE(epoch, state) (((uint64_t)(epoch) << 8) | (uint64_t)(state))
#define NP_SE_STATE(se) ((uint32_t)((se) & 0xff))
#define NP_SE_EPOCH(se) ((uint32_t)((se) >> 8))

typedef struct np_window {
  uint64_t se;        /* epoch and state; read by every callback, written rarely */
  uint64_t open_tsc;  /* when it became FILLING */
  uint64_t close_tsc; /* when it became CLOSING */
  np_event* slots;
  uint32_t scan_from; /* drainer only: slots below are known stopped */
  uint32_t pad00;
  uint8_t pad0[24];
  uint32_t claimed; /* next unclaimed slot: its own cache line, the one contended counter */
  uint8_t pad1[60];
} np_window;
_Static_assert(sizeof(np_window) == 128, "np_window keeps its claim counter on its own line");

typedef struct np_comm {
  uint32_t state; /* NP_COMM_* (plus INITIALIZING, ABANDONED below) */
  uint32_t idx;
  uint32_t cur;      /* index of the FILLING window */
  uint32_t rotating; /* rotation in progress */
  uint32_t nwin, nslots, block, trigger;
  uint64_t comm_hash, incarnation;
  int32_t rank, nranks, nnodes, abi;
  uint32_t learned; /* v1–v3: hash/name/rank learned from the first Coll/P2p */
  uint32_t detail_limit; /* detail events (steps, net, channels, ctrl) claim below this slot */
  npabi_logger_t log;
  uint64_t dropped, stale, late;
  char name[128];
  void* mem;
  size_t mem_bytes;
  uint8_t pad2[40];
  np_window win[NP_MAX_WINDOWS];
  uint8_t pad3[2048 - 288 - NP_MAX_WINDOWS * sizeof(np_window)];
} np_comm;
/* A power of two: a context's index is a shift, and a foreign pointer is rejected by a mask. */
_Static_assert(sizeof(np_comm) == 2048, "np_comm is 2 KiB");
_Static_assert(offsetof(np_comm, win) == 288, "update pad3 when np_comm's header changes");
enum { NP_COMM_INITIALIZING = 5, NP_COMM_ABANDONED = 4 };

/* Per-thread state. `active` is odd while the thread is inside a callback; only the owner
 * writes it. The cache remembers the block of slots the thread claimed per communicator. */
typedef struct np_tcache {
  uint32_t comm, win, epoch, next, end, pad; /* epoch 0: no block held */
} np_tcache;
#define NP_TCACHE 4
typedef struct np_thread {
  uint64_t active;
  uint32_t used, tid;
  uint32_t rr, memo_valid;
  np_tcache cache[NP_TCACHE];
  /* v1–v3: the cumulative bytes of the ProxyOp state NCCL recorded just before the step state
   * that carries none (the two calls are back to back on this thread). */
  uint64_t memo_cum;
} np_thread;
_Static_assert(sizeof(np_thread) == 128, "np_thread is two cache lines");

/* Hidden: the hot path reaches them PC-relative, not through the GOT. */
#define NP_HIDDEN __attribute__((visibility("hidden")))
extern NP_HIDDEN np_comm np_comms[NP_MAX_COMMS];
extern NP_HIDDEN np_thread np_threads[NP_MAX_THREADS];
extern NP_HIDDEN __thread np_thread* np_tls __attribute__((tls_model("initial-exec")));
extern NP_HIDDEN int np_clock;      /* NP_CLOCK_* */
extern NP_HIDDEN int np_fence_mode; /* 1: no membarrier, writers fence */
extern NP_HIDDEN uint32_t np_record_mask;
extern NP_HIDDEN pid_t np_pid;
enum { NP_CLOCK_TSC = 0, NP_CLOCK_CNTVCT = 1, NP_CLOCK_MONO = 2 };

np_thread* np_thread_attach(void);
void np_rotate(np_comm* c, uint32_t from);

/* The hot path's clock: TSC, the aarch64 virtual counter, or CLOCK_MONOTONIC ns. */
NP_HOT uint64_t np_ticks(void) {
#if defined(__x86_64__)
  if (NP_LIKELY(np_clock == NP_CLOCK_TSC)) return __rdtsc();
#elif defined(__aarch64__)
  if (NP_LIKELY(np_clock == NP_CLOCK_CNTVCT)) {
    uint64_t v;
    __asm__ __volatile__("mrs %0, cntvct_el0" : "=r"(v));
    return v;
  }
#endif
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
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

/* A context NCCL passed, if it is one of ours. Never dereferences a foreign pointer: contexts
 * are elements of np_comms, so membership is an address check. Whether it is live is checked
 * by np_begin inside the active section. */
NP_HOT np_comm* np_comm_of_ctx(void* ctx) {
  uintptr_t off = (uintptr_t)ctx - (uintptr_t)np_comms;
  if (off >= sizeof(np_comms) || (off & (sizeof(np_comm) - 1)) != 0 || off == 0) return NULL;
  return (np_comm*)ctx;
}

/* The communicator a handle belongs to, if the handle is well formed and that comm is live. */
NP_HOT np_comm* np_comm_of_handle(uint64_t h) {
  if (!(h & 1)) return NULL;
  np_comm* c = &np_comms[np_h_comm(h)];
  _Static_assert(NP_MAX_COMMS == 1024, "handles have 10 comm bits");
  uint32_t st = __atomic_load_n(&c->state, __ATOMIC_ACQUIRE);
  if (st != NP_COMM_ACTIVE && st != NP_COMM_FINALIZING) return NULL;
  /* The window index needs no check: 3 bits index an array of 8, and windows past nwin keep
   * epoch 0, which no handle carries. The slot index must stay inside the window. */
  if (np_h_slot(h) >= c->nslots) return NULL;
  return c;
}

/* The slot a handle names while its window still accepts writes (FILLING or CLOSING), with
 * `readable` also while SEALED. Must be called between np_enter and np_leave. */
NP_HOT np_event* np_slot_of(np_comm* c, uint64_t h, int readable) {
  np_window* w = &c->win[np_h_win(h)];
  uint64_t se = __atomic_load_n(&w->se, __ATOMIC_ACQUIRE);
  uint32_t st = NP_SE_STATE(se);
  if (NP_SE_EPOCH(se) != np_h_epoch(h)) return NULL;
  if (st == NP_W_FILLING || st == NP_W_CLOSING || (readable && st == NP_W_SEALED))
    return &w->slots[np_h_slot(h)];
  return NULL;
}

/* The thread's block for a communicator: direct-mapped by communicator index (a thread rarely
 * serves more than a few communicators at once; a collision just claims a new block). */
NP_HOT np_tcache* np_tcache_for(np_thread* t, uint32_t comm) {
  np_tcache* e = &t->cache[comm % NP_TCACHE];
  if (NP_UNLIKELY(e->comm != comm)) {
    e->epoch = 0;
    e->comm = comm;
  }
  return e;
}

/* Detail events are the many small ones under an operation. When the drainer falls behind,
 * they lose their slots first: the top eighth of every window is kept for the operations
 * themselves (Group, Coll, P2p, API, ProxyOp), so operation counts and bytes stay exact under
 * a flood of steps. Normally a window rotates at three quarters and never reaches the reserve. */
NP_HOT int np_is_detail_type(int type) {
  return type == NP_T_PROXY_STEP || type == NP_T_NET_PLUGIN || type == NP_T_KERNEL_CH ||
         type == NP_T_PROXY_CTRL;
}

/* A slot in the communicator's current window; the thread must have entered. */
NP_HOT np_event* np_claim(np_comm* c, np_thread* t, int detail, uint32_t* win, uint32_t* slot,
                                 uint32_t* epoch) {
  np_tcache* e = np_tcache_for(t, c->idx);
  for (int attempt = 0; attempt < 3; attempt++) {
    uint32_t wi = __atomic_load_n(&c->cur, __ATOMIC_ACQUIRE);
    np_window* w = &c->win[wi];
    uint64_t se = __atomic_load_n(&w->se, __ATOMIC_ACQUIRE);
    uint32_t st = NP_SE_STATE(se), ep = NP_SE_EPOCH(se);
    if (NP_UNLIKELY(st != NP_W_FILLING && st != NP_W_CLOSING)) continue; /* rotating */
    uint32_t s;
    if (e->epoch == ep && e->win == wi && e->next < e->end) { /* epoch 0: no block */
      s = e->next++;
    } else {
      s = __atomic_fetch_add(&w->claimed, c->block, __ATOMIC_RELAXED);
      if (NP_UNLIKELY(s >= c->nslots)) {
        e->epoch = 0;
        np_rotate(c, wi);
        continue;
      }
      e->win = wi;
      e->epoch = ep;
      e->next = s + 1;
      e->end = s + c->block < c->nslots ? s + c->block : c->nslots;
      if (NP_UNLIKELY(s < c->trigger && s + c->block >= c->trigger)) np_rotate(c, wi);
    }
    if (NP_UNLIKELY(detail && s >= c->detail_limit)) {
      e->next = s; /* left in the thread's block for its next operation event */
      np_rotate(c, wi);
      continue;
    }
    *win = wi;
    *slot = s;
    *epoch = ep;
    return &w->slots[s];
  }
  return NULL;
}

/* A slot in the parent's window when that window is CLOSING, so a collective's proxy
 * operations and steps close with it. Returns NULL to use the current window instead. */
NP_HOT np_event* np_claim_routed(np_comm* c, uint64_t parent, int detail, uint32_t* win,
                                        uint32_t* slot, uint32_t* epoch, uint16_t* flags) {
  if (np_h_comm(parent) != c->idx || np_h_win(parent) >= c->nwin) return NULL;
  uint32_t wi = np_h_win(parent);
  np_window* w = &c->win[wi];
  uint64_t se = __atomic_load_n(&w->se, __ATOMIC_ACQUIRE);
  if (NP_SE_EPOCH(se) != np_h_epoch(parent)) {
    *flags |= NP_F_PARENT_STALE;
    return NULL;
  }
  if (NP_SE_STATE(se) != NP_W_CLOSING) return NULL;
  uint32_t s = __atomic_fetch_add(&w->claimed, 1, __ATOMIC_RELAXED);
  if (s >= (detail ? c->detail_limit : c->nslots)) return NULL;
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

NP_HOT int np_is_routed_type(int type) {
  return type == NP_T_PROXY_OP || type == NP_T_PROXY_STEP || type == NP_T_KERNEL_CH ||
         type == NP_T_NET_PLUGIN;
}

/* Starts an event: claims a slot, stamps the time and the common fields, and writes the
 * handle NCCL gets (a sentinel when nothing could be recorded). The caller fills ev->u and
 * calls np_commit. Returns 0 when the event was dropped. */
NP_HOT int np_begin(np_comm* c, int type, int abi, uint64_t parent, int32_t rank,
                           uint16_t flags, void** eHandle, np_pending* p) {
  np_thread* t = np_enter();
  if (NP_UNLIKELY(t == NULL)) {
    np_count(NP_C_DROPPED_THREADS);
    *eHandle = (void*)NP_H_DROPPED;
    return 0;
  }
  /* Checked again inside the active section: np_init_comm waits for active callbacks before
   * it resets a recycled communicator, so a callback that raced with finalize bails here. */
  uint32_t st = __atomic_load_n(&c->state, __ATOMIC_ACQUIRE);
  if (NP_UNLIKELY(st != NP_COMM_ACTIVE && st != NP_COMM_FINALIZING)) {
    np_leave(t);
    *eHandle = (void*)NP_H_DISABLED;
    return 0;
  }
  uint32_t wi = 0, s = 0, ep = 0;
  np_event* ev = NULL;
  if (parent == NP_H_DROPPED) flags |= NP_F_PARENT_DROPPED;
  int detail = np_is_detail_type(type);
  if ((parent & 1) && np_is_routed_type(type))
    ev = np_claim_routed(c, parent, detail, &wi, &s, &ep, &flags);
  if (ev == NULL) ev = np_claim(c, t, detail, &wi, &s, &ep);
  if (NP_UNLIKELY(ev == NULL)) {
    np_leave(t);
    __atomic_fetch_add(&c->dropped, 1, __ATOMIC_RELAXED);
    np_count(detail ? NP_C_DROPPED_DETAIL : NP_C_DROPPED_FULL);
    *eHandle = (void*)NP_H_DROPPED;
    return 0;
  }
  uint64_t h = np_handle(c->idx, wi, s, ep);
  ev->parent = parent;
  ev->t_start = np_ticks();
  ev->t_stop = 0;
  ev->tid = t->tid;
  ev->rank = rank;
  ev->done = 0;
  ev->nstates = 0;
  ev->sflags = 0;
  p->ev = ev; /* the starter sets every field of its union member */
  p->t = t;
  p->hdr = (uint64_t)ep | ((uint64_t)type << 32) | ((uint64_t)abi << 40) | ((uint64_t)flags << 48);
  *eHandle = (void*)h;
  return 1;
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

/* A stop or state for an event whose window was sealed: written as a LATE record. */
#define NP_LATE_STOP 0xffffffffu
void np_late(np_comm* c, np_thread* t, uint64_t h, uint32_t state, uint64_t a0, uint64_t a1,
             int has_args);
void np_apply_state(np_event* ev, int state, uint64_t a0, uint64_t a1, int has_args,
                    uint64_t now);

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
NP_HOT int np_step_fast(np_event* ev, int state, uint64_t a0, int has_args) {
  if ((unsigned)state >= 32) return 0;
  int cell = np_step_cells[state];
  if (cell < 0 || cell == NP_ST_SEND_PEER_WAIT || has_args == 2) return 0;
  ev->nstates++;
  if (ev->u.step.t_state[cell] == 0) ev->u.step.t_state[cell] = np_ticks();
  if ((cell == NP_ST_SEND_WAIT || cell == NP_ST_RECV_FLUSH_WAIT) && has_args) ev->u.step.trans_size = a0;
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
  np_event* ev = np_slot_of(c, h, 0);
  if (NP_LIKELY(ev != NULL)) {
    if (NP_UNLIKELY(ev->done)) {
      ev->sflags |= NP_F_STOP_TWICE;
      np_count(NP_C_STOP_TWICE);
    } else {
      /* NCCL stops a KernelCh right after recording KernelChStop: that reading serves. */
      uint64_t kst = np_ev_type(ev) == NP_T_KERNEL_CH ? ev->u.kch.t_stop_state : 0;
      ev->t_stop = kst ? kst : np_ticks();
      __atomic_store_n(&ev->done, 1, __ATOMIC_RELEASE);
    }
  } else {
    np_late(c, t, h, NP_LATE_STOP, 0, 0, 0);
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
  np_event* ev = np_slot_of(c, h, 0);
  if (NP_LIKELY(ev != NULL)) {
    if (NP_UNLIKELY(ev->done)) {
      ev->sflags |= NP_F_AFTER_STOP;
      np_count(NP_C_AFTER_STOP);
    } else if (NP_LIKELY(np_ev_type(ev) == NP_T_PROXY_STEP) && np_step_fast(ev, state, a0, has_args)) {
      /* the common case, applied inline */
    } else {
      np_apply_state(ev, state, a0, a1, has_args, np_ticks());
    }
  } else {
    np_late(c, t, h, (uint32_t)state, a0, a1, has_args);
  }
  np_leave(t);
}

#endif /* NCCLPROF_HOT_H */
