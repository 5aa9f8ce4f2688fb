/*
 * ncclprof-testhost — stands in for NCCL: loads a profiler plugin with dlopen(RTLD_NOW |
 * RTLD_LOCAL) and dlsym("ncclProfiler_vN") as NCCL does, and replays NCCL's call sequences
 * with known ground truth, a fuzzer, or the benchmark. No GPU needed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "era.h"
#include "scenarios.h"

static void usage(void) {
  fprintf(stderr,
          "usage: ncclprof-testhost --lib PLUGIN.so [options] SCENARIO\n"
          "scenarios:\n"
          "  allreduce  blocking AllReduces (ring), proxy send/recv ops with timed steps\n"
          "  p2p        grouped sends/receives with every peer, distinct latency/bandwidth each\n"
          "  alltoall   ncclAlltoAll as NCCL expands it into P2P tasks\n"
          "  mixed      every event type, 3 threads, several communicators, PXN, graph replay\n"
          "  cycles     communicators created and destroyed, with dlclose/dlopen in between\n"
          "  fuzz       random and malformed calls from several threads for --seconds\n"
          "  bench      callback cost against --empty-lib (prints JSON)\n"
          "  bench-nccl callback cost on NCCL's call sequence (net.cc's steps, 2 and 4 channels, 4\n"
          "             and 16 steps, paced and unpaced) with the drainer live, against --empty-lib\n"
          "  bench-sample  sampled tracing (NCCLPROF_TRACE_SAMPLE=N): callback cost at N = 1,\n"
          "             100, 10000 against metrics only, and trace bytes per operation (JSON)\n"
          "  drain      one thread at --rate AllReduces/s (0: unpaced) of --channels x --steps for\n"
          "             --seconds: events/s, drops per type, operations kept, drainer cost (JSON)\n"
          "  soak       --comms communicators (64) created and destroyed in cycles of --iters\n"
          "             operations, three threads at full rate, for --seconds; a JSON line a second\n"
          "  manycomms  --comms communicators (1100), more than the plugin's table holds\n"
          "  fork       allreduce with a fork() halfway; the child exits without NCCL\n"
          "  flood      AllReduces in 64-byte chunks: thousands of ProxySteps per operation\n"
          "  apionly    ordinary collectives among ones NCCL reports only by API events (symmetric\n"
          "             kernels, CE collectives, multi-root Broadcasts), --iters at --rate (2000)/s\n"
          "  graphreplay  a CUDA graph of an all-to-all and an AllReduce, captured once and\n"
          "             replayed --iters times at --rate (2000)/s on a host-callback thread\n"
          "  v1order    NCCL 2.23's sends (--abi 1): a ProxyStep per raw step, SendTransmitted\n"
          "             before the transfer's size is added\n"
          "  pxn        rank 0 of 2x2: its sends' ProxyOps run in another process (PXN), its\n"
          "             proxy runs another rank's; --iters operations at --rate (2000)/s\n"
          "  maskchange AllReduces with the event mask changed at run time to p2p,p2papi for\n"
          "             the middle third (NCCL stops its last CollApi handle again), --rate /s\n"
          "  nonblocking  a non-blocking communicator: each group launched on a thread of its\n"
          "             own after ncclGroupEnd returned; every other one a symmetric kernel\n"
          "  netstops   AllReduces with NCCL's NetPlugin stops of events never started (NULL)\n"
          "  nostop     --iters operations at --rate/s (0: unpaced): CollNet AllReduces, whose\n"
          "             ProxyOps NCCL never stops, alternating with ring AllGathers\n"
          "  restart    --iters ring AllReduces at --rate/s whose receive steps are each started\n"
          "             20 times, as net.cc's recvProxyProgress does while it waits\n"
          "  queued     --iters ring AllReduces at --rate/s on 4 channels whose receive ProxyOps\n"
          "             wait 300 operations behind on their channel, as proxy.cc queues them\n"
          "  queuedp2p  --iters P2P plans at --rate/s whose receives wait behind other peers' in\n"
          "             their channel's queue, as net.cc shares it for P2P\n"
          "  proxychurn --iters ring AllReduces, a new proxy thread for every two, each ended\n"
          "  stalefin   a finalize of a context whose table entry another communicator took over\n"
          "  finwhile   finalize while another thread keeps calling into the communicator\n"
          "             (--slack-ms: the finalizing thread's timer slack)\n"
          "  reinit     callbacks on a context while it is finalized and created again, --cycles\n"
          "  late       stops and states for events whose windows were recycled, for --seconds\n"
          "  forkinit   a forked child creates a communicator: disabled, no Go runtime of its own\n"
          "  asgrow     under ulimit -v, the job reserves address space until --leave-mib (150) is\n"
          "             left, halfway through --iters, and runs on for 2.5 s\n"
          "  skew       ranks on one schedule with a planted slow rank (its own options: see skew.c)\n"
          "  hang       ranks of a job that stops, the culprit planted (its own options: see hang.c)\n"
          "  replay     a call log of real NCCL, recorded on a GPU (--log FILE; see replay.c)\n"
          "  job        AllReduces on ranks that wait for each other (--sync FILE, shared and new),\n"
          "             --slow-rank R late by --slow-us D (3000) on odd steps (ncclmerge demo);\n"
          "             --gpu-late-op I: this rank's GPU starts operation I D late, its CPU on time;\n"
          "             --net-slow-op I: this rank's sends of operation I take D longer in all\n"
          "options:\n"
          "  --abi N (1-6, default 6)  --rank R (0)  --nranks N (4)  --iters N (50)\n"
          "  --nccl 2.23|2.24|2.25|2.26|2.27|2.28|2.29|2.30 (call as that NCCL release does: its\n"
          "             ABI, the proxy thread's order of records and fields; docs/nccl-call-sites.md)\n"
          "  --channels N (2)  --kernel (emit KernelCh)  --comms N  --cycles N (3)\n"
          "  --replays N (mixed: CUDA graph replays, 20)\n"
          "  --control (allreduce: open a trace window for the middle third of the iterations\n"
          "             with ncclprof_trace_start/stop, label each iteration ncclprof_set_step)\n"
          "  --labels (allreduce: label each iteration with ncclprof_set_step, no window)\n"
          "  --slow-op I --slow-us D (allreduce: iteration I's steps each take D us longer)\n"
          "  --pace-us P (allreduce: P us between iterations, a training step's compute)\n"
          "  --mask-api M (call ncclprof_set_event_mask(M) before the first communicator)\n"
          "  --chain PLUGIN (NCCLPROF_CHAIN: ncclprof chains this plugin; bench: measure that)\n"
          "  --bad-ptimer V --bad-ptimer-every N (every Nth KernelCh GPU timestamp reads V)\n"
          "  --fast (no modelled transfer times)  --seconds S (fuzz, 5)  --threads N (fuzz, 3)\n"
          "  --seed N  --truth FILE (write ground truth JSON)  --empty-lib PATH  --reps N (7)\n"
          "  --logger (pass init a logger, as NCCL does: the plugin's messages come through it)\n");
  exit(2);
}

int main(int argc, char** argv) {
  /* Whatever the plugin writes from this process is labelled as made by the stand-in for
   * NCCL, so a trace of the test host is never mistaken for one of a real job. */
  setenv("NCCLPROF_SIMULATED", "1", 0);
  if (argc > 1 && !strcmp(argv[argc - 1], "skew")) return scenario_skew(argc, argv);
  if (argc > 1 && !strcmp(argv[argc - 1], "hang")) return scenario_hang(argc, argv);
  if (argc > 1 && !strcmp(argv[argc - 1], "replay")) return scenario_replay(argc, argv);
  opts o = {.abi = 6, .rank = 0, .nranks = 4, .iters = 50, .channels = 2, .cycles = 3,
            .realtime = 1, .seconds = 5, .threads = 3, .reps = 7, .seed = 1,
            .mask_api = -1, .slow_rank = -1, .slow_us = 3000, .slow_op = -1,
            .gpu_late_op = -1, .net_slow_op = -1, .replays = 20};
  int nccl = 0, nccl_arg = 0, abi_given = 0; /* --nccl: the release replayed (era.h) */
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (!strcmp(a, name) && v && ++i)
    if (ARG("--lib")) o.lib = v;
    else if (ARG("--abi")) o.abi = atoi(v), abi_given = 1;
    else if (ARG("--nccl") && (nccl_arg = i)) {
      if (!(nccl = nccl_release(v))) {
        fprintf(stderr, "testhost: --nccl %s: give one of 2.23 2.24 2.25 2.26 2.27 2.28 2.29 2.30\n", v);
        return 2;
      }
    }
    else if (ARG("--rank")) o.rank = atoi(v);
    else if (ARG("--nranks")) o.nranks = atoi(v);
    else if (ARG("--iters")) o.iters = atoi(v);
    else if (ARG("--channels")) o.channels = atoi(v);
    else if (ARG("--comms")) o.comms = atoi(v);
    else if (ARG("--replays")) o.replays = atoi(v);
    else if (ARG("--cycles")) o.cycles = atoi(v);
    else if (ARG("--seconds")) o.seconds = atof(v);
    else if (ARG("--threads")) o.threads = atoi(v);
    else if (ARG("--seed")) o.seed = strtoull(v, NULL, 0);
    else if (ARG("--truth")) o.truth = v;
    else if (ARG("--empty-lib")) o.empty_lib = v;
    else if (ARG("--reps")) o.reps = atoi(v);
    else if (ARG("--rate")) o.rate = atof(v);
    else if (ARG("--steps")) o.steps = atoi(v);
    else if (ARG("--slack-ms")) o.slack_ms = atoi(v);
    else if (ARG("--leave-mib")) o.leave_mib = atoi(v);
    else if (!strcmp(a, "--logger")) o.logger = 1;
    else if (ARG("--slow-op")) o.slow_op = atoi(v);
    else if (ARG("--pace-us")) o.pace_us = atof(v);
    else if (!strcmp(a, "--kernel")) o.kernel = 1;
    else if (!strcmp(a, "--control")) o.control = 1;
    else if (!strcmp(a, "--labels")) o.labels = 1;
    else if (ARG("--mask-api")) o.mask_api = (int)strtol(v, NULL, 0);
    else if (ARG("--sync")) o.sync = v;
    else if (ARG("--slow-rank")) o.slow_rank = atoi(v);
    else if (ARG("--slow-us")) o.slow_us = atof(v);
    else if (ARG("--gpu-late-op")) o.gpu_late_op = atoi(v);
    else if (ARG("--net-slow-op")) o.net_slow_op = atoi(v);
    else if (!strcmp(a, "--fast")) o.realtime = 0;
    else if (ARG("--chain")) setenv("NCCLPROF_CHAIN", v, 1), o.chain = v;
    else if (ARG("--bad-ptimer")) o.bad_ptimer = strtoull(v, NULL, 0);
    else if (ARG("--bad-ptimer-every")) o.bad_every = atoi(v);
    else if (a[0] == '-') usage();
    else o.scenario = a;
