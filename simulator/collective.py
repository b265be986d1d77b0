"""Run collectives on a topology in simpy time; one or several at once, sharing links.

`collective_time` is the library call behind `scape collective`: the time, algbw and busbw
(nccl-tests definitions) of one collective. `run` simulates any number of collectives with
start times and GPU groups, so concurrent ones slow each other down as max-min fairness says.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache

import numpy as np
import simpy

from profiles import HardwareProfile, UserError
from simulator import nccl
from simulator.collectives import (
    ALGORITHMS,
    AUTO,
    BUS_FACTOR,
    NEEDS_HARDWARE,
    Phase,
    auto_candidates,
)
from simulator.flows import FlowNetwork
from simulator.network import Demand, Topology, build_topology
from simulator.units import never_zero

MAX_GPUS = 1 << 20  # a sane upper bound: the largest clusters have ~10^5 GPUs


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
    proto: str = ""  # NCCL's protocol where the profile models it (simulator/nccl.py)

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
        raise UserError(f"unknown op {op!r}; choose one of: {', '.join(ALGORITHMS)}")
    if algo != AUTO and algo not in ALGORITHMS[op]:
        choices = ", ".join([*ALGORITHMS[op], AUTO])
        raise UserError(f"no algorithm {algo!r} for {op}; choose one of: {choices}")
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
    if len(np.unique(group)) != len(group):
        raise UserError("a collective's group lists a GPU twice")
    return group


def execute(env: simpy.Environment, net: FlowNetwork, phases: list[Phase], name: str,
            timeline: list[Span]):
    """A simpy process body: run `phases` one after another on `net`, logging a span each."""
    for phase in phases:
        t0 = env.now
        if phase.latency_s > 0:
            yield env.timeout(phase.latency_s)
        yield simpy.AllOf(env, [net.transfer(d) for d in phase.demands])
        timeline.append(Span(name, phase.name, t0, env.now, phase.total_bytes))


def time_alone(topo: Topology, phases: list[Phase]) -> float:
    """Seconds `phases` take on `topo` with nothing else on its links."""
    env = simpy.Environment()
    env.process(execute(env, FlowNetwork(env, topo.capacity()), phases, "alone", []))
    env.run()
    return env.now


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


def collective_time(
    hw: HardwareProfile | Topology, gpus: int, op: str, algo: str, size_bytes: float
) -> Result:
    """Time, algbw and busbw of one collective over `gpus` GPUs; `auto` picks the fastest."""
    check_request(op, algo, size_bytes)
    if gpus < 2:
        raise UserError(f"a collective needs at least 2 GPUs, got {gpus}")
    topo = hw if isinstance(hw, Topology) else build_topology(hw, gpus)
    if topo.gpus != gpus:
        raise ValueError(f"topology has {topo.gpus} GPUs, asked for {gpus}")
    algos = auto_candidates(op) if algo == AUTO else [algo]
    best = None
    for name in algos:
        (res,) = run(topo, [Request(op, name, size_bytes, name=name)]).results
        if best is None or res.time_s < best.time_s:
            best = res
    return best


@dataclass(frozen=True)
class Choice:
    """How one collective call runs on a profile: the algorithm and protocol, the bytes to
    simulate (the protocol's or the measured backend's efficiency folded in), the fixed seconds
    before its first byte moves, and how much of the phases' per-step latency stays (0 where
    NCCL's own call latency, in `overhead_s`, replaces it)."""

    algo: str
    moved: float
    overhead_s: float
    hop_scale: float = 1.0
    proto: str = ""  # NCCL's protocol on profiles that model it; "" elsewhere (Simple)
    # the host's launch of the call on one GPU (profile [nccl] launch_us): back-to-back calls
    # come no faster than one per launch x GPUs the launching process drives (`sweep`)
    floor_s: float = 0.0

    def applied(self, phases: list[Phase]) -> list[Phase]:
        """`phases` with this call's per-step latency scale."""
        if self.hop_scale == 1.0:
            return phases
        return [replace(ph, hop_scale=self.hop_scale) for ph in phases]


