"""ncclprof.enable(): makes NCCL load the bundled plugin, with the settings it reads.

NCCL decides which profiler plugin to load once per process, when it creates its first
communicator (it reads NCCL_PROFILER_PLUGIN then; a failure is never retried). The plugin's C
side reads its variables (event mask, windows) with getenv() at that moment too, and so does
its Go side (trace, output directory, metrics, OTEL_*, GOMAXPROCS) in builds that export
LIVE_ENV_SYMBOL; older builds' Go runtime takes the environment the process started with.
Loading the library (any control call: counters(), set_step(), ...) fixes nothing; only the
first communicator does. So everything here must happen before the first NCCL communicator;
enable() checks that, warns when the build cannot see what it sets, and says what to do when it
is too late or when another profiler plugin would be displaced.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import threading
import warnings

from . import _control, _paths
from ._errors import PluginConflictError, TooLateError

# Event type names the plugin understands (NCCLPROF_EVENT_MASK; profiler/config.c) and their bits.
EVENT_BITS = {
    "group": 1 << 0, "coll": 1 << 1, "p2p": 1 << 2, "proxyop": 1 << 3, "proxystep": 1 << 4,
    "proxyctrl": 1 << 5, "kernelch": 1 << 6, "netplugin": 1 << 7, "groupapi": 1 << 8,
    "collapi": 1 << 9, "p2papi": 1 << 10, "kernellaunch": 1 << 11, "cecoll": 1 << 12,
    "cesync": 1 << 13, "cebatch": 1 << 14,
}
ALL_EVENTS = 0x7FFF
EVENT_BITS["all"] = ALL_EVENTS
EVENT_BITS["none"] = 0
EVENT_BITS["default"] = (EVENT_BITS["group"] | EVENT_BITS["coll"] | EVENT_BITS["p2p"]
                         | EVENT_BITS["proxyop"] | EVENT_BITS["proxystep"]
                         | EVENT_BITS["groupapi"] | EVENT_BITS["collapi"]
                         | EVENT_BITS["p2papi"] | EVENT_BITS["kernellaunch"])

METRICS_EXPORTERS = ("file", "otlp", "prometheus", "console", "none")

# Variables read by the plugin's Go side when NCCL's first communicator starts it (changing them
# later has no effect in this process); all other NCCLPROF_* and OTEL_* variables are too, except
# those its C side reads with getenv() at that same moment (C_SIDE_VARS).
GO_SIDE_VARS = ("NCCLPROF_TRACE", "NCCLPROF_TRACE_DIR", "NCCLPROF_OUTPUT_DIR", "NCCLPROF_METRICS",
                "NCCLPROF_GOMAXPROCS", "NCCLPROF_PROMETHEUS_PORT", "OTEL_EXPORTER_OTLP_ENDPOINT")
C_SIDE_VARS = frozenset({"NCCLPROF_ENABLE", "NCCLPROF_EVENT_MASK", "NCCLPROF_WINDOWS",
                         "NCCLPROF_WINDOW_SLOTS", "NCCLPROF_WINDOW_MS", "NCCLPROF_GRACE_MS",
                         "NCCLPROF_FINALIZE_TIMEOUT_MS", "NCCLPROF_CLOCK"})
# Defined by plugin builds whose Go side takes the environment as it is when NCCL's first
# communicator starts the plugin.
# Without it, the Go runtime of the c-shared library sees only the environment the process
# started with (it reads it from the initial stack), so values set from Python do not reach it.
LIVE_ENV_SYMBOL = "ncclprof_reads_live_env"

DEFAULT_GOMAXPROCS = 2

_lock = threading.Lock()
_state = None  # dict of what enable() set, once it succeeded


def is_go_side(var: str) -> bool:
    return var.startswith(("NCCLPROF_", "OTEL_")) and var not in C_SIDE_VARS


def reads_live_env(library: str) -> bool:
    """Whether the plugin's Go side sees variables set after the process started."""
    from . import _elf

    try:
        return LIVE_ENV_SYMBOL in _elf.exported_symbols(library)
    except (OSError, _elf.ELFError):
        return False


