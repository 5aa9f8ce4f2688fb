"""ncclprof.profile and ncclprof.trace_handler with real torch on CPU.

There is no NCCL without a GPU: the NCCL stand-in drives the real plugin in the same process
where NCCL would (inside each training step), torch.profiler records the real model, and the
merge runs on both. torchrun runs real ranks with the gloo backend.
"""

import gzip
import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from conftest import REPO, config_free_env, require_torch, run_py


@pytest.fixture(autouse=True)
def _torch():
    require_torch()


def _load(path):
    with (gzip.open(path, "rt") if str(path).endswith(".gz") else open(path)) as f:
        return json.load(f)


def _lines(stdout, *keys):
    return {l.split(" ", 1)[0]: json.loads(l.split(" ", 1)[1]) for l in stdout.splitlines()
            if l.split(" ", 1)[0] in keys}


MODEL = """
import json, os, warnings
import torch
import ncclprof
from nccl_standin import NCCL
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)

def train_step(comm):
    x = torch.randn(32, 64)
    loss = torch.nn.functional.cross_entropy(model(x), torch.randint(0, 10, (32,)))
    loss.backward()
    comm.allreduce(count=sum(p.numel() for p in model.parameters()))  # the gradient all-reduce
    comm.sendrecv_self(count=128)
    opt.step()
    opt.zero_grad()
"""