def calibrated(hw: HardwareProfile, op: str, algo: str, ranks: int, size: float,
               proto: str = nccl.AUTO_PROTO, nodes: int | None = None) -> Choice:
    """How `op` of `size` bytes over `ranks` GPUs runs on `hw`.

    A measured profile says how its backend runs the collective, at what efficiency and with
    what per-call overhead (scape calibrate collectives). A profile with an [nccl] table runs
    it as NCCL does: the (algorithm, protocol) its tuner picks (or the ones forced, as
    NCCL_ALGO / NCCL_PROTO force them), with the protocol's bandwidth, latencies and the
    host's launch cost (simulator/nccl.py). Other profiles: `auto` or the algorithm given, the
    Simple protocol. A profile's [transport] adds its fixed cost per inter-node call. `nodes`:
    how many nodes the group spans (default: as few as hold `ranks`)."""
    call = hw.call_overhead_s(ranks)  # the transport's fixed cost per inter-node call
    measured = hw.collectives.get(op)
    tuned = measured is None and op in nccl.TUNED_OPS
    m = nccl.machine(hw, ranks, nodes) if tuned else None
    if m is None and (op, algo) in NEEDS_HARDWARE:
        raise UserError(f"--algo {algo} needs switch hardware NCCL uses only where a "
                        f"profile's [nccl] table says so (nvls = true for NVLink SHARP, collnet "
                        f"= true for SHARP); {hw.name} has no [nccl] table")
    if m is None or (algo != AUTO and algo not in nccl.TUNED_ALGOS):
        if proto not in (nccl.AUTO_PROTO, "simple"):
            if m is None and hw.nccl is not None and measured is None:
                raise UserError(f"--proto {proto}: NCCL's tuner does not choose protocols for "
                                f"{op} (point-to-point sends, Simple); only for "
                                f"{', '.join(nccl.TUNED_OPS)}")
            if m is None:
                raise UserError(f"--proto {proto}: {hw.name} has no [nccl] table (only NCCL "
                                "profiles model protocols; this one runs Simple)")
            raise UserError(f"--proto {proto}: --algo {algo} is not one of NCCL's algorithms "
                            f"({', '.join(nccl.TUNED_ALGOS)}), whose protocols are modelled; "
                            "it runs Simple")
        if measured is not None and algo not in (AUTO, measured["algo"]):
            # its links' nominal rates say nothing of the measured backend (a gloo ring over
            # loopback runs ~50x below them): an unmeasured algorithm has no honest time here
            raise UserError(f"{op} as {algo}: profile {hw.name} measured {op} as "
                            f"{measured['algo']} (scape calibrate collectives), not {algo}, "
                            "whose time on that backend it cannot know; ask for auto or "
                            f"{measured['algo']} (scape collective --algo), or use a hardware "
                            "profile")
        if measured is None:
            return Choice(algo, size, call, proto="simple" if proto == "simple" else "")
        # the algorithm the profile measured runs as measured
        overheads = measured.get("overhead_s", {})
        if overheads and ranks not in overheads:  # a per-call cost measured per rank count
            raise UserError(f"profile {hw.name} measured {op} with "
                            f"{', '.join(map(str, sorted(overheads)))} ranks, not {ranks}: its "
                            "per-call overhead at other counts is unknown; rerun scape "
                            f"calibrate collectives --nprocs {ranks}")
        eff = measured.get("by_ranks", {}).get(ranks, measured["efficiency"])
        return Choice(measured["algo"], past_bucket(hw, op, measured["algo"], ranks, size) / eff,
                      call + overheads.get(ranks, 0.0))
    algos = None if algo == AUTO else (algo,)
    protos = None if proto == nccl.AUTO_PROTO else (proto,)
    chosen, p, pr = nccl.decide(op, size, m, algos, protos)
    # NVLS_TREE's pipeline fill and drain: as many more bytes at the same rate
    fill = nccl.nvls_tree_fill(size, m) if chosen == "nvls_tree" else 0.0
    # NCCL's latency replaces the phases' per-step latency (hop_scale 0)
    return Choice(chosen, size * pr.wire * (1 + fill), call + pr.latency_s, 0.0, p,
                  hw.nccl.launch_us * 1e-6)


# a measured fit that misses its own measurements by more than this is flagged where it is used
FIT_WARN_PCT = 50.0


def fit_warning(hw: HardwareProfile, op: str) -> str | None:
    """A line saying that `hw`'s measured fit of `op` misses its own measurements badly (a
    rank count whose runs the fit's one latency and bandwidth cannot follow), or None."""
    measured = hw.collectives.get(op)
    if measured is None or measured.get("residual_max_pct", 0.0) <= FIT_WARN_PCT:
        return None
    return (f"warning: profile {hw.name} fitted its {op} measurements with up to "
            f"{measured['residual_max_pct']:.0f}% error (median "
            f"{measured.get('residual_median_pct', float('nan')):.0f}%): its {op} times are "
            "that uncertain; scape calibrate collectives again with more --sizes or repeats")


def past_bucket(hw: HardwareProfile, op: str, algo: str, ranks: int, size: float) -> float:
    """The bytes of S that cross a token-bucket link at its rate: on a netbed profile (its
    [nic] burst_bytes, the tbf bucket of scape/netbed.py) a call's first burst_bytes on its
    busiest link pass at once, as the profile's fit assumed (simulator/fit.py), so S shrinks
    by burst / C (C: busiest-link bytes per byte of S); elsewhere S. Every call starts with a
    full bucket: the link idles between a step's calls long enough to refill it (0.5 ms of
    traffic), which many small calls back to back would not, so those come out fast."""
    burst = hw.nic.burst_bytes
    if burst is None or burst == 0 or ranks < 2:  # one rank sends nothing
        return size
    # at least one byte (phases need a positive size): a call inside the bucket takes its
    # latency and nanoseconds of data
    return max(1.0, size - burst / _link_bytes_per_byte(op, algo, ranks))


@lru_cache(maxsize=256)
def _link_bytes_per_byte(op: str, algo: str, ranks: int) -> float:
    from simulator.fit import coefficients  # the fit's own testbed: one rank per link

    return float(coefficients(op, algo, ranks, float(2**20))[1])


