"""ncclprof.profile as a drop-in for torch.profiler.profile, with real torch on CPU.

Each documented torch.profiler pattern runs twice in one process, once with
torch.profiler.profile and once with ncclprof.profile in its place, the same code otherwise;
the test compares what the program sees (files, step numbers, key_averages, stacks, shapes,
memory events) with plain torch's and with the values the model implies, and checks that
ncclprof still wrote its merged trace per rank. `make test` runs this file with the newest
torch and with the oldest the package supports (docs/python.md).

torch saves a cycle's Kineto trace once ("Trace is already saved."), and ncclprof exports at
every trace-ready: before ncclprof served later exports from its file, the tensorboard handler
and export_chrome_trace after the `with` died on that error.
"""

import gzip
import inspect
import json
import os

import pytest

from conftest import require_torch, run_py


@pytest.fixture(autouse=True)
def _torch():
    require_torch()


HARNESS = """
import gzip, json, os, sys, traceback, warnings
import torch
import ncclprof
from nccl_standin import NCCL
from torch.profiler import ProfilerActivity, schedule, tensorboard_trace_handler
CPU = [ProfilerActivity.CPU]
warnings.simplefilter("ignore")
ncclprof.enable(trace_dir="ncclprof-out")
comm = NCCL().comm(name="world")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)

def train_step():
    x = torch.randn(32, 64)
    loss = torch.nn.functional.cross_entropy(model(x), torch.randint(0, 10, (32,)))
    loss.backward()
    comm.allreduce(count=64 * 128 + 128 + 128 * 10 + 10)  # what NCCL would do here
    opt.step()
    opt.zero_grad()

def load(path):
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        return json.load(f)

def steps(trace):
    return sorted(e["name"] for e in trace["traceEvents"]
                  if e.get("name", "").startswith("ProfilerStep#") and e.get("cat") != "gpu_user_annotation")

def count(trace, name, cat="cpu_op"):
    return sum(1 for e in trace["traceEvents"] if e.get("cat") == cat and e.get("name") == name)

def averages(prof, name, **kw):
    return [e for e in prof.key_averages(**kw) if e.key == name]

def attempt(fn):
    try:
        return {"ok": fn()}
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}

def run_both(pattern):
    out = {}
    for name, P in (("torch", torch.profiler.profile), ("ncclprof", ncclprof.profile)):
        d = os.path.abspath(name)
        os.makedirs(d)
        try:
            got = pattern(P, d)
        except Exception:
            got = {"raised": traceback.format_exc()}
        if name == "ncclprof" and "raised" not in got:
            got["outputs"] = prof_outputs
        out[name] = got
    print("RESULT " + json.dumps(out))

prof_outputs = None
def keep(prof):
    global prof_outputs
    prof_outputs = getattr(prof, "outputs", None)
"""


