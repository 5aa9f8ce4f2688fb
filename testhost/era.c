/*
 * era.c — one network operation as NCCL's transport/net.cc records it, release by release
 * (docs/nccl-call-sites.md, "The proxy thread"). The proxy progresses an op one action per
 * pass, in net.cc's priority: post a step to the GPU while fewer than NCCL_STEPS are in
 * flight, else send what the GPU filled (receive: take what arrived, flush it to the GPU),
 * else complete the oldest. So a release's order of records comes out as NCCL's:
 * post 0..7, send 0..7, done 0, post 8, send 8, done 1, …
 *
 * What differs by release:
 *   2.23 (v1)       one ProxyStep per raw step: sliceSteps per transfer, numbered raw; the
 *                   ProxyOp's nSteps and chunkSize raw; SendTransmitted recorded before the transfer's bytes
 *                   are added to transSize (net.cc sendProxyProgress at v2.23.4-1).
 *   2.24–2.26 (v2, v3) one ProxyStep per transfer; every ProxyOp state (Posted, RemFifoWait,
 *                   Transmitted, Done; receive Posted, Received, Transmitted, Done) with
 *                   steps = DIVUP(raw, sliceSteps) and the cumulative transSize, bytes added
 *                   first.
 *   2.27+ (v4–v6)   no ProxyOp states but InProgress; SendPeerWait before every isend try
 *                   (the last one succeeds); transSize on SendWait and RecvFlushWait.
 */
#define _GNU_SOURCE
#include "era.h"

#include <string.h>
#include <unistd.h>

int nccl_release(const char* s) {
  static const struct {
    const char* name;
    int release;
  } known[] = {{"2.23", 223}, {"2.24", 224}, {"2.25", 225}, {"2.26", 226}, {"2.27", 227},
               {"2.28", 228}, {"2.29", 229}, {"2.30", 230}};
  for (size_t i = 0; s && i < sizeof known / sizeof known[0]; i++)
    if (!strcmp(s, known[i].name)) return known[i].release;
  return 0;
}

int nccl_abi(int r) {
  if (r <= 223) return 1;
  if (r <= 225) return 2;
  if (r == 226) return 3;
  if (r == 227) return 4;
  if (r == 228) return 5;
  return 6;
}

int nccl_mask_wants(int r, int m, uint64_t t) {
  /* 2.26–2.27 (plugin/profiler.cc ncclProfilerStartTaskEvents): a NetPlugin bit does not
   * start P2p events yet. */
  if ((r == 226 || r == 227) && t == NPABI_P2P)
    return m & (NPABI_P2P | NPABI_PROXY_OP | NPABI_PROXY_STEP | NPABI_KERNEL_CH);
  if (r < 223 || r > 225) return npabi_mask_wants(m, t);
  /* 2.23–2.25 (misc/profiler.cc): the Group needs a Coll, P2p, ProxyOp or ProxyStep bit; Coll
   * and P2p events both need the Coll, ProxyOp or ProxyStep bit (P2p's own bit starts the Group
   * alone); a ProxyOp needs ProxyOp or ProxyStep; nothing else brings an ancestor. */
  const int proxy = NPABI_PROXY_OP | NPABI_PROXY_STEP;
  switch (t) {
  case NPABI_GROUP: return m & (NPABI_COLL | NPABI_P2P | proxy);
  case NPABI_COLL:
  case NPABI_P2P: return m & (NPABI_COLL | proxy);
  case NPABI_PROXY_OP: return m & proxy;
  default: return m & (int)t;
  }
}

/* One network transfer: its step events (2.23: sliceSteps of them), its size, when the
 * modelled network finishes it. */
typedef struct xfer {
  void* h[8];
  int n;
  size_t size;
  double deadline;
} xfer;

typedef struct era_op {
  const job* j;
  host_plugin* p;
  void* op;
  int per;       /* step events per transfer */
  int op_states; /* v1–v3: ProxyOp states with steps and cumulative bytes */
  size_t cum;
  xfer x[8];
} era_op;

static void steps_state(era_op* o, xfer* x, int state, size_t trans) {
  for (int i = 0; i < x->n; i++) host_step_only(o->p, x->h[i], state, trans);
}

static void op_state(era_op* o, int state, int transfers) {
  if (o->op_states) host_op_state(o->p, o->op, state, transfers * o->per, o->cum);
}

static double deadline(const job* j, size_t size) {
  double lat, bw;
  peer_model(j->peer, &lat, &bw);
  return now_ns() + lat + (double)size / bw * 1e9 + j->slow_ns;
}

