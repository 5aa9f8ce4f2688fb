/*
 * emit.h — the test host's NCCL side: loads a profiler plugin the way NCCL does and drives it
 * through whichever ABI version was chosen, building that version's descriptors and state
 * arguments the way NCCL's own code and adapters do (docs/nccl-profiler-api.md §2–§3).
 */
#ifndef NCCLPROF_TESTHOST_EMIT_H
#define NCCLPROF_TESTHOST_EMIT_H

#include <stddef.h>
#include <stdint.h>

#include "../profiler/abi.h"

typedef struct host_plugin {
  int abi; /* 1..6 */
  void* lib;
  const char* path;
  const void* table; /* npabi_profiler_vN_t* */
  int mask;          /* NCCL's process-wide activation mask (written by init) */
  int nccl;          /* the NCCL release replayed (223 = 2.23, …; era.h), 0: the host's own order */
} host_plugin;

/* dlopen(RTLD_NOW|RTLD_LOCAL) + dlsym("ncclProfiler_vN"). Exits with a message on failure. */
void host_load(host_plugin* p, const char* path, int abi);
void host_unload(host_plugin* p); /* dlclose, as NCCL does when the last comm goes away */

/* One event to start, version-neutral. Fields a version lacks are ignored for it. */
typedef struct host_ev {
  uint64_t type; /* NPABI_* bit */
  void* parent;  /* v5+ parent (CollApi/P2pApi for Coll/P2p) */
  void* parent_group; /* the Group event: Coll/P2p parent up to v4, parentGroup from v5 */
  int rank;
  const char* comm_name; /* v1–v3 Coll/P2p carry the communicator */
  uint64_t comm_hash;
  /* Coll / P2p / API */
  uint64_t seq;
  const char* func;
  size_t count;
  const char* dtype;
  const char* algo;
  const char* proto;
  int root, peer;
  uint8_t nchannels, nwarps;
  void* stream;
  int graph;
  int depth;
  /* ProxyOp / ProxyStep / KernelCh / NetPlugin */
  pid_t pid;
  uint8_t channel;
  int nsteps, chunk, is_send, step;
  uint64_t ptimer;
  int64_t net_id;
  void* net_data;
  /* CE */
  const char* sync;
  uint32_t batch_size, num_batches, ce_seq;
  int n;
  size_t total_bytes;
  int flag;
} host_ev;

/* Whether NCCL (2.28+) starts events of type t under activation mask m: its own bit or any
 * descendant's (docs/nccl-profiler-api.md §2.5). */
int host_mask_wants(int m, uint64_t t);
/* Whether NCCL of this ABI version can emit the event type at all. */
int host_has_type(const host_plugin* p, uint64_t type);

void* host_init(host_plugin* p, const char* name, uint64_t hash, int nnodes, int nranks, int rank);
/* The logger init passes (v4+), NULL by default; host_log prints "NCCL WARN <message>" (or
 * INFO) on stderr, as NCCL's own logger would. */
extern npabi_logger_t host_logger;
void host_log(int level, unsigned long flags, const char* file, int line, const char* fmt, ...);
void host_finalize(host_plugin* p, void* ctx);
/* Starts an event; returns the handle the plugin wrote (NULL if the type is not emitted for
 * this version or the activation mask excludes it, as NCCL would). */
void* host_start(host_plugin* p, void* ctx, const host_ev* e);
/* startEvent's handle slot is poisoned first; a plugin that leaves it unwritten is counted. */
#define HOST_POISON ((void*)(uintptr_t)0xBAD0BAD0BAD0BAD1ull)
extern uint64_t host_unwritten_handles;
extern uint64_t host_calls;
/* The same without NCCL's filtering: any type, whatever the version and mask (fuzzing). */
void* host_start_raw(host_plugin* p, void* ctx, const host_ev* e);
void host_stop(host_plugin* p, void* h);

/* State updates. Each builds the version's arguments the way NCCL does:
 *   - v4+: step SendWait/RecvFlushWait carry transSize; v1–v3: the ProxyOp gets the matching
 *     op state with the cumulative size (*cum) first, and the step state has NULL args. */
void host_step_state(host_plugin* p, void* op, void* step, int state, size_t trans, size_t* cum);
void host_op_in_progress(host_plugin* p, void* op);
/* One state exactly as a release records it (era.c): a ProxyOp state with v1–v3's arguments
 * (steps done, cumulative bytes), or a ProxyStep state alone (v4+: with transSize). */
void host_op_state(host_plugin* p, void* op, int state, int steps, size_t cum);
/* The ProxyOp state (v1-v3) that comes with a ProxyStep state, as net.cc records them
 * together; -1: none. */
int v1_op_state_for(int step_state);
void host_step_only(host_plugin* p, void* step, int state, size_t trans);
void host_ctrl_state(host_plugin* p, void* h, int state, int appended);
void host_kernel_stop(host_plugin* p, void* h, uint64_t ptimer);
void host_group_api_state(host_plugin* p, void* h, int state);
void host_net_update(host_plugin* p, void* h, void* data);
/* Anything, for the fuzzer: raw state and raw (possibly NULL) args. */
void host_raw_state(host_plugin* p, void* h, int state, void* args);

#endif
