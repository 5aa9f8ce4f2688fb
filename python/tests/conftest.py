"""Shared helpers of the ncclprof Python tests.

The tests run against the ncclprof package as installed (pip install ./python, or -e) and its
real binaries. Anything that loads the plugin library runs in a subprocess: the plugin's Go
runtime reads its variables once per process, and the tests of enable() need a process in which
the library was never loaded.
"""

import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

import ncclprof

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent.parent
# The real Kineto traces the tests read (with their license and provenance: its README.md).
KINETO_TRACES = REPO / "testdata" / "kineto"

# Variables that configure NCCL's profiler plugin or ncclprof: cleared for every test.
_CONFIG_PREFIXES = ("NCCLPROF_", "NCCL_PROFILER", "NCCL_INSPECTOR", "OTEL_")
# Which builds to test (kept): NCCLPROF_LIBRARY=/other/libnccl-profiler-ncclprof.so pytest ...
_BUILD_SELECTORS = ("NCCLPROF_LIBRARY", "NCCLPROF_NCCLMERGE")


def config_free_env(extra=None) -> dict:
    """This environment without ncclprof/NCCL profiler configuration, plus NCCLPROF_METRICS=none
    (no metrics exporter in test processes unless a test asks for one) and `extra`."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(_CONFIG_PREFIXES) or k in _BUILD_SELECTORS}
    env["NCCLPROF_METRICS"] = "none"
    env.pop("RANK", None)
    env.pop("LOCAL_RANK", None)
    env.pop("WORLD_SIZE", None)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS)] + ([os.environ["PYTHONPATH"]]
                                                        if os.environ.get("PYTHONPATH") else []))
    env.update(extra or {})
    return env


def run_py(*code: str, env=None, timeout=120, cwd=None, check=True) -> subprocess.CompletedProcess:
    """Runs the code (parts, each dedented) in a fresh interpreter (this one's), with the tests
    directory importable (nccl_standin) and no ncclprof/NCCL profiler variables unless given."""
    src = "\n".join(textwrap.dedent(c) for c in code)
    with tempfile.TemporaryDirectory(prefix="ncclprof-test-") as scratch:
        # A scratch working directory: whatever the plugin writes by default stays out of the tree.
        p = subprocess.run([sys.executable, "-c", src], capture_output=True,
                           text=True, timeout=timeout, env=config_free_env(env),
                           cwd=cwd or scratch, stdin=subprocess.DEVNULL)
    if check and p.returncode != 0:
        raise AssertionError(f"subprocess failed with exit status {p.returncode}\n"
                             f"--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}")
    return p


def real_trace(name: str) -> Path:
    p = KINETO_TRACES / name
    if not p.exists():
        pytest.fail(f"{p} is missing: the repository carries the real Kineto traces in testdata/kineto")
    return p


def require_torch():
    """Imports torch, or fails the test with what to do. NCCLPROF_TEST_NO_TORCH=<reason> (set
    by CI when it could not install torch) turns the failure into a visible skip."""
    try:
        import torch  # noqa: F401
    except ImportError as e:
        reason = os.environ.get("NCCLPROF_TEST_NO_TORCH")
        if reason:
            pytest.skip(f"torch is not installed ({reason})")
        pytest.fail(f"torch is not installed ({e}): pip install torch (CPU use is enough), or set "
                    "NCCLPROF_TEST_NO_TORCH=<why> where it cannot be installed")
    return torch


@pytest.fixture
def clean_env(monkeypatch):
    """No ncclprof / NCCL profiler configuration in os.environ, and enable() not yet called."""
    for k in list(os.environ):
        if k.startswith(_CONFIG_PREFIXES) and k not in _BUILD_SELECTORS:
            monkeypatch.delenv(k)
    monkeypatch.setattr(ncclprof._enable, "_state", None)
    return monkeypatch


@pytest.fixture(autouse=True, scope="session")
def _never_load_the_plugin_here():
    """This process must never load the plugin (see the module docstring)."""
    yield
    assert not ncclprof._control.loaded(), "a test loaded the plugin into the pytest process"


@pytest.fixture(scope="session")
def empty_plugin(tmp_path_factory) -> Path:
    """Another NCCL profiler plugin (the empty one the benchmark uses), built from
    testhost/empty.c."""
    out = tmp_path_factory.mktemp("other") / "libnccl-profiler-empty.so"
    src = REPO / "testhost" / "empty.c"
    r = subprocess.run(["gcc", "-std=gnu11", "-O2", "-fPIC", "-shared", f"-I{REPO / 'profiler'}",
                        "-o", str(out), str(src)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.fail(f"cannot build {src} with gcc: {r.stderr}")
    return out
