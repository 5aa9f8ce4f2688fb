#!/usr/bin/env bash
# Makes a Python environment the package's tests run in (build/py by default): pytest, and
# torch for the tests that run a real torch.profiler (CPU use). torch from PyPI brings its CUDA
# libraries (about 5.3 GB installed, 2.8 GB downloaded); where the disk has no room for it the
# environment is made without it, this says so loudly, and the torch tests are reported as
# skipped with the reason (NCCLPROF_TEST_NO_TORCH, written to <venv>/no-torch).
#
#   tools/python/venv.sh [VENV [TORCH]]   make it if missing (idempotent)
#
# TORCH is the pip requirement for torch: `torch` (the default: the newest on PyPI) or a pinned
# one such as `torch==2.7.0` (`make test` also tests the oldest torch the package supports, in a
# second environment). An environment made for another requirement is made again; pip's cache
# (~/.cache/pip) keeps the downloads.
set -euo pipefail
venv="${1:-build/py}"
torch_req="${2:-torch}"
python="${PYTHON:-python3}"

if [ -f "$venv/.ready" ]; then
  made_for="$(cat "$venv/.ready")"
  # An empty .ready was written by the version of this script that knew only `torch`.
  if [ "${made_for:-torch}" = "$torch_req" ]; then
    exit 0
  fi
  echo "tools/python/venv.sh: $venv was made for ${made_for:-torch}, remaking it for $torch_req" >&2
fi
command -v "$python" >/dev/null || { echo "tools/python/venv.sh: $python not found; install Python 3.11+ (the newest torch needs it) or set PYTHON" >&2; exit 1; }
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check pytest

mkdir -p "$venv"
avail_gib=$(( $(df --output=avail -k "$venv" | tail -1) / 1048576 ))
if [ "$avail_gib" -ge 9 ]; then
  echo "tools/python/venv.sh: installing $torch_req into $venv (2.8 GB download unless cached, a few minutes)" >&2
  "$venv/bin/pip" install -q --disable-pip-version-check "$torch_req"
  rm -f "$venv/no-torch"
else
  reason="the disk had ${avail_gib} GiB free; torch needs about 9"
  printf '\n##### %s: TORCH NOT INSTALLED, THE TORCH TESTS WILL BE SKIPPED #####\n\n' "$reason" >&2
  echo "$reason" >"$venv/no-torch"
fi
printf '%s' "$torch_req" >"$venv/.ready"
