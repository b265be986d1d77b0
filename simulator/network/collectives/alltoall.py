"""All-to-all: every rank sends S/P to every other rank, all pairs at once (as NCCL does with
grouped send/recv).

Latency. Inside a node each rank issues P - 1 messages, (P-1)*alpha. Across nodes NCCL does not
send them one after another: its p2p channels each serve up to 8 peers at once (sjeaugey,
NVIDIA/nccl#665: "Each CUDA Block = Channel = GPU SM can process send/recv operations from at
most 8 peers at once"; src/enqueue.cc addP2pToPlan), so up to 128 ranks of an 8-GPU H100 node
(16 channels) go out in one batch (docs/research/nccl-alltoall-scheduling.md section 6). What
the call costs then is a fixed part and a part that grows with the peers off the node (the
proxy thread progresses each network peer's send and receive in turn): a2a_call_us +
a2a_peer_us x (P - ranks on the node), a profile's [nccl] pair, fitted on public alltoall_perf
logs of 10-80 ranks (bench/alltoall_latency_fit.py). A profile without them keeps (P-1)*alpha,
which prices those logs' 80-rank call of 32 MiB 80% slow."""

from __future__ import annotations

import numpy as np

from simulator.network.collectives.base import Phase
from simulator.network.topology import Topology, distinct


def all_to_all(topo: Topology, size: float, group: np.ndarray) -> list[Phase]:
    p = len(group)
    if p < 2:
        return []
    flows = (topo.all_pairs("all-to-all", group, size / p),)
    nodes = distinct(topo.node_of(group))
    if nodes > 1 and topo.a2a_call_s is not None:
        off_node = p - p // nodes  # peers on other nodes (the group fills its nodes evenly)
        latency = topo.a2a_call_s + topo.a2a_peer_s * off_node
        return [Phase("all-to-all", p - 1, flows, fixed_latency_s=latency)]
    return [Phase("all-to-all", p - 1, flows)]
