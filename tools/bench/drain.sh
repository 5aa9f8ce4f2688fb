#!/usr/bin/env bash
# Whether the plugin keeps every operation when NCCL is at its busiest, and what its drainer
# costs: the test host's `drain` scenario (one thread calling like NCCL's user and proxy
# threads; one communicator; default event mask) for several shapes of AllReduce, paced at
# rising rates with a busy wait, then unpaced (as fast as the thread can call).
#
#   tools/bench/drain.sh HOST PLUGIN OUTDIR [SECONDS]
#
# Prints a table: per shape and rate, the events per second reached, events dropped (by type:
# untracked ones are missing from the figures, trace detail only from a trace), operations
# emitted and operations counted (with and without their timings), and the drainer's CPU per
# record it read and per event NCCL sent; then per shape the highest rate with zero drops.
set -euo pipefail
host=$1 plugin=$2 out=$3 secs=${4:-3}
rm -rf "$out" && mkdir -p "$out"
rates="2500 5000 10000 20000 40000 0"
shapes="4x16 1x4 16x2 2x64" # channels x steps per ProxyOp; 4x16 is the issue's shape

printf '%-6s %9s %8s %8s %10s %10s %8s %11s %10s %9s\n' shape rate AR/s "Mev/s" dropped untimed \
  missing "cpu ns/rec" "ns/event" core
for shape in $shapes; do
  ch=${shape%x*} st=${shape#*x}
  best=""
  for rate in $rates; do
    f="$out/$shape-$rate.json"
    NCCLPROF_OUTPUT_DIR="$out/$shape-$rate-out" NCCLPROF_METRICS=none \
      "$host" --lib "$plugin" --rate "$rate" --channels "$ch" --steps "$st" --seconds "$secs" \
      drain >"$f" 2>"$out/$shape-$rate.err"
    python3 - "$f" "$shape" "$rate" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
untimed = sum(v for k, v in d["untracked"].items() if k in ("Coll", "P2p"))
rate = "unpaced" if sys.argv[3] == "0" else sys.argv[3]
print("%-6s %9s %8.0f %8.2f %10d %10d %8d %11.1f %10.2f %9.3f" % (
    sys.argv[2], rate, d["collectives_per_s"], d["events_per_s"] / 1e6, d["dropped"], untimed,
    d["ops_missing"], d["drainer_cpu_ns_per_record"], d["drainer_cpu_ns_per_event"],
    d["drainer_core_share"]))
PY
    if python3 -c "import json,sys; d=json.load(open('$f')); sys.exit(0 if d['dropped']==0 and d['ops_missing']==0 else 1)"; then
      best=$(python3 -c "import json; d=json.load(open('$f')); print('%.2f M events/s (%d AllReduce/s)' % (d['events_per_s']/1e6, d['collectives_per_s']))")
    fi
  done
  echo "  $shape: highest rate with zero drops: ${best:-none}" >&2
done
