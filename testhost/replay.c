/*
 * replay.c — plays back a call log of real NCCL (the recorder's, chained behind ncclprof on a
 * GPU machine: tools/nccl/record/) into a plugin, as NCCL made those calls: the same calls in
 * the same order, each on a thread of its own for each thread NCCL used, at the recorded pace.
 *
 *   ncclprof-testhost --lib PLUGIN --log calls-0.log[.gz] [--recorded-pid PID] [--speed S] replay
 *
 * The log is what the recorder received (calllog.c's format, with `@<ns>` times): its contexts
 * C<k> and handles R<n> become whatever the plugin under test returns. A ProxyOp's pid equal to
 * --recorded-pid (the recording process) becomes this process's, so the plugin sees its own
 * operations as its own and another process's (PXN) as foreign. --speed 0 plays as fast as the
 * threads can; S > 0 divides the recorded gaps by S (default 1: real time).
 *
 * The order is total: one line at a time, handed from thread to thread like a baton, so every
 * parent exists before its child exactly as it did in NCCL.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "emit.h"
#include "scenarios.h"

typedef struct rline {
  char* text;   /* the line after its time: "start ctx=C0 h=R1 type=..." */
  int64_t t;    /* recorded CLOCK_MONOTONIC ns */
  int thr;      /* index of its replay thread */
  int next_own; /* the next line of the same thread, -1 at its end */
} rline;

typedef struct rthread {
  pthread_t th;
  long tid; /* NCCL's thread id, as recorded */
  int first;
  pthread_cond_t turn;
} rthread;

static struct {
  const npabi_profiler_v6_t* t;
  rline* lines;
  int nlines;
  rthread* thr;
  int nthr;
  pthread_mutex_t mu;
  int next; /* the line whose turn it is */
  void** handles; /* R<n> -> the plugin's handle */
  size_t nhandles;
  void* ctxs[4096]; /* C<k> -> the plugin's context */
  long recorded_pid;
  double speed;
  int64_t t0_log, t0_now;
  unsigned long long calls, errors;
} R;

/* Strings NCCL passes are its own constants, which a plugin may keep: each distinct one is
 * made once and never freed. */
static const char* intern(const char* s, size_t n) {
  static char* pool[1024];
  static int npool;
  if (n == 6 && !memcmp(s, "(null)", 6)) return NULL;
  for (int i = 0; i < npool; i++)
    if (strlen(pool[i]) == n && !memcmp(pool[i], s, n)) return pool[i];
  if (npool == 1024) return "(too many strings)";
  pool[npool] = strndup(s, n);
  return pool[npool++];
}

/* The value of `key=` in a line (its length in *n), or NULL. */
static const char* field(const char* line, const char* key, size_t* n) {
  size_t k = strlen(key);
  for (const char* p = line; (p = strstr(p, key)) != NULL; p += k) {
    if ((p == line || p[-1] == ' ') && p[k] == '=') {
      p += k + 1;
      *n = strcspn(p, " \n");
      return p;
    }
  }
  return NULL;
}
static long long num(const char* line, const char* key) {
  size_t n;
  const char* v = field(line, key, &n);
  return v ? strtoll(v, NULL, 0) : 0;
}
static unsigned long long unum(const char* line, const char* key) {
  size_t n;
  const char* v = field(line, key, &n);
  return v ? strtoull(v, NULL, 0) : 0;
}
static const char* str(const char* line, const char* key) {
  size_t n;
  const char* v = field(line, key, &n);
  return v ? intern(v, n) : NULL;
}

/* A reference as the recorder wrote it: 0, R<n>, C<k> or another pointer in hex. */
static void* ref(const char* line, const char* key) {
  size_t n;
  const char* v = field(line, key, &n);
  if (!v || (n == 1 && v[0] == '0')) return NULL;
  unsigned long long k = strtoull(v + 1, NULL, 10);
  if (v[0] == 'R') return k < R.nhandles ? R.handles[k] : NULL;
  if (v[0] == 'C') return k < 4096 ? R.ctxs[k] : NULL;
  return (void*)(uintptr_t)strtoull(v, NULL, 16);
}

