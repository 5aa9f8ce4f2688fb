"""ncclprof: see what NCCL does inside PyTorch jobs.

    import ncclprof
    ncclprof.enable()                      # before torch.distributed.init_process_group()
    with ncclprof.profile(schedule=torch.profiler.schedule(wait=1, warmup=1, active=3)) as p:
        for batch in data:
            train_step(batch)
            p.step()
    # -> ncclprof-out/rank<N>.merged.json.gz: open it in https://ui.perfetto.dev

The package carries the NCCL profiler plugin (libnccl-profiler-ncclprof.so, with its Go drainer
libncclprof-drain.so beside it) and the ncclmerge tool. Importing it loads neither torch nor the
library; the library is loaded (the same file NCCL loads, one copy per process) on the first
control call, which starts no Go runtime: the drainer starts with the first communicator.
"""

from ._version import __version__
from ._errors import (BinaryMissingError, MergeError, NcclprofError, NcclprofWarning,
                      PluginConflictError, TooLateError)
from ._paths import library_path, ncclmerge_path
from ._enable import enable, is_enabled, parse_event_mask, settings
from ._control import (FLUSHED, FORKED_CHILD, NOT_STARTED, TIMEOUT, UNAVAILABLE, WRITTEN, counters,
                       dump_inflight, flush, flush_metrics, get_event_mask as _get_event_mask, in_forked_child,
                       plugin_version, set_step, stats, trace_start, trace_stop)
from ._merge import check, merge
from ._dist import rank_info, worker_name

__all__ = [
    "__version__", "enable", "is_enabled", "settings", "profile", "trace_handler", "set_step",
    "set_event_mask", "get_event_mask", "flush", "flush_metrics", "dump_inflight", "counters", "stats",
    "trace_start", "trace_stop", "plugin_version", "merge", "check", "library_path",
    "ncclmerge_path", "rank_info", "worker_name", "in_forked_child", "parse_event_mask",
    "NcclprofError", "NcclprofWarning", "TooLateError", "PluginConflictError", "BinaryMissingError", "MergeError",
    "FLUSHED", "TIMEOUT", "NOT_STARTED", "FORKED_CHILD", "UNAVAILABLE", "WRITTEN",
]


def set_event_mask(mask):
    """Changes which NCCL event types are recorded, at run time (NCCL reads the mask per
    operation). `mask`: names such as "default,kernelch", a list of names, or a number.
    Also sets NCCLPROF_EVENT_MASK, so communicators created later start with it. Returns the
    previous mask (None in a forked child)."""
    import os

    bits, text = parse_event_mask(mask)
    os.environ["NCCLPROF_EVENT_MASK"] = text
    from . import _control

    return _control.set_event_mask(bits)


def get_event_mask():
    """The event mask the plugin records now (bits, see parse_event_mask)."""
    return _get_event_mask()


def __getattr__(name):
    # torch is imported only when the torch.profiler integration is used.
    if name in ("profile", "trace_handler", "TraceHandler"):
        from . import _torch

        return getattr(_torch, name)
    raise AttributeError(f"module 'ncclprof' has no attribute {name!r}")
