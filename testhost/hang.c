/*
 * hang.c — a job that stops, with the culprit planted: the ground truth for `ncclmerge hang`
 * and for the plugin's in-flight dumps (docs/hang.md).
 *
 * Every rank is its own process, started with the same options. Each runs --warmup complete
 * operations per communicator, then the operation with seq --seq, and stops in the state the
 * planted fault leaves it in, as NCCL's transport/net.cc would leave its ProxySteps:
 *
 *   absent  the culprit never starts the operation;
 *   gpu     the culprit's GPU stops: its kernel starts and never finishes, it neither fills send
 *           buffers (SendGPUWait) nor consumes what arrives (RecvGPUWait); with --scenario intra
 *           (no network, only KernelCh) its kernel is launched and never starts;
 *   link    the culprit's send to the next rank on --channel is handed to the network at step
 *           --step and never completes (SendWait); the receiver waits for it (RecvWait);
 *   mismatch (--scenario mismatch --what function|count|datatype|root) the culprit calls another
 *           collective (AllGather seq 0), or the same with a quarter of the count, another
 *           datatype or another root, where the others call the hung operation: every rank starts
 *           its operation and the ring stalls after STALL_STEPS steps (receivers post no more
 *           buffers), as a user's diverging program leaves it;
 *   order   (--scenario order) two communicators over every rank: the culprit calls AllGather on
 *           the second before AllReduce on the first, the others the other way round.
 *
 * With --replays the warmup operations and the hung one are replays of one CUDA graph, as NCCL
 * 2.26-2.30 plays them: the call is captured once (GroupApi and CollApi with graph_captured, the
 * launch, no Coll), and each replay starts a Group and a Coll whose parent is the captured
 * CollApi (enqueue.cc hostStreamPlanTask), all with seq --seq, the seq of the next eager
 * collective (src/plugin/profiler.cc ncclProfilerStartTaskEvents, the persistent test). The
 * dump marks them graph replays and numbers them (0 for the first): the hung one is --warmup.
 *
 * What every other rank shows follows from the fault: each process simulates the whole
 * communicator (the ring's data dependencies, NCCL_STEPS = 8 buffers per connection, a proxy
 * that posts receive buffers as the GPU frees them and hands a send to the network only when
 * the receiver has posted one) until nothing can move, then plays its own rank's events up to
 * that state through the plugin and stays alive without another event — a hung process. With
 * --dump-after S it calls the plugin's ncclprof_dump_inflight() S seconds after the hang.
 *
 * --truth FILE writes what this rank's dump must show (in the dump format, times as the host
 * read them) and the planted culprit; --plan DIR writes that for every rank of the job without
 * loading a plugin (thousands of ranks in one process, for tests of the analysis at scale).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "scenarios.h"
#include "world.h"

#define HMAX_CH 32
#define HSTEPS 8 /* NCCL_STEPS: buffers per connection */
#define CHUNK (128 * 1024)

enum { PAT_RING, PAT_CHAIN, PAT_INTRA };         /* ring AllReduce, chain Reduce, intra-node */
enum { F_NONE, F_ABSENT, F_GPU, F_LINK, F_MISMATCH, F_ORDER };
#define STALL_STEPS 2 /* a mismatched ring moves this many steps, then stalls */

typedef struct hstep {
  int step, state;
  int64_t since;
} hstep;

typedef struct hpop {
  int channel, peer, is_send, nsteps, done, nopen, stopped;
  /* ABI v1-v3: a send whose next step's data is ready and whose isend the receiver has not
   * taken records SendRemFifoWait on the ProxyOp (its step stays in SendGPUWait: no
   * SendPeerWait before 2.27): 1 + that step; 0: none. */
  int rem_fifo;
  hstep open[HSTEPS];
  int64_t start;
} hpop;

typedef struct hkch {
  int started, stopped;
  int64_t start;
  uint64_t gpu_start, gpu_stop;
} hkch;

/* One rank's part in one operation: what it starts and how far each piece gets. */
typedef struct hplan {
  int present, open, launched;
  /* The call as the rank made it (a mismatch's culprit makes another one). */
  const char *func, *dtype;
  long long seq, repeat; /* repeat: the n-th in a row with this seq (--replays) */
  int replay;            /* a CUDA graph's replay (--replays) */
  size_t count;
  int root;
  int npop;
  hpop pops[2 * HMAX_CH];
  hkch k[HMAX_CH];
  int64_t start;
} hplan;

typedef struct hspec {
  const char* name;
  uint64_t hash;
  int n, first; /* ranks, and the job rank of its rank 0 (members are contiguous) */
  int pattern, fault, culprit, link_ch, link_step;
  const char* func;
  const char* planted; /* the kind the truth names ("": none planted on this communicator) */
  const char* differs; /* a mismatch: what differs */
  long long seq, repeat; /* the hung operation's (repeat: --replays) */
  int replays;
  hplan* plans; /* per rank, the hung operation (NULL when fault is F_NONE) */
} hspec;

typedef struct hcfg {
  const char *lib, *truth, *plan, *scenario, *what;
  int rank, nranks, channels, kernel, abi, warmup, culprit, culprit2, channel, step, kind;
  int leaves; /* the absent culprit destroys its communicators after the warmup (left the loop early) */
  int replays; /* the warmups and the hung operation are replays of one CUDA graph: one seq */
  long long seq;
  double hold_s, dump_after_s;
  long long start_ns;
} hcfg;

static hspec specs[3];
static int nspecs;
/* The ABI NCCL drives the plugin at (--abi): before v4 (NCCL < 2.27) there is no SendPeerWait
 * (net.cc sendProxyProgress at v2.26.6-1 records the ProxyOp's SendRemFifoWait before each
 * isend try, and the step's SendWait only once the isend is taken). */