def _both(tmp_path, pattern):
    """Runs `pattern` (code defining pattern(P, d)) with torch.profiler.profile and with
    ncclprof.profile; returns both observations, failing on an exception with its traceback."""
    p = run_py(HARNESS, pattern, "run_both(pattern)", cwd=tmp_path,
               env={"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}, timeout=180)
    [line] = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
    got = json.loads(line[len("RESULT "):])
    for name in ("torch", "ncclprof"):
        assert "raised" not in got[name], f"with {name}:\n{got[name]['raised']}\n{p.stderr}"
    return got["torch"], got["ncclprof"]


def _load(path):
    with (gzip.open(path, "rt") if str(path).endswith(".gz") else open(path)) as f:
        return json.load(f)


def _raw(path):
    with (gzip.open(path, "rb") if str(path).endswith(".gz") else open(path, "rb")) as f:
        return f.read()


def _assert_merged(rec, kineto_steps, nccl_ops):
    """ncclprof's own output for one cycle: the per-rank names the README promises, the
    merged trace holding both torch's steps and the plugin's all-reduces of those steps."""
    assert rec["error"] is None and rec["worker"] == "rank0", rec
    name = os.path.basename(rec["merged"])
    assert name.startswith("rank0.") and name.endswith(".merged.json.gz"), rec["merged"]
    ev = _load(rec["merged"])["traceEvents"]
    got_steps = sorted({e["name"] for e in ev if e.get("name", "").startswith("ProfilerStep#")
                        and e.get("cat") == "user_annotation"})
    assert got_steps == kineto_steps
    assert sum(1 for e in ev if e.get("cat") == "nccl_coll" and e["name"] == "AllReduce") == nccl_ops
    assert any(e.get("cat") == "cpu_op" and e.get("name") == "aten::addmm" for e in ev)


TENSORBOARD = """
def pattern(P, d):
    sched = schedule(wait=1, warmup=1, active=2, repeat=2)
    with P(activities=CPU, schedule=sched,
           on_trace_ready=tensorboard_trace_handler(d + "/tb", worker_name="w", use_gzip=True)) as prof:
        for _ in range(10):
            train_step()
            prof.step()
    keep(prof)
    files = sorted(os.listdir(d + "/tb"), key=lambda f: int(f.split(".")[1]))  # time order
    return {"files": [f.split(".", 2)[2] for f in files],
            "steps": [steps(load(d + "/tb/" + f)) for f in files],
            "addmm": [count(load(d + "/tb/" + f), "aten::addmm") for f in files],
            "paths": [d + "/tb/" + f for f in files]}
"""


def test_tensorboard_handler_with_repeating_schedule(tmp_path):
    plain, ours = _both(tmp_path, TENSORBOARD)
    # Cycles: steps 0 wait, 1 warmup, 2-3 active; 4 wait, 5 warmup, 6-7 active. Two forward
    # Linear layers: two aten::addmm per recorded step.
    want = {"files": ["pt.trace.json.gz"] * 2,
            "steps": [["ProfilerStep#2", "ProfilerStep#3"], ["ProfilerStep#6", "ProfilerStep#7"]],
            "addmm": [4, 4]}
    assert {k: plain[k] for k in want} == want
    assert {k: ours[k] for k in want} == want
    first, second = ours["outputs"]
    _assert_merged(first, want["steps"][0], 2)
    _assert_merged(second, want["steps"][1], 2)
    assert first["merged"] == str(tmp_path / "ncclprof-out" / "rank0.merged.json.gz")
    assert second["merged"] == str(tmp_path / "ncclprof-out" / "rank0.1.merged.json.gz")
    # The handler's files are ncclprof's Kineto traces of the same cycles, byte for byte.
    assert _raw(ours["paths"][0]) == _raw(first["kineto"])
    assert _raw(ours["paths"][1]) == _raw(second["kineto"])


EXPORT_AFTER = """
def pattern(P, d):
    with P(activities=CPU, record_shapes=True) as prof:
        for _ in range(3):
            train_step()
    keep(prof)
    r = {"export": attempt(lambda: prof.export_chrome_trace(d + "/after.json")),
         "again": attempt(lambda: prof.export_chrome_trace(d + "/again.json.gz"))}
    t = load(d + "/after.json")
    r["addmm_trace"] = count(t, "aten::addmm")
    r["dims"] = sorted({json.dumps(e["args"]["Input Dims"]) for e in t["traceEvents"]
                        if e.get("name") == "aten::addmm"})
    r["addmm_avg"] = [e.count for e in averages(prof, "aten::addmm")]
    r["shapes"] = sorted(json.dumps(e.input_shapes) for e in averages(prof, "aten::addmm", group_by_input_shape=True))
    r["table"] = "aten::addmm" in prof.key_averages().table(sort_by="cpu_time_total", row_limit=-1)  # all rows: a loaded machine can push addmm out of the top 10
    if P is ncclprof.profile:  # the file ncclprof serves the exports from, deleted
        os.rename(prof.outputs[0]["kineto"], d + "/moved.json.gz")
        r["gone"] = attempt(lambda: prof.export_chrome_trace(d + "/gone.json"))
        os.rename(d + "/moved.json.gz", prof.outputs[0]["kineto"])
    return r
"""


def test_export_after_the_with_block_and_key_averages(tmp_path):
    plain, ours = _both(tmp_path, EXPORT_AFTER)
    for got in (plain, ours):
        assert got["export"] == {"ok": None}
        assert got["addmm_trace"] == 6 and got["addmm_avg"] == [6]  # 3 steps x 2 layers
        # record_shapes: x is 32x64, the layers' weights 128x64 and 10x128 (transposed)
        assert got["dims"] == got["shapes"] == ['[[10], [32, 128], [128, 10], [], []]',
                                                '[[128], [32, 64], [64, 128], [], []]']
        assert got["table"] is True
    # torch itself saves a trace once; ncclprof, which saved it first, serves both exports.
    assert "Trace is already saved" in plain["again"]["error"]
    assert ours["again"] == {"ok": None}
    assert "rank0.pt.trace.json.gz, which is gone" in ours["gone"]["error"]
    [rec] = ours["outputs"]
    assert rec["error"] is None and rec["merged"] == str(tmp_path / "ncclprof-out" / "rank0.merged.json.gz")
    d = tmp_path / "ncclprof"
    assert _raw(rec["kineto"]) == _raw(d / "after.json") == _raw(d / "again.json.gz")
    assert sum(1 for e in _load(rec["merged"])["traceEvents"] if e.get("cat") == "nccl_coll") == 3


HANDLER_START_STOP = """
def pattern(P, d):
    seen = []
    def trace_handler(p):  # torch.profiler.profile's documented example handler
        table = p.key_averages().table(sort_by="self_cpu_time_total", row_limit=-1)
        seen.append({"step": p.step_num, "addmm": [e.count for e in averages(p, "aten::addmm")],
                     "table": "aten::addmm" in table})
        p.export_chrome_trace(d + "/test_trace_" + str(p.step_num) + ".json")
    prof = P(activities=CPU, schedule=schedule(skip_first=1, wait=1, warmup=1, active=2, repeat=2),
             on_trace_ready=trace_handler, acc_events=ACC)
    prof.start()
    for _ in range(12):
        train_step()
        prof.step()
    prof.stop()
    keep(prof)
    return {"seen": seen, "files": sorted(os.listdir(d)),
            "steps": [steps(load(d + "/test_trace_" + str(s["step"]) + ".json")) for s in seen]}
"""


@pytest.mark.parametrize("acc_events", [False, True])
def test_start_stop_step_with_skip_first_and_a_handler_that_exports(tmp_path, acc_events):
    plain, ours = _both(tmp_path, f"ACC = {acc_events}\n" + HANDLER_START_STOP)
    # skip_first=1: step 0; then wait 1, warmup 2, active 3-4 (ready at step 5), wait 5,
    # warmup 6, active 7-8 (ready at step 9). key_averages: 2 steps x 2 layers per cycle,
    # both cycles' with acc_events; the trace is each cycle's own.
    second = 8 if acc_events else 4
    want = {"seen": [{"step": 5, "addmm": [4], "table": True},
                     {"step": 9, "addmm": [second], "table": True}],
            "files": ["test_trace_5.json", "test_trace_9.json"],
            "steps": [["ProfilerStep#3", "ProfilerStep#4"], ["ProfilerStep#7", "ProfilerStep#8"]]}
    assert plain == want
    assert {k: v for k, v in ours.items() if k != "outputs"} == want
    first, second = ours["outputs"]
    _assert_merged(first, want["steps"][0], 2)
    _assert_merged(second, want["steps"][1], 2)
    assert _raw(first["kineto"]) == _raw(tmp_path / "ncclprof" / "test_trace_5.json")


WITH_STACK = """
def pattern(P, d):
    cfg = torch._C._profiler._ExperimentalConfig(verbose=True)  # what export_stacks needs
    with P(activities=CPU, with_stack=True, experimental_config=cfg) as prof:
        for _ in range(2):
            train_step()
    keep(prof)
    prof.export_stacks(d + "/stacks.txt", "self_cpu_time_total")
    stacks = open(d + "/stacks.txt").read().splitlines()
    prof.export_chrome_trace(d + "/t.json")
    t = load(d + "/t.json")
    grouped = averages(prof, "aten::addmm", group_by_stack_n=5)
    return {"stacks": any(":_train_step;nn.Module:_Sequential_0;" in l for l in stacks),
            "python_function": any(e.get("cat") == "python_function" and "train_step" in e["name"]
                                   for e in t["traceEvents"]),
            "grouped": sorted([e.count] + [f for f in e.stack if f.startswith("nn.Module")]
                              for e in grouped)}
"""


def test_with_stack_export_stacks_and_stack_grouping(tmp_path):
    plain, ours = _both(tmp_path, WITH_STACK)
    # The frames of train_step in the stacks; aten::addmm grouped by its 5 innermost frames:
    # one group per Linear layer, 2 calls each (2 steps).
    want = {"stacks": True, "python_function": True,
            "grouped": [[2, "nn.Module: Linear_0"], [2, "nn.Module: Linear_1"]]}
    assert plain == want
    assert {k: v for k, v in ours.items() if k != "outputs"} == want
    [rec] = ours["outputs"]
    assert rec["error"] is None and rec["merged"]


PROFILE_MEMORY = """
def pattern(P, d):
    with P(activities=CPU, profile_memory=True, record_shapes=True, with_stack=True) as prof:
        train_step()
        x = torch.empty(1000, 25)  # 100000 bytes, kept alive: one allocation event
    keep(prof)
    prof.export_chrome_trace(d + "/t.json")
    t = load(d + "/t.json")
    mem = [e["args"]["Bytes"] for e in t["traceEvents"] if e.get("name") == "[memory]"]
    emp = [e for e in prof.key_averages() if e.key == "aten::empty"]
    r = {"has_100000": 100000 in mem, "randn_8192": 32 * 64 * 4 in mem,
         "empty_mem": max((e.cpu_memory_usage for e in emp), default=0) >= 100000}
    r["timeline"] = attempt(lambda: prof.export_memory_timeline(d + "/mem.raw.json.gz", device="cpu"))
    return r
"""


def test_profile_memory(tmp_path):
    plain, ours = _both(tmp_path, PROFILE_MEMORY)
    want = {"has_100000": True, "randn_8192": True, "empty_mem": True, "timeline": {"ok": None}}
    assert plain == want
    assert {k: v for k, v in ours.items() if k != "outputs"} == want
    [rec] = ours["outputs"]
    mem = [e for e in _load(rec["merged"])["traceEvents"] if e.get("name") == "[memory]"]
    assert any(e["args"]["Bytes"] == 100000 for e in mem)


OWN_PROFILER = """
def pattern(P, d):
    # ncclprof's handler in the user's own torch.profiler.profile, composed with tensorboard's
    # (ncclprof's first), then an export after the `with`.
    if P is ncclprof.profile:
        handler = ncclprof.trace_handler(worker_name="rank0")
        tb = tensorboard_trace_handler(d + "/tb", worker_name="w")
        ready = lambda p: (handler(p), tb(p))
    else:
        handler, ready = None, tensorboard_trace_handler(d + "/tb", worker_name="w")
    with torch.profiler.profile(activities=CPU, schedule=schedule(wait=1, warmup=1, active=2, repeat=2),
                                on_trace_ready=ready) as prof:
        for _ in range(10):
            train_step()
            prof.step()
    global prof_outputs
    prof_outputs = handler.outputs if handler else None
    files = sorted(os.listdir(d + "/tb"), key=lambda f: int(f.split(".")[1]))
    return {"steps": [steps(load(d + "/tb/" + f)) for f in files],
            "after": attempt(lambda: prof.export_chrome_trace(d + "/after.json")),
            "last_tb": d + "/tb/" + files[-1]}
"""


def test_trace_handler_with_the_users_own_profiler_and_tensorboard(tmp_path):
    plain, ours = _both(tmp_path, OWN_PROFILER)
    want_steps = [["ProfilerStep#2", "ProfilerStep#3"], ["ProfilerStep#6", "ProfilerStep#7"]]
    assert plain["steps"] == ours["steps"] == want_steps
    assert "Trace is already saved" in plain["after"]["error"]  # torch: tensorboard saved it
    assert ours["after"] == {"ok": None}
    first, second = ours["outputs"]
    # The handler's window ran from its creation in the first cycle (4 steps), then with the
    # active steps (see test_torch.py).
    assert first["error"] is None and second["error"] is None
    assert sum(1 for e in _load(first["merged"])["traceEvents"] if e.get("cat") == "nccl_coll") == 4
    _assert_merged(second, want_steps[1], 2)
    assert _raw(tmp_path / "ncclprof" / "after.json") == _raw(second["kineto"]) == _raw(ours["last_tb"])


PYTHON_EXPORT = """
def pattern(P, d):
    # torch 2.15's tensorboard handler can use torch's Python exporter, which reads the
    # recorded trace without saving it (so it works after ncclprof's save).
    with P(activities=CPU, on_trace_ready=tensorboard_trace_handler(
            d + "/tb", worker_name="w", use_python_export=True)) as prof:
        train_step()
    keep(prof)
    [f] = os.listdir(d + "/tb")
    return {"addmm": count(load(d + "/tb/" + f), "aten::addmm")}
"""


def test_tensorboard_handler_with_torchs_python_exporter(tmp_path):
    torch = require_torch()
    if "use_python_export" not in inspect.signature(torch.profiler.tensorboard_trace_handler).parameters:
        pytest.skip(f"torch {torch.__version__} has no Python exporter")
    plain, ours = _both(tmp_path, PYTHON_EXPORT)
    assert plain == {"addmm": 2}
    assert {k: v for k, v in ours.items() if k != "outputs"} == {"addmm": 2}
    [rec] = ours["outputs"]
    assert rec["error"] is None and rec["merged"]


HANDLER_AFTER_ANOTHER = """
import warnings
handler = ncclprof.trace_handler("out", worker_name="rank0")
tb = tensorboard_trace_handler("tb", worker_name="w")
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    with torch.profiler.profile(activities=CPU, schedule=schedule(wait=1, warmup=1, active=2, repeat=2),
                                on_trace_ready=lambda p: (tb(p), handler(p))) as prof:
        for _ in range(10):
            train_step()
            prof.step()
print("RESULT " + json.dumps({"outputs": handler.outputs, "tb": len(os.listdir("tb")),
      "warnings": [str(x.message) for x in w if issubclass(x.category, ncclprof.NcclprofWarning)]}))
"""


def test_trace_handler_after_a_handler_that_saved_the_trace(tmp_path):
    # The program's handler saved the first cycle's trace before ncclprof's ran: torch cannot
    # export it again, so that cycle has no merge and says why; the job goes on, and from the
    # second cycle on (the profiler hooked) ncclprof copies the program's save.
    p = run_py(HARNESS, HANDLER_AFTER_ANOTHER, cwd=tmp_path)
    [line] = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
    got = json.loads(line[len("RESULT "):])
    assert got["tb"] == 2
    first, second = got["outputs"]
    assert first["kineto"] is None and first["merged"] is None
    assert "Trace is already saved" in first["error"] and len(first["nccl"]) == 1
    [msg] = got["warnings"]
    assert "torch saves a trace once and another on_trace_ready saved it first" in msg
    assert "call ncclprof's handler before yours" in msg and first["nccl"][0] in msg
    _assert_merged(second, ["ProfilerStep#6", "ProfilerStep#7"], 2)
    assert second["merged"] == str(tmp_path / "out" / "rank0.1.merged.json.gz")


def test_signature_mirrors_torch():
    torch = require_torch()
    import ncclprof

    theirs = inspect.signature(torch.profiler.profile)
    ours = inspect.signature(ncclprof.profile)
    own = {"trace_dir": None, "worker_name": None, "merge": True, "label_steps": True,
           "flush_timeout": 10.0}
    # A torch that took one of ncclprof's names would have that argument hidden by ncclprof's.
    assert not set(own) & set(theirs.parameters), "torch.profiler.profile now has an argument named like one of ncclprof.profile's"
    names = list(ours.parameters)
    assert names[:len(theirs.parameters)] == list(theirs.parameters)
    for name, p in theirs.parameters.items():
        q = ours.parameters[name]
        assert (q.kind, q.default, q.annotation) == (p.kind, p.default, p.annotation), name
    extra = {n: ours.parameters[n] for n in names[len(theirs.parameters):]}
    assert {n: p.default for n, p in extra.items()} == own
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in extra.values())


PASSES_EVERY_ARGUMENT = """
import inspect
sig = inspect.signature(torch.profiler.profile)
# Every boolean argument of this torch set to the non-default value, plus the others that
# take a plain value: what torch keeps of them must be the same in both (on_trace_ready is
# ncclprof's, which calls the program's).
args = {n: not p.default for n, p in sig.parameters.items() if isinstance(p.default, bool)}
args["activities"] = CPU
args["schedule"] = schedule(wait=1, warmup=1, active=1)
if "post_processing_timeout_s" in sig.parameters:
    args["post_processing_timeout_s"] = 12.5
def plain_attrs(p):
    return {k: v for k, v in vars(p).items() if isinstance(v, (bool, int, float, str, type(None)))}
a = plain_attrs(torch.profiler.profile(**args))
b = plain_attrs(ncclprof.profile(**args))
a.pop("on_trace_ready")
b = {k: b.get(k, "missing") for k in a}
print("RESULT " + json.dumps({"torch": a, "ncclprof": b, "args": sorted(args)}))
"""


def test_every_torch_argument_reaches_torch(tmp_path):
    p = run_py(HARNESS, PASSES_EVERY_ARGUMENT, cwd=tmp_path)
    [line] = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
    got = json.loads(line[len("RESULT "):])
    assert {"record_shapes", "profile_memory", "with_stack", "acc_events"} <= set(got["args"])
    assert got["torch"]["record_shapes"] is True and got["torch"]["with_stack"] is True
    assert got["ncclprof"] == got["torch"]
