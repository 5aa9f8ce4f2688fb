/*
 * drainbench.c — whether the plugin keeps every operation, and what its drainer costs, when
 * NCCL is at its busiest. One thread calls the plugin like NCCL's user and proxy threads
 * together (an AllReduce: API events, launch, Group, Coll, and per channel a send and a
 * receive ProxyOp of --steps steps), paced with a busy wait at --rate AllReduces per second (0:
 * as fast as the thread can), for --seconds, on one communicator with the default event mask.
 * Prints one JSON line: events per second achieved, what was dropped per type, operations
 * emitted against those the drainer completed, and the drainer's CPU time per record it read
 * and per event NCCL sent.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "../profiler/core.h"
#include "scenarios.h"

#define DRAIN_MASK (NPABI_GROUP | NPABI_COLL | NPABI_P2P | NPABI_PROXY_OP | NPABI_PROXY_STEP | \
                    NPABI_GROUP_API | NPABI_COLL_API | NPABI_P2P_API | NPABI_KERNEL_LAUNCH)

static const char* const type_names[NP_T_COUNT] = {
    "None", "Group", "Coll", "P2p", "ProxyOp", "ProxyStep", "ProxyCtrl", "KernelCh", "NetPlugin",
    "GroupApi", "CollApi", "P2pApi", "KernelLaunch", "CeColl", "CeSync", "CeBatch", "Late"};

static void print_drops(const char* name, const uint64_t* v) {
  printf("\"%s\":{", name);
  int first = 1;
  for (int k = 0; k < NP_T_COUNT; k++)
    if (v[k]) {
      printf("%s\"%s\":%llu", first ? "" : ",", type_names[k], (unsigned long long)v[k]);
      first = 0;
    }
  printf("}");
}

int scenario_drain(const opts* o) {
  bench_steps = o->steps > 0 ? o->steps : 16;
  bench_descriptors();
  bench_lib L;
  open_lib(&L, o->lib, "drain");
  L.mask = DRAIN_MASK;
  if (L.set_mask) L.set_mask(L.mask);
  double period = o->rate > 0 ? 1e9 / o->rate : 0;
  uint64_t callbacks = 0, colls = 0;
  double t0 = now_ns(), end = t0 + o->seconds * 1e9;
  for (double now = t0; now < end; now = now_ns()) {
    if (period > 0) spin_until(t0 + (double)colls * period); /* behind: catch up at once */
    void* coll = NULL;
    callbacks += user_part(&L, &coll, 0);
    callbacks += proxy_part(&L, coll, o->channels);
    colls++;
  }
  double secs = (now_ns() - t0) / 1e9;
  /* Events NCCL starts per AllReduce with this mask: GroupApi, CollApi, KernelLaunch, Group,
   * Coll, and per channel two ProxyOps with their steps. */
  uint64_t per = 5 + (uint64_t)o->channels * 2 * (1 + (uint64_t)bench_steps);
  L.t->finalize(L.ctx); /* waits until the drainer has processed everything it recorded */
  uint64_t st[NP_S_COUNT] = {0}, untracked[NP_T_COUNT] = {0}, trace[NP_T_COUNT] = {0};
  if (L.stats) L.stats(st, NP_S_COUNT);
  if (L.dropped) L.dropped(untracked, trace, NP_T_COUNT);
  uint64_t dropped = 0;
  for (int k = 0; k < NP_T_COUNT; k++) dropped += untracked[k] + trace[k];
  double recs = (double)st[NP_S_DRAIN_RECORDS], cpu = (double)st[NP_S_DRAIN_CPU_NS];
  printf("{\"scenario\":\"drain\",\"rate_target\":%.0f,\"channels\":%d,\"steps\":%d,"
         "\"events_per_collective\":%llu,\"seconds\":%.3f,\"collectives\":%llu,"
         "\"collectives_per_s\":%.0f,\"events_per_s\":%.0f,\"callbacks_per_s\":%.0f,"
         "\"dropped\":%llu,",
         o->rate, o->channels, bench_steps, (unsigned long long)per, secs,
         (unsigned long long)colls, (double)colls / secs, (double)(colls * per) / secs,
         (double)callbacks / secs, (unsigned long long)dropped);
  print_drops("untracked", untracked);
  printf(",");
  print_drops("trace_dropped", trace);
  printf(",\"ops_emitted\":%llu,\"ops_completed\":%llu,\"ops_missing\":%lld,"
         "\"drainer_records\":%.0f,\"drainer_cpu_s\":%.3f,\"drainer_cpu_ns_per_record\":%.1f,"
         "\"drainer_cpu_ns_per_event\":%.2f,\"drainer_core_share\":%.3f}\n",
         (unsigned long long)colls, (unsigned long long)st[NP_S_OPS_COMPLETED],
         (long long)colls - (long long)st[NP_S_OPS_COMPLETED], recs, cpu / 1e9,
         recs > 0 ? cpu / recs : 0, colls ? cpu / (double)(colls * per) : 0, cpu / (secs * 1e9));
  return 0;
}
