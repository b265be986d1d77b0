"""`scape collective`'s library calls: the time, algbw and busbw (nccl-tests definitions) of
one collective (`collective_time`, `sweep`), NCCL's choice of algorithm and protocol, and a
measured profile's calibrated times (`calibrated`). The simpy engine that runs the phases is
simulator/network/engine.py.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from profiles import HardwareProfile, UserError
from simulator.network import nccl
from simulator.network.collectives import (
    AUTO,
    NEEDS_HARDWARE,
    Phase,
    auto_candidates,
)
from simulator.network.engine import (
    PhaseCache,
    Request,
    Result,
    check_request,
    run,
    time_alone,
)
from simulator.network.fit import coefficients
from simulator.network.topology import Topology, build_topology
from vocabulary.names import AUTO_PROTO, PROTOCOLS
from vocabulary.units import never_zero

MAX_GPUS = 1 << 20  # a sane upper bound: the largest clusters have ~10^5 GPUs


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
    # the bandwidth time the call cannot beat (NCCL's algbw for its protocol: nccl.Protocol)
    min_s: float = 0.0

    def applied(self, phases: list[Phase]) -> list[Phase]:
        """`phases` with this call's per-step latency scale."""
        if self.hop_scale == 1.0:
            return phases
        return [replace(ph, hop_scale=self.hop_scale) for ph in phases]


def calibrated(hw: HardwareProfile, op: str, algo: str, ranks: int, size: float,
               proto: str = AUTO_PROTO, nodes: int | None = None) -> Choice:
    """How `op` of `size` bytes over `ranks` GPUs runs on `hw`.

    A measured profile says how its backend runs the collective, at what efficiency and with
    what per-call overhead (scape calibrate collectives). A profile with an [nccl] table runs
    it as NCCL does: the (algorithm, protocol) its tuner picks (or the ones forced, as
    NCCL_ALGO / NCCL_PROTO force them), with the protocol's bandwidth, latencies and the
    host's launch cost (simulator/network/nccl.py). Other profiles: `auto` or the algorithm given,
    the Simple protocol. A profile's [transport] adds its fixed cost per inter-node call. `nodes`:
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
        if proto not in (AUTO_PROTO, "simple"):
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
            if algo == AUTO and tuned:  # NCCL's choice, priced by this model (tuner_view)
                view = nccl.tuner_view(hw, ranks, nodes)
                if view is not None:
                    algo = nccl.decide(op, size, view)[0]
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
    protos = None if proto == AUTO_PROTO else (proto,)
    chosen, p, pr = nccl.decide(op, size, m, algos, protos)
    # NVLS_TREE's pipeline fill and drain: as many more bytes at the same rate
    fill = nccl.nvls_tree_fill(size, m) if chosen == "nvls_tree" else 0.0
    # NCCL's latency replaces the phases' per-step latency (hop_scale 0)
    return Choice(chosen, size * pr.wire * (1 + fill), call + pr.latency_s, 0.0, p,
                  hw.nccl.launch_us * 1e-6, pr.min_s)


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
    busiest link pass at once, as the profile's fit assumed (simulator/network/fit.py), so S shrinks
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
    # the fit's own testbed: one rank per link
    return float(coefficients(op, algo, ranks, float(2**20))[1])


def sweep(
    hw: HardwareProfile, gpus: int, op: str, algo: str, sizes: list[int],
    proto: str = AUTO_PROTO, gpus_per_process: int = 1,
) -> list[Result]:
    """`collective_time` for each size, on one topology (validated once, up front); on NCCL
    profiles each result names the protocol too. Calls are timed as nccl-tests times them,
    back to back: none ends sooner than its process can launch the next, one kernel per GPU
    it drives (`gpus_per_process`, nccl-tests' -g; 1: one process per GPU, as training runs;
    8 without MPI on an 8-GPU node: AddyLaddy, NVIDIA/nccl-tests #333, on "the CUDA latency
    overheads of single process jobs")."""
    for size in sizes:
        check_request(op, algo, size)
    if proto not in (AUTO_PROTO, *PROTOCOLS):
        raise UserError(f"--proto must be auto or one of {', '.join(PROTOCOLS)}, got "
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
    # each algorithm's phases built once for 1 byte and scaled to every size (PhaseCache)
    cache, group = PhaseCache(topo), [np.arange(gpus)]
    out = []
    for size in sizes:
        c = calibrated(hw, op, algo, gpus, size, proto)
        if c.algo == AUTO:  # no tuner: the fastest registered algorithm in this model
            res = collective_time(topo, gpus, op, AUTO, c.moved)
            name, seconds = res.algo, res.time_s
        else:
            phases = c.applied(cache.phases(op, c.algo, group, c.moved))
            name, seconds = c.algo, max(time_alone(topo, phases), c.min_s)
        # algbw of the bytes asked for, and the call's fixed costs first
        out.append(Result(name, op, name, size, gpus, 0.0,
                          launched(hw, seconds + c.overhead_s, c.floor_s, gpus_per_process),
                          c.proto))
    return out


def launched(hw: HardwareProfile, seconds: float, launch_s: float, gpus_per_process: int
             ) -> float:
    """The time between back-to-back calls of `seconds` on the GPUs, launched by processes
    that each drive `gpus_per_process` GPUs at `launch_s` per GPU. No call is shorter than one
    process's launches. Whether the GPU time overlaps them is the system's ([nccl]
    launch_adds, read off nccl-tests -g N logs by scape calibrate nccl-tests): by default the
    launching thread runs ahead and the slower of the two sets the pace; where the launches
    add, the call starts on its last GPU (gpus_per_process - 1) launches after its first and
    the GPUs' time follows that. One process per GPU is the same either way."""
    floor = launch_s * gpus_per_process
    if hw.nccl is not None and hw.nccl.launch_adds:  # one GPU per process: the same
        return max(seconds + launch_s * (gpus_per_process - 1), floor)
    return max(seconds, floor)


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