static int hang_abi = 6;

/* ------------------------------------------------------------------- the job's model */

static int steps_of(const hspec* s) { return s->pattern == PAT_CHAIN ? 16 : 2 * (s->n - 1); }
static int has_send(const hspec* s, int r) { return s->pattern == PAT_RING || (s->pattern == PAT_CHAIN && r < s->n - 1); }
static int has_recv(const hspec* s, int r) { return s->pattern == PAT_RING || (s->pattern == PAT_CHAIN && r > 0); }
static int present(const hspec* s, int r) {
  return s->fault == F_ORDER ? r == s->culprit : !(s->fault == F_ABSENT && r == s->culprit);
}
static int rooted(const char* func) { return !strcmp(func, "Broadcast") || !strcmp(func, "Reduce"); }
static int gpu_ok(const hspec* s, int r) { return present(s, r) && !(s->fault == F_GPU && r == s->culprit); }

/* The GPU's work on a channel, in steps: step g consumes receive *ri and produces send *si (-1:
 * none). A ring AllReduce sends step g from what arrived at step g-1 (step 0 is its own data);
 * in a chain each rank forwards step g once it arrived. */
static int gpu_steps(const hspec* s) { return steps_of(s) + (s->pattern == PAT_RING); }
static void gpu_io(const hspec* s, int r, int g, int* ri, int* si) {
  int T = steps_of(s);
  if (s->pattern == PAT_RING) {
    *ri = g - 1;
    *si = g < T ? g : -1;
    return;
  }
  *ri = has_recv(s, r) ? g : -1;
  *si = has_send(s, r) ? g : -1;
}

typedef struct simr {
  int prod, tx, done, arr, cons, g;
} simr;

/* Buffers the rank's proxy has posted for receiving: NCCL_STEPS ahead of what its GPU consumed. */
static int posted(const hspec* s, const simr* x, int r) {
  if (!present(s, r) || !has_recv(s, r)) return 0;
  int T = steps_of(s), lim = x[r].cons + HSTEPS < T ? x[r].cons + HSTEPS : T;
  return s->fault == F_MISMATCH && lim > STALL_STEPS ? STALL_STEPS : lim;
}

/* Runs one channel until nothing can move. */
static void simulate(const hspec* s, int ch, simr* x) {
  int n = s->n, G = gpu_steps(s);
  memset(x, 0, sizeof(simr) * (size_t)n);
  for (int changed = 1; changed;) {
    changed = 0;
    for (int r = 0; r < n; r++) {
      simr* m = &x[r];
      while (gpu_ok(s, r) && m->g < G) {
        int ri, si;
        gpu_io(s, r, m->g, &ri, &si);
        if ((ri >= 0 && m->arr <= ri) || (si >= 0 && m->prod >= m->done + HSTEPS)) break;
        if (ri >= 0) m->cons = ri + 1;
        if (si >= 0) m->prod = si + 1;
        m->g++;
        changed = 1;
      }
      if (!present(s, r) || !has_send(s, r)) continue;
      int nx = (r + 1) % n, lim = posted(s, x, nx);
      if (m->prod < lim) lim = m->prod;
      if (m->tx < lim) m->tx = lim, changed = 1;
      int broken = s->fault == F_LINK && r == s->culprit && ch == s->link_ch;
      int done = broken && m->tx > s->link_step ? s->link_step : m->tx;
      if (done != m->done) m->done = done, changed = 1;
      if (x[nx].arr < done) x[nx].arr = done, changed = 1;
    }
  }
}

/* The send ProxyOp's open steps: posted up to NCCL_STEPS past the done ones; handed to the
 * network (SendWait) below tx; the next one tried and refused for want of a receive buffer
 * (SendPeerWait) if its data is ready; the rest wait for the GPU. */
static void send_pop(const hspec* s, const simr* m, hpop* p) {
  int T = steps_of(s);
  p->nsteps = T;
  p->done = m->done;
  p->stopped = m->done == T;
  p->rem_fifo = 0;
  for (int k = m->done; k < T && k < m->done + HSTEPS; k++) {
    int st = k < m->tx ? NPABI_PROXY_STEP_SEND_WAIT : NPABI_PROXY_STEP_SEND_GPU_WAIT;
    if (k == m->tx && k < m->prod) { /* refused for want of a receive buffer */
      if (hang_abi >= 4) st = NPABI_PROXY_STEP_SEND_PEER_WAIT;
      else p->rem_fifo = k + 1;
    }
    p->open[p->nopen++] = (hstep){.step = k, .state = st};
  }
}

/* The receive ProxyOp's open steps: posted up to NCCL_STEPS past the consumed ones; those that
 * arrived wait for the GPU (RecvGPUWait, after a flush that completes at once), the rest for
 * the data (RecvWait). */
static void recv_pop(const hspec* s, const simr* m, hpop* p) {
  int T = steps_of(s);
  p->nsteps = T;
  p->done = m->cons;
  p->stopped = m->cons == T;
  for (int k = m->cons; k < T && k < m->cons + HSTEPS; k++)
    p->open[p->nopen++] = (hstep){.step = k, .state = k < m->arr ? NPABI_PROXY_STEP_RECV_GPU_WAIT : NPABI_PROXY_STEP_RECV_WAIT};
}

/* The call every rank makes (the culprit of a mismatch another, see plan_comm). */
static void default_call(const hspec* s, hplan* p, long long seq, long long repeat) {
  p->func = s->func;
  p->dtype = "ncclFloat32";
  p->seq = seq;
  p->repeat = repeat;
  p->replay = s->replays;
  p->count = (size_t)steps_of(s) * CHUNK / 4;
  p->root = s->pattern == PAT_CHAIN ? s->n - 1 : 0;
}

