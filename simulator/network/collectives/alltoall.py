"""All-to-all: every rank sends S/P to every other rank, all pairs at once (as NCCL does with
grouped send/recv). Each rank issues P-1 messages, so the latency term is (P-1)*alpha."""

from __future__ import annotations

import numpy as np

from simulator.network.collectives.base import Phase
from simulator.network.topology import Topology


def all_to_all(topo: Topology, size: float, group: np.ndarray) -> list[Phase]:
    p = len(group)
    if p < 2:
        return []
    return [Phase("all-to-all", p - 1, (topo.all_pairs("all-to-all", group, size / p),))]