static void descr(const char* l, npabi_descr_v6_t* d) {
  memset(d, 0, sizeof *d);
  d->type = unum(l, "type");
  d->parentObj = ref(l, "parent");
  d->rank = (int)num(l, "rank");
  switch (d->type) {
  case NPABI_GROUP_API:
    d->groupApi.graphCaptured = num(l, "graph"), d->groupApi.groupDepth = (int)num(l, "depth");
    break;
  case NPABI_COLL_API:
    d->collApi.func = str(l, "func"), d->collApi.count = unum(l, "count");
    d->collApi.datatype = str(l, "dtype"), d->collApi.root = (int)num(l, "root");
    d->collApi.stream = ref(l, "stream"), d->collApi.graphCaptured = num(l, "graph");
    break;
  case NPABI_P2P_API:
    d->p2pApi.func = str(l, "func"), d->p2pApi.count = unum(l, "count");
    d->p2pApi.datatype = str(l, "dtype"), d->p2pApi.stream = ref(l, "stream");
    d->p2pApi.graphCaptured = num(l, "graph");
    break;
  case NPABI_KERNEL_LAUNCH: d->kernelLaunch.stream = ref(l, "stream"); break;
  case NPABI_COLL:
    d->coll.seqNumber = unum(l, "seq"), d->coll.func = str(l, "func");
    d->coll.sendBuff = ref(l, "send"), d->coll.recvBuff = ref(l, "recv");
    d->coll.count = unum(l, "count"), d->coll.root = (int)num(l, "root");
    d->coll.datatype = str(l, "dtype"), d->coll.nChannels = (uint8_t)num(l, "nch");
    d->coll.nWarps = (uint8_t)num(l, "nwarps"), d->coll.algo = str(l, "algo");
    d->coll.proto = str(l, "proto"), d->coll.parentGroup = ref(l, "pgroup");
    break;
  case NPABI_P2P:
    d->p2p.func = str(l, "func"), d->p2p.buff = ref(l, "buff"), d->p2p.datatype = str(l, "dtype");
    d->p2p.count = unum(l, "count"), d->p2p.peer = (int)num(l, "peer");
    d->p2p.nChannels = (uint8_t)num(l, "nch"), d->p2p.parentGroup = ref(l, "pgroup");
    break;
  case NPABI_PROXY_OP: {
    long pid = (long)num(l, "pid");
    d->proxyOp.pid = pid == R.recorded_pid ? getpid() : (pid_t)pid;
    d->proxyOp.channelId = (uint8_t)num(l, "ch"), d->proxyOp.peer = (int)num(l, "peer");
    d->proxyOp.nSteps = (int)num(l, "nsteps"), d->proxyOp.chunkSize = (int)num(l, "chunk");
    d->proxyOp.isSend = (int)num(l, "send");
    break;
  }
  case NPABI_PROXY_STEP: d->proxyStep.step = (int)num(l, "step"); break;
  case NPABI_KERNEL_CH:
    d->kernelCh.channelId = (uint8_t)num(l, "ch"), d->kernelCh.pTimer = unum(l, "ptimer");
    break;
  case NPABI_NET_PLUGIN: d->netPlugin.id = num(l, "id"), d->netPlugin.data = ref(l, "data"); break;
  case NPABI_CE_COLL:
    d->ceColl.seqNumber = unum(l, "seq"), d->ceColl.func = str(l, "func");
    d->ceColl.sendBuff = ref(l, "send"), d->ceColl.recvBuff = ref(l, "recv");
    d->ceColl.count = unum(l, "count"), d->ceColl.root = (int)num(l, "root");
    d->ceColl.datatype = str(l, "dtype"), d->ceColl.syncStrategy = str(l, "sync");
    d->ceColl.intraBatchSync = num(l, "intra"), d->ceColl.batchSize = (uint32_t)unum(l, "batch");
    d->ceColl.numBatches = (uint32_t)unum(l, "nbatches");
    d->ceColl.ceSeqNum = (uint32_t)unum(l, "ceseq"), d->ceColl.stream = ref(l, "stream");
    break;
  case NPABI_CE_SYNC:
    d->ceCollSync.isComplete = num(l, "complete"), d->ceCollSync.nRanks = (int)num(l, "nranks");
    break;
  case NPABI_CE_BATCH:
    d->ceCollBatch.numOps = (int)num(l, "nops"), d->ceCollBatch.totalBytes = unum(l, "total");
    d->ceCollBatch.useIntraSync = num(l, "intra");
    break;
  }
}

