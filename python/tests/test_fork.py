"""Fork safety: a child forked from a process in which the plugin runs (DataLoader workers)
must never call into it, and must exit cleanly."""

import json

from conftest import run_py

LIVE_PARENT = """
import json, os, sys, time
import ncclprof
from nccl_standin import NCCL
ncclprof.enable()
comm = NCCL().comm()
for _ in range(3): comm.sendrecv_self()
ncclprof.trace_start("traces")                 # a trace window is open in the parent
assert ncclprof.flush(5) == ncclprof.FLUSHED  # the drainer (a Go goroutine) is running
lib = ncclprof._control.lib()

def wait(pid, limit):
    t0 = time.time()
    while time.time() - t0 < limit:
        got, status = os.waitpid(pid, os.WNOHANG)
        if got:
            return os.waitstatus_to_exitcode(status), time.time() - t0
        time.sleep(0.02)
    os.kill(pid, 9); os.waitpid(pid, 0)
    return "hung", limit
"""


def test_library_itself_answers_in_a_forked_child():
    # Straight into the plugin, without the package's guard (a program that forked without
    # importing ncclprof): the child inherits the mapping but not the Go runtime's threads, so
    # the library answers both flushes at once with 3 ("forked child") instead of waiting out
    # the timeout for a drainer that does not exist there, or entering the Go runtime.
    p = run_py(LIVE_PARENT, """
        pid = os.fork()
        if pid == 0:
            t0 = time.time()
            rc = [lib.ncclprof_flush(1500), lib.ncclprof_metrics_flush(1500)]
            os.write(1, f"CHILD {json.dumps([rc, round(time.time() - t0, 2)])}\\n".encode())
            os._exit(0)
        print("PARENT", json.dumps(wait(pid, 30)), flush=True)
        print("PARENT_FLUSH", json.dumps(ncclprof.flush(5)))  # the parent's plugin still works
    """)
    out = {l.split(" ", 1)[0]: json.loads(l.split(" ", 1)[1]) for l in p.stdout.splitlines() if " " in l}
    rc, took = out["CHILD"]
    assert rc == [3, 3] and took < 1.0
    assert out["PARENT"][0] == 0
    assert out["PARENT_FLUSH"] == "flushed"


def test_forked_child_never_calls_the_plugin():
    p = run_py(LIVE_PARENT, """
        import atexit
        pid = os.fork()
        if pid == 0:
            t0 = time.time()
            got = {
                "in_child": ncclprof.in_forked_child(),
                "set_step": ncclprof.set_step("worker"),
                "flush": ncclprof.flush(5),
                "flush_metrics": ncclprof.flush_metrics(5),
                "trace_start": ncclprof.trace_start("elsewhere"),
                "trace_stop": ncclprof.trace_stop(),
                "counters": ncclprof.counters(),
                "stats": ncclprof.stats(),
                "set_event_mask": ncclprof.set_event_mask("all"),
                "get_event_mask": ncclprof.get_event_mask(),
                "version": ncclprof.plugin_version(),
                "handle": ncclprof._control._lib is not None,
            }
            got["seconds"] = round(time.time() - t0, 3)
            print("CHILD", json.dumps(got), flush=True)
            sys.exit(0)  # a normal interpreter exit: atexit handlers (ncclprof's too) run
        code, took = wait(pid, 30)
        print("PARENT", json.dumps([code, took]))
        ncclprof.set_step("parent step")
        ncclprof.trace_stop()
        print("PARENT_FLUSH", json.dumps(ncclprof.flush(5)))
        print("TRACE", json.dumps(sorted(os.listdir("traces"))))
    """)
    out = {l.split(" ", 1)[0]: json.loads(l.split(" ", 1)[1]) for l in p.stdout.splitlines() if " " in l}
    child = out["CHILD"]
    assert child == {
        "in_child": True, "set_step": False, "flush": "forked-child",
        "flush_metrics": "forked-child", "trace_start": False, "trace_stop": None,
        "counters": {}, "stats": {}, "set_event_mask": None, "get_event_mask": None,
        "version": None, "handle": False, "seconds": child["seconds"]}
    assert child["seconds"] < 0.5  # no call waited for anything
    code, took = out["PARENT"]
    assert code == 0 and took < 10  # exited cleanly, atexit included
    assert out["PARENT_FLUSH"] == "flushed"
    assert len(out["TRACE"]) == 1  # the parent's window went on; the child opened none


def test_child_forked_before_the_plugin_loaded_may_load_it():
    # Nothing was mapped at the fork: the child is a fresh process as far as the plugin goes.
    p = run_py("""
        import json, os, ncclprof
        ncclprof.enable()
        pid = os.fork()
        if pid == 0:
            print("CHILD", json.dumps([ncclprof.in_forked_child(), ncclprof.plugin_version(),
                                       ncclprof.flush(1)]), flush=True)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        print("STATUS", os.waitstatus_to_exitcode(status))
        print("PARENT_LOADED", json.dumps(ncclprof._control.loaded()))
    """)
    assert f'CHILD [true, "{__import__("ncclprof").__version__}", "not-started"]' in p.stdout
    assert "STATUS 0" in p.stdout and "PARENT_LOADED false" in p.stdout
