"""The control calls on the real plugin library, with the NCCL stand-in driving it in the same
process (each test in a process of its own)."""

import json
import re
import os
import shutil

from conftest import run_py
from nccl_standin import EVENTS_PER_ALLREDUCE, EVENTS_PER_SENDRECV

PRELUDE = """
import glob, json, os, sys
import ncclprof
from nccl_standin import NCCL
def out(k, v): print(k, json.dumps(v), flush=True)
"""


def _results(stdout: str) -> dict:
    res = {}
    for line in stdout.splitlines():
        k, _, v = line.partition(" ")
        if k.isupper() and v:
            res[k] = json.loads(v)
    return res


def test_before_nccl_starts_the_plugin():
    r = _results(run_py(PRELUDE, """
        ncclprof.enable()
        out("VERSION", ncclprof.plugin_version())
        out("FLUSH", ncclprof.flush(1.0))
        out("COUNTERS", ncclprof.counters())
        out("STATS", ncclprof.stats())
        out("WINDOW", [ncclprof.trace_start("tdir"), ncclprof.set_step("warmup"), ncclprof.trace_stop()])
    """).stdout)
    assert r["VERSION"] == ncclprof_version()
    assert r["FLUSH"] == "not-started"  # no communicator: nothing was ever initialized
    c = r["COUNTERS"]
    assert list(c)[:3] == ["events", "dropped_windows_full", "dropped_too_many_threads"]
    assert len(c) >= 20 and all(v == 0 for v in c.values())
    assert not any(k.startswith("value_") for k in c), c  # every counter has its name
    s = r["STATS"]
    assert {"trace_files", "trace_events", "trace_bytes", "trace_errors"} <= set(s)
    assert s["trace_files"] == 0
    assert r["WINDOW"] == [True, True, []]  # no file: NCCL never started the plugin


def ncclprof_version():
    import ncclprof
    return ncclprof.__version__


def test_one_copy_shared_with_nccl():
    # NCCL dlopens NCCL_PROFILER_PLUGIN; the package loads library_path(): the same mapping.
    r = _results(run_py(PRELUDE, """
        ncclprof.enable()
        ncclprof.stats()
        nccl = NCCL()
        out("SAME", nccl.lib._handle == ncclprof._control.lib()._handle)
        maps = [l.split()[-1] for l in open("/proc/self/maps") if "libnccl-profiler" in l]
        out("MAPPED", sorted(set(maps)))
        out("LOADED", ncclprof._control.loaded_path())
    """).stdout)
    assert r["SAME"] is True
    assert r["MAPPED"] == [r["LOADED"]]


def test_refuses_a_second_copy(tmp_path):
    other = tmp_path / "libnccl-profiler-ncclprof.so"
    shutil.copy(_lib(), other)
    p = run_py(PRELUDE, f"""
        import ctypes
        ctypes.CDLL({str(other)!r})  # another copy is already in the process
        try:
            ncclprof.stats()
        except ncclprof.PluginConflictError as e:
            out("ERROR", str(e))
        out("LOADED", ncclprof._control.loaded())
    """)
    r = _results(p.stdout)
    assert "another ncclprof library is already loaded in this process" in r["ERROR"]
    assert f"NCCLPROF_LIBRARY={other}" in r["ERROR"]
    assert r["LOADED"] is False


def _lib():
    import ncclprof
    return ncclprof.library_path()


def test_events_counted_and_mask_changed_at_run_time():
    r = _results(run_py(PRELUDE, """
        ncclprof.enable()
        nccl = NCCL(); comm = nccl.comm()
        out("MASK0", nccl.mask.value)
        for _ in range(10): comm.sendrecv_self()
        for _ in range(4): comm.allreduce()
        out("FLUSH", ncclprof.flush(5))
        out("EVENTS1", ncclprof.counters()["events"])
        out("PREV", ncclprof.set_event_mask("none"))
        out("MASK1", nccl.mask.value)      # what NCCL reads per operation
        for _ in range(10): comm.sendrecv_self()
        out("EVENTS2", ncclprof.counters()["events"])
        ncclprof.set_event_mask(["p2p", "p2papi"])
        out("MASK2", nccl.mask.value)
        for _ in range(3): comm.sendrecv_self()
        ncclprof.flush(5)
        out("EVENTS3", ncclprof.counters()["events"])
        out("ENV", os.environ["NCCLPROF_EVENT_MASK"])
    """).stdout)
    assert r["MASK0"] == 0xF1F  # the plugin's default mask, written into NCCL's at init
    assert r["FLUSH"] == "flushed"
    assert r["EVENTS1"] == 10 * EVENTS_PER_SENDRECV + 4 * EVENTS_PER_ALLREDUCE
    assert r["PREV"] == 0xF1F and r["MASK1"] == 0
    assert r["EVENTS2"] == r["EVENTS1"]  # nothing asked for, nothing recorded
    assert r["MASK2"] == 0x404
    assert r["EVENTS3"] == r["EVENTS1"] + 3 * 4  # two P2pApi and two P2p per send/recv
    assert r["ENV"] == "p2p,p2papi"  # communicators created later start with it


