"""A thin wrapper over torch.distributed: every call timed, its bytes counted.

Bytes follow the plan's convention (scape/plan/types.py, nccl-tests): S is the full array of the
collective: the tensor for all_reduce and broadcast, the input of reduce_scatter, the output of
all_gather, one rank's send buffer for all_to_all. Async calls return a handle whose `wait()`
records the time spent waiting.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist


@dataclass
class Record:
    name: str
    collective: str
    size_bytes: int
    seconds: float  # issue to completion (sync) or issue only (async)
    wait_seconds: float = 0.0


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


@dataclass
class Handle:
    work: object
    record: Record

    def wait(self) -> None:
        t0 = time.perf_counter()
        if self.work is not None:
            self.work.wait()
        self.record.wait_seconds += time.perf_counter() - t0


@dataclass
class Comm:
    """Collectives over the default process group (or one rank alone: a no-op world)."""

    log: list[Record] = field(default_factory=list)
    sync: bool = False  # on GPUs: wait for the device so times cover the work, not its launch
    # a world of one even inside a process group (a kernel benchmark timing one rank's local
    # work on every rank at once: calibration/sharing.py)
    alone: bool = False

    @property
    def world(self) -> int:
        return dist.get_world_size() if dist.is_initialized() and not self.alone else 1

    @property
    def rank(self) -> int:
        return dist.get_rank() if dist.is_initialized() and not self.alone else 0

    def _run(self, name, collective, size, fn, async_op=False):
        record = Record(name, collective, int(size), 0.0)
        self.log.append(record)
        t0 = time.perf_counter()
        work = fn(async_op) if self.world > 1 else None
        if self.sync and not async_op:
            torch.cuda.synchronize()
        record.seconds = time.perf_counter() - t0
        if async_op:
            return Handle(work, record)
        return record

    def all_reduce(self, name: str, t: torch.Tensor, op: str = "sum"):
        """In place; `op` is sum or max."""
        reduce_op = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}[op]
        return self._run(name, "all_reduce", nbytes(t),
                         lambda a: dist.all_reduce(t, op=reduce_op, async_op=a))

    def reduce_scatter(self, name: str, out: torch.Tensor, inp: torch.Tensor):
        # reduce_scatter_single replaces the deprecated reduce_scatter_tensor where it exists
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

        def fn(a):
            return scatter(out, inp, async_op=a)
        if self.world == 1:
            out.copy_(inp)
        return self._run(name, "reduce_scatter", nbytes(inp), fn)

    def all_gather(self, name: str, out: torch.Tensor, inp: torch.Tensor,
                   async_op: bool = False):
        if self.world == 1:
            out.copy_(inp)
        return self._run(name, "all_gather", nbytes(out),
                         lambda a: dist.all_gather_into_tensor(out, inp, async_op=a), async_op)

    def broadcast(self, name: str, t: torch.Tensor, src: int):
        return self._run(name, "broadcast", nbytes(t),
                         lambda a: dist.broadcast(t, src, async_op=a))

    def all_to_all(self, name: str, out: torch.Tensor, inp: torch.Tensor):
        if self.world == 1:
            out.copy_(inp)
        return self._run(name, "all_to_all", nbytes(inp),
                         lambda a: dist.all_to_all_single(out, inp, async_op=a))

    def take(self) -> list[Record]:
        """The records since the last call (one step's worth), and forget them."""
        out, self.log = self.log, []
        return out
