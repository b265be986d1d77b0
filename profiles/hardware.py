"""Hardware profiles: GPUs, the intra-node tier, NICs and the fat tree (DESIGN sections 6, 8).

The keys each table may hold are profiles/hardware_schema.py's; a measured profile's
calibrated tables are read by profiles/measured_tables.py."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from profiles.hardware_rules import cross_check
from profiles.hardware_schema import (
    COMPUTE_FIELDS,
    COMPUTE_NEEDS,
    FABRIC_FIELDS,
    FAILURES_FIELDS,
    GPU_FIELDS,
    INTRA_FIELDS,
    MEASURED_ONLY,
    MEMORY_FIELDS,
    NCCL_FIELDS,
    NIC_FIELDS,
    NODE_FIELDS,
    POWER_FIELDS,
    PRICE_FIELDS,
    REFERENCE_FIELDS,
    ROOFLINE_FIELDS,
    TOP_FIELDS,
    TRANSPORT_FIELDS,
)
from profiles.measured_tables import LEAST, is_number, parse_measured
from profiles.problems import Problems
from profiles.schema import require_tables, validate_table
from vocabulary.errors import ProfileError
from vocabulary.names import (
    PROTOCOLS,
)


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
    peak_fp4_tflops: float | None = None


@dataclass(frozen=True)
class Node:
    gpus_per_node: int
    source: str
    sources: dict[str, str] = field(default_factory=dict)
    nvlink_domain_gpus: int | None = None  # None: the node's own GPUs

    @property
    def domain_gpus(self) -> int:
        """GPUs of one NVLink fabric: the domain where given, else the node."""
        return self.gpus_per_node if self.nvlink_domain_gpus is None else self.nvlink_domain_gpus


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
    gdr: bool | None = None  # GPUDirect RDMA to the NICs; None: assumed (DGX-class nodes)
    # a process driving several GPUs: the call's GPU time follows the launches on its other
    # GPUs (True) or overlaps them (None/False); fitted on nccl-tests -g N logs
    launch_adds: bool | None = None
    # NCCL before 2.22.3: its tuner sizes all-gather and reduce-scatter by one rank's share
    rank_share_sizes: bool | None = None
    # an all-to-all across nodes: the call's fixed cost and each peer off the node's, in
    # microseconds (simulator/network/collectives/alltoall.py); None: P - 1 steps in turn
    a2a_call_us: float | None = None
    a2a_peer_us: float | None = None
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
    # the host CPU's torch.nn.Linear forward benchmark (us; simulator/step/host.py); None:
    # the host's time a kernel is [nccl] launch_us
    host_linear_us: float | None = None
    # the share of what the model's expert-parallel overlap would hide that Megatron-Core's
    # --overlap-moe-expert-parallel-comm hides on this GPU (simulator/step/moe.py); None: all
    ep_overlap_share: float | None = None
    sources: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Roofline:
    """Constants of simulator/step/roofline.py: forward and backward from the model's shapes."""

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
class Memory:
    """profiles/hardware_schema.py MEMORY_FIELDS: what a GPU's memory holds beside a step."""

    device_MiB: float
    fragmentation: float  # the allocator's reserved bytes over those it handed out, less 1
    source: str
    cuda_context_GiB: float | None = None
    workspace_GiB: float | None = None  # cuBLAS and Transformer Engine workspaces
    nccl_communicator_GiB: float | None = None  # each NCCL communicator's buffers
    context_GiB: float | None = None  # all of the above in one lump, whatever the layout
    sources: dict[str, str] = field(default_factory=dict)

    def outside_GiB(self, communicators: int) -> float:
        """GiB a GPU holds outside PyTorch's allocator with `communicators` NCCL
        communicators in use (simulator/memory/peak.py nccl_communicators)."""
        if self.context_GiB is not None:
            return self.context_GiB
        return (self.cuda_context_GiB + self.workspace_GiB
                + communicators * self.nccl_communicator_GiB)

    def reserved_bytes(self, communicators: int) -> float:
        """Bytes PyTorch's allocator may reserve: the device's, less what lives outside it."""
        return self.device_MiB * 2**20 - self.outside_GiB(communicators) * 2**30

    def usable_bytes(self, communicators: int) -> float:
        """Bytes PyTorch's allocator may hand out at the peak: what it may reserve, less its
        own slack over what it hands out."""
        return self.reserved_bytes(communicators) / (1 + self.fragmentation)


