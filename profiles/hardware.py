"""Hardware profiles: GPUs, the intra-node tier, NICs and the fat tree (DESIGN sections 6, 8)."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from profiles.schema import Field, require_tables, validate_table
from vocabulary.errors import ProfileError
from vocabulary.names import (
    ALGORITHM_NAMES,
    KERNEL_BYTES,
    OTHER_KINDS,
    PROTOCOLS,
    software_algorithms,
)

SOURCE = Field(str, nonempty=True)

GPU_FIELDS = {
    "model": Field(str, nonempty=True),
    # upper bounds far above any GPU: a typo (1e300) is refused, not priced as infinitely fast
    "peak_bf16_tflops": Field(float, gt=0, le=1e6, least=1e-6),
    "memory_GB": Field(float, gt=0, le=1e6, least=1e-6),
    "hbm_bw_GBps": Field(float, gt=0, le=1e6, least=1e-6),
    # CPU-GPU link per direction (NVLink-C2C, PCIe; the bound refuses TB/s typos); needed to
    # price CPU offload
    "host_bw_GBps": Field(float, gt=0, le=1e5, required=False, least=1e-6),
    # streaming multiprocessors: what a running NCCL kernel's CTAs take from compute
    "sms": Field(int, ge=1, le=1024, required=False),
    # dense FP8 (Transformer Engine's GEMMs with --fp8); needed to price them
    "peak_fp8_tflops": Field(float, gt=0, le=1e6, required=False, least=1e-6),
    "source": SOURCE,
}
NODE_FIELDS = {"gpus_per_node": Field(int, ge=1, le=1024), "source": SOURCE}
INTRA_FIELDS = {
    "kind": Field(str, choices=("nvlink", "pcie", "none")),
    "bw_GBps": Field(float, ge=0, le=1e6, least=1e-6),
    "efficiency": Field(float, gt=0, le=1, least=1e-6),
    "latency_us": Field(float, ge=0, le=1e5),
    "source": SOURCE,
}
NIC_FIELDS = {
    "nics_per_node": Field(int, ge=1, le=64),
    "bw_Gbps": Field(float, gt=0, le=1e6, least=1e-6),
    "efficiency": Field(float, gt=0, le=1, least=1e-6),
    "latency_us": Field(float, ge=0, le=1e5),
    # a token-bucket link's bucket (the netbed's tbf, scape/netbed.py): each call's first
    # bytes pass at once (simulator/collective.py); measured netbed profiles only
    "burst_bytes": Field(float, ge=0, le=1e12, required=False),
    "source": SOURCE,
}
# How NCCL moves bytes between nodes (DESIGN section 9). Without this table the [nic] numbers
# are what the transport reaches (InfiniBand verbs or RoCE at the NIC's efficiency).
# tcpx: Google's GPUDirect-TCPX and -TCPXO net plugins (GPU memory straight to the NIC, over
# TCP; TCPXO offloads it to the NIC); which protocols they run is their env's, [nccl] proto
TRANSPORTS = ("ib-verbs", "roce", "efa", "socket", "tcpx")
TRANSPORT_FIELDS = {
    "kind": Field(str, choices=TRANSPORTS),
    # of the NIC line rate, for bulk collectives
    "efficiency": Field(float, gt=0, le=1, least=1e-6),
    "latency_us": Field(float, ge=0, le=1e5),  # per inter-node ring step
    "call_us": Field(float, ge=0, le=1e6),  # fixed cost of one inter-node collective call
    # bytes a ring step stores and forwards as one unit through the NIC (NCCL's proxy slice
    # times the ring channels sharing the NIC); absent or 0: bytes stream, no fill per step
    "chunk_kib": Field(float, ge=0, le=1 << 20, required=False),
    # what each network message costs beyond NCCL's own per-step figure for the network (hwLat
    # NET, set on InfiniBand), where the plugin does not report it to NCCL: an NCCL-tuned call
    # pays it at every network step of its critical path, NCCL's tuner does not see it; absent: 0
    "message_us": Field(float, ge=0, le=1e5, required=False),
    "source": SOURCE,
}
# NCCL as this machine runs it (simulator/nccl.py): which algorithms and protocols its tuner may
# pick and the channels its graph search finds; without this table the simulator runs every
# collective as the Simple protocol with the algorithm fastest in its own model.
NCCL_FIELDS = {
    "arch": Field(str, choices=("volta", "ampere", "hopper", "blackwell")),
    "nvls": Field(bool),  # NVLink SHARP in the NVSwitches (NCCL enables it by default)
    "channels": Field(int, ge=1, le=64),  # graph channels the tuner's per-channel caps count
    # the host's time to enqueue and launch one NCCL call on one GPU: calls launched back to
    # back come no faster than one per (this x GPUs the process drives), so a GPU that
    # finishes sooner waits for the next launch; what `scape collective` prices, as
    # nccl-tests measures (its -g N: one process, N GPUs); not applied inside a training
    # step, where the host enqueues ahead of the GPU
    "launch_us": Field(float, ge=0, le=1e4),
    # latency the network plugin adds to every inter-node step (NCCL's latencyInter: 0 for its
    # IB verbs transport, which reports none; Simple pays it twice, tuning.cc)
    "net_latency_us": Field(float, ge=0, le=1e5, required=False),
    # CollNet (SHARP in the IB switches): NCCL runs it only with NCCL_COLLNET_ENABLE=1 and the
    # SHARP plugin, off by default; true where the cluster turns it on
    "collnet": Field(bool, required=False),
    # NCCL_PROTO as the platform's own environment sets it (comma-separated, NCCL's syntax,
    # e.g. "Simple,LL128"); absent: every protocol NCCL enables by itself
    "proto": Field(str, nonempty=True, required=False),
    "source": SOURCE,
}
FABRIC_FIELDS = {
    "topology": Field(str, choices=("fat-tree",)),
    "nodes_per_leaf": Field(int, ge=1, le=1 << 16),
    "oversubscription": Field(float, ge=1, le=1000),  # a fat tree beyond 1000:1 is no fabric
    "switch_latency_us": Field(float, ge=0, le=1e5),
    "source": SOURCE,
}
COMPUTE_FIELDS = {
    # model FLOPs utilization of forward and backward; optional where [roofline] prices them
    "mfu": Field(float, gt=0, le=1, required=False, least=1e-6),
    "mem_efficiency": Field(float, gt=0, le=1, least=1e-6),
    # fractional compute slowdown while a collective runs beside it; absent: derived from the
    # SMs a running collective holds (nccl_ctas, one CTA per NCCL channel) out of [gpu] sms
    "interference": Field(float, ge=0, le=1, required=False),
    "nccl_ctas": Field(int, ge=1, le=256, required=False),
    # host time every step pays besides forward/backward and kernels (timers, clipping,
    # bookkeeping); absent: not modelled
    "step_fixed_ms": Field(float, ge=0, le=1e6, required=False),
    "source": SOURCE,
}
# Forward and backward from shapes (simulator/roofline.py); without this table a profile's
# [compute] mfu prices them from FLOPs alone.
ROOFLINE_FIELDS = {
    # the best matmul's share of peak bf16
    "gemm_peak_fraction": Field(float, gt=0, le=1, least=1e-6),
    "gemm_launch_us": Field(float, ge=0, le=1e4),  # fixed seconds per kernel
    "gemm_blend": Field(float, ge=1, le=16),  # smooth-max exponent of the two rooflines
    # FlashAttention forward, share of peak
    "attn_fwd_fraction": Field(float, gt=0, le=1, least=1e-6),
    "attn_bwd_fraction": Field(float, gt=0, le=1, least=1e-6),
    # FlashAttention-2 itself, where the fractions above are another kernel's (cuDNN's fused
    # attention on H100): the rates of `--attention flash2`, stacks that predate that kernel
    "attn_flash2_fwd_fraction": Field(float, gt=0, le=1, required=False, least=1e-6),
    "attn_flash2_bwd_fraction": Field(float, gt=0, le=1, required=False, least=1e-6),
    # share of those benchmark peaks a whole training step sustains (clocks under sustained
    # load, shapes other than the benchmarks'): applied to GEMMs and attention
    "sustained": Field(float, gt=0, le=1, least=1e-6),
    # an FP8 GEMM's share of [gpu] peak_fp8_tflops: needed, with it, to price --fp8
    "fp8_gemm_peak_fraction": Field(float, gt=0, le=1, required=False, least=1e-6),
    "source": SOURCE,
}
# as the planner's --price-per-gpu-hour (simulator/planner.py MAX_PRICE): far above any rent
PRICE_FIELDS = {"usd_per_gpu_hour": Field(float, gt=0, le=1e6, least=1e-6), "source": SOURCE}
REFERENCE_FIELDS = {
    "ring_allreduce_busbw_GBps": Field(float, gt=0),
    "ring_allreduce_gpus": Field(int, ge=2),
    "source": SOURCE,
}
# Tables only measured profiles carry (profiles/measured.py, `scape calibrate`).
COLLECTIVE_FIELDS = {
    "algo": Field(str, nonempty=True),  # how the backend runs it (a simulator algorithm)
    "efficiency": Field(float, gt=0, le=1, least=1e-6),  # of the tier's fitted bandwidth
    "residual_median_pct": Field(float, ge=0, le=1e6),
    "residual_max_pct": Field(float, ge=0, le=1e6),
}
KERNEL_FIELDS = {
    "fixed_us": Field(float, ge=0, le=1e7),
    "ns_per_element": Field(float, ge=0, le=1e9),
    "residual_pct": Field(float, ge=0, le=1e6),
    # kernels that loop over the model's parameter tensors (calibration/compute.py
    # PER_TENSOR_KINDS): how many the benchmark had, and what one more costs
    "tensors": Field(int, ge=1, required=False),
    "per_tensor_us": Field(float, ge=0, le=1e7, required=False),
}
MEASURED_ONLY = ("measured", "collectives", "kernels", "fwd_bwd", "concurrency", "overlap",
                 "sharing")
# [measured]: provenance `scape calibrate` writes. The keys code reads are typed (validate,
# refit and reproduce act on them); the rest are strings for people. A key outside both is a
# typo of one of them, refused like any unknown key.
MEASURED_FIELDS = {
    "network_netbed": Field(str, required=False, nonempty=True),
    "network_backend": Field(str, required=False, choices=("gloo", "nccl")),
    "network_share_gpu": Field(bool, required=False),
    "network_fit_median_residual_pct": Field(float, required=False, ge=0, le=1e6),
    "compute_model": Field(str, required=False, nonempty=True),
    "compute_micro_batch": Field(int, required=False, ge=1),
    "gpu_profile": Field(str, required=False, nonempty=True),
    **{key: Field(str, required=False) for key in (
        "network", "network_date", "network_host", "network_device", "network_torch",
        "network_nprocs", "network_refit", "network_gpu_sharing", "device", "compute_torch",
        "compute_date", "compute_cuda", "compute_nccl", "compute_driver", "compute_gpu_sharing",
        "kernel_authors_step", "kernels_note", "driver", "cuda", "torch", "nccl", "python",
        "date", "host", "command")},
}
# the keys of the other measured tables (their lists are checked where they are read)
MEASURED_KEYS = {
    "concurrency": ("ranks", "slowdown", "source"),
    "overlap": ("ranks", "async_interference", "source"),
    "fwd_bwd": ("model", "micro_batch", "seq_len", "fwd_s", "bwd_s", "total_s", "flops",
                "source"),
    "sharing": ("ranks", "elements", "extra_us", "extra_mean_us", "source"),
}
TOP_FIELDS = {"name": Field(str, nonempty=True), "description": Field(str, nonempty=True)}


@dataclass(frozen=True)
class Gpu:
    model: str
    peak_bf16_tflops: float  # dense BF16, per GPU
    memory_GB: float
    hbm_bw_GBps: float
    source: str
    sources: dict[str, str] = field(default_factory=dict)
    host_bw_GBps: float | None = None
    sms: int | None = None
    peak_fp8_tflops: float | None = None


@dataclass(frozen=True)
class Node:
    gpus_per_node: int
    source: str
    sources: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class IntraNode:
    """The GPU-to-GPU tier inside a node (NVLink/NVSwitch or PCIe), per GPU per direction."""

    kind: str
    bw_GBps: float  # line rate
    efficiency: float  # fraction of line rate a collective achieves
    latency_us: float  # per ring step
    source: str
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def effective_Bps(self) -> float:
        return self.bw_GBps * 1e9 * self.efficiency


@dataclass(frozen=True)
class Nic:
    nics_per_node: int
    bw_Gbps: float  # line rate per NIC per direction
    efficiency: float
    latency_us: float  # one hop through a single leaf switch
    source: str
    burst_bytes: float | None = None  # a token-bucket link's bucket (the netbed's); None: none
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def effective_Bps(self) -> float:
        return self.bw_Gbps * 1e9 / 8 * self.efficiency


@dataclass(frozen=True)
class Transport:
    """NCCL's inter-node transport: what fraction of the NIC a collective reaches through it,
    its per-step latency, and a fixed cost per collective call."""

    kind: str
    efficiency: float
    latency_us: float
    call_us: float
    source: str
    sources: dict[str, str] = field(default_factory=dict)
    chunk_kib: float | None = None  # store-and-forward unit of a ring step
    message_us: float | None = None  # per network message, unseen by NCCL's tuner


@dataclass(frozen=True)
class Nccl:
    arch: str
    nvls: bool
    channels: int
    launch_us: float
    source: str
    net_latency_us: float | None = None
    collnet: bool | None = None
    proto: str | None = None
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def protocols(self) -> tuple[str, ...]:
        """The protocols NCCL may pick here: NCCL_PROTO's list, lower case (all when unset)."""
        if self.proto is None:
            return PROTOCOLS
        return tuple(p.strip().lower() for p in self.proto.split(","))


