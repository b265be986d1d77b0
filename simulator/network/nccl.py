"""NCCL's tuner: which algorithm and protocol NCCL runs a collective with, and what the
protocol costs (issue 18).

NCCL picks, for every call, the (algorithm, protocol) pair its own cost model says is fastest
(NVIDIA/nccl v2.25.1, src/graph/tuning.cc ncclTopoTuneModel / ncclTopoGetAlgoTime and
src/enqueue.cc topoGetAlgoInfo; constants in profiles/external/nccl-tuning.toml). `choose`
evaluates that model; the simulator then runs the chosen algorithm on its own network model,
with NCCL's latency of the call and the protocol's bandwidth (`Protocol`): LL moves
8 data bytes in each 16-byte line (half the bandwidth, capped by llMaxBw), LL128 120 of every
128 (0.92 in NCCL's model), Simple all of it with the largest per-step latency.

The tuner's inputs are the topology's effective rates: per-GPU bandwidth inside the node and
the node's NIC bandwidth (`_graph_bw`: what nChannels x bwIntra or bwInter add up to). NCCL's
graph search finds them per channel from fixed speed lists; taking the totals is this module's
assumption.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from profiles import HardwareProfile, UserError
from vocabulary.names import PROTOCOLS

DATA = Path(__file__).resolve().parents[2] / "profiles" / "external" / "nccl-tuning.toml"
# NCCL's algorithms this simulator builds
TUNED_ALGOS = ("ring", "tree", "nvls", "nvls_tree", "collnet_direct")
# Collectives NCCL's tuner chooses for; all-to-all is point-to-point sends (Simple, no tuning)
TUNED_OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
NVLS_ARITY = 32  # NCCL_MAX_NVLS_ARITY


@lru_cache(maxsize=1)
def constants() -> dict:
    return tomllib.loads(DATA.read_text())


@dataclass(frozen=True)
class Machine:
    """What NCCL's tuner sees of a group: ranks, nodes, bandwidths and capabilities."""

    ranks: int
    nodes: int
    intra_GBps: float  # per GPU, effective, inside the node
    inter_GBps: float  # per GPU share of its node's NICs, effective (0: one node)
    arch: str
    nvls: bool  # the nodes' NVSwitches multicast (NVLink SHARP)
    ll128: bool
    channels: int
    intra_hw: str  # "nvlink" | "pci"
    net_latency_us: float = 0.0  # latencyInter: what the network plugin adds per step
    message_us: float = 0.0  # what a network message costs that the plugin does not report
    nvls_heads: int = 0  # GPUs of a node whose NVLS channels use a NIC (NVLS_TREE)
    collnet: bool = False  # SHARP in the network switches, turned on (NCCL_COLLNET_ENABLE=1)
    protocols: tuple[str, ...] = PROTOCOLS  # NCCL_PROTO as the platform sets it
    switch_nvls: bool = False  # the profile's NVSwitches multicast, whatever this group's size
    rank_share: bool = False  # NCCL before 2.22.3: the tuner sizes AG/RS by one rank's share

    @property
    def ppn(self) -> float:
        return self.ranks / self.nodes


