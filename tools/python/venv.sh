#!/usr/bin/env bash
# Makes the Python environment the package's tests run in (build/py by default): pytest, and
# torch for the tests that run a real torch.profiler (CPU use). torch from PyPI brings its CUDA
# libraries (about 5.3 GB installed, 2.8 GB downloaded); where the disk has no room for it the
# environment is made without it, this says so loudly, and the torch tests are reported as
# skipped with the reason (NCCLPROF_TEST_NO_TORCH, written to <venv>/no-torch).
#
#   tools/python/venv.sh [VENV]      make it if missing (idempotent)
set -euo pipefail
venv="${1:-build/py}"
python="${PYTHON:-python3}"

if [ -f "$venv/.ready" ]; then
  exit 0
fi
command -v "$python" >/dev/null || { echo "tools/python/venv.sh: $python not found; install Python 3.8+ or set PYTHON" >&2; exit 1; }
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check pytest

mkdir -p "$venv"
avail_gib=$(( $(df --output=avail -k "$venv" | tail -1) / 1048576 ))
if [ "$avail_gib" -ge 9 ]; then
  echo "tools/python/venv.sh: installing torch into $venv (2.8 GB download, a few minutes)" >&2
  "$venv/bin/pip" install -q --disable-pip-version-check torch
  rm -f "$venv/no-torch"
else
  reason="the disk had ${avail_gib} GiB free; torch needs about 9"
  printf '\n##### %s: TORCH NOT INSTALLED, THE TORCH TESTS WILL BE SKIPPED #####\n\n' "$reason" >&2
  echo "$reason" >"$venv/no-torch"
fi
touch "$venv/.ready"
