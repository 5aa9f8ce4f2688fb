"""torch.profiler integration: ncclprof.profile and ncclprof.trace_handler.

On each trace-ready a process leaves, in the trace directory:
  <worker>.pt.trace.json.gz           torch.profiler's (Kineto) trace
  ncclprof-<host>-<pid>-<n>.trace.json the plugin's NCCL trace of the same window
  <worker>.merged.json.gz              both, linked by ncclmerge: open it in ui.perfetto.dev
where <worker> is rank<RANK> under torchrun (else <host>_<pid>); a process's later traces in
the same directory are <worker>.1.*, <worker>.2.*, ...
"""

from __future__ import annotations

import gzip
import inspect
import json
import logging
import os
import shutil
import subprocess
import threading
import warnings
import weakref

import torch.profiler

from . import _control, _dist, _enable, _merge
from ._errors import MergeError, NcclprofWarning

log = logging.getLogger("ncclprof")

# Output names already used by this process, per (directory, worker): a second profiling
# session in the same directory does not overwrite the first one's files.
_names_lock = threading.Lock()
_names_used: dict = {}

_warned: set = set()


def _warn_once(key: str, msg: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(msg, NcclprofWarning, stacklevel=3)


class _Session:
    """One profiling session of this process: the plugin's trace windows, step labels, and
    what each trace-ready wrote."""

    def __init__(self, trace_dir, worker_name, merge, label_steps, flush_timeout):
        _enable.ensure_enabled()
        self.dir = os.path.abspath(os.fspath(trace_dir)) if trace_dir else _enable.trace_dir_default()
        self.worker = worker_name
        self.merge = bool(merge)
        self.label_steps = bool(label_steps)
        self.flush_timeout = float(flush_timeout)
        self.outputs: list = []
        self.window_open = False
        self._files: list = []
        self._status = None
        self._labelled = None
        self._labels_set = False

    # -- the plugin's trace window
    def open_window(self) -> None:
        if self.window_open or _control.in_forked_child():
            return
        if _control.trace_start(self.dir, min(1.0, self.flush_timeout)):
            self.window_open = True
            self._labelled = None

    def close_window(self) -> None:
        if not self.window_open:
            return
        self.window_open = False
        self._files = _control.trace_stop(self.flush_timeout) or []
        self._status = _control.last_stop_status
        if self._labels_set:
            self._labels_set = False
            _control.restore_step_label()

    def label(self, step_num: int) -> None:
        if self.label_steps and self.window_open and step_num != self._labelled:
            self._labelled = step_num
            self._labels_set = True
            _control.set_step(f"ProfilerStep#{step_num}", _user=False)

    # -- trace-ready
    def _stem(self, worker: str) -> str:
        with _names_lock:
            key = (self.dir, worker)
            n = _names_used.get(key, 0)
            _names_used[key] = n + 1
        return worker if n == 0 else f"{worker}.{n}"

    def trace_ready(self, prof) -> dict:
        self.close_window()
        worker = self.worker or _dist.worker_name()
        stem = self._stem(worker)
        os.makedirs(self.dir, exist_ok=True)
        kineto = os.path.join(self.dir, f"{stem}.pt.trace.json.gz")
        rec = {"worker": worker, "kineto": kineto, "nccl": list(self._files), "merged": None,
               "summary": None, "error": None, "plugin": self._status}
        self._files = []
        try:
            prof.export_chrome_trace(kineto)
        except Exception as e:  # the job goes on; the plugin's trace is kept
            rec["kineto"], rec["error"] = None, f"exporting torch.profiler's trace failed: {e}"
            hint = (" torch saves a trace once and another on_trace_ready saved it first: call "
                    "ncclprof's handler before yours, or give yours to "
                    "ncclprof.profile(on_trace_ready=...).") if "already saved" in str(e) else ""
            _warn_once(f"export:{e}", f"ncclprof: torch.profiler's trace could not be exported "
                       f"to {kineto} ({type(e).__name__}: {e}), so nothing was merged; the "
                       f"plugin's trace is kept ({', '.join(rec['nccl']) or 'none written'})."
                       + hint)
        if not rec["nccl"]:
            self._explain_no_nccl()
        if self.merge and rec["kineto"]:
            out = os.path.join(self.dir, f"{stem}.merged.json.gz")
            try:
                rec["summary"] = _merge.merge(kineto, rec["nccl"], out)
                rec["merged"] = out
            except (MergeError, OSError, subprocess.SubprocessError) as e:
                rec["error"] = str(e)
                nccl = " ".join(f"--nccl {p}" for p in rec["nccl"])
                _warn_once(f"merge:{e}", f"ncclprof: the merge failed, the traces are kept "
                           f"({kineto}{', ' + ', '.join(rec['nccl']) if rec['nccl'] else ''}). "
                           f"{e}\nTo retry: python -m ncclprof merge --kineto {kineto} {nccl} "
                           f"-o {out}")
        if rec["merged"]:
            r = (rec["summary"] or {}).get("ranks") or [{}]
            linked = sum((r[0].get("linked") or {}).values())
            log.info("ncclprof: wrote %s (%d NCCL events, %d NCCL kernels, %d linked)",
                     rec["merged"], (r[0].get("events_in") or {}).get("nccl", 0),
                     r[0].get("nccl_kernels", 0), linked)
        self.outputs.append(rec)
        return rec

    def _explain_no_nccl(self) -> None:
        st = self._status
        if st == _control.NOT_STARTED:
            groups = _enable._nccl_process_groups()
            if not groups:
                _warn_once("no-nccl", "ncclprof: no NCCL communicator was created in this process "
                           "(no NCCL process group), so the merged trace holds torch.profiler's "
                           "events only.")
            else:
                _warn_once("not-loaded", "ncclprof: NCCL has not started the ncclprof plugin in "
                           "this process, so the merged trace holds torch.profiler's events only: "
                           "either no NCCL operation ran yet (communicators are created lazily), or "
                           "NCCL loaded no profiler or another one. Call ncclprof.enable() before "
                           "torch.distributed.init_process_group(); NCCL_PROFILER_PLUGIN is "
                           f"{os.environ.get('NCCL_PROFILER_PLUGIN')!r}.")
        elif st == _control.TIMEOUT:
            _warn_once("timeout", f"ncclprof: the plugin did not finish writing its trace within "
                       f"{self.flush_timeout:g} s (flush_timeout); its file will be complete later "
                       f"in {self.dir}, merge it then with python -m ncclprof merge.")
        elif st == _control.FLUSHED:
            s = _control.stats()
            if s.get("trace_errors"):
                _warn_once("trace-error", "ncclprof: the plugin could not write its trace (see "
                           "the ncclprof warning in NCCL's log, NCCL_DEBUG=WARN); check that "
                           f"{self.dir} is writable and not full.")


# ncclprof.profile's own keyword arguments, after torch.profiler.profile's (see _mirror_torch).
_OWN_ARGS = (("trace_dir", None), ("worker_name", None), ("merge", True), ("label_steps", True),
             ("flush_timeout", 10.0))


class profile(torch.profiler.profile):
    """A drop-in for ``torch.profiler.profile`` that also records what NCCL did.

    Takes every argument of ``torch.profiler.profile`` of the installed torch (``activities``,
    ``schedule``, ``on_trace_ready``, ``record_shapes``, …; its signature is torch's) and in
    addition:

    Args:
        trace_dir: where the traces go (default: ``enable(trace_dir=...)``, else
            ``NCCLPROF_TRACE_DIR``, else ``./ncclprof-out``).
        worker_name: names this process's files (default ``rank<RANK>``, else
            ``<host>_<pid>``).
        merge: run ncclmerge on each trace-ready (default True).
        label_steps: name each profiled step ``ProfilerStep#N`` in the plugin (an instant in
            its trace and an attribute of its metrics while the window is open); the label the
            program set with ``ncclprof.set_step`` comes back after the window.
        flush_timeout: seconds to wait for the plugin to write its trace at the end of a window.

    While torch records (its active steps), the plugin's trace window is open; on each
    trace-ready the Kineto trace is exported, the plugin's trace completed, and both merged into
    ``<trace_dir>/<worker>.merged.json.gz``. A given ``on_trace_ready`` runs afterwards, and may
    export the trace itself (``tensorboard_trace_handler``), as may the program after the
    ``with``: torch saves a cycle's trace once, so those exports get a copy of the file ncclprof
    saved (the same bytes). ``outputs`` lists what each trace-ready wrote. Calls
    ``ncclprof.enable()`` (defaults) if the program did not.
    """

    def __init__(self, *args, trace_dir=None, worker_name=None, merge=True, label_steps=True,
                 flush_timeout=10.0, on_trace_ready=None, **kwargs):
        user = on_trace_ready
        if isinstance(user, TraceHandler):
            if trace_dir is not None and os.path.abspath(trace_dir) != user.session.dir:
                raise ValueError("trace_dir differs from the ncclprof.trace_handler's directory; "
                                 "give it once")
            self._ncclprof = user.session
            user = None
        else:
            self._ncclprof = _Session(trace_dir, worker_name, merge, label_steps, flush_timeout)
        self._ncclprof_user_ready = user
        super().__init__(*args, on_trace_ready=self._ncclprof_ready, **kwargs)

    @property
    def outputs(self) -> list:
        """One dict per trace-ready: ``kineto``, ``nccl`` (plugin trace files), ``merged``,
        ``summary`` (ncclmerge's), ``error``, ``plugin`` (how the final flush went)."""
        return self._ncclprof.outputs

    def _ncclprof_ready(self, prof) -> None:
        self._ncclprof.trace_ready(prof)
        if self._ncclprof_user_ready is not None:
            self._ncclprof_user_ready(prof)

    def export_chrome_trace(self, path, *args, **kwargs):
        return _export_once(self, super().export_chrome_trace, path, args, kwargs)

    export_chrome_trace.__doc__ = torch.profiler.profile.export_chrome_trace.__doc__

    def start_trace(self) -> None:
        self._ncclprof.open_window()
        try:
            super().start_trace()
        except BaseException:
            self._ncclprof.close_window()
            raise
        self._ncclprof.label(self.step_num)
        _add_metadata(self, self._ncclprof)

    def stop_trace(self) -> None:
        try:
            super().stop_trace()
        finally:
            self._ncclprof.close_window()

    def step(self) -> None:
        super().step()
        self._ncclprof.label(self.step_num)


def _mirror_torch(init) -> None:
    """Gives `init` the signature of the installed torch's profile.__init__ with ncclprof's
    keyword arguments added, so that help() and inspect show what is accepted: every torch
    argument is passed on untouched (tests/test_torch_dropin.py compares the two)."""
    sig = inspect.signature(torch.profiler.profile.__init__)
    params = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    clash = sorted(set(sig.parameters) & {name for name, _ in _OWN_ARGS})
    if clash:  # a newer torch took one of our names: ours would hide torch's
        _warn_once("clash", f"ncclprof.profile: torch.profiler.profile now has an argument "
                   f"named {', '.join(clash)}, which ncclprof.profile takes for itself; pass it "
                   "to torch.profiler.profile with ncclprof.trace_handler instead.")
    params += [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default)
               for name, default in _OWN_ARGS if name not in sig.parameters]
    params += [p for p in sig.parameters.values() if p.kind is inspect.Parameter.VAR_KEYWORD]
    init.__signature__ = sig.replace(parameters=params)


