#!/usr/bin/env bash
# Makes a Python environment the package's tests run in (build/py by default): pytest, and
# torch for the tests that run a real torch.profiler (CPU use).
#
#   tools/python/venv.sh [VENV [TORCH]]   make it if missing (idempotent)
#
# TORCH is the pip requirement for torch, pinned (`make test` passes torch==2.15.0, the newest
# it is tested with, and torch==2.7.0, the oldest the package supports, for a second VENV).
# torch from PyPI brings its CUDA libraries (about 5.3 GB installed, 2.8 GB downloaded), so it
# is installed once per machine, in the project's cache, keyed by Python's version and TORCH:
#   ${NCCLPROF_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ncclprof}/py<X.Y>-<TORCH>/
# VENV itself is a small environment of its own (the package under test is installed there)
# that sees the cached one's packages through a .pth file, so every clone shares one torch.
# Where the disk has no room for torch the cached environment is made without it, this says so
# loudly, and the torch tests are reported as skipped with the reason (NCCLPROF_TEST_NO_TORCH,
# written to <venv>/no-torch); a later run with room installs it.
set -euo pipefail
venv="${1:-build/py}"
torch_req="${2:-torch}"
python="${PYTHON:-python3}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/../cache.sh"
. "$here/../progress.sh"

command -v "$python" >/dev/null || { echo "tools/python/venv.sh: $python not found; install Python 3.11+ (the newest torch needs it) or set PYTHON" >&2; exit 1; }
pyver="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
base="$cache_root/py$pyver-$(printf '%s' "$torch_req" | tr -c 'A-Za-z0-9.=_-' _)"

# make_base: the cached environment with pytest and, disk permitting, torch.
make_base() {
  [ -f "$base/.ready" ] && [ ! -f "$base/no-torch" ] && return 0
  cache_lock "$(basename "$base")"
  [ -f "$base/.ready" ] && [ ! -f "$base/no-torch" ] && return 0 # made by whoever held the lock
  if [ ! -f "$base/.ready" ]; then
    rm -rf "$base"
    "$python" -m venv "$base"
    "$base/bin/pip" install -q --disable-pip-version-check pytest
    touch "$base/.ready"
  fi
  local avail_gib
  avail_gib=$(($(df --output=avail -k "$base" | tail -1) / 1048576))
  if [ "$avail_gib" -ge 9 ]; then
    progress "tools/python/venv.sh: installing $torch_req into $base (once per machine; 2.8 GB download unless pip's cache has it)" \
      "3-6 minutes" "$base/bin/pip" install -q --disable-pip-version-check "$torch_req"
    rm -f "$base/no-torch"
  else
    local reason="the disk had ${avail_gib} GiB free; torch needs about 9"
    printf '\n##### %s: TORCH NOT INSTALLED, THE TORCH TESTS WILL BE SKIPPED #####\n\n' "$reason" >&2
    echo "$reason" >"$base/no-torch"
  fi
}

# make_venv: VENV, seeing the base's site-packages (after its own, so the package installed in
# VENV is the one imported).
make_venv() {
  if [ "$(cat "$venv/.ready" 2>/dev/null)" != "$base" ]; then
    rm -rf "$venv"
    "$python" -m venv "$venv"
    local own shared
    own="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
    shared="$("$base/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
    echo "$shared" >"$own/ncclprof-shared-env.pth"
    printf '%s' "$base" >"$venv/.ready"
  fi
  if [ -f "$base/no-torch" ]; then cp "$base/no-torch" "$venv/no-torch"; else rm -f "$venv/no-torch"; fi
}

make_base
make_venv
