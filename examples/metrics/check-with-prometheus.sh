#!/usr/bin/env bash
# Checks this directory end to end with a real Prometheus: the C test host runs NCCL scenarios
# with the plugin exporting over OTLP/gRPC to a collector started from otelcol.yaml, which writes
# to Prometheus (started from prometheus.yml, OTLP receiver on); a second run is scraped from the
# plugin's own endpoint (NCCLPROF_METRICS=prometheus). Then every query of
# grafana/ncclprof-dashboard.json must return data. Everything listens on 127.0.0.1.
#
#   PROMETHEUS=/path/to/prometheus examples/metrics/check-with-prometheus.sh
#
# Needs Prometheus 3.8+ (scrape_native_histograms), python3, `make all` done, and the collector
# from tools/otelcol/build.sh. Prometheus can be built from the module proxy:
#   mkdir /tmp/p && cd /tmp/p && go mod init p && go get github.com/prometheus/prometheus/cmd/prometheus@v0.309.1 &&
#   go build -o prometheus github.com/prometheus/prometheus/cmd/prometheus      # about 8 CPU-minutes
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
: "${PROMETHEUS:?set PROMETHEUS to a Prometheus 3.8+ binary}"
col="$("$root/tools/otelcol/build.sh")"
lib="$root/build/libnccl-profiler-ncclprof.so"
host="$root/build/ncclprof-testhost"
[ -x "$host" ] && [ -r "$lib" ] || { echo "run 'make all' first" >&2; exit 1; }

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

# The examples with test ports: a 1 s scrape interval, the scrape job aimed at our one rank.
sed -e 's/scrape_interval: 15s/scrape_interval: 1s/' \
    -e "/- targets:/,/]/c\\      - targets: ['127.0.0.1:$((scrape_base + 1))']" \
    "$here/prometheus.yml" >"$work/prometheus.yml"
sed -e "s/:4317/:$grpc_port/" -e "s/:4318/:$http_port/" "$here/otelcol.yaml" >"$work/otelcol.yaml"

"$PROMETHEUS" --config.file="$work/prometheus.yml" --web.enable-otlp-receiver \
  --storage.tsdb.path="$work/data" --web.listen-address="127.0.0.1:$prom_port" >"$work/prometheus.log" 2>&1 &
pids+=($!)
OTELCOL_LISTEN=127.0.0.1 PROMETHEUS_OTLP="http://127.0.0.1:$prom_port/api/v1/otlp" \
  "$col" --config "$work/otelcol.yaml" >"$work/otelcol.log" 2>&1 &
pids+=($!)
for i in $(seq 100); do
  curl -sf "http://127.0.0.1:$prom_port/-/ready" >/dev/null && break
  sleep 0.1
done

export NCCLPROF_OUTPUT_DIR="$work/out" OTEL_METRIC_EXPORT_INTERVAL=1000
otlp=(env OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$grpc_port" OTEL_EXPORTER_OTLP_PROTOCOL=grpc
  OTEL_SERVICE_NAME=promcheck LOCAL_RANK=0)
"${otlp[@]}" "$host" --lib "$lib" --iters 15000 p2p >"$work/p2p.log" 2>&1 &
"${otlp[@]}" NCCLPROF_EVENT_MASK=default,kernelch "$host" --lib "$lib" --kernel --iters 6000 allreduce >"$work/allreduce.log" 2>&1 &
"${otlp[@]}" "$host" --lib "$lib" --iters 3000 alltoall >"$work/alltoall.log" 2>&1 &
NCCLPROF_METRICS=prometheus NCCLPROF_PROMETHEUS_PORT="$scrape_base" LOCAL_RANK=1 \
  "$host" --lib "$lib" --iters 20000 p2p >"$work/scraped.log" 2>&1 &
wait %3 %4 %5 %6
sleep 5 # the last pushes and scrapes

python3 - "$prom_port" "$here/grafana/ncclprof-dashboard.json" <<'PY'
import json, sys, urllib.error, urllib.parse, urllib.request
port, path = sys.argv[1], sys.argv[2]
def query(expr):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url) as r:
            return json.load(r)["data"]["result"], None
    except urllib.error.HTTPError as e:
        return [], e.read().decode()[:300]
def fill(e):
    for var in ("job", "comm", "op"):
        e = e.replace(f'"${var}"', '".*"')
    return e.replace("$__rate_interval", "1m")
failed = 0
dash = json.load(open(path))
for p in dash["panels"]:
    for t in p.get("targets", []):
        res, err = query(fill(t["expr"]))
        ok = err is None and len(res) > 0
        failed += not ok
        print(f"{'ok ' if ok else 'BAD'} {len(res):3d} series  {p['title']} [{t['refId']}] {err or ''}")
for label, expr in [("OTLP path", 'ncclprof_ops_total{job="promcheck"}'),
                    ("scrape path (the process has exited: last value)", 'last_over_time(ncclprof_ops_total{job="ncclprof"}[1m])'),
                    ("native histograms, scraped", 'histogram_count(sum(rate(ncclprof_op_completion_duration_seconds{job="ncclprof"}[1m])))'),
                    ("promoted resource attribute", 'ncclprof_ops_total{ncclprof_local_rank="0"}')]:
    res, err = query(expr)
    ok = err is None and len(res) > 0
    failed += not ok
    print(f"{'ok ' if ok else 'BAD'} {len(res):3d} series  {label}: {expr} {err or ''}")
sys.exit(1 if failed else 0)
PY
echo "examples/metrics: every dashboard query returned data"
