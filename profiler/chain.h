/*
 * chain.h — another profiler plugin behind ncclprof (NCCLPROF_CHAIN=<library path or name>).
 *
 * NCCL loads one profiler plugin. With NCCLPROF_CHAIN set, ncclprof loads a second one the way
 * NCCL would, and every callback NCCL makes into ncclprof is also made into it, converted to
 * the newest ABI version both support, with its own contexts and handles: NCCL holds
 * ncclprof's handles, and chain.c maps each to the chained plugin's. The adapters (adapters.c)
 * call in here at the boundary of each exported function, and only once a plugin is chained:
 * without NCCLPROF_CHAIN the hot path pays one predictable branch.
 */
#ifndef NCCLPROF_CHAIN_H
#define NCCLPROF_CHAIN_H

#include "abi.h"

/* ncclprof's own callbacks, as the adapters define them for each version. */
typedef npabi_result_t (*np_start_fn)(void* ctx, void** eHandle, void* descr);
typedef npabi_result_t (*np_record_fn)(void* eHandle, npabi_state_t state, void* args);

/* Set when a plugin was chained and never cleared: from then on a handle NCCL passes may be one
 * chain.c made, so every callback takes the chain path (which stops calling a plugin that was
 * detached after a failure). */
extern __attribute__((visibility("hidden"))) int np_chain_on;

/* init, after ncclprof's own: loads the chained plugin at the first call, initializes it for
 * this communicator and adds the event types it asked for to NCCL's mask. */
void np_chain_init(int abi, void* own_ctx, uint64_t comm_id, const char* name, int nnodes,
                   int nranks, int rank, npabi_logger_t logfn, int* mask);
/* finalize, before ncclprof's own (the communicator's index may be reused right after). */
void np_chain_finalize(void* own_ctx);
/* startEvent, stopEvent and recordEventState: call ncclprof's own function and the chained
 * plugin's. `abi` is the version NCCL calls (recordEventState: 1 for the v1–v3 argument
 * layout, 4 for v4+). */
npabi_result_t np_chain_start(int abi, void* ctx, void** eHandle, void* descr, np_start_fn own);
npabi_result_t np_chain_stop(void* eHandle, npabi_stop_fn own);
npabi_result_t np_chain_record(int abi, void* eHandle, npabi_state_t state, void* args,
                               np_record_fn own);

/* The bits the chained plugin needs in NCCL's activation mask (0 without one). */
uint32_t np_chain_nccl_mask(void);
/* Called by the drainer: reports, once, failures seen on NCCL's threads (which must not log),
 * and follows a change of the chained plugin's own mask. */
void np_chain_report(void);

/* ABI v1 passes these as enum values (the adapters' tables, reused to convert back). */
extern __attribute__((visibility("hidden"))) const char* const np_func_names[8];
extern __attribute__((visibility("hidden"))) const char* const np_dtype_names[12];
extern __attribute__((visibility("hidden"))) const char* const np_algo_names[7];
extern __attribute__((visibility("hidden"))) const char* const np_proto_names[3];

#endif /* NCCLPROF_CHAIN_H */