def test_trace_window_holds_what_happened_inside_it(tmp_path):
    d = tmp_path / "traces"
    r = _results(run_py(PRELUDE, f"""
        d = {str(d)!r}
        ncclprof.enable()
        nccl = NCCL(); comm = nccl.comm(name="world")
        for _ in range(3): comm.sendrecv_self()           # before the window
        ncclprof.trace_start(d)
        ncclprof.flush(2)
        for i in range(5):
            ncclprof.set_step(f"train {{i}}")
            comm.sendrecv_self(count=256 * (i + 1))
        out("STOP", ncclprof.trace_stop())
        out("FLUSH", ncclprof._control.last_stop_status)
        for _ in range(4): comm.sendrecv_self()           # after it
        ncclprof.flush(2)
        out("FILES", sorted(glob.glob(d + "/*")))
        out("PID", os.getpid())
        out("STATS", ncclprof.stats())
    """).stdout)
    assert r["FLUSH"] == "flushed"
    files = r["FILES"]
    assert len(files) == 1 and r["STOP"] == files  # trace_stop() names what the window wrote
    assert os.path.basename(files[0]).startswith("ncclprof-")
    assert files[0].endswith(f"-{r['PID']}-0.trace.json")
    with open(files[0]) as f:
        t = json.load(f)
    assert t["ncclprof"]["pid"] == r["PID"] and t["ncclprofEnd"]["complete"] is True
    ev = t["traceEvents"]
    sends = [e for e in ev if e.get("cat") == "nccl_p2p" and e["name"] == "Send"]
    assert len(sends) == 5  # the 3 before and the 4 after are outside the window
    assert sorted(e["args"]["count"] for e in sends) == [256, 512, 768, 1024, 1280]
    assert all(e["args"]["peer"] == 0 and e["pid"] == r["PID"] for e in sends)
    apis = [e["name"] for e in ev if e.get("cat") == "nccl_api"]
    assert apis.count("ncclSend") == 5 and apis.count("ncclRecv") == 5 and apis.count("ncclGroup") == 5
    assert sum(1 for e in ev if e.get("cat") == "nccl_launch") == 5
    steps = [e["args"]["step"] for e in ev if e.get("name") == "ncclprof_step"]
    assert steps == [f"train {i}" for i in range(5)]
    comms = [e["args"] for e in ev if e.get("name") == "ncclprof_comm"]
    assert comms[0]["name"] == "world" and comms[0]["nranks"] == 1
    assert r["STATS"]["trace_files"] == 1
    assert r["STATS"]["trace_events"] == t["ncclprofEnd"]["events"] > 0
    assert r["STATS"]["trace_errors"] == 0


def test_counters_have_one_name_everywhere(tmp_path):
    # Issue 13 #7: Python's counters(), the trace's health section and the summary's read the
    # plugin's one list of names: the same names, for the same values once everything is written.
    d = tmp_path / "out"
    r = _results(run_py(PRELUDE, f"""
        ncclprof.enable(output_dir={str(d)!r}, trace_all=True)
        nccl = NCCL(); comm = nccl.comm()
        for _ in range(5): comm.sendrecv_self()
        comm.finalize()
        out("COUNTERS", ncclprof.counters())
        out("STATS", ncclprof.stats())
    """).stdout)
    c = r["COUNTERS"]
    assert c["events"] == 5 * EVENTS_PER_SENDRECV and not any(k.startswith("value_") for k in c)
    assert set(r["STATS"]) >= {"trace_files", "summaries", "go_heap_bytes"}
    assert not any(k.startswith("value_") for k in r["STATS"])
    [summary] = d.glob("ncclprof-summary-*.json")
    [trace] = d.glob("ncclprof-*.trace.json")
    in_summary = json.loads(summary.read_text())["process_counters"]
    in_trace = json.loads(trace.read_text())["ncclprofEnd"]["counters"]
    assert set(c) == set(in_summary) == set(in_trace)
    assert in_summary["events"] == in_trace["events"] == c["events"]


