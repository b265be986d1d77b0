"""The pieces a step's simulation is made of (simulator/step/simulate.py): streams with busy
intervals and their overlap, a pipeline stage's sends, ZeRO-3's prefetched gathers, and one
tensor-parallel all-reduce."""

from __future__ import annotations

import functools
import math

import numpy as np
import simpy

from simulator.network.engine import time_alone
from simulator.network.topology import Topology
from simulator.step.step_config import StepConfig
from simulator.step.tp_overlap import tp_collective_s


class Stream:
    """A stream with busy intervals, so overlap can be measured afterwards."""

    def __init__(self, env: simpy.Environment, name: str):
        self.env, self.name = env, name
        self.lock = simpy.Resource(env, capacity=1)
        self.busy: list[tuple[float, float]] = []
        self.changed = env.event()  # fires when the stream starts or stops running something

    def is_busy(self) -> bool:
        return self.lock.count > 0

    def toggled(self) -> None:
        """Wake whoever waits on a change of this stream's state."""
        fired, self.changed = self.changed, self.env.event()
        fired.succeed()


def busy_overlap(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Total time both lists of disjoint intervals cover (a two-pointer sweep)."""
    a, b = sorted(a), sorted(b)
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        total += max(0.0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def union_length(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, -math.inf
    for s, e in sorted(intervals):
        if e > end:
            total += e - max(s, end)
            end = e
    return total


def pipeline_send_s(topo: Topology, stage: int, size: float, hop: int | None = None,
                    pp: int = 1) -> float:
    """Seconds for every GPU of the first pipeline stage (ranks 0..stage-1) to send `size`
    bytes to its peer `stage` ranks on, all at once, on the network model (the NICs, rails
    and fabric between nodes, NVLink inside one): the send's latency and its bytes at the
    flows' rate (`_send_line`, remembered per topology and stage: the planner asks it for
    every micro-batch size, scheme and layout). `hop` (with `pp` stages): the ranks order
    tp, cp, pp, dp (--use-tp-pp-dp-mapping), so the first stage is every rank whose
    (rank // hop) % pp is 0 and its peer is `hop` ranks on."""
    latency, per_byte = _send_line(topo, stage, stage if hop is None else hop, pp)
    return latency + per_byte * size


# bytes the per-byte time is read at: large, so that the latency's float residue is nothing
LINE_BYTES = 1e9


@functools.lru_cache(maxsize=1024)
def _send_line(topo: Topology, stage: int, hop: int, pp: int) -> tuple[float, float]:
    """(seconds, seconds a byte) of `pipeline_send_s`: one phase of equal flows, which
    network/engine.py time_alone runs as its latency and then every flow at its max-min rate,
    neither of which depends on the bytes; so its time is a line in the bytes, read here at 0
    and at LINE_BYTES."""
    from simulator.network.collectives.base import Phase

    src = np.arange(stage)
    if hop != stage:  # tp, cp, pp, dp: the first stage's ranks, a replica apart
        every = np.arange(stage * pp)
        src = every[(every // hop) % pp == 0]

    def alone(size: float) -> float:
        return time_alone(topo, [Phase("pipeline send", 1, (topo.pairs(
            "pipeline send", src, src + hop, size),))])

    latency = alone(0.0)
    return latency, (alone(LINE_BYTES) - latency) / LINE_BYTES


class Prefetch:
    """ZeRO-3's backward gathers, one layer chunk ahead: before chunk c's backward the gathers
    of chunk c + 1 are issued (chunk 0's too, first) and chunk c waits for its own."""

    def __init__(self, sim, ops, parts: int):
        self.sim, self.ops, self.parts = sim, ops, parts
        self.issued: dict[int, list] = {}

    def _buckets(self, op, c: int) -> range:
        return range(math.floor(c * op.buckets / self.parts),
                     math.floor((c + 1) * op.buckets / self.parts))

    def _issue(self, c: int, in_flight: list) -> None:
        if c >= self.parts or c in self.issued:
            return
        self.issued[c] = [p for op in self.ops for _ in self._buckets(op, c)
                          for p in self.sim._launch(op, [op.size_bytes / op.buckets])]
        in_flight += self.issued[c]

    def before(self, c: int, in_flight: list):
        if not self.ops:
            return
        self._issue(c, in_flight)
        self._issue(c + 1, in_flight)
        yield simpy.AllOf(self.sim.env, self.issued[c])


def tp_allreduce_s(cfg: StepConfig) -> float:
    """One activation all-reduce of a tensor-parallel group, on its node's links alone, as
    NCCL runs it on this profile (NVLS on an NVSwitch node with [nccl]), else `algo`."""
    return tp_collective_s(cfg, "all_reduce", cfg.algo)
