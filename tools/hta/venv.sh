#!/usr/bin/env bash
# Makes the Python environments HTA (HolisticTraceAnalysis, from PyPI) runs in for the tests and
# the benchmark: one with pandas 2 and one with pandas 3 (HTA behaves differently under each; the
# merge's output must load in both). Idempotent: an environment with .ready is left as it is.
#
#   tools/hta/venv.sh [DIR]     makes DIR/hta-pandas2 and DIR/hta-pandas3 (DIR: build)
set -euo pipefail
dir="${1:-build}"
python="${PYTHON:-python3}"
# The versions the tests were written against; HTA 0.5.0 is the current release.
hta="HolisticTraceAnalysis==0.5.0"

make_venv() { # name, pandas requirement
  local venv="$dir/$1"
  [ -f "$venv/.ready" ] && return 0
  command -v "$python" >/dev/null || { echo "tools/hta/venv.sh: $python not found" >&2; return 1; }
  echo "tools/hta/venv.sh: installing $hta with $2 into $venv (once)" >&2
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "$hta" "$2" psutil
  "$venv/bin/python" -c 'import hta, pandas; print("hta ok, pandas", pandas.__version__)' >&2
  touch "$venv/.ready"
}
make_venv hta-pandas2 'pandas>=2,<3'
make_venv hta-pandas3 'pandas>=3,<4'
