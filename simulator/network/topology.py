"""Links and topology: intra-node tier, NIC tier, two-level fat tree (DESIGN section 6).

Every physical link is one entry of a capacity vector, so flows that share a link share it and
flows on disjoint links do not. The layout, for P GPUs on N nodes with K NICs each and L leaves:

    [intra_tx (P) | intra_rx (P) | nic_tx (N*K) | nic_rx (N*K) | leaf_up (L) | leaf_down (L)]

- intra_tx/rx: a GPU's port into the NVLink/NVSwitch (or PCIe) fabric of its node, per direction;
  the switch itself is non-blocking, so only the ports constrain intra-node traffic.
- nic_tx/rx: a NIC, per direction; GPU g uses NIC (g mod G) * K // G of its node.
- leaf_up/down: the bundle of uplinks of a leaf switch to the spine, per direction, with capacity
  nodes_per_leaf * K * NIC rate / oversubscription (the switch's design, not the job's size);
  the spine layer of a two-level fat tree is non-blocking.
The PCIe path between a GPU and its NIC is taken as never the bottleneck.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from profiles import HardwareProfile, UserError
from simulator.network import nccl


@dataclass(frozen=True)
class Demand:
    """A class of identical flows, compiled against a topology.

    `links` are the distinct links the class crosses and `load[i]` the number of its flows on
    `links[i]`. Every flow of the class moves at the same rate, set by its most loaded link; a
    collective waits for its slowest flow anyway, so this is what it feels.
    """

    name: str
    links: np.ndarray  # int64 [n_links_used]
    load: np.ndarray  # float64 [n_links_used], flows of this class per link
    bytes_each: float  # bytes carried by each flow
    n_flows: int
    hop_latency_s: float  # largest one-hop latency over the class's flows
    # Store-and-forward granularity of a step on the inter-node transport (bytes; 0: none) and
    # the rate it crosses at: a step's data reaches the next rank only chunk by chunk.
    chunk_bytes: float = 0.0
    chunk_Bps: float = float("inf")

    @property
    def total_bytes(self) -> float:
        return self.bytes_each * self.n_flows

    def step_latency_s(self, steps: int) -> float:
        """Seconds one of `steps` sequential steps of this class waits besides its share of
        bandwidth: the hop latency, plus the time its first chunk takes to cross when the
        transport forwards whole chunks (a pipeline of `steps` stages fills chunk by chunk)."""
        if self.chunk_bytes <= 0 or steps <= 0:
            return self.hop_latency_s
        return self.hop_latency_s + min(self.chunk_bytes, self.bytes_each / steps) / self.chunk_Bps


@dataclass(frozen=True)
class Topology:
    """The links of `gpus` GPUs placed on consecutive nodes of a hardware profile."""

    gpus: int
    gpus_per_node: int
    nics_per_node: int
    nodes_per_leaf: int
    intra_Bps: float  # effective, per GPU per direction
    nic_Bps: float  # effective, per NIC per direction
    uplink_Bps: float  # effective, per leaf per direction
    intra_latency_s: float
    nic_latency_s: float
    switch_latency_s: float
    name: str = "custom"
    nic_chunk_bytes: float = 0.0  # store-and-forward chunk of the inter-node transport; 0: none
    # the share of the NVLink rate NVLS's multimem traffic reaches (simulator/network/nccl.py
    # nvls_efficiency); 1 where the profile has no NVLS
    nvls_efficiency: float = 1.0
    # an all-to-all across nodes: its fixed seconds and seconds per peer off a rank's node
    # (profile [nccl] a2a_call_us, a2a_peer_us); None: P - 1 network steps in turn
    a2a_call_s: float | None = None
    a2a_peer_s: float | None = None

    def __post_init__(self):
        if self.gpus < 1:
            raise UserError(f"gpus must be at least 1, got {self.gpus}")
        if self.gpus > self.gpus_per_node and self.gpus % self.gpus_per_node:
            raise UserError(
                f"gpus must be a multiple of the node size ({self.gpus_per_node} on {self.name}) "
                f"when larger than one node, got {self.gpus}"
            )

    # ---- sizes and offsets of the link vector ----
    @property
    def nodes(self) -> int:
        return -(-self.gpus // self.gpus_per_node)

    @property
    def leaves(self) -> int:
        return -(-self.nodes // self.nodes_per_leaf)

    @property
    def n_nics(self) -> int:
        return self.nodes * self.nics_per_node

    @property
    def _off(self) -> dict[str, int]:
        p, n = self.gpus, self.n_nics
        return {
            "intra_tx": 0,
            "intra_rx": p,
            "nic_tx": 2 * p,
            "nic_rx": 2 * p + n,
            "leaf_up": 2 * p + 2 * n,
            "leaf_down": 2 * p + 2 * n + self.leaves,
        }

    @property
    def n_links(self) -> int:
        return 2 * self.gpus + 2 * self.n_nics + 2 * self.leaves

    def capacity(self) -> np.ndarray:
        """Bytes per second of every link, in the layout of the module docstring."""
        return np.concatenate(
            [
                np.full(2 * self.gpus, self.intra_Bps),
                np.full(2 * self.n_nics, self.nic_Bps),
                np.full(2 * self.leaves, self.uplink_Bps),
            ]
        )

    def tier_of(self, link: int) -> str:
        """The tier name of a link index (for reports and tests)."""
        names = list(self._off)
        offsets = list(self._off.values())
        return names[int(np.searchsorted(offsets, link, side="right")) - 1]

    # ---- placement ----
    def node_of(self, gpu: np.ndarray) -> np.ndarray:
        return gpu // self.gpus_per_node

    def nic_of(self, gpu: np.ndarray) -> np.ndarray:
        k, g = self.nics_per_node, self.gpus_per_node
        return self.node_of(gpu) * k + (gpu % g) * k // g

    def leaf_of_node(self, node: np.ndarray) -> np.ndarray:
        return node // self.nodes_per_leaf

    # ---- demands ----
    def pairs(self, name: str, src: np.ndarray, dst: np.ndarray, bytes_each: float) -> Demand:
        """Compile point-to-point flows src[i] -> dst[i] (GPU ids) into a Demand."""
        # int32: GPU and link ids fit, and integer division is twice as fast as on int64.
        src = np.asarray(src, dtype=np.int32)
        dst = np.asarray(dst, dtype=np.int32)
        if src.shape != dst.shape or src.ndim != 1:
            raise ValueError("src and dst must be 1-D arrays of equal length")
        if np.any(src == dst):
            raise ValueError(f"{name}: a flow from a GPU to itself")
        off = self._off
        ns, nd = self.node_of(src), self.node_of(dst)
        intra = ns == nd
        inter = ~intra
        ls, ld = self.leaf_of_node(ns[inter]), self.leaf_of_node(nd[inter])
        cross = ls != ld  # among inter-node flows
        ids = np.concatenate(
            [
                off["intra_tx"] + src[intra],
                off["intra_rx"] + dst[intra],
                off["nic_tx"] + self.nic_of(src[inter]),
                off["nic_rx"] + self.nic_of(dst[inter]),
                off["leaf_up"] + ls[cross],
                off["leaf_down"] + ld[cross],
            ]
        )
        latency = self._hop_latency(intra.any(), inter.any(), cross.any())
        return self._demand(name, ids, bytes_each, len(src), latency, bool(inter.any()))

    def all_pairs(self, name: str, group: np.ndarray, bytes_each: float) -> Demand:
        """Every member of `group` sends `bytes_each` to every other member (all-to-all).

        Loads are counted per link without listing the |group|^2 flows: a GPU's port carries
        the flows to the other members of its node; a NIC those of its GPUs to members on other
        nodes; a leaf uplink those of its members to members under other leaves.
        """
        group = np.asarray(group, dtype=np.int64)
        p = len(group)
        off = self._off
        node = self.node_of(group)
        leaf = self.leaf_of_node(node)
        per_node = np.bincount(node, minlength=self.nodes)  # members per node
        per_leaf = np.bincount(leaf, minlength=self.leaves)  # members per leaf
        same_node = per_node[node] - 1  # [p] peers on the member's own node
        other_node = p - per_node[node]  # [p] peers on other nodes
        other_leaf = p - per_leaf[leaf]  # [p] peers under other leaves
        nic_load = np.bincount(self.nic_of(group), weights=other_node, minlength=self.n_nics)
        leaf_load = np.bincount(leaf, weights=other_leaf, minlength=self.leaves)
        load = np.zeros(self.n_links)
        np.add.at(load, off["intra_tx"] + group, same_node)
        np.add.at(load, off["intra_rx"] + group, same_node)
        load[off["nic_tx"] : off["nic_tx"] + self.n_nics] += nic_load
        load[off["nic_rx"] : off["nic_rx"] + self.n_nics] += nic_load
        load[off["leaf_up"] : off["leaf_up"] + self.leaves] += leaf_load
        load[off["leaf_down"] : off["leaf_down"] + self.leaves] += leaf_load
        links = np.flatnonzero(load)
        latency = self._hop_latency(same_node.any(), other_node.any(), other_leaf.any())
        return Demand(name, links, load[links], float(bytes_each), p * (p - 1), latency,
                      *self._chunk(bool(other_node.any())))

    def switch_flows(self, name: str, group: np.ndarray, bytes_each: float) -> Demand:
        """Every member of `group` sends `bytes_each` into its node's NVSwitch and receives
        `bytes_each` from it, as NVLink SHARP's multimem loads and stores do: the switch
        reduces and multicasts, so only the GPUs' ports carry bytes."""
        group = np.asarray(group, dtype=np.int64)
        off = self._off
        ids = np.concatenate([off["intra_tx"] + group, off["intra_rx"] + group])
        return self._demand(name, ids, bytes_each, len(ids), self.intra_latency_s, False)

    def _hop_latency(self, intra: bool, inter: bool, cross_leaf: bool) -> float:
        """Largest one-hop latency among flows inside a node, between nodes, across leaves."""
        candidates = [0.0]
        if intra:
            candidates.append(self.intra_latency_s)
        if inter:
            candidates.append(self.nic_latency_s)
        if cross_leaf:
            candidates.append(self.nic_latency_s + 2 * self.switch_latency_s)
        return max(candidates)

    def _chunk(self, inter: bool) -> tuple[float, float]:
        """(chunk bytes, rate) of a class's store-and-forward steps: only flows that leave
        their node go through the transport."""
        if inter and self.nic_chunk_bytes > 0:
            return self.nic_chunk_bytes, self.nic_Bps
        return 0.0, float("inf")

    def _demand(self, name, ids, bytes_each, n_flows, latency, inter: bool) -> Demand:
        counts = np.bincount(ids, minlength=self.n_links)
        links = np.flatnonzero(counts)
        return Demand(name, links, counts[links].astype(np.float64), float(bytes_each),
                      n_flows, latency, *self._chunk(inter))

    def node_groups(self, group: np.ndarray) -> np.ndarray:
        """`group` as a [nodes, members per node] matrix, members in local-rank order.

        Collectives that treat nodes as units (rings with channels, trees, hierarchical
        algorithms) need the same number of members on every node they span.
        """
        group = np.asarray(group, dtype=np.int64)
        g_node = self.gpus_per_node
        first = int(group[0]) if len(group) else 0
        if first % g_node == 0 and len(group) % g_node == 0 and np.array_equal(
            group, np.arange(first, first + len(group))
        ):
            return group.reshape(-1, g_node)  # whole consecutive nodes: the common case
        order = np.lexsort((group % self.gpus_per_node, self.node_of(group)))
        g = group[order]
        nodes, counts = np.unique(self.node_of(g), return_counts=True)
        if np.any(counts != counts[0]):
            raise UserError("a collective's group must have the same number of GPUs on every node")
        return g.reshape(len(nodes), counts[0])


