"""NVLink SHARP all-reduce (NCCL's NVLS algorithm, one node of NVSwitch-connected GPUs).

The switch reduces what the GPUs load with multimem.ld_reduce and multicasts what they store
with multimem.st: for an all-reduce of S bytes over P GPUs each GPU's port carries its whole
buffer into the switch (every shard is read once) and its 1/P reduced shard back out, then its
shard in and the whole result out, S (1 + 1/P) in each direction, against 2 (P-1)/P S for a
ring. One phase: NCCL pipelines the reduce-scatter and all-gather halves. Its latency is
NCCL's NVLS hwLat (simulator/nccl.py's call latency replaces the phase's); the rate it reaches
is NCCL's nvlsEfficiency of the link (the protocol's wire factor).
"""

from __future__ import annotations

import numpy as np

from profiles import UserError
from simulator.collectives.base import Phase
from simulator.network import Topology


def all_reduce(topo: Topology, size: float, group: np.ndarray) -> list[Phase]:
    p = len(group)
    if p < 2:
        return []
    nodes = len(np.unique(topo.node_of(group)))
    if nodes != 1:
        raise UserError(f"NVLink SHARP (nvls) runs inside one node; this group spans {nodes} "
                        "nodes (nvls_tree runs across them)")
    return [Phase("nvls all-reduce", 1, (topo.switch_flows("nvls", group, size * (1 + 1 / p)),))]


def tree_all_reduce(topo: Topology, size: float, group: np.ndarray) -> list[Phase]:
    """NCCL's NVLS_TREE: NVLS inside every node and, pipelined with it, a tree between the
    nodes over each local rank's NIC. A GPU reduces its node's 1/G share through the switch,
    exchanges that share with the same local rank of the other nodes (a binary tree sends and
    receives it once each way per GPU: S/G), and multicasts the result back; the switch
    traffic is NVLS's S (1 + 1/G) each way."""
    m = topo.node_groups(group)  # [nodes, G]
    if m.shape[0] < 2:
        return all_reduce(topo, size, group)
    g = m.shape[1]
    switch = topo.switch_flows("nvls", group, size * (1 + 1 / g))
    # each GPU sends S/G to, and receives S/G from, the same local rank of another node: the
    # NIC traffic of the tree (for two nodes exactly the exchange of the two halves)
    net = topo.pairs("nvls tree", m.reshape(-1), np.roll(m, -1, axis=0).reshape(-1), size / g)
    return [Phase("nvls tree all-reduce", 1, (switch, net))]
