#!/usr/bin/env bash
# overhead.sh: what ncclprof costs real NCCL against the empty plugin, on a machine with one GPU.
#
#   tools/nccl/record/overhead.sh NCCL_LIB_DIR BIN_DIR OUT [ROUNDS] [ITERS]
#
# The user's thread: overhead.py (torch's NCCL, self send/recv, no plugin / empty / ncclprof).
# The proxy thread: ncclrec's four ranks on the network path (a host each, socket transport),
# ITERS of each pattern, ROUNDS runs per plugin interleaved, the empty plugin asking for
# ncclprof's default event types; each step's time (GPU and proxy included) is the slowest
# rank's, and the report gives per step the median over rounds of ncclprof against the empty one.
set -u
lib=$1 bin=$(cd "$2" && pwd) out=$3 rounds=${4:-3} iters=${5:-50}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
python3 "$here/overhead.py" "$bin" --rounds "$rounds" | tee "$out/user-thread.txt"
export NCCLREC_SEPARATE_HOSTS=1 NCCLREC_NO_RECORDER=1 NCCLREC_TRACE=0 NCCLPROF_EMPTY_MASK=3871
for r in $(seq "$rounds"); do
  for p in empty ncclprof; do
    NCCLREC_PLUGIN="$bin/libnccl-profiler-$p.so" timeout -k 5 120 \
      bash "$here/record.sh" "$lib" "$bin" "$out/net/$p-$r" 4 "$iters" >/dev/null 2>&1
    echo "network path, round $r, $p: rc=$?"
  done
done
python3 - "$out/net" "$rounds" <<'PY' | tee "$out/network-path.txt"
import glob, json, statistics, sys
root, rounds = sys.argv[1], int(sys.argv[2])
def steps(run):  # the slowest rank's time per step
    ranks = [json.load(open(f)).get("step_ns", {}) for f in glob.glob(f"{root}/{run}/truth-*.json")]
    return {k: max(r[k] for r in ranks) for k in ranks[0]} if ranks else {}
got = {p: [steps(f"{p}-{r}") for r in range(1, rounds + 1)] for p in ("empty", "ncclprof")}
print(f"network path, 4 ranks, slowest rank per step, median of {rounds} runs (ms):")
for k in got["empty"][0]:
    e = statistics.median(s[k] for s in got["empty"] if k in s) / 1e6
    n = statistics.median(s[k] for s in got["ncclprof"] if k in s) / 1e6
    print(f"  {k:15s} empty {e:9.2f}  ncclprof {n:9.2f}  ratio {n / e:5.2f}")
print(json.dumps(got))
PY
