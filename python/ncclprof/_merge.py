"""Running the bundled ncclmerge (cmd/ncclmerge, docs/ncclmerge.md)."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile

from . import _dist, _paths
from ._errors import MergeError


def _merge_env() -> dict:
    env = dict(os.environ)
    if "GOMAXPROCS" not in env:
        # Ranks of a node merge at the same moment; share the node's CPUs between them.
        local = _dist.rank_info()["local_world_size"] or 1
        env["GOMAXPROCS"] = str(max(1, min(4, (os.cpu_count() or 2) // max(1, local))))
    return env


def run(args, *, timeout=None) -> subprocess.CompletedProcess:
    """Runs `ncclmerge ARGS...`, capturing its output (never raises on a non-zero exit)."""
    return subprocess.run([_paths.ncclmerge_path(), *map(os.fspath, args)], capture_output=True,
                          text=True, timeout=timeout, env=_merge_env(), stdin=subprocess.DEVNULL)


def merge(kineto, nccl=(), output=None, *, timeline=False, align=None, force=False,
          args=(), timeout=None) -> dict:
    """Merges Kineto traces with the plugin's NCCL traces (``ncclmerge merge``) and returns the
    merge summary (the JSON ``ncclmerge merge --summary`` writes: per rank, the events read and
    written, NCCL kernels and how many were linked, by which rule, and the clock offsets).

    Args:
        kineto: a Kineto trace path, or a list of paths, globs or directories.
        nccl: plugin trace paths (``ncclprof-<host>-<pid>-<n>.trace.json``), globs or
            directories; may be empty (the output then holds the Kineto events only).
        output: ``.json`` / ``.json.gz`` file, or a directory ending in ``/`` for one merged
            file per rank.
        timeline: one trace of all ranks (``--timeline``); ``align="ends"`` also aligns hosts on
            collective kernel ends.
        force: merge files whose metadata says they come from different processes.
        args: further ncclmerge flags, e.g. ``["--cpu-offset", "150us"]``.

    Raises:
        MergeError: with ncclmerge's own message.
    """
    if output is None:
        raise TypeError("merge() needs output=PATH (.json, .json.gz, or a directory/)")
    ks = [kineto] if isinstance(kineto, (str, os.PathLike)) else list(kineto)
    ns = [nccl] if isinstance(nccl, (str, os.PathLike)) else list(nccl)
    if not ks:
        raise ValueError("merge() needs at least one Kineto trace")
    cmd = ["merge", "-q"]
    for k in ks:
        cmd += ["--kineto", k]
    for n in ns:
        cmd += ["--nccl", n]
    cmd += ["-o", output]
    if timeline:
        cmd.append("--timeline")
    if align:
        cmd += ["--align", align]
    if force:
        cmd.append("--force")
    cmd += list(args)
    fd, summary = tempfile.mkstemp(prefix="ncclmerge-summary-", suffix=".json")
    os.close(fd)
    try:
        p = run(cmd + ["--summary", summary], timeout=timeout)
        if p.returncode != 0:
            msg = (p.stderr or p.stdout).strip() or f"exit status {p.returncode}"
            raise MergeError(f"ncclmerge merge failed: {msg}")
        with open(summary) as f:
            return json.load(f)
    finally:
        try:
            os.unlink(summary)
        except OSError:
            pass


def check(trace, *, timeout=None) -> list:
    """``ncclmerge check --json``: what Perfetto's JSON importer would do with the trace(s).
    Returns the reports (one per file); raises MergeError when a file has errors (the report is
    in the message) or cannot be read."""
    traces = [trace] if isinstance(trace, (str, os.PathLike)) else list(trace)
    p = run(["check", "--json", *traces], timeout=timeout)
    try:
        reports = json.loads(p.stdout) if p.stdout.strip() else None
    except json.JSONDecodeError:
        reports = None
    if p.returncode != 0 or reports is None:
        raise MergeError(f"ncclmerge check: {(p.stderr or p.stdout).strip()}"
                         + (f"\n{json.dumps(reports, indent=1)[:4000]}" if reports else ""))
    return reports
