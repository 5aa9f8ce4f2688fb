/*
 * world.h — the simulated NCCL process: communicators, the proxy progress thread that runs
 * network operations with modelled timing, and the ground truth the tests compare against.
 *
 * Timing model: a send step's transfer takes latency + size / bandwidth of its peer (plus the
 * machine's own noise); the proxy thread busy-waits until each step's deadline, with up to
 * NCCL_STEPS (8) steps in flight, so the plugin's clock sees exactly those durations.
 * The simulated GPU clock is CLOCK_REALTIME + gpu_offset_ns, drifting by gpu_drift_ppm.
 */
#ifndef NCCLPROF_TESTHOST_WORLD_H
#define NCCLPROF_TESTHOST_WORLD_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "emit.h"

#define MAX_PEERS 64
#define MAX_OPKEYS 64
#define MAX_CHANNELS 64
#define MAX_COMMS 1200

typedef struct truth_op {
  const char *func, *algo, *proto;
  int nchannels;
  uint64_t count, bytes;
  double completion_ns_sum;     /* host-side: before the Coll start → after the last child stop */
  double completion_min_ns_sum; /* host-side: after the Coll start → before the last child stop */
  uint64_t completion_n;
} truth_op;

typedef struct truth_pair {
  double latency_ns, bandwidth_bps; /* the model */
  uint64_t sent_bytes, send_transfers, recv_bytes, recv_transfers;
} truth_pair;

typedef struct hcomm {
  void* ctx;
  char name[64];
  uint64_t hash;
  int rank, nranks, nnodes;
  uint64_t seq[16];
  pthread_mutex_t mu; /* guards the truth below (user and proxy threads both add) */
  truth_op ops[MAX_OPKEYS];
  int nops;
  truth_pair pairs[MAX_PEERS];
  uint64_t ch_transfers[MAX_CHANNELS], ch_bytes[MAX_CHANNELS];
  int used_channels;
} hcomm;

/* One network operation for the proxy thread (a ProxyOp and its steps). */
typedef struct job {
  hcomm* comm;
  void* ctx;    /* the context NCCL would pass (foreign for PXN) */
  void* parent; /* the Coll/P2p handle */
  pid_t pid;
  int channel, peer, is_send, nsteps;
  size_t sizes[64]; /* per step */
  int kernel;       /* also emit KernelCh for this channel */
  int truth_op;     /* index into comm->ops for completion truth, or -1 */
  uint64_t plan;    /* the plan it came from (NCCL's opCount): ProxyOps of one plan queued on one
                       channel are subs of one args, progressed together (world.c run_queued) */
  double t_op_start; /* host CLOCK_MONOTONIC ns when the Coll started */
  double t_op_started; /* … and when its start callback had returned: the plugin stamped between */
  int last_of_op;    /* the op completes when this job finishes */
  double slow_ns;    /* planted delay added to each step (--slow-op), in any timing mode */
  int slice_steps;   /* NCCL's sliceSteps: raw steps per network transfer (2 for ring SIMPLE) */
  double gpu_delay_ns; /* planted: the kernel starts this long after t_op_start (job.c) */
  const uint32_t* arrived; /* non-NULL: ranks of the job that called the op (a count shared by
                              their processes); the network work waits for all (job.c) */
  /* NCCL's patterns the plugin must survive (testhost/proxy_patterns.c, docs/nccl-patterns.md):
   * no_stop: a ProxyOp proxy.cc starts and nothing stops (CollNet, P2P/SHM copy engine): no
   * state, no step, no stop; restarts: net.cc's recvProxyProgress starts each receive step this
   * many extra times before its irecv is posted. */
  int no_stop, restarts;
} job;

