"""Control of the plugin that NCCL loaded, through its exported C functions (plugin/control.c).

There is exactly one copy of the plugin in a process: this module loads the very file NCCL is
told to load (NCCL_PROFILER_PLUGIN, set by enable()) with ctypes' default RTLD_LOCAL, and the
dynamic loader returns the same mapping to both. Loading a second copy would start a second Go
runtime in the process, so it is refused.

Fork safety: a forked child inherits the parent's mapping of the library but not its Go
runtime's threads, so a call into the plugin there can hang (a flush waits for a drainer that
does not exist; Go functions wait for a scheduler that does not run). After os.fork() every
function here is a no-op in the child when the library was already mapped at the fork; a
child forked before anything loaded the library is a fresh process in that respect.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import re
import threading

from . import _paths
from ._errors import PluginConflictError


# Results of flush().
FLUSHED = "flushed"            # everything recorded so far was processed and written
TIMEOUT = "timeout"            # the plugin's drainer did not finish in time
NOT_STARTED = "not-started"    # NCCL has not initialized the plugin in this process
FORKED_CHILD = "forked-child"  # skipped: a forked child must not call the plugin
UNAVAILABLE = "unavailable"    # this plugin build does not export the function

_TRACE_DIR_MAX = 1023  # bytes; np_trace_dir in control.c
_STEP_MAX = 119        # bytes; np_steps[].label in control.c

_lock = threading.RLock()
_window_lock = threading.Lock()
_lib = None
_lib_path = None
_lib_pid = None  # the process that loaded _lib
_owner_pid = os.getpid()
_forked = False
_child_usable = None  # in a forked child: whether the library may be loaded (not inherited)


def _after_fork_in_child() -> None:
    global _lib, _forked, _child_usable, _lock, _window_lock, _window
    _forked = True
    _child_usable = None
    _lib = None  # never call the inherited handle
    _window = None
    # The parent's locks may have been held by its other threads, which do not exist here.
    _lock = threading.RLock()
    _window_lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _ident(st) -> tuple:
    return (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)


def mapped_files() -> dict:
    """Files mapped into this process, from /proc/self/maps: {path: (major, minor, inode)} of
    the file as it was mapped (a file since replaced on disk keeps its mapped identity)."""
    out = {}
    try:
        with open("/proc/self/maps", "rb") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) < 6 or not parts[5].startswith(b"/"):
                    continue
                path = os.fsdecode(parts[5].rstrip(b"\n"))
                if path.endswith(" (deleted)") or path in out:
                    continue
                major, _, minor = parts[3].partition(b":")
                try:
                    out[path] = (int(major, 16), int(minor, 16), int(parts[4]))
                except ValueError:
                    pass
    except OSError:
        pass
    return out


def same_file(a: str, b: str) -> bool:
    try:
        return _ident(os.stat(a)) == _ident(os.stat(b))
    except OSError:
        return False


def is_mapped(path: str) -> bool:
    """Whether this process has `path` (that file, under any name) mapped."""
    try:
        ident = _ident(os.stat(path))
    except OSError:
        return False
    return ident in mapped_files().values()


def in_forked_child() -> bool:
    """True in a process forked (os.fork) after this module was imported."""
    return _forked or os.getpid() != _owner_pid


def _usable() -> bool:
    global _child_usable
    if not in_forked_child():
        return True
    if _child_usable is None:
        try:
            path = _lib_path or _paths.library_path()
        except Exception:
            path = None
        _child_usable = bool(path) and not is_mapped(path)
    return _child_usable


# Exports older or C-only builds lack: ncclprof_metrics_flush is Go's (absent from the C-only
# sanitizer builds); the others are newer than the first Python package.
_OPTIONAL = ("ncclprof_metrics_flush", "ncclprof_started", "ncclprof_counter_name", "ncclprof_stat_name",
             "ncclprof_dump_error")


def _declare(lib) -> None:
    u64p = ctypes.POINTER(ctypes.c_uint64)
    sigs = {
        "ncclprof_version": (ctypes.c_char_p, []),
        "ncclprof_set_event_mask": (ctypes.c_int, [ctypes.c_int]),
        "ncclprof_get_event_mask": (ctypes.c_int, []),
        "ncclprof_counters": (ctypes.c_int, [u64p, ctypes.c_int]),
        "ncclprof_flush": (ctypes.c_int, [ctypes.c_int]),
        "ncclprof_trace_start": (ctypes.c_int, [ctypes.c_char_p]),
        "ncclprof_trace_stop": (ctypes.c_int, []),
        "ncclprof_set_step": (ctypes.c_int, [ctypes.c_char_p]),
        "ncclprof_stats": (ctypes.c_int, [u64p, ctypes.c_int]),
        "ncclprof_metrics_flush": (ctypes.c_int, [ctypes.c_int]),
        "ncclprof_dump_inflight": (ctypes.c_int, []),
        "ncclprof_dump_error": (ctypes.c_char_p, []),
        "ncclprof_started": (ctypes.c_int, []),
        "ncclprof_counter_name": (ctypes.c_char_p, [ctypes.c_int]),
        "ncclprof_stat_name": (ctypes.c_char_p, [ctypes.c_int]),
    }
    for name, (res, args) in sigs.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            fn = None
        if fn is None:
            if name in _OPTIONAL:
                continue
            raise PluginConflictError(
                f"{_lib_path} does not export {name}(): it is not an ncclprof plugin library, or "
                "one older than this Python package; rebuild it (pip install ./python).")
        fn.restype, fn.argtypes = res, args


def _check_one_copy(path: str) -> None:
    """Refuses to load `path` when NCCL would load another file, or another ncclprof library
    is already mapped: control calls would go to a copy NCCL does not use (and each copy would
    start its own Go drainer)."""
    want = os.environ.get("NCCL_PROFILER_PLUGIN", "")
    if want and os.path.sep in want and os.path.exists(want) and not same_file(want, path):
        raise PluginConflictError(
            f"NCCL_PROFILER_PLUGIN={want} is not the library this package controls ({path}). "
            f"Set NCCLPROF_LIBRARY={want} to control that build, or unset NCCL_PROFILER_PLUGIN "
            "and call ncclprof.enable().")
    mine = _ident(os.stat(path))
    for p, ident in mapped_files().items():
        if os.path.basename(p) == _paths.LIBRARY_NAME and ident != mine:
            raise PluginConflictError(
                f"another ncclprof library is already loaded in this process ({p}); loading "
                f"{path} too would give the process two plugins, and control calls would go to "
                f"the one NCCL does not use. Set NCCLPROF_LIBRARY={p} so the package controls "
                "the copy that is loaded.")


def lib():
    """The loaded plugin library (ctypes.CDLL), loading it on first use; None in a forked
    child that inherited it."""
    global _lib, _lib_path, _lib_pid
    if not _usable():
        return None
    with _lock:
        if _lib is None:
            path = _paths.library_path()
            _paths.check_library(path)
            _lib_path = path
            _check_one_copy(path)
            handle = ctypes.CDLL(path)  # RTLD_LOCAL | RTLD_NOW, as NCCL's dlopen
            _declare(handle)
            _lib, _lib_pid = handle, os.getpid()
        return _lib


def loaded() -> bool:
    """Whether this package has loaded the library in this process (it does so on the first
    control call)."""
    return _lib is not None and _lib_pid == os.getpid()


def loaded_path():
    return _lib_path if loaded() else None


def started(path: str) -> bool:
    """Whether NCCL has created a communicator with the plugin at `path` in this process: the
    plugin reads its settings then, so only from then on are they fixed. Loading the library
    (any control call) fixes nothing; a build too old to say is taken as started."""
    if not is_mapped(path):
        return False
    lb = lib()
    if lb is None:
        return True  # a forked child of a process that had it mapped
    fn = getattr(lb, "ncclprof_started", None)
    return True if fn is None else bool(fn())


def plugin_version():
    lb = lib()
    return lb.ncclprof_version().decode() if lb else None


def set_event_mask(mask: int):
    """Sets the mask in the loaded plugin; returns the previous one (None in a forked child)."""
    lb = lib()
    return lb.ncclprof_set_event_mask(int(mask)) if lb else None


def get_event_mask():
    lb = lib()
    return lb.ncclprof_get_event_mask() if lb else None


def _read_array(fn, name_fn) -> dict:
    """{name: value} of a counter array, named by the library's own list (the names its trace
    and summary use); value_<i> only from a library too old to name them."""
    n = fn(None, 0)
    buf = (ctypes.c_uint64 * n)()
    fn(buf, n)
    out = {}
    for i in range(n):
        name = name_fn(i) if name_fn else None
        out[name.decode() if name else f"value_{i}"] = int(buf[i])
    return out


def counters() -> dict:
    """The plugin's process-wide counters by name (as in the trace's and summary's health)."""
    lb = lib()
    return _read_array(lb.ncclprof_counters, getattr(lb, "ncclprof_counter_name", None)) if lb else {}


