"""NCCL's CollNet Direct all-reduce: all-to-all inside each node, SHARP between nodes.

Each node's GPUs scatter their buffer to the node's heads (one per NIC) over NVSwitch, each
head sends its reduced 1/G share into the network, where the switches reduce it over the nodes
(SHARP), receives the result and the GPUs gather it back (NVIDIA/nccl src/device/all_reduce.h,
NCCL_ALGO_COLLNET_DIRECT: scatter, 'Reduce, send to network', 'Recv from network, broadcast',
gather). Per GPU: S (G-1)/G over NVLink each way for the scatter and as much for the gather,
and S/G through its NIC each way; the in-network reduction has no root GPU and no tree depth.
NCCL pipelines the parts, so they are one phase; its latency is NCCL's CollNet hwLat
(simulator/network/nccl.py). The network part runs as S/G from each GPU to the same local rank of
the next node (the NIC load each way; the switches' reduction itself is taken as free).
"""

from __future__ import annotations

import numpy as np

from profiles import UserError
from simulator.network.collectives.base import Phase
from simulator.network.topology import Topology


def all_reduce(topo: Topology, size: float, group: np.ndarray) -> list[Phase]:
    m = topo.node_groups(group)  # [nodes, G]
    if m.shape[0] < 2:
        raise UserError("CollNet (collnet_direct) runs between nodes; this group is in one node")
    g = m.shape[1]
    local = topo.switch_flows("collnet scatter/gather", group, 2 * size * (g - 1) / g)
    net = topo.pairs("collnet sharp", m.reshape(-1), np.roll(m, -1, axis=0).reshape(-1),
                     size / g)
    return [Phase("collnet direct all-reduce", 1, (local, net))]
