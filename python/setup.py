"""Builds the ncclprof wheel: the Python package plus the plugin (its two libraries: the C one
NCCL loads and the Go drainer it loads from beside it) and ncclmerge, all compiled from the
repository this directory belongs to (python/ in the ncclprof repository).

Building needs Go (>= the version in go.mod; `go` on PATH, or GO=/path/to/go), a C compiler (cc,
or CC=...) and a POSIX shell. The installed package needs none of them. Cross-compiling: set
GOARCH and CC (for example GOARCH=arm64 CC=aarch64-linux-gnu-gcc); the wheel is tagged from the
binaries themselves.
"""

import importlib.util
import os
import re
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist
from setuptools.dist import Distribution

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
MODULE = "github.com/ncclprof/ncclprof"
LIBRARY = "libnccl-profiler-ncclprof.so"
DRAIN = "libncclprof-drain.so"
NCCLMERGE = "ncclmerge"


class BuildError(RuntimeError):
    pass


def _load_elf():
    path = os.path.join(HERE, "ncclprof", "_elf.py")
    spec = importlib.util.spec_from_file_location("_ncclprof_build_elf", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _check_repo():
    gomod = os.path.join(REPO, "go.mod")
    try:
        with open(gomod) as f:
            first = f.readline().split()
    except OSError:
        first = []
    if first != ["module", MODULE]:
        raise BuildError(
            f"ncclprof is built from its repository: {gomod} (module {MODULE}) was not found "
            "next to this python/ directory. Build from a checkout: `pip install ./python` or "
            "`make wheel` in the repository root (there is no source distribution).")


def _go():
    go = os.environ.get("GO") or shutil.which("go")
    if not go and os.path.exists("/usr/local/go/bin/go"):
        go = "/usr/local/go/bin/go"
    if not go:
        raise BuildError("building ncclprof needs Go (https://go.dev/dl, the version go.mod "
                         "names or newer) on PATH, or GO=/path/to/go; the installed package "
                         "does not need it.")
    return go


def _check_versions():
    with open(os.path.join(REPO, "profiler", "core.h")) as f:
        m = re.search(r'#define\s+NCCLPROF_VERSION\s+"([^"]+)"', f.read())
    with open(os.path.join(HERE, "ncclprof", "_version.py")) as f:
        p = re.search(r'__version__\s*=\s*"([^"]+)"', f.read())
    if not m or not p or m.group(1) != p.group(1):
        raise BuildError(
            f"version mismatch: profiler/core.h says {m and m.group(1)!r}, "
            f"python/ncclprof/_version.py says {p and p.group(1)!r}; make them equal.")


def _run(cmd, env):
    print("ncclprof build:", " ".join(cmd), flush=True)
    r = subprocess.run(cmd, cwd=REPO, env=env)
    if r.returncode != 0:
        raise BuildError(f"`{' '.join(cmd)}` failed (exit status {r.returncode}); see its output above")


def build_binaries(out_dir):
    """Builds the plugin's two libraries and ncclmerge into out_dir, with the script the
    Makefile uses (tools/build/plugin.sh)."""
    _check_repo()
    _check_versions()
    go = _go()
    out_dir = os.path.abspath(out_dir)  # the builds run in the repository root
    os.makedirs(out_dir, exist_ok=True)
    lib = os.path.join(out_dir, LIBRARY)
    drain = os.path.join(out_dir, DRAIN)
    merge = os.path.join(out_dir, NCCLMERGE)
    script = os.path.join("tools", "build", "plugin.sh")
    env = dict(os.environ, GO=go, CC=os.environ.get("CC") or "cc")
    _run(["sh", script, "c", lib], env)
    _run(["sh", script, "go", drain], env)
    # ncclmerge needs no C: a static executable runs on any Linux of its architecture.
    _run([go, "build", "-trimpath", "-ldflags=-s -w", "-o", merge, "./cmd/ncclmerge"],
         dict(os.environ, CGO_ENABLED="0"))
    for p in (merge, lib, drain):
        os.chmod(p, 0o755)
    elf = _load_elf()
    infos = [elf.read(lib), elf.read(merge), elf.read(drain)]
    for name, info in ((LIBRARY, infos[0]), (DRAIN, infos[2])):
        print(f"ncclprof build: {name} ({info.machine}, needs {info.needed}, glibc {info.glibc})",
              flush=True)
    print(f"ncclprof build: wheel platform {elf.platform_tag(infos)}", flush=True)
    return infos


class BuildPy(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            out = os.path.join(HERE, "ncclprof", "_bin")  # gitignored
        else:
            out = os.path.join(self.build_lib, "ncclprof", "_bin")
        try:
            build_binaries(out)
        except BuildError as e:
            sys.exit(f"error: {e}")


class BdistWheel(bdist_wheel):
    def get_tag(self):
        build_lib = self.get_finalized_command("build_py").build_lib
        bins = os.path.join(build_lib, "ncclprof", "_bin")
        if not os.path.exists(os.path.join(bins, LIBRARY)):  # editable: built in place
            bins = os.path.join(HERE, "ncclprof", "_bin")
        elf = _load_elf()
        plat = elf.platform_tag([elf.read(os.path.join(bins, name))
                                 for name in (LIBRARY, DRAIN, NCCLMERGE)])
        # The binaries do not use Python's C API: one wheel serves every Python 3.
        return "py3", "none", plat


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True  # platform-specific: installed to platlib, wheel not pure


class NoSdist(sdist):
    def run(self):
        sys.exit("error: ncclprof has no source distribution: its wheel is built from the "
                 "repository (Go and C sources outside python/). Use `make wheel` or "
                 "`pip install ./python` in a checkout.")


setup(distclass=BinaryDistribution,
      cmdclass={"build_py": BuildPy, "bdist_wheel": BdistWheel, "sdist": NoSdist})
