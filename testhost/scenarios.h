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
  unsigned long long seed;
  double seconds;
  const char* empty_lib; /* bench: the empty plugin, the floor */
  const char* chain;     /* NCCLPROF_CHAIN (bench: the configurations with a chained plugin) */
  int reps;
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
} op_spec;

void launch_group(hcomm* c, op_spec* ops, int n, int depth);

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
int scenario_skew(int argc, char** argv); /* parses its own options (skew.c) */

#endif
