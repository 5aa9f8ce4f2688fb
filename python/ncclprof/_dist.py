"""Rank and local rank of this process, from torch.distributed when it is initialized, else
from the variables launchers set (torchrun, Open MPI, MPICH/Hydra, Slurm)."""

from __future__ import annotations

import os
import socket
import sys

_RANK = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")
_LOCAL_RANK = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK",
               "SLURM_LOCALID")
_WORLD = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS")
_LOCAL_WORLD = ("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                "SLURM_NTASKS_PER_NODE")


def _env_int(names):
    for k in names:
        v = os.environ.get(k, "").strip()
        if v.isdigit():
            return int(v)
    return None


def rank_info() -> dict:
    """{"rank", "local_rank", "world_size", "local_world_size"}; None where unknown."""
    info = {"rank": _env_int(_RANK), "local_rank": _env_int(_LOCAL_RANK),
            "world_size": _env_int(_WORLD), "local_world_size": _env_int(_LOCAL_WORLD)}
    dist = sys.modules.get("torch.distributed")
    if dist is not None:
        try:
            if dist.is_available() and dist.is_initialized():
                info["rank"] = dist.get_rank()
                info["world_size"] = dist.get_world_size()
        except Exception:
            pass
    return info


def worker_name() -> str:
    """Names one process's outputs: rank<N> in a distributed job, else <host>_<pid> (the name
    torch.profiler.tensorboard_trace_handler uses)."""
    r = rank_info()["rank"]
    if r is not None:
        return f"rank{r}"
    return f"{socket.gethostname()}_{os.getpid()}"