/* The mismatch's culprit calls something else at the same point. */
static void mismatch_call(const hspec* s, hplan* p) {
  if (!strcmp(s->differs, "function")) p->func = "AllGather", p->seq = 0, p->repeat = 0;
  else if (!strcmp(s->differs, "count")) p->count /= 4;
  else if (!strcmp(s->differs, "datatype")) p->dtype = "ncclFloat16";
  else p->root = 0; /* root: the others' root is the chain's last rank */
}

/* Every rank's part in the hung operation of a communicator. */
static void plan_comm(hspec* s, int channels, int kernel) {
  s->plans = calloc((size_t)s->n, sizeof(hplan));
  simr* x = calloc((size_t)s->n, sizeof(simr));
  if (!s->plans || !x) {
    fprintf(stderr, "testhost: out of memory\n");
    exit(2);
  }
  for (int r = 0; r < s->n; r++) {
    hplan* p = &s->plans[r];
    p->present = present(s, r);
    p->launched = p->present;
    default_call(s, p, s->seq, s->repeat);
    if (s->fault == F_MISMATCH && r == s->culprit) mismatch_call(s, p);
    /* Intra-node: the ring cannot finish without every rank, and a stopped GPU never starts
     * the kernel. With the network, the stopped GPU started it (and hangs in it). */
    for (int ch = 0; ch < channels; ch++)
      p->k[ch].started = kernel && p->present && !(s->pattern == PAT_INTRA && !gpu_ok(s, r));
    p->open = p->present;
  }
  if (s->pattern == PAT_INTRA) {
    free(x);
    return;
  }
  for (int ch = 0; ch < channels; ch++) {
    simulate(s, ch, x);
    for (int r = 0; r < s->n; r++) {
      hplan* p = &s->plans[r];
      if (!p->present) continue;
      p->k[ch].stopped = p->k[ch].started && gpu_ok(s, r) && x[r].g == gpu_steps(s);
      if (has_send(s, r)) {
        hpop* q = &p->pops[p->npop++];
        *q = (hpop){.channel = ch, .peer = (r + 1) % s->n, .is_send = 1};
        send_pop(s, &x[r], q);
      }
      if (has_recv(s, r)) {
        hpop* q = &p->pops[p->npop++];
        *q = (hpop){.channel = ch, .peer = (r + s->n - 1) % s->n, .is_send = 0};
        recv_pop(s, &x[r], q);
      }
    }
  }
  free(x);
  for (int r = 0; r < s->n; r++) { /* complete where nothing is left open */
    hplan* p = &s->plans[r];
    if (!p->present) continue;
    int open = 0;
    for (int i = 0; i < p->npop; i++) open |= !p->pops[i].stopped;
    for (int ch = 0; ch < channels; ch++) open |= p->k[ch].started && !p->k[ch].stopped;
    p->open = open;
  }
}

/* A completed operation: every step done, every channel stopped. */
static hplan complete_plan(const hspec* s, int r, int channels, int kernel, long long seq, long long repeat) {
  hplan p = {.present = 1, .launched = 1};
  default_call(s, &p, seq, repeat);
  int T = steps_of(s);
  for (int ch = 0; ch < channels; ch++) {
    p.k[ch].started = p.k[ch].stopped = kernel;
    if (s->pattern == PAT_INTRA) continue;
    if (has_send(s, r)) p.pops[p.npop++] = (hpop){.channel = ch, .peer = (r + 1) % s->n, .is_send = 1, .nsteps = T, .done = T, .stopped = 1};
    if (has_recv(s, r)) p.pops[p.npop++] = (hpop){.channel = ch, .peer = (r + s->n - 1) % s->n, .nsteps = T, .done = T, .stopped = 1};
  }
  return p;
}

/* The w-th of the warmup operations before the hung one: the seqs right before its seq, or with
 * --replays earlier replays of one CUDA graph, all with its seq (repeat w). */
static hplan warm_plan(const hspec* s, int r, int channels, int kernel, int w, int warmup) {
  if (s->replays) return complete_plan(s, r, channels, kernel, s->seq, w);
  return complete_plan(s, r, channels, kernel, s->seq - warmup + w, 0);
}

/* ------------------------------------------------------------------- scenarios */

static const char* const scenario_names[] = {"absent", "gpu", "link", "intra", "twocomms", "finished", "mismatch", "order"};

static void add_spec(const char* name, uint64_t hash, int n, int first, int pattern, int fault, int culprit, const hcfg* c, long long seq) {
  hspec* s = &specs[nspecs++];
  *s = (hspec){.name = name, .hash = hash, .n = n, .first = first, .pattern = pattern, .fault = fault,
               .culprit = culprit, .link_ch = c->channel, .link_step = c->step, .seq = seq,
               .repeat = c->replays ? c->warmup : 0, .replays = c->replays,
               .func = pattern == PAT_CHAIN ? "Reduce" : "AllReduce", .differs = c->what};
  static const char* const kinds[] = {"", "absent", "gpu", "link", "mismatch", ""};
  s->planted = kinds[fault];
}

