"""End-to-end check of ncclprof on one GPU with real NCCL.

    python examples/one_gpu_check.py [--out DIR] [--kernelch] [--iters N]

Needs a Linux machine with one CUDA GPU, torch with NCCL, and the ncclprof package (installed
from a wheel, or this checkout's python/ with its binaries built on an x86-64 machine and
copied here: no Go is needed). It runs real NCCL on a one-rank communicator:

  * a self send/recv (ncclGroupStart; ncclSend; ncclRecv to itself; ncclGroupEnd), which NCCL
    runs as a real kernel and reports to the plugin (GroupApi, P2pApi, KernelLaunch, Group, P2p);
  * an all-reduce, which NCCL short-circuits on one rank (no kernel, no profiler events);

under ncclprof.profile, then checks that
  1. NCCL itself loaded the plugin (the library is mapped before this script touched it, and
     NCCL's log says "PROFILER/Plugin: Loaded ncclprof"),
  2. the plugin recorded the events NCCL emits, and the trace window holds exactly the profiled
     steps' operations,
  3. the merge linked each NCCL SendRecv kernel to its operation through its launch,
and measures what the plugin costs: per operation (the host time of a send/recv with the
plugin's events on against the event mask set to none, interleaved) and per callback.

Exit status 0 when every check passes, 1 when one fails, 2 when the machine cannot run it.
A JSON report is written to DIR/one_gpu_check.json.
"""

import argparse
import glob
import gzip
import json
import os
import platform
import statistics
import sys
import time

CHECKS = []


def check(name, ok, detail=""):
    CHECKS.append({"check": name, "ok": bool(ok), "detail": detail})
    print(f"  [{'PASS' if ok else 'FAIL'}] {name}{': ' + detail if detail else ''}", flush=True)
    return ok


def info(msg):
    print(f"  {msg}", flush=True)


def import_ncclprof():
    try:
        import ncclprof
    except ImportError:  # a copied checkout: <repo>/python next to examples/
        here = os.path.dirname(os.path.abspath(__file__))
        sys.path.insert(0, os.path.join(here, "..", "python"))
        import ncclprof
    return ncclprof


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="ncclprof-gpu-check", help="output directory")
    p.add_argument("--kernelch", action="store_true",
                   help="also record KernelCh (per-channel GPU times; unverified for self send/recv)")
    p.add_argument("--iters", type=int, default=400, help="operations per overhead sample (default 400)")
    p.add_argument("--count", type=int, default=1 << 18, help="floats per send (default 262144 = 1 MiB)")
    return p.parse_args()


