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
# Four ranks time-slicing one GPU run a whole run in one of a few paces far apart (2.5, 4.5 or
# 6.5 s of collectives on an H100), whatever the plugin: medians over 3 runs can compare two
# paces. So runs are also compared within a pace: each ncclprof run against the empty runs
# whose total is within 10 % of its own.
total = lambda s: sum(s.values())
pairs = [(n, e) for n in got["ncclprof"] for e in got["empty"]
         if n and e and abs(total(n) - total(e)) <= 0.1 * total(e)]
print(f"within a pace ({len(pairs)} ncclprof/empty run pairs of totals within 10 %): "
      "median ratio per step")
for k in got["empty"][0]:
    r = [n[k] / e[k] for n, e in pairs if k in n and k in e and e[k] > 0]
    print(f"  {k:15s} " + (f"ratio {statistics.median(r):5.3f} over {len(r)} pairs" if r else "no pair"))
print(json.dumps(got))
PY
