"""Run a function on P gloo ranks in fresh processes (loopback only) and collect results."""

from __future__ import annotations

import os
import pickle
import socket
import traceback
from pathlib import Path

import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank: int, world: int, port: int, fn, args, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    try:
        result = fn(*args)
    except BaseException as exc:  # report, do not hang the parent
        result = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
    Path(out_dir, f"rank{rank}.pkl").write_bytes(pickle.dumps(result))
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def run_ranks(fn, world: int, args: tuple, tmp: Path) -> list:
    """fn(*args) on each rank; returns the per-rank results (errors as {'error': ...})."""
    tmp.mkdir(parents=True, exist_ok=True)
    mp.start_processes(_entry, args=(world, free_port(), fn, args, str(tmp)), nprocs=world,
                       join=True, start_method="spawn")
    return [pickle.loads((tmp / f"rank{r}.pkl").read_bytes()) for r in range(world)]