def initial_environ() -> dict:
    """The environment this process started with (/proc/self/environ)."""
    try:
        with open("/proc/self/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    out = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            out[os.fsdecode(k)] = os.fsdecode(v)
    return out


def parse_event_mask(mask) -> tuple:
    """(bits, text for NCCLPROF_EVENT_MASK) from an int, a string of names joined by , | + or
    spaces (e.g. "default,kernelch"), or an iterable of names."""
    if isinstance(mask, bool):
        raise TypeError("event_mask must be an int, a string of event names or a list of names")
    if isinstance(mask, int):
        if mask < 0 or mask > ALL_EVENTS:
            raise ValueError(f"event_mask {mask:#x} is outside 0..{ALL_EVENTS:#x} (15 NCCL event types)")
        return mask, f"{mask:#x}"
    if isinstance(mask, str):
        s = mask.strip()
        if re.fullmatch(r"(0[xX][0-9a-fA-F]+|\d+)", s):
            return parse_event_mask(int(s, 0))
        names = [n for n in re.split(r"[,|+\s]+", s) if n]
    else:
        try:
            names = [str(n).strip() for n in mask]
        except TypeError:
            raise TypeError("event_mask must be an int, a string of event names or a list of names") from None
    if not names:
        raise ValueError("event_mask names no event type; use 'none' to record nothing")
    bits = 0
    for n in names:
        b = EVENT_BITS.get(n.lower())
        if b is None:
            raise ValueError(f"event_mask: {n!r} is not an event type; use names from "
                             f"{', '.join(EVENT_BITS)}, e.g. 'default,kernelch'")
        bits |= b
    return bits, ",".join(n.lower() for n in names)


def _is_static_plugin(name: str) -> bool:
    # NCCL: strncasecmp(name, "STATIC_PLUGIN", strlen(name)) == 0 selects the main program.
    return bool(name) and "STATIC_PLUGIN".startswith(name.upper())


def _nccl_process_groups() -> list:
    """Descriptions of torch.distributed process groups that use NCCL (empty when torch is
    not imported or no group exists). Never imports torch."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return []
    try:
        if not (dist.is_available() and dist.is_initialized()):
            return []
    except Exception:
        return []
    found = []
    groups = []
    try:
        groups = list(dist.distributed_c10d._world.pg_map.keys())
    except Exception:
        pass
    if not groups:
        groups = [None]
    for g in groups:
        try:
            backend = str(dist.get_backend(g) if g is not None else dist.get_backend())
        except Exception:
            continue
        if "nccl" in backend.lower():
            found.append(backend if g is None else f"{backend} ({getattr(g, 'group_name', 'group')})")
    return found


def _loaded_profiler_plugins(ours: str) -> list:
    """Profiler plugin libraries other than ours already mapped in this process."""
    try:
        mine = _control._ident(os.stat(ours))
    except OSError:
        mine = None
    mapped = _control.mapped_files()
    out = [p for p, ident in mapped.items()
           if os.path.basename(p).startswith("libnccl-profiler") and ident != mine]
    want = os.environ.get("NCCL_PROFILER_PLUGIN", "")
    if (want and os.path.sep in want and not _control.same_file(want, ours)
            and _control.is_mapped(want) and want not in out):
        out.append(want)
    return out


def check_conflicts(library: str) -> None:
    """Raises PluginConflictError when NCCL is configured for, or has loaded, another profiler
    plugin: NCCL loads exactly one per process (NVIDIA/nccl#1981)."""
    want = os.environ.get("NCCL_PROFILER_PLUGIN", "").strip()
    keep = ("Unset it to use ncclprof, or leave ncclprof disabled (do not call ncclprof.enable()) "
            "to keep it: NCCL loads one profiler plugin per process.")
    if want:
        if want.lower() == "none":
            raise PluginConflictError(
                "NCCL_PROFILER_PLUGIN=none disables NCCL's profiler plugins in this process. "
                "Unset it to use ncclprof.")
        if _is_static_plugin(want):
            raise PluginConflictError(
                f"NCCL_PROFILER_PLUGIN={want} makes NCCL use a profiler built into the program "
                "(STATIC_PLUGIN; NCCL accepts any prefix of that name in any case), for example "
                "PyTorch's in-process NCCL monitor. " + keep)
        if not (os.path.exists(want) and _control.same_file(want, library)):
            base = os.path.basename(want)
            if base == _paths.LIBRARY_NAME or want == "ncclprof":
                raise PluginConflictError(
                    f"NCCL_PROFILER_PLUGIN={want} names another ncclprof build than this "
                    f"package's ({library}). Set NCCLPROF_LIBRARY to that file to use it with "
                    "this package, or unset NCCL_PROFILER_PLUGIN.")
            raise PluginConflictError(
                f"NCCL_PROFILER_PLUGIN={want} selects another NCCL profiler plugin. " + keep)
    if os.environ.get("NCCL_INSPECTOR_ENABLE", "").strip() not in ("", "0"):
        raise PluginConflictError(
            f"NCCL_INSPECTOR_ENABLE={os.environ['NCCL_INSPECTOR_ENABLE']} asks for NVIDIA's NCCL "
            "Inspector, which is itself a profiler plugin. Unset NCCL_INSPECTOR_ENABLE to use "
            "ncclprof, or leave ncclprof disabled to keep the Inspector: NCCL loads one "
            "profiler plugin per process.")
    others = _loaded_profiler_plugins(library)
    if others:
        raise PluginConflictError(
            f"NCCL has already loaded another profiler plugin in this process ({', '.join(others)}); "
            "it keeps it for the life of the process. Start the job without it "
            "(unset NCCL_PROFILER_PLUGIN) and call ncclprof.enable() before the first NCCL "
            "communicator.")


def enable(trace_dir=None, metrics=None, event_mask=None, *, output_dir=None, trace_all=False,
           otlp_endpoint=None, prometheus_port=None, gomaxprocs=None, env=None) -> dict:
    """Make NCCL load the ncclprof plugin bundled with this package, and configure it.

    Call it before the first NCCL communicator exists: before
    ``torch.distributed.init_process_group(backend="nccl")`` (for example at the top of the
    training script). It sets ``NCCL_PROFILER_PLUGIN`` to the bundled library's absolute path
    and the plugin's ``NCCLPROF_*`` variables; arguments left at None keep what the environment
    already says (so a launcher can configure everything), or the plugin's defaults.

    Args:
        trace_dir: where trace files go (``NCCLPROF_TRACE_DIR``; default: ``output_dir``).
        metrics: ``"file"`` (the default: ``<output_dir>/``), ``"otlp"``, ``"prometheus"``,
            ``"console"`` or ``"none"`` (``NCCLPROF_METRICS``). False means ``"none"``.
        event_mask: NCCL event types to record: names such as ``"default,kernelch"``, a list of
            names, or a number (``NCCLPROF_EVENT_MASK``).
        output_dir: summaries and the metrics file (``NCCLPROF_OUTPUT_DIR``, default
            ``./ncclprof-out``).
        trace_all: trace the whole run, from the first communicator (``NCCLPROF_TRACE=1``),
            instead of the windows ``ncclprof.profile`` opens.
        otlp_endpoint: OTLP collector URL (``OTEL_EXPORTER_OTLP_ENDPOINT``); implies
            ``metrics="otlp"``.
        prometheus_port: base port of a Prometheus endpoint per rank (each local rank adds its
            LOCAL_RANK); implies ``metrics="prometheus"``.
        gomaxprocs: threads the plugin's Go runtime runs Go code on (``NCCLPROF_GOMAXPROCS``,
            default 2: with 8 ranks a node, each rank's runtime would otherwise size itself to
            the whole node).
        env: further ``NCCLPROF_*`` / ``OTEL_*`` variables, e.g. ``{"NCCLPROF_WINDOW_MS": "500"}``.

    Returns:
        The variables ncclprof depends on, as now set.

    Raises:
        TooLateError: a NCCL process group already exists, or the plugin already started with
            other settings.
        PluginConflictError: another profiler plugin is configured or loaded (NCCL loads one).
        BinaryMissingError: the bundled library is missing or cannot run on this machine.
    """
    global _state
    library = _paths.library_path()
    _paths.check_library(library)

    updates = {}
    if trace_dir is not None:
        updates["NCCLPROF_TRACE_DIR"] = os.path.abspath(os.fspath(trace_dir))
    if output_dir is not None:
        updates["NCCLPROF_OUTPUT_DIR"] = os.path.abspath(os.fspath(output_dir))
    if metrics is False:
        metrics = "none"
    if metrics is not None:
        metrics = str(metrics).lower()
        if metrics not in METRICS_EXPORTERS:
            raise ValueError(f"metrics={metrics!r}: use one of {', '.join(METRICS_EXPORTERS)}")
    if otlp_endpoint is not None:
        if metrics not in (None, "otlp"):
            raise ValueError(f"otlp_endpoint is for metrics='otlp', not {metrics!r}")
        metrics = "otlp"
        updates["OTEL_EXPORTER_OTLP_ENDPOINT"] = str(otlp_endpoint)
    if prometheus_port is not None:
        if metrics not in (None, "prometheus"):
            raise ValueError(f"prometheus_port is for metrics='prometheus', not {metrics!r}")
        port = int(prometheus_port)
        if not 0 < port < 65536:
            raise ValueError(f"prometheus_port={prometheus_port}: not a port number")
        metrics = "prometheus"
        updates["NCCLPROF_PROMETHEUS_PORT"] = str(port)
    if metrics is not None:
        updates["NCCLPROF_METRICS"] = metrics
    mask_bits = None
    if event_mask is not None:
        mask_bits, updates["NCCLPROF_EVENT_MASK"] = parse_event_mask(event_mask)
    if trace_all:
        updates["NCCLPROF_TRACE"] = "1"
    if gomaxprocs is not None:
        n = int(gomaxprocs)
        if n < 1:
            raise ValueError("gomaxprocs must be at least 1")
        updates["NCCLPROF_GOMAXPROCS"] = str(n)
    for k, v in (env or {}).items():
        if not (k.startswith("NCCLPROF_") or k.startswith("OTEL_")):
            raise ValueError(f"env: {k} is not an NCCLPROF_* or OTEL_* variable")
        updates[k] = str(v)
    asked = dict(updates)  # what the caller asked for, as opposed to the defaults added here
    if "NCCLPROF_GOMAXPROCS" not in updates and not os.environ.get("NCCLPROF_GOMAXPROCS"):
        updates["NCCLPROF_GOMAXPROCS"] = str(DEFAULT_GOMAXPROCS)  # the plugin's default too

    with _lock:
        check_conflicts(library)
        already_ours = bool(os.environ.get("NCCL_PROFILER_PLUGIN")) and _control.same_file(
            os.environ["NCCL_PROFILER_PLUGIN"], library)
        loaded = _control.is_mapped(library)  # NCCL or a control call loaded it already
        started = _control.started(library)  # NCCL created a communicator: settings are read
        groups = _nccl_process_groups()
        if groups and not already_ours:
            raise TooLateError(
                f"a NCCL process group already exists ({', '.join(groups)}): NCCL chose its "
                "profiler plugin when it set up, so ncclprof cannot be enabled in this process "
                "now. Call ncclprof.enable() before torch.distributed.init_process_group(), or "
                "let the launcher set the variables: eval \"$(python -m ncclprof env)\" before "
                "torchrun.")
        if started:
            # The plugin read its variables at NCCL's first communicator; they cannot change now.
            # (The trace directory can: ncclprof.profile hands it to the plugin with each window;
            # only a whole-run trace took it from the environment.)
            whole_run = os.environ.get("NCCLPROF_TRACE") == "1" or "NCCLPROF_TRACE" in updates
            frozen = {k: v for k, v in updates.items()
                      if is_go_side(k) and os.environ.get(k) != v
                      and not (k == "NCCLPROF_GOMAXPROCS" and gomaxprocs is None)
                      and not (k == "NCCLPROF_TRACE_DIR" and not whole_run)}
            if frozen:
                raise TooLateError(
                    "the ncclprof plugin is already running in this process (it was loaded "
                    f"with other settings), so {', '.join(sorted(frozen))} cannot change now. "
                    "Call ncclprof.enable() once, at the start of the program, before anything "
                    "creates a NCCL communicator.")
        os.environ["NCCL_PROFILER_PLUGIN"] = library
        for k, v in updates.items():
            os.environ[k] = v
        if loaded and mask_bits is not None:
            # The mask NCCL reads per operation; a control call's mask would win over the
            # variable at the first communicator (it is sticky), so this one is set the same way.
            _control.set_event_mask(mask_bits)
        keys = ("NCCL_PROFILER_PLUGIN",) + GO_SIDE_VARS + ("NCCLPROF_EVENT_MASK",) + tuple(
            k for k in updates if k not in GO_SIDE_VARS)
        _state = {k: os.environ[k] for k in dict.fromkeys(keys) if os.environ.get(k)}
        _control.register_exit_flush()
        _warn_unseen(library, asked)
        return dict(_state)


def _warn_unseen(library: str, asked: dict) -> None:
    """Warns when the plugin build cannot see Go-side variables set here."""
    if reads_live_env(library):
        return
    initial = initial_environ()
    whole_run = os.environ.get("NCCLPROF_TRACE") == "1"
    # NCCLPROF_TRACE_DIR only matters to the plugin for a whole-run trace: ncclprof.profile and
    # trace_handler give it their directory with each window.
    unseen = sorted(k for k, v in asked.items() if is_go_side(k) and initial.get(k) != v
                    and (k != "NCCLPROF_TRACE_DIR" or whole_run))
    if not unseen:
        return
    from ._errors import NcclprofWarning

    opts = " ".join(f"{k}={shlex.quote(asked[k])}" for k in unseen)
    warnings.warn(
        f"ncclprof: this build of the plugin ({library}) reads {', '.join(unseen)} from the "
        "environment the process started with, so the values set by enable() do not reach it "
        "(NCCL_PROFILER_PLUGIN, the event mask and the trace windows of ncclprof.profile do). "
        f"Set them in the job's environment instead, for example: {opts} torchrun ..., or "
        "eval \"$(python -m ncclprof env ...)\" before the launcher.", NcclprofWarning, stacklevel=3)


def is_enabled() -> bool:
    """Whether NCCL in this process will load (or has loaded) this package's plugin: enable()
    succeeded, or NCCL_PROFILER_PLUGIN already names the bundled library."""
    if _state is not None:
        return True
    want = os.environ.get("NCCL_PROFILER_PLUGIN", "")
    try:
        return bool(want) and _control.same_file(want, _paths.library_path())
    except Exception:
        return False


def ensure_enabled() -> None:
    """enable() with the defaults unless the plugin is already configured (profile() and
    trace_handler() call this, so they work without an explicit enable())."""
    if not is_enabled():
        enable()
    else:
        _control.register_exit_flush()


def settings() -> dict:
    """The variables enable() set (empty before it ran)."""
    return dict(_state or {})


def trace_dir_default() -> str:
    """Where traces go when no directory is given: NCCLPROF_TRACE_DIR, else NCCLPROF_OUTPUT_DIR,
    else ./ncclprof-out (as the plugin itself decides)."""
    return os.path.abspath(os.environ.get("NCCLPROF_TRACE_DIR")
                           or os.environ.get("NCCLPROF_OUTPUT_DIR") or "ncclprof-out")