static size_t index_of(const char* l, const char* key, char prefix) {
  size_t n;
  const char* v = field(l, key, &n);
  return v && v[0] == prefix ? strtoull(v + 1, NULL, 10) : (size_t)-1;
}

/* One recorded call, made again. */
static void play(const char* l) {
  int r = 0;
  R.calls++;
  if (!strncmp(l, "init ", 5)) {
    size_t k = index_of(l, "ctx", 'C');
    void* ctx = NULL;
    int mask = 0;
    r = R.t->init(&ctx, unum(l, "id"), &mask, str(l, "name"), (int)num(l, "nnodes"),
                  (int)num(l, "nranks"), (int)num(l, "rank"), NULL);
    if (k < 4096) R.ctxs[k] = ctx;
  } else if (!strncmp(l, "start ", 6)) {
    npabi_descr_v6_t d;
    descr(l, &d);
    void* h = HOST_POISON;
    r = R.t->startEvent(ref(l, "ctx"), &h, &d);
    size_t k = index_of(l, "h", 'R');
    if (k < R.nhandles) R.handles[k] = h == HOST_POISON ? NULL : h;
  } else if (!strncmp(l, "stop ", 5)) {
    r = R.t->stopEvent(ref(l, "h"));
  } else if (!strncmp(l, "record ", 7)) {
    npabi_args_v4_t a;
    memset(&a, 0, sizeof a);
    size_t n;
    if (field(l, "trans", &n)) a.proxyStep.transSize = unum(l, "trans");
    else if (field(l, "appended", &n)) a.proxyCtrl.appendedProxyOps = (int)num(l, "appended");
    else if (field(l, "data", &n)) a.netPlugin.data = ref(l, "data");
    else if (field(l, "ptimer", &n)) a.kernelCh.pTimer = unum(l, "ptimer");
    int null_args = strstr(l, " args=null") != NULL;
    r = R.t->recordEventState(ref(l, "h"), (npabi_state_t)num(l, "s"), null_args ? NULL : &a);
  } else if (!strncmp(l, "finalize ", 9)) {
    r = R.t->finalize(ref(l, "ctx"));
  }
  if (r != 0) R.errors++;
}

/* At the recorded pace (gaps of seconds included: a phase of the job waiting on a barrier). */
static void pace(int64_t t) {
  if (R.speed > 0) wait_until((double)R.t0_now + (double)(t - R.t0_log) / R.speed);
}

static void* thread_main(void* arg) {
  rthread* me = arg;
  for (int i = me->first; i >= 0; i = R.lines[i].next_own) {
    pthread_mutex_lock(&R.mu);
    while (R.next != i) pthread_cond_wait(&me->turn, &R.mu);
    pthread_mutex_unlock(&R.mu);
    pace(R.lines[i].t);
    play(R.lines[i].text);
    pthread_mutex_lock(&R.mu);
    R.next = i + 1;
    if (i + 1 < R.nlines) pthread_cond_signal(&R.thr[R.lines[i + 1].thr].turn);
    pthread_mutex_unlock(&R.mu);
  }
  return NULL;
}