@dataclass(frozen=True)
class Fabric:
    topology: str
    nodes_per_leaf: int
    oversubscription: float  # leaf downlink / uplink bandwidth
    switch_latency_us: float  # per extra switch when a path crosses the spine
    source: str
    sources: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Compute:
    """How fast the GPU computes: uncalibrated defaults until `calibrate compute` measures them."""

    mem_efficiency: float  # fraction of HBM bandwidth memory-bound kernels reach
    source: str
    # fractional compute slowdown while communication overlaps it (None in the TOML: derived
    # from nccl_ctas and [gpu] sms when the profile is loaded, see sm_share_interference)
    interference: float | None = None
    nccl_ctas: int | None = None  # SMs a running NCCL collective holds (a CTA per channel)
    mfu: float | None = None  # model FLOPs utilization of forward and backward
    step_fixed_ms: float | None = None
    sources: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Roofline:
    """Constants of simulator/roofline.py: forward and backward from the model's shapes."""

    gemm_peak_fraction: float
    gemm_launch_us: float
    gemm_blend: float
    attn_fwd_fraction: float
    attn_bwd_fraction: float
    sustained: float
    source: str
    attn_flash2_fwd_fraction: float | None = None
    attn_flash2_bwd_fraction: float | None = None
    sources: dict[str, str] = field(default_factory=dict)
    fp8_gemm_peak_fraction: float | None = None