static void build_job(const hcfg* c) {
  int n = c->nranks, h = n / 2;
  const char* sc = c->scenario;
  if (!strcmp(sc, "absent")) add_spec("world", 0x48A6000000000001ull, n, 0, PAT_RING, F_ABSENT, c->culprit, c, c->seq);
  else if (!strcmp(sc, "gpu")) add_spec("world", 0x48A6000000000002ull, n, 0, PAT_RING, F_GPU, c->culprit, c, c->seq);
  else if (!strcmp(sc, "link")) add_spec("world", 0x48A6000000000003ull, n, 0, PAT_RING, F_LINK, c->culprit, c, c->seq);
  else if (!strcmp(sc, "intra")) add_spec("world", 0x48A6000000000004ull, n, 0, PAT_INTRA, c->kind, c->culprit, c, c->seq);
  else if (!strcmp(sc, "finished")) add_spec("world", 0x48A6000000000006ull, n, 0, PAT_CHAIN, F_LINK, c->culprit, c, c->seq);
  else if (!strcmp(sc, "mismatch"))
    add_spec("world", 0x48A6000000000007ull, n, 0, strcmp(c->what, "root") ? PAT_RING : PAT_CHAIN, F_MISMATCH, c->culprit, c, c->seq);
  else if (!strcmp(sc, "order")) { /* the culprit is absent from the first because it is in the second */
    add_spec("world", 0x48A6000000000008ull, n, 0, PAT_RING, F_ABSENT, c->culprit, c, c->seq);
    specs[0].planted = "mismatch", specs[0].differs = "order";
    add_spec("second", 0x48A6000000000018ull, n, 0, PAT_RING, F_ORDER, c->culprit, c, c->seq / 2);
    specs[1].func = "AllGather";
  } else { /* twocomms: two halves hang at once, each its own way; the world communicator is idle */
    add_spec("world", 0x48A6000000000005ull, n, 0, PAT_RING, F_NONE, 0, c, c->seq / 2);
    add_spec("half0", 0x48A6000000000015ull, h, 0, PAT_RING, F_GPU, c->culprit % h, c, c->seq);
    add_spec("half1", 0x48A6000000000025ull, h, h, PAT_RING, F_LINK, c->culprit2 % h, c, c->seq + 1000);
  }
  for (int i = 0; i < nspecs; i++)
    if (specs[i].fault != F_NONE) plan_comm(&specs[i], c->channels, c->kernel);
}

/* ------------------------------------------------------------------- playing it through the plugin */

static int step_states(int final, int is_send, int* out) {
  static const int send_seq[] = {NPABI_PROXY_STEP_SEND_GPU_WAIT, NPABI_PROXY_STEP_SEND_PEER_WAIT, NPABI_PROXY_STEP_SEND_WAIT};
  static const int recv_seq[] = {NPABI_PROXY_STEP_RECV_WAIT, NPABI_PROXY_STEP_RECV_FLUSH_WAIT, NPABI_PROXY_STEP_RECV_GPU_WAIT};
  const int* seq = is_send ? send_seq : recv_seq;
  int n = 0;
  for (int i = 0; i < 3; i++) {
    out[n++] = seq[i];
    if (seq[i] == final) break;
  }
  return n;
}


/* One step through net.cc's states, up to `final` (-1: all of them, then the stop). */
static int64_t play_step(void* ctx, int rank, void* op, int step, int is_send, int final, size_t* cum) {
  host_plugin* p = &W.plugin;
  host_ev e = {.type = NPABI_PROXY_STEP, .parent = op, .rank = rank, .step = step};
  void* h = start_event(ctx, &e, 0);
  int states[3], n = step_states(final < 0 ? (is_send ? NPABI_PROXY_STEP_SEND_WAIT : NPABI_PROXY_STEP_RECV_GPU_WAIT) : final, is_send, states);
  for (int i = 0; i < n; i++) {
    int carries = states[i] == NPABI_PROXY_STEP_SEND_WAIT || states[i] == NPABI_PROXY_STEP_RECV_FLUSH_WAIT;
    host_step_state(p, op, h, states[i], carries ? CHUNK : 0, cum);
  }
  int64_t since = real_ns_i();
  if (final < 0) host_stop(p, h);
  return since;
}

/* Plays one operation of a communicator as NCCL emits it (docs/nccl-profiler-api.md §3.2): the
 * API calls, the launch, the Group and Coll, then what the proxy thread reports — each
 * channel's KernelCh, each ProxyOp with its steps — as far as the plan says, recording the
 * times for the truth. */
/* The call's API events: GroupApi, CollApi, the kernel launch (graph: captured into a CUDA
 * graph, graph_captured set). Returns the CollApi handle, the Coll's parentObj from v5 on. */
static void* play_api(hcomm* c, const hplan* pl, int graph) {
  host_plugin* p = &W.plugin;
  host_ev ga = {.type = NPABI_GROUP_API, .depth = 1, .graph = graph};
  void* gapi = start_event(c->ctx, &ga, 0);
  host_group_api_state(p, gapi, NPABI_GROUP_START_API_STOP);
  host_ev ca = {.type = NPABI_COLL_API, .parent = gapi, .func = pl->func, .count = pl->count, .dtype = pl->dtype,
                .root = pl->root, .stream = (void*)0x5000, .graph = graph};
  void* capi = start_event(c->ctx, &ca, 0);
  host_stop(p, capi);
  host_group_api_state(p, gapi, NPABI_GROUP_END_API_START);
  host_ev kl = {.type = NPABI_KERNEL_LAUNCH, .parent = gapi, .stream = (void*)0x5000};
  host_stop(p, start_event(c->ctx, &kl, 0));
  host_stop(p, gapi);
  return capi;
}

/* One operation: its API events, or with `captured` (a CUDA graph's replay) none, its Coll's
 * parent the captured CollApi; then its Group, Coll, channels and ProxyOps as far as planned. */