def main():
    args = parse_args()
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    ncclprof = import_ncclprof()
    lib = ncclprof.library_path()

    # NCCL's own log, to see it load the plugin (unless the user configured logging).
    if "NCCL_DEBUG" not in os.environ:
        os.environ["NCCL_DEBUG"] = "INFO"
        os.environ["NCCL_DEBUG_SUBSYS"] = "INIT,ENV"
        os.environ["NCCL_DEBUG_FILE"] = os.path.join(out, "nccl-debug.%h.%p.log")

    # Before torch.distributed creates any NCCL communicator.
    mask = "default,kernelch" if args.kernelch else "default"
    ncclprof.enable(trace_dir=out, event_mask=mask)

    import torch
    import torch.distributed as dist

    print(f"ncclprof {ncclprof.__version__} ({lib})")
    print(f"torch {torch.__version__}, Python {platform.python_version()}, {platform.machine()}")
    if not torch.cuda.is_available():
        print("no CUDA device: this check needs one GPU (the CPU tests are in python/tests)")
        return 2
    v = torch.cuda.nccl.version()
    if isinstance(v, int):  # older torch: NCCL_VERSION_CODE
        v = (v // 10000, v // 100 % 100, v % 100) if v >= 10000 else (v // 1000, v // 100 % 10, v % 100)
    nccl_version = ".".join(map(str, v))
    print(f"GPU: {torch.cuda.get_device_name(0)}, CUDA {torch.version.cuda}, NCCL {nccl_version}")
    api_events = tuple(v) >= (2, 28)  # GroupApi/P2pApi/KernelLaunch: profiler ABI v5+
    torch.cuda.set_device(0)
    dev = torch.device("cuda", 0)
    store = dist.HashStore()
    try:
        dist.init_process_group("nccl", store=store, rank=0, world_size=1, device_id=dev)
    except TypeError:  # torch < 2.3: no device_id (the communicator is created lazily)
        dist.init_process_group("nccl", store=store, rank=0, world_size=1)

    send = torch.arange(args.count, dtype=torch.float32, device=dev)
    recv = torch.zeros_like(send)
    red = torch.ones(args.count, dtype=torch.float32, device=dev)

    def sendrecv():
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, send, 0), dist.P2POp(dist.irecv, recv, 0)])
        for r in reqs:
            r.wait()

    # ---------------------------------------------------------------- 1. NCCL loaded the plugin
    print("\n1. NCCL loads the plugin")
    sendrecv()  # creates the communicator: NCCL reads NCCL_PROFILER_PLUGIN and loads the library
    torch.cuda.synchronize()
    mapped_by_nccl = ncclprof._control.is_mapped(lib) and not ncclprof._control.loaded()
    check("the library is mapped into the process by NCCL (before ncclprof touched it)", mapped_by_nccl,
          lib)
    check("the send/recv moved the data", torch.equal(recv, send))
    logs = glob.glob(os.path.join(out, "nccl-debug.*.log"))
    loaded_lines = [l.strip() for f in logs for l in open(f, errors="replace")
                    if "PROFILER/Plugin" in l and "ncclprof" in l]
    if logs:
        check("NCCL's log says it loaded ncclprof", loaded_lines, loaded_lines[0] if loaded_lines else
              f"no 'PROFILER/Plugin: Loaded ncclprof' line in {logs[0]}")
    else:
        info("NCCL_DEBUG was set by you: NCCL's log is wherever you sent it")
    ncclprof.flush(5)
    c0 = ncclprof.counters()
    check("the plugin recorded NCCL's events", c0["events"] > 0, f"{c0['events']} events so far")
    maps = {l.split()[-1] for l in open("/proc/self/maps") if "libnccl-profiler" in l}
    check("one copy of the plugin in the process", len(maps) == 1, ", ".join(sorted(maps)))

    # ---------------------------------------------------------------- 2. events in the window
    print("\n2. ncclprof.profile: 1 wait, 1 warm-up and 3 recorded steps of a send/recv and an all-reduce")
    from torch.profiler import ProfilerActivity, schedule

    active = 3
    with ncclprof.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                          schedule=schedule(wait=1, warmup=1, active=active, repeat=1),
                          trace_dir=out, worker_name="gpu-check") as prof:
        for _ in range(2 + active):
            sendrecv()
            dist.all_reduce(red)  # short-circuited by NCCL on one rank
            torch.cuda.synchronize()
            prof.step()
    [rec] = prof.outputs
    check("the plugin wrote a trace for the window", len(rec["nccl"]) == 1, ", ".join(rec["nccl"]))
    if not rec["nccl"]:
        return finish(out, 1)
    with open(rec["nccl"][0]) as f:
        trace = json.load(f)
    ev = trace["traceEvents"]

    def count(cat, name=None):
        return sum(1 for e in ev if e.get("cat") == cat and (name is None or e.get("name") == name))

    check("P2p Send and Recv: one each per recorded step",
          count("nccl_p2p", "Send") == active and count("nccl_p2p", "Recv") == active,
          f"Send {count('nccl_p2p', 'Send')}, Recv {count('nccl_p2p', 'Recv')}, expected {active} each")
    if api_events:
        check("GroupApi, P2pApi and KernelLaunch events (NCCL >= 2.28)",
              count("nccl_api", "ncclSend") == active and count("nccl_launch") >= active,
              f"ncclSend {count('nccl_api', 'ncclSend')}, launches {count('nccl_launch')}")
    else:
        info(f"NCCL {nccl_version} < 2.28 has no API or KernelLaunch events: kernels link by order")
    info(f"all-reduce events: {count('nccl_coll')} (NCCL short-circuits collectives on one rank: 0 expected)")
    info(f"ProxyOps: {count('nccl_proxy')} (none expected for a self send/recv), "
         f"KernelCh: {count('nccl_gpu')}" + ("" if args.kernelch else " (not asked for)"))
    steps = [e["args"]["step"] for e in ev if e.get("name") == "ncclprof_step"]
    check("each recorded step is labelled", [s for s in steps if s.startswith("ProfilerStep#")] ==
          [f"ProfilerStep#{i}" for i in range(2, 2 + active)], ", ".join(steps))

    # ---------------------------------------------------------------- 3. the merge linked kernels
    print("\n3. ncclmerge links each NCCL kernel to its operation")
    check("merged trace written", rec["merged"] is not None, rec["merged"] or str(rec["error"]))
    if not rec["merged"]:
        return finish(out, 1)
    r = rec["summary"]["ranks"][0]
    with gzip.open(rec["merged"], "rt") as f:
        merged = json.load(f)
    kernels = [e for e in merged["traceEvents"] if e.get("cat") == "kernel" and "nccl" in e.get("name", "").lower()]
    sendrecv_k = [k for k in kernels if "sendrecv" in k["name"].lower()]
    linked = [k for k in sendrecv_k if isinstance(k.get("args", {}).get("nccl"), dict)]
    by_launch = [k for k in linked if k["args"]["nccl"].get("link_rule") == "launch"]
    info(f"NCCL kernels in torch's trace: {len(kernels)} ({len(sendrecv_k)} SendRecv); "
         f"linked: {r['linked']}; unlinked: {r['unlinked_kernels'] or 'none'}")
    check("every SendRecv kernel of the window is linked", sendrecv_k and len(linked) == len(sendrecv_k),
          f"{len(linked)} of {len(sendrecv_k)}")
    if api_events:
        check("linked through its launch (KernelLaunch holds the launch call)", len(by_launch) == len(sendrecv_k),
              f"{len(by_launch)} by launch")
    clock = r["clock"]
    if clock.get("cpu_offset_samples"):
        info(f"CPU clock offset torch - plugin: {clock['cpu_offset_ns'] / 1000:.1f} us over "
             f"{clock['cpu_offset_samples']} launches ({'applied' if clock['cpu_offset_applied'] else 'within the plugin clock error'})")
    if linked:
        n = linked[0]["args"]["nccl"]
        info(f"a linked kernel: {linked[0]['name'][:60]} <- {n.get('func')} count {n.get('count')} "
             f"comm {n.get('comm')}")
    try:
        rep = ncclprof.check(rec["merged"])[0]
        errs = {f["code"]: f["count"] for f in rep["findings"] if f["severity"] == "error"}
        check("the merged trace passes ncclmerge check (what Perfetto reads)", not errs, str(errs or "no errors"))
    except ncclprof.MergeError as e:
        check("the merged trace passes ncclmerge check (what Perfetto reads)", False, str(e)[:300])

    # ---------------------------------------------------------------- 4. overhead
    print(f"\n4. overhead: host time of a send/recv, events on vs mask none, {args.iters} ops x 5 blocks each")
    on_mask = ncclprof.get_event_mask()
    host = {"on": [], "off": []}
    e2e = {"on": [], "off": []}
    events_on = 0
    for block in range(10):
        which = "on" if block % 2 == 0 else "off"
        ncclprof.set_event_mask(on_mask if which == "on" else 0)
        before = ncclprof.counters()["events"]
        for _ in range(args.iters):
            t0 = time.perf_counter_ns()
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, send, 0), dist.P2POp(dist.irecv, recv, 0)])
            t1 = time.perf_counter_ns()
            for q in reqs:
                q.wait()
            torch.cuda.synchronize()
            t2 = time.perf_counter_ns()
            host[which].append(t1 - t0)
            e2e[which].append(t2 - t0)
        ncclprof.flush(5)
        if which == "on":
            events_on += ncclprof.counters()["events"] - before
    ncclprof.set_event_mask(on_mask)
    med = {k: statistics.median(v) / 1000 for k, v in host.items()}
    med2 = {k: statistics.median(v) / 1000 for k, v in e2e.items()}
    per_op = med["on"] - med["off"]
    ops_on = len(host["on"])
    ev_per_op = events_on / ops_on if ops_on else 0
    info(f"host time per send/recv: {med['on']:.2f} us with events, {med['off']:.2f} us without "
         f"-> {per_op:+.2f} us per operation")
    info(f"end to end (with the GPU): {med2['on']:.2f} us vs {med2['off']:.2f} us -> {med2['on'] - med2['off']:+.2f} us")
    if ev_per_op:
        # Each event costs a start and a stop callback (GroupApi also two state records).
        callbacks = 2 * ev_per_op + 2
        info(f"{ev_per_op:.1f} events ({callbacks:.0f} callbacks) per operation -> about "
             f"{per_op * 1000 / callbacks:.0f} ns per callback (noise: median of {ops_on} ops; "
             "differences below ~1 us are within it)")
    check("the mask switched the events off and on", events_on > 0 and ev_per_op >= (7 if api_events else 3),
          f"{ev_per_op:.1f} events per operation with events on")
    overhead = {"host_us_on": med["on"], "host_us_off": med["off"], "per_op_us": per_op,
                "e2e_us_on": med2["on"], "e2e_us_off": med2["off"], "events_per_op": ev_per_op}
    dist.destroy_process_group()
    return finish(out, 0 if all(c["ok"] for c in CHECKS) else 1, overhead,
                  {"nccl": nccl_version, "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0),
                   "outputs": rec})


def finish(out, status, overhead=None, extra=None):
    report = {"status": status, "checks": CHECKS, "overhead": overhead, **(extra or {})}
    with open(os.path.join(out, "one_gpu_check.json"), "w") as f:
        json.dump(report, f, indent=1, default=str)
    print(f"\n{'ALL CHECKS PASSED' if status == 0 else 'SOME CHECKS FAILED'}: "
          f"{sum(c['ok'] for c in CHECKS)} of {len(CHECKS)}; report: {out}/one_gpu_check.json")
    if status == 0:
        print(f"Open {out}/gpu-check.merged.json.gz in https://ui.perfetto.dev")
    return status


if __name__ == "__main__":
    sys.exit(main())
