#!/bin/sh
# Builds one of the plugin's two libraries (the Makefile and python/setup.py both call this,
# so the flags live in one place):
#   tools/build/plugin.sh c  OUT.so   the library NCCL loads: every plugin/*.c, pure C ($CC)
#   tools/build/plugin.sh go OUT.so   the Go drainer library it loads from beside it ($GO)
# Run from the repository root. CC, GO and GOARCH come from the environment.
set -eu
what=$1
out=$2
case $what in
c)
  # Each C file of plugin/ carries //go:build ncclprof_front, which keeps go build from
  # compiling it into the Go library (cgo compiles every .c file of the package).
  for f in plugin/*.c; do
    head -1 "$f" | grep -qx '//go:build ncclprof_front' ||
      { echo "$f: a C file of plugin/ must start with the line //go:build ncclprof_front" >&2; exit 1; }
  done
  # -z nodelete: NCCL dlcloses the plugin between communicator lifetimes, and the Go library
  # this one starts keeps pointers into it (and cannot be unloaded itself).
  ${CC:-cc} -std=gnu11 -O2 -fPIC -shared -fvisibility=hidden -Wall -Wextra -Wno-unused-parameter \
    -Wno-missing-field-initializers -Werror=incompatible-pointer-types -o "$out" plugin/*.c \
    -Wl,-z,nodelete -Wl,--no-undefined -ldl -lpthread
  ;;
go)
  # The version script exports only what the C library looks up: cgo's glue stays local.
  CGO_ENABLED=1 ${GO:-go} build -buildmode=c-shared -trimpath \
    -ldflags="-s -w \"-extldflags=-Wl,--version-script=$(pwd)/tools/build/drain.map\"" -o "$out" ./plugin
  rm -f "${out%.so}.h"
  ;;
*)
  echo "usage: $0 c|go OUT.so" >&2
  exit 2
  ;;
esac
