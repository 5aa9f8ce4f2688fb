/*
 * protocol.c — the drainer's side of the window protocol: wait, poll, export, release, communicator
 * info. One section of the C library's core; state.h declares what the sections share.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/membarrier.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "state.h"
#include "ticks.h"

void np_kick(void) {
  if (!__atomic_load_n(&np_setup_done, __ATOMIC_ACQUIRE)) return;
  int v = 0;
  if (sem_getvalue(&np_sem, &v) == 0 && v > 0) return;
  sem_post(&np_sem);
}

void np_wait(int timeout_ms) {
  if (timeout_ms < 0) {
    while (!__atomic_load_n(&np_setup_done, __ATOMIC_ACQUIRE)) {
      struct timespec ts = {0, 20000000};
      nanosleep(&ts, NULL);
    }
    while (sem_wait(&np_sem) != 0 && errno == EINTR) {
    }
    return;
  }
  if (!__atomic_load_n(&np_setup_done, __ATOMIC_ACQUIRE)) {
    struct timespec ts = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
    return;
  }
  struct timespec dl;
  clock_gettime(CLOCK_REALTIME, &dl);
  dl.tv_sec += timeout_ms / 1000;
  dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
  if (dl.tv_nsec >= 1000000000) {
    dl.tv_sec++;
    dl.tv_nsec -= 1000000000;
  }
  while (sem_timedwait(&np_sem, &dl) != 0 && errno == EINTR) {
  }
}

/* Whether a CLOSING window still has events that started and have not stopped. */
static int np_has_open(np_window* w, uint32_t epoch, uint32_t nslots) {
  uint32_t n = __atomic_load_n(&w->claimed, __ATOMIC_ACQUIRE);
  if (n > nslots) n = nslots;
  for (uint32_t i = w->scan_from; i < n; i++) {
    np_event* ev = &w->slots[i];
    uint64_t hdr = __atomic_load_n(&ev->hdr, __ATOMIC_ACQUIRE);
    if ((uint32_t)hdr != epoch) continue; /* a hole: claimed in a block but unused so far */
    if (!__atomic_load_n(&ev->done, __ATOMIC_ACQUIRE)) {
      w->scan_from = i;
      return 1;
    }
  }
  w->scan_from = n;
  return 0;
}

/* Waits until no thread is inside a callback that began before the windows were sealed.
 * Returns 0 if some thread stayed inside longer than the bound (try again next poll). */
int np_quiesce(void) {
#if !defined(NP_TSAN)
  if (!np_fence_mode) syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
  else __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
  uint32_t n = __atomic_load_n(&np_threads_hwm, __ATOMIC_ACQUIRE);
  for (uint32_t i = 0; i < n; i++) {
    uint64_t a = __atomic_load_n(&np_threads[i].active, __ATOMIC_SEQ_CST);
    if (!(a & 1)) continue;
    for (int spin = 0; spin < 20000; spin++) { /* ≈ 20 ms at most */
      if (__atomic_load_n(&np_threads[i].active, __ATOMIC_SEQ_CST) != a) goto next;
      if (spin < 100) sched_yield();
      else {
        struct timespec ts = {0, 1000};
        nanosleep(&ts, NULL);
      }
    }
    np_count(NP_C_QUIESCE_TIMEOUT);
    return 0;
  next:;
  }
  return 1;
}

/* CLOSING and SEALED windows of a set in the order they were closed. */
static int np_closed_in_order(np_wset* ws, uint32_t* order) {
  int n = 0;
  for (uint32_t k = 0; k < ws->nwin; k++) {
    uint32_t st = NP_SE_STATE(__atomic_load_n(&ws->win[k].se, __ATOMIC_ACQUIRE));
    if (st != NP_W_CLOSING && st != NP_W_SEALED) continue;
    int j = n++;
    while (j > 0 && __atomic_load_n(&ws->win[order[j - 1]].close_tsc, __ATOMIC_RELAXED) >
                        __atomic_load_n(&ws->win[k].close_tsc, __ATOMIC_RELAXED)) {
      order[j] = order[j - 1];
      j--;
    }
    order[j] = k;
  }
  return n;
}

int np_free_windows(np_wset* ws) {
  int n = 0;
  for (uint32_t k = 0; k < ws->nwin; k++)
    n += NP_SE_STATE(__atomic_load_n(&ws->win[k].se, __ATOMIC_ACQUIRE)) == NP_W_FREE;
  return n;
}

static uint64_t np_ns_to_ticks(uint64_t ns) { return (uint64_t)((double)ns * np_ticks_per_ns); }

/* Seals a set's closed windows oldest first, so a window is never processed before an older
 * one that may hold its events' parents. The oldest is sealed without waiting when fewer than
 * two windows are free, so a burst never waits behind a grace period and drops. */
