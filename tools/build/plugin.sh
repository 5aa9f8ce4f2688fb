#!/bin/sh
# Builds one of the plugin's two libraries (the Makefile and python/setup.py both call this,
# so the flags live in one place):
#   tools/build/plugin.sh c  OUT.so   the library NCCL loads: every profiler/*.c, pure C ($CC)
#   tools/build/plugin.sh go OUT.so   the Go drainer library it loads from beside it ($GO)
# Run from the repository root. CC, GO and GOARCH come from the environment.
set -eu
what=$1
out=$2
case $what in
c)
  # -z nodelete: NCCL dlcloses the plugin between communicator lifetimes, and the Go library
  # this one starts keeps pointers into it (and cannot be unloaded itself).
  ${CC:-cc} -std=gnu11 -O2 -fPIC -shared -fvisibility=hidden -Wall -Wextra -Wno-unused-parameter \
    -Wno-missing-field-initializers -Werror=incompatible-pointer-types -o "$out" profiler/*.c \
    -Wl,-z,nodelete -Wl,--no-undefined -ldl -lpthread
  ;;
go)
  # The version script exports only what the C library looks up: cgo's glue stays local.
  CGO_ENABLED=1 ${GO:-go} build -buildmode=c-shared -trimpath \
    -ldflags="-s -w \"-extldflags=-Wl,--version-script=$(pwd)/tools/build/drain.map\"" -o "$out" ./drainer
  rm -f "${out%.so}.h"
  ;;
*)
  echo "usage: $0 c|go OUT.so" >&2
  exit 2
  ;;
esac
