#!/usr/bin/env bash
# Checks this directory end to end with a real Prometheus: the C test host runs NCCL scenarios
# (p2p, AllReduce with KernelCh, AlltoAll) with the plugin, Prometheus ingests what it exports,
# and every query of grafana/ncclprof-dashboard.json must return data, none of it NaN, for each
# way in. Everything listens on 127.0.0.1.
#
#   PROMETHEUS=/path/to/prometheus examples/metrics/check-with-prometheus.sh
#
# Which way in depends on the Prometheus version (`prometheus --version`):
#   3.8 and later      prometheus.yml: the plugin pushes OTLP/gRPC to a collector (otelcol.yaml)
#                      that writes to Prometheus's OTLP receiver (exponential histograms arrive
#                      as native histograms, job "promcheck"); and Prometheus scrapes the
#                      plugin's endpoint (classic buckets, job "ncclprof").
#   2.x, 3.0 to 3.7    prometheus-2.yml: scraped only (classic buckets, job "ncclprof").
# Tested with Prometheus 3.16.0 (tools/prometheus/build.sh builds it) and Debian 12's 2.42.0
# (apt-get install prometheus). Needs python3, `make all` done and, for 3.8+, the collector
# (tools/otelcol/build.sh, or NCCLPROF_OTELCOL). Without PROMETHEUS, the one tools/prometheus/build.sh built is used,
# else the `prometheus` on PATH.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
die() {
  echo "check-with-prometheus.sh: $*" >&2
  exit 1
}

if [ -z "${PROMETHEUS:-}" ]; then
  PROMETHEUS="$("$root/tools/prometheus/build.sh" --check 2>/dev/null || command -v prometheus || true)"
  [ -n "$PROMETHEUS" ] || die "no Prometheus: set PROMETHEUS=/path/to/prometheus (3.8+, or 2.x), run tools/prometheus/build.sh, or apt-get install prometheus"
fi
[ -x "$PROMETHEUS" ] || die "PROMETHEUS=$PROMETHEUS is not an executable"
version="$("$PROMETHEUS" --version 2>&1 | sed -n 's/^prometheus, version \([0-9]*\)\.\([0-9]*\)\.\([0-9]*\).*/\1.\2.\3/p' | head -1)"
[ -n "$version" ] || die "$PROMETHEUS --version does not name a Prometheus version; is it Prometheus?"
major="${version%%.*}" minor="$(echo "$version" | cut -d. -f2)"
if [ "$major" -gt 3 ] || { [ "$major" -eq 3 ] && [ "$minor" -ge 8 ]; }; then
  mode=otlp config="$here/prometheus.yml" flags=(--web.enable-otlp-receiver)
elif [ "$major" -eq 2 ] || [ "$major" -eq 3 ]; then
  mode=scrape config="$here/prometheus-2.yml" flags=()
else
  die "Prometheus $version is too old for this example: it needs 2.x (prometheus-2.yml) or 3.8+ (prometheus.yml)"
fi

lib="$root/build/libnccl-profiler-ncclprof.so"
host="$root/build/ncclprof-testhost"
[ -x "$host" ] && [ -r "$lib" ] || die "the plugin and the test host are not built: run 'make all' first"
command -v python3 >/dev/null || die "python3 is needed to query Prometheus"

work="$(mktemp -d "${TMPDIR:-/tmp}/ncclprof-promcheck.XXXXXX")"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
prom_port=$(free_port) grpc_port=$(free_port) http_port=$(free_port) scrape_base=$(free_port)

# The example configuration with test ports: a 1 s scrape interval, the scrape job aimed at our
# three ranks (local ranks 1-3).
sed -e 's/scrape_interval: 15s/scrape_interval: 1s/' \
  -e "/- targets:/,/]/c\\      - targets: ['127.0.0.1:$((scrape_base + 1))', '127.0.0.1:$((scrape_base + 2))', '127.0.0.1:$((scrape_base + 3))']" \
  "$config" >"$work/prometheus.yml"
"$PROMETHEUS" --config.file="$work/prometheus.yml" "${flags[@]}" --storage.tsdb.path="$work/data" \
  --web.listen-address="127.0.0.1:$prom_port" >"$work/prometheus.log" 2>&1 &
prom_pid=$!
pids+=("$prom_pid")
for _ in $(seq 200); do
  kill -0 "$prom_pid" 2>/dev/null || break
  curl -sf "http://127.0.0.1:$prom_port/-/ready" >/dev/null && break
  sleep 0.1
done
if ! curl -sf "http://127.0.0.1:$prom_port/-/ready" >/dev/null; then
  err="$(grep -m1 -iE 'err|fail' "$work/prometheus.log" || tail -n 1 "$work/prometheus.log")"
  die "Prometheus $version did not start with $(basename "$config"): ${err:-no message}"
fi
echo "Prometheus $version with $(basename "$config")"
# Prometheus starts scraping a few seconds after it is ready (2.x: up to 5 s): wait until it has
# tried every target once, so that the short runs below are scraped from their start.
for _ in $(seq 150); do
  curl -sf "http://127.0.0.1:$prom_port/api/v1/targets" | python3 -c '