static void play_op(hcomm* c, const hspec* s, hplan* pl, int channels, void* captured) {
  host_plugin* p = &W.plugin;
  int r = c->rank;
  void* capi = captured ? captured : play_api(c, pl, 0);
  host_ev ge = {.type = NPABI_GROUP};
  void* grp = start_event(c->ctx, &ge, 0);
  host_ev ce = {.type = NPABI_COLL, .parent = capi, .parent_group = grp, .rank = r, .comm_name = c->name, .comm_hash = c->hash,
                .seq = (uint64_t)pl->seq, .func = pl->func, .count = pl->count, .dtype = pl->dtype, .algo = "RING",
                .proto = "SIMPLE", .root = pl->root, .nchannels = (uint8_t)channels, .nwarps = 16};
  pl->start = real_ns_i();
  void* coll = start_event(c->ctx, &ce, 0);
  host_stop(p, coll);
  host_stop(p, grp);
  for (int ch = 0; ch < channels; ch++) {
    hkch* k = &pl->k[ch];
    void* kch = NULL;
    if (k->started) {
      k->gpu_start = gpu_ns() - 500;
      k->start = real_ns_i();
      host_ev ke = {.type = NPABI_KERNEL_CH, .parent = coll, .channel = (uint8_t)ch, .ptimer = k->gpu_start};
      kch = start_event(c->ctx, &ke, 0);
    }
    for (int i = 0; i < pl->npop; i++) {
      hpop* q = &pl->pops[i];
      if (q->channel != ch) continue;
      host_ev pe = {.type = NPABI_PROXY_OP, .parent = coll, .rank = r, .pid = getpid(), .channel = (uint8_t)ch,
                    .peer = q->peer, .nsteps = q->nsteps, .chunk = CHUNK, .is_send = q->is_send};
      q->start = real_ns_i();
      void* op = start_event(c->ctx, &pe, 0);
      host_op_in_progress(p, op);
      size_t cum = 0;
      for (int st = 0; st < q->done; st++) play_step(c->ctx, r, op, st, q->is_send, -1, &cum);
      for (int j = 0; j < q->nopen; j++) q->open[j].since = play_step(c->ctx, r, op, q->open[j].step, q->is_send, q->open[j].state, &cum);
      if (q->rem_fifo) host_op_state(p, op, NPABI_PROXY_OP_SEND_REM_FIFO_WAIT, q->rem_fifo, cum);
      if (q->stopped) host_stop(p, op);
    }
    if (k->stopped) {
      k->gpu_stop = gpu_ns() - 200;
      host_kernel_stop(p, kch, k->gpu_stop);
      host_stop(p, kch);
    }
  }
}

/* ------------------------------------------------------------------- the truth */

/* A ProxyStep state's name, or a ProxyOp state's (v1-v3, NPABI_PROXY_OP_*: 0-7). */
static const char* state_name(int s) {
  static const char* op_states[] = {"SendPosted", "SendRemFifoWait", "SendTransmitted", "SendDone",
                                    "RecvPosted", "RecvReceived", "RecvTransmitted", "RecvDone"};
  if (s >= 0 && s < (int)(sizeof op_states / sizeof op_states[0])) return op_states[s];
  switch (s) {
  case NPABI_PROXY_STEP_SEND_GPU_WAIT: return "SendGPUWait";
  case NPABI_PROXY_STEP_SEND_PEER_WAIT: return "SendPeerWait";
  case NPABI_PROXY_STEP_SEND_WAIT: return "SendWait";
  case NPABI_PROXY_STEP_RECV_WAIT: return "RecvWait";
  case NPABI_PROXY_STEP_RECV_FLUSH_WAIT: return "RecvFlushWait";
  default: return "RecvGPUWait";
  }
}

static void write_planted(FILE* f) {
  fprintf(f, "\"planted\":[");
  int first = 1;
  for (int i = 0; i < nspecs; i++) {
    const hspec* s = &specs[i];
    if (!s->planted[0]) continue;
    fprintf(f, "%s{\"rank\":%d,\"kind\":\"%s\",\"comm\":\"0x%016llx\",\"comm_name\":\"%s\",\"seq\":%lld,\"repeat\":%lld,\"graph_replay\":%s,\"func\":\"%s\"",
            first ? "" : ",", s->culprit, s->planted, (unsigned long long)s->hash, s->name, s->seq, s->repeat,
            s->replays ? "true" : "false", s->func);
    if (!strcmp(s->planted, "mismatch")) fprintf(f, ",\"differs\":\"%s\"", s->differs);
    if (s->fault == F_LINK) fprintf(f, ",\"peer\":%d,\"channel\":%d,\"step\":%d", (s->culprit + 1) % s->n, s->link_ch, s->link_step);
    fprintf(f, "}");
    first = 0;
  }
  fprintf(f, "],\"finished\":[");
  first = 1;
  for (int i = 0; i < nspecs; i++)
    for (int r = 0; specs[i].plans && r < specs[i].n; r++)
      if (specs[i].plans[r].present && !specs[i].plans[r].open) {
        fprintf(f, "%s{\"comm\":\"0x%016llx\",\"rank\":%d}", first ? "" : ",", (unsigned long long)specs[i].hash, r);
        first = 0;
      }
  fprintf(f, "]");
}

/* The operation as the dump must show it (open ones only). */
/* What ranks must agree on (the dump's Call): the function, seq, count, datatype, a root. */
static void write_call(FILE* f, const hplan* pl) {
  fprintf(f, "\"kind\":\"coll\",\"func\":\"%s\",\"seq\":%lld,\"count\":%zu,\"datatype\":\"%s\"", pl->func, pl->seq, pl->count, pl->dtype);
  if (pl->repeat) fprintf(f, ",\"repeat\":%lld", pl->repeat);
  if (pl->replay) fprintf(f, ",\"graph_replay\":true");
  if (rooted(pl->func)) fprintf(f, ",\"root\":%d", pl->root);
}

