/*
 * fuzz.c — random and malformed call sequences for a bounded time, from several threads at
 * once: unknown and multi-bit types, NULL descriptors and eHandle pointers, garbage, stale and
 * cross-communicator handles, stop twice, states after stop, unknown states with NULL or random
 * arguments, negative and huge sizes, channel ids up to 255, PXN pids, foreign contexts, and
 * communicators initialized and finalized while other threads keep calling.
 *
 * It stays inside NCCL's contract where the contract is about memory NCCL owns: strings are
 * static literals or NULL and netPlugin.data points at a real payload, as NCCL guarantees.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "scenarios.h"

#define POOL 128
#define FUZZ_COMMS 6

static const char* const fstrs[] = {"AllReduce", "Send",       "Recv", "ncclFloat32", "RING",
                                    "SIMPLE",    "Unknown",    "",     NULL,          "LL128",
                                    "AlltoAll",  "ncclInt8",   "UC"};
static npabi_net_ib_v1_t fuzz_ib = {.type = 1, .qp = {.length = 1 << 20}};

typedef struct fuzz_thread {
  uint64_t rng;
  void* pool[POOL];
  uint64_t calls;
  double deadline;
  int id;
} fuzz_thread;

/* NCCL never runs a communicator's init or finalize concurrently with its own events, so each
 * context is used under a read lock and replaced under the write lock. */
static pthread_rwlock_t comm_lock[FUZZ_COMMS];
static void* fuzz_ctx[FUZZ_COMMS];

static uint64_t frnd(fuzz_thread* t) {
  uint64_t x = t->rng;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  t->rng = x;
  return x * 0x2545F4914F6CDD1Dull;
}

static const char* fstr(fuzz_thread* t) { return fstrs[frnd(t) % (sizeof fstrs / sizeof fstrs[0])]; }

static void* pick_handle(fuzz_thread* t) {
  switch (frnd(t) % 8) {
  case 0: return NULL;
  case 1: return (void*)(uintptr_t)(frnd(t) | 1); /* garbage that looks like a handle */
  case 2: return (void*)(uintptr_t)(frnd(t) & ~1ull);
  case 3: return (void*)(uintptr_t)(frnd(t) % 16); /* small values, sentinels among them */
  default: return t->pool[frnd(t) % POOL];
  }
}

/* A context to call with: NULL, a foreign pointer (never dereferenced), or one of ours with
 * its read lock held (*locked = its index; release with unlock_ctx). */
static void* pick_ctx(fuzz_thread* t, int* locked) {
  *locked = -1;
  switch (frnd(t) % 10) {
  case 0: return NULL;
  case 1: return (void*)(uintptr_t)frnd(t);
  default: {
    int i = (int)(frnd(t) % FUZZ_COMMS);
    pthread_rwlock_rdlock(&comm_lock[i]);
    *locked = i;
    return fuzz_ctx[i];
  }
  }
}

static void unlock_ctx(int locked) {
  if (locked >= 0) pthread_rwlock_unlock(&comm_lock[locked]);
}

static uint64_t pick_type(fuzz_thread* t) {
  uint64_t r = frnd(t) % 20;
  if (r < 15) return 1ull << r; /* every real type */
  if (r == 15) return 0;
  if (r == 16) return 3;                      /* two bits */
  if (r == 17) return 1ull << (15 + frnd(t) % 40); /* beyond v6 */
  return frnd(t);
}

static void fuzz_start(fuzz_thread* t) {
  host_plugin* p = &W.plugin;
  host_ev e;
  memset(&e, 0, sizeof e);
  e.type = pick_type(t);
  e.parent = pick_handle(t);
  e.parent_group = pick_handle(t);
  e.rank = (int)(frnd(t) % 9) - 1;
  e.func = fstr(t);
  e.dtype = fstr(t);
  e.algo = fstr(t);
  e.proto = fstr(t);
  e.sync = fstr(t);
  e.comm_name = fstr(t);
  e.count = frnd(t) % 3 ? frnd(t) % 100000 : (size_t)-1;
  e.peer = (int)(frnd(t) % 12) - 2;
  e.root = (int)(frnd(t) % 12) - 2;
  e.nchannels = (uint8_t)frnd(t);
  e.channel = (uint8_t)frnd(t); /* up to 255: NCCL's limit is 64 */
  e.pid = frnd(t) % 4 ? getpid() : (pid_t)frnd(t);
  e.nsteps = (int)(frnd(t) % 2000) - 1000;
  e.chunk = (int)frnd(t);
  e.is_send = (int)(frnd(t) % 3);
  e.step = (int)frnd(t);
  e.ptimer = frnd(t);
  e.net_id = frnd(t) % 2 ? NPABI_NET_TYPE_IB | 1 : (int64_t)frnd(t);
  e.net_data = frnd(t) % 2 ? &fuzz_ib : NULL;
  e.depth = (int)(frnd(t) % 5);
  e.graph = (int)(frnd(t) % 2);
  e.total_bytes = frnd(t);
  /* Unfiltered, so types NCCL would never send for this version get through too. */
  void* h = NULL;
  int locked;
  void* ctx = pick_ctx(t, &locked);
  if (frnd(t) % 50 == 0) /* a NULL descriptor or NULL eHandle pointer */
    ((const npabi_profiler_v1_t*)p->table)->startEvent(ctx, frnd(t) % 2 ? &h : NULL, NULL);
  else
    h = host_start_raw(p, ctx, &e);
  unlock_ctx(locked);
  t->pool[frnd(t) % POOL] = h;
}