import json, sys
ts = json.load(sys.stdin)["data"]["activeTargets"]
sys.exit(0 if len(ts) == 3 and all(not t["lastScrape"].startswith("0001") for t in ts) else 1)' && break
  sleep 0.1
done

export NCCLPROF_OUTPUT_DIR="$work/out" OTEL_METRIC_EXPORT_INTERVAL=1000
# The three scenarios, each long enough (several seconds) for a few 1 s scrapes.
run3() { # run3 LABEL ENV...: the three scenarios with the environment given, in the background
  local label=$1
  shift
  (env "$@" LOCAL_RANK=1 "$host" --lib "$lib" --iters 20000 p2p >"$work/$label-p2p.log" 2>&1; date +%s.%N >"$work/end.$label-p2p") &
  (env "$@" LOCAL_RANK=2 NCCLPROF_EVENT_MASK=default,kernelch "$host" --lib "$lib" --kernel --iters 30000 allreduce \
    >"$work/$label-allreduce.log" 2>&1; date +%s.%N >"$work/end.$label-allreduce") &
  (env "$@" LOCAL_RANK=3 "$host" --lib "$lib" --iters 12000 alltoall >"$work/$label-alltoall.log" 2>&1
   date +%s.%N >"$work/end.$label-alltoall") &
}
if [ "$mode" = otlp ]; then
  col="${NCCLPROF_OTELCOL:-$("$root/tools/otelcol/build.sh")}" || die "no collector: tools/otelcol/build.sh failed"
  sed -e "s/:4317/:$grpc_port/" -e "s/:4318/:$http_port/" "$here/otelcol.yaml" >"$work/otelcol.yaml"
  OTELCOL_LISTEN=127.0.0.1 PROMETHEUS_OTLP="http://127.0.0.1:$prom_port/api/v1/otlp" \
    "$col" --config "$work/otelcol.yaml" >"$work/otelcol.log" 2>&1 &
  pids+=($!)
  run3 otlp OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$grpc_port" OTEL_EXPORTER_OTLP_PROTOCOL=grpc \
    OTEL_SERVICE_NAME=promcheck
fi
run3 scraped NCCLPROF_METRICS=prometheus NCCLPROF_PROMETHEUS_PORT="$scrape_base"
for p in $(jobs -p); do
  case " ${pids[*]} " in *" $p "*) ;; *) wait "$p" || true ;; esac
done
for f in "$work"/*.log; do
  case "$f" in */prometheus.log | */otelcol.log) continue ;; esac
  if grep -q "WARN" "$f"; then echo "note: $(basename "$f"): $(grep -m1 'WARN' "$f")"; fi
done
sleep 3 # the last pushes and scrapes
# Evaluate just before the first scraped process ended: a scraped series goes stale (no value)
# once its process is gone, which a live job never does.
at="$(cat "$work"/end.scraped-* | sort -n | head -1)"

python3 - "$prom_port" "$here/grafana/ncclprof-dashboard.json" "$mode" "$at" <<'PY'
import json, math, sys, urllib.error, urllib.parse, urllib.request
port, path, mode, at = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]) - 1
def query(expr):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr, "time": at})
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return json.load(r)["data"]["result"], None
    except urllib.error.HTTPError as e:
        return [], e.read().decode()[:300]
    except (urllib.error.URLError, OSError) as e:
        print(f"check-with-prometheus.sh: cannot query Prometheus on port {port}: {e}", file=sys.stderr)
        sys.exit(1)
def nan(res):
    """The series whose value is NaN or infinite."""
    bad = []
    for s in res:
        v = s.get("value", [0, "0"])[1]
        if math.isnan(float(v)) or math.isinf(float(v)):
            bad.append(s["metric"])
    return bad
failed = 0
def check(label, expr):
    global failed
    res, err = query(expr)
    bad = nan(res)
    ok = err is None and len(res) > 0 and not bad
    failed += not ok
    why = err or (f"NaN in {bad[:3]}" if bad else "") or ("no data" if not res else "")
    print(f"{'ok ' if ok else 'BAD'} {len(res):3d} series  {label} {why}")
dash = json.load(open(path))
for job in (["promcheck", "ncclprof"] if mode == "otlp" else ["ncclprof"]):
    way = "OTLP through the collector, native histograms" if job == "promcheck" else "scraped, classic buckets"
    print(f"-- dashboard, job {job} ({way})")
    for p in dash["panels"]:
        for t in p.get("targets", []):
            e = t["expr"].replace('"$job"', f'"{job}"').replace("$__rate_interval", "1m")
            for var in ("comm", "op"):
                e = e.replace(f'"${var}"', '".*"')
            check(f"{p['title']} [{t['refId']}]", e)
print("-- the ways in")
if mode == "otlp":
    check("native histograms via OTLP", 'histogram_count(sum(rate(ncclprof_op_completion_duration_seconds{job="promcheck"}[1m])))')
    check("promoted resource attribute", 'ncclprof_ops_total{job="promcheck", ncclprof_local_rank="1"}')
check("classic buckets, scraped", 'sum(rate(ncclprof_op_completion_duration_seconds_bucket{job="ncclprof"}[1m]))')
sys.exit(1 if failed else 0)
PY
echo "examples/metrics: every dashboard query returned data, none NaN (Prometheus $version, $(basename "$config"))"