def test_every_counter_has_its_own_name():
    # The one list (np_counter_names in control.c): a counter added to the NP_C_* enum without a
    # name there, or two with one name, fails here; names are metrics attributes and JSON keys.
    r = _results(run_py(PRELUDE, """
        import ctypes
        lb = ctypes.CDLL(ncclprof.library_path())
        lb.ncclprof_counter_name.restype = ctypes.c_char_p
        n = lb.ncclprof_counters(None, 0)
        out("NAMES", [(lb.ncclprof_counter_name(i) or b"").decode() for i in range(n)])
        out("PAST", lb.ncclprof_counter_name(n))
    """).stdout)
    names = r["NAMES"]
    assert len(names) >= 28 and all(names), f"counters without a name: {[i for i, v in enumerate(names) if not v]}"
    assert len(set(names)) == len(names), f"names used twice: {sorted(v for v in names if names.count(v) > 1)}"
    assert all(re.fullmatch(r"[a-z][a-z0-9_]*", v) for v in names), names
    assert r["PAST"] is None

def test_step_label_length_and_clearing():
    r = _results(run_py(PRELUDE, """
        ncclprof.enable()
        out("LONG", ncclprof.set_step("é" * 100))   # 200 bytes: cut on a character boundary
        out("KEPT", ncclprof._control._user_label)
        out("CLEAR", ncclprof.set_step(None))
    """).stdout)
    assert r["LONG"] is True and r["KEPT"] == "é" * 59 and r["CLEAR"] is True


def test_exit_flush_completes_the_trace(tmp_path):
    # A job that exits without destroying its communicators: the exit hook processes what the
    # plugin still holds, so the last events reach the trace.
    # NCCLPROF_TRACE=1 as a launcher sets it: the whole run is traced.
    d = tmp_path / "t"
    run_py(PRELUDE, """
        ncclprof.enable()
        nccl = NCCL(); comm = nccl.comm()
        for _ in range(7): comm.sendrecv_self()
    """, env={"NCCLPROF_TRACE": "1", "NCCLPROF_TRACE_DIR": str(d)})
    files = list(d.glob("ncclprof-*.trace.json"))
    assert len(files) == 1
    t = json.loads(files[0].read_text())
    assert sum(1 for e in t["traceEvents"] if e.get("cat") == "nccl_p2p") == 14


def test_event_mask_set_before_nccl_starts_applies_from_its_first_communicator():
    r = _results(run_py(PRELUDE, """
        ncclprof.enable()
        ncclprof.set_event_mask("coll,collapi")   # the library is loaded, NCCL has not started it
        nccl = NCCL(); comm = nccl.comm()
        out("MASK", nccl.mask.value)
        comm.allreduce(); comm.sendrecv_self()
        ncclprof.flush(5)
        out("EVENTS", ncclprof.counters()["events"])
    """).stdout)
    assert r["MASK"] == 0x202
    assert r["EVENTS"] == 2  # the CollApi and the Coll of the all-reduce; nothing of the send/recv


def test_dump_inflight_names_the_open_operation():
    # With KernelCh recorded, an AllReduce whose kernel never starts is in flight: a dump asked
    # for from Python (as a timeout handler would) shows it, with NCCL's seq and count.
    r = _results(run_py(PRELUDE, """
        ncclprof.enable(event_mask="default,kernelch")
        out("BEFORE", ncclprof.dump_inflight())
        nccl = NCCL()
        c = nccl.comm(nranks=1)
        c.allreduce(count=4096)
        c.allreduce(count=8192)
        out("DUMP", ncclprof.dump_inflight())
        d = json.load(open(glob.glob("ncclprof-out/ncclprof-hang-*.json")[0]))
        out("REASON", [d["reason"], d["dumps_written"], d["simulated"]])
        out("OPEN", [[o["func"], o["seq"], o["count"], len(o["kernel_channels"])]
                     for cm in d["comms"] for o in cm["open_ops"]])
        c.finalize()
    """).stdout)
    assert r["BEFORE"] == "not-started"  # no communicator yet
    assert r["DUMP"] == "written"
    assert r["REASON"] == ["request", 1, False]
    assert r["OPEN"] == [["AllReduce", 0, 4096, 0], ["AllReduce", 1, 8192, 0]]


def test_dump_inflight_says_why_it_failed():
    # Issue 23 item 15: a dump that cannot be written (here the output directory is a regular
    # file; for an unprivileged user a directory without write permission fails the same way)
    # used to come back as "timeout" within milliseconds. It now says the real reason.
    r = _results(run_py(PRELUDE, """
        import time
        open("not-a-dir", "w").close()
        os.environ["NCCLPROF_OUTPUT_DIR"] = os.path.abspath("not-a-dir")
        ncclprof.enable(event_mask="default,kernelch")
        nccl = NCCL()
        c = nccl.comm(nranks=1)
        c.allreduce(count=4096)
        t0 = time.monotonic()
        res = ncclprof.dump_inflight()
        out("DUMP", [res, time.monotonic() - t0])
        c.finalize()
    """).stdout)
    res, took = r["DUMP"]
    assert res.startswith("failed: "), res
    assert "not-a-dir" in res and "not a directory" in res, res
    assert took < 5, took