def stats() -> dict:
    lb = lib()
    return _read_array(lb.ncclprof_stats, getattr(lb, "ncclprof_stat_name", None)) if lb else {}


def flush(timeout: float = 5.0) -> str:
    """Processes everything recorded so far (every window sealed, trace and metrics written)."""
    lb = lib()
    if lb is None:
        return FORKED_CHILD
    ms = max(0, min(int(timeout * 1000), 2**31 - 1))
    return {0: FLUSHED, 1: TIMEOUT, 2: NOT_STARTED, 3: FORKED_CHILD}.get(lb.ncclprof_flush(ms), TIMEOUT)


WRITTEN = "written"
FAILED = "failed"  # dump_inflight(): "failed: <the reason>" (a write error: permissions, a full disk)


def dump_inflight() -> str:
    """Writes this process's hang dump now: what is in flight inside NCCL, per communicator
    (ncclprof-hang-<host>-<pid>.json in NCCLPROF_OUTPUT_DIR; docs/hang.md). Call it from a
    timeout handler (torch.distributed's watchdog, a signal handler of your own) before the
    process is torn down, on every rank, then run `ncclmerge hang` over the dumps. Returns
    "written", "failed: <why>" (it could not be written: the reason, e.g. permission denied on
    the output directory), "timeout" (the plugin did not answer within 10 s), "not-started" (no
    NCCL communicator yet) or "forked-child"."""
    lb = lib()
    if lb is None:
        return FORKED_CHILD
    rc = lb.ncclprof_dump_inflight()
    if rc == 4:
        why = lb.ncclprof_dump_error() if hasattr(lb, "ncclprof_dump_error") else None
        return f"{FAILED}: {(why or b'').decode('utf-8', 'replace') or 'no reason given'}"
    return {0: WRITTEN, 1: TIMEOUT, 2: NOT_STARTED, 3: FORKED_CHILD}.get(rc, TIMEOUT)


