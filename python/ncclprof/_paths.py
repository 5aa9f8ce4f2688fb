"""Where the plugin library and ncclmerge are.

The plugin is two files side by side: the library NCCL loads (LIBRARY_NAME, pure C: what
NCCL_PROFILER_PLUGIN names and what the control calls use) and its drainer (DRAIN_NAME, Go),
which the first loads from its own directory at the first communicator.

An installed package carries them and ncclmerge in ncclprof/_bin/ (pip builds them). In a source checkout
that was never pip-installed, the package falls back to what `make` and
`go build -o build/ncclmerge ./cmd/ncclmerge` leave in <repo>/build/. NCCLPROF_LIBRARY and
NCCLPROF_NCCLMERGE name other builds explicitly.
"""

from __future__ import annotations

import os
import platform
import shutil

from ._errors import BinaryMissingError

LIBRARY_NAME = "libnccl-profiler-ncclprof.so"
DRAIN_NAME = "libncclprof-drain.so"
NCCLMERGE_NAME = "ncclmerge"

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
BIN_DIR = os.path.join(_PKG_DIR, "_bin")
# python/ncclprof/ -> <repo>/build when the package is used from a checkout.
_CHECKOUT_BUILD = os.path.join(os.path.dirname(os.path.dirname(_PKG_DIR)), "build")

_HOW_TO_BUILD = (
    "Install the package with pip (`pip install ./python` in the ncclprof repository builds "
    "both with Go), or in a checkout run `make` and `go build -o build/ncclmerge ./cmd/ncclmerge`, "
    "or point NCCLPROF_LIBRARY / NCCLPROF_NCCLMERGE at existing builds."
)


def _checked(path: str, var: str) -> str:
    if not os.path.isfile(path):
        raise BinaryMissingError(f"{var}={path}: no such file")
    return os.path.abspath(path)


def _find(name: str, var: str, usable) -> str | None:
    """`var`'s path if set (it must exist), else the first usable `name` in the package's _bin/
    or the checkout's build/; None when neither has it."""
    env = os.environ.get(var)
    if env:
        return _checked(env, var)
    for d in (BIN_DIR, _CHECKOUT_BUILD):
        p = os.path.join(d, name)
        if usable(p):
            return p
    return None


def library_path() -> str:
    """Absolute path of the plugin library this package uses and hands to NCCL."""
    p = _find(LIBRARY_NAME, "NCCLPROF_LIBRARY", os.path.isfile)
    if p:
        return p
    raise BinaryMissingError(
        f"the ncclprof plugin library ({LIBRARY_NAME}) is not in {BIN_DIR}. " + _HOW_TO_BUILD)


def ncclmerge_path() -> str:
    """Absolute path of the ncclmerge executable."""
    p = _find(NCCLMERGE_NAME, "NCCLPROF_NCCLMERGE",
              lambda p: os.path.isfile(p) and os.access(p, os.X_OK))
    if p:
        return p
    found = shutil.which(NCCLMERGE_NAME)
    if found:
        return os.path.abspath(found)
    raise BinaryMissingError(f"ncclmerge is not in {BIN_DIR} nor on PATH. " + _HOW_TO_BUILD)


def drain_path(library: str) -> str:
    """The drainer library the plugin library at `library` loads: the one beside the file it
    resolves to (a symlink is followed, as the plugin's own lookup does)."""
    return os.path.join(os.path.dirname(os.path.realpath(library)), DRAIN_NAME)


def check_library(path: str) -> None:
    """Raises BinaryMissingError with the reason when `path` cannot load in this process, or
    would turn itself off at the first communicator: another CPU, no drainer beside it, or a C
    library other than glibc (the drainer's Go c-shared runtime needs glibc)."""
    from . import _elf

    here = platform.machine()
    here = {"amd64": "x86_64", "arm64": "aarch64"}.get(here.lower(), here)
    drain = drain_path(path)
    if not os.path.isfile(drain):
        raise BinaryMissingError(
            f"{path} needs its drainer {DRAIN_NAME} beside it ({drain} is missing); without it "
            "the plugin turns itself off at the first communicator. The two files come together "
            "from every ncclprof build: copy or install both.")
    for p in (path, drain):
        try:
            info = _elf.read(p)
        except (OSError, _elf.ELFError) as e:
            raise BinaryMissingError(f"cannot read the plugin library {p}: {e}") from None
        if info.machine != here:
            raise BinaryMissingError(
                f"{p} is built for {info.machine}, this machine is {here}: install the ncclprof "
                f"wheel for {here} (or build it here with `pip install ./python`).")
    libc, _ = platform.libc_ver()
    if libc and libc != "glibc":
        raise BinaryMissingError(
            f"this Python runs on {libc}, but the ncclprof plugin (a Go c-shared library) needs "
            "glibc: use a glibc-based image (Debian, Ubuntu, RHEL, …), not Alpine/musl.")
