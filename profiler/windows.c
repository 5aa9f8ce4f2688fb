/*
 * windows.c — window rotation, late records and the states of window events. One section of the C
 * library's core; state.h declares what the sections share.
 */
#define _GNU_SOURCE

#include "state.h"
#include "hot.h"

/* Moves a communicator's set from window `from` to a FREE one. If none is free the current
 * window keeps filling (and drops once full) until the drainer gives one back. When fewer than
 * two windows are left free, the drainer is woken rather than left to its next poll: one
 * sem_post per window filled, and only when NCCL is outrunning the poll. */
void np_rotate(np_comm* c, uint32_t set, uint32_t from) {
  np_wset* ws = &c->set[set];
  if (__atomic_exchange_n(&ws->rotating, 1, __ATOMIC_ACQUIRE)) return;
  int wake = 0;
  np_window* w = &ws->win[from];
  uint64_t se = __atomic_load_n(&w->se, __ATOMIC_ACQUIRE);
  if (__atomic_load_n(&ws->cur, __ATOMIC_ACQUIRE) == from && NP_SE_STATE(se) == NP_W_FILLING) {
    for (uint32_t k = 1; k < ws->nwin; k++) {
      uint32_t n = (from + k) % ws->nwin;
      np_window* nw = &ws->win[n];
      uint64_t nse = __atomic_load_n(&nw->se, __ATOMIC_ACQUIRE);
      if (NP_SE_STATE(nse) != NP_W_FREE) continue;
      uint64_t now = np_ticks();
      __atomic_store_n(&nw->open_tsc, now, __ATOMIC_RELAXED);
      __atomic_store_n(&nw->se, NP_SE(NP_SE_EPOCH(nse), NP_W_FILLING), __ATOMIC_RELEASE);
      __atomic_store_n(&w->close_tsc, now, __ATOMIC_RELAXED);
      __atomic_store_n(&w->se, NP_SE(NP_SE_EPOCH(se), NP_W_CLOSING), __ATOMIC_RELEASE);
      __atomic_store_n(&ws->cur, n, __ATOMIC_RELEASE);
      wake = np_free_windows(ws) < 2;
      break;
    }
  }
  __atomic_store_n(&ws->rotating, 0, __ATOMIC_RELEASE);
  if (wake) np_kick();
}

void np_late(np_comm* c, np_thread* t, uint64_t h, uint32_t state, uint64_t a0, uint64_t a1,
             int has_args, const np_cell* opfin) {
  uint32_t wi, s, ep;
  /* A late record goes to its event's set: a ProxyOp's (a cell handle) is an operation. */
  uint32_t set = np_h_is_cell(h) ? NP_SET_OP : np_h_set(h);
  np_event* ev = np_claim(c, t, set, &wi, &s, &ep);
  if (ev == NULL) { /* a lost stop: its operation ends up incomplete (or its trace slice) */
    if (set == NP_SET_OP) np_count_drop(c, NP_T_LATE);
    else np_count_trace_drop(c, NP_T_LATE);
    return;
  }
  ev->parent = 0;
  ev->t_start = np_ticks();
  ev->t_stop = ev->t_start;
  ev->tid = t->tid;
  ev->rank = np_comm_rank(c);
  ev->nstates = 0;
  ev->sflags = 0;
  memset(&ev->u, 0, sizeof ev->u);
  ev->u.late.target = h;
  ev->u.late.state = state;
  ev->u.late.arg0 = a0;
  ev->u.late.arg1 = a1;
  ev->u.late.has_args = (uint8_t)has_args;
  if (opfin) ev->u.late.prog = opfin->u.op.prog;
  ev->done = 1;
  __atomic_store_n(&ev->hdr, (uint64_t)ep | ((uint64_t)NP_T_LATE << 32), __ATOMIC_RELEASE);
  __atomic_fetch_add(&c->late, 1, __ATOMIC_RELAXED);
  np_count(NP_C_LATE);
}

/* Copies the network plugin's descriptor (IB queue pair or socket) behind netPlugin.data. */
static void np_copy_net_payload(np_event* ev, const void* data) {
  if (data == NULL) return;
  uint32_t kind = (uint32_t)ev->u.net.id & NPABI_NET_TYPE_MASK;
  size_t n = kind == NPABI_NET_TYPE_IB ? sizeof(npabi_net_ib_v1_t)
           : kind == NPABI_NET_TYPE_SOCK ? sizeof(npabi_net_sock_v1_t) : 0;
  if (n) memcpy(ev->u.net.payload, data, n);
}

void np_apply_state(np_event* ev, int state, uint64_t a0, uint64_t a1, int has_args,
                    uint64_t now) {
  (void)a1;
  ev->nstates++;
  switch (np_ev_type(ev)) {
  case NP_T_PROXY_CTRL:
    if (state < NPABI_PROXY_CTRL_IDLE || state > NPABI_PROXY_CTRL_APPEND_END) break;
    if (ev->u.ctrl.t_first == 0) {
      ev->u.ctrl.t_first = now;
      ev->u.ctrl.first = (uint8_t)state;
    }
    ev->u.ctrl.t_last = now;
    ev->u.ctrl.last = (uint8_t)state;
    if (state == NPABI_PROXY_CTRL_APPEND_END && has_args) ev->u.ctrl.appended = (int32_t)a0;
    return;
  case NP_T_KERNEL_CH:
    if (state != NPABI_KERNEL_CH_STOP) break;
    if (has_args) ev->u.kch.ptimer_stop = a0;
    ev->u.kch.t_stop_state = now;
    return;
  case NP_T_NET_PLUGIN:
    if (state != NPABI_NET_PLUGIN_UPDATE) break;
    if (ev->u.net.t_update == 0) ev->u.net.t_update = now;
    ev->u.net.nupdates++;
    if (has_args) np_copy_net_payload(ev, (const void*)(uintptr_t)a0);
    return;
  case NP_T_GROUP_API:
    if (state == NPABI_GROUP_START_API_STOP) {
      ev->u.gapi.t_start_api_stop = now;
      return;
    }
    if (state == NPABI_GROUP_END_API_START) {
      ev->u.gapi.t_end_api_start = now;
      return;
    }
    break;
  }
  np_count(NP_C_UNKNOWN_STATE);
}

void np_net_start_payload(np_event* ev, const void* data) { np_copy_net_payload(ev, data); }