# each price tier `plan --price-tier` takes, and the key of [price] that holds it
PRICE_TIER_KEYS = {"on-demand": "usd_per_gpu_hour", "reserved": "reserved_usd_per_gpu_hour",
                   "spot": "spot_usd_per_gpu_hour"}
# what spot also needs: how often its capacity is taken back
SPOT_RATE_KEY = "spot_interruptions_per_node_day"


@dataclass(frozen=True)
class Price:
    usd_per_gpu_hour: float  # on-demand list price
    source: str
    reserved_usd_per_gpu_hour: float | None = None
    spot_usd_per_gpu_hour: float | None = None
    spot_interruptions_per_node_day: float | None = None
    date: str | None = None
    sources: dict[str, str] = field(default_factory=dict)

    def of(self, tier: str) -> float | None:
        """The price of a tier (on-demand, reserved, spot), or None where not given."""
        return getattr(self, PRICE_TIER_KEYS[tier])

    def lacks(self, tier: str) -> tuple[str, ...]:
        """The [price] keys pricing a tier needs that this table does not give: the tier's
        price, and for spot how often capacity is taken back."""
        keys = (PRICE_TIER_KEYS[tier], *((SPOT_RATE_KEY,) if tier == "spot" else ()))
        return tuple(k for k in keys if getattr(self, k) is None)


@dataclass(frozen=True)
class Power:
    """What the hardware draws (simulator/run/energy.py): one GPU at its board limit while it
    computes and while it waits (communication, pipeline bubbles, restarts), and the rest of a
    node (CPUs, memory, NICs, fans) beside its GPUs."""

    gpu_max_W: float
    gpu_wait_W: float
    node_other_W: float
    source: str
    sources: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Failures:
    """The cluster's own rate of unexpected job interruptions per GPU and day, where one was
    published (simulator/run/goodput.py; the studies' median elsewhere)."""

    failures_per_gpu_day: float
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
    memory: Memory | None = None  # None: simulator/memory/peak.py DEFAULT_RESERVE
    power: Power | None = None  # None: no energy figures (simulator/run/energy.py)
    failures: Failures | None = None  # None: the studies' median (simulator/run/defaults.py)

    def mfu_for(self, model: str) -> float | None:
        """The MFU this profile gives for `model` (measured or fitted for it, else its
        [compute] mfu); None where forward and backward come from shapes ([roofline])."""
        return self.model_mfu.get(model, self.compute.mfu)

    @property
    def gpus_per_node(self) -> int:
        return self.node.gpus_per_node

    @property
    def arch(self) -> str | None:
        """The GPU's architecture as [nccl] arch says it (hopper, blackwell, ...); None where
        the profile has no [nccl] table."""
        return self.nccl.arch if self.nccl is not None else None

    @property
    def inter_node_Bps(self) -> float:
        """Effective bytes/s of one NIC through the transport."""
        eff = self.transport.efficiency if self.transport else self.nic.efficiency
        return self.nic.bw_Gbps * 1e9 / 8 * eff

    @property
    def inter_node_latency_s(self) -> float:
        # the phases' per-step latency: without message_us, which NCCL-tuned calls pay on the
        # network steps of their critical path (simulator/network/nccl.py); all-to-all charges
        # this per message it issues, and a message's time overlaps the others' there
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
        if self.transport is None or ranks <= self.node.domain_gpus:
            return 0.0
        return self.transport.call_us * 1e-6


