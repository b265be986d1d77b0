"""NVLink SHARP all-reduce, all-gather and reduce-scatter (NCCL's NVLS algorithm, one node, or
one NVLink domain, of NVSwitch-connected GPUs).

The switch reduces what the GPUs load with multimem.ld_reduce and multicasts what they store
with multimem.st: for an all-reduce of S bytes over P GPUs each GPU's port carries its whole
buffer into the switch (every shard is read once) and its 1/P reduced shard back out, then its
shard in and the whole result out, S (1 + 1/P) in each direction, against 2 (P-1)/P S for a
ring. One phase: NCCL pipelines the reduce-scatter and all-gather halves. Its latency is
NCCL's NVLS hwLat (simulator/network/nccl.py's call latency replaces the phase's); the rate it
reaches is NCCL's nvlsEfficiency of the link (the protocol's wire factor).
"""

from __future__ import annotations

import numpy as np

from profiles import UserError
from simulator.network.collectives.base import Phase
from simulator.network.collectives.tree import dtree_parents
from simulator.network.topology import Topology, distinct


def all_reduce(topo: Topology, size: float, group: np.ndarray) -> list[Phase]:
    p = len(group)
    if p < 2:
        return []
    _one_node(topo, group)
    # NVLS reaches `nvls_efficiency` of the ports' rate: as many more bytes at the full rate
    wire = (1 + 1 / p) / topo.nvls_efficiency
    return [Phase("nvls all-reduce", 1, (topo.switch_flows("nvls", group, size * wire),))]


def _one_node(topo: Topology, group: np.ndarray) -> None:
    nodes = distinct(topo.node_of(group))
    if nodes != 1:
        raise UserError(f"NVLink SHARP (nvls) runs inside one node; this group spans {nodes} "
                        "nodes (nvls_tree runs across them)")


def all_gather(topo: Topology, size: float, group: np.ndarray) -> list[Phase]:
    """NCCL's NVLS all-gather (2.19 on, one NVLink domain): each GPU stores its S/P shard once
    into the switch with multimem.st, which multicasts it to every GPU: a GPU's port carries
    S/P out and the whole S in; the phase prices S each way (the port's inbound half sets the
    time), at nvlsEfficiency of the link."""
    return _through_switch(topo, size, group, "nvls all-gather")


def reduce_scatter(topo: Topology, size: float, group: np.ndarray) -> list[Phase]:
    """NCCL's NVLS reduce-scatter: each GPU reads its S/P shard reduced over every GPU with
    multimem.ld_reduce, so the switch pulls every GPU's contribution to every shard: a port
    carries the whole S out and S/P in (priced S each way, the outbound half sets the time)."""
    return _through_switch(topo, size, group, "nvls reduce-scatter")


def _through_switch(topo: Topology, size: float, group: np.ndarray, name: str) -> list[Phase]:
    """One phase of S through each GPU's port and the switch, at nvlsEfficiency."""
    if len(group) < 2:
        return []
    _one_node(topo, group)
    return [Phase(name, 1, (topo.switch_flows("nvls", group, size / topo.nvls_efficiency),))]


def tree_all_reduce(topo: Topology, size: float, group: np.ndarray) -> list[Phase]:
    """NCCL's NVLS_TREE: NVLS inside every node and, pipelined with it, NCCL's double binary
    tree between the nodes (connect.cc connectNvls: ncclGetDtree over the nodes, the same
    local rank, the "head", of every node linked up and down). A GPU reduces its node's 1/G
    share through the switch, reduces it up and broadcasts it down both trees (each carries
    half, both directions at once), and multicasts the result back; the switch traffic is
    NVLS's S (1 + 1/G) each way. On two nodes each head sends and receives its share once; from
    three on, a head that is internal in one tree has two children there, so its NIC carries
    twice that: all-reduce bus bandwidth tops out at the node's NICs (a ring's too), where two
    nodes reach twice as much."""
    m = topo.node_groups(group)  # [nodes, G]
    if m.shape[0] < 2:
        return all_reduce(topo, size, group)
    g = m.shape[1]
    switch = topo.switch_flows("nvls", group, size * (1 + 1 / g) / topo.nvls_efficiency)
    src, dst = [], []
    for parents in dtree_parents(m.shape[0]):
        child = np.flatnonzero(parents >= 0)
        low, high = m[child].reshape(-1), m[parents[child]].reshape(-1)  # every head's edge
        src += [low, high]  # up (reduce) and down (broadcast)
        dst += [high, low]
    net = topo.pairs("nvls tree", np.concatenate(src), np.concatenate(dst), size / (2 * g))
    return [Phase("nvls tree all-reduce", 1, (switch, net))]
