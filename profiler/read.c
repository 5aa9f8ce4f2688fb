/*
 * read.c — what the drainer reads besides windows (transfer sums, lost operations, the arena) and
 * the switches it sets. One section of the C library's core; state.h declares what the sections
 * share.
 */
#define _GNU_SOURCE
#include <string.h>

#include "state.h"
#include "chain.h"

/* A communicator entry whose memory may be read (it was mapped; its data may be stale). */
static np_comm* np_comm_mapped(uint32_t i) {
  if (i >= NP_MAX_COMMS || i >= __atomic_load_n(&np_comms_hwm, __ATOMIC_ACQUIRE)) return NULL;
  np_comm* c = &np_comms[i];
  return c->mem ? c : NULL;
}

static int32_t np_sext24(uint64_t v) { return (int32_t)((uint32_t)(v & 0xffffff) << 8) >> 8; }

int np_xfer_read(uint32_t i, np_xfer* out, int max) {
  np_comm* c = np_comm_mapped(i);
  if (c == NULL) return 0;
  int n = 0;
  for (uint32_t k = 0; k < NP_XFER_BUCKETS; k++) {
    np_xbucket* b = &c->xfer[k];
    uint64_t cnt = __atomic_load_n(&b->n, __ATOMIC_ACQUIRE); /* the fields it covers are in */
    if (cnt == 0) continue;
    if (n == max) return -1;
    uint64_t key = __atomic_load_n(&b->key, __ATOMIC_RELAXED);
    np_xfer* o = &out[n++];
    o->kind = (uint32_t)(key >> 60);
    o->writer = (uint32_t)(key >> 48) & 0xfff;
    o->rank = np_sext24(key >> 24);
    o->id = np_sext24(key);
    o->size = __atomic_load_n(&b->size, __ATOMIC_RELAXED);
    o->n = cnt;
    o->bytes = __atomic_load_n(&b->bytes, __ATOMIC_RELAXED);
    o->sum_t = __atomic_load_n(&b->sum_t, __ATOMIC_RELAXED);
    o->t_min = __atomic_load_n(&b->t_min, __ATOMIC_RELAXED);
    o->t_max = __atomic_load_n(&b->t_max, __ATOMIC_RELAXED);
    uint64_t t2 = __atomic_load_n(&b->sum_t2, __ATOMIC_RELAXED);
    memcpy(&o->sum_t2, &t2, sizeof t2);
  }
  return n;
}

void np_xfer_unkeyed(uint32_t i, uint64_t n[4], uint64_t bytes[4]) {
  np_comm* c = np_comm_mapped(i);
  for (int k = 0; k < 4; k++) {
    n[k] = c ? __atomic_load_n(&c->xun_n[k], __ATOMIC_RELAXED) : 0;
    bytes[k] = c ? __atomic_load_n(&c->xun_bytes[k], __ATOMIC_RELAXED) : 0;
  }
}

int np_lost_read(uint32_t i, np_lost_op* out, int max) {
  np_comm* c = np_comm_mapped(i);
  if (c == NULL) return 0;
  int n = 0;
  for (uint32_t k = 0; k < NP_LOST_KEYS && n < max; k++) {
    np_lost* e = &c->lost[k];
    uint64_t cnt = __atomic_load_n(&e->n, __ATOMIC_ACQUIRE);
    if (cnt == 0) continue;
    out[n].func = e->func;
    out[n].dtype = e->dtype;
    out[n].algo = e->algo;
    out[n].proto = e->proto;
    out[n].type = e->type;
    out[n].nchannels = e->nchannels;
    out[n].n = cnt;
    out[n].sum_count = __atomic_load_n(&e->sum_count, __ATOMIC_RELAXED);
    n++;
  }
  return n;
}

/* Reads cells while NCCL's threads write them: a cell is copied only if its generation is the
 * same before and after, so a copy is of one event (its fields may be a moment apart, which a
 * hang dump, where nothing moves, does not notice). */