static int thread_of(long tid) {
  for (int k = 0; k < R.nthr; k++)
    if (R.thr[k].tid == tid) return k;
  R.thr = realloc(R.thr, (size_t)(R.nthr + 1) * sizeof *R.thr);
  R.thr[R.nthr] = (rthread){.tid = tid, .first = -1};
  pthread_cond_init(&R.thr[R.nthr].turn, NULL);
  return R.nthr++;
}

/* Reads the log (through gzip when it ends in .gz) into lines and threads. */
static int load(const char* path) {
  size_t len = strlen(path);
  char cmd[4200];
  FILE* f;
  if (len > 3 && !strcmp(path + len - 3, ".gz")) {
    snprintf(cmd, sizeof cmd, "gzip -dc '%s'", path);
    f = popen(cmd, "r");
  } else f = fopen(path, "r");
  if (!f) return -1;
  char* buf = NULL;
  size_t cap = 0;
  int cap_lines = 0, *last = NULL;
  size_t max_h = 0;
  while (getline(&buf, &cap, f) > 0) {
    long tid;
    long long t;
    int off = 0;
    if (sscanf(buf, "T%ld @%lld %n", &tid, &t, &off) != 2 || off == 0) continue;
    if (R.nlines == cap_lines) {
      cap_lines = cap_lines ? 2 * cap_lines : 4096;
      R.lines = realloc(R.lines, (size_t)cap_lines * sizeof *R.lines);
    }
    int k = thread_of(tid);
    if (R.thr[k].first < 0) { /* a thread not seen before */
      last = realloc(last, (size_t)R.nthr * sizeof *last);
      R.thr[k].first = R.nlines, last[k] = -1;
    }
    if (last[k] >= 0) R.lines[last[k]].next_own = R.nlines;
    last[k] = R.nlines;
    R.lines[R.nlines] = (rline){.text = strdup(buf + off), .t = t, .thr = k, .next_own = -1};
    size_t h = index_of(buf + off, "h", 'R');
    if (h != (size_t)-1 && h + 1 > max_h) max_h = h + 1;
    R.nlines++;
  }
  free(buf);
  free(last);
  if (len > 3 && !strcmp(path + len - 3, ".gz")) pclose(f);
  else fclose(f);
  R.nhandles = max_h;
  R.handles = calloc(max_h ? max_h : 1, sizeof *R.handles);
  return R.nlines > 0 ? 0 : -1;
}

int scenario_replay(int argc, char** argv) {
  const char *lib = NULL, *log = NULL;
  R.speed = 1;
  for (int i = 1; i + 1 < argc; i++) {
    if (!strcmp(argv[i], "--lib")) lib = argv[++i];
    else if (!strcmp(argv[i], "--log")) log = argv[++i];
    else if (!strcmp(argv[i], "--recorded-pid")) R.recorded_pid = atol(argv[++i]);
    else if (!strcmp(argv[i], "--speed")) R.speed = atof(argv[++i]);
  }
  if (!lib || !log) {
    fprintf(stderr, "usage: ncclprof-testhost --lib PLUGIN --log CALLS.log[.gz] "
                    "[--recorded-pid PID] [--speed S] replay\n");
    return 2;
  }
  if (load(log) != 0) {
    fprintf(stderr, "testhost: replay: no call lines in %s (a recorder log with times: "
                    "NCCLPROF_RECORDER_CLOCK=1)\n", log);
    return 2;
  }
  host_plugin p;
  host_load(&p, lib, 6);
  R.t = p.table;
  pthread_mutex_init(&R.mu, NULL);
  R.t0_log = R.lines[0].t;
  R.t0_now = (int64_t)now_ns();
  for (int k = 0; k < R.nthr; k++) pthread_create(&R.thr[k].th, NULL, thread_main, &R.thr[k]);
  for (int k = 0; k < R.nthr; k++) pthread_join(R.thr[k].th, NULL);
  printf("replay: %d lines on %d threads in %.2f s; %llu calls, %llu returned an error\n",
         R.nlines, R.nthr, (double)((int64_t)now_ns() - R.t0_now) / 1e9, R.calls, R.errors);
  return 0;
}
