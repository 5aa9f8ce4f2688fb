#!/usr/bin/env bash
# Runs one long step of the build with a log a person reads: what it does and about how long it
# takes, first; every 20 s how long it has run, and how many Go modules it has downloaded
# (instead of a "go: downloading" line per module); every other line of the step's output as it
# comes, errors included. The step's exit status is returned.
#
#   tools/progress.sh LABEL EXPECTED COMMAND...     e.g. tools/progress.sh "building Prometheus" "10 minutes" go build ...
#   . tools/progress.sh; progress LABEL EXPECTED COMMAND...     (from a script: COMMAND may be a function)
#
# NCCLPROF_PROGRESS_EVERY changes the 20 s (the tests use 1).

# progress LABEL EXPECTED COMMAND...: runs COMMAND with its output (stdout too) on stderr.
progress() {
  local label=$1 expected=$2
  shift 2
  local every=${NCCLPROF_PROGRESS_EVERY:-20} counted
  counted="$(mktemp "${TMPDIR:-/tmp}/ncclprof-progress.XXXXXX")"
  echo "$label (about $expected the first time) ..." >&2
  (
    start=$(date +%s) next=$every
    while sleep 1; do
      t=$(($(date +%s) - start)) # by the clock: on a loaded machine a second's sleep takes longer
      if ((t >= next)); then
        next=$((next + every))
        n=$(wc -l <"$counted" 2>/dev/null || echo 0)
        mods=""
        ((n > 0)) && mods=", $n Go modules downloaded"
        printf '  ... %s: %dm%02ds so far%s\n' "$label" $((t / 60)) $((t % 60)) "$mods" >&2
      fi
    done
  ) &
  local beat=$! rc=0
  # Left of ||, the group runs without errexit, so that the status is read whatever the caller set.
  {
    "$@" 2>&1 | _progress_filter "$counted"
    rc=${PIPESTATUS[0]}
  } || true
  kill "$beat" 2>/dev/null || true
  wait "$beat" 2>/dev/null || true
  rm -f "$counted"
  return "$rc"
}

# _progress_filter FILE: passes lines through to stderr but the go command's per-module lines,
# counted as a line each in FILE. "go: downloading go1.26.0 (linux/amd64)", the toolchain, stays.
_progress_filter() {
  local line
  while IFS= read -r line; do
    case $line in
    "go: downloading "*" v"*) echo >>"$1" ;;
    "go: added "* | "go: finding "* | "go: extracting "* | "go: upgraded "*) ;;
    *) printf '%s\n' "$line" >&2 ;;
    esac
  done
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  if [ $# -lt 3 ]; then
    echo "usage: $0 LABEL EXPECTED COMMAND..." >&2
    exit 2
  fi
  progress "$@"
fi
