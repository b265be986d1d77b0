"""What a collective algorithm produces: phases of concurrent flows (DESIGN section 6).

Sizes follow nccl-tests (PERFORMANCE.md): S is the total array size in bytes, the same S whose
algbw = S / t is reported; for all_gather and reduce_scatter it is the gathered (full) array, for
all_to_all the send buffer of one rank.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from scape.plan import WIRE_FACTOR
from simulator.network.topology import Demand, Topology, distinct


@dataclass(frozen=True)
class Phase:
    """Flows that move concurrently after `steps` one-hop latencies.

    A pipelined or repeated algorithm step is folded into one phase: each flow carries the
    bytes of all steps, and the latency term is the critical path of its steps. Where every
    step waits on every hop (lockstep), that is steps * (largest one-hop latency of its flows,
    plus the first chunk's crossing where the transport forwards whole chunks). A chained
    algorithm (ring, tree) sets `net_steps`: a step there waits only on the hop before it, so
    the last chunk's path pays the network (and the chunk's crossing) on `net_steps` hops and
    the intra-node latency on the others, as NCCL's own latency model counts a ring's
    (tuning.cc: (nsteps - nInterSteps) * intraLat + nInterSteps * interLat).
    """

    name: str
    steps: int
    demands: tuple[Demand, ...]
    hop_scale: float = 1.0  # 0 where NCCL's call latency replaces it (collective.Choice)
    net_steps: int | None = None  # steps of the critical path that cross the network; None: all
    intra_latency_s: float = 0.0  # one hop inside a node, for the other steps
    # the phase's whole latency where its algorithm prices it as one figure (an all-to-all
    # across nodes on a profile that gives it: alltoall.py); None: from the steps
    fixed_latency_s: float | None = None

    @property
    def latency_s(self) -> float:
        if self.fixed_latency_s is not None:
            return self.hop_scale * self.fixed_latency_s
        slowest = max((d.step_latency_s(self.steps) for d in self.demands), default=0.0)
        if self.net_steps is None:
            return self.steps * self.hop_scale * slowest
        net = min(self.net_steps, self.steps)
        return self.hop_scale * (net * slowest + (self.steps - net) * self.intra_latency_s)

    @property
    def total_bytes(self) -> float:
        return sum(d.total_bytes for d in self.demands)


# An algorithm: (topology, size in bytes, group of GPU ids) -> phases, run one after another.
Builder = Callable[[Topology, float, np.ndarray], list[Phase]]

# nccl-tests bus bandwidth factors: busbw = algbw * factor(n), the per-rank wire factors.
BUS_FACTOR: dict[str, Callable[[int], float]] = WIRE_FACTOR


def ring_channels(topo: Topology, group: np.ndarray) -> np.ndarray:
    """Ring orders over `group`, one per channel: [channels, len(group)] GPU ids.

    Within one node a single ring suffices (channels share the same ports). Across nodes, as
    NCCL does, one channel per NIC the members use: channel c rotates each node's members so
    that it enters the node on NIC c and leaves on NIC c-1, so every NIC carries one channel.
    """
    m = topo.node_groups(group)  # [nodes, members]
    if m.shape[0] == 1:
        return m
    n_nic = distinct(topo.nic_of(m[0]))
    block = m.shape[1] // n_nic  # members per NIC
    return np.stack([np.roll(m, -c * block, axis=1).reshape(-1) for c in range(n_nic)])


def chain_crossings(topo: Topology, src: np.ndarray, dst: np.ndarray) -> int:
    """Network crossings of the longest of the chains [channels, hops] from `src` to `dst`."""
    return int((topo.node_of(src) != topo.node_of(dst)).sum(axis=1).max(initial=0))


def ring_pass_crossings(topo: Topology, rings: np.ndarray) -> int:
    """Network crossings on the critical path of one ring pass (P - 1 steps): the chunk that
    finishes last walks every link of its ring but the one into its origin, so it crosses every
    network link of the ring when that link is inside a node (NCCL's rings cross between
    nodes once per node), one fewer when every link crosses (one GPU per node)."""
    nxt = np.roll(rings, -1, axis=1)
    cross = topo.node_of(rings) != topo.node_of(nxt)  # [channels, p]
    return int((cross.sum(axis=1) - cross.all(axis=1)).max(initial=0))


def ring_demand(topo: Topology, name: str, rings: np.ndarray, bytes_each: float) -> Demand:
    """Every member of each ring (row of `rings`) sends `bytes_each` to the next member."""
    return topo.pairs(name, rings.reshape(-1), np.roll(rings, -1, axis=1).reshape(-1), bytes_each)