def test_profile_records_model_and_nccl_and_merges(tmp_path):
    p = run_py(MODEL, """
        ncclprof.enable(trace_dir="traces")
        comm = NCCL().comm(name="world")
        ncclprof.set_step("train")
        sched = torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=1)
        with ncclprof.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched,
                              record_shapes=True) as prof:
            assert isinstance(prof, torch.profiler.profile)
            for _ in range(7):
                train_step(comm)
                prof.step()
        print("OUT", json.dumps(prof.outputs))
        print("LABEL", json.dumps(ncclprof._control._user_label))
        print("PID", os.getpid())
    """, cwd=tmp_path, env={"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"})
    got = _lines(p.stdout, "OUT", "LABEL", "PID")
    [rec] = got["OUT"]
    d = tmp_path / "traces"
    assert rec["worker"] == "rank0" and rec["error"] is None and rec["plugin"] == "flushed"
    assert rec["kineto"] == str(d / "rank0.pt.trace.json.gz")
    assert rec["merged"] == str(d / "rank0.merged.json.gz")
    assert rec["nccl"] == [str(d / f"ncclprof-{socket.gethostname()}-{got['PID']}-0.trace.json")]

    kineto_file = _load(rec["kineto"])
    kineto = kineto_file["traceEvents"]
    ops = {e["name"] for e in kineto if e.get("cat") == "cpu_op"}
    assert {"aten::linear", "aten::addmm", "aten::relu"} <= ops
    steps = sorted(e["name"] for e in kineto if e.get("name", "").startswith("ProfilerStep#"))
    assert steps == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]

    merged = _load(rec["merged"])
    ev = merged["traceEvents"]
    # torch's events and the plugin's, in one trace, for the three active steps only.
    assert sum(1 for e in ev if e.get("cat") == "cpu_op" and e["name"] == "aten::addmm") >= 6
    assert sum(1 for e in ev if e.get("cat") == "nccl_coll" and e["name"] == "AllReduce") == 3
    assert sum(1 for e in ev if e.get("cat") == "nccl_p2p") == 6
    counts = [e["args"]["count"] for e in ev if e.get("cat") == "nccl_api" and e["name"] == "ncclAllReduce"]
    assert counts == [64 * 128 + 128 + 128 * 10 + 10] * 3
    labels = [e["args"]["step"] for e in ev if e.get("name") == "ncclprof_step"]
    # The label in force when the window opened (the program's), then each profiled step.
    assert labels == ["train", "ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    pids = {e["pid"] for e in ev if e.get("cat") in ("cpu_op", "nccl_coll")}
    assert pids == {got["PID"]}  # one process: torch's and NCCL's events side by side
    r = rec["summary"]["ranks"][0]
    assert r["events_in"]["nccl"] == len(_load(rec["nccl"][0])["traceEvents"])
    assert r["events_in"]["kineto"] == len(kineto)
    # The Kineto trace says where the NCCL side went (torch's add_metadata_json).
    meta = kineto_file["ncclprof"]
    assert meta["trace_dir"] == str(d) and meta["rank"] == 0 and meta["pid"] == got["PID"]
    assert meta["version"] == __import__("ncclprof").__version__
    assert got["LABEL"] == "train"  # the program's own label is back after the window


def test_trace_handler_with_own_profiler_and_two_cycles(tmp_path):
    p = run_py(MODEL, """
        ncclprof.enable()
        comm = NCCL().comm(name="world")
        handler = ncclprof.trace_handler("traces", worker_name="trainer")
        sched = torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=2)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                    schedule=sched, on_trace_ready=handler) as prof:
            for _ in range(9):
                train_step(comm)
                prof.step()
        print("OUT", json.dumps(handler.outputs))
    """, cwd=tmp_path)
    first, second = _lines(p.stdout, "OUT")["OUT"]
    d = tmp_path / "traces"
    assert first["merged"] == str(d / "trainer.merged.json.gz")
    assert second["merged"] == str(d / "trainer.1.merged.json.gz")
    n1 = _load(first["merged"])["traceEvents"]
    n2 = _load(second["merged"])["traceEvents"]
    # First cycle: the window ran from the handler's creation (wait, warmup, 2 active steps);
    # from then on the handler hooked the profiler: the second window is the 2 active steps.
    assert sum(1 for e in n1 if e.get("cat") == "nccl_coll") == 4
    assert sum(1 for e in n2 if e.get("cat") == "nccl_coll") == 2
    assert [e["args"]["step"] for e in n2 if e.get("name") == "ncclprof_step"] == [
        "ProfilerStep#6", "ProfilerStep#7"]
    assert {e["name"] for e in n2 if e.get("cat") == "user_annotation"} >= {"ProfilerStep#6", "ProfilerStep#7"}
    assert first["nccl"] != second["nccl"] and len(second["nccl"]) == 1


def test_profile_without_nccl_says_so(tmp_path):
    p = run_py(MODEL, """
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            with ncclprof.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                model(torch.randn(4, 64)).sum().backward()
        print("OUT", json.dumps(prof.outputs))
        print("WARN", json.dumps([str(x.message) for x in w if issubclass(x.category, ncclprof.NcclprofWarning)]))
        print("PLUGIN", json.dumps(os.environ["NCCL_PROFILER_PLUGIN"] == ncclprof.library_path()))
    """, cwd=tmp_path)
    got = _lines(p.stdout, "OUT", "WARN", "PLUGIN")
    [rec] = got["OUT"]
    assert got["PLUGIN"] is True  # profile() enabled the plugin itself
    assert rec["nccl"] == [] and rec["plugin"] == "not-started"
    assert any("no NCCL communicator was created in this process" in m for m in got["WARN"])
    ev = _load(rec["merged"])["traceEvents"]
    assert any(e.get("name") == "aten::addmm" for e in ev)
    assert not any(str(e.get("cat", "")).startswith("nccl") for e in ev)


def test_dataloader_workers_do_not_touch_the_plugin(tmp_path):
    p = run_py(MODEL, """
        import time
        ncclprof.enable()
        comm = NCCL().comm()
        ncclprof.trace_start("traces")

        class Data(torch.utils.data.Dataset):
            def __len__(self): return 8
            def __getitem__(self, i):
                t0 = time.time()
                r = [ncclprof.set_step(f"worker {i}"), ncclprof.flush(5), ncclprof.counters()]
                return {"i": i, "r": json.dumps(r), "s": time.time() - t0, "pid": os.getpid()}

        loader = torch.utils.data.DataLoader(Data(), batch_size=2, num_workers=2,
                                             multiprocessing_context="fork")
        items = [b for b in loader]
        comm.sendrecv_self()
        print("STOP", json.dumps(ncclprof.trace_stop()))
        print("FLUSH", json.dumps(ncclprof.flush(5)))
        print("ITEMS", json.dumps([[int(i), r, float(s), int(pid)] for b in items
                                   for i, r, s, pid in zip(b["i"], b["r"], b["s"], b["pid"])]))
        print("PID", os.getpid())
    """, cwd=tmp_path, timeout=180)
    got = _lines(p.stdout, "FLUSH", "ITEMS", "PID", "STOP")
    items = got["ITEMS"]
    assert sorted(i for i, *_ in items) == list(range(8))
    assert all(json.loads(r) == [False, "forked-child", {}] for _, r, _, _ in items)
    assert all(s < 0.5 for _, _, s, _ in items)
    assert {pid for *_, pid in items}.isdisjoint({got["PID"]})  # they ran in the workers
    assert got["FLUSH"] == "flushed"
    [trace] = (tmp_path / "traces").glob("ncclprof-*.trace.json")
    assert got["STOP"] == [str(trace)]
    ev = _load(trace)["traceEvents"]
    assert [e for e in ev if e.get("name") == "ncclprof_step"] == []  # no worker label got in
    assert sum(1 for e in ev if e.get("cat") == "nccl_p2p") == 2


RANK_SCRIPT = """
import json, os, sys, time
import torch, torch.distributed as dist
import ncclprof
from nccl_standin import NCCL

ncclprof.enable(trace_dir=sys.argv[1])            # before init_process_group, as in a NCCL job
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
comm = NCCL().comm(comm_id=0xC0FFEE, name="world", nranks=world, rank=rank)
model = torch.nn.Linear(32, 32)
sched = torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=1)
with ncclprof.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched) as prof:
    for _ in range(5):
        model(torch.randn(8, 32)).sum().backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)                  # real collectives (gloo)
        comm.allreduce(count=32 * 32 + 32)           # what NCCL would report
        prof.step()
with open(os.path.join(sys.argv[1], f"result-{rank}.json"), "w") as f:  # ranks share stdout
    json.dump({"rank": rank, "local_rank": int(os.environ["LOCAL_RANK"]),
               "out": prof.outputs[0]["merged"], "nccl": prof.outputs[0]["nccl"]}, f)
dist.destroy_process_group()
"""


def _run_group(cmd, cwd, timeout):
    """Runs cmd in its own process group and kills the whole group (torchrun's ranks too) if it
    overruns, so no rank is left behind."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=config_free_env(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{' '.join(cmd)} ran over {timeout} s\n{out}\n{err}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def test_torchrun_ranks(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(RANK_SCRIPT)
    d = tmp_path / "traces"
    p = _run_group([sys.executable, "-m", "torch.distributed.run", "--standalone",
                    "--nproc-per-node", "2", str(script), str(d)], cwd=tmp_path, timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    ranks = sorted((json.loads(f.read_text()) for f in d.glob("result-*.json")),
                   key=lambda r: r["rank"])
    assert [(r["rank"], r["local_rank"]) for r in ranks] == [(0, 0), (1, 1)], p.stdout + p.stderr
    for r in ranks:
        assert r["out"] == str(d / f"rank{r['rank']}.merged.json.gz")
        m = _load(r["out"])
        assert sum(1 for e in m["traceEvents"] if e.get("cat") == "nccl_coll") == 2
        assert any(e.get("name") == "aten::addmm" for e in m["traceEvents"])
        [comm] = [e["args"] for e in m["traceEvents"] if e.get("name") == "ncclprof_comm"]
        assert comm["rank"] == r["rank"] and comm["nranks"] == 2
    # Both ranks in one timeline, as a user would after the job.
    import ncclprof
    s = ncclprof.merge([str(d / "rank0.pt.trace.json.gz"), str(d / "rank1.pt.trace.json.gz")],
                       [str(d / "ncclprof-*.trace.json")], d / "job.json.gz", timeline=True)
    assert sorted(x["rank"] for x in s["ranks"]) == [0, 1]
    assert all(x["events_in"]["nccl"] > 0 for x in s["ranks"])
    assert sorted(len(x["nccl"]) for x in s["ranks"]) == [1, 1]


def test_ddp_example_runs_under_torchrun_on_cpu(tmp_path):
    # examples/ddp_train.py as a user runs it, with gloo instead of NCCL (no GPU here).
    p = _run_group([sys.executable, "-m", "torch.distributed.run", "--standalone",
                    "--nproc-per-node", "2", str(REPO / "examples" / "ddp_train.py"), "--cpu",
                    "--width", "256", "--steps", "8"], cwd=tmp_path, timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    d = tmp_path / "ncclprof-out"
    for r in (0, 1):
        m = _load(d / f"rank{r}.merged.json.gz")
        steps = {e["name"] for e in m["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")}
        assert steps == {"ProfilerStep#4", "ProfilerStep#5", "ProfilerStep#6"}
        assert any(e.get("name") == "aten::linear" for e in m["traceEvents"])
        assert f"rank {r}: 8 steps" in p.stdout
    assert f"Open {d}/rank0.merged.json.gz in https://ui.perfetto.dev" in p.stdout
    # The README's commands on this output: the merge without --nccl (gloo runs no NCCL, so
    # there is no plugin trace) gives the timeline; the analyses say why they have nothing to
    # show, not to set NCCLPROF_TRACE (which cannot help without NCCL).
    cli = [sys.executable, "-m", "ncclprof"]
    m = subprocess.run(cli + ["merge", "--kineto", f"{d}/rank*.pt.trace.json.gz", "--timeline",
                              "--align", "ends", "-o", f"{d}/job.json.gz"],
                       capture_output=True, text=True, timeout=120)
    assert m.returncode == 0 and (d / "job.json.gz").stat().st_size > 0, m.stdout + m.stderr
    for cmd in ("stats", "skew"):
        a = subprocess.run(cli + [cmd, str(d)], capture_output=True, text=True, timeout=120)
        assert a.returncode != 0
        assert "run without NCCL" in a.stderr and "gloo collectives" in a.stderr, a.stderr
        assert "NCCLPROF_TRACE" not in a.stderr, a.stderr


def test_one_gpu_check_says_it_needs_a_gpu(tmp_path):
    import torch
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: run examples/one_gpu_check.py itself")
    p = subprocess.run([sys.executable, str(REPO / "examples" / "one_gpu_check.py"), "--out",
                        str(tmp_path / "o")], capture_output=True, text=True, timeout=120,
                       env=config_free_env(), cwd=tmp_path)
    assert p.returncode == 2
    assert "no CUDA device: this check needs one GPU" in p.stdout
    assert p.stdout.startswith(f"ncclprof {__import__('ncclprof').__version__} (")