_mirror_torch(profile.__init__)


# -- one Kineto save per cycle, any number of exports
#
# A cycle's Kineto trace can be saved once: torch's export_chrome_trace saves it through
# ProfilerResult.save, which moves the recorded buffers out and refuses a second call with
# "Trace is already saved." (torch 2.7 to 2.15 at least). ncclprof exports at every
# trace-ready, and the program may export the same cycle again (its on_trace_ready,
# tensorboard_trace_handler, export_chrome_trace after the `with`). So the first save of a
# cycle is remembered and a later export of that cycle is a copy of its file, gzip'd or not as
# the path asks: the bytes torch would have written.

def _export_once(prof, export, path, args, kwargs):
    """Calls torch's `export` (prof's export_chrome_trace, bound) unless this cycle's trace is
    already saved, in which case the saved file is copied to `path`."""
    cycle = _cycle(prof)
    first = getattr(prof, "_ncclprof_saved", None)
    saved = first[1] if first is not None and cycle is not None and first[0]() is cycle else None
    plain = _plain_save(export, path, args, kwargs)
    if saved and plain:
        return _copy_trace(saved, os.fspath(path))
    try:
        ret = export(path, *args, **kwargs)
    except RuntimeError as e:
        # An export with other options (torch 2.15's python exporter reads the trace without
        # saving it) that still took the save path: serve the copy all the same.
        if saved and "already saved" in str(e):
            return _copy_trace(saved, os.fspath(path))
        raise
    if cycle is not None and plain and not saved:
        prof._ncclprof_saved = (_weak(cycle), os.path.abspath(os.fspath(path)))
    return ret