static int np_poll_set(np_comm* c, uint32_t i, uint32_t set, int fin, uint64_t now,
                       np_ready* out, int max) {
  np_wset* ws = &c->set[set];
  uint64_t gmin = np_ns_to_ticks(np_cfg.grace_min_ns), gmax = np_ns_to_ticks(np_cfg.grace_max_ns);
  uint32_t cur = __atomic_load_n(&ws->cur, __ATOMIC_ACQUIRE);
  np_window* cw = &ws->win[cur];
  if (__atomic_load_n(&cw->claimed, __ATOMIC_RELAXED) > 0 &&
      (fin || now - __atomic_load_n(&cw->open_tsc, __ATOMIC_RELAXED) >=
                  np_ns_to_ticks(np_cfg.window_ns)))
    np_rotate(c, set, cur);
  uint32_t order[NP_MAX_WINDOWS];
  int nclosed = np_closed_in_order(ws, order), n = 0;
  int pressure = np_free_windows(ws) < 2;
  for (int j = 0; j < nclosed && n < max; j++) {
    np_window* w = &ws->win[order[j]];
    uint64_t se = __atomic_load_n(&w->se, __ATOMIC_ACQUIRE);
    uint32_t ep = NP_SE_EPOCH(se);
    if (NP_SE_STATE(se) == NP_W_CLOSING) {
      uint64_t age = now - __atomic_load_n(&w->close_tsc, __ATOMIC_RELAXED);
      int early = fin || (pressure && j == 0);
      int at_max = age >= gmax;
      if (!early && !at_max && (age < gmin || np_has_open(w, ep, ws->nslots))) break;
      if (at_max && !early && np_has_open(w, ep, ws->nslots)) np_count(NP_C_SEALED_AT_MAX_GRACE);
      __atomic_store_n(&w->se, NP_SE(ep, NP_W_SEALED), __ATOMIC_SEQ_CST);
    }
    uint32_t claimed = __atomic_load_n(&w->claimed, __ATOMIC_ACQUIRE);
    out[n].comm = i;
    out[n].set = set;
    out[n].win = order[j];
    out[n].epoch = ep;
    out[n].claimed = claimed < ws->nslots ? claimed : ws->nslots;
    out[n].open_tsc = __atomic_load_n(&w->open_tsc, __ATOMIC_RELAXED);
    n++;
  }
  return n;
}

int np_poll(np_ready* out, int max, int flush, int set_mask) {
  uint64_t now = np_ticks();
  __atomic_store_n(&np_coarse.tsc, now, __ATOMIC_RELAXED); /* np_step_clock */
  int n = 0;
  uint32_t hwm = __atomic_load_n(&np_comms_hwm, __ATOMIC_ACQUIRE);
  /* The PXN communicator is never finalized by NCCL: it is flushed whenever one is, so other
   * processes' operations reach the summaries and traces before the job ends. */
  int finalizing = 0;
  for (uint32_t i = 1; i < hwm; i++) {
    uint32_t st = np_comm_state(&np_comms[i]);
    finalizing |= st == NP_COMM_FINALIZING || st == NP_COMM_ABANDONED;
  }
  for (uint32_t i = 0; i < hwm && n < max; i++) {
    np_comm* c = &np_comms[i];
    uint32_t st = np_comm_state(c);
    if (st != NP_COMM_ACTIVE && st != NP_COMM_FINALIZING && st != NP_COMM_ABANDONED) continue;
    int fin = flush || st != NP_COMM_ACTIVE || (i == NP_PXN_COMM && finalizing);
    for (uint32_t set = 0; set < 2 && n < max; set++)
      if (set_mask & (1 << set)) n += np_poll_set(c, i, set, fin, now, out + n, max - n);
  }
  if (n > 0 && !np_quiesce()) return 0; /* sealed windows stay SEALED: retried next poll */
  return n;
}

/* A ProxyOp's progress in the flat record the drainer reads. */
static void np_export_progress(np_record* o, const np_op_progress* p) {
  o->t_aux = p->t_progress;
  o->bytes_aux = p->trans_size;
  o->x_bytes = p->x_bytes;
  o->x_time = p->x_time;
  o->x_n = p->x_n;
  o->steps_done = p->steps_done;
}