/* The flight record: the operations the rank completed on the communicator, the last
 * FLIGHT_RECORD of them (internal/hang.FlightRecord), oldest first. */
#define FLIGHT_RECORD 16
static void write_recent(FILE* f, const hspec* s, const hcfg* c, int r, int done_hung) {
  int n = c->warmup + done_hung, first = n > FLIGHT_RECORD ? n - FLIGHT_RECORD : 0;
  fprintf(f, "\"recent_ops\":[");
  for (int i = first; i < n; i++) {
    hplan p = i < c->warmup ? warm_plan(s, r, 0, 0, i, c->warmup) : s->plans[r];
    fprintf(f, "%s{", i > first ? "," : "");
    write_call(f, &p);
    fprintf(f, "}");
  }
  fprintf(f, "],");
}

/* The ProxyOp's own latest state as NCCL before 2.27 leaves it (ABI v1-v3; -1: none, or a
 * later ABI): what play_op recorded last, each step state bringing its op state
 * (emit.c host_step_state), then a refused isend's SendRemFifoWait. */
static int v1_last_op_state(const hpop* q) {
  if (hang_abi >= 4 || q->stopped) return -1;
  if (q->rem_fifo) return NPABI_PROXY_OP_SEND_REM_FIFO_WAIT;
  int st = q->nopen ? q->open[q->nopen - 1].state
                    : q->done ? (q->is_send ? NPABI_PROXY_STEP_SEND_WAIT : NPABI_PROXY_STEP_RECV_GPU_WAIT) : -1;
  return st < 0 ? -1 : v1_op_state_for(st);
}

static void write_op(FILE* f, const hplan* pl, int channels, int abi) {
  fprintf(f, "{");
  write_call(f, pl);
  fprintf(f, ",\"algorithm\":\"RING\",\"protocol\":\"SIMPLE\",\"nchannels\":%d,\"start_unix_ns\":%lld,\"age_ns\":0,",
          channels, (long long)pl->start);
  if (abi >= 5) fprintf(f, "\"launched\":%s,", pl->launched ? "true" : "false");
  fprintf(f, "\"kernel_channels\":[");
  for (int ch = 0, n = 0; ch < channels; ch++) {
    const hkch* k = &pl->k[ch];
    if (!k->started || !(npabi_types_of(abi) & NPABI_KERNEL_CH)) continue; /* KernelCh: v3+ */
    fprintf(f, "%s{\"channel\":%d,\"started\":true,\"stopped\":%s,\"start_unix_ns\":%lld,\"gpu_start_ns\":%llu,\"gpu_stop_ns\":%llu}",
            n++ ? "," : "", ch, k->stopped ? "true" : "false", (long long)k->start,
            (unsigned long long)(abi >= 4 ? k->gpu_start : 0), (unsigned long long)(abi >= 4 ? k->gpu_stop : 0));
  }
  fprintf(f, "],\"proxy_ops\":[");
  for (int i = 0; i < pl->npop; i++) {
    const hpop* q = &pl->pops[i];
    fprintf(f, "%s{\"channel\":%d,\"peer\":%d,\"direction\":\"%s\",\"nsteps\":%d,\"steps_done\":%d,\"start_unix_ns\":%lld,\"stopped\":%s,",
            i ? "," : "", q->channel, q->peer, q->is_send ? "send" : "recv", q->nsteps, q->done, (long long)q->start,
            q->stopped ? "true" : "false");
    int op_state = v1_last_op_state(q);
    if (op_state >= 0) fprintf(f, "\"state\":\"%s\",", state_name(op_state));
    fprintf(f, "\"open_steps\":[");
    for (int j = 0; j < q->nopen; j++)
      fprintf(f, "%s{\"step\":%d,\"state\":\"%s\",\"since_unix_ns\":%lld}", j ? "," : "", q->open[j].step,
              state_name(q->open[j].state), (long long)q->open[j].since);
    fprintf(f, "]}");
  }
  fprintf(f, "]}");
}

/* What the job rank's dump must show, and the planted culprit. Written to a temporary name and
 * renamed, so a test that polls for it never reads half of it. */