def _cycle(prof):
    """The recorded cycle an export would save: torch's ProfilerResult (a new one per cycle,
    also with acc_events=True), or None where there is none to identify."""
    return getattr(getattr(prof, "profiler", None), "kineto_results", None)


def _weak(obj):
    try:
        return weakref.ref(obj)
    except TypeError:  # not weakly referenceable: holding it until the next cycle is fine
        return lambda: obj


def _plain_save(export, path, args, kwargs) -> bool:
    """Whether the call is export(path) with every other argument at its default: the call
    that saves the Kineto trace."""
    if not args and not kwargs:
        return True
    try:
        sig = inspect.signature(export)
        bound = sig.bind(path, *args, **kwargs)
    except (TypeError, ValueError):
        return False
    first = next(iter(sig.parameters))
    return all(name == first or _same(value, sig.parameters[name].default)
               for name, value in bound.arguments.items())


def _same(a, b) -> bool:
    try:
        return a is b or bool(a == b)
    except Exception:  # a value that does not compare (an array): not the default
        return False


def _copy_trace(src: str, dst: str) -> None:
    if os.path.abspath(dst) == src:
        return None
    if not os.path.isfile(src):
        raise RuntimeError(f"this profiling cycle's trace was saved to {src}, which is gone; "
                           "torch saves a cycle's trace once (ncclprof serves later exports from "
                           "that file): keep it until the exports are done")
    if src.endswith(".gz") == dst.endswith(".gz"):
        shutil.copyfile(src, dst)
        return None
    with (gzip.open(src, "rb") if src.endswith(".gz") else open(src, "rb")) as fin, \
            (gzip.open(dst, "wb") if dst.endswith(".gz") else open(dst, "wb")) as fout:
        shutil.copyfileobj(fin, fout, 1 << 20)
    return None


