/* scenarios.h — what the test host can replay, and its command-line options. */
#ifndef NCCLPROF_TESTHOST_SCENARIOS_H
#define NCCLPROF_TESTHOST_SCENARIOS_H

#include <stddef.h>

#include "world.h"

typedef struct opts {
  const char* lib;
  const char* scenario;
  const char* truth; /* where to write the ground truth (JSON) */
  int abi, rank, nranks, iters, channels, kernel, comms, cycles, realtime, threads;
  int control; /* use the plugin's control API: trace window and step labels */
  int labels;  /* step labels only */
  int mask_api; /* >= 0: ncclprof_set_event_mask before the first communicator */
  unsigned long long bad_ptimer; /* planted GPU timestamp, every bad_every-th reading */
  int bad_every;
  const char* sync; /* job: the file the ranks synchronize through */
  int slow_rank;    /* job: the planted straggler (-1: none) */
  double slow_us;   /* job: how late it arrives on the slow steps; allreduce: see slow_op */
  unsigned long long seed;
  double seconds;
  const char* empty_lib; /* bench: the empty plugin, the floor */
  const char* chain;     /* NCCLPROF_CHAIN (bench: the configurations with a chained plugin) */
  int reps;
  double rate; /* drain: collectives per second (0: as fast as one thread can) */
  int steps;   /* drain: steps per ProxyOp */
  int slack_ms; /* finwhile: timer slack of the finalizing thread */
  int logger;   /* pass NCCL's logger to init (messages go through it, marked as NCCL's) */
  int leave_mib; /* asgrow: address space the job leaves under its ulimit -v */
  /* allreduce: a planted slow operation (iteration slow_op's steps each take slow_us longer;
   * -1: none), and a pause of pace_us between iterations (a training step's compute). */
  int slow_op;
  double pace_us;
  /* job: this rank's GPU starts operation gpu_late_op slow_us late while its CPU calls on time;
   * its sends of operation net_slow_op take slow_us longer in all (-1: none). */
  int gpu_late_op, net_slow_op;
  int replays; /* mixed: replays of its CUDA graph (20); 0 as a rank whose plan had no proxy work */
} opts;

/* One API call: a collective or a point-to-point operation. */
typedef struct op_spec {
  const char* func;
  size_t count;
  const char* dtype;
  const char *algo, *proto;
  int nchannels, root, peer, is_p2p, kernel;
  size_t chunk;
  /* What the API event reports when it differs from the Coll event (AllGather, Broadcast). */
  const char* api_func;
  size_t api_count;
  const char* api_dtype;
  int no_truth; /* part of a rebuilt operation: the truth is the whole */
  /* NCCL runs it without a Coll event (api_patterns.c): API_ONLY_KERNEL (symmetric kernels,
   * Broadcasts of several roots on 2.29+) or API_ONLY_CE (CE collectives: CeColl events). */
  int api_only;
  int pxn; /* its network work runs in another process's proxy (PXN): no ProxyOp here */
  double slow_ns; /* planted: each of its steps takes this much longer */
  double send_slow_ns; /* planted: each of its send ProxyOps takes this much longer */
  double gpu_delay_ns; /* planted: its kernel starts this long after the call */
  int collnet;    /* its ProxyOps are never stopped and have no steps (proxy_patterns.c) */
  int restarts;   /* each receive step is started this many extra times (proxy_patterns.c) */
} op_spec;

enum { API_ONLY_KERNEL = 1, API_ONLY_CE = 2 };

void launch_group(hcomm* c, op_spec* ops, int n, int depth);
void* api_calls(hcomm* c, op_spec* ops, int n, int depth, int graph, void** api);
void plan_tasks(hcomm* c, op_spec* ops, int n, void** api);
void ce_events(hcomm* c, void* coll_api); /* CeColl, CeSync, CeBatch under a CollApi (v6) */
void pxn_ops(hcomm* c); /* a ProxyOp this process's proxy runs for another process (PXN) */
size_t dtype_size(const char* d);
uint64_t api_bytes(const host_ev* api, int nranks);

/* The callback-cost bench's plugin handle and NCCL-shaped call sequence (bench.c), also used
 * by the drainer bench (drainbench.c). */