int np_export(const np_ready* r, np_record* out, int max) {
  np_comm* c = &np_comms[r->comm];
  np_window* w = &c->set[r->set].win[r->win];
  int n = 0;
  for (uint32_t i = 0; i < r->claimed && n < max; i++) {
    const np_event* ev = &w->slots[i];
    uint64_t hdr = __atomic_load_n(&ev->hdr, __ATOMIC_ACQUIRE);
    if ((uint32_t)hdr != r->epoch) continue;
    np_record* o = &out[n++];
    memset(o, 0, sizeof *o);
    o->type = (uint8_t)(hdr >> 32);
    o->abi = (uint8_t)(hdr >> 40);
    o->flags = (uint16_t)((hdr >> 48) | ev->sflags | (ev->done ? 0 : NP_F_OPEN));
    o->handle = np_handle(r->comm, r->set, r->win, i, r->epoch, (uint16_t)(hdr >> 48));
    o->parent = ev->parent;
    o->t_start = ev->t_start;
    o->t_stop = ev->t_stop;
    o->tid = ev->tid;
    o->rank = ev->rank;
    o->nstates = ev->nstates;
    switch (o->type) {
    case NP_T_COLL:
      o->seq = ev->u.coll.seq;
      o->count = ev->u.coll.count;
      o->parent_group = ev->u.coll.parent_group;
      o->func = ev->u.coll.func;
      o->dtype = ev->u.coll.dtype;
      o->algo = ev->u.coll.algo;
      o->proto = ev->u.coll.proto;
      o->root = ev->u.coll.root;
      o->nchannels = ev->u.coll.nchannels;
      o->nwarps = ev->u.coll.nwarps;
      break;
    case NP_T_P2P:
      o->seq = ev->u.p2p.seq;
      o->count = ev->u.p2p.count;
      o->parent_group = ev->u.p2p.parent_group;
      o->func = ev->u.p2p.func;
      o->dtype = ev->u.p2p.dtype;
      o->peer = ev->u.p2p.peer;
      o->nchannels = ev->u.p2p.nchannels;
      break;
    case NP_T_PROXY_OP:
      o->handle = ev->u.op.arena; /* NCCL's handle: its steps' parent, its late stop's target */
      np_export_progress(o, &ev->u.op.prog);
      o->pid = ev->u.op.pid;
      o->peer = ev->u.op.peer;
      o->nsteps = ev->u.op.nsteps;
      o->chunk = ev->u.op.chunk;
      o->channel = ev->u.op.channel;
      o->is_send = ev->u.op.is_send;
      break;
    case NP_T_PROXY_STEP:
      o->handle = ev->u.step.cell;
      memcpy(o->t_state, ev->u.step.t_state, sizeof o->t_state);
      o->bytes_aux = ev->u.step.trans_size;
      o->step = ev->u.step.step;
      o->npeerwait = ev->u.step.npeerwait;
      break;
    case NP_T_KERNEL_CH:
      o->ptimer_start = ev->u.kch.ptimer_start;
      o->ptimer_stop = ev->u.kch.ptimer_stop;
      o->t_aux = ev->u.kch.t_stop_state;
      o->channel = ev->u.kch.channel;
      break;
    case NP_T_NET_PLUGIN:
      o->net_id = ev->u.net.id;
      o->t_aux = ev->u.net.t_update;
      o->aux = ev->u.net.nupdates;
      memcpy(o->net_payload, ev->u.net.payload, sizeof o->net_payload);
      break;
    case NP_T_PROXY_CTRL:
      o->t_state[0] = ev->u.ctrl.t_first;
      o->t_state[1] = ev->u.ctrl.t_last;
      o->first_state = ev->u.ctrl.first;
      o->last_state = ev->u.ctrl.last;
      o->aux = ev->u.ctrl.appended;
      break;
    case NP_T_GROUP_API:
      o->t_state[0] = ev->u.gapi.t_start_api_stop;
      o->t_state[1] = ev->u.gapi.t_end_api_start;
      o->aux = ev->u.gapi.depth;
      o->graph = ev->u.gapi.graph;
      break;
    case NP_T_COLL_API:
    case NP_T_P2P_API:
      o->count = ev->u.api.count;
      o->stream = ev->u.api.stream;
      o->func = ev->u.api.func;
      o->dtype = ev->u.api.dtype;
      o->root = ev->u.api.root;
      o->graph = ev->u.api.graph;
      break;
    case NP_T_KERNEL_LAUNCH:
      o->stream = ev->u.launch.stream;
      break;
    case NP_T_CE_COLL:
      o->seq = ev->u.ce.seq;
      o->count = ev->u.ce.count;
      o->stream = ev->u.ce.stream;
      o->func = ev->u.ce.func;
      o->dtype = ev->u.ce.dtype;
      o->sync = ev->u.ce.sync;
      o->root = ev->u.ce.root;
      o->batch_size = ev->u.ce.batch_size;
      o->num_batches = ev->u.ce.num_batches;
      o->ce_seq = ev->u.ce.ce_seq;
      o->graph = ev->u.ce.intra_sync;
      break;
    case NP_T_CE_SYNC:
    case NP_T_CE_BATCH:
      o->bytes_aux = ev->u.ceaux.total_bytes;
      o->aux = ev->u.ceaux.n;
      o->graph = ev->u.ceaux.flag;
      break;
    case NP_T_LATE:
      o->late_target = ev->u.late.target;
      o->late_state = ev->u.late.state;
      o->late_arg0 = ev->u.late.arg0;
      o->late_arg1 = ev->u.late.arg1;
      o->late_has_args = ev->u.late.has_args;
      np_export_progress(o, &ev->u.late.prog); /* a ProxyOp's stop: what its cell gathered */
      break;
    }
  }
  __atomic_fetch_add(&np_counters[NP_C_EVENTS], (uint64_t)n, __ATOMIC_RELAXED);
  return n;
}