typedef struct world {
  host_plugin plugin;
  hcomm comms[MAX_COMMS];
  int ncomms;
  int rank, nranks;
  int realtime; /* 1: busy-wait modelled transfer times; 0: as fast as possible (bench, fuzz) */
  /* > 0: receive ProxyOps wait this many behind on their connection, as NCCL queues them
   * (proxy.cc ProxyAppend `nextPeer`; proxy_patterns.c `queued`) */
  int queue_depth;
  double gpu_offset_ns, gpu_drift_ppm;
  int64_t t_base_real;
  uint64_t rng;
  /* proxy thread */
  pthread_t proxy;
  pthread_mutex_t qmu;
  pthread_cond_t qcv, qdone;
  job queue[256];
  int qhead, qtail, qbusy, stop;
  uint64_t jobs_done;
  /* Ground truth for the trace: recorded starts per type, and CLOCK_REALTIME read around some
   * callbacks (handle, before, after). */
  uint64_t type_counts[16];
  struct clock_sample {
    uint64_t handle;
    int64_t before, after;
  } samples[4096];
  int nsamples;
  pthread_mutex_t smu;
  /* The longest a communicator's finalize took: what a plugin makes NCCL's destroy wait. */
  double finalize_max_ns;
  /* Planted faults: every bad_every-th GPU timestamp (KernelCh start or stop) reads bad_ptimer
   * instead of the clock (--bad-ptimer); how many were planted. */
  uint64_t bad_ptimer, bad_planted;
  int bad_every;
  /* Set around launch_group by scenarios whose ranks wait for each other (job.c): the shared
   * arrival count its jobs wait on. NULL otherwise. */
  const uint32_t* op_barrier;
} world;

extern world W;

double now_ns(void);  /* CLOCK_MONOTONIC */
double real_ns(void);    /* CLOCK_REALTIME */
int64_t real_ns_i(void); /* CLOCK_REALTIME, exact */
uint64_t gpu_ns(void); /* simulated GPU %globaltimer */
uint64_t gpu_reading(uint64_t ns); /* a pTimer NCCL passes: ns, or the planted bad value */
void spin_until(double t_mono_ns);
/* Sleeps until 100 µs before t (CLOCK_MONOTONIC ns, however far), then spins to it: paced
 * runs leave the machine's other work its CPUs and still keep time. */
void wait_until(double t_mono_ns);
uint64_t rnd(void);
double rnd01(void);
/* splitmix64's finalizer: every process draws the same numbers for the same inputs. */
uint64_t mix64(uint64_t x);
/* Waits (sleeping) until *count reaches n, a count other processes share (job.c); exits after
 * 30 s. */
void job_barrier_wait(const uint32_t* count, int n);

void world_init(const char* lib, int abi, int rank, int nranks, int realtime, uint64_t seed);
hcomm* world_comm(const char* name, uint64_t hash, int nranks, int rank, int nnodes);
void world_finalize_all(void);
void proxy_start(void);
void proxy_submit(const job* j); /* blocks while the queue is full */
void proxy_drain(void);          /* waits until every submitted job ran */
void proxy_stop(void);
/* Runs one job on the calling thread (the proxy thread, or a PXN helper). */
void run_job(const job* j);

/* Pieces of run_job that era.c shares: the KernelCh start (after a planted GPU delay), the ProxyOp start (nsteps and
 * chunk as the release counts them), the truth of one transfer, and the op's end (stops and completion). */
void* job_kernel_begin(const job* j);
void* job_op_begin(const job* j, int nsteps, int chunk);
void job_truth_transfer(const job* j, size_t size);
void job_kernel_end(void* kch);
void job_finish(const job* j, void* op, void* kch);

/* Per-peer model: latency and bandwidth of sends to `peer` from this rank. */
void peer_model(int peer, double* latency_ns, double* bw_bps);

int truth_op_add(hcomm* c, const char* func, const char* algo, const char* proto, int nch,
                 uint64_t bytes);
void truth_completion(hcomm* c, int op, double ns, double min_ns);
void truth_write(FILE* f, const char* scenario);
/* Starts an event as NCCL would, counting it for the truth and, with `sample`, reading
 * CLOCK_REALTIME on both sides of the callback. */
void* start_event(void* ctx, const host_ev* e, int sample);

#endif
