/*
 * comms.c — the communicator table: init (memory, incarnations, the PXN entry, the mask NCCL gets)
 * and finalize. One section of the C library's core; state.h declares what the sections share.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include "state.h"
#include "hot.h"

static uint32_t np_random32(void) {
  uint32_t r = 0;
  if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) /* mix the clock instead */
    r = (uint32_t)(np_ticks() * 0x9E3779B97F4A7C15ull >> 32) ^ (uint32_t)getpid();
  return r | 1;
}

/* Lays out one window set over `mem`. */
static void np_wset_init(np_wset* ws, void* mem) {
  ws->nwin = np_cfg.nwin;
  ws->nslots = np_cfg.nslots;
  ws->block = np_cfg.block;
  ws->trigger = np_cfg.trigger;
  for (uint32_t w = 0; w < ws->nwin; w++) {
    ws->win[w].slots = (np_event*)((char*)mem + (size_t)w * ws->nslots * NP_SLOT_BYTES);
    /* Epochs start at a random value so a value NCCL never got from us (a corrupted or
     * made-up handle) matches a live window with probability 2^-31, not because small
     * epochs are common. */
    __atomic_store_n(&ws->win[w].se, NP_SE(np_random32() & NP_EPOCH_MASK, NP_W_FREE),
                     __ATOMIC_RELEASE);
  }
}

/* Touches the detail windows (a trace wants detail): done by the thread that turns detail on,
 * so NCCL's threads do not take the page faults. */
void np_populate_detail(np_comm* c) {
  if (c->dmem == NULL || __atomic_load_n(&c->dmem_ready, __ATOMIC_ACQUIRE)) return;
#ifdef MADV_POPULATE_WRITE
  if (madvise(c->dmem, c->dmem_bytes, MADV_POPULATE_WRITE) != 0)
#endif
  {
    /* Older kernels: read a byte per page (the pages are zero; a write could race with a
     * callback that has started using them). The first write then costs a minor fault. */
    volatile const char* p = (const char*)c->dmem;
    for (size_t o = 0; o < c->dmem_bytes; o += 4096) (void)p[o];
  }
  __atomic_store_n(&c->dmem_ready, 1, __ATOMIC_RELEASE);
}

/* The memory the hot path writes (operation windows, arena, sums), populated now so no
 * callback takes a page fault, and in 2 MiB pages where the kernel gives them (transparent
 * huge pages "madvise" or "always"): the windows and the arena are walked a lap at a time, so
 * with 4 KiB pages a callback takes a TLB miss every 32 records or cells, and on a busy machine
 * (other work runs between NCCL's calls) most misses walk cold page tables. The mapping is
 * aligned to 2 MiB (2 MiB more is mapped and the slack returned), so every whole 2 MiB of it
 * can be one page; its length stays `bytes`, so the memory is what it was (a communicator with
 * small windows, under 2 MiB, keeps 4 KiB pages). */
