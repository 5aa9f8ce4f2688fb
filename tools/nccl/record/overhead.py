#!/usr/bin/env python3
"""overhead.py: what ncclprof costs a real NCCL call on the user's thread, against the empty plugin.

Runs torch's NCCL in processes of their own, one per profiler plugin (NCCL chooses its plugin once
per process), rounds interleaved: no plugin at all, the empty plugin (testhost/empty.c, asking
for ncclprof's default event types), and ncclprof with its default mask and drainer. Each
process times N self send/recv pairs (batch_isend_irecv on one rank: GroupApi, P2pApi,
KernelLaunch, Group and two P2p events per pair, no proxy work) and prints medians; the report
gives ncclprof's extra time per operation over the empty plugin, and per callback.

    python3 tools/nccl/record/overhead.py BUILD_DIR [--rounds 3] [--ops 3000]

Needs one CUDA GPU and torch built with NCCL; the network path's cost (proxy thread) is measured
by overhead.sh with ncclrec.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

DEFAULT_MASK = 3871  # python/ncclprof/_enable.py EVENT_BITS["default"]
CALLBACKS_PER_OP = 16  # 7 events, each a start and a stop, GroupApi's 2 states (one_gpu_check.py)


def child(ops):
    import torch
    import torch.distributed as dist

    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1, device_id=dev)
    send = torch.arange(1 << 10, dtype=torch.float32, device=dev)
    recv = torch.zeros_like(send)
    host, e2e = [], []
    for i in range(ops + 200):  # the first 200 warm NCCL, the plugin and the caches up
        t0 = time.perf_counter_ns()
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, send, 0), dist.P2POp(dist.irecv, recv, 0)])
        t1 = time.perf_counter_ns()
        for r in reqs:
            r.wait()
        torch.cuda.synchronize()
        t2 = time.perf_counter_ns()
        if i >= 200:
            host.append(t1 - t0)
            e2e.append(t2 - t0)
    dist.destroy_process_group()
    print(json.dumps({"host_ns": statistics.median(host), "e2e_ns": statistics.median(e2e)}))


def run_one(cfg, build, ops, out):
    env = dict(os.environ)
    for k in ("NCCL_PROFILER_PLUGIN", "NCCLPROF_EMPTY_MASK", "NCCLPROF_EVENT_MASK"):
        env.pop(k, None)
    if cfg == "none":
        env["NCCL_PROFILER_PLUGIN"] = "none"  # no profiler at all (plugin/profiler.cc, 2.28.9)
    elif cfg == "empty":
        env["NCCL_PROFILER_PLUGIN"] = os.path.join(build, "libnccl-profiler-empty.so")
        env["NCCLPROF_EMPTY_MASK"] = str(DEFAULT_MASK)
    else:
        env["NCCL_PROFILER_PLUGIN"] = os.path.join(build, "libnccl-profiler-ncclprof.so")
        env["NCCLPROF_OUTPUT_DIR"] = out
    r = subprocess.run([sys.executable, __file__, "--child", "--ops", str(ops)], env=env,
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise SystemExit(f"overhead.py: the {cfg} process failed:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("build", nargs="?", default="build", help="folder with the plugins (default build)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--ops", type=int, default=3000)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        return child(a.ops)
    build = os.path.abspath(a.build)
    out = tempfile.mkdtemp(prefix="ncclprof-overhead-")
    cfgs = ("none", "empty", "ncclprof")
    got = {c: [] for c in cfgs}
    for rnd in range(a.rounds):
        for c in cfgs if rnd % 2 == 0 else reversed(cfgs):
            got[c].append(run_one(c, build, a.ops, out))
            print(f"round {rnd + 1} {c}: {got[c][-1]}", flush=True)
    med = {c: {k: statistics.median(x[k] for x in got[c]) / 1000 for k in ("host_ns", "e2e_ns")} for c in cfgs}
    print(f"\nmedians of {a.rounds} processes, each the median of {a.ops} self send/recv pairs (us):")
    for c in cfgs:
        print(f"  {c:9s} host {med[c]['host_ns']:8.2f}   end to end {med[c]['e2e_ns']:8.2f}")
    extra = med["ncclprof"]["host_ns"] - med["empty"]["host_ns"]
    print(f"ncclprof over the empty plugin: {extra:+.2f} us per operation on the user's thread, "
          f"{extra * 1000 / CALLBACKS_PER_OP:+.0f} ns per callback ({CALLBACKS_PER_OP} per operation); "
          f"end to end {med['ncclprof']['e2e_ns'] - med['empty']['e2e_ns']:+.2f} us")
    print(f"the empty plugin over no plugin (NCCL's own cost of the events): "
          f"{med['empty']['host_ns'] - med['none']['host_ns']:+.2f} us per operation")
    print(json.dumps({"rounds": got, "medians_us": med}))


if __name__ == "__main__":
    main()
