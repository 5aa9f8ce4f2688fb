"""ncclprof.merge / check and ncclprof.trace_handler on the real Kineto traces in
<repo>/testdata/kineto (torch is not needed here; test_torch.py covers torch itself)."""

import gzip
import json

import pytest

import ncclprof
from conftest import real_trace, run_py

NCCL_DATA = "nccl_parser_config_nccl_data.json.gz"  # rank 0 of 2: 21 NCCL kernels, 40573 events


def _load(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def plugin_trace(tmp_path_factory):
    """A real plugin trace, written by the plugin in another process (the NCCL stand-in)."""
    d = tmp_path_factory.mktemp("plugin")
    run_py("""
        import ncclprof
        from nccl_standin import NCCL
        ncclprof.enable()
        comm = NCCL().comm(name="world")
        ncclprof.trace_start("t")
        ncclprof.flush(2)
        for _ in range(4):
            comm.sendrecv_self()
        ncclprof.trace_stop()
        assert ncclprof.flush(5) == ncclprof.FLUSHED
    """, cwd=d)
    files = list((d / "t").glob("ncclprof-*.trace.json"))
    assert len(files) == 1
    return files[0]


def test_merge_kineto_only_and_check(tmp_path):
    src = real_trace(NCCL_DATA)
    out = tmp_path / "merged.json.gz"
    s = ncclprof.merge(src, [], out)
    r = s["ranks"][0]
    assert s["output"] == str(out)
    assert r["events_in"] == {"kineto": 40573, "nccl": 0}
    assert r["nccl_kernels"] == 21
    assert r["unlinked_kernels"] == {"no plugin trace for this process": 21}
    # Kineto's flow starts whose kernel fell outside the window are the only events left out.
    assert r["events_out"] == 40573 - r["events_dropped"] and r["events_dropped"] == 88
    merged = _load(out)
    assert merged["baseTimeNanoseconds"] == 1711964646000000000
    assert len(merged["traceEvents"]) == r["events_out"]


def _findings(report, severity):
    return {f["code"]: f["count"] for f in report["findings"] if f["severity"] == severity}


def test_check_reports_what_perfetto_would_drop(tmp_path):
    src = real_trace(NCCL_DATA)
    with pytest.raises(ncclprof.MergeError) as e:
        ncclprof.check(src)  # 88 flows without an end: Perfetto draws nothing for them
    assert '"code": "flow_without_end"' in str(e.value) and '"count": 88' in str(e.value)
    out = tmp_path / "m.json.gz"
    ncclprof.merge(src, [], out)
    [rep] = ncclprof.check(out)  # the merge leaves them out: no error, nothing new
    assert rep["path"] == str(out) and rep["events"] == 40573 - 88
    assert _findings(rep, "error") == {} and _findings(rep, "warning") == {}


def test_merge_refuses_another_process_unless_forced(tmp_path, plugin_trace):
    src = real_trace(NCCL_DATA)
    with pytest.raises(ncclprof.MergeError) as e:
        ncclprof.merge(src, [plugin_trace], tmp_path / "x.json.gz")
    assert "are not the same process" in str(e.value) and "pid 2910249" in str(e.value)
    s = ncclprof.merge(src, [plugin_trace], tmp_path / "forced.json.gz", force=True)
    r = s["ranks"][0]
    plugin_events = len(_load(plugin_trace)["traceEvents"])
    assert r["events_in"]["kineto"] == 40573 and r["events_in"]["nccl"] > 0
    assert r["nccl"] == [str(plugin_trace)]
    merged = _load(tmp_path / "forced.json.gz")
    cats = {e.get("cat") for e in merged["traceEvents"]}
    assert {"kernel", "cpu_op", "nccl_p2p", "nccl_api", "nccl_launch"} <= cats
    assert sum(1 for e in merged["traceEvents"] if e.get("cat") == "nccl_p2p") == 8
    assert merged["ncclprof"]["pid"] == _load(plugin_trace)["ncclprof"]["pid"]
    assert plugin_events > 0


def test_merge_errors_are_clear(tmp_path):
    with pytest.raises(ncclprof.MergeError, match="no such file"):
        ncclprof.merge(tmp_path / "missing.json.gz", [], tmp_path / "o.json")
    with pytest.raises(TypeError, match="output"):
        ncclprof.merge(real_trace(NCCL_DATA), [])


HANDLER = """
import gzip, json, os, shutil, warnings
import ncclprof
from nccl_standin import NCCL

class ExportsARealTrace:
    '''Stands in for torch.profiler.profile at trace-ready: its export_chrome_trace writes a
    real Kineto trace (from testdata/kineto), made this process's when `own` is set.'''
    def __init__(self, src, own):
        self.src, self.own = src, own
        self.action_map, self.step_num = {}, 0  # what the handler hooks; nothing to hook here
    def start_trace(self): pass
    def stop_trace(self): pass
    def step(self): pass
    def export_chrome_trace(self, path):
        with gzip.open(self.src, "rt") as f:
            t = json.load(f)
        if self.own:  # a variant derived in code: the same events, this process's pid
            for e in t["traceEvents"]:
                if e.get("pid") == 2910249:
                    e["pid"] = os.getpid()
        with gzip.open(path, "wt") as f:
            json.dump(t, f)

ncclprof.enable()
comm = NCCL().comm(name="world", nranks=2, rank=0)
handler = ncclprof.trace_handler("out")   # opens the plugin's window
for _ in range(6):
    comm.allreduce()
    comm.sendrecv_self()
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    rec = handler(ExportsARealTrace(SRC, OWN))
print("REC", json.dumps(rec))
print("WARN", json.dumps([str(x.message) for x in w]))
print("FILES", json.dumps(sorted(os.listdir("out"))))
print("PID", os.getpid())
"""


def _run_handler(tmp_path, own):
    p = run_py(f"SRC = {str(real_trace(NCCL_DATA))!r}\nOWN = {own}\n", HANDLER, cwd=tmp_path,
               env={"RANK": "0", "WORLD_SIZE": "2"})
    return {l.split(" ", 1)[0]: json.loads(l.split(" ", 1)[1]) for l in p.stdout.splitlines()
            if l.split(" ", 1)[0] in ("REC", "WARN", "FILES", "PID")}


def test_trace_handler_merges_its_own_process(tmp_path):
    got = _run_handler(tmp_path, own=True)
    rec, pid = got["REC"], got["PID"]
    out = tmp_path / "out"
    assert rec["worker"] == "rank0"
    assert rec["kineto"] == str(out / "rank0.pt.trace.json.gz")
    assert rec["merged"] == str(out / "rank0.merged.json.gz")
    assert rec["nccl"] == [str(out / f"ncclprof-{_host()}-{pid}-0.trace.json")]
    assert rec["error"] is None and rec["plugin"] == "flushed"
    assert got["FILES"] == sorted(["rank0.pt.trace.json.gz", "rank0.merged.json.gz",
                                   f"ncclprof-{_host()}-{pid}-0.trace.json"])
    r = rec["summary"]["ranks"][0]
    assert r["events_in"]["kineto"] == 40573
    assert r["events_in"]["nccl"] == len(_load(rec["nccl"][0])["traceEvents"])
    merged = _load(rec["merged"])
    ev = merged["traceEvents"]
    assert sum(1 for e in ev if e.get("cat") == "nccl_coll" and e["name"] == "AllReduce") == 6
    assert sum(1 for e in ev if e.get("cat") == "kernel" and "AllReduce" in e["name"]) == 15
    assert merged["ncclmerge"]["ranks"][0]["nccl_kernels"] == 21
    assert got["WARN"] == []


def test_trace_handler_keeps_traces_when_the_merge_fails(tmp_path):
    # The Kineto trace is another process's: ncclmerge refuses to pair them, the job goes on,
    # and the warning says how to merge by hand.
    got = _run_handler(tmp_path, own=False)
    rec = got["REC"]
    assert rec["merged"] is None and "are not the same process" in rec["error"]
    assert (tmp_path / "out" / "rank0.pt.trace.json.gz").exists()
    assert len(rec["nccl"]) == 1 and (tmp_path / "out" / rec["nccl"][0]).exists()
    assert not (tmp_path / "out" / "rank0.merged.json.gz").exists()
    [msg] = got["WARN"]
    assert "the merge failed, the traces are kept" in msg
    assert f"python -m ncclprof merge --kineto {rec['kineto']} --nccl {rec['nccl'][0]}" in msg


def _host():
    import socket
    return socket.gethostname()