def sweep(
    hw: HardwareProfile, gpus: int, op: str, algo: str, sizes: list[int],
    proto: str = nccl.AUTO_PROTO, gpus_per_process: int = 1,
) -> list[Result]:
    """`collective_time` for each size, on one topology (validated once, up front); on NCCL
    profiles each result names the protocol too. Calls are timed as nccl-tests times them,
    back to back: none ends sooner than its process can launch the next, one kernel per GPU
    it drives (`gpus_per_process`, nccl-tests' -g; 1: one process per GPU, as training runs;
    8 without MPI on an 8-GPU node: AddyLaddy, NVIDIA/nccl-tests #333, on "the CUDA latency
    overheads of single process jobs")."""
    for size in sizes:
        check_request(op, algo, size)
    if proto not in (nccl.AUTO_PROTO, *nccl.PROTOCOLS):
        raise UserError(f"--proto must be auto or one of {', '.join(nccl.PROTOCOLS)}, got "
                        f"{proto!r}")
    if not 2 <= gpus <= MAX_GPUS:
        raise UserError(f"a collective needs between 2 and {MAX_GPUS:,} GPUs, got {gpus}")
    per_node = hw.node.gpus_per_node
    if gpus_per_process != 1 and (hw.nccl is None or op not in nccl.TUNED_OPS or hw.collectives
                                  or (algo != AUTO and algo not in nccl.TUNED_ALGOS)):
        why = ("its profile has no [nccl] launch_us" if hw.nccl is None or hw.collectives
               else f"{op} is not an NCCL-tuned call" if op not in nccl.TUNED_OPS
               else f"--algo {algo} is not an NCCL algorithm")
        raise UserError(f"--gpus-per-process {gpus_per_process}: the launch is priced only for "
                        f"NCCL's tuned calls, and {why}; leave it out (1)")
    if (not 1 <= gpus_per_process <= min(gpus, per_node) or gpus % gpus_per_process
            or (gpus > per_node and per_node % gpus_per_process)):
        raise UserError(f"--gpus-per-process {gpus_per_process}: a process drives GPUs of one "
                        f"node ({per_node} on {hw.name}) and the {gpus} GPUs split evenly "
                        "between processes; give a divisor of both (1: one process per GPU)")
    topo = build_topology(hw, gpus)
    out = []
    for size in sizes:
        c = calibrated(hw, op, algo, gpus, size, proto)
        if c.algo == AUTO:  # no tuner: the fastest registered algorithm in this model
            res = collective_time(topo, gpus, op, AUTO, c.moved)
            name, seconds = res.algo, res.time_s
        else:
            phases = c.applied(phases_of(topo, Request(op, c.algo, c.moved), np.arange(gpus)))
            name, seconds = c.algo, time_alone(topo, phases)
        # algbw of the bytes asked for, and the call's fixed costs first
        out.append(Result(name, op, name, size, gpus, 0.0,
                          max(seconds + c.overhead_s, c.floor_s * gpus_per_process), c.proto))
    return out


def describe(topo: Topology) -> str:
    """One line on the topology a result was simulated on."""
    def rate(bps: float) -> str:  # a slow link's rate is not 0.0 GB/s
        return never_zero(f"{bps / 1e9:.1f}", bps / 1e9)

    intra = ""
    if topo.gpus_per_node > 1:
        intra = f"intra-node {rate(topo.intra_Bps)} GB/s per GPU, "
    text = (
        f"{topo.gpus} GPUs of {topo.name}: {topo.nodes} node(s) x {topo.gpus_per_node} GPU(s), "
        f"{intra}{topo.nics_per_node} NIC(s)/node x {rate(topo.nic_Bps)} GB/s"
    )
    if topo.nodes > 1:
        text += f", {topo.leaves} leaf switch(es) of {topo.nodes_per_leaf} nodes"
    return text + " (effective rates)"


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

    def phases(self, op: str, algo: str, groups: list[np.ndarray], size: float) -> list[Phase]:
        if algo == AUTO:
            algo = self.fastest(op, groups, size)
        key = (op, algo, tuple(hash(g.tobytes()) for g in groups))
        if key not in self._unit:
            per_group = [ALGORITHMS[op][algo](self.topo, 1.0, g) for g in groups]
            self._unit[key] = [
                Phase(ph.name, ph.steps, tuple(
                    _merge(d.name, [pg[i].demands[j] for pg in per_group])
                    for j, d in enumerate(ph.demands)))
                for i, ph in enumerate(per_group[0])
            ]
        return [
            Phase(ph.name, ph.steps,
                  tuple(replace(d, bytes_each=d.bytes_each * size) for d in ph.demands))
            for ph in self._unit[key]
        ]

    def fastest(self, op: str, groups: list[np.ndarray], size: float) -> str:
        """The registered algorithm that finishes `op` of `size` bytes first, run alone."""
        key = (op, size, tuple(hash(g.tobytes()) for g in groups))
        if key not in self._fastest:
            times = {algo: time_alone(self.topo, self.phases(op, algo, groups, size))
                     for algo in auto_candidates(op)}
            self._fastest[key] = min(times, key=times.get)
        return self._fastest[key]