static void write_truth(const char* path, const hcfg* c, int job_rank, const char* host, int pid, int mask,
                        int64_t hung_ns) {
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE* f = fopen(tmp, "w");
  if (!f) {
    perror(tmp);
    exit(1);
  }
  int has_open = 0;
  fprintf(f, "{\"scenario\":\"%s\",\"job_rank\":%d,\"hung_unix_ns\":%lld,", c->scenario, job_rank, (long long)hung_ns);
  write_planted(f);
  fprintf(f, ",\"dump\":{\"ncclprof_hang_version\":1,\"host\":\"%s\",\"pid\":%d,\"plugin_version\":\"\",\"simulated\":true,"
             "\"reason\":\"timeout\",\"timeout_s\":0,\"event_mask\":%d,\"written_unix_ns\":0,\"first_detected_unix_ns\":0,"
             "\"dumps_written\":0,\"health\":{\"partial\":false,\"events_dropped\":0,\"comms_not_tracked\":0,\"ops_not_listed\":0},\"comms\":[",
          host, pid, mask);
  int nc = 0;
  for (int i = 0; i < nspecs; i++) {
    const hspec* s = &specs[i];
    int r = job_rank - s->first;
    if (r < 0 || r >= s->n) continue;
    const hplan* pl = s->plans ? &s->plans[r] : NULL;
    int done_hung = pl && pl->present && !pl->open;
    long long ops = c->warmup + done_hung, last = s->seq - 1 + done_hung, last_rep = 0;
    if (s->replays) last = s->seq, last_rep = ops > 0 ? ops - 1 : 0; /* every one carried s->seq */
    fprintf(f, "%s{\"comm_hash\":\"0x%016llx\",\"name\":\"%s\",\"rank\":%d,\"nranks\":%d,\"nnodes\":%d,\"abi_version\":%d,"
               "\"completed\":[{\"func\":\"%s\",\"ops\":%lld,\"replays\":%lld,\"last_seq\":%lld,\"last_repeat\":%lld,\"last_graph_replay\":%s}],"
               "\"p2p_completed\":[],\"ops_completed\":%lld,",
            /* v1-v3's init gives neither name nor sizes (nranks, nnodes 0: unknown) */
            nc++ ? "," : "", (unsigned long long)s->hash, c->abi >= 4 ? s->name : "", r, c->abi >= 4 ? s->n : 0,
            c->abi < 4 ? 0 : s->pattern == PAT_INTRA ? 1 : (s->n + 7) / 8, c->abi,
            s->func, ops, s->replays ? ops : 0, last, last_rep, s->replays ? "true" : "false", ops);
    write_recent(f, s, c, r, done_hung);
    fprintf(f, "\"open_ops\":[");
    if (pl && pl->present && pl->open) {
      write_op(f, pl, c->channels, c->abi);
      has_open = 1;
    }
    fprintf(f, "]}");
  }
  fprintf(f, "]},\"has_open\":%s}\n", has_open ? "true" : "false");
  if (fclose(f) || rename(tmp, path)) {
    perror(path);
    exit(1);
  }
}

/* --plan: every rank's truth, with times laid out from --start-ns, no plugin. */
static int plan_all(const hcfg* c) {
  int64_t t0 = c->start_ns;
  for (int i = 0; i < nspecs; i++)
    for (int r = 0; specs[i].plans && r < specs[i].n; r++) {
      hplan* pl = &specs[i].plans[r];
      pl->start = t0 + 1000000 + (int64_t)r * 1000;
      for (int ch = 0; ch < c->channels; ch++) {
        pl->k[ch].start = pl->start + 20000;
        pl->k[ch].gpu_start = (uint64_t)(pl->k[ch].start + 1234567);
        if (pl->k[ch].stopped) pl->k[ch].gpu_stop = pl->k[ch].gpu_start + 5000000;
      }
      for (int j = 0; j < pl->npop; j++) {
        hpop* q = &pl->pops[j];
        q->start = pl->start + 10000;
        for (int k = 0; k < q->nopen; k++) q->open[k].since = q->start + 1000 * (q->open[k].step + 1);
      }
    }
  int mask = 0xF1F | (c->kernel ? NPABI_KERNEL_CH : 0);
  for (int r = 0; r < c->nranks; r++) {
    char path[4096], host[64];
    snprintf(path, sizeof path, "%s/truth-%d.json", c->plan, r);
    snprintf(host, sizeof host, "node%03d", r / 8);
    write_truth(path, c, r, host, 40000 + r, mask, t0 + 2000000);
  }
  return 0;
}

/* ------------------------------------------------------------------- a live rank */

static int live(const hcfg* c) {
  world_init(c->lib, c->abi, c->rank, c->nranks, 0, 1);
  hcomm* comms[3] = {0};
  for (int i = 0; i < nspecs; i++) {
    hspec* s = &specs[i];
    int r = c->rank - s->first;
    if (r >= 0 && r < s->n) comms[i] = world_comm(s->name, s->hash, s->n, r, s->pattern == PAT_INTRA ? 1 : (s->n + 7) / 8);
  }
  void* captured[3] = {0}; /* --replays: each communicator's call, captured once */
  for (int i = 0; i < nspecs; i++) {
    if (!comms[i]) continue;
    if (c->replays) {
      hplan call = warm_plan(&specs[i], comms[i]->rank, 0, 0, 0, c->warmup);
      captured[i] = play_api(comms[i], &call, 1);
    }
    for (int w = 0; w < c->warmup; w++) {
      hplan done = warm_plan(&specs[i], comms[i]->rank, c->channels, c->kernel, w, c->warmup);
      play_op(comms[i], &specs[i], &done, c->channels, captured[i]);
    }
  }
  int left = 0;
  for (int i = 0; i < nspecs; i++) {
    hspec* s = &specs[i];
    if (!comms[i] || s->fault == F_NONE) continue;
    if (s->plans[comms[i]->rank].present) play_op(comms[i], s, &s->plans[comms[i]->rank], c->channels, captured[i]);
    else left |= c->leaves;
  }
  if (left) world_finalize_all(); /* the plugin writes each communicator's summary */
  int64_t hung = real_ns_i();
  if (c->truth) {
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    write_truth(c->truth, c, c->rank, host, (int)getpid(), W.plugin.mask, hung);
  }
  /* Hung: no event from now on, as long as --hold-s; the plugin's own threads may dump. */
  int (*dump)(void) = (int (*)(void))dlsym(W.plugin.lib, "ncclprof_dump_inflight");
  if (c->dump_after_s > 0 && !dump) fprintf(stderr, "testhost: the plugin has no ncclprof_dump_inflight; --dump-after ignored\n");
  for (int dumped = 0; real_ns_i() - hung < (int64_t)(c->hold_s * 1e9);) {
    struct timespec ts = {0, 20000000};
    nanosleep(&ts, NULL);
    if (!dumped && dump && c->dump_after_s > 0 && real_ns_i() - hung >= (int64_t)(c->dump_after_s * 1e9)) {
      int rc = dump();
      if (rc != 0) fprintf(stderr, "testhost: ncclprof_dump_inflight() returned %d\n", rc);
      dumped = 1;
    }
  }
  return 0; /* a hung process never finalizes its communicators */
}

