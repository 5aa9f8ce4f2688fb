/*
 * soak.c — sustained load: communicators created and destroyed in cycles while the user, proxy
 * and CUDA-callback threads call the plugin as fast as they can, for --seconds. Once a second
 * it prints a JSON line: callbacks per second, the plugin's drops, and the process's resident
 * memory, threads, open files and the plugin runtime's goroutines and heap, so a test can check
 * they stay flat after warm-up. A last line sums up.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../profiler/core.h"
#include "scenarios.h"

static long count_dir(const char* path) {
  DIR* d = opendir(path);
  long n = 0;
  if (!d) return -1;
  for (struct dirent* e; (e = readdir(d));) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

static long rss_kib(void) {
  long pages = 0, resident = 0;
  FILE* f = fopen("/proc/self/statm", "r");
  if (!f) return -1;
  if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
  fclose(f);
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

typedef struct replay {
  hcomm* c;
  volatile int stop;
  uint64_t n;
} replay;

/* The CUDA host-callback thread: Group/Coll of graph replays, with their proxy work. */
static void* callback_main(void* a) {
  replay* r = (replay*)a;
  host_plugin* p = &W.plugin;
  while (!r->stop) {
    host_ev ge = {.type = NPABI_GROUP};
    void* grp = start_event(r->c->ctx, &ge, 0);
    host_ev e = {.type = NPABI_COLL, .parent_group = grp, .rank = r->c->rank, .func = "AllReduce",
                 .count = 1024, .dtype = "ncclFloat32", .algo = "RING", .proto = "LL", .nchannels = 1};
    void* h = start_event(r->c->ctx, &e, 0);
    job j = {.comm = r->c, .ctx = r->c->ctx, .parent = h, .pid = getpid(), .channel = 1,
             .peer = (r->c->rank + 1) % r->c->nranks, .is_send = 1, .nsteps = 2, .truth_op = -1};
    j.sizes[0] = j.sizes[1] = 2048;
    run_job(&j);
    host_stop(p, h);
    host_stop(p, grp);
    r->n++;
  }
  return NULL;
}

int scenario_soak(const opts* o) {
  int ncomms = o->comms > 0 ? o->comms : 64;
  int (*stats)(uint64_t*, int) = (int (*)(uint64_t*, int))dlsym(W.plugin.lib, "ncclprof_stats");
  int (*counters)(uint64_t*, int) = (int (*)(uint64_t*, int))dlsym(W.plugin.lib, "ncclprof_counters");
  double start = now_ns(), deadline = start + o->seconds * 1e9, next_sample = start + 1e9;
  uint64_t last_calls = 0, cycles = 0;
  proxy_start();
  while (now_ns() < deadline) {
    W.ncomms = 0;
    hcomm* cs[MAX_COMMS];
    for (int i = 0; i < ncomms && i < MAX_COMMS; i++) {
      char name[32];
      snprintf(name, sizeof name, "soak%d", i);
      cs[i] = world_comm(name, rnd(), o->nranks, o->rank, 2); /* new hashes every cycle */
    }
    replay rp = {.c = cs[0]};
    pthread_t cb;
    pthread_create(&cb, NULL, callback_main, &rp);
    for (int it = 0; it < o->iters && now_ns() < deadline; it++) {
      static const char* const funcs[] = {"AllReduce", "AllGather", "ReduceScatter", "Broadcast"};
      op_spec op = {.func = funcs[it % 4], .count = 4096, .dtype = "ncclFloat32", .algo = "RING",
                    .proto = "SIMPLE", .nchannels = 2, .chunk = 4096, .no_truth = 1};
      launch_group(cs[it % ncomms], &op, 1, 1);
      if (now_ns() >= next_sample) {
        uint64_t st[16] = {0}, ct[32] = {0};
        if (stats) stats(st, 16);
        if (counters) counters(ct, 32);
        uint64_t calls = __atomic_load_n(&host_calls, __ATOMIC_RELAXED);
        printf("{\"t\":%.1f,\"calls_per_s\":%llu,\"dropped\":%llu,\"events\":%llu,\"rss_kib\":%ld,"
               "\"threads\":%ld,\"fds\":%ld,\"goroutines\":%llu,\"go_heap\":%llu,\"cycles\":%llu}\n",
               (now_ns() - start) / 1e9, (unsigned long long)(calls - last_calls),
               (unsigned long long)(ct[NP_C_DROPPED_FULL] + ct[NP_C_DROPPED_THREADS] +
                                    ct[NP_C_DROPPED_DETAIL]),
               (unsigned long long)ct[NP_C_EVENTS], rss_kib(),
               count_dir("/proc/self/task"), count_dir("/proc/self/fd"),
               (unsigned long long)st[NP_S_GOROUTINES], (unsigned long long)st[NP_S_GO_HEAP],
               (unsigned long long)cycles);
        fflush(stdout);
        last_calls = calls;
        next_sample += 1e9;
      }
    }
    proxy_drain();
    rp.stop = 1;
    pthread_join(cb, NULL);
    world_finalize_all();
    cycles++;
  }
  proxy_stop();
  printf("{\"summary\":true,\"seconds\":%.1f,\"calls\":%llu,\"cycles\":%llu,\"comms_per_cycle\":%d}\n",
         (now_ns() - start) / 1e9, (unsigned long long)host_calls, (unsigned long long)cycles, ncomms);
  return 0;
}
