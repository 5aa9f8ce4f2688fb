#!/usr/bin/env bash
# pack.sh: what a device session needs, built here, in one folder to carry (`.gpu/`, which git
# ignores through .git/info/exclude): the plugin, its drainer, the recorder, the empty plugin and
# ncclmerge (xz),
# and NCCL VERSION from PyPI slimmed to one GPU architecture (slim_fatbin.py) with its headers.
#
#   tools/nccl/record/pack.sh [VERSION] [SM]      (default 2.30.7 and 90: an H100 or H200)
#
# Then, with the device tool: run `bash tools/nccl/record/device.sh` carrying `.gpu`.
set -eu
version=${1:-2.30.7} sm=${2:-90}
root=$(cd "$(dirname "$0")/../../.." && pwd)
out=$root/.gpu
exclude=$(git -C "$root" rev-parse --git-path info/exclude)
mkdir -p "$out" "$(dirname "$exclude")"
grep -qx '/.gpu/' "$exclude" 2>/dev/null || echo '/.gpu/' >>"$exclude"
make -C "$root" -s all
tar -C "$root/build" -cJf "$out/bins.tar.xz" libnccl-profiler-ncclprof.so libncclprof-drain.so \
  libnccl-profiler-recorder.so libnccl-profiler-empty.so ncclmerge
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_18_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_28_x86_64 \
  --platform manylinux2014_x86_64 -d "$tmp" "nvidia-nccl-cu13==$version"
(cd "$tmp" && unzip -q -o ./*.whl 'nvidia/nccl/lib/libnccl.so.2' 'nvidia/nccl/include/*')
python3 "$root/tools/nccl/record/slim_fatbin.py" "$tmp/nvidia/nccl/lib/libnccl.so.2" "$tmp/libnccl.so.2" "$sm" >/dev/null
xz -T0 -6 -c "$tmp/libnccl.so.2" >"$out/libnccl.so.2.xz"
tar -C "$tmp/nvidia/nccl" -cf "$out/nccl-inc.tar" include
echo "$version sm_$sm" >"$out/NCCL_VERSION"
du -sh "$out"/*
