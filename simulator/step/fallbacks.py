"""What the simulator puts in place of a hardware profile's optional tables where a profile
has none (issue 42: a profile without [nccl] or [roofline] fell back to other models, and
`scape profiles check` said only "ok"). One line per absent table, naming the model that
replaces it and the code that holds it; `profiles check` prints them as warnings."""

from __future__ import annotations

from profiles import HardwareProfile
from simulator.memory.peak import DEFAULT_RESERVE
from simulator.network.nccl import ARCH_OF_GPU, DEFAULT_CHANNELS


def absent_tables(hw: HardwareProfile) -> list[str]:
    """A line for each optional table `hw` lacks that changes what the simulator computes or
    accepts: [nccl], [roofline], [memory], [transport], [price]. [reference] (never an
    input) and the tables only `scape calibrate` writes are not said."""
    out = []
    if hw.nccl is None:
        out.append(_no_nccl(hw))
    if hw.roofline is None:
        listed = f"; [model_mfu] for {', '.join(sorted(hw.model_mfu))}" if hw.model_mfu else ""
        out.append(f"no [roofline]: forward and backward are priced from FLOPs at [compute] "
                   f"mfu {hw.compute.mfu:g}{listed} (simulator/step/compute.py pricing), one rate "
                   "for every kernel, not from the model's shapes; --fp8 and --attention "
                   "are refused")
    if hw.memory is None:
        device = hw.gpu.memory_GB * 1e9 / 2**20
        out.append(f"no [memory]: a GPU holds [gpu] memory_GB {hw.gpu.memory_GB:g} GB "
                   f"({device:,.0f} MiB), less {DEFAULT_RESERVE['cuda_context_GiB']:g} GiB of "
                   f"CUDA context, {DEFAULT_RESERVE['workspace_GiB']:g} GiB of library "
                   f"workspaces and {DEFAULT_RESERVE['nccl_communicator_GiB']:g} GiB per NCCL "
                   f"communicator the layout uses, less {DEFAULT_RESERVE['fragmentation']:.0%} "
                   "allocator fragmentation (simulator/memory/peak.py DEFAULT_RESERVE: the shipped "
                   "H100 profiles' terms)")
    if hw.transport is None:
        tuner = " (NCCL's tuner takes the transport as InfiniBand verbs)" if hw.nccl else ""
        out.append(f"no [transport]: inter-node steps run at [nic] efficiency "
                   f"{hw.nic.efficiency:g} of the line rate with [nic] latency_us "
                   f"{hw.nic.latency_us:g} per step, and a call pays no fixed cost of its "
                   f"own{tuner}")
    if hw.price is None:
        out.append("no [price]: `scape plan` needs --price-per-gpu-hour for this hardware")
    return out


def _no_nccl(hw: HardwareProfile) -> str:
    """What decides and prices a collective on a profile without an [nccl] table
    (simulator/network/collective.py calibrated, simulator/network/nccl.py tuner_view)."""
    priced = ("priced by the simulator's own phases on [intra_node] and [nic] (the Simple "
              "protocol, no host launch cost); --proto and --algo nvls/nvls_tree/"
              "collnet_direct are refused")
    if hw.measured and hw.measured.get("network_backend", "gloo") != "nccl":
        return ("no [nccl]: the collectives [collectives.*] measured run as measured; any "
                "other is the algorithm fastest in the simulator's own model, " + priced)
    arch = next((a for key, a in ARCH_OF_GPU if key in hw.gpu.model), None)
    if arch is None:
        return (f"no [nccl]: [gpu] model {hw.gpu.model!r} names no architecture NCCL's tuner "
                "knows (simulator/network/nccl.py ARCH_OF_GPU), so --algo auto takes the algorithm "
                "fastest in the simulator's own model, " + priced)
    return (f"no [nccl]: NCCL's tuner picks each collective's algorithm from a view of this "
            f"profile (simulator/network/nccl.py tuner_view: arch {arch} read off [gpu] model, "
            f"NICs at their line rate, {DEFAULT_CHANNELS} channels, no NVLS or CollNet), " + priced)