@dataclass(frozen=True)
class Price:
    usd_per_gpu_hour: float  # on-demand list price
    source: str
    sources: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Reference:
    """Published measurements the model is checked against; never used as model inputs."""

    ring_allreduce_busbw_GBps: float | None
    ring_allreduce_gpus: int | None
    source: str
    sources: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class HardwareProfile:
    name: str
    description: str
    gpu: Gpu
    node: Node
    intra_node: IntraNode
    nic: Nic
    fabric: Fabric
    compute: Compute
    reference: Reference | None
    path: str
    price: Price | None = None
    # measured profiles only: how each collective runs, kernel constants, and the slowdown of
    # compute when r ranks share this host (index r - 1), from `scape calibrate`
    collectives: dict[str, dict] = field(default_factory=dict)
    kernels: dict[str, dict] = field(default_factory=dict)
    slowdown: tuple[float, ...] = ()
    measured: dict = field(default_factory=dict)
    # compute slowdown while an async collective is issued but not yet waited for, per ranks
    async_interference: dict[int, float] = field(default_factory=dict)
    # ranks sharing one GPU (calibration/sharing.py): kernel kind -> {ranks: seconds each
    # call of it takes more than alone}
    sharing: dict[str, dict[int, float]] = field(default_factory=dict)
    transport: Transport | None = None
    nccl: Nccl | None = None
    # MFU measured or fitted for particular models (model name -> MFU); others use compute.mfu
    model_mfu: dict[str, float] = field(default_factory=dict)
    roofline: Roofline | None = None

    def mfu_for(self, model: str) -> float | None:
        """The MFU this profile gives for `model` (measured or fitted for it, else its
        [compute] mfu); None where forward and backward come from shapes ([roofline])."""
        return self.model_mfu.get(model, self.compute.mfu)

    @property
    def gpus_per_node(self) -> int:
        return self.node.gpus_per_node

    @property
    def inter_node_Bps(self) -> float:
        """Effective bytes/s of one NIC through the transport."""
        eff = self.transport.efficiency if self.transport else self.nic.efficiency
        return self.nic.bw_Gbps * 1e9 / 8 * eff

    @property
    def inter_node_latency_s(self) -> float:
        # the phases' per-step latency: without message_us, which NCCL-tuned calls pay on the
        # network steps of their critical path (simulator/nccl.py); all-to-all charges this per
        # message it issues, and a message's time overlaps the others' there
        return (self.transport.latency_us if self.transport else self.nic.latency_us) * 1e-6

    @property
    def inter_node_message_us(self) -> float:
        """Microseconds each network message costs beyond NCCL's own per-step figure."""
        if self.transport is None or self.transport.message_us is None:
            return 0.0
        return self.transport.message_us

    @property
    def inter_node_chunk_bytes(self) -> float:
        """Bytes an inter-node ring step forwards as one unit (0: streamed)."""
        if self.transport is None or self.transport.chunk_kib is None:
            return 0.0
        return self.transport.chunk_kib * 1024

    def call_overhead_s(self, ranks: int) -> float:
        """Fixed seconds one collective call over `ranks` GPUs pays to its transport: only
        when the group leaves the node."""
        if self.transport is None or ranks <= self.node.gpus_per_node:
            return 0.0
        return self.transport.call_us * 1e-6


