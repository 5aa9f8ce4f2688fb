"""Reads what a Linux ELF file needs from the system: its CPU, the shared libraries it links
and the glibc symbol versions it requires.

Used at build time to tag the wheel (a manylinux tag names the oldest glibc the binaries run
on) and at run time to say clearly when the bundled library is for another CPU. Standard
library only; reads the section headers, not the program headers, which is enough for files
produced by a normal linker.
"""

from __future__ import annotations

import dataclasses
import re
import struct

# e_machine values and the names Python (platform.machine()) and wheel tags use.
MACHINES = {62: "x86_64", 183: "aarch64", 3: "i686", 40: "arm", 21: "ppc64", 22: "s390x",
            243: "riscv64"}

SHT_DYNAMIC = 6
SHT_DYNSYM = 11
SHT_GNU_VERNEED = 0x6FFFFFFE
DT_NEEDED = 1

# Libraries every manylinux policy allows a wheel to link without bundling them.
MANYLINUX_LIBS = frozenset({
    "libc.so.6", "libpthread.so.0", "libdl.so.2", "libm.so.6", "librt.so.1", "libutil.so.1",
    "libgcc_s.so.1", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1",
})


class ELFError(ValueError):
    """The file is not an ELF file this module can read."""


@dataclasses.dataclass(frozen=True)
class ELFInfo:
    path: str
    machine: str            # "x86_64", "aarch64", … or "e_machine=<n>"
    elf_type: str           # "executable", "shared", …
    needed: tuple           # DT_NEEDED libraries, in file order
    glibc: tuple | None     # highest GLIBC_x.y version required, e.g. (2, 34); None: no glibc

    @property
    def static(self) -> bool:
        """True for a file that links no shared library at all (a static executable)."""
        return not self.needed

    def manylinux_ok(self) -> bool:
        return all(n in MANYLINUX_LIBS for n in self.needed)


def read(path: str) -> ELFInfo:
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF":
        raise ELFError(f"{path} is not an ELF file")
    if data[4] != 2:
        raise ELFError(f"{path} is a 32-bit ELF file; only 64-bit builds are supported")
    if data[5] != 1:
        raise ELFError(f"{path} is big-endian; only little-endian builds are supported")
    e_type, e_machine = struct.unpack_from("<HH", data, 16)
    e_shoff, = struct.unpack_from("<Q", data, 0x28)
    e_shentsize, e_shnum, _e_shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    sections = []
    for i in range(e_shnum):
        off = e_shoff + i * e_shentsize
        if off + 64 > len(data):
            raise ELFError(f"{path}: section header {i} lies outside the file (truncated?)")
        (_name, sh_type, _flags, _addr, sh_offset, sh_size, sh_link, _info, _align,
         _entsize) = struct.unpack_from("<IIQQQQIIQQ", data, off)
        sections.append((sh_type, sh_offset, sh_size, sh_link))

    def strtab(index: int):
        _, off, size, _ = sections[index]
        blob = data[off:off + size]
        return lambda o: blob[o:blob.index(b"\0", o)].decode("ascii", "replace")

    needed = []
    glibc = None
    for sh_type, off, size, link in sections:
        if sh_type == SHT_DYNAMIC:
            name = strtab(link)
            for p in range(off, off + size, 16):
                tag, val = struct.unpack_from("<qQ", data, p)
                if tag == 0:
                    break
                if tag == DT_NEEDED:
                    needed.append(name(val))
        elif sh_type == SHT_GNU_VERNEED:
            name = strtab(link)
            p = off
            while True:
                _ver, cnt, _file, aux, nxt = struct.unpack_from("<HHIII", data, p)
                a = p + aux
                for _ in range(cnt):
                    _hash, _flags, _other, vname, anext = struct.unpack_from("<IHHII", data, a)
                    m = re.fullmatch(r"GLIBC_(\d+)\.(\d+)(?:\.\d+)?", name(vname))
                    if m:
                        v = (int(m.group(1)), int(m.group(2)))
                        glibc = v if glibc is None or v > glibc else glibc
                    if anext == 0:
                        break
                    a += anext
                if nxt == 0:
                    break
                p += nxt
    kinds = {1: "relocatable", 2: "executable", 3: "shared", 4: "core"}
    return ELFInfo(path=path, machine=MACHINES.get(e_machine, f"e_machine={e_machine}"),
                   elf_type=kinds.get(e_type, str(e_type)), needed=tuple(needed), glibc=glibc)


def exported_symbols(path: str) -> set:
    """Names of the symbols a shared library defines for others (its dynamic symbol table,
    defined entries only), without loading it."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ELFError(f"{path} is not a 64-bit little-endian ELF file")
    e_shoff, = struct.unpack_from("<Q", data, 0x28)
    e_shentsize, e_shnum = struct.unpack_from("<HH", data, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", data, e_shoff + i * e_shentsize) for i in range(e_shnum)]
    out = set()
    for sec in secs:
        if sec[1] != SHT_DYNSYM:
            continue
        off, size, link, entsize = sec[4], sec[5], sec[6], sec[9] or 24
        str_off = secs[link][4]
        for p in range(off, off + size, entsize):
            st_name, _info, _other, st_shndx = struct.unpack_from("<IBBH", data, p)
            if st_name and st_shndx != 0:  # SHN_UNDEF: imported, not defined here
                end = data.index(b"\0", str_off + st_name)
                out.add(data[str_off + st_name:end].decode("ascii", "replace"))
    return out


def platform_tag(infos) -> str:
    """The wheel platform tag for a set of binaries: manylinux_<glibc>_<arch> when they link
    only the libraries manylinux allows (and at least glibc 2.17, the oldest tag pip still
    knows for x86_64 and aarch64), else linux_<arch>."""
    infos = list(infos)
    machines = {i.machine for i in infos}
    if len(machines) != 1:
        raise ELFError(f"binaries are built for different CPUs: {sorted(machines)}")
    arch = machines.pop()
    if not all(i.manylinux_ok() for i in infos):
        return f"linux_{arch}"
    glibc = max([(2, 17)] + [i.glibc for i in infos if i.glibc])
    return f"manylinux_{glibc[0]}_{glibc[1]}_{arch}"
