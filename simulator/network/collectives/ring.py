"""Ring reduce-scatter, all-gather and all-reduce (NCCL's ring algorithm).

Uncontended, with per-GPU bandwidth B and one-hop latency alpha, all-reduce takes exactly
2(P-1)*alpha + 2(P-1)/P * S/B; reduce-scatter and all-gather take half of that. Across nodes
each pass's latency is its critical path: the last chunk crosses the network once per node
and otherwise pays the intra-node hop (`ring_pass_crossings`; NCCL's tuner counts the same).
Where the inter-node transport stores and forwards C bytes per NIC and step (NCCL's network
proxy moves whole slices: src/transport/net.cc, sendProxyProgress/recvProxyProgress), each
inter-node step also waits min(C, S/P)/B for its first slice: 2(P-1)*(alpha + min(C, S/P)/B)
+ 2(P-1)/P * S/B.
"""

from __future__ import annotations

import numpy as np

from simulator.network.collectives.base import (
    Phase,
    ring_channels,
    ring_demand,
    ring_pass_crossings,
)
from simulator.network.topology import Topology


def _phases(topo: Topology, size: float, group: np.ndarray, names: tuple[str, ...]):
    """One ring pass (P-1 steps of S/P per rank) per name; the passes share their flows."""
    p = len(group)
    if p < 2:
        return []
    rings = ring_channels(topo, group)  # [channels, p]
    per_step = size / (rings.shape[0] * p)  # bytes each flow moves per ring step
    demand = ring_demand(topo, "ring", rings, per_step * (p - 1))
    net = ring_pass_crossings(topo, rings)
    return [Phase(name, p - 1, (demand,), net_steps=net, intra_latency_s=topo.intra_latency_s)
            for name in names]


def batched_phases(topo: Topology, size: float, groups: list[np.ndarray], names: tuple[str, ...]
             ) -> list[Phase] | None:
    """`_phases` of equal groups running at once, as simulator/network/engine.py PhaseCache
    merges them (loads add up on shared links; the first group's latency path), built in one
    pass over every group's rings instead of one per group (a planner's step runs a ring on
    dozens of data-parallel groups); None where the groups' rings differ in shape, channels or
    network crossings (then each is built alone)."""
    p = len(groups[0])
    if p < 2:
        return []
    rings = [ring_channels(topo, g) for g in groups]  # each [channels, p]
    if any(r.shape != rings[0].shape for r in rings):
        return None
    net = ring_pass_crossings(topo, rings[0])
    if any(ring_pass_crossings(topo, r) != net for r in rings[1:]):
        return None
    every = np.concatenate(rings)  # [groups x channels, p]
    per_step = size / (rings[0].shape[0] * p)
    demand = ring_demand(topo, "ring", every, per_step * (p - 1))
    return [Phase(name, p - 1, (demand,), net_steps=net, intra_latency_s=topo.intra_latency_s)
            for name in names]


def reduce_scatter(topo: Topology, size: float, group: np.ndarray) -> list[Phase]:
    return _phases(topo, size, group, ("reduce-scatter",))


def all_gather(topo: Topology, size: float, group: np.ndarray) -> list[Phase]:
    return _phases(topo, size, group, ("all-gather",))


def all_reduce(topo: Topology, size: float, group: np.ndarray) -> list[Phase]:
    return _phases(topo, size, group, ("reduce-scatter", "all-gather"))


# builder -> the pass names it runs, for the builders PhaseCache may run over all equal groups
# at once (`batched_phases`: the same phases as building each group's and merging them)
BATCHED = {reduce_scatter: ("reduce-scatter",), all_gather: ("all-gather",),
           all_reduce: ("reduce-scatter", "all-gather")}