def parse_hardware(path: Path | str, doc: dict[str, Any]) -> HardwareProfile:
    """Validate a parsed TOML document and build a `HardwareProfile`."""
    tables = {"gpu", "node", "intra_node", "nic", "fabric", "compute"}
    optional = {"reference", "price", "transport", "nccl", "model_mfu", "roofline",
                *MEASURED_ONLY}
    require_tables(path, doc, required=tables, optional=optional)
    top = {k: v for k, v in doc.items() if not isinstance(v, dict)}
    top_values, _ = validate_table(path, "", top, TOP_FIELDS)

    def build(cls, table, fields):
        values, sources = validate_table(path, table, doc[table], fields)
        return cls(**values, sources=sources)

    gpu = build(Gpu, "gpu", GPU_FIELDS)
    hw = HardwareProfile(
        name=top_values["name"],
        description=top_values["description"],
        gpu=gpu,
        node=build(Node, "node", NODE_FIELDS),
        intra_node=build(IntraNode, "intra_node", INTRA_FIELDS),
        nic=build(Nic, "nic", NIC_FIELDS),
        fabric=build(Fabric, "fabric", FABRIC_FIELDS),
        compute=_with_interference(path, build(Compute, "compute", COMPUTE_FIELDS), gpu),
        reference=build(Reference, "reference", REFERENCE_FIELDS) if "reference" in doc else None,
        path=str(path),
        price=build(Price, "price", PRICE_FIELDS) if "price" in doc else None,
        transport=(build(Transport, "transport", TRANSPORT_FIELDS) if "transport" in doc
                   else None),
        nccl=build(Nccl, "nccl", NCCL_FIELDS) if "nccl" in doc else None,
        model_mfu=_model_mfu(path, doc.get("model_mfu")),
        roofline=build(Roofline, "roofline", ROOFLINE_FIELDS) if "roofline" in doc else None,
        **_measured_tables(path, doc),
    )
    _cross_check(path, hw)
    return hw


