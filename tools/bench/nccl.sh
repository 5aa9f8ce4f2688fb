#!/usr/bin/env bash
# Callback cost on NCCL's call sequence with the drainer live (the test host's `bench-nccl`):
# net.cc's steps (each started, its three state records, stopped), 2 and 4 channels, 4 and 16
# steps, default mask and every type, paced (5,000 AllReduce/s) and unpaced, and the two NCCL
# patterns (restarted receive steps, CollNet ProxyOps never stopped), each against the floor
# (the empty plugin plus one TSC read per callback) measured beside it.
#
#   tools/bench/nccl.sh HOST PLUGIN EMPTY OUTDIR [REPS]
#
# Prints a table, the worst row, the load average and the commit (docs/bench-nccl.md).
set -euo pipefail
host=$1 plugin=$2 empty=$3 out=$4 reps=${5:-7}
rm -rf "$out" && mkdir -p "$out"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
if ! NCCLPROF_OUTPUT_DIR="$out/run" NCCLPROF_METRICS=none \
  "$host" --lib "$plugin" --empty-lib "$empty" --reps "$reps" bench-nccl >"$out/bench-nccl.json" 2>"$out/bench-nccl.err"; then
  cat "$out/bench-nccl.err" >&2
  echo "bench-nccl failed (its messages above, also in $out/bench-nccl.err)" >&2
  exit 1
fi
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
python3 - "$out/bench-nccl.json" "$load_before" "$load_after" "$commit" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
rows = d["rows"]
print("%-64s %8s %9s %7s %8s %8s" % ("row", "floor ns", "ncclprof", "ratio", "of means", "dropped"))
for r in rows:
    print("%-64s %8.2f %9.2f %7.3f %8.3f %8d" % (r["row"], r["floor_ns_per_callback"],
          r["ncclprof_ns_per_callback"], r["ratio"], r["ratio_of_means"], r["dropped"]))
worst = max(rows, key=lambda r: r["ratio"])
print("worst row: %s: %.3f x the floor (target <= 1.3); median of %d reps" % (worst["row"], worst["ratio"], d["reps"]))
print("load average before/after: %s / %s; commit %s" % (sys.argv[2], sys.argv[3], sys.argv[4]))
PY