static void fuzz_state(fuzz_thread* t) {
  host_plugin* p = &W.plugin;
  void* h = pick_handle(t);
  int state = (int)(frnd(t) % 40) - 3;
  uint64_t args[2] = {frnd(t), frnd(t)};
  if (state == NPABI_NET_PLUGIN_UPDATE) args[0] = (uint64_t)(uintptr_t)&fuzz_ib; /* NCCL's contract */
  host_raw_state(p, h, state, frnd(t) % 3 ? args : NULL);
}

/* Finalizes a communicator and creates a new one in its place. Handles of the old one stay in
 * the pools: stopping them later is the stale-handle case the plugin must survive. */
static void fuzz_lifecycle(fuzz_thread* t) {
  int i = (int)(frnd(t) % FUZZ_COMMS);
  char name[32];
  snprintf(name, sizeof name, "fuzz%d", i);
  pthread_rwlock_wrlock(&comm_lock[i]);
  if (fuzz_ctx[i]) host_finalize(&W.plugin, fuzz_ctx[i]);
  if (frnd(t) % 8 == 0) host_finalize(&W.plugin, NULL);
  fuzz_ctx[i] = host_init(&W.plugin, name, frnd(t), 1, 8, (int)(frnd(t) % 8));
  pthread_rwlock_unlock(&comm_lock[i]);
}

static void* fuzz_main(void* arg) {
  fuzz_thread* t = (fuzz_thread*)arg;
  while (now_ns() < t->deadline) {
    for (int k = 0; k < 256; k++) {
      uint64_t r = frnd(t) % 1000;
      if (r < 450)
        fuzz_start(t);
      else if (r < 750) ((const npabi_profiler_v1_t*)W.plugin.table)->stopEvent(pick_handle(t));
      else if (r < 998) fuzz_state(t);
      else if (t->id == 0) fuzz_lifecycle(t);
      t->calls++;
    }
  }
  return NULL;
}

int scenario_fuzz(const opts* o) {
  for (int i = 0; i < FUZZ_COMMS; i++) {
    pthread_rwlock_init(&comm_lock[i], NULL);
    char name[32];
    snprintf(name, sizeof name, "fuzz%d", i);
    fuzz_ctx[i] = host_init(&W.plugin, name, 0xF0220000ull + (uint64_t)i, 1, 8, i);
  }
  int n = o->threads > 0 ? o->threads : 3;
  fuzz_thread th[16];
  pthread_t tid[16];
  double deadline = now_ns() + o->seconds * 1e9;
  for (int i = 0; i < n && i < 16; i++) {
    memset(&th[i], 0, sizeof th[i]);
    th[i].rng = (o->seed + 1) * 0x9E3779B97F4A7C15ull + (uint64_t)i * 0x632BE59BD9B4E019ull;
    th[i].deadline = deadline;
    th[i].id = i;
    pthread_create(&tid[i], NULL, fuzz_main, &th[i]);
  }
  uint64_t calls = 0;
  for (int i = 0; i < n && i < 16; i++) {
    pthread_join(tid[i], NULL);
    calls += th[i].calls;
  }
  for (int i = 0; i < FUZZ_COMMS; i++) host_finalize(&W.plugin, fuzz_ctx[i]);
  printf("{\"scenario\":\"fuzz\",\"abi\":%d,\"threads\":%d,\"seconds\":%.1f,\"calls\":%llu,"
         "\"unwritten_handles\":%llu}\n",
         W.plugin.abi, n, o->seconds, (unsigned long long)calls,
         (unsigned long long)host_unwritten_handles);
  return 0;
}
