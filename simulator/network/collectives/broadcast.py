"""Pipelined ring broadcast (NCCL's ring broadcast): the root's data flows down a chain.

With the data cut into many chunks, every chain edge carries all S bytes concurrently;
uncontended, broadcast takes (P-1)*alpha + S/B.
"""

from __future__ import annotations

import numpy as np

from simulator.network.collectives.base import Phase, chain_crossings, ring_channels
from simulator.network.topology import Topology


def broadcast(topo: Topology, size: float, group: np.ndarray) -> list[Phase]:
    p = len(group)
    if p < 2:
        return []
    root = group[0]
    rings = ring_channels(topo, group)  # [channels, p]
    # Each channel's chain starts at the root and stops before coming back to it.
    start = np.argmax(rings == root, axis=1)
    chains = np.stack([np.roll(r, -s) for r, s in zip(rings, start, strict=True)])
    demand = topo.pairs(
        "ring broadcast", chains[:, :-1].reshape(-1), chains[:, 1:].reshape(-1),
        size / rings.shape[0],
    )
    net = chain_crossings(topo, chains[:, :-1], chains[:, 1:])
    return [Phase("broadcast", p - 1, (demand,), net_steps=net,
                  intra_latency_s=topo.intra_latency_s)]


def flat(topo: Topology, size: float, group: np.ndarray) -> list[Phase]:
    """Flat broadcast (gloo's over TCP, as `scape calibrate` finds it): the root sends all S
    bytes to every other member at once, so its link carries (P-1)*S; one latency."""
    p = len(group)
    if p < 2:
        return []
    demand = topo.pairs("flat broadcast", np.repeat(group[:1], p - 1), group[1:], size)
    return [Phase("broadcast", 1, (demand,))]
