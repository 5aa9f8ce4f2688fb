#!/usr/bin/env bash
# Builds (once) the Prometheus 3.x that the metrics example's tests run, and prints the path of
# the binary on stdout. Everything else goes to stderr.
#
#   tools/prometheus/build.sh            build if needed, print the path
#   tools/prometheus/build.sh --check    print the path if it is built already, else exit 1
#
# Prometheus is built from the Go module proxy (github.com/prometheus/prometheus is published
# there as v0.3XX.Y for Prometheus v3.XX.Y), in a temporary module outside the repository, without
# its web UI (the tests use the HTTP API only). The result is cached under
#   ${NCCLPROF_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ncclprof}/prometheus-<version>/
# like the collector (tools/otelcol/build.sh). A build took 10.2 minutes on a fresh 2-core machine.
# Debian's Prometheus (apt-get install prometheus: 2.42 on Debian 12) is the other version the
# tests run; examples/metrics/README.md says which configuration each one takes.
set -euo pipefail

PROMETHEUS_VERSION=3.16.0 # the release ...
module_version=v0.316.0   # ... and its module version (v3.XX.Y is v0.3XX.Y): change both together
go_bin="${GO:-go}"

die() {
  echo "tools/prometheus/build.sh: $*" >&2
  exit 1
}

. "$(dirname "${BASH_SOURCE[0]}")/../cache.sh"
bin="$cache_root/prometheus-$PROMETHEUS_VERSION/prometheus"
cache_lookup "$bin" "${1:-}"
command -v "$go_bin" >/dev/null 2>&1 || die "the Go toolchain ('$go_bin') is not on PATH; install Go or set GO=/path/to/go"

work="$(mktemp -d "${TMPDIR:-/tmp}/ncclprof-prometheus-build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
build() {
  export GOWORK=off CGO_ENABLED=0
  local pkg=github.com/prometheus/prometheus/cmd/prometheus ver=github.com/prometheus/common/version
  (
    cd "$work" &&
      "$go_bin" mod init ncclprof-prometheus >/dev/null 2>&1 &&
      "$go_bin" get "$pkg@$module_version" &&
      "$go_bin" build -trimpath -o prometheus \
        -ldflags="-s -w -X $ver.Version=$PROMETHEUS_VERSION -X $ver.Branch=ncclprof-build -X $ver.Revision=$module_version" \
        "$pkg"
  ) || die "the Prometheus build failed (see the go output above; GOPROXY=$("$go_bin" env GOPROXY))"
}
. "$(dirname "${BASH_SOURCE[0]}")/../progress.sh"
progress "tools/prometheus/build.sh: building Prometheus $PROMETHEUS_VERSION ($module_version) into $(dirname "$bin") (once per machine)" \
  "10 minutes on 2 cores" build
"$work/prometheus" --version >/dev/null 2>&1 || die "the built Prometheus does not run"

cache_publish "$work/prometheus" "$bin"