def distinct(values: np.ndarray) -> int:
    """How many different values: the nodes or NICs a group spans. A set of the (small) array's
    values: numpy 2's plain `np.unique` sorts, and its first call imports numpy.ma, a few ms of
    every CLI call (issue 58's 0.3 s)."""
    return len(set(values.tolist()))


def domain_used(hw: HardwareProfile, gpus: int) -> int:
    """GPUs a job of `gpus` GPUs uses in each NVLink domain: the whole domain, or, where the
    domain spans several nodes and the job's whole nodes do not fill whole domains, the most
    whole nodes of a domain that split the job evenly (a GB200 NVL72 job of 512 GPUs uses 64 of
    each rack's 72, 16 of its 18 trays); a job inside one such domain, all of its GPUs."""
    per_node, domain = hw.node.gpus_per_node, hw.node.domain_gpus
    if domain > per_node and gpus <= domain:  # a job inside one domain: all of it is NVLink
        return max(gpus, 1)
    if domain == per_node or gpus % domain == 0 or gpus % per_node:
        return domain
    return max(d for d in range(per_node, domain + 1, per_node) if gpus % d == 0)


def build_topology(hw: HardwareProfile, gpus: int) -> Topology:
    """The topology of `gpus` GPUs of hardware `hw`, filled node by node, leaf by leaf. A
    profile whose NVLink domain spans several nodes (a GB200 NVL72 rack of 18 trays) is laid
    out by domain: the domain's GPUs share its NVLink fabric and its nodes' NICs, so a
    topology "node" here is one NVLink domain, or the part of each that the job uses
    (`domain_used`; DESIGN section 10)."""
    per_node, domain = hw.node.gpus_per_node, domain_used(hw, gpus)
    g = min(domain, gpus) if gpus >= 1 else domain
    nic = hw.nic
    uplink = hw.fabric.nodes_per_leaf * nic.nics_per_node * hw.inter_node_Bps
    # Several NICs per GPU (rails: AWS p5 has 4 x 100G per GPU) carry that GPU's channels side by
    # side, one NIC each: one link of their summed rate per GPU is the same network.
    rails = max(1, nic.nics_per_node // per_node)
    return Topology(
        gpus=gpus,
        gpus_per_node=g,
        # A partly used node keeps the NICs of the GPUs it uses.
        nics_per_node=max(1, nic.nics_per_node // rails * g // per_node),
        # a leaf's nodes, counted in NVLink domains
        nodes_per_leaf=max(1, hw.fabric.nodes_per_leaf * per_node // domain),
        intra_Bps=hw.intra_node.effective_Bps,
        nic_Bps=hw.inter_node_Bps * rails,  # through the profile's transport
        uplink_Bps=uplink / hw.fabric.oversubscription,
        intra_latency_s=hw.intra_node.latency_us * 1e-6,
        nic_latency_s=hw.inter_node_latency_s,
        switch_latency_s=hw.fabric.switch_latency_us * 1e-6,
        name=hw.name,
        nic_chunk_bytes=hw.inter_node_chunk_bytes,
        nvls_efficiency=(nccl.nvls_efficiency(hw.nccl.arch, hw.nccl.channels)
                         if hw.nccl is not None and hw.nccl.nvls else 1.0),
        a2a_call_s=_us(hw.nccl.a2a_call_us if hw.nccl is not None else None),
        a2a_peer_s=_us(hw.nccl.a2a_peer_us if hw.nccl is not None else None),
    )


def _us(value: float | None) -> float | None:
    return None if value is None else value * 1e-6
