#!/usr/bin/env bash
# What `make test` needs beyond Go, gcc and make, installed where it is missing: run by
# `make test` (and so by .ci/run) before anything is built.
#
#   tools/deps.sh                  check everything, install what is missing, or stop at once
#                                  with the one command to run
#   tools/deps.sh go               only check that the Go on PATH can build this module
#   tools/deps.sh speedscope-dir   print the directory of speedscope's web app (for the tests)
#
# First every check (a second or two), so that what this cannot install itself stops the run
# before a long build: Debian packages (chromium, prometheus 2.x, nodejs/npm, python3-venv) are
# installed with apt-get when running as root, else it prints the one apt-get command to run and
# exits 1. Then, as the user: speedscope from npm into the project's cache (not npm's global
# prefix), and the OpenTelemetry Collector (tools/otelcol/build.sh), both cached under
#   ${NCCLPROF_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ncclprof}  (tools/cache.sh)
# `make test-go` builds Prometheus 3.x (tools/prometheus/build.sh) and HTA's venvs
# (tools/hta/venv.sh); `make test-python` the Python venvs (tools/python/venv.sh: build/py with
# pytest and torch). All of them are made once per machine in that cache and shared by clones.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

SPEEDSCOPE_VERSION=1.25.0
. tools/cache.sh    # cache_root
. tools/progress.sh # progress
speedscope_dir="$cache_root/speedscope-$SPEEDSCOPE_VERSION/node_modules/speedscope/dist/release"
go_bin="${GO:-go}"
python="${PYTHON:-python3}"

say() { echo "tools/deps.sh: $*" >&2; }

# version_ge A B: whether dotted version A >= B (numeric fields).
version_ge() {
  local IFS=.
  local -a a=($1) b=($2)
  local i
  for i in 0 1 2; do
    if ((${a[i]:-0} != ${b[i]:-0})); then
      ((${a[i]:-0} > ${b[i]:-0}))
      return
    fi
  done
  return 0
}

# check_go: the Go on PATH builds this module, itself or by fetching the toolchain go.mod names.
check_go() {
  command -v "$go_bin" >/dev/null ||
    { say "Go is not on PATH: install Go >= 1.26 from https://go.dev/dl (or set GO=/path/to/go)"; return 1; }
  local want have setting
  want="$(sed -n 's/^go \([0-9.]*\).*/\1/p' go.mod)"
  # Both asked outside the module, where go.mod cannot make the go command switch toolchains.
  have="$(cd / && GOTOOLCHAIN=local "$go_bin" env GOVERSION)"
  have="${have#go}"
  have="${have%%[-+ ]*}"
  version_ge "$have" "$want" && return 0
  if ! version_ge "$have" 1.21; then
    say "Go $have is too old to build this module (go.mod: go $want) or to fetch a newer toolchain: install Go >= $want from https://go.dev/dl"
    return 1
  fi
  setting="$(cd / && "$go_bin" env GOTOOLCHAIN)"
  case "$setting" in
  local | *+path | path)
    say "Go $have is older than go.mod's go $want and GOTOOLCHAIN=$setting forbids fetching go$want: run with GOTOOLCHAIN=auto (Go fetches it from the module proxy) or install Go >= $want from https://go.dev/dl"
    return 1
    ;;
  esac
  say "Go $have will fetch and use go$want (GOTOOLCHAIN=$setting) from the module proxy"
}

chromium_bin() { command -v chromium || command -v chromium-browser || true; }

# missing_packages: the Debian packages whose commands the tests need and this machine lacks.
missing_packages() {
  local pkgs=()
  [ -n "$(chromium_bin)" ] || pkgs+=(chromium)
  # Debian's Prometheus 2.x, one of the two the metrics example is tested with (or NCCLPROF_PROMETHEUS2).
  [ -x "${NCCLPROF_PROMETHEUS2:-/usr/bin/prometheus}" ] || pkgs+=(prometheus)
  if [ ! -f "$speedscope_dir/index.html" ] && ! command -v npm >/dev/null; then
    pkgs+=(nodejs npm)
  fi
  if ! command -v "$python" >/dev/null; then
    pkgs+=(python3 python3-venv)
  elif ! "$python" -c 'import ensurepip, venv' 2>/dev/null; then
    pkgs+=(python3-venv)
  fi
  echo "${pkgs[*]}"
}

install_packages() {
  local pkgs="$1"
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    local how="sudo apt-get install -y $pkgs"
    command -v apt-get >/dev/null || how="install with your package manager: $pkgs"
    say "the tests need $pkgs, which this machine lacks; run:"
    echo "    $how" >&2
    say "then run make test again"
    return 1
  fi
  progress "tools/deps.sh: installing $pkgs with apt-get" "1-3 minutes" apt_install "$pkgs"
}

apt_install() {
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $1 >/dev/null
}

install_speedscope() {
  [ -f "$speedscope_dir/index.html" ] && return 0
  local prefix="$cache_root/speedscope-$SPEEDSCOPE_VERSION"
  mkdir -p "$prefix"
  progress "tools/deps.sh: installing speedscope@$SPEEDSCOPE_VERSION from npm into $prefix (once per machine)" "30 s" \
    npm install --prefix "$prefix" --no-save --no-fund --no-audit --loglevel=error "speedscope@$SPEEDSCOPE_VERSION"
  [ -f "$speedscope_dir/index.html" ] || { say "npm installed speedscope but $speedscope_dir/index.html is missing"; return 1; }
}

case "${1:-all}" in
go)
  check_go
  exit
  ;;
speedscope-dir)
  echo "$speedscope_dir"
  exit
  ;;
all) ;;
*)
  say "unknown argument $1 (none, go or speedscope-dir)"
  exit 2
  ;;
esac

check_go
command -v gcc >/dev/null || { say "gcc is not on PATH: apt-get install -y gcc"; exit 1; }
pkgs="$(missing_packages)"
[ -z "$pkgs" ] || install_packages "$pkgs"
install_speedscope
tools/otelcol/build.sh >/dev/null