int np_arena_scan(uint32_t i, np_open_cell* out, int max) {
  np_comm* c = np_comm_mapped(i);
  if (c == NULL) return 0;
  int n = 0;
  for (uint32_t k = 0; k < c->ncells && n < max; k++) {
    np_cell* cell = &c->cells[k];
    uint64_t gs = __atomic_load_n(&cell->gs, __ATOMIC_ACQUIRE);
    if (!(gs & 1)) continue;
    np_open_cell* o = &out[n];
    memset(o, 0, sizeof *o);
    o->handle = np_ahandle(i, k, (uint32_t)(gs >> 1));
    o->parent = cell->parent;
    o->t_start = cell->t_start;
    o->t_last = cell->t_last;
    o->type = cell->type;
    o->tid = cell->tid;
    o->rank = cell->rank;
    o->peer = cell->peer;
    o->channel = cell->channel;
    o->is_send = cell->is_send;
    o->last_state = cell->last_state;
    if (cell->type == NP_T_PROXY_STEP) {
      memcpy(o->t_state, cell->u.step.t_state, sizeof o->t_state);
      o->step = cell->u.step.step;
    } else {
      o->nsteps = cell->u.op.nsteps;
      o->steps_done = (int32_t)cell->u.op.prog.steps_done;
    }
#if !defined(NP_TSAN)
    __atomic_thread_fence(__ATOMIC_ACQUIRE); /* the field reads above happen before the check */
#endif
    if (__atomic_load_n(&cell->gs, __ATOMIC_ACQUIRE) == gs && o->t_start != 0) n++;
  }
  return n;
}

void np_set_detail(int on) {
  if (on) {
    uint32_t hwm = __atomic_load_n(&np_comms_hwm, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i < hwm; i++)
      if (np_comms[i].mem) np_populate_detail(&np_comms[i]);
  }
  __atomic_store_n(&np_detail_on, on ? 1u : 0u, __ATOMIC_RELEASE);
}

int np_detail(void) { return (int)__atomic_load_n(&np_detail_on, __ATOMIC_ACQUIRE); }

uint32_t np_sample_every(void) { return __atomic_load_n(&np_sample_n, __ATOMIC_ACQUIRE); }

/* The drainer saw a slow operation: the communicator's next k Coll/P2p are traced in full (a
 * countdown already running is extended, never shortened). Ignored for another incarnation. */
void np_trigger(uint32_t i, uint64_t incarnation, uint32_t k) {
  np_comm* c = np_comm_mapped(i);
  if (c == NULL || np_comm_state(c) != NP_COMM_ACTIVE ||
      c->incarnation != incarnation)
    return;
  uint32_t cur = __atomic_load_n(&c->trig_left, __ATOMIC_RELAXED);
  while (cur < k && !__atomic_compare_exchange_n(&c->trig_left, &cur, k, 1, __ATOMIC_RELAXED,
                                                 __ATOMIC_RELAXED)) {
  }
}

void np_dropped_read(uint64_t* untracked, uint64_t* trace) {
  for (int k = 0; k < NP_T_COUNT; k++) {
    untracked[k] = __atomic_load_n(&np_dropped_type[k], __ATOMIC_RELAXED);
    trace[k] = __atomic_load_n(&np_trace_dropped_type[k], __ATOMIC_RELAXED);
  }
}

void np_comm_drained(uint32_t i) {
  if (i == NP_PXN_COMM || i >= NP_MAX_COMMS) return;
  np_comm* c = &np_comms[i];
  uint32_t w = __atomic_load_n(&c->state, __ATOMIC_ACQUIRE);
  if (!np_move_state(c, w, NP_COMM_FINALIZING, NP_COMM_DRAINED))
    np_move_state(c, w, NP_COMM_ABANDONED, NP_COMM_UNUSED); /* finalize gave up waiting */
}

void np_counters_read(uint64_t* out) {
  for (int i = 0; i < NP_C_COUNT; i++) out[i] = __atomic_load_n(&np_counters[i], __ATOMIC_RELAXED);
}

int np_uses_membarrier(void) { return !np_fence_mode; }

/* Runtime mask changes (control API): NCCL reads the int per operation. */
int np_set_mask(uint32_t mask) {
  int* p = __atomic_load_n(&np_mask_ptr, __ATOMIC_ACQUIRE);
  int abi = __atomic_load_n(&np_mask_abi, __ATOMIC_ACQUIRE);
  if (abi) mask = np_mask_ancestors(mask, abi); /* before the first init: np_mask_complete */
  __atomic_store_n(&np_record_mask, mask & NPABI_ALL_TYPES, __ATOMIC_RELEASE);
  __atomic_store_n(&np_mask_from_api, 1, __ATOMIC_RELEASE);
  if (p == NULL || !np_drain_live()) return 0; /* not yet, or the plugin turned itself off */
  /* NCCL's mask also carries what a chained plugin asked for (chain.c). */
  __atomic_store_n(p, (int)((mask & NPABI_ALL_TYPES) | np_chain_nccl_mask()), __ATOMIC_RELEASE);
  return 1;
}

void np_mask_off(void) {
  int* p = __atomic_load_n(&np_mask_ptr, __ATOMIC_ACQUIRE);
  if (p) __atomic_store_n(p, 0, __ATOMIC_RELEASE);
}

const np_config* np_config_get(void) { return &np_cfg; }

uint32_t np_get_mask(void) { return __atomic_load_n(&np_record_mask, __ATOMIC_ACQUIRE); }
