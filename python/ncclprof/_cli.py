"""The `ncclprof` command (also `python -m ncclprof`)."""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
import warnings

from . import __version__

# ncclmerge's commands that `ncclprof COMMAND ARGS...` runs as they are, with their help lines.
MERGE_COMMANDS = {
    "merge": "merge torch.profiler (Kineto) traces with the plugin's NCCL traces, for Perfetto",
    "check": "tell what Perfetto's JSON importer would do with a trace",
    "stats": "time, bytes and bandwidth per communicator, operation, size, algorithm and protocol",
    "skew": "find the ranks that arrive late at collectives and make the others wait",
    "why": "name why each late rank was late: GPU compute, host, network, a dependency",
    "pprof": "communication time as a pprof profile (flame graph: go tool pprof -http)",
    "report": "one offline HTML page of plots: bandwidth, time per rank, skew, slowest operations",
    "hang": "name the rank, operation and link a hung job waits for, from the plugin's in-flight dumps",
    "demo": "a simulated multi-rank job through the plugin (needs a source checkout: make)",
    "bench": "merge, stats, skew or why throughput and memory on large synthesized traces",
}

_MERGE_LINES = "\n".join(f"  {c:<10}{d}" for c, d in MERGE_COMMANDS.items())
HELP = f"""\
usage: ncclprof [--version] [-h] COMMAND [ARGS...]

See what NCCL does inside PyTorch jobs (ncclprof {__version__}).

ncclmerge's commands (the bundled ncclmerge runs them; `ncclprof COMMAND --help` for each):
{_MERGE_LINES}

ncclprof's own:
  env       print the `export` lines that make NCCL load the plugin, for launchers:
              eval "$(ncclprof env --trace-dir traces)"; torchrun ... train.py
  info      where the plugin and ncclmerge are, their versions, whether the plugin loads here
  library   print the plugin library's path (the value NCCL_PROFILER_PLUGIN takes)

In Python: ncclprof.enable() before torch.distributed.init_process_group(), then
ncclprof.profile(...) in place of torch.profiler.profile(...). See docs/python.md.
"""


def _version_line() -> str:
    from . import _control, _paths

    parts = [f"ncclprof {__version__}"]
    try:
        lib = _paths.library_path()
        _paths.check_library(lib)
        parts.append(f"plugin {_control.plugin_version()} ({lib})")
    except Exception as e:  # say what is wrong rather than fail --version
        parts.append(f"plugin unavailable: {e}")
    try:
        parts.append(f"ncclmerge {_paths.ncclmerge_path()}")
    except Exception as e:
        parts.append(f"ncclmerge unavailable: {e}")
    return "; ".join(parts)


def _exec_ncclmerge(argv) -> int:
    from . import _paths

    exe = _paths.ncclmerge_path()
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(exe, [exe, *argv])  # replaces this process: exit status and signals are ncclmerge's
    return 127  # not reached


def _env(argv) -> int:
    from . import _enable

    p = argparse.ArgumentParser(
        prog="ncclprof env",
        description="Print the variables ncclprof.enable() would set, as shell `export` lines, "
                    "for launchers that start the job: eval \"$(ncclprof env ...)\" before torchrun. "
                    "Options are those of ncclprof.enable(); unset ones keep the environment's values.")
    p.add_argument("--trace-dir", help="where trace files go (NCCLPROF_TRACE_DIR)")
    p.add_argument("--output-dir", help="summaries and the metrics file (NCCLPROF_OUTPUT_DIR)")
    p.add_argument("--metrics", choices=_enable.METRICS_EXPORTERS, help="metrics exporter (NCCLPROF_METRICS)")
    p.add_argument("--event-mask", help="event types, e.g. default,kernelch (NCCLPROF_EVENT_MASK)")
    p.add_argument("--trace-all", action="store_true", help="trace the whole run (NCCLPROF_TRACE=1)")
    p.add_argument("--otlp-endpoint", help="OTLP collector URL (OTEL_EXPORTER_OTLP_ENDPOINT)")
    p.add_argument("--prometheus-port", type=int, help="base port of the per-rank Prometheus endpoint")
    p.add_argument("--gomaxprocs", type=int, help="threads of the plugin's Go runtime (default 2)")
    a = p.parse_args(argv)
    with warnings.catch_warnings():
        # enable() warns that a running plugin would not see these; exported, the job will.
        warnings.simplefilter("ignore")
        got = _enable.enable(trace_dir=a.trace_dir, output_dir=a.output_dir, metrics=a.metrics,
                             event_mask=a.event_mask, trace_all=a.trace_all,
                             otlp_endpoint=a.otlp_endpoint, prometheus_port=a.prometheus_port,
                             gomaxprocs=a.gomaxprocs)
    for k, v in got.items():
        print(f"export {k}={shlex.quote(v)}")
    return 0


def _info() -> int:
    from importlib import metadata

    from . import _control, _elf, _paths

    ok = True
    print(f"ncclprof {__version__} (Python package at {os.path.dirname(os.path.abspath(__file__))})")
    libc = " ".join(platform.libc_ver()) or "unknown libc"
    print(f"machine: {platform.machine()}, {libc}, Python {platform.python_version()}")
    try:
        lib = _paths.library_path()
        info = _elf.read(lib)
        need = f"glibc >= {info.glibc[0]}.{info.glibc[1]}" if info.glibc else "no glibc symbols"
        print(f"plugin library: {lib} ({info.machine}, needs {need})")
        _paths.check_library(lib)
        print(f"  loads here: yes, version {_control.plugin_version()}")
    except Exception as e:
        ok = False
        print(f"  problem: {e}")
    try:
        print(f"ncclmerge: {_paths.ncclmerge_path()}")
    except Exception as e:
        ok = False
        print(f"ncclmerge: problem: {e}")
    for dist in ("torch", "nvidia-nccl-cu13", "nvidia-nccl-cu12"):
        try:
            print(f"{dist}: {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            pass
    keys = sorted(k for k in os.environ if k.startswith(("NCCLPROF_", "NCCL_PROFILER", "NCCL_INSPECTOR")))
    for k in keys:
        print(f"  {k}={os.environ[k]}")
    return 0 if ok else 1


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from ._errors import NcclprofError

    try:
        if not argv or argv[0] in ("-h", "--help", "help"):
            print(HELP, end="")
            return 0 if argv else 2
        cmd, rest = argv[0], argv[1:]
        if cmd in ("-V", "--version", "version"):
            print(_version_line())
            return 0
        if cmd in MERGE_COMMANDS:
            return _exec_ncclmerge([cmd, *rest])
        if cmd == "env":
            return _env(rest)
        if cmd == "info":
            return _info()
        if cmd == "library":
            from . import _paths

            print(_paths.library_path())
            return 0
        print(f"ncclprof: unknown command {cmd!r}\n\n{HELP}", end="", file=sys.stderr)
        return 2
    except NcclprofError as e:
        print(f"ncclprof: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
