#!/usr/bin/env python3
"""slim_fatbin.py: blank the GPU code a shared library carries for other GPUs than one.

    slim_fatbin.py IN OUT SM        e.g. libnccl.so.2 libnccl-sm90.so.2 90

NCCL's wheel (`nvidia-nccl-cu13`, about 250 MB) holds cubins for every architecture it
supports in its `.nv_fatbin` and `__nv_relfatbin` sections; a device session can carry 64 MiB.
The CUDA driver loads the entry whose architecture matches the GPU, so the others can be zeroed
in place (sizes and offsets unchanged): the file then compresses to a fraction (NCCL 2.30.7 for
sm_90: 38 MB with xz). For carrying a library to a recording session only; never ship it.
Prints the bytes kept and blanked per (section, kind, arch).
"""
import struct
import sys
from collections import Counter

FATBIN_MAGIC = 0xBA55ED50


def sections(data):
    """(name, offset, size) of each ELF64 section."""
    shoff, = struct.unpack_from('<Q', data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from('<HHH', data, 0x3A)
    raw = [struct.unpack_from('<IIQQQQ', data, shoff + i * shentsize) for i in range(shnum)]
    stroff = raw[shstrndx][4]
    for name, _typ, _flags, _addr, off, size in raw:
        end = data.index(b'\0', stroff + name)
        yield data[stroff + name:end].decode(), off, size


def entries(data, off, size):
    """(entry offset, header size, payload size, kind, arch) of every fatbin in a section."""
    p, end = off, off + size
    while p + 16 <= end:
        magic, _ver, hsz, fsz = struct.unpack_from('<IHHQ', data, p)
        if magic != FATBIN_MAGIC:
            p += 8
            continue
        q, qend = p + hsz, p + hsz + fsz
        while q < qend:
            kind, _, ehsz, psz = struct.unpack_from('<HHIQ', data, q)
            arch, = struct.unpack_from('<I', data, q + 28)
            yield q, ehsz, psz, kind, arch
            q += ehsz + psz
        p = qend


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    src, dst, keep = sys.argv[1], sys.argv[2], int(sys.argv[3])
    data = bytearray(open(src, 'rb').read())
    seen = Counter()
    for name, off, size in sections(data):
        if name not in ('.nv_fatbin', '__nv_relfatbin'):
            continue
        for q, ehsz, psz, kind, arch in entries(data, off, size):
            kept = arch == keep
            seen[(name, 'ptx' if kind == 1 else 'cubin', arch, 'kept' if kept else 'blanked')] += psz
            if not kept:
                data[q + ehsz:q + ehsz + psz] = bytes(psz)
    if not any(k[3] == 'kept' for k in seen):
        sys.exit(f'slim_fatbin: no entry for sm_{keep} in {src}: nothing would run')
    for k, v in sorted(seen.items()):
        print(*k, v)
    open(dst, 'wb').write(data)


if __name__ == '__main__':
    main()
