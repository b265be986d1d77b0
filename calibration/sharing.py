"""What each kernel call costs more when the step's ranks share one GPU (the one-GPU NCCL
testbed of `scape calibrate collectives --share-gpu`), measured inside those ranks.

Why: on the lent H100 (2026-11-26, results/gpu-sessions/session12) the ranks' timed kernel
blocks took 5-40 ms a step where the same kernels alone take under 3 ms. Every block the
runtime times ends in a host synchronization (scape/schemes/base.py Scheme.timed), and with
2-4 CUDA contexts time-sliced on one GPU such a wait also spans the other contexts' turns.
NVIDIA publishes neither the time slice nor the switching rules, so this measures the effect
instead of modelling it: each KERNEL_BENCH kind (calibration/compute.py) at one size,
called by every rank at once behind a collective (as a step's kernels follow the last
collective), against the same call by rank 0 alone while the others wait on the host.
The difference, per call, is the profile's [sharing] extra_us; the simulator adds it to
every kernel of that kind (simulator/step/compute.py sharing_waits).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

SHARING_ELEMENTS = 2**20  # one call's size: tiny-gpt's 842k-parameter flat buffer, rounded
SHARING_REPEATS = 5


def sharing_extra(device, kinds: Sequence[str], elements: int = SHARING_ELEMENTS,
                  repeats: int = SHARING_REPEATS) -> dict[str, tuple[float, float]]:
    """{kind: (median, mean) seconds a call takes more with every rank calling it at once than
    alone}: the slowest rank's median (mean) shared time minus rank 0's median (mean) alone
    time, at least 0. The mean keeps the occasional long wait the median may step over (on
    the H100 a block took either its usual time or ~20 ms more). Run on every rank of an
    initialized process group; alone and shared calls alternate, so drift in the machine's
    speed hits both alike."""
    import torch
    import torch.distributed as dist

    from calibration.kernel_benches import KERNEL_BENCH
    from calibration.timing import default_device, synchronize

    rank = dist.get_rank()
    # the others wait for rank 0's alone calls on the host (gloo over the store), with no
    # GPU work of their own, not in a collective kernel that would hold the GPU meanwhile
    host = dist.new_group(backend="gloo")
    slowest = torch.zeros(1, dtype=torch.float64, device=device)
    out: dict[str, tuple[float, float]] = {}
    for kind in kinds:
        with default_device(device):
            bench = KERNEL_BENCH[kind](elements, device)
            bench()  # warm-up: first calls allocate and compile
            synchronize(device)
            shared, alone = [], []
            for _ in range(repeats):
                dist.barrier()  # everyone starts together, as after a step's collective
                t0 = time.perf_counter()
                bench()
                synchronize(device)
                shared.append(time.perf_counter() - t0)
                dist.barrier(group=host)
                if rank == 0:
                    t0 = time.perf_counter()
                    bench()
                    synchronize(device)
                    alone.append(time.perf_counter() - t0)
                dist.barrier(group=host)
            del bench
        extra = []
        for stat in (statistics.median, statistics.fmean):
            slowest.fill_(stat(shared))
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            if rank == 0:
                extra.append(max(0.0, slowest.item() - stat(alone)))
        if rank == 0:
            out[kind] = (extra[0], extra[1])
    dist.destroy_process_group(host)
    return out
