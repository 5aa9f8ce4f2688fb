#!/usr/bin/env bash
# Makes the Python environments HTA (HolisticTraceAnalysis, from PyPI) runs in for the tests and
# the benchmark: one with pandas 2 and one with pandas 3 (HTA behaves differently under each; the
# merge's output must load in both). Each is made once per machine in the project's cache,
# keyed by HTA's version, pandas' major version and Python's, and DIR/hta-pandasN links to it,
# so every clone shares it.
#
#   tools/hta/venv.sh [DIR]     makes DIR/hta-pandas2 and DIR/hta-pandas3 (DIR: build)
set -euo pipefail
dir="${1:-build}"
python="${PYTHON:-python3}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/../cache.sh"
. "$here/../progress.sh"
# The versions the tests were written against; HTA 0.5.0 is the current release.
hta_version=0.5.0
command -v "$python" >/dev/null || { echo "tools/hta/venv.sh: $python not found; install Python 3 or set PYTHON" >&2; exit 1; }
pyver="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"

make_venv() { # pandas major version
  local venv="$cache_root/hta-$hta_version-pandas$1-py$pyver"
  if [ ! -f "$venv/.ready" ]; then
    cache_lock "hta-pandas$1"
  fi
  if [ ! -f "$venv/.ready" ]; then
    rm -rf "$venv"
    "$python" -m venv "$venv"
    progress "tools/hta/venv.sh: installing HolisticTraceAnalysis $hta_version with pandas $1 into $venv (once per machine)" \
      "1 minute" "$venv/bin/pip" install -q --disable-pip-version-check "HolisticTraceAnalysis==$hta_version" "pandas>=$1,<$(($1 + 1))" psutil
    "$venv/bin/python" -c 'import hta, pandas; print("hta ok, pandas", pandas.__version__)' >&2
    touch "$venv/.ready"
  fi
  cache_link "$venv" "$dir/hta-pandas$1"
}
make_venv 2
make_venv 3