#define NP_HUGE_PAGE ((size_t)2 << 20)
static void* np_map_hot(size_t bytes) {
  bytes = (bytes + 4095) & ~(size_t)4095;
  char* raw = mmap(NULL, bytes + NP_HUGE_PAGE, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return MAP_FAILED;
  char* m = (char*)(((uintptr_t)raw + NP_HUGE_PAGE - 1) & ~(uintptr_t)(NP_HUGE_PAGE - 1));
  if (m > raw) munmap(raw, (size_t)(m - raw));
  munmap(m + bytes, (size_t)(raw + NP_HUGE_PAGE - m));
#ifdef MADV_HUGEPAGE
  if (bytes >= NP_HUGE_PAGE) (void)madvise(m, bytes, MADV_HUGEPAGE); /* a hint: may be refused */
#endif
#ifdef MADV_POPULATE_WRITE
  if (madvise(m, bytes, MADV_POPULATE_WRITE) == 0) return m;
#endif
  for (size_t o = 0; o < bytes; o += 4096) m[o] = 0; /* older kernels: every page, now */
  return m;
}

/* Maps a communicator's memory the first time its table entry is used; the memory and the
 * geometry then stay for the life of the process (config is read once). The operation
 * windows, the arena and the sums are populated now so no callback takes a page fault. */
static int np_map_comm(np_comm* c, uint32_t idx) {
  size_t wbytes = (size_t)np_cfg.nwin * np_cfg.nslots * NP_SLOT_BYTES;
  size_t bytes = wbytes + (size_t)np_fixed_bytes();
  if (c->mem) return 1;
  void* m = np_map_hot(bytes);
  if (m == MAP_FAILED) return 0;
  void* d = mmap(NULL, wbytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (d == MAP_FAILED) {
    munmap(m, bytes);
    return 0;
  }
  c->mem = m;
  c->mem_bytes = bytes;
  c->dmem = d;
  c->dmem_bytes = wbytes;
  c->idx = idx;
  c->ncells = np_cfg.ncells;
  c->cells = (np_cell*)((char*)m + wbytes);
  c->xfer = (np_xbucket*)(c->cells + c->ncells);
  c->lost = (np_lost*)(c->xfer + NP_XFER_BUCKETS);
  c->rq = (uint64_t*)(c->lost + NP_LOST_KEYS);
  c->conn = (np_conn*)(c->rq + NP_RETIRE_RING);
  c->owner = (uint32_t*)(c->conn + NP_CONNS);
  /* Cell generations start random, like window epochs: a made-up handle (a small integer, a
   * corrupted pointer) then names a live cell with probability 2^-30, not because every
   * cell's first generation is 0. */
  for (uint32_t k = 0; k < c->ncells; k++)
    c->cells[k].gs = (uint64_t)(np_random32() & NP_GEN_MASK) << 1;
  np_wset_init(&c->set[NP_SET_OP], m);
  np_wset_init(&c->set[NP_SET_DETAIL], d);
  /* Sampled tracing records its operations' steps there from the start. */
  if (__atomic_load_n(&np_detail_on, __ATOMIC_ACQUIRE) || np_sample_n) np_populate_detail(c);
  return 1;
}

/* Starts a new incarnation of a communicator entry: fresh epochs and cell generations
 * (handles of the previous one stay stale forever), window 0 of each set filling, empty sums.
 * Waits first for callbacks that may still be running on the previous incarnation (they
 * re-check the state and bail). */
static void np_open_comm(np_comm* c) {
  for (int i = 0; i < 50 && !np_quiesce(); i++) {
  }
  __atomic_store_n(&c->dropped, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&c->stale, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&c->late, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&c->orphan_steps, 0, __ATOMIC_RELAXED);
  memset(c->dropped_type, 0, sizeof c->dropped_type);
  memset(c->trace_dropped, 0, sizeof c->trace_dropped);
  memset(c->xun_n, 0, sizeof c->xun_n);
  memset(c->xun_bytes, 0, sizeof c->xun_bytes);
  __atomic_store_n(&c->incarnation, c->incarnation + 1, __ATOMIC_RELAXED);
  __atomic_store_n(&c->fin_tsc, 0, __ATOMIC_RELAXED);
  uint64_t now = np_ticks();
  for (uint32_t set = 0; set < 2; set++) {
    np_wset* ws = &c->set[set];
    while (__atomic_exchange_n(&ws->rotating, 1, __ATOMIC_ACQUIRE)) {
    }
    for (uint32_t w = 0; w < ws->nwin; w++) {
      np_window* win = &ws->win[w];
      uint32_t ep = np_next_epoch(NP_SE_EPOCH(win->se));
      __atomic_store_n(&win->claimed, 0, __ATOMIC_RELAXED);
      win->scan_from = 0;
      __atomic_store_n(&win->open_tsc, now, __ATOMIC_RELAXED);
      __atomic_store_n(&win->close_tsc, 0, __ATOMIC_RELAXED);
      __atomic_store_n(&win->se, NP_SE(ep, w == 0 ? NP_W_FILLING : NP_W_FREE), __ATOMIC_RELEASE);
    }
    __atomic_store_n(&ws->cur, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&ws->rotating, 0, __ATOMIC_RELEASE);
  }
  for (uint32_t i = 0; i < c->ncells; i++) { /* a new generation, free */
    uint64_t gs = __atomic_load_n(&c->cells[i].gs, __ATOMIC_RELAXED);
    __atomic_store_n(&c->cells[i].gs, (gs | 1) + 1, __ATOMIC_RELEASE);
  }
  __atomic_store_n(&c->cursor, 0, __ATOMIC_RELAXED);
  /* Blocks threads held in the previous incarnation: free (atomically: a late callback of that
   * incarnation may still be giving its block back, and finds it no longer its own). */
  for (uint32_t b = 0; b < c->ncells / NP_CELL_BLOCK; b++)
    __atomic_store_n(&c->owner[b], 0, __ATOMIC_RELAXED);
  __atomic_store_n(&c->rq_head, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&c->rq_tail, 0, __ATOMIC_RELAXED);
  memset(c->conn, 0, NP_CONNS * sizeof(np_conn));
  __atomic_store_n(&c->trig_left, 0, __ATOMIC_RELAXED);
  memset(c->rep, 0, sizeof c->rep); /* no seq repeats yet (np_sample_pick) */
  if (c->p2p_ord) memset(c->p2p_ord, 0, c->p2p_bytes);
  memset(c->xfer, 0, NP_XFER_BUCKETS * sizeof(np_xbucket));
  memset(c->lost, 0, NP_LOST_KEYS * sizeof(np_lost));
}

static void np_bump_hwm(uint32_t* hwm, uint32_t v) {
  uint32_t cur = __atomic_load_n(hwm, __ATOMIC_RELAXED);
  while (v > cur && !__atomic_compare_exchange_n(hwm, &cur, v, 0, __ATOMIC_RELEASE,
                                                 __ATOMIC_RELAXED)) {
  }
}

/* The process-wide communicator that holds ProxyOps other processes' proxies started (PXN). */
/* Takes an UNUSED entry for a new incarnation (INITIALIZING); returns 0 if it is not free. */
static int np_claim_entry(np_comm* c) {
  uint32_t w = __atomic_load_n(&c->state, __ATOMIC_RELAXED);
  return NP_CS_STATE(w) == NP_COMM_UNUSED &&
         __atomic_compare_exchange_n(&c->state, &w, NP_CS(NP_CS_INC(w), NP_COMM_INITIALIZING), 0,
                                     __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}

/* Moves an entry to `st`, keeping the incarnation its state word carries. */
static void np_set_state(np_comm* c, uint32_t st) {
  uint32_t w = __atomic_load_n(&c->state, __ATOMIC_RELAXED);
  __atomic_store_n(&c->state, NP_CS(NP_CS_INC(w), st), __ATOMIC_RELEASE);
}

/* Compare-and-swap of an entry's state from `from` to `to` within the incarnation in `w`. */
int np_move_state(np_comm* c, uint32_t w, uint32_t from, uint32_t to) {
  uint32_t expect = NP_CS(NP_CS_INC(w), from);
  return __atomic_compare_exchange_n(&c->state, &expect, NP_CS(NP_CS_INC(w), to), 0,
                                     __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}

/* A claimed entry goes live: its new incarnation is published with the state. */
static void np_activate(np_comm* c) {
  __atomic_store_n(&c->state, NP_CS(c->incarnation, NP_COMM_ACTIVE), __ATOMIC_RELEASE);
}

static np_comm* np_pxn_comm(void) {
  np_comm* c = &np_comms[NP_PXN_COMM];
  if (np_comm_state(c) == NP_COMM_ACTIVE) return c;
  if (!np_claim_entry(c)) return NULL;
  if (!np_map_comm(c, NP_PXN_COMM)) {
    np_set_state(c, NP_COMM_UNUSED);
    return NULL;
  }
  np_open_comm(c);
  snprintf(c->name, sizeof c->name, "pxn");
  __atomic_store_n(&c->rank, -1, __ATOMIC_RELAXED);
  np_bump_hwm(&np_comms_hwm, 1);
  np_activate(c);
  return c;
}

np_comm* np_pxn_target(void) {
  np_comm* c = &np_comms[NP_PXN_COMM];
  return np_comm_state(c) == NP_COMM_ACTIVE ? c : NULL;
}

/* The P2P ordinal counters of a communicator about to open: 2 x nranks, or a fixed table when
 * NCCL does not say nranks (v1-v3: peers beyond NP_P2P_FIXED_PEERS share a counter with
 * peer % it, so their ordinals, and which of their operations are sampled, stop lining up).
 * The table of a previous incarnation is reused when it is large enough; a larger one is mapped
 * and the smaller kept mapped (never unmapped: a callback that raced with finalize may still
 * hold it), so what is mapped is at most twice the largest table. np_open_comm zeroes it. */
static void np_map_p2p(np_comm* c, int nranks) {
  uint32_t peers = nranks > 0 ? (uint32_t)nranks : NP_P2P_FIXED_PEERS;
  size_t bytes = (size_t)peers * 2 * sizeof(uint64_t);
  if (c->p2p_ord != NULL && c->p2p_bytes >= bytes) {
    c->p2p_peers = peers;
    return;
  }
  void* m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                 -1, 0);
  if (m == MAP_FAILED) {
    np_logf(NPABI_LOG_WARN, "cannot map %zu bytes for P2P ordinals (%s): this communicator's "
            "P2P operations all get ordinal 0", bytes, strerror(errno));
    c->p2p_peers = 0;
    return;
  }
  c->p2p_ord = (uint64_t*)m;
  c->p2p_bytes = bytes;
  c->p2p_peers = peers;
}

/* The ABI version NCCL calls (np_mask_ancestors), from the first init. */
int np_mask_abi;

/* At each init: the mask in force gets the ancestors NCCL of this ABI version starts, said
 * once when that adds something. */
static void np_mask_complete(int abi) {
  __atomic_store_n(&np_mask_abi, abi, __ATOMIC_RELEASE);
  uint32_t m = np_get_mask(), full = np_mask_ancestors(m, abi);
  if (full == m) return;
  __atomic_store_n(&np_record_mask, full, __ATOMIC_RELEASE);
  static int said;
  if (!__atomic_exchange_n(&said, 1, __ATOMIC_ACQ_REL))
    np_logf(NPABI_LOG_INFO,
            "event mask 0x%x: NCCL also starts the events above the types asked for; ncclprof "
            "records the operations and ProxyOps among them, so that what it records counts "
            "(mask 0x%x)", m, full);
}

void* np_init_comm(int abi, uint64_t comm_hash, const char* name, int nnodes, int nranks,
                   int rank, npabi_logger_t logfn, int* mask_ptr) {
  np_setup();
  if (logfn) {
    npabi_logger_t none = NULL;
    __atomic_compare_exchange_n(&np_logger, &none, logfn, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
  }
  /* Off by configuration, or the process cannot afford the drainer (loader.c, which says
   * why once): init succeeds, NCCL is asked for nothing. */
  if (np_cfg.disabled || !np_drain_admit()) {
    if (mask_ptr) __atomic_store_n(mask_ptr, 0, __ATOMIC_RELEASE);
    np_count(NP_C_INIT_DISABLED);
    return NULL;
  }
  np_mask_complete(abi);
  /* The mask is one process-wide int; keep its address so the control API can change it. */
  if (mask_ptr) {
    /* the mask in force, a run-time change included; NCCL's other threads may be reading it */
    __atomic_store_n(mask_ptr, (int)np_get_mask(), __ATOMIC_RELEASE);
    __atomic_store_n(&np_mask_ptr, mask_ptr, __ATOMIC_RELEASE);
  }
  np_pxn_comm();
  for (uint32_t i = 1; i < NP_MAX_COMMS; i++) {
    np_comm* c = &np_comms[i];
    if (!np_claim_entry(c)) continue;
    if (!np_map_comm(c, i)) {
      np_set_state(c, NP_COMM_UNUSED);
      np_count(NP_C_INIT_DISABLED);
      np_logf(NPABI_LOG_WARN, "cannot map %zu bytes for event windows (%s); not profiling "
              "this communicator", (size_t)np_cfg.nwin * np_cfg.nslots * NP_SLOT_BYTES,
              strerror(errno));
      return NULL;
    }
    np_open_comm(c);
    np_map_p2p(c, abi >= 4 ? nranks : 0); /* after np_open_comm's wait: no callback inside */
    c->abi = abi;
    c->comm_hash = comm_hash;
    c->nnodes = nnodes;
    c->nranks = nranks;
    /* A late callback that still names the entry's previous context may read it meanwhile. */
    __atomic_store_n(&c->rank, rank, __ATOMIC_RELAXED);
    __atomic_store_n(&c->learned, abi >= 4, __ATOMIC_RELEASE);
    c->log = logfn;
    snprintf(c->name, sizeof c->name, "%s", name ? name : "");
    np_bump_hwm(&np_comms_hwm, i + 1);
    np_activate(c);
    np_kick();
    return np_ctx_of(c, c->incarnation);
  }
  np_count(NP_C_INIT_DISABLED);
  /* Once per process: a job that makes thousands of communicators must not flood its log.
   * Every one skipped is counted in init_disabled. */
  static int warned;
  if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
    np_logf(NPABI_LOG_WARN, "more than %d communicators in this process; not profiling the "
            "ones beyond (counted in init_disabled)", NP_MAX_COMMS - 1);
  return NULL;
}

/* v1–v3 pass the communicator's identity in Coll/P2p descriptors instead of init. */
void np_learn_comm(np_comm* c, uint64_t hash, const char* name, int rank) {
  uint32_t expect = 0;
  if (!__atomic_compare_exchange_n(&c->learned, &expect, 2, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
    return; /* learned already, or another thread is learning */
  c->comm_hash = hash;
  __atomic_store_n(&c->rank, rank, __ATOMIC_RELAXED); /* read by callbacks on other threads */
  if (name) snprintf(c->name, sizeof c->name, "%s", name);
  __atomic_store_n(&c->learned, 1, __ATOMIC_RELEASE);
}

uint64_t np_mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int np_wait_until(int (*done)(void*), void* arg, uint64_t timeout_ns) {
  uint64_t deadline = np_mono_ns() + timeout_ns;
  for (;;) {
    if (done(arg)) return 1;
    uint64_t now = np_mono_ns();
    if (now >= deadline) return 0;
    uint64_t nap = deadline - now < 1000000 ? deadline - now : 1000000; /* 1 ms */
    struct timespec ts = {0, (long)nap};
    nanosleep(&ts, NULL);
  }
}

/* Finalize's wait is over: the drainer processed the communicator, or there is none. */
static int np_finalize_done(void* arg) {
  return np_comm_state((np_comm*)arg) == NP_COMM_DRAINED || !np_drain_live();
}

void np_finalize_comm(void* context) {
  if (context == NULL) { /* NCCL 2.23–2.27 finalize a NULL context */
    np_count(NP_C_NULL_FINALIZE);
    return;
  }
  uint32_t token;
  np_comm* c = np_ctx_entry(context, &token);
  if (c == NULL) return;
  /* Only the incarnation the context was given for, and only once: a finalize of an earlier
   * one (its entry now serves another communicator) is counted and ignored. */
  uint32_t w = __atomic_load_n(&c->state, __ATOMIC_ACQUIRE);
  if (NP_CS_STATE(w) != NP_COMM_ACTIVE || (NP_CS_INC(w) & (NP_CTX_TOKENS - 1)) != token) {
    np_count(NP_C_STALE_FINALIZE);
    return;
  }
  __atomic_store_n(&c->fin_tsc, np_ticks(), __ATOMIC_RELAXED); /* published by the CAS */
  if (!np_move_state(c, w, NP_COMM_ACTIVE, NP_COMM_FINALIZING)) {
    np_count(NP_C_STALE_FINALIZE);
    return;
  }
  np_kick();
  /* Wait (bounded, by the clock) for the drainer to process what this communicator recorded,
   * so its summary and trace are complete when NCCL's commDestroy returns. */
  if (np_wait_until(np_finalize_done, c, np_cfg.finalize_wait_ns) ||
      !np_move_state(c, w, NP_COMM_FINALIZING, NP_COMM_ABANDONED)) {
    np_set_state(c, NP_COMM_UNUSED); /* drained, or no drainer will come */
    return;
  }
  np_logf(NPABI_LOG_WARN, "finalize of communicator %llx rank %d did not finish processing "
          "within NCCLPROF_FINALIZE_TIMEOUT_MS; it continues in the background",
          (unsigned long long)c->comm_hash, c->rank);
}