void np_release(const np_ready* r) {
  np_window* w = &np_comms[r->comm].set[r->set].win[r->win];
  w->scan_from = 0;
  __atomic_store_n(&w->claimed, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&w->se, NP_SE(np_next_epoch(r->epoch), NP_W_FREE), __ATOMIC_RELEASE);
  __atomic_fetch_add(&np_counters[NP_C_WINDOWS_SEALED], 1, __ATOMIC_RELAXED);
}

int np_comm_get(uint32_t i, np_comm_info* o) {
  if (i >= NP_MAX_COMMS || i >= __atomic_load_n(&np_comms_hwm, __ATOMIC_ACQUIRE)) return 0;
  np_comm* c = &np_comms[i];
  memset(o, 0, sizeof *o);
  o->read_tsc = np_ticks(); /* before the windows are looked at: see np_comm_info */
  uint32_t st = np_comm_state(c);
  if (st != NP_COMM_ACTIVE && st != NP_COMM_FINALIZING && st != NP_COMM_ABANDONED) {
    o->state = NP_COMM_UNUSED; /* being set up or torn down: nothing to read yet */
    return 1;
  }
  /* Once finalized, only windows opened before count: callbacks that still arrive (a stop, a
   * state: new events are refused) land in later windows and cannot hold finalize. */
  uint64_t fin = st == NP_COMM_ACTIVE ? 0 : __atomic_load_n(&c->fin_tsc, __ATOMIC_RELAXED);
  o->state = st == NP_COMM_ABANDONED ? NP_COMM_FINALIZING : (int32_t)st;
  o->incarnation = __atomic_load_n(&c->incarnation, __ATOMIC_RELAXED);
  if (__atomic_load_n(&c->learned, __ATOMIC_ACQUIRE) == 1) {
    o->comm_hash = c->comm_hash;
    o->rank = c->rank;
    memcpy(o->name, c->name, sizeof o->name);
  }
  o->dropped = __atomic_load_n(&c->dropped, __ATOMIC_RELAXED);
  for (int k = 0; k < NP_T_COUNT; k++) {
    o->dropped_type[k] = __atomic_load_n(&c->dropped_type[k], __ATOMIC_RELAXED);
    o->trace_dropped[k] = __atomic_load_n(&c->trace_dropped[k], __ATOMIC_RELAXED);
  }
  o->ncells = (int32_t)c->ncells;
  o->stale = __atomic_load_n(&c->stale, __ATOMIC_RELAXED);
  o->late = __atomic_load_n(&c->late, __ATOMIC_RELAXED);
  o->orphan_steps = __atomic_load_n(&c->orphan_steps, __ATOMIC_RELAXED);
  o->name[sizeof o->name - 1] = 0;
  o->nranks = c->nranks;
  o->nnodes = c->nnodes;
  o->abi = c->abi;
  o->nwin = (int32_t)c->set[NP_SET_OP].nwin;
  o->nslots = (int32_t)c->set[NP_SET_OP].nslots;
  for (uint32_t set = 0; set < 2; set++) {
    np_wset* ws = &c->set[set];
    for (uint32_t k = 0; k < ws->nwin; k++) {
      uint64_t se = __atomic_load_n(&ws->win[k].se, __ATOMIC_ACQUIRE);
      uint32_t st = NP_SE_STATE(se);
      if (st == NP_W_CLOSING || st == NP_W_SEALED ||
          (st == NP_W_FILLING && __atomic_load_n(&ws->win[k].claimed, __ATOMIC_RELAXED) > 0)) {
        uint64_t opened = __atomic_load_n(&ws->win[k].open_tsc, __ATOMIC_RELAXED);
        o->open_windows += fin == 0 || opened < fin;
        if (set == NP_SET_OP && opened < o->read_tsc) o->read_tsc = opened;
      }
    }
  }
  return 1;
}