/* Posting step k: its events start (raw numbers on 2.23), the GPU is told of the buffer. */
static void post(era_op* o, int k) {
  const job* j = o->j;
  xfer* x = &o->x[k % 8];
  x->n = o->per;
  x->size = j->sizes[k];
  /* A receive's pass starts the step's events (2.23: its sliceSteps raw ones, in order) before
   * the checks that may postpone its irecv; each later pass starts them again into the same
   * handle slots (restarts), and only the last pass's are given states and stopped. */
  for (int r = j->is_send ? 0 : j->restarts; r >= 0; r--)
    for (int i = 0; i < x->n; i++) {
      host_ev e = {.type = NPABI_PROXY_STEP, .parent = o->op, .rank = j->comm->rank,
                   .step = k * o->per + i};
      x->h[i] = start_event(j->ctx, &e, 0);
    }
  op_state(o, j->is_send ? NPABI_PROXY_OP_SEND_POSTED : NPABI_PROXY_OP_RECV_POSTED, k + 1);
  steps_state(o, x, j->is_send ? NPABI_PROXY_STEP_SEND_GPU_WAIT : NPABI_PROXY_STEP_RECV_WAIT, 0);
  if (!j->is_send) x->deadline = deadline(j, x->size);
}

/* Sending step k to the network. */
static void transmit(era_op* o, int k) {
  xfer* x = &o->x[k % 8];
  op_state(o, NPABI_PROXY_OP_SEND_REM_FIFO_WAIT, k + 1);
  if (o->p->nccl >= 227)
    for (int tries = 1 + (int)(rnd() % 3); tries > 0; tries--) /* isend may refuse: tried again */
      steps_state(o, x, NPABI_PROXY_STEP_SEND_PEER_WAIT, 0);
  if (o->p->nccl != 223) o->cum += x->size; /* 2.23 adds the bytes after recording */
  op_state(o, NPABI_PROXY_OP_SEND_TRANSMITTED, k + 1);
  steps_state(o, x, NPABI_PROXY_STEP_SEND_WAIT, x->size);
  if (o->p->nccl == 223) o->cum += x->size;
  /* Read after the plugin stamped SendWait: noise only adds to the model (world.c). */
  x->deadline = deadline(o->j, x->size);
}

/* Receiving step k: the bytes arrived, then were flushed to the GPU. */
static void receive(era_op* o, int k) {
  xfer* x = &o->x[k % 8];
  o->cum += x->size;
  op_state(o, NPABI_PROXY_OP_RECV_RECEIVED, k + 1);
  steps_state(o, x, NPABI_PROXY_STEP_RECV_FLUSH_WAIT, x->size);
  op_state(o, NPABI_PROXY_OP_RECV_TRANSMITTED, k + 1);
  steps_state(o, x, NPABI_PROXY_STEP_RECV_GPU_WAIT, 0);
}

static void complete(era_op* o, int k) {
  xfer* x = &o->x[k % 8];
  for (int i = 0; i < x->n; i++) host_stop(o->p, x->h[i]);
  op_state(o, o->j->is_send ? NPABI_PROXY_OP_SEND_DONE : NPABI_PROXY_OP_RECV_DONE, k + 1);
  if (x->h[0]) job_truth_transfer(o->j, x->size);
}

static void wait_for(const job* j, const xfer* x) {
  if (W.realtime || j->slow_ns > 0) spin_until(x->deadline);
}

/* Step events per network transfer: 2.23 starts one per raw step (sliceSteps of them). */
static int era_per(const job* j) { return W.plugin.nccl == 223 && j->slice_steps > 1 ? j->slice_steps : 1; }

void* era_op_begin(const job* j) {
  /* 2.23 counts raw steps and their size (args->chunkSize); later releases whole transfers
   * (DIVUP(nsteps, sliceSteps), chunkSize * sliceSteps). */
  int per = era_per(j);
  return job_op_begin(j, j->nsteps * per, (int)j->sizes[0] / per);
}

void era_progress(const job* j, void* op, void* kch, int first_pass_done) {
  host_plugin* p = &W.plugin;
  era_op o = {.j = j, .p = p, .op = op, .per = era_per(j), .op_states = p->abi < 4};
  if (!first_pass_done) host_op_in_progress(p, o.op); /* v4+: the first progress pass */
  if (j->arrived) job_barrier_wait(j->arrived, j->comm->nranks);
  int depth = 8 / o.per; /* NCCL_STEPS raw steps in flight */
  int posted = 0, sent = 0, done = 0, n = j->nsteps;
  while (done < n) {
    if (posted < n && posted < done + depth) post(&o, posted++);
    else if (sent < posted) {
      if (j->is_send) transmit(&o, sent);
      else {
        wait_for(j, &o.x[sent % 8]);
        receive(&o, sent);
      }
      sent++;
    } else {
      if (j->is_send) wait_for(j, &o.x[done % 8]);
      complete(&o, done++);
    }
  }
  job_finish(j, o.op, kch);
}

int era_starts_at_append(void) { return W.plugin.nccl >= 227; }

void era_run_job(const job* j) {
  void* kch = job_kernel_begin(j);
  if (j->no_stop) {
    /* A ProxyOp no transport progress reports on (CollNet's): 2.27+ proxy.cc starts it and
     * nothing stops it; before, only net.cc's progress started ProxyOps, so it had none. */
    if (era_starts_at_append()) era_op_begin(j);
    job_kernel_end(kch);
    return;
  }
  era_progress(j, era_op_begin(j), kch, 0);
}
