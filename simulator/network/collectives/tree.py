"""Double binary tree all-reduce (NCCL's tree algorithm; Sanders et al. 2009).

Nodes form two complementary binary trees (a node that is internal in one is a leaf in the
other); inside a node the GPUs form a chain. Each tree carries half the data; reduction goes up
and broadcast comes down, pipelined, so every edge carries its half in both directions at once.
The latency term is 2 * (tree depth + chain length) one-hop latencies, the tree's at the
network's and the chain's at the intra-node hop's.
"""

from __future__ import annotations

import numpy as np

from simulator.network.collectives.base import Phase
from simulator.network.topology import Topology, distinct


def btree_parents(n: int) -> np.ndarray:
    """Parent of each rank in NCCL's in-order binary tree over n ranks (-1 for the root, 0).

    Rank r's lowest set bit b names its level; its parent is (r ^ b) | (b << 1), or r ^ b when
    that is out of range.
    """
    r = np.arange(n, dtype=np.int64)
    bit = r & -r  # lowest set bit; 0 for the root
    up = (r ^ bit) | (bit << 1)
    up = np.where(up >= n, r ^ bit, up)
    up[0] = -1
    return up


def dtree_parents(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The two trees: the binary tree, and its mirror (even n) or shift by one (odd n)."""
    first = btree_parents(n)
    v = np.arange(n)
    phys = (n - 1 - v) if n % 2 == 0 else (v + 1) % n  # virtual rank -> rank in tree two
    second = np.full(n, -1, dtype=np.int64)
    has = first >= 0
    second[phys[has]] = phys[first[has]]
    return first, second


def depth(parents: np.ndarray) -> int:
    """Number of edges on the longest path to the root."""
    cur, d = np.arange(len(parents)), 0
    while np.any(parents[cur] >= 0):
        cur = np.where(parents[cur] >= 0, parents[cur], cur)
        d += 1
    return d


def all_reduce(topo: Topology, size: float, group: np.ndarray) -> list[Phase]:
    if len(group) < 2:
        return []
    m = topo.node_groups(group)  # [nodes, members]
    n_nodes, members = m.shape
    n_nic = distinct(topo.nic_of(m[0]))
    block = members // n_nic  # members per NIC; channel c enters and leaves on NIC c
    demands = []
    if members > 1:
        # Chain inside each node, per channel, starting at the member on the channel's NIC.
        chains = np.concatenate([np.roll(m, -c * block, axis=1) for c in range(n_nic)])
        lo, hi = chains[:, :-1].reshape(-1), chains[:, 1:].reshape(-1)
        # Both trees cross the chain: S/2 each, up and down, split over the channels.
        demands.append(topo.pairs("tree chain", np.r_[hi, lo], np.r_[lo, hi], size / n_nic))
    tree_depth = 0
    if n_nodes > 1:
        src, dst = [], []
        for parents in dtree_parents(n_nodes):
            child = np.flatnonzero(parents >= 0)
            tree_depth = max(tree_depth, depth(parents))
            for c in range(n_nic):
                a, b = m[child, c * block], m[parents[child], c * block]
                src += [a, b]  # up (reduce) and down (broadcast)
                dst += [b, a]
        demands.append(
            topo.pairs("tree inter-node", np.concatenate(src), np.concatenate(dst),
                       size / (2 * n_nic))
        )
    # the critical path: up the chain and the tree, down the tree and the chain; only the
    # tree's hops cross the network
    return [Phase("tree", 2 * (tree_depth + members - 1), tuple(demands),
                  net_steps=2 * tree_depth, intra_latency_s=topo.intra_latency_s)]
