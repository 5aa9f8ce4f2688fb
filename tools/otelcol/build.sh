#!/usr/bin/env bash
# Builds (once) the OpenTelemetry Collector that ncclprof's end-to-end metrics tests run, and
# prints the path of the binary on stdout. Everything else goes to stderr.
#
#   tools/otelcol/build.sh            build if needed, print the path
#   tools/otelcol/build.sh --check    print the path if it is built already, else exit 1
#
# The collector is built with the collector's own builder (ocb) from the Go module proxy, in a
# temporary module outside the repository (the repository's go.mod is never touched), from
# tools/otelcol/manifest.yaml. The result is cached per version and manifest under
#   ${NCCLPROF_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ncclprof}/otelcol-<version>-<hash>/
# so later runs on the same machine print the cached path at once. A build takes about 3.5
# minutes on 2 cores and needs the Go toolchain and access to the module proxy.
set -euo pipefail

OTELCOL_VERSION=v0.155.0 # must match the component versions in manifest.yaml

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
manifest="$here/manifest.yaml"
go_bin="${GO:-go}"

die() {
  echo "tools/otelcol/build.sh: $*" >&2
  exit 1
}

command -v "$go_bin" >/dev/null 2>&1 || die "the Go toolchain ('$go_bin') is not on PATH; install Go or set GO=/path/to/go"
[ -r "$manifest" ] || die "cannot read $manifest"

hash="$( (echo "$OTELCOL_VERSION"; cat "$manifest") | sha256sum | cut -c1-12)"
. "$here/../cache.sh"
dest="$cache_root/otelcol-$OTELCOL_VERSION-$hash"
bin="$dest/ncclprof-otelcol"
cache_lookup "$bin" "${1:-}"

work="$(mktemp -d "${TMPDIR:-/tmp}/ncclprof-otelcol-build.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# build: the builder from the module proxy, the sources it generates, then the binary.
build() {
  export GOWORK=off GOBIN="$work/bin" CGO_ENABLED=0
  "$go_bin" install "go.opentelemetry.io/collector/cmd/builder@$OTELCOL_VERSION" ||
    die "cannot install the collector builder $OTELCOL_VERSION from the module proxy (GOPROXY=$("$go_bin" env GOPROXY))"
  # The builder generates the sources; the module is resolved and compiled here rather than by
  # the builder, because the builder's `go mod tidy` also fetches the test dependencies of every
  # component, and some of those (e.g. contrib's otlpencodingextension) are refused by the module
  # proxy ("403 This module version is not available"). `go get` of the pinned components and of
  # the generated package fetches only what the binary needs.
  sed "s|OUTPUT_PATH_SET_BY_BUILD_SH|$work/dist|" "$manifest" >"$work/manifest.yaml"
  (cd "$work" && "$work/bin/builder" --config "$work/manifest.yaml" --skip-get-modules --skip-compilation) ||
    die "the collector builder could not generate the sources (see its output above)"
  local mods=("go.opentelemetry.io/collector/otelcol@$OTELCOL_VERSION") mod ver
  while read -r mod ver; do
    mods+=("$mod@$ver")
  done < <(sed -n 's/^[[:space:]]*-[[:space:]]*gomod:[[:space:]]*\([^[:space:]]*\)[[:space:]]\{1,\}\([^[:space:]]*\).*/\1 \2/p' "$manifest")
  [ "${#mods[@]}" -gt 1 ] || die "no 'gomod:' components found in $manifest"
  (
    cd "$work/dist" &&
      "$go_bin" mod init ncclprof-otelcol >/dev/null 2>&1 &&
      "$go_bin" get "${mods[@]}" &&
      "$go_bin" get . &&
      "$go_bin" build -trimpath -ldflags='-s -w' -o ncclprof-otelcol .
  ) || die "the collector build failed (see the go output above; GOPROXY=$("$go_bin" env GOPROXY))"
}
. "$here/../progress.sh"
progress "tools/otelcol/build.sh: building the OpenTelemetry Collector $OTELCOL_VERSION into $dest (once per machine)" \
  "4 minutes on 2 cores" build
[ -x "$work/dist/ncclprof-otelcol" ] || die "the build finished but $work/dist/ncclprof-otelcol is missing"
"$work/dist/ncclprof-otelcol" components >/dev/null 2>&1 ||
  die "the built collector does not run ($work/dist/ncclprof-otelcol components failed)"

mkdir -p "$dest"
cp "$manifest" "$dest/manifest.yaml"
cache_publish "$work/dist/ncclprof-otelcol" "$bin"
