"""Hierarchical collectives: rings inside each node, then rings across nodes, one per local rank.

all-reduce = intra-node reduce-scatter, inter-node all-reduce of S/G (G rings, one per local
rank, so every NIC is busy), intra-node all-gather. With one GPU per node or one node it is the
flat ring.
"""

from __future__ import annotations

import numpy as np

from simulator.network.collectives.base import Phase, ring_demand
from simulator.network.topology import Topology


def _ring_phase(topo: Topology, name: str, rings: np.ndarray, size: float) -> list[Phase]:
    """A ring reduce-scatter or all-gather of `size` bytes on each row of `rings` at once."""
    n = rings.shape[1]
    if n < 2:
        return []
    return [Phase(name, n - 1, (ring_demand(topo, f"hier {name}", rings, size * (n - 1) / n),))]


def _intra(topo, size, group, name):
    m = topo.node_groups(group)  # [nodes, members]: one ring per node
    return _ring_phase(topo, f"intra {name}", m, size)


def _inter(topo, size, group, name):
    m = topo.node_groups(group)  # one ring per local rank, across nodes
    return _ring_phase(topo, f"inter {name}", m.T, size / m.shape[1])


def reduce_scatter(topo: Topology, size: float, group: np.ndarray) -> list[Phase]:
    return _intra(topo, size, group, "reduce-scatter") + _inter(topo, size, group, "reduce-scatter")


def all_gather(topo: Topology, size: float, group: np.ndarray) -> list[Phase]:
    return _inter(topo, size, group, "all-gather") + _intra(topo, size, group, "all-gather")


def all_reduce(topo: Topology, size: float, group: np.ndarray) -> list[Phase]:
    return (
        _intra(topo, size, group, "reduce-scatter")
        + _inter(topo, size, group, "reduce-scatter")
        + _inter(topo, size, group, "all-gather")
        + _intra(topo, size, group, "all-gather")
    )
