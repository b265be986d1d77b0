"""Run collectives on a topology in simpy time; one or several at once, sharing links.

`run` simulates any number of collectives with start times and GPU groups, so concurrent ones
slow each other down as max-min fairness says; `time_alone` times phases with nothing else on
the links; `PhaseCache` builds a collective's phases once per shape (DESIGN section 6).
simulator/network/collective.py answers `scape collective` on top of this engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import simpy

from profiles import UserError
from simulator.network.collectives import (
    ALGORITHMS,
    AUTO,
    BUS_FACTOR,
    Phase,
    auto_candidates,
    ring,
)
from simulator.network.flows import TIE, FlowNetwork, carries_bytes, maxmin_rates
from simulator.network.topology import Demand, Topology, distinct
from vocabulary.suggest import did_you_mean


@dataclass(frozen=True)
class Request:
    """One collective to run: `size_bytes` in nccl-tests convention, on `group` (default all)."""

    op: str
    algo: str
    size_bytes: float
    group: np.ndarray | None = None
    start_s: float = 0.0
    name: str = ""


@dataclass(frozen=True)
class Span:
    """A phase of a collective on the timeline."""

    collective: str
    phase: str
    start_s: float
    end_s: float
    bytes: float  # bytes moved by all flows of the phase


@dataclass(frozen=True)
class Result:
    name: str
    op: str
    algo: str
    size_bytes: float
    ranks: int
    start_s: float
    end_s: float
    proto: str = ""  # NCCL's protocol where the profile models it (simulator/network/nccl.py)

    @property
    def time_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def algbw_GBps(self) -> float:
        return self.size_bytes / self.time_s / 1e9 if self.time_s > 0 else float("inf")

    @property
    def busbw_GBps(self) -> float:
        return self.algbw_GBps * BUS_FACTOR[self.op](self.ranks)

    def as_dict(self) -> dict:
        return {
            "op": self.op,
            "algo": self.algo,
            "proto": self.proto,
            "ranks": self.ranks,
            "size_bytes": int(self.size_bytes),
            "time_s": self.time_s,
            "algbw_GBps": self.algbw_GBps,
            "busbw_GBps": self.busbw_GBps,
        }


@dataclass
class Simulation:
    results: list[Result] = field(default_factory=list)
    timeline: list[Span] = field(default_factory=list)
    rate_changes: int = 0


def check_request(op: str, algo: str, size_bytes: float) -> None:
    if op not in ALGORITHMS:
        raise UserError(f"unknown op {op!r}{did_you_mean(op, ALGORITHMS)}; choose one of: "
                        f"{', '.join(ALGORITHMS)}")
    if algo != AUTO and algo not in ALGORITHMS[op]:
        choices = ", ".join([*ALGORITHMS[op], AUTO])
        raise UserError(f"no algorithm {algo!r} for {op}{did_you_mean(algo, ALGORITHMS[op])}; "
                        f"choose one of: {choices}")
    if not size_bytes > 0:
        raise UserError(f"size must be a positive number of bytes, got {size_bytes!r}")


def phases_of(topo: Topology, req: Request, group: np.ndarray) -> list[Phase]:
    check_request(req.op, req.algo, req.size_bytes)
    return ALGORITHMS[req.op][req.algo](topo, float(req.size_bytes), group)


def _check_group(topo: Topology, group) -> np.ndarray:
    group = np.asarray(group, dtype=np.int64)
    if group.ndim != 1 or len(group) == 0:
        raise UserError("a collective's group must be a non-empty list of GPU ids")
    if group.min() < 0 or group.max() >= topo.gpus:
        raise UserError(f"a collective's group has GPU ids outside 0..{topo.gpus - 1}")
    if distinct(group) != len(group):
        raise UserError("a collective's group lists a GPU twice")
    return group


def execute(env: simpy.Environment, net: FlowNetwork, phases: list[Phase], name: str,
            timeline: list[Span]):
    """A simpy process body: run `phases` one after another on `net`, logging a span each."""
    for phase in phases:
        t0 = env.now
        if phase.latency_s > 0:
            yield env.timeout(phase.latency_s)
        yield simpy.AllOf(env, net.transfer_all(phase.demands))
        timeline.append(Span(name, phase.name, t0, env.now, phase.total_bytes))


def time_alone(topo: Topology, phases: list[Phase]) -> float:
    """Seconds `phases` take on `topo` with nothing else on its links: the fluid model
    `execute` runs in simpy (flows.FlowNetwork), stepped directly. Alone, a phase's demands all
    start together after its latency, so the rates change only where demands end: max-min
    rates once per ending (FlowNetwork recomputes them once per demand added as well, and
    builds a simpy event for each), the earliest finisher and those tied with it (flows.TIE)
    leaving together."""
    capacity = topo.capacity()  # [n_links] bytes/s
    now = 0.0
    for phase in phases:
        now += max(phase.latency_s, 0.0)
        demands = [d for d in phase.demands if carries_bytes(d)]
        remaining = [d.bytes_each for d in demands]  # bytes left per flow
        while demands:
            rates = maxmin_rates(capacity, demands)  # [len(demands)] bytes/s a flow
            for d, r in zip(demands, rates, strict=True):
                if r <= 0:
                    raise ValueError(f"{d.name}: crosses a link with no capacity")
            left = [b / r for b, r in zip(remaining, rates, strict=True)]  # s to finish
            wait = max(min(left), 0.0)
            now += wait
            kept = [i for i, t in enumerate(left) if t > wait * (1 + TIE)]
            demands = [demands[i] for i in kept]
            remaining = [remaining[i] - rates[i] * wait for i in kept]
    return now


def run(topo: Topology, requests: list[Request]) -> Simulation:
    """Simulate `requests` together; each starts at its `start_s` and runs its phases in order."""
    env = simpy.Environment()
    net = FlowNetwork(env, topo.capacity())
    sim = Simulation()
    everyone = np.arange(topo.gpus)

    def collective(i: int, req: Request):
        group = everyone if req.group is None else _check_group(topo, req.group)
        phases = phases_of(topo, req, group)
        name = req.name or f"{req.op}#{i}"
        yield env.timeout(req.start_s)
        yield from execute(env, net, phases, name, sim.timeline)
        sim.results.append(
            Result(name, req.op, req.algo, req.size_bytes, len(group), req.start_s, env.now)
        )

    for i, req in enumerate(requests):
        env.process(collective(i, req))
    env.run()
    sim.rate_changes = net.rate_changes
    order = {(req.name or f"{req.op}#{i}"): i for i, req in enumerate(requests)}
    sim.results.sort(key=lambda r: order[r.name])
    return sim


def _merge(name: str, demands: list[Demand]) -> Demand:
    """Identical concurrent demands of several groups as one: loads add up on shared links."""
    if len(demands) == 1:
        return demands[0]
    links, inverse = np.unique(np.concatenate([d.links for d in demands]), return_inverse=True)
    load = np.bincount(inverse, weights=np.concatenate([d.load for d in demands]))
    return Demand(name, links, load, demands[0].bytes_each, sum(d.n_flows for d in demands),
                  max(d.hop_latency_s for d in demands),
                  max(d.chunk_bytes for d in demands), min(d.chunk_Bps for d in demands))


class PhaseCache:
    """Phases of collectives run by several equal groups at once, built once per shape.

    Every algorithm's flows carry bytes in proportion to the collective's size, so phases built
    for 1 byte scale to any size; a training step issues the same collective on the same groups
    many times (one per gradient bucket), and each costs a multiplication, not a rebuild.
    """

    def __init__(self, topo: Topology):
        self.topo = topo
        self._unit: dict[tuple, list[Phase]] = {}
        self._fastest: dict[tuple, str] = {}
        self._alone: dict[tuple, float] = {}

    def phases(self, op: str, algo: str, groups: list[np.ndarray], size: float) -> list[Phase]:
        if algo == AUTO:
            algo = self.fastest(op, groups, size)
        key = (op, algo, tuple(hash(g.tobytes()) for g in groups))
        if key not in self._unit:
            build = ALGORITHMS[op][algo]
            names = ring.BATCHED.get(build)  # a ring: every group in one pass
            unit = (ring.batched_phases(self.topo, 1.0, groups, names)
                    if names is not None and len(groups) > 1 else None)
            if unit is not None:
                self._unit[key] = unit
                return self.phases(op, algo, groups, size)
            per_group = [build(self.topo, 1.0, g) for g in groups]
            self._unit[key] = [
                replace(ph, demands=tuple(
                    _merge(d.name, [pg[i].demands[j] for pg in per_group])
                    for j, d in enumerate(ph.demands)))
                for i, ph in enumerate(per_group[0])
            ]
        return [
            replace(ph, demands=tuple(replace(d, bytes_each=d.bytes_each * size)
                                      for d in ph.demands))
            for ph in self._unit[key]
        ]

    def alone_s(self, key: tuple, build) -> float:
        """Seconds a call takes alone on the topology, simulated once per `key` (`build()`
        gives its phases, called only the first time). A step's comm stream runs one
        collective at a time and nothing else moves bytes on its network, so every call of
        the same shape takes the same time: a step of 21 micro-batches x 48 layers of FSDP
        gathers simulates a few shapes, not 3,000 calls' flows."""
        if key not in self._alone:
            self._alone[key] = time_alone(self.topo, build())
        return self._alone[key]

    def fastest(self, op: str, groups: list[np.ndarray], size: float) -> str:
        """The registered algorithm that finishes `op` of `size` bytes first, run alone."""
        key = (op, size, tuple(hash(g.tobytes()) for g in groups))
        if key not in self._fastest:
            times = {algo: time_alone(self.topo, self.phases(op, algo, groups, size))
                     for algo in auto_candidates(op)}
            self._fastest[key] = min(times, key=times.get)
        return self._fastest[key]
