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

#endif