def flush_metrics(timeout: float = 2.0) -> str:
    """Exports the metrics now (for jobs that exit without destroying their communicators)."""
    lb = lib()
    if lb is None:
        return FORKED_CHILD
    fn = getattr(lb, "ncclprof_metrics_flush", None)
    if fn is None:
        return UNAVAILABLE
    ms = max(0, min(int(timeout * 1000), 2**31 - 1))
    return {0: FLUSHED, 1: TIMEOUT, 2: NOT_STARTED, 3: FORKED_CHILD}.get(fn(ms), TIMEOUT)


_PLUGIN_FILE = re.compile(r"^ncclprof-.+-(\d+)-(\d+)(?:\.\d+)?\.trace\.json$")  # .N: name taken


def plugin_trace_files(directory: str, pid=None) -> set:
    """The plugin trace files (ncclprof-<host>-<pid>-<n>.trace.json) process `pid` (default:
    this one) has in `directory`."""
    pid = os.getpid() if pid is None else pid
    try:
        names = os.listdir(directory)
    except OSError:
        return set()
    return {os.path.join(directory, n) for n in names
            if (m := _PLUGIN_FILE.match(n)) and int(m.group(1)) == pid}


_window = None        # (directory, files there before the window) while a window is open
last_stop_status = None  # how the final flush of the last trace_stop() went


