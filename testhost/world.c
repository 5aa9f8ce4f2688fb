#define _GNU_SOURCE
#include "world.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "era.h"

world W;

double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

double real_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* Integer ns: a double cannot hold a Unix-epoch nanosecond count (its spacing there is 256 ns). */
int64_t real_ns_i(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

uint64_t gpu_ns(void) {
  int64_t r = real_ns_i();
  return (uint64_t)(r + (int64_t)W.gpu_offset_ns +
                    (int64_t)((double)(r - W.t_base_real) * W.gpu_drift_ppm * 1e-6));
}

uint64_t gpu_reading(uint64_t ns) {
  static uint64_t readings;
  if (W.bad_every <= 0 || __atomic_add_fetch(&readings, 1, __ATOMIC_RELAXED) % (uint64_t)W.bad_every)
    return ns;
  __atomic_fetch_add(&W.bad_planted, 1, __ATOMIC_RELAXED);
  return W.bad_ptimer;
}

void spin_until(double t) {
  while (now_ns() < t) {
  }
}

void wait_until(double t) {
  double left = t - now_ns();
  if (left > 200e3) { /* asleep until 100 µs before, at any distance */
    long ns = (long)(left - 100e3);
    struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
    nanosleep(&ts, NULL);
  }
  spin_until(t);
}

/* xorshift64*, one stream per thread: the first call on a thread derives its state from the
 * seed and the order in which threads first asked, so runs with a seed repeat. */
uint64_t rnd(void) {
  static __thread uint64_t x;
  static uint64_t threads;
  if (x == 0) x = (W.rng + 0x632BE59BD9B4E019ull * __atomic_add_fetch(&threads, 1, __ATOMIC_RELAXED)) | 1;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  return x * 0x2545F4914F6CDD1Dull;
}

double rnd01(void) { return (double)(rnd() >> 11) / 9007199254740992.0; }

/* A rank that never arrives (it died) fails the others rather than hanging them. */
#define BARRIER_TIMEOUT_S 30

void job_barrier_wait(const uint32_t* count, int n) {
  double give_up = now_ns() + BARRIER_TIMEOUT_S * 1e9;
  while (__atomic_load_n(count, __ATOMIC_ACQUIRE) < (uint32_t)n) {
    if (now_ns() > give_up) {
      fprintf(stderr, "testhost: only %u of %d ranks arrived within %d s (did a rank fail?)\n",
              __atomic_load_n(count, __ATOMIC_ACQUIRE), n, BARRIER_TIMEOUT_S);
      exit(1);
    }
    struct timespec nap = {0, 20000}; /* the other ranks' processes share the CPUs: never spin */
    nanosleep(&nap, NULL);
  }
}

uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

void peer_model(int peer, double* latency_ns, double* bw_bps) {
  int dist = ((peer - W.rank) % W.nranks + W.nranks) % W.nranks;
  if (dist == 0) dist = 1;
  *latency_ns = 2000.0 + 1500.0 * dist;
  *bw_bps = 24e9 / dist;
}

void world_init(const char* lib, int abi, int rank, int nranks, int realtime, uint64_t seed) {
  memset(&W, 0, sizeof W);
  host_load(&W.plugin, lib, abi);
  W.rank = rank;
  W.nranks = nranks;
  W.realtime = realtime;
  W.gpu_offset_ns = 1234567.0; /* the GPU timer runs 1.234567 ms ahead of CLOCK_REALTIME */
  W.gpu_drift_ppm = 20.0;
  W.t_base_real = real_ns_i();
  W.rng = (seed + 1) * 0x9E3779B97F4A7C15ull | 1; /* xorshift state must not be 0 */
  pthread_mutex_init(&W.qmu, NULL);
  pthread_mutex_init(&W.smu, NULL);
  pthread_cond_init(&W.qcv, NULL);
  pthread_cond_init(&W.qdone, NULL);
}

hcomm* world_comm(const char* name, uint64_t hash, int nranks, int rank, int nnodes) {
  if (W.ncomms >= MAX_COMMS) {
    fprintf(stderr, "testhost: too many communicators\n");
    exit(2);
  }
  hcomm* c = &W.comms[W.ncomms++];
  memset(c, 0, sizeof *c);
  snprintf(c->name, sizeof c->name, "%s", name);
  c->hash = hash;
  c->rank = rank;
  c->nranks = nranks;
  c->nnodes = nnodes;
  pthread_mutex_init(&c->mu, NULL);
  for (int p = 0; p < nranks && p < MAX_PEERS; p++)
    peer_model(p, &c->pairs[p].latency_ns, &c->pairs[p].bandwidth_bps);
  c->ctx = host_init(&W.plugin, c->name, hash, nnodes, nranks, rank);
  return c;
}

void world_finalize_all(void) {
  for (int i = 0; i < W.ncomms; i++) {
    double t0 = now_ns();
    host_finalize(&W.plugin, W.comms[i].ctx);
    double took = now_ns() - t0;
    if (took > W.finalize_max_ns) W.finalize_max_ns = took;
    W.comms[i].ctx = NULL;
  }
}

int truth_op_add(hcomm* c, const char* func, const char* algo, const char* proto, int nch,
                 uint64_t bytes) {
  pthread_mutex_lock(&c->mu);
  int i;
  for (i = 0; i < c->nops; i++) {
    truth_op* o = &c->ops[i];
    if (!strcmp(o->func, func) && !strcmp(o->algo, algo) && !strcmp(o->proto, proto) &&
        o->nchannels == nch)
      break;
  }
  if (i == c->nops) {
    if (c->nops == MAX_OPKEYS) {
      pthread_mutex_unlock(&c->mu);
      return -1;
    }
    c->nops++;
    c->ops[i] = (truth_op){.func = func, .algo = algo, .proto = proto, .nchannels = nch};
  }
  c->ops[i].count++;
  c->ops[i].bytes += bytes;
  pthread_mutex_unlock(&c->mu);
  return i;
}

/* The plugin's completion lies between min_ns and ns: the host reads its clock on both sides of
 * the start and of the last stop, so a preemption there widens the bracket instead of making the
 * truth wrong. */
void truth_completion(hcomm* c, int op, double ns, double min_ns) {
  pthread_mutex_lock(&c->mu);
  c->ops[op].completion_ns_sum += ns;
  c->ops[op].completion_min_ns_sum += min_ns;
  c->ops[op].completion_n++;
  pthread_mutex_unlock(&c->mu);
}

void* start_event(void* ctx, const host_ev* e, int sample) {
  int64_t before = sample ? real_ns_i() : 0;
  void* h = host_start(&W.plugin, ctx, e);
  int64_t after = sample ? real_ns_i() : 0;
  if (((uintptr_t)h & 1) == 0) return h; /* not recorded (NULL or a sentinel) */
  __atomic_fetch_add(&W.type_counts[__builtin_ctzll(e->type) & 15], 1, __ATOMIC_RELAXED);
  if (sample) {
    pthread_mutex_lock(&W.smu);
    if (W.nsamples < 4096) W.samples[W.nsamples++] = (struct clock_sample){(uint64_t)(uintptr_t)h, before, after};
    pthread_mutex_unlock(&W.smu);
  }
  return h;
}

/* ------------------------------------------------------------------- proxy thread */

typedef struct inflight {
  void* h;
  double deadline;
  size_t size;
} inflight;

static void step_begin(const job* j, void* op, int idx, size_t* cum, inflight* f) {
  host_plugin* p = &W.plugin;
  host_ev e = {.type = NPABI_PROXY_STEP, .parent = op, .rank = j->comm->rank, .step = idx};
  /* recvProxyProgress starts a receive step before the checks that may postpone its irecv to
   * a later pass (registered buffer not ready, irecv without a request), which starts it again
   * into the same handle slot: only the last handle is given states and stopped. */
  if (!j->is_send)
    for (int r = 0; r < j->restarts; r++) (void)start_event(j->ctx, &e, 0);
  f->h = start_event(j->ctx, &e, 0);
  f->size = j->sizes[idx];
  double lat, bw;
  peer_model(j->peer, &lat, &bw);
  if (j->is_send) {
    host_step_state(p, op, f->h, NPABI_PROXY_STEP_SEND_GPU_WAIT, 0, cum);
    for (int k = (int)(rnd() % 3); k > 0; k--) /* isend may not be accepted at once */
      host_step_state(p, op, f->h, NPABI_PROXY_STEP_SEND_PEER_WAIT, 0, cum);
    host_step_state(p, op, f->h, NPABI_PROXY_STEP_SEND_WAIT, f->size, cum);
    /* The clock is read after the plugin stamped SendWait, so the interval it measures is never
     * shorter than the model: scheduling noise only adds, which MIN mode discards. */
    f->deadline = now_ns() + lat + (double)f->size / bw * 1e9 + j->slow_ns;
  } else {
    host_step_state(p, op, f->h, NPABI_PROXY_STEP_RECV_WAIT, 0, cum);
    f->deadline = now_ns() + lat + (double)f->size / bw * 1e9 + j->slow_ns;
  }
}

/* The truth of one network transfer of j that the plugin was told about (a recorded step of
 * this process: another process's PXN steps are that process's truth). */
void job_truth_transfer(const job* j, size_t size) {
  hcomm* c = j->comm;
  if (j->pid != getpid()) return;
  pthread_mutex_lock(&c->mu);
  truth_pair* tp = &c->pairs[j->peer % MAX_PEERS];
  if (j->is_send) {
    tp->sent_bytes += size;
    tp->send_transfers++;
    c->ch_transfers[j->channel % MAX_CHANNELS]++;
    c->ch_bytes[j->channel % MAX_CHANNELS] += size;
    if (j->channel + 1 > c->used_channels) c->used_channels = j->channel + 1;
  } else {
    tp->recv_bytes += size;
    tp->recv_transfers++;
  }
  pthread_mutex_unlock(&c->mu);
}

static void step_end(const job* j, void* op, inflight* f, size_t* cum) {
  host_plugin* p = &W.plugin;
  if (!j->is_send) {
    host_step_state(p, op, f->h, NPABI_PROXY_STEP_RECV_FLUSH_WAIT, f->size, cum);
    host_step_state(p, op, f->h, NPABI_PROXY_STEP_RECV_GPU_WAIT, 0, cum);
  }
  host_stop(p, f->h);
  if (f->h) job_truth_transfer(j, f->size);
}

void* job_kernel_begin(const job* j) {
  if (j->gpu_delay_ns > 0) { /* a GPU behind its CPU: sleep (ms, on a shared machine), no spin */
    double at = j->t_op_start + j->gpu_delay_ns;
    struct timespec ts = {.tv_sec = (time_t)(at / 1e9), .tv_nsec = (long)(at - (double)(time_t)(at / 1e9) * 1e9)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
  }
  if (!j->kernel) return NULL;
  /* The proxy sees the GPU's start counter some polling delay after the GPU wrote it. */
  host_ev k = {.type = NPABI_KERNEL_CH, .parent = j->parent, .channel = (uint8_t)j->channel,
               .ptimer = gpu_reading(gpu_ns() - 300 - rnd() % 700)};
  return start_event(j->ctx, &k, 0);
}

void* job_op_begin(const job* j, int nsteps, int chunk) {
  host_ev e = {.type = NPABI_PROXY_OP, .parent = j->parent, .rank = j->comm->rank, .pid = j->pid,
               .channel = (uint8_t)j->channel, .peer = j->peer, .nsteps = nsteps,
               .chunk = chunk, .is_send = j->is_send};
  return j->nsteps > 0 ? start_event(j->ctx, &e, rnd() % 8 == 0) : NULL;
}

void job_kernel_end(void* kch) {
  if (!kch) return;
  host_kernel_stop(&W.plugin, kch, gpu_reading(gpu_ns() - 200 - rnd() % 500));
  host_stop(&W.plugin, kch);
}

void job_finish(const job* j, void* op, void* kch) {
  double before = now_ns();
  if (op) host_stop(&W.plugin, op);
  job_kernel_end(kch);
  if (j->last_of_op && j->truth_op >= 0)
    truth_completion(j->comm, j->truth_op, now_ns() - j->t_op_start, before - j->t_op_started);
}

/* A started ProxyOp's progress, as net.cc runs it: InProgress (unless its first pass already
 * recorded it), up to 8 steps in flight, stop. */
static void run_started(const job* j, void* op, void* kch, int first_pass_done) {
  host_plugin* p = &W.plugin;
  if (!first_pass_done) host_op_in_progress(p, op);
  if (j->arrived) job_barrier_wait(j->arrived, j->comm->nranks); /* a ring waits for its peers */
  size_t cum = 0;
  inflight fl[8];
  int nfl = 0, next = 0, done = 0;
  while (done < j->nsteps) {
    while (nfl < 8 && next < j->nsteps) step_begin(j, op, next++, &cum, &fl[nfl++]);
    /* NCCL's net.cc completes one op's steps in order (sub->done / sub->received advance a
     * slot at a time), so the oldest in flight finishes first. */
    if (W.realtime || j->slow_ns > 0) spin_until(fl[0].deadline);
    step_end(j, op, &fl[0], &cum);
    memmove(&fl[0], &fl[1], (size_t)(--nfl) * sizeof fl[0]);
    done++;
  }
  job_finish(j, op, kch);
}

void run_job(const job* j) {
  if (W.plugin.nccl) {
    era_run_job(j);
    return;
  }
  void* kch = job_kernel_begin(j);
  void* op = job_op_begin(j, j->nsteps, (int)j->sizes[0]);
  if (j->no_stop) { /* proxy.cc started it; the transport's progress never reports on it */
    job_kernel_end(kch);
    return;
  }
  run_started(j, op, kch, 0);
}

/* NCCL's queue of ProxyOps behind their connection (proxy.cc ProxyAppend, `nextPeer`;
 * docs/nccl-patterns.md section 3): a receive ProxyOp is started when the proxy thread appends
 * it and progressed only when the ones before it in its queue are done, W.queue_depth entries
 * later; sends run at once, so later operations' ProxyOps stop while earlier receives wait with
 * no state and no step. The queue is the channel's: a ring collective's receive connection is
 * its channel's one, and P2P receives over the network share one queue per channel whatever
 * their peer (net.cc recvConnect, `recv.proxyAppend + channelId`). The head's args is in NCCL's
 * active list, so its first pass (InProgress, for every sub of it: the receives of one plan,
 * appended to one args as subs) comes as soon as it is the head: when its predecessor is
 * removed, or at its append onto an idle queue. */
typedef struct queued {
  job j;
  void *op, *kch;
  int passed; /* its first pass came */
} queued;
static queued* conn_q[MAX_CHANNELS];
static int conn_head[MAX_CHANNELS], conn_n[MAX_CHANNELS];

static queued* queue_at(int ch, int k) { return &conn_q[ch][(conn_head[ch] + k) % (W.queue_depth + 1)]; }

/* Under --nccl the release decides when a ProxyOp starts (era_starts_at_append): NCCL before
 * 2.27 started it at net.cc's first pass of it, so a receive waiting in the queue has no record
 * at all until it is the head. */
static int queue_starts_at_append(void) { return !W.plugin.nccl || era_starts_at_append(); }

static void* queue_op_begin(const job* j) {
  return W.plugin.nccl ? era_op_begin(j) : job_op_begin(j, j->nsteps, (int)j->sizes[0]);
}

/* The head args' first pass: the head and whatever follows it from the same plan. */
static void queue_first_pass(int ch) {
  uint64_t plan = queue_at(ch, 0)->j.plan;
  for (int k = 0; k < conn_n[ch] && queue_at(ch, k)->j.plan == plan; k++) {
    queued* q = queue_at(ch, k);
    if (!q->passed) {
      if (queue_starts_at_append()) host_op_in_progress(&W.plugin, q->op);
      else q->op = queue_op_begin(&q->j); /* before 2.27 its first pass starts it */
    }
    q->passed = 1;
  }
}

static void queue_pop(int ch) {
  queued* q = queue_at(ch, 0);
  conn_head[ch] = (conn_head[ch] + 1) % (W.queue_depth + 1);
  conn_n[ch]--;
  if (W.plugin.nccl) era_progress(&q->j, q->op, q->kch, 1);
  else run_started(&q->j, q->op, q->kch, 1);
  if (conn_n[ch] > 0) queue_first_pass(ch);
}

static void run_queued(const job* j) {
  if (j->is_send || j->no_stop) {
    run_job(j);
    return;
  }
  int ch = j->channel % MAX_CHANNELS;
  if (!conn_q[ch]) conn_q[ch] = calloc((size_t)W.queue_depth + 1, sizeof(queued));
  queued* q = queue_at(ch, conn_n[ch]++);
  q->j = *j;
  q->kch = job_kernel_begin(j);
  q->op = queue_starts_at_append() ? queue_op_begin(j) : NULL;
  q->passed = 0;
  queue_first_pass(ch); /* it is the head, or one of the head's plan */
  if (conn_n[ch] > W.queue_depth) queue_pop(ch);
}

/* At the proxy's stop: what waits on every connection, oldest first. */
static void queue_flush(void) {
  for (int ch = 0; ch < MAX_CHANNELS; ch++)
    while (conn_n[ch] > 0) queue_pop(ch);
}

static void* proxy_main(void* arg) {
  (void)arg;
  pthread_mutex_lock(&W.qmu);
  for (;;) {
    while (W.qhead == W.qtail && !W.stop) pthread_cond_wait(&W.qcv, &W.qmu);
    if (W.qhead == W.qtail && W.stop) {
      pthread_mutex_unlock(&W.qmu);
      queue_flush();
      pthread_mutex_lock(&W.qmu);
      break;
    }
    job j = W.queue[W.qhead % 256];
    W.qbusy = 1;
    W.qhead++;
    pthread_cond_broadcast(&W.qdone);
    pthread_mutex_unlock(&W.qmu);
    if (W.queue_depth > 0) run_queued(&j);
    else run_job(&j);
    pthread_mutex_lock(&W.qmu);
    W.qbusy = 0;
    W.jobs_done++;
    pthread_cond_broadcast(&W.qdone);
  }
  pthread_mutex_unlock(&W.qmu);
  return NULL;
}

void proxy_start(void) { pthread_create(&W.proxy, NULL, proxy_main, NULL); }

void proxy_submit(const job* j) {
  pthread_mutex_lock(&W.qmu);
  while (W.qtail - W.qhead >= 64) pthread_cond_wait(&W.qdone, &W.qmu); /* NCCL's bounded FIFO */
  W.queue[W.qtail++ % 256] = *j;
  pthread_cond_signal(&W.qcv);
  pthread_mutex_unlock(&W.qmu);
}

void proxy_drain(void) {
  pthread_mutex_lock(&W.qmu);
  while (W.qhead != W.qtail || W.qbusy) pthread_cond_wait(&W.qdone, &W.qmu);
  pthread_mutex_unlock(&W.qmu);
}

void proxy_stop(void) {
  proxy_drain();
  pthread_mutex_lock(&W.qmu);
  W.stop = 1;
  pthread_cond_broadcast(&W.qcv);
  pthread_mutex_unlock(&W.qmu);
  pthread_join(W.proxy, NULL);
  W.stop = 0;
}

/* ------------------------------------------------------------------- truth */

static int thread_count(void) {
  DIR* d = opendir("/proc/self/task");
  int n = 0;
  if (!d) return -1;
  for (struct dirent* e; (e = readdir(d));)
    n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

void truth_write(FILE* f, const char* scenario) {
  fprintf(f, "{\"scenario\":\"%s\",\"abi\":%d,\"pid\":%d,\"rank\":%d,\"nranks\":%d,", scenario,
          W.plugin.abi, (int)getpid(), W.rank, W.nranks);
  fprintf(f, "\"gpu_offset_ns\":%.1f,\"gpu_drift_ppm\":%.3f,\"gpu_base_real_ns\":\"%lld\",\"mask\":%d,",
          W.gpu_offset_ns, W.gpu_drift_ppm, (long long)W.t_base_real, W.plugin.mask);
  fprintf(f, "\"bad_ptimers\":%llu,", (unsigned long long)W.bad_planted);
  fprintf(f, "\"unwritten_handles\":%llu,\"threads\":%d,\"finalize_max_ns\":%.0f,\"type_counts\":[",
          (unsigned long long)host_unwritten_handles, thread_count(), W.finalize_max_ns);
  for (int i = 0; i < 15; i++) fprintf(f, "%s%llu", i ? "," : "", (unsigned long long)W.type_counts[i]);
  fprintf(f, "],\"clock_samples\":[");
  for (int i = 0; i < W.nsamples; i++)
    fprintf(f, "%s[\"0x%016llx\",%lld,%lld]", i ? "," : "", (unsigned long long)W.samples[i].handle,
            (long long)W.samples[i].before, (long long)W.samples[i].after);
  fprintf(f, "],\"comms\":[");
  for (int i = 0; i < W.ncomms; i++) {
    hcomm* c = &W.comms[i];
    fprintf(f, "%s{\"name\":\"%s\",\"hash\":\"0x%016llx\",\"rank\":%d,\"nranks\":%d,\"ops\":[",
            i ? "," : "", c->name, (unsigned long long)c->hash, c->rank, c->nranks);
    for (int k = 0; k < c->nops; k++) {
      truth_op* o = &c->ops[k];
      fprintf(f,
              "%s{\"func\":\"%s\",\"algo\":\"%s\",\"proto\":\"%s\",\"nchannels\":%d,"
              "\"count\":%llu,\"bytes\":%llu,\"completion_ns_mean\":%.1f,\"completion_ns_mean_min\":%.1f}",
              k ? "," : "", o->func, o->algo, o->proto, o->nchannels,
              (unsigned long long)o->count, (unsigned long long)o->bytes,
              o->completion_n ? o->completion_ns_sum / (double)o->completion_n : 0.0,
              o->completion_n ? o->completion_min_ns_sum / (double)o->completion_n : 0.0);
    }
    fprintf(f, "],\"pairs\":[");
    int first = 1;
    for (int p = 0; p < MAX_PEERS && p < c->nranks; p++) {
      truth_pair* t = &c->pairs[p];
      if (!t->send_transfers && !t->recv_transfers) continue;
      fprintf(f,
              "%s{\"peer\":%d,\"latency_ns\":%.1f,\"bandwidth_Bps\":%.1f,\"sent_bytes\":%llu,"
              "\"send_transfers\":%llu,\"recv_bytes\":%llu,\"recv_transfers\":%llu}",
              first ? "" : ",", p, t->latency_ns, t->bandwidth_bps,
              (unsigned long long)t->sent_bytes, (unsigned long long)t->send_transfers,
              (unsigned long long)t->recv_bytes, (unsigned long long)t->recv_transfers);
      first = 0;
    }
    fprintf(f, "],\"channels\":[");
    for (int ch = 0; ch < c->used_channels; ch++)
      fprintf(f, "%s{\"channel\":%d,\"transfers\":%llu,\"bytes\":%llu}", ch ? "," : "", ch,
              (unsigned long long)c->ch_transfers[ch], (unsigned long long)c->ch_bytes[ch]);
    fprintf(f, "]}");
  }
  /* The plugin's process-wide counters (NP_C_* order): what the sanitizer builds, which write
   * no summaries, did. */
  int (*counters)(uint64_t*, int) =
      W.plugin.lib ? (int (*)(uint64_t*, int))dlsym(W.plugin.lib, "ncclprof_counters") : NULL;
  fprintf(f, "],\"plugin_counters\":[");
  uint64_t cv[64];
  int nc = counters ? counters(cv, 64) : 0;
  for (int i = 0; i < nc && i < 64; i++) fprintf(f, "%s%llu", i ? "," : "", (unsigned long long)cv[i]);
  fprintf(f, "]}\n");
}