def sm_share_interference(sms: int, ctas: int) -> float:
    """Compute slowdown while a collective runs: NCCL launches one CTA per channel and each
    holds an SM for the whole collective ("reducing the number of channels also reduces the
    number of CUDA blocks used for communication, hence the impact on GPU computing
    resources", NCCL's NCCL_MAX_NCHANNELS documentation), so a compute-bound kernel beside it
    runs on sms - ctas SMs: sms / (sms - ctas) times as long. A first-order figure: wave
    quantization (a GEMM sized to every SM spilling into a second wave) and HBM contention
    can cost more, and are not modelled. Needs ctas < sms."""
    return ctas / (sms - ctas)


def _with_interference(path, compute: Compute, gpu: Gpu) -> Compute:
    """[compute] as given, its interference derived where the profile gives the SMs a
    collective holds instead of a figure."""
    if compute.interference is not None:
        if compute.nccl_ctas is not None:
            raise ProfileError(f"{path}: [compute] give interference or nccl_ctas, not both")
        return compute
    if compute.nccl_ctas is None or gpu.sms is None:
        raise ProfileError(f"{path}: [compute] interference: required unless [compute] "
                           "nccl_ctas and [gpu] sms give the SMs a running collective holds")
    if compute.nccl_ctas >= gpu.sms:
        raise ProfileError(f"{path}: [compute] nccl_ctas {compute.nccl_ctas} must be fewer "
                           f"than the GPU's {gpu.sms} SMs")
    value = sm_share_interference(gpu.sms, compute.nccl_ctas)
    source = (f"derived: nccl_ctas / (sms - nccl_ctas) = {compute.nccl_ctas} / "
              f"({gpu.sms} - {compute.nccl_ctas}) (profiles/hardware.py sm_share_interference)")
    return replace(compute, interference=value,
                   sources={**compute.sources, "interference": source})