/* ------------------------------------------------------------------- options */

static void hang_usage(void) {
  fprintf(stderr,
          "usage: ncclprof-testhost (--lib PLUGIN.so --rank R | --plan DIR) --nranks N --scenario S [options] hang\n"
          "  --scenario absent|gpu|link|intra|twocomms|finished|mismatch|order   --kind absent|gpu (intra; gpu)\n"
          "  --what function|count|datatype|root (mismatch: what the culprit calls differently; function)\n"
          "  --culprit C (1)  --culprit2 C (twocomms' second half, 2)  --channel L (link, 1)  --step K (link, 3)\n"
          "  --seq S (2398459)  --warmup W (3)  --channels CH (4)  --no-kernel  --abi N (6)\n"
          "  --culprit-leaves (absent: the culprit destroys its communicators instead, as a rank that left early)\n"
          "  --replays (the warmups and the hung operation are replays of one CUDA graph: all with seq S)\n"
          "  --truth FILE  --hold-s S (600)  --dump-after-s S (0: never)  --start-ns NS (plan: times from here)\n"
          "  every rank of a job is started with the same options but --rank\n");
  exit(2);
}

static hcfg parse(int argc, char** argv) {
  hcfg c = {.nranks = 8, .channels = 4, .kernel = 1, .abi = 6, .warmup = 3, .culprit = 1, .culprit2 = 2, .channel = 1,
            .step = 3, .kind = F_GPU, .seq = 2398459, .hold_s = 600, .scenario = "absent", .what = "function"};
  const char* kind = "gpu";
  const struct {
    const char* flag;
    char type; /* s, i, l (long long), d */
    void* dst;
  } opts[] = {{"--lib", 's', &c.lib}, {"--truth", 's', &c.truth}, {"--plan", 's', &c.plan}, {"--scenario", 's', &c.scenario}, {"--what", 's', &c.what},
              {"--kind", 's', &kind}, {"--rank", 'i', &c.rank}, {"--nranks", 'i', &c.nranks}, {"--channels", 'i', &c.channels},
              {"--abi", 'i', &c.abi}, {"--warmup", 'i', &c.warmup}, {"--culprit", 'i', &c.culprit}, {"--culprit2", 'i', &c.culprit2},
              {"--channel", 'i', &c.channel}, {"--step", 'i', &c.step}, {"--seq", 'l', &c.seq}, {"--start-ns", 'l', &c.start_ns},
              {"--hold-s", 'd', &c.hold_s}, {"--dump-after-s", 'd', &c.dump_after_s}};
  for (int i = 1; i < argc - 1; i++) {
    if (!strcmp(argv[i], "--no-kernel")) {
      c.kernel = 0;
      continue;
    }
    if (!strcmp(argv[i], "--culprit-leaves")) {
      c.leaves = 1;
      continue;
    }
    if (!strcmp(argv[i], "--replays")) {
      c.replays = 1;
      continue;
    }
    size_t k = 0;
    while (k < sizeof opts / sizeof opts[0] && strcmp(argv[i], opts[k].flag)) k++;
    if (k == sizeof opts / sizeof opts[0] || i + 1 >= argc - 1) hang_usage();
    const char* v = argv[++i];
    switch (opts[k].type) {
    case 's': *(const char**)opts[k].dst = v; break;
    case 'i': *(int*)opts[k].dst = atoi(v); break;
    case 'l': *(long long*)opts[k].dst = strtoll(v, NULL, 0); break;
    default: *(double*)opts[k].dst = atof(v);
    }
  }
  c.kind = !strcmp(kind, "absent") ? F_ABSENT : F_GPU;
  int known = 0;
  for (size_t i = 0; i < sizeof scenario_names / sizeof scenario_names[0]; i++) known |= !strcmp(c.scenario, scenario_names[i]);
  int twocomms = !strcmp(c.scenario, "twocomms");
  int what_ok = !strcmp(c.what, "function") || !strcmp(c.what, "count") || !strcmp(c.what, "datatype") || !strcmp(c.what, "root");
  if (!known || (!c.lib && !c.plan) || c.nranks < (twocomms ? 6 : 3) || c.nranks > 8192 || (twocomms && c.nranks % 2) ||
      c.rank < 0 || c.rank >= c.nranks || c.culprit < 0 || c.culprit >= c.nranks || c.channels < 1 || c.channels > HMAX_CH ||
      c.channel < 0 || c.channel >= c.channels || c.step < 0 || c.warmup < 0 || c.seq < c.warmup || c.abi < 1 || c.abi > 6 ||
      (!c.kernel && !strcmp(c.scenario, "intra")) || !what_ok)
    hang_usage();
  if (!c.start_ns) c.start_ns = real_ns_i();
  return c;
}

int scenario_hang(int argc, char** argv) {
  hcfg c = parse(argc, argv);
  if (!strcmp(c.scenario, "intra") && !(npabi_types_of(c.abi) & NPABI_KERNEL_CH)) {
    fprintf(stderr, "testhost: --scenario intra needs KernelCh, which NCCL reports from 2.26 (ABI v3) on: "
                    "before it an intra-node hang leaves no evidence; give --abi 3 or later\n");
    return 2;
  }
  hang_abi = c.abi;
  build_job(&c);
  return c.plan ? plan_all(&c) : live(&c);
}
