#!/usr/bin/env bash
# record.sh: run real NCCL under ncclprof with the recording plugin chained behind it, on a
# machine with one GPU, and keep what both saw.
#
#   tools/nccl/record/record.sh NCCL_LIB_DIR BIN_DIR OUT [NRANKS] [ITERS]
#
# NCCL_LIB_DIR holds libnccl.so.2 and nccl.h (in include/ there or beside it); BIN_DIR the
# plugin, its drainer and the recorder (`make` builds them). Several ranks share the one GPU.
# By default they are one node (NCCL >= 2.30.3 with NCCL_MULTI_RANK_GPU_ENABLE=1), where NCCL
# connects ranks of one GPU by P2P whatever NCCL_P2P_DISABLE says (src/graph/paths.cc
# ncclTopoCheckP2p: the path of a GPU to itself is always within the P2P level). With
# NCCLREC_SEPARATE_HOSTS=1 each rank claims a host of its own (NCCL_HOSTID), so NCCL (any
# release) connects them through its socket transport on the loopback: ProxyOps, steps and
# NetPlugin events are NCCL's own. NCCLREC_NO_RECORDER=1 runs ncclprof alone;
# NCCLREC_PLUGIN another profiler plugin instead of ncclprof (overhead.sh: the empty one);
# NCCLREC_TRACE=0 no whole-run trace (as a job runs by default). OUT gets, per rank: calls-<rank>.log (every profiler call NCCL made, as the
# recorder received it, with the time), truth-<rank>.json (what the rank issued), ncclprof's
# summary and trace, and NCCL's log.
set -u
lib=$(cd "$1" && pwd) bin=$(cd "$2" && pwd) out=$3 nranks=${4:-4} iters=${5:-20}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out/calls" "$out/ncclprof"
out=$(cd "$out" && pwd)

inc=$lib/include
[ -f "$inc/nccl.h" ] || inc=$lib/../include
link=$out/lib
mkdir -p "$link" && ln -sf "$lib/libnccl.so.2" "$link/libnccl.so"
# nvcc finds CUDA's headers (CCCL's too) and links its runtime itself.
nvcc -O1 -o "$out/ncclrec" "$here/ncclrec.c" -I"$inc" -L"$link" -lnccl -Xlinker -rpath="$lib" ||
  exit 3

chain=$bin/libnccl-profiler-recorder.so
[ -n "${NCCLREC_NO_RECORDER:-}" ] && chain=
env NCCL_MULTI_RANK_GPU_ENABLE=1 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET=Socket \
  NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 NCCL_NVLS_ENABLE=0 \
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,NET,PROFILE,TUNING NCCL_DEBUG_FILE="$out/nccl.%h.%p.log" \
  NCCL_PROFILER_PLUGIN="${NCCLREC_PLUGIN:-$bin/libnccl-profiler-ncclprof.so}" \
  NCCLPROF_CHAIN="$chain" \
  NCCLPROF_RECORDER_CLOCK=1 \
  NCCLPROF_OUTPUT_DIR="$out/ncclprof" NCCLPROF_TRACE="${NCCLREC_TRACE:-1}" NCCLPROF_HANG_TIMEOUT_S=20 \
  NCCLREC_LOGDIR="$out/calls" \
  "$out/ncclrec" "$nranks" "$out" "$iters"