def _add_metadata(prof, session) -> None:
    info = {"version": _control.plugin_version(), "trace_dir": session.dir,
            "pid": os.getpid(), **_dist.rank_info()}
    try:
        prof.add_metadata_json("ncclprof", json.dumps(info))
    except Exception:  # older torch, or not recording: the metadata is a convenience
        pass


class TraceHandler:
    """What ``ncclprof.trace_handler(dir)`` returns: an ``on_trace_ready`` callable for a
    ``torch.profiler.profile`` the program creates itself.

    The plugin's trace window opens when the handler is created (create it where the profiler
    is created) and closes at the first trace-ready; from then on the handler has hooked the
    profiler, so later cycles open and close with torch's active steps exactly, as with
    ``ncclprof.profile``.
    """

    def __init__(self, trace_dir=None, worker_name=None, merge=True, label_steps=True,
                 flush_timeout=10.0):
        self.session = _Session(trace_dir, worker_name, merge, label_steps, flush_timeout)
        self._hooked: set = set()
        self.session.open_window()

    @property
    def outputs(self) -> list:
        return self.session.outputs

    def __call__(self, prof) -> dict:
        first = id(prof) not in self._hooked
        if first:
            _hook_export(prof)  # before this trace-ready's export, so that it is remembered
        rec = self.session.trace_ready(prof)
        if first:
            self._hooked.add(id(prof))
            _hook(prof, self.session)
        return rec

    def close(self) -> None:
        """Closes the plugin's trace window if it is still open (a profiler that never reached
        trace-ready)."""
        self.session.close_window()


def _hook(prof, session) -> None:
    """Makes `prof` open and close the plugin's window with its own start_trace/stop_trace and
    label its steps (torch.profiler.profile keeps its transitions in `action_map`)."""
    amap = getattr(prof, "action_map", None)
    start, stop = getattr(prof, "start_trace", None), getattr(prof, "stop_trace", None)
    if not isinstance(amap, dict) or start is None or stop is None:
        _warn_once("hook", "ncclprof.trace_handler: this torch.profiler has no action_map; only "
                   "its first cycle gets an NCCL trace. Use ncclprof.profile instead.")
        return

    def wrapped_start():
        session.open_window()
        try:
            start()
        except BaseException:
            session.close_window()
            raise
        session.label(prof.step_num)

    def wrapped_stop():
        try:
            stop()
        finally:
            session.close_window()

    for lst in amap.values():
        # In place: the transition that is running now (this trace-ready) iterates these lists.
        for i, fn in enumerate(lst):
            if fn == start:
                lst[i] = wrapped_start
            elif fn == stop:
                lst[i] = wrapped_stop
    step = prof.step

    def wrapped_step():
        step()
        session.label(prof.step_num)

    prof.step = wrapped_step


def _hook_export(prof) -> None:
    """Makes `prof`'s export_chrome_trace serve a cycle's later exports from its first save,
    as ncclprof.profile's does (see _export_once): the program's own export after the `with`
    works although the handler already saved the trace."""
    export = getattr(prof, "export_chrome_trace", None)
    if export is None or getattr(export, "_ncclprof", False):
        return

    def export_chrome_trace(path, *args, **kwargs):
        return _export_once(prof, export, path, args, kwargs)

    export_chrome_trace._ncclprof = True
    export_chrome_trace.__doc__ = export.__doc__
    prof.export_chrome_trace = export_chrome_trace


def trace_handler(trace_dir=None, worker_name=None, merge=True, label_steps=True,
                  flush_timeout=10.0) -> TraceHandler:
    """``on_trace_ready`` for a ``torch.profiler.profile`` you create yourself, like
    ``torch.profiler.tensorboard_trace_handler``: each trace-ready exports the Kineto trace,
    completes the plugin's trace and merges both into ``<trace_dir>/<worker>.merged.json.gz``.
    See TraceHandler for when the plugin's window is open."""
    return TraceHandler(trace_dir, worker_name, merge, label_steps, flush_timeout)