def _measured_tables(path, doc: dict[str, Any]) -> dict[str, Any]:
    """The calibrated tables of a measured profile, validated."""
    # what the simulator can price (the names its registries are keyed by)
    known = {"collectives": list(ALGORITHM_NAMES), "kernels": [*KERNEL_BYTES, *OTHER_KINDS]}
    for table, keys in MEASURED_KEYS.items():
        data = doc.get(table, {})
        if not isinstance(data, dict):
            raise ProfileError(f"{path}: [{table}]: expected a table, got {data!r}")
        for key in data:
            if key not in keys and key.removesuffix("_source") not in keys:
                raise ProfileError(f"{path}: [{table}] {key}: unknown key (allowed: "
                                   f"{', '.join(keys)}, each with its _source)")
    out: dict[str, Any] = {"measured": measured_provenance(path, doc)}
    for key, fields in (("collectives", COLLECTIVE_FIELDS), ("kernels", KERNEL_FIELDS)):
        out[key] = {}
        for name, table in doc.get(key, {}).items():
            if name not in known[key]:
                raise ProfileError(f"{path}: [{key}.{name}]: unknown {key[:-1]} (known: "
                                   f"{', '.join(known[key])})")
            if key == "collectives" and isinstance(table, dict) and table.get(
                    "algo") not in software_algorithms(name):
                raise ProfileError(f"{path}: [{key}.{name}] algo: must be one a backend runs "
                                   f"{name} with ({', '.join(software_algorithms(name))}), got "
                                   f"{table.get('algo')!r}")
            curve = {k: table[k] for k in ("sizes", "seconds") if k in table}
            per_rank = {k: table[k] for k in ("ranks", "efficiencies", "overheads_us")
                        if k in table}
            scalars = {k: v for k, v in table.items() if k not in curve and k not in per_rank}
            out[key][name] = {**validate_table(path, f"{key}.{name}", scalars, fields)[0],
                              **_curve(path, f"{key}.{name}", curve)}
            pair = [out[key][name].get(k) for k in ("tensors", "per_tensor_us")]
            if key == "kernels" and (pair[0] is None) != (pair[1] is None):
                raise ProfileError(f"{path}: [{key}.{name}] tensors and per_tensor_us: give "
                                   "both (the benchmark's tensor count and the cost of one "
                                   "more) or neither")
            if per_rank:
                ranks, effs = per_rank.get("ranks"), per_rank.get("efficiencies")
                if not (isinstance(ranks, list) and isinstance(effs, list)
                        and len(ranks) == len(effs) and len(set(ranks)) == len(ranks)
                        and all(_count(r) and r >= 2 for r in ranks)
                        and all(_number(e) and LEAST <= e <= 1 for e in effs)):
                    raise ProfileError(f"{path}: [{key}.{name}] ranks/efficiencies: two lists "
                                       "of equal length, distinct rank counts >= 2, "
                                       f"efficiencies in [{LEAST:g}, 1]")
                out[key][name]["by_ranks"] = dict(zip(ranks, map(float, effs), strict=True))
                over = per_rank.get("overheads_us", [0.0] * len(ranks))
                if not (isinstance(over, list) and len(over) == len(ranks)
                        and all(_number(o) and 0 <= o <= MAX_US for o in over)):
                    raise ProfileError(f"{path}: [{key}.{name}] overheads_us: one number in "
                                       f"[0, {MAX_US:g}] per rank count")
                out[key][name]["overhead_s"] = {r: o * 1e-6 for r, o in zip(ranks, over,
                                                                             strict=True)}
    slow = doc.get("concurrency", {}).get("slowdown", [])
    if not isinstance(slow, list) or not all(_number(x) and LEAST <= x <= 1e6 for x in slow):
        raise ProfileError(f"{path}: [concurrency] slowdown: must be a list of numbers in "
                           f"[{LEAST:g}, 1e6] (1: ranks ran as fast as one alone)")
    out["slowdown"] = tuple(float(x) for x in slow)
    overlap = doc.get("overlap", {})
    ranks, values = overlap.get("ranks", []), overlap.get("async_interference", [])
    if not (isinstance(ranks, list) and isinstance(values, list) and len(ranks) == len(values)
            and all(_count(r) and r >= 2 for r in ranks)
            and all(_number(v) and v >= 0 for v in values)):
        raise ProfileError(f"{path}: [overlap] ranks/async_interference: two lists of equal "
                           "length, rank counts >= 2, values >= 0")
    out["async_interference"] = {int(r): float(v) for r, v in zip(ranks, values, strict=True)}
    out["sharing"] = _sharing(path, doc.get("sharing", {}), known["kernels"])
    return out