#undef ARG
  }
  if (nccl) { /* the release decides the ABI: NCCL calls the newest version it knows */
    if (abi_given && o.abi != nccl_abi(nccl)) {
      fprintf(stderr, "testhost: NCCL %s calls plugins at ABI v%d, not --abi %d (leave --abi out)\n",
              argv[nccl_arg], nccl_abi(nccl), o.abi);
      return 2;
    }
    o.abi = nccl_abi(nccl);
  }
  if (!o.lib || !o.scenario || o.abi < 1 || o.abi > 6 || o.nranks < 1 || o.nranks > MAX_PEERS ||
      o.rank < 0 || o.rank >= o.nranks || o.channels < 1 || o.channels > 32)
    usage();
  if (!strcmp(o.scenario, "bench")) {
    if (!o.empty_lib) usage();
    world_init(o.lib, 6, 0, 2, 0, o.seed);
    return scenario_bench(&o);
  }
  if (!strcmp(o.scenario, "bench-nccl")) {
    if (!o.empty_lib) usage();
    world_init(o.lib, 6, 0, 2, 0, o.seed);
    return scenario_bench_nccl(&o);
  }
  if (!strcmp(o.scenario, "bench-sample")) {
    if (!o.empty_lib) usage();
    world_init(o.lib, 6, 0, 2, 0, o.seed);
    return scenario_bench_sample(&o);
  }
  if (!strcmp(o.scenario, "drain")) {
    world_init(o.lib, 6, 0, 2, 0, o.seed);
    return scenario_drain(&o);
  }
  world_init(o.lib, o.abi, o.rank, o.nranks, o.realtime, o.seed);
  W.plugin.nccl = nccl;
  W.bad_ptimer = o.bad_ptimer;
  W.bad_every = o.bad_every;
  if (o.logger) host_logger = host_log;
  if (o.mask_api >= 0) { /* as Python may: before the first communicator */
    int (*set_mask)(int) = (int (*)(int))dlsym(W.plugin.lib, "ncclprof_set_event_mask");
    if (set_mask) set_mask(o.mask_api);
  }
  if (!strcmp(o.scenario, "fuzz")) return scenario_fuzz(&o);
  if (!strcmp(o.scenario, "soak")) {
    W.realtime = 0;
    return scenario_soak(&o);
  }
  if (!strcmp(o.scenario, "allreduce")) scenario_allreduce(&o);
  else if (!strcmp(o.scenario, "p2p")) scenario_p2p(&o);
  else if (!strcmp(o.scenario, "alltoall")) scenario_alltoall(&o);
  else if (!strcmp(o.scenario, "mixed")) scenario_mixed(&o);
  else if (!strcmp(o.scenario, "cycles")) scenario_cycles(&o);
  else if (!strcmp(o.scenario, "manycomms")) scenario_manycomms(&o);
  else if (!strcmp(o.scenario, "fork")) scenario_fork(&o);
  else if (!strcmp(o.scenario, "flood")) scenario_flood(&o);
  else if (!strcmp(o.scenario, "apionly")) scenario_apionly(&o);
  else if (!strcmp(o.scenario, "graphreplay")) scenario_graphreplay(&o);
  else if (!strcmp(o.scenario, "v1order")) scenario_v1order(&o);
  else if (!strcmp(o.scenario, "pxn")) scenario_pxn(&o);
  else if (!strcmp(o.scenario, "maskchange")) scenario_maskchange(&o);
  else if (!strcmp(o.scenario, "nonblocking")) scenario_nonblocking(&o);
  else if (!strcmp(o.scenario, "netstops")) scenario_netstops(&o);
  else if (!strcmp(o.scenario, "nostop")) scenario_nostop(&o);
  else if (!strcmp(o.scenario, "restart")) scenario_restart(&o);
  else if (!strcmp(o.scenario, "queued")) scenario_queued(&o);
  else if (!strcmp(o.scenario, "queuedp2p")) scenario_queuedp2p(&o);
  else if (!strcmp(o.scenario, "proxychurn")) scenario_proxychurn(&o);
  else if (!strcmp(o.scenario, "job")) scenario_job(&o);
  else if (!strcmp(o.scenario, "stalefin")) scenario_stalefin(&o);
  else if (!strcmp(o.scenario, "finwhile")) scenario_finwhile(&o);
  else if (!strcmp(o.scenario, "reinit")) scenario_reinit(&o);
  else if (!strcmp(o.scenario, "late")) scenario_late(&o);
  else if (!strcmp(o.scenario, "forkinit")) scenario_forkinit(&o);
  else if (!strcmp(o.scenario, "asgrow")) scenario_asgrow(&o);
  else usage();
  world_finalize_all();
  if (o.truth) {
    FILE* f = fopen(o.truth, strcmp(o.scenario, "cycles") ? "w" : "a");
    if (!f) {
      perror(o.truth);
      return 1;
    }
    truth_write(f, o.scenario);
    fclose(f);
  }
  return 0;
}