typedef struct bench_lib {
  const npabi_profiler_v6_t* t;
  void* ctx;
  int mask;
  int (*set_mask)(int);
  int (*flush)(int);
  int (*counters)(uint64_t*, int);
  int (*stats)(uint64_t*, int);
  int (*trace_start)(const char*);
  int (*trace_stop)(void);
  int (*dropped)(uint64_t*, uint64_t*, int);
} bench_lib;
extern int bench_steps;
/* The default event mask (profiler/config.c "default"): what metrics-only users record. */
#define BENCH_DEFAULT_MASK (NPABI_GROUP | NPABI_COLL | NPABI_P2P | NPABI_PROXY_OP |              \
                            NPABI_PROXY_STEP | NPABI_GROUP_API | NPABI_COLL_API |              \
                            NPABI_P2P_API | NPABI_KERNEL_LAUNCH)
void bench_descriptors(void);
void open_lib(bench_lib* L, const char* path, const char* name);
uint64_t user_part(bench_lib* L, void** coll, int tsc);
/* Where a callback's time goes within an operation (bench-nccl, NCCLPROF_BENCH_POSITIONS=1):
 * each callback of the timed operations is timed alone, by its position in the operation's
 * sequence, for ncclprof (side 0) and the floor's plugin (side 1), and the medians printed.
 * bench_pos_side < 0: off. */
#define BENCH_POSITIONS 256
extern int bench_pos_side, bench_pos_next;
uint64_t bench_tsc(void); /* the TSC (ns where there is none): bench-nccl's and the positions' clock */
void bench_pos_add(uint64_t since);
void bench_pos_print(const char* row, double ns_per_tick);
/* Makes one callback, timed at its position when positions are on. */
#define BENCH_CALL(call)                                                                         \
  do {                                                                                           \
    uint64_t t0_ = bench_pos_side >= 0 ? bench_tsc() : 0;                                        \
    call;                                                                                        \
    if (bench_pos_side >= 0) bench_pos_add(t0_);                                                 \
  } while (0)
uint64_t proxy_part(bench_lib* L, void* coll, int channels);
typedef struct run {
  double ns, flush_ns; /* callbacks; the drainer's processing of them (untimed bursts' flush) */
  uint64_t callbacks, collectives;
} run;
run run_one(bench_lib* L, int channels, int bursts, int per, int tsc);
double median(double* v, int n);
int scenario_drain(const opts* o);
int scenario_bench_sample(const opts* o); /* samplebench.c */
int scenario_bench_nccl(const opts* o);   /* ncclbench.c */

void scenario_allreduce(const opts* o);
void scenario_p2p(const opts* o);
void scenario_alltoall(const opts* o);
void scenario_mixed(const opts* o);
void scenario_cycles(const opts* o);
int scenario_fuzz(const opts* o);
int scenario_bench(const opts* o);
int scenario_soak(const opts* o);
void scenario_manycomms(const opts* o);
void scenario_fork(const opts* o);
void scenario_flood(const opts* o);
void scenario_apionly(const opts* o);     /* api_patterns.c */
void scenario_graphreplay(const opts* o);
void scenario_v1order(const opts* o);
void scenario_pxn(const opts* o);
void scenario_maskchange(const opts* o);
void scenario_nonblocking(const opts* o);
void scenario_netstops(const opts* o);
void scenario_job(const opts* o); /* ranks that wait for each other, a straggler (job.c) */
void scenario_nostop(const opts* o);   /* proxy_patterns.c */
void scenario_restart(const opts* o);
void scenario_stalefin(const opts* o); /* races.c */
void scenario_finwhile(const opts* o);
void scenario_reinit(const opts* o);
void scenario_late(const opts* o);
void scenario_forkinit(const opts* o);
void scenario_asgrow(const opts* o);
int scenario_skew(int argc, char** argv); /* parses its own options (skew.c) */
int scenario_hang(int argc, char** argv); /* parses its own options (hang.c) */
int scenario_replay(int argc, char** argv); /* a recorded call log of real NCCL (replay.c) */
void scenario_queued(const opts* op);       /* proxy_patterns.c: ProxyOps queued behind */
void scenario_queuedp2p(const opts* op);    /* proxy_patterns.c: P2P receives share a queue */
void scenario_proxychurn(const opts* op);   /* proxy_patterns.c: a proxy thread per two ops */

#endif
