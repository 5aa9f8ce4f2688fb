/*
 * era.h — the proxy thread as each NCCL release calls the profiler (docs/nccl-call-sites.md):
 * `--nccl 2.23|2.24|2.26|2.27|2.28|2.30` picks the release; its ABI is the newest the release
 * offers (NCCL tries ncclProfiler_v6 first, then older), and run_job follows that release's
 * transport/net.cc order of records instead of the host's own.
 */
#ifndef NCCLPROF_TESTHOST_ERA_H
#define NCCLPROF_TESTHOST_ERA_H

#include <stdint.h>

#include "world.h"

/* "2.23" → 223 …; 0 for a release not listed (the caller says which are). */
int nccl_release(const char* s);
/* The ABI version NCCL of that release calls ncclprof at: 2.23 v1, 2.24–2.25 v2, 2.26 v3,
 * 2.27 v4, 2.28 v5, 2.29–2.30 v6. */
int nccl_abi(int release);
/* Whether NCCL of that release starts events of type t under activation mask m: 2.26+ start
 * the ancestors of every requested type (npabi_mask_wants); 2.23–2.25 had their own rules. */
int nccl_mask_wants(int release, int m, uint64_t t);
/* One network operation (a ProxyOp and its steps) as net.cc's send/recvProxyProgress of the
 * release records it. */
void era_run_job(const job* j);
/* Whether the release starts a ProxyOp when the proxy thread appends it (proxy.cc ProxyAppend →
 * ncclProfilerStartProxyOpEvent, 2.27+: v2.27.3-1 line 419) rather than at net.cc's first
 * progress pass of it (send/recvProxyProgress in the ncclProxyOpReady state: v2.26.6-1 lines
 * 1104 and 1285, v2.23.4-1 1047 and 1236). */
int era_starts_at_append(void);
/* The ProxyOp of j as the release starts it (its nSteps and chunkSize as the release counts). */
void* era_op_begin(const job* j);
/* A started ProxyOp's progress as the release's net.cc records it, to its stop and the kernel's
 * end; first_pass_done: its first pass (InProgress) was recorded already. */
void era_progress(const job* j, void* op, void* kch, int first_pass_done);

#endif
