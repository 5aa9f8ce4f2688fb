"""Data-parallel training with ncclprof, for torchrun.

    torchrun --nproc-per-node 8 examples/ddp_train.py              # GPUs: NCCL
    torchrun --nproc-per-node 2 examples/ddp_train.py --cpu        # try it without GPUs (gloo)

ncclprof.enable() runs before torch.distributed.init_process_group(), so NCCL loads the plugin
with its first communicator. ncclprof.profile() replaces torch.profiler.profile(): while torch
records (the active steps of the schedule) the plugin records what NCCL does, and at the end of
the window each rank leaves in --trace-dir (default ./ncclprof-out):

    rank<N>.pt.trace.json.gz             torch.profiler's trace
    ncclprof-<host>-<pid>-0.trace.json   the plugin's NCCL trace
    rank<N>.merged.json.gz               both, each NCCL kernel linked to its NCCL operation

Open rank0.merged.json.gz in https://ui.perfetto.dev. For all ranks on one timeline:

    python -m ncclprof merge --kineto 'ncclprof-out/rank*.pt.trace.json.gz' \\
        --nccl 'ncclprof-out/ncclprof-*.trace.json' --timeline --align ends -o job.json.gz

Metrics (always on, not only in the window) go where NCCLPROF_METRICS says; see docs/python.md.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

try:
    import ncclprof
except ImportError:  # run from a checkout without installing: use <repo>/python
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import ncclprof


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=12, help="training steps (default 12)")
    p.add_argument("--trace-dir", default="ncclprof-out", help="where the traces go")
    p.add_argument("--cpu", action="store_true", help="gloo on CPU instead of NCCL on GPUs "
                   "(shows the flow; there are no NCCL events without NCCL)")
    p.add_argument("--kernelch", action="store_true",
                   help="also record per-channel GPU times (KernelCh; costs more on small messages)")
    p.add_argument("--width", type=int, default=2048, help="hidden size of the model")
    return p.parse_args()


def main():
    args = parse_args()
    use_cuda = torch.cuda.is_available() and not args.cpu

    # 1. Before the first NCCL communicator: NCCL loads the plugin when it creates one.
    ncclprof.enable(trace_dir=args.trace_dir,
                    event_mask="default,kernelch" if args.kernelch else None)

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        dist.init_process_group("nccl")
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1024, args.width), nn.GELU(), nn.Linear(args.width, args.width),
                          nn.GELU(), nn.Linear(args.width, 1024)).to(device)
    ddp = DDP(model, device_ids=[local_rank] if use_cuda else None)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4)

    activities = [torch.profiler.ProfilerActivity.CPU]
    if use_cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    # Steps 0-1 wait, 2-3 warm up, 4-6 are recorded (by torch and by the plugin).
    schedule = torch.profiler.schedule(wait=2, warmup=2, active=3, repeat=1)

    ncclprof.set_step("train")  # a phase label: an attribute of the metrics, a mark in the trace
    t0 = time.time()
    with ncclprof.profile(activities=activities, schedule=schedule) as prof:
        for step in range(args.steps):
            x = torch.randn(64, 1024, device=device)
            loss = ddp(x).pow(2).mean()
            loss.backward()  # DDP all-reduces the gradients here (NCCL on GPUs)
            opt.step()
            opt.zero_grad(set_to_none=True)
            prof.step()
    if use_cuda:
        torch.cuda.synchronize()

    out = prof.outputs[0] if prof.outputs else None
    if out and out["merged"]:
        r = out["summary"]["ranks"][0]
        linked = sum(r["linked"].values())
        print(f"rank {rank}: {args.steps} steps in {time.time() - t0:.1f} s; {out['merged']}: "
              f"{r['events_in']['nccl']} NCCL events, {r['nccl_kernels']} NCCL kernels, "
              f"{linked} linked to their NCCL operation", flush=True)
    elif out:
        print(f"rank {rank}: merge failed ({out['error']}); traces kept in {args.trace_dir}", flush=True)
    dist.barrier()
    if rank == 0:
        d = os.path.abspath(args.trace_dir)
        nccl = (f" --nccl '{d}/ncclprof-*.trace.json'"
                if any(n.startswith("ncclprof-") for n in os.listdir(d)) else "")
        print(f"\nOpen {d}/rank0.merged.json.gz in https://ui.perfetto.dev\n"
              f"All {world} ranks on one timeline:\n"
              f"  python -m ncclprof merge --kineto '{d}/rank*.pt.trace.json.gz'{nccl} "
              f"--timeline --align ends -o {d}/job.json.gz", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