def trace_start(directory: str, timeout: float = 1.0) -> bool:
    """Opens a trace window: what NCCL does from now on goes to a new trace file in
    `directory` (an open window is closed first). Waits up to `timeout` for the plugin to open
    the file when NCCL has started it. Returns False in a forked child."""
    global _window
    lb = lib()
    if lb is None:
        return False
    directory = os.path.abspath(os.fspath(directory))
    d = os.fsencode(directory)
    if len(d) > _TRACE_DIR_MAX:
        raise ValueError(f"trace directory path is {len(d)} bytes; the plugin takes at most "
                         f"{_TRACE_DIR_MAX}: use a shorter path")
    os.makedirs(directory, exist_ok=True)
    if _window is not None:
        trace_stop(timeout)
    with _window_lock:
        if _user_label:
            # The plugin writes the label in force when a file opens; let it read the latest
            # one first (it reads labels after applying a start).
            flush(timeout)
        _window = (directory, plugin_trace_files(directory))
        lb.ncclprof_trace_start(d)
        flush(timeout)
    return True


def trace_stop(timeout: float = 10.0):
    """Closes the trace window and returns the trace files the plugin wrote in it (None in a
    forked child). Waits up to `timeout` for the plugin to write what was recorded."""
    global _window, last_stop_status
    lb = lib()
    if lb is None:
        return None
    # The plugin may apply a stop in a pass that has not drained its windows yet: have it write
    # what was recorded (and the pending step labels) while the file is still open, then stop,
    # then let it close the file.
    with _window_lock:
        first = flush(timeout)
        lb.ncclprof_trace_stop()
        last_stop_status = flush(timeout)
        if first == TIMEOUT:
            last_stop_status = TIMEOUT
        window, _window = _window, None
    if window is None:
        return []
    directory, before = window
    return sorted(plugin_trace_files(directory) - before)


_user_label = ""  # the last label the program set (ncclprof.profile restores it after a window)


def set_step(label, _user: bool = True) -> bool:
    """Names the current training step or phase (an instant in the trace, an attribute of the
    metrics); None or "" clears it. Labels longer than 119 bytes are cut."""
    global _user_label
    lb = lib()
    if lb is None:
        return False
    b = b"" if label is None else str(label).encode("utf-8")
    if len(b) > _STEP_MAX:
        b = b[:_STEP_MAX].decode("utf-8", "ignore").encode("utf-8")
    if _user:
        _user_label = b.decode("utf-8")
    lb.ncclprof_set_step(b)
    return True


def restore_step_label() -> bool:
    """Puts back the label the program set last (after ncclprof.profile labelled its steps)."""
    return set_step(_user_label, _user=False)


# ------------------------------------------------------------------------------ exit

_exit_registered = False


def register_exit_flush() -> None:
    """At interpreter exit, process what the plugin still holds (the trace gets its last events)
    and export the metrics once more: PyTorch jobs often exit without destroying their
    communicators, which is when the plugin would do it itself. Runs only in the process that
    registered it, never in a forked child, and only if the library was loaded there."""
    global _exit_registered
    if _exit_registered:
        return
    _exit_registered = True
    pid = os.getpid()

    def _at_exit():
        if os.getpid() != pid or in_forked_child():
            return
        try:
            path = _lib_path or _paths.library_path()
        except Exception:
            return
        if not is_mapped(path):
            return  # NCCL never loaded it and neither did we: nothing to flush
        if lib() is None:
            return
        if flush(2.0) == NOT_STARTED:
            return
        flush_metrics(2.0)

    atexit.register(_at_exit)
