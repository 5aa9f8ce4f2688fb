#!/usr/bin/env bash
# device.sh: one device session's work, on a machine with one GPU, from what pack.sh put in
# .gpu/: examples/one_gpu_check.py with torch's own NCCL, then real NCCL recorded (pack.sh's
# NCCL and torch's, network path; pack.sh's on one node), then ncclprof alone beside both at
# 200 iterations, then what ncclprof costs real NCCL against the empty plugin (overhead.sh).
# Everything comes back as a few compressed files under $OUT.
#
#   bash tools/nccl/record/device.sh [PART ...]    (check record load overhead sampled;
#                                                   default all)
set -u
parts=" ${*:-check record load overhead sampled} "
want() { [[ $parts == *" $1 "* ]]; }
root=$(pwd) out=${OUT:-/tmp/out} w=/tmp/ncclprof-device
mkdir -p "$out" "$w/nccl" "$root/build"
exec > >(tee "$out/device.log") 2>&1
t0=$(date +%s)
at() { echo "== $(($(date +%s) - t0)) s: $*"; }
tar -xJf .gpu/bins.tar.xz -C "$root/build" && tar -xf .gpu/nccl-inc.tar -C "$w/nccl" &&
  xz -dc .gpu/libnccl.so.2.xz >"$w/nccl/libnccl.so.2" || { echo "device.sh: run pack.sh first"; exit 2; }
torch_nccl=$(python3 -c "import nvidia.nccl as m; print(list(m.__path__)[0])")/lib
nvidia-smi -L; cat .gpu/NCCL_VERSION; python3 -c "import torch; print('torch', torch.__version__, torch.cuda.nccl.version())"
rec=tools/nccl/record/record.sh
if want check; then
  PYTHONUNBUFFERED=1 timeout -k 5 150 python3 examples/one_gpu_check.py --out "$w/gpucheck"; at "one_gpu_check rc=$?"
fi
if want record; then
  NCCLREC_SEPARATE_HOSTS=1 timeout -k 5 150 bash $rec "$w/nccl" build "$w/rec/net-new" 4 20; at "net rc=$?"
  NCCLREC_SEPARATE_HOSTS=1 timeout -k 5 150 bash $rec "$torch_nccl" build "$w/rec/net-torch" 4 20; at "net torch rc=$?"
  timeout -k 5 150 bash $rec "$w/nccl" build "$w/rec/p2p-new" 4 20; at "p2p rc=$?"
fi
if want load; then
  NCCLREC_SEPARATE_HOSTS=1 NCCLREC_NO_RECORDER=1 timeout -k 5 150 bash $rec "$w/nccl" build "$w/load/new" 4 200; at "load rc=$?"
  NCCLREC_SEPARATE_HOSTS=1 NCCLREC_NO_RECORDER=1 timeout -k 5 150 bash $rec "$torch_nccl" build "$w/load/torch" 4 200; at "load torch rc=$?"
fi
if want overhead; then
  timeout -k 5 300 bash tools/nccl/record/overhead.sh "$torch_nccl" build "$w/overhead" 3 50; at "overhead rc=$?"
fi
if want sampled; then # sampled tracing (1 in 10) and no whole-run trace, as a job runs always on
  NCCLREC_SEPARATE_HOSTS=1 NCCLREC_NO_RECORDER=1 NCCLREC_TRACE=0 NCCLPROF_TRACE_SAMPLE=10 \
    timeout -k 5 150 bash $rec "$torch_nccl" build "$w/sampled" 4 50; at "sampled rc=$?"
  for f in "$w"/sampled/ncclprof/*sampled*.trace.json; do
    build/ncclmerge check "$f" >"$f.check.txt" 2>&1; echo "check $(basename "$f") rc=$?"
  done
  build/ncclmerge stats "$w"/sampled/ncclprof/*sampled*.trace.json >"$w/sampled/stats.txt" 2>&1
  echo "stats rc=$?"; head -30 "$w/sampled/stats.txt"
fi
cd "$w" && mkdir -p gpucheck rec load overhead sampled &&
  tar --exclude=ncclrec --exclude=lib --exclude='nccl.*.log' --exclude='*.trace.json' \
    -cJf "$out/device.tar.xz" gpucheck rec load overhead sampled
ls -la "$out"; at done