def measured_provenance(path, doc: dict[str, Any]) -> dict[str, Any]:
    """A measured profile's [measured] table, checked (MEASURED_FIELDS, and a `kernel_<kind>`
    note per kernel kind `calibrate compute --kinds` timed): only the keys the file has, so
    that a reader's default stands for a key it lacks. Also what `calibrate refit` reads of a
    profile that has its network tables only."""
    fields = {**MEASURED_FIELDS, **{f"kernel_{k}": Field(str, required=False)
                                    for k in (*KERNEL_BYTES, *OTHER_KINDS)}}
    given = doc.get("measured", {})
    values = validate_table(path, "measured", given, fields)[0]
    return {k: v for k, v in values.items() if k in given}


def _sharing(path, table: dict, kinds: list[str]) -> dict[str, dict[int, float]]:
    """[sharing]: ranks = [r, ...] and extra_us = {kind = [us per call at each r]}."""
    if not table:
        return {}
    ranks, extra = table.get("ranks"), table.get("extra_us")
    if not (isinstance(ranks, list) and ranks and len(set(ranks)) == len(ranks)
            and all(_count(r) and r >= 2 for r in ranks)):
        raise ProfileError(f"{path}: [sharing] ranks: a list of distinct rank counts >= 2")
    if not isinstance(extra, dict):
        raise ProfileError(f"{path}: [sharing] extra_us: a table of kernel kinds")
    out = {}
    for kind, values in extra.items():
        if kind not in kinds:
            raise ProfileError(f"{path}: [sharing.extra_us] {kind}: unknown kernel (known: "
                               f"{', '.join(kinds)})")
        if not (isinstance(values, list) and len(values) == len(ranks)
                and all(_number(v) and v >= 0 for v in values)):
            raise ProfileError(f"{path}: [sharing.extra_us] {kind}: one number >= 0 (us) per "
                               "rank count")
        out[kind] = {int(r): v * 1e-6 for r, v in zip(ranks, values, strict=True)}
    return out


# the floor of a measured rate or share, as the scalar fields' `least` (profiles/schema.py),
# and the longest one measured call may take (a per-call cost of seconds is a typo of units)
LEAST = 1e-6
MAX_US = 1e7


