#!/usr/bin/env bash
# The callback cost while something around the plugin is broken, next to the cost when nothing
# is: the test host's bench (ncclprof against the empty plugin, median of REPS runs) once per
# condition. Each condition's figure is a ratio to the empty plugin measured in the same run, so
# the machine's noise between runs cancels out; "vs normal" divides that by the normal run's.
#
#   tools/bench/faults.sh HOST PLUGIN EMPTY OUTDIR [REPS]
#
# Conditions: normal; windows overflowing (2 windows of 256 slots: most events dropped and
# counted); collector absent (OTLP to a closed port, exporting every 100 ms);
# collector hanging (a socket that accepts and never answers); output and trace directories
# unwritable; a full disk (a 2 MiB tmpfs, only where this may mount one).
set -euo pipefail
host=$1 plugin=$2 empty=$3 out=$4 reps=${5:-7}
rm -rf "$out" && mkdir -p "$out"

# The hanging collector: listens, never reads, lives until this script ends.
python3 -c '
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(64)
print(s.getsockname()[1], flush=True); time.sleep(3600)' >"$out/hang.port" &
hang_pid=$!
full=""
cleanup() {
  kill "$hang_pid" 2>/dev/null || true
  if [ -n "$full" ]; then umount "$full" 2>/dev/null || true; fi
}
trap cleanup EXIT
for _ in $(seq 50); do [ -s "$out/hang.port" ] && break; sleep 0.1; done
hang_port=$(cat "$out/hang.port")

# run NAME ENV...: one bench run with the condition's environment; its JSON goes to NAME.json.
run() {
  local name=$1; shift
  echo "  $name" >&2
  env NCCLPROF_OUTPUT_DIR="$out/$name-out" NCCLPROF_BENCH_TRACE_DIR="$out/$name-trace" "$@" \
    "$host" --lib "$plugin" --empty-lib "$empty" --reps "$reps" bench >"$out/$name.json" 2>"$out/$name.err"
  rm -rf "$out/$name-trace"
}

otlp=(NCCLPROF_METRICS=otlp OTEL_METRIC_EXPORT_INTERVAL=100 OTEL_EXPORTER_OTLP_PROTOCOL=grpc)
run normal
run windows_overflowing NCCLPROF_WINDOWS=2 NCCLPROF_WINDOW_SLOTS=256
run collector_absent "${otlp[@]}" OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:9
run collector_hanging "${otlp[@]}" OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$hang_port"
run dirs_unwritable NCCLPROF_OUTPUT_DIR=/proc/self/ncclprof-out NCCLPROF_BENCH_TRACE_DIR=/proc/self/ncclprof-trace
mkdir -p "$out/full"
if mount -t tmpfs -o size=2m tmpfs "$out/full" 2>/dev/null; then
  full="$out/full"
  run disk_full NCCLPROF_OUTPUT_DIR="$full/out" NCCLPROF_BENCH_TRACE_DIR="$full/trace"
else
  echo "  disk_full: skipped (cannot mount a small tmpfs here; needs root)" >&2
fi

python3 - "$out" <<'EOF'
import json, os, sys
out = sys.argv[1]
names = ["normal", "windows_overflowing", "collector_absent", "collector_hanging", "dirs_unwritable", "disk_full"]
rows = {n: json.load(open(os.path.join(out, n + ".json"))) for n in names
        if os.path.exists(os.path.join(out, n + ".json"))}
base = rows["normal"]["ratio_all_vs_empty_plus_tsc"]
print("%-20s %14s %14s %10s %10s %10s" % ("condition", "ncclprof ns/cb", "empty ns/cb", "ratio", "vs normal", "dropped"))
for n, r in rows.items():
    c = r["configs"]
    ratio = r["ratio_all_vs_empty_plus_tsc"]
    print("%-20s %14.2f %14.2f %10.3f %10.3f %10d" % (
        n, c["ncclprof_all_1thread"]["ns_per_callback"], c["empty_plus_tsc_1thread"]["ns_per_callback"],
        ratio, ratio / base, r["dropped"]))
EOF
for n in collector_absent collector_hanging dirs_unwritable disk_full; do
  [ -s "$out/$n.err" ] && { echo "-- what the plugin said under $n:"; sort "$out/$n.err" | uniq -c | head -5; }
done
exit 0