def group_shape(hw: HardwareProfile, ranks: int, nodes: int | None = None
                ) -> tuple[int, int, float]:
    """(nodes, GPUs of the group per node, the group's NICs on a node) of `ranks` GPUs of `hw`
    on `nodes` nodes (default: as few as hold them); a node is an NVLink domain where the
    profile's spans several nodes (its NICs those of its nodes)."""
    nodes = math.ceil(ranks / hw.node.domain_gpus) if nodes is None else nodes
    g = max(1, ranks // nodes)
    return nodes, g, hw.nic.nics_per_node * g / hw.node.gpus_per_node


def machine(hw: HardwareProfile, ranks: int, nodes: int | None = None) -> Machine | None:
    """The tuner's view of `ranks` GPUs of `hw` on `nodes` nodes (default: as few as hold
    them); None when the profile does not describe NCCL (no [nccl] table: measured gloo
    profiles, or profiles not yet given one)."""
    if hw.nccl is None:
        return None
    nodes, g, nics = group_shape(hw, ranks, nodes)
    inter = hw.inter_node_Bps * nics / g / 1e9 if nodes > 1 else 0.0
    transport = hw.transport.kind if hw.transport else "ib-verbs"
    nvlink = hw.intra_node.kind == "nvlink"
    # LL128 (tuning.cc, NCCL_PROTO default): on when the GPUs talk over NVLink and the NICs are
    # reached by GPUDirect RDMA (typeInter <= PXN); a socket transport stages through the host,
    # and so does a node without GDR ([nccl] gdr = false) on communicators spanning nodes
    return Machine(ranks=ranks, nodes=nodes, intra_GBps=hw.intra_node.effective_Bps / 1e9,
                   inter_GBps=inter, arch=hw.nccl.arch,
                   nvls=hw.nccl.nvls and nvlink and g > 2,
                   ll128=((nvlink or g == 1) and transport != "socket"
                          and (nodes == 1 or hw.nccl.gdr is not False)),
                   channels=hw.nccl.channels, intra_hw="nvlink" if nvlink else "pci",
                   net_latency_us=hw.nccl.net_latency_us or 0.0,
                   message_us=hw.inter_node_message_us,
                   nvls_heads=max(1, min(g, round(nics))),
                   collnet=bool(hw.nccl.collnet) and nvlink, protocols=hw.nccl.protocols,
                   switch_nvls=hw.nccl.nvls and nvlink,
                   rank_share=bool(hw.nccl.rank_share_sizes))


# a GPU's architecture as NCCL's tuner indexes its tables (by compute capability), read off
# the profile's GPU model where the profile has no [nccl] table
ARCH_OF_GPU = (("V100", "volta"), ("A100", "ampere"), ("A10", "ampere"), ("L40", "ampere"),
               ("H100", "hopper"), ("H200", "hopper"), ("GH200", "hopper"),
               ("Hopper", "hopper"), ("B200", "blackwell"), ("B100", "blackwell"),
               ("Blackwell", "blackwell"))
# channels of a ring or tree when the profile does not say: NCCL's graph search finds one per
# NIC path and ncclTopoPostset duplicates them (src/graph/connect.cc; two of 24 GB/s on a
# 400 Gb/s single-NIC node, docs/research/nccl-socket-choice.md); an assumption. The SCAPE
# authors' 73.7 MB and 2 GB all-reduces take a ring with 1 or 2 (tests/test_nccl.py); their
# 20.5 MB ones on 32 nodes take a tree with 2 and a ring with 1, which moves three held-out
# rows of `validate --external` (profiles/external/late-constants.md)
DEFAULT_CHANNELS = 2


def tuner_view(hw: HardwareProfile, ranks: int, nodes: int | None = None) -> Machine | None:
    """What NCCL's tuner sees of `ranks` GPUs of `hw`, for choosing the algorithm only: the
    [nccl] table's machine where the profile has one; else one built from the profile's
    links as NCCL's topology reads them: each NIC at its line rate (the IB plugin reports the
    port's rate and the socket plugin the interface's /sys/class/net speed, not what a
    transport then delivers through it), one GPU per node reaching its NIC directly, LL128
    off over sockets and PCIe, no NVLS or CollNet. None where NCCL does not run the
    collectives (a measured profile of another backend) or the GPU's architecture is not
    known. The call is then priced by the simulator's own phases on the profile's links and
    transport (simulator/network/collective.py `calibrated`): the choice is NCCL's, the time the
    model's."""
    if hw.nccl is not None:
        return machine(hw, ranks, nodes)
    if hw.measured and hw.measured.get("network_backend", "gloo") != "nccl":
        return None
    arch = next((a for key, a in ARCH_OF_GPU if key in hw.gpu.model), None)
    if arch is None:
        return None
    nodes, g, nics = group_shape(hw, ranks, nodes)
    inter = hw.nic.bw_Gbps / 8 * nics / g if nodes > 1 else 0.0
    nvlink = hw.intra_node.kind == "nvlink"
    # one GPU per node: its ring leaves through the NIC, the NIC's rate is the graph's
    intra = hw.intra_node.bw_GBps if g > 1 else max(hw.intra_node.bw_GBps, inter * g)
    # LL128 (NCCL 2.28 tuning.cc, NCCL_LL128_C2C=1 by default): on where the GPUs talk over
    # NVLink and reach the NIC within PXN on compute capability 9.0 and up; a Grace Hopper
    # node's GPU reaches its NIC over C2C (P2C, below PXN) whatever the transport, so LL128 is
    # on over sockets there (NVIDIA/nccl PR #2053 states the P2C path and LL128 on GH200);
    # NCCL 2.19 (PHB there) kept it off, and then a 64-node all-reduce of 74 MB would run a
    # tree (docs/research/nccl-socket-choice.md)
    return Machine(ranks=ranks, nodes=nodes, intra_GBps=intra, inter_GBps=inter, arch=arch,
                   nvls=False, ll128=nvlink or g == 1, channels=DEFAULT_CHANNELS,
                   intra_hw="nvlink" if nvlink else "pci")


def nvls_tree_chunk(size: float, m: Machine) -> int:
    """The chunk NVLS_TREE moves per step for a call of `size` bytes (enqueue.cc
    calcCollChunking, run per channel on its share of the call)."""
    c = constants()["nvls_tree_pipeline"]
    per_channel = size / c["channels"]
    ops = m.nvls_heads  # concurrentOps = nChannels (1 per call) x nHeads
    chunk = min(c["chunk_bytes"], c["chunk_bytes_4_nodes"] if m.nodes >= 4 else c["chunk_bytes"])
    for multiple, smaller in c["shrink"]:
        if per_channel < multiple * ops * chunk and chunk > smaller:
            chunk = smaller
    return chunk


def nvls_tree_fill(size: float, m: Machine) -> float:
    """The pipeline fill and drain of NVLS_TREE as a fraction of its bandwidth time. A call
    moves in waves of one chunk per (channel, head); each chunk crosses 2 log2(nodes) network
    hops (up the tree between nodes and down, the hop count of NCCL's own NVLS_TREE latency),
    and the pipeline holds size / wave waves, so filling it costs 2 log2(nodes) waves of the
    bandwidth time: a large share at the middle sizes where a pipeline holds 1-16 waves.
    Constants from NCCL's source; the hop count is the tuner's (docs/research/
    nccl-nvls-tree-collnet.md: it was picked between 2 and 3 per level after the B1 rows of
    profiles/external/public-collectives.csv had been looked at)."""
    if m.nodes < 2:
        return 0.0
    wave = constants()["nvls_tree_pipeline"]["channels"] * m.nvls_heads * nvls_tree_chunk(
        size, m)
    hops = 2 * math.ceil(math.log2(m.nodes))
    return hops * min(size, wave) / size


def _steps(op: str, ranks: int) -> int:
    return {"all_reduce": 2 * (ranks - 1), "broadcast": ranks}.get(op, ranks - 1)


def available(op: str, algo: str, proto: str, m: Machine) -> bool:
    """Whether NCCL would consider (algo, proto) for `op` on `m` (enqueue.cc
    updateCollCostTable, tuning.cc enable rules)."""
    if proto not in m.protocols or (proto == "ll128" and not m.ll128):
        return False
    if algo == "ring":
        return op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
    if algo == "tree":
        return op == "all_reduce"
    if algo in ("nvls", "nvls_tree") and m.channels < 2:  # NCCL skips NVLS graphs of 1 channel
        return False
    # NVLS all-gather and reduce-scatter hold at most NCCL_MAX_NVLS_ARITY GPUs of a node
    # (device.h, 32); all-reduce runs on any number (enqueue.cc updateCollCostTable: "func !=
    # ncclFuncAllReduce && localRanks > NCCL_MAX_NVLS_ARITY"; docs/research/nccl-tuning.md)
    if algo in ("nvls", "nvls_tree") and op != "all_reduce" and m.ppn > NVLS_ARITY:
        return False
    if algo == "nvls":  # Simple only; one node (NVLS across nodes needs CollNet)
        return (m.nvls and proto == "simple" and m.nodes == 1
                and op in ("all_reduce", "all_gather", "reduce_scatter"))
    if algo == "nvls_tree":  # NVLS inside each node, a tree between nodes
        return m.nvls and proto == "simple" and m.nodes > 1 and op == "all_reduce"
    if algo == "collnet_direct":  # all-to-all inside the node, SHARP between nodes
        return (m.collnet and proto == "simple" and m.nodes > 1 and op == "all_reduce"
                and m.ppn <= constants()["collnet_direct"]["max_local_ranks"])
    return False


def _col(m: Machine) -> int:
    return min(m.nodes, 3) - 1


def nvls_efficiency(arch: str, channels: int) -> float:
    """The fraction of the NVLink rate NVLS reaches: nvlsEfficiency x (channels - 1) /
    channels (the 2.28 tuner's model)."""
    c = constants()
    return c["caps"]["nvls_efficiency"][c["meta"]["archs"].index(arch)] * (
        channels - 1) / channels


def _graph_bw(algo: str, m: Machine) -> float:
    """What NCCL's tuner multiplies out as `nChannels x bw` for a ring or a tree, GB/s per GPU
    (tuning.cc: bw = bwIntra on up to 2 nodes, else bwInter). Its graph search (search.cc
    ncclTopoCompute) gives a ring across nodes one speed inside and between nodes (it lowers
    bwIntra and bwInter together), and each channel takes its speed off every link it crosses,
    NICs included, so a ring between nodes is priced at the node's NICs, never more than
    NVLink carries. Only a tree on 2 nodes may raise bwIntra, while it
    stays below twice bwInter ("increase bwIntra for trees (2 nodes or collnet)"): up to twice
    the NICs. Every channel of a node crosses through its own NIC, so the node's NIC total is
    the per-GPU share times GPUs per node."""
    if m.nodes == 1:
        return m.intra_GBps
    nics = m.inter_GBps * m.ppn  # the node's NICs: nChannels x bwInter
    if m.ppn == 1:  # one GPU a node: no link inside it to bound a channel, only the NICs
        return nics
    if algo == "tree" and m.nodes == 2:
        return min(m.intra_GBps, 2 * nics)
    return min(m.intra_GBps, nics)


def busbw(op: str, algo: str, proto: str, m: Machine) -> float:
    """NCCL's bus bandwidth for (algo, proto) in GB/s (ncclTopoTuneModel)."""
    c = constants()
    caps, f = c["caps"], c["factors"]
    a = c["meta"]["archs"].index(m.arch)
    bw = _graph_bw(algo, m)
    if algo in ("nvls", "nvls_tree"):
        eff = nvls_efficiency(m.arch, m.channels)
        intra = m.intra_GBps * eff * (2 if op == "all_reduce" else (m.ppn - 1) / m.ppn)
        if algo == "nvls":
            return intra
        # the tree between nodes runs on the node's NICs (per-node frame, as NCCL's NVLS tree
        # graph counts one head per NIC), twice on two nodes (2.28's model)
        inter = m.inter_GBps * m.ppn * (2 if m.nodes <= 2 else 1)
        return min(intra, inter, m.channels * caps["nvls_tree_per_channel"][a][_col(m)])
    if algo == "collnet_direct":  # the GPU/NIC ratio's serialization, Hopper's 0.85
        cn = c["collnet_direct"]
        factor = m.ppn / m.channels
        factor -= (factor - 1) / 2
        return m.intra_GBps / factor * (cn["hopper_factor"] if a >= 2 else 1.0)
    ll_max = caps["ll_max"][a][0] if m.nodes == 1 else caps["ll_max_multi_node_intel"][_col(m)]
    if algo == "ring":
        if proto == "ll":
            return min(ll_max, bw * f["ring_ll"])
        if proto == "ll128":
            cap = m.channels * caps["ring_ll128_per_channel"][a][_col(m)]
            return min(bw * f["ring_ll128"], cap)
        return bw
    # tree
    bw = min(bw * f["tree_simple"], m.channels * caps["tree_per_channel"][a][_col(m)])
    if proto == "ll":
        bw = min(bw / f["tree_ll_div"], ll_max)
    elif proto == "ll128":
        factor = f["tree_ll128_one_node"] if m.nodes == 1 else f["tree_ll128_multi_node"]
        bw = min(bw * factor, m.channels * caps["tree_ll128_per_channel"][a][_col(m)])
    return bw * f["tree_pattern"]


def algbw(op: str, algo: str, proto: str, m: Machine) -> float:
    bus = busbw(op, algo, proto, m)
    if algo in ("ring", "nvls", "nvls_tree"):
        return bus * m.ranks / _steps(op, m.ranks)
    return bus * 0.5


def hop_latency_us(algo: str, proto: str, hw: str) -> float:
    c = constants()
    return c["hw_lat"][hw][algo][PROTOCOLS.index(proto)]


def ring_crossings(op: str, nodes: int, paid: bool = False) -> int:
    """How many of a ring call's latency steps cross the network. NCCL's tuner counts
    nNodes - 1 (all-gather, reduce-scatter, broadcast) and 2(nNodes - 1) (all-reduce)
    (tuning.cc ncclTopoTuneModel, nInterSteps; NCCL 2.12-2.20 counted 2 nNodes for all-reduce,
    docs/research/nccl-tuning.md). The ring itself crosses between nodes nNodes
    times, and the chunk that finishes last walks P - 1 hops: every link but the one into its
    origin, so every crossing when that link is inside a node. Its path crosses nNodes times in
    all-gather and reduce-scatter, and 2 nNodes times in all-reduce (reduce-scatter then
    all-gather of the same chunk). `paid` counts those; a broadcast's chain starts at the
    root, which NCCL's rings place right after a crossing, so it keeps nNodes - 1."""
    if nodes <= 1:
        return 0
    if op == "all_reduce":
        return 2 * nodes if paid else 2 * (nodes - 1)
    if op == "broadcast":
        return nodes - 1
    return nodes if paid else nodes - 1


# Protocols whose ring, once it spans nodes, pays every step at the network step's pace: each
# of its P - 1 (all-reduce 2(P - 1)) steps costs at least what NCCL's tuner charges a step
# that crosses the network (hwLat NET of the algorithm and protocol plus latencyInter), not
# only the nNodes steps that cross it. NCCL's tuner applies the same idea at a smaller scale
# (tuning.cc: a ring spanning nodes takes its intra-node step latency as at least the net
# overhead, `net_overhead_us` below). Found on public logs of one 10-node H100 cluster
# (xxrjun/nccl-tests-cluster, NCCL 2.29.2): its 32-128 MiB all-gathers, on LL128, spend about
# 7.5 us a step with 4 and with 8 GPUs a node (39 and 79 steps), where the sum of NCCL's hop
# latencies gives 1.9 us an NVLink step. LL keeps NCCL's sum (a 4 x 8 H100 run's all-gathers
# below 2 MiB take ~1.5 us a step), and so does Simple: its slices are large enough that a
# step's latency hides under its bytes (with the floor, an A3 Mega 64 MiB all-gather priced
# 32% slow, a 16 GiB ring all-reduce on 8 DGX H100 1.6 ms slower), and NCCL's ring plateau
# factor already covers its large calls. A rule chosen after those errors were seen:
# profiles/external/late-constants.md row 74, docs/research/multinode-nccl-tests.md
# (session 55). What the call pays (`paid`), not what the tuner chooses by.
RING_NET_PACED = ("ll128",)


def latency_us(op: str, algo: str, proto: str, m: Machine, paid: bool = False) -> float:
    """NCCL's latency of one call (ncclTopoTuneModel), without launch costs: what its tuner
    chooses by. `paid`: what the call pays, a ring's network crossings counted along its
    critical path (`ring_crossings`), each network step charged the message cost the
    plugin does not report (`Machine.message_us`), and, on a ring spanning nodes with LL128,
    every step at least the network step's own tuner latency (`RING_NET_PACED`)."""
    c = constants()
    p = PROTOCOLS.index(proto)
    lat = c["base_lat"][algo][p]
    intra = hop_latency_us(algo, proto, m.intra_hw)
    inter = hop_latency_us("tree" if m.ppn == 1 else algo, proto, "net") + m.net_latency_us
    if proto == "simple":  # "flush extra latency"
        inter += m.net_latency_us
    net_step = inter  # the network step as NCCL's tuner prices it (RING_NET_PACED)
    if paid:
        inter += m.message_us
    if algo == "nvls":
        return intra + (inter if m.nodes > 1 else 0.0)
    if algo == "nvls_tree":
        return lat + intra + 2 * int(math.log2(m.nodes)) * inter
    if algo == "collnet_direct":
        local = m.ranks // m.nodes - 1
        arity = c["collnet_direct"]["arity_latency_us"]
        return lat + 2 * (min(1, local) * intra + local * arity) + inter
    if algo == "ring":
        nsteps = _steps(op, m.ranks)
        overhead = c["factors"]["net_overhead_us"] * (3 if proto == "simple" else 1)
        intra = max(intra, overhead) if m.nodes > 1 else intra
        if paid and m.nodes > 1 and proto in RING_NET_PACED:
            intra = max(intra, net_step)
        n_inter = ring_crossings(op, m.nodes, paid)
        return lat + (nsteps - n_inter) * intra + n_inter * inter
    per_node = m.ranks // m.nodes
    return lat + 2 * ((per_node - 1) * intra + int(math.log2(m.nodes)) * inter)


def estimate_us(op: str, algo: str, proto: str, size: float, m: Machine) -> float | None:
    """NCCL's estimated time of one call (ncclTopoGetAlgoTime); None: not available."""
    if not available(op, algo, proto, m):
        return None
    bw = algbw(op, algo, proto, m) * tree_correction(op, algo, proto, size)
    return call_latency_us(op, algo, proto, size, m) + size / (1000 * bw)


def tree_correction(op: str, algo: str, proto: str, size: float,
                    smooth: bool = False) -> float:
    """The share of its bandwidth NCCL's tree all-reduce reaches at `size` bytes
    (tuning.cc treeCorrectionFactor[proto][log2(bytes / 64)], NCCL's own table): below 1 at
    the middle sizes, where a call is too short to keep each channel's chunk pipeline full
    (0.6 for LL128 at 512 KiB-2 MiB); 1 for every other algorithm. NCCL's tuner reads the
    table by whole powers of two; `smooth`: read between them, linearly in log2(size), as
    the time a call takes is (how full a pipeline gets changes with the size, not in steps at
    each power of two; at a power of two both read the same)."""
    if algo != "tree" or op != "all_reduce" or size < 64:
        return 1.0
    table = constants()["tree_correction"][proto]
    x = math.log2(size / 64)
    i = int(x)
    if i >= len(table):
        return 1.0
    here = table[i]
    if not smooth:
        return here
    after = table[i + 1] if i + 1 < len(table) else 1.0
    return here + (x - i) * (after - here)


def call_latency_us(op: str, algo: str, proto: str, size: float, m: Machine,
                    paid: bool = False) -> float:
    """NCCL's latency of one call of `size` bytes (ncclTopoGetAlgoTime's lat * latCount for a
    single call, with the ring plateau factor across nodes); `paid` as in `latency_us`."""
    lat = latency_us(op, algo, proto, m, paid)
    if (algo == "ring" and proto == "simple" and m.nodes > 1 and op == "all_reduce"
            and size / (m.channels * m.ranks) >= 64):
        lat *= constants()["factors"]["ring_plateau"]
    return lat


def choose(op: str, size: float, m: Machine, algos: tuple[str, ...] | None = None,
           protos: tuple[str, ...] | None = None) -> tuple[str, str]:
    """The (algorithm, protocol) NCCL runs `op` of `size` bytes with: the fastest in its cost
    model among the available pairs (algorithm-major order, the first strict minimum), within
    `algos`/`protos` when given (NCCL_ALGO / NCCL_PROTO; a typed NCCL_PROTO replaces the
    platform's own, as it does in the environment)."""
    if protos:
        m = replace(m, protocols=tuple(protos))
    # NCCL before 2.22.3 priced an all-gather or reduce-scatter by one rank's share of it
    # (src/misc/argcheck.cc, nBytes = count x type size): its bandwidth term nRanks times too
    # small, so low-latency protocols held to larger calls; the call itself moves the whole
    tuned = size / m.ranks if m.rank_share and op in ("all_gather", "reduce_scatter") else size
    best, best_t = None, math.inf
    for algo in algos or TUNED_ALGOS:
        for proto in protos or PROTOCOLS:
            t = estimate_us(op, algo, proto, tuned, m)
            if t is not None and t < best_t:
                best, best_t = (algo, proto), t
    if best is None and algos and "collnet_direct" in algos and not m.collnet:
        raise UserError("collnet_direct needs SHARP in the network switches, which NCCL uses "
                        "only with NCCL_COLLNET_ENABLE=1 and the SHARP plugin: set collnet = "
                        "true in the hardware profile's [nccl] table where the cluster does")
    if best is None:
        asked = set(algos or TUNED_ALGOS)
        why = [text for cond, text in (
            (asked & {"nvls", "nvls_tree"} and not m.nvls and m.switch_nvls,
             f"NVLS runs on 3 or more GPUs of a node (here {m.ppn:g})"),
            (asked & {"nvls", "nvls_tree"} and op != "all_reduce" and m.ppn > NVLS_ARITY,
             f"NVLS all-gather and reduce-scatter hold at most {NVLS_ARITY} GPUs of a node "
             f"(NCCL_MAX_NVLS_ARITY; here {m.ppn:g})"),
            (asked & {"nvls", "nvls_tree"} and not m.switch_nvls,
             "NVLS: the profile's [nccl] nvls is false, or its nodes have no NVSwitch"),
            ("nvls" in asked and m.nvls and m.nodes > 1,
             "nvls runs inside one node (across nodes: nvls_tree)"),
            ("nvls_tree" in asked and m.nvls and m.nodes == 1,
             "nvls_tree needs more than one node (inside one: nvls)"),
            (asked & {"nvls", "nvls_tree", "collnet_direct"} and op != "all_reduce",
             "NVLS and CollNet run all_reduce here"),
            (protos and set(protos) - {"simple"} and asked <= {"nvls", "nvls_tree",
                                                              "collnet_direct"},
             "NVLS and CollNet run the Simple protocol only"),
        ) if cond]
        raise UserError(f"NCCL has no algorithm for {op} with algo "
                        f"{'/'.join(algos or TUNED_ALGOS)} and proto "
                        f"{'/'.join(protos or m.protocols)} on {m.ranks} GPUs of {m.nodes} "
                        f"node(s) of this machine{': ' + '; '.join(why) if why else ''}")
    return best


# bytes a protocol puts on the wire per data byte: LL's 16-byte lines carry 8 data bytes and
# 8 of flags, LL128's 128-byte lines 120 data bytes (NCCL's src/include/device.h,
# NCCL_LL_LINES_PER_THREAD / NCCL_LL128_DATAELEMS), Simple moves the data alone
PROTOCOL_WIRE = {"ll": 2.0, "ll128": 128 / 120, "simple": 1.0}


@dataclass(frozen=True)
class Protocol:
    """What running an algorithm with a protocol changes in the simulation: the bytes its
    flows carry per data byte (the protocol's own: LL's flags, LL128's), the call's latency,
    NCCL's own (per-step hwLat of the links each step crosses, plus baseLat; as paid: a ring's
    network steps counted on its critical path, each with the message cost the plugin does not
    report, `latency_us`), which replaces the simulated phases' per-step latency, and the
    bandwidth time the call cannot beat: NCCL's own bandwidth term for the pair (its algbw,
    with LL's llMaxBw and the per-channel caps, and the tree's unfilled pipeline at the
    middle sizes, `tree_correction`). Those limits are the GPU's protocol processing, not bytes
    on a link: as extra bytes on every flow they made a call faster when a link it does not
    wait on got slower (issue 45); as a floor on its time they only ever slow it, and lower
    rates lower NCCL's algbw too."""

    name: str
    wire: float  # bytes on the wire per data byte
    latency_s: float  # once per call, as paid (latency_us)
    min_s: float = 0.0  # the call's bandwidth time at NCCL's algbw for the pair


def protocol(op: str, algo: str, proto: str, size: float, m: Machine) -> Protocol:
    """The simulation's terms for (algo, proto). NVLS moves its switch traffic at
    nvlsEfficiency x (channels - 1) / channels of the NVLink rate (the 2.28 tuner's model): the
    topology's `nvls_efficiency`, which slows NVLS_TREE's NVLink share and not its NICs'."""
    latency = call_latency_us(op, algo, proto, size, m, paid=True) * 1e-6
    if algo in ("nvls", "nvls_tree", "collnet_direct"):
        return Protocol(proto, 1.0, latency)
    rate = algbw(op, algo, proto, m) * 1e9 * tree_correction(op, algo, proto, size,
                                                             smooth=True)  # B/s
    # NCCL's tuner chooses by its own latency; the call pays its critical path (`paid`)
    return Protocol(proto, PROTOCOL_WIRE[proto], latency, size / rate if rate > 0 else 0.0)


@lru_cache(maxsize=4096)
def decide(op: str, size: float, m: Machine, algos: tuple[str, ...] | None = None,
           protos: tuple[str, ...] | None = None) -> tuple[str, str, Protocol]:
    """`choose` and the chosen pair's `protocol`, remembered: a step issues the same call for
    every bucket, and the planner the same step for many candidates."""
    algo, proto = choose(op, size, m, algos, protos)
    return algo, proto, protocol(op, algo, proto, size, m)