def _number(x) -> bool:
    """A finite int or float (TOML booleans are not numbers here)."""
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _count(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _model_mfu(path, table: dict | None) -> dict[str, float]:
    """[model_mfu]: model name = MFU in (0, 1], and a `source`."""
    if table is None:
        return {}
    if not isinstance(table.get("source"), str) or not table["source"]:
        raise ProfileError(f"{path}: [model_mfu] source: missing required key")
    out = {}
    for name, value in table.items():
        if name == "source":
            continue
        if not (_number(value) and LEAST <= value <= 1):
            raise ProfileError(f"{path}: [model_mfu] {name}: must be a number in [{LEAST:g}, 1] "
                               f"(a share of the GPU's peak), got {value!r}")
        out[name] = float(value)
    return out


def _curve(path, table: str, curve: dict) -> dict:
    """A measured curve: `sizes` (increasing) and `seconds`, positive and of equal length."""
    if not curve:
        return {}
    sizes, seconds = curve.get("sizes"), curve.get("seconds")
    ok = (isinstance(sizes, list) and isinstance(seconds, list) and len(sizes) == len(seconds)
          and len(sizes) >= 2 and all(_number(x) and x > 0 for x in sizes)
          and all(_number(x) and LEAST * 1e-6 <= x <= MAX_US * 1e-6 for x in seconds)
          and all(a < b for a, b in itertools.pairwise(sizes)))
    if not ok:
        raise ProfileError(f"{path}: [{table}] sizes/seconds: must be two lists of equal "
                           "length, sizes positive and increasing, seconds in "
                           f"[{LEAST * 1e-6:g}, {MAX_US * 1e-6:g}]")
    return {"sizes": tuple(sizes), "seconds": tuple(seconds)}


def _cross_check(path, hw: HardwareProfile) -> None:
    g, intra, nic = hw.node.gpus_per_node, hw.intra_node, hw.nic
    if hw.compute.mfu is None and hw.roofline is None:
        raise ProfileError(f"{path}: [compute] mfu: required unless the profile has a "
                           "[roofline] table (forward and backward from shapes)")
    if hw.nic.burst_bytes and not hw.collectives:  # it would be read by nothing
        raise ProfileError(f"{path}: [nic] burst_bytes: the token bucket of a netbed link, read "
                           "only with the collectives a netbed profile measured "
                           "([collectives.*], scape calibrate collectives --netbed); remove it")
    if hw.compute.mfu is not None and hw.roofline is not None:  # it would be read by nothing
        raise ProfileError(f"{path}: [compute] mfu: a profile with a [roofline] table prices "
                           "forward and backward from shapes and never reads it; remove one "
                           "(an MFU for particular models goes in [model_mfu], which "
                           "[roofline] leaves in force)")
    r = hw.roofline
    if r is not None and (r.attn_flash2_fwd_fraction is None) != (
            r.attn_flash2_bwd_fraction is None):
        raise ProfileError(f"{path}: [roofline] attn_flash2_fwd_fraction and "
                           "attn_flash2_bwd_fraction: give both or neither")
    if r is not None and r.fp8_gemm_peak_fraction is not None and hw.gpu.peak_fp8_tflops is None:
        raise ProfileError(f"{path}: [roofline] fp8_gemm_peak_fraction: a share of [gpu] "
                           "peak_fp8_tflops, which the profile does not give; give both")
    unknown = [p for p in (hw.nccl.protocols if hw.nccl else ()) if p not in PROTOCOLS]
    if unknown or (hw.nccl and not hw.nccl.protocols):
        raise ProfileError(f"{path}: [nccl] proto: a comma-separated list of LL, LL128 and "
                           f"Simple (NCCL_PROTO), got {hw.nccl.proto!r}")
    if (intra.kind == "none") != (g == 1):
        raise ProfileError(
            f"{path}: [intra_node] kind: 'none' exactly when gpus_per_node = 1 "
            f"(got kind={intra.kind!r}, gpus_per_node={g})"
        )
    if intra.kind != "none" and intra.bw_GBps <= 0:
        raise ProfileError(f"{path}: [intra_node] bw_GBps: must be > 0 for kind {intra.kind!r}")
    n, t = hw.nccl, hw.transport
    if n is not None and n.nvls and (n.arch not in ("hopper", "blackwell")
                                     or intra.kind != "nvlink"):
        raise ProfileError(f"{path}: [nccl] nvls: NVLink SHARP needs NVSwitch nodes of Hopper or "
                           f"later (arch {n.arch!r}, intra_node kind {intra.kind!r}); set it "
                           "false")
    if t is not None and t.message_us is not None and n is None:
        raise ProfileError(f"{path}: [transport] message_us: paid by the calls NCCL's tuner "
                           "prices, so it needs an [nccl] table; this profile has none")
    if t is not None and t.chunk_kib is not None and n is not None:
        raise ProfileError(f"{path}: [transport] chunk_kib: prices the Simple ring of profiles "
                           "without an [nccl] table; NCCL's model prices this one's steps")
    if g % nic.nics_per_node and nic.nics_per_node % g:
        raise ProfileError(
            f"{path}: [nic] nics_per_node: must divide gpus_per_node ({g}) or be a multiple of "
            f"it (several NICs per GPU), got {nic.nics_per_node}"
        )