# each table: the dataclass it is read into and its keys; the first six are required
TABLES = {
    "gpu": (Gpu, GPU_FIELDS), "node": (Node, NODE_FIELDS),
    "intra_node": (IntraNode, INTRA_FIELDS), "nic": (Nic, NIC_FIELDS),
    "fabric": (Fabric, FABRIC_FIELDS), "compute": (Compute, COMPUTE_FIELDS),
    "reference": (Reference, REFERENCE_FIELDS), "price": (Price, PRICE_FIELDS),
    "transport": (Transport, TRANSPORT_FIELDS), "nccl": (Nccl, NCCL_FIELDS),
    "roofline": (Roofline, ROOFLINE_FIELDS), "memory": (Memory, MEMORY_FIELDS),
    "power": (Power, POWER_FIELDS), "failures": (Failures, FAILURES_FIELDS),
}
REQUIRED = ("gpu", "node", "intra_node", "nic", "fabric", "compute")
OPTIONAL = ("reference", "price", "transport", "nccl", "model_mfu", "roofline", "memory",
            "power", "failures", *MEASURED_ONLY)


def parse_hardware(path: Path | str, doc: dict[str, Any]) -> HardwareProfile:
    """Validate a parsed TOML document and build a `HardwareProfile`. Every error of the file
    is found before any is raised (profiles/problems.py), in one `ProfileError`."""
    problems = Problems(path)
    alias = require_tables(path, doc, required=set(REQUIRED), optional=set(OPTIONAL),
                           problems=problems, fields_of={t: f for t, (_, f) in TABLES.items()},
                           needs={"compute": COMPUTE_NEEDS})
    top = {k: v for k, v in doc.items() if not isinstance(v, dict) and k not in TABLES
           and k not in OPTIONAL}  # a table's name given a value is said by require_tables
    top_values, _ = validate_table(path, "", top, TOP_FIELDS, problems)
    built: dict[str, Any] = {}
    for table, (cls, fields) in TABLES.items():
        data = doc.get(alias.get(table, table))
        if not isinstance(data, dict):
            continue  # absent, or not a table: said by require_tables
        before = len(problems)
        values, sources = validate_table(path, table, data, fields, problems,
                                         shown=alias.get(table))
        if len(problems) > before or table in alias:
            problems.bad.add(table)  # the checks across tables leave it alone
        else:
            built[table] = cls(**values, sources=sources)
    model_mfu: dict[str, float] = {}
    with problems.gather("model_mfu"):
        if problems.sound("model_mfu"):
            model_mfu = _model_mfu(path, doc.get("model_mfu"))
    measured: dict[str, Any] = {}
    with problems.gather(*MEASURED_ONLY):
        measured = parse_measured(path, {k: v for k, v in doc.items()
                                         if k not in problems.bad})
    if problems.sound("gpu", "compute"):
        with problems.gather("compute"):
            built["compute"] = _with_interference(path, built["compute"], built["gpu"])
    cross_check(path, built, measured, problems)
    problems.raise_any()
    return HardwareProfile(
        name=top_values["name"], description=top_values["description"],
        gpu=built["gpu"], node=built["node"], intra_node=built["intra_node"], nic=built["nic"],
        fabric=built["fabric"], compute=built["compute"], reference=built.get("reference"),
        path=str(path), price=built.get("price"), transport=built.get("transport"),
        nccl=built.get("nccl"), model_mfu=model_mfu, roofline=built.get("roofline"),
        memory=built.get("memory"), power=built.get("power"),
        failures=built.get("failures"), **measured,
    )


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
        if not (is_number(value) and LEAST <= value <= 1):
            raise ProfileError(f"{path}: [model_mfu] {name}: must be a number in [{LEAST:g}, 1] "
                               f"(a share of the GPU's peak), got {value!r}")
        out[name] = float(value)
    return out
