"""The tables and keys a hardware profile may hold, each with its type and bounds
(profiles/schema.py `Field`): what `scape profiles check` checks a file against. The
dataclasses they are read into are profiles/hardware.py's."""

from __future__ import annotations

from profiles.schema import Field

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
    # dense FP4 (NVFP4/MXFP4 GEMMs on Blackwell): recorded with its source; no step prices it yet
    "peak_fp4_tflops": Field(float, gt=0, le=1e6, required=False, least=1e-6),
    "source": SOURCE,
}


NODE_FIELDS = {
    "gpus_per_node": Field(int, ge=1, le=1024),
    # GPUs that share one NVLink fabric, when it spans several nodes (a GB200 NVL72 rack: 72
    # GPUs in 18 trays of 4); absent: the node's own GPUs (DESIGN section 10)
    "nvlink_domain_gpus": Field(int, ge=1, le=1 << 16, required=False),
    "source": SOURCE,
}


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
    # bytes pass at once (simulator/network/collective.py); measured netbed profiles only
    "burst_bytes": Field(float, ge=0, le=1e12, required=False),
    "source": SOURCE,
}


# How NCCL moves bytes between nodes (DESIGN section 9). Without this table the [nic] numbers
# are what the transport reaches (InfiniBand verbs or RoCE at the NIC's efficiency).
# tcpx: Google's GPUDirect-TCPX and -TCPXO net plugins (GPU memory straight to the NIC, over
# TCP; TCPXO offloads it to the NIC); which protocols they run is their env's, [nccl] proto
# cxi: HPE Slingshot-11's Cassini NICs, reached by NCCL through aws-ofi-nccl and libfabric's cxi
# provider (RDMA with GPUDirect, as efa)
TRANSPORTS = ("ib-verbs", "roce", "efa", "socket", "tcpx", "cxi")


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


# NCCL as this machine runs it (simulator/network/nccl.py): which algorithms and protocols its
# tuner may pick and the channels its graph search finds; without this table the simulator runs
# every collective as the Simple protocol with the algorithm fastest in its own model.
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
    # GPUDirect RDMA between the GPUs and the NICs (NCCL's typeInter <= PXN): without it NCCL
    # stages through host memory and turns LL128 off on every communicator spanning nodes
    # (tuning.cc's LL128 rule); absent: on, as on DGX-class nodes
    "gdr": Field(bool, required=False),
    # one process launching a call on several GPUs (nccl-tests -g N): true where the call's
    # GPU time starts once the process has launched it on every GPU but the first, so the
    # launches add to it; absent or false: the launching thread runs ahead of the GPUs and
    # back-to-back calls take the slower of the two. Read off a system's -g N logs
    # (scape calibrate nccl-tests fits it); nothing in a training step (one process per GPU)
    "launch_adds": Field(bool, required=False),
    # NCCL before 2.22.3 sized an all-gather or reduce-scatter call by one rank's share in its
    # tuner (src/misc/argcheck.cc: nBytes = count x type size, count being sendcount or
    # recvcount; 2.22.3's ncclFuncMaxSendRecvCount multiplies it by nRanks), so it priced their
    # bandwidth nRanks times too cheap and kept low-latency protocols to larger calls; true
    # where the cluster's NCCL is older than that
    "rank_share_sizes": Field(bool, required=False),
    # an all-to-all across nodes (grouped send/recv, NCCL's p2p channels serving up to 8 peers
    # each at once): its latency is a2a_call_us + a2a_peer_us x the peers off a rank's node,
    # fitted on alltoall_perf logs (bench/alltoall_latency_fit.py); absent: P - 1 network
    # steps one after another. Both or neither
    "a2a_call_us": Field(float, ge=0, le=1e5, required=False),
    "a2a_peer_us": Field(float, ge=0, le=1e4, required=False),
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
    # the host CPU's time for one torch.nn.Linear forward (BF16, 8192 tokens, 2048 -> 2048;
    # NVIDIA/TransformerEngine issue #2053's benchmark): scales the host time a kernel traced
    # on another host (simulator/step/host.py); absent: [nccl] launch_us a kernel
    "host_linear_us": Field(float, gt=0, le=1e5, required=False, least=1e-6),
    # the share of the dispatch and combine the model's expert-parallel overlap would hide
    # behind another micro-batch's compute that Megatron-Core's overlap does hide here, fitted
    # on published A/B pairs (bench/moe_overlap_fit.py); absent: all of it
    "ep_overlap_share": Field(float, ge=0, le=1, required=False),
    "source": SOURCE,
}


# what a [compute] table needs beyond its required keys (profiles/hardware_rules.py), said
# where the table is missing
COMPUTE_NEEDS = ("and interference, or nccl_ctas with [gpu] sms; and mfu, or a [roofline] "
                 "table instead")


# Forward and backward from shapes (simulator/step/roofline.py); without this table a profile's
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


# as the planner's --price-per-gpu-hour (simulator/planning/planner.py MAX_PRICE): far above
# any rent
# What one GPU's memory holds besides a step's tensors (simulator/memory/peak.py): the bytes
# the driver reports (nvidia-smi memory.total, MiB; an "80 GB" H100 reports 81,559 MiB), the bytes
# outside PyTorch's caching allocator (CUDA context, library workspaces, NCCL's buffers), and
# the allocator's slack over what it has allocated at the peak (reserved / allocated - 1)
MEMORY_FIELDS = {
    "device_MiB": Field(float, gt=0, le=1e9, least=1e-6),
    # outside PyTorch's allocator: its parts (the NCCL buffers counted per communicator the
    # step's layout uses: simulator/memory/peak.py nccl_communicators), or one lump that does
    # not follow the layout (context_GiB: how profiles said it before the parts)
    "cuda_context_GiB": Field(float, required=False, ge=0, le=1e6),
    "workspace_GiB": Field(float, required=False, ge=0, le=1e6),
    "nccl_communicator_GiB": Field(float, required=False, ge=0, le=1e6),
    "context_GiB": Field(float, required=False, ge=0, le=1e6),
    "fragmentation": Field(float, ge=0, le=1),
    "source": SOURCE,
}
PRICE_FIELDS = {
    "usd_per_gpu_hour": Field(float, gt=0, le=1e6, least=1e-6),  # on-demand list price
    # the other tiers `plan --price-tier` takes: a reserved (committed) price and a spot one,
    # with how often spot capacity is taken back (per node and day: the failure model's
    # interruptions); absent: the tier is not priced for this hardware
    "reserved_usd_per_gpu_hour": Field(float, gt=0, le=1e6, least=1e-6, required=False),
    "spot_usd_per_gpu_hour": Field(float, gt=0, le=1e6, least=1e-6, required=False),
    "spot_interruptions_per_node_day": Field(float, ge=0, le=1e3, required=False),
    "date": Field(str, nonempty=True, required=False),  # when the prices were read
    "source": SOURCE,
}

# what the hardware draws (simulator/run/energy.py): one GPU at its board limit (computing) and
# waiting (communication, bubbles, restarts), and a node's other parts (CPUs, memory, NICs,
# fans); hardware_rules.py checks that waiting draws less than computing
POWER_FIELDS = {
    "gpu_max_W": Field(float, gt=0, le=1e4, least=1e-6),
    "gpu_wait_W": Field(float, ge=0, le=1e4),
    "node_other_W": Field(float, ge=0, le=1e6),
    "source": SOURCE,
}


# the cluster's own failure rate, where one was published for it (simulator/run/goodput.py):
# unexpected job interruptions per GPU and day; a plan on this profile uses it unless the user
# types --failures-per-gpu-day (simulator/run/defaults.py holds the studies' median for the rest)
FAILURES_FIELDS = {
    "failures_per_gpu_day": Field(float, gt=0, le=1.0),
    "source": SOURCE,
}


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
    # what the nccl-tests logs of `scape calibrate nccl-tests` measured (the rows fitted): the
    # ops, the GPU and node counts of their runs (comma-separated), the sizes; `scape
    # collective` says where a request goes beyond them
    "logs_ops": Field(str, required=False, nonempty=True),
    "logs_gpus": Field(str, required=False, nonempty=True),
    "logs_nodes": Field(str, required=False, nonempty=True),
    "logs_min_bytes": Field(int, required=False, ge=0),
    "logs_max_bytes": Field(int, required=False, ge=0),
    # the GPUs each host of the logs ran, where the link fit (one tier, a node per rank) was
    # fitted on hosts of several: a layout inside a node then runs over the fitted link
    "logs_gpus_per_host": Field(int, required=False, ge=1),
    **{key: Field(str, required=False) for key in (
        "network", "network_date", "network_host", "network_device", "network_torch",
        "network_nprocs", "network_refit", "network_gpu_sharing", "device", "compute_torch",
        "compute_date", "compute_cuda", "compute_nccl", "compute_driver", "compute_gpu_sharing",
        "kernel_authors_step", "kernels_note", "driver", "cuda", "torch", "nccl", "python",
        "date", "host", "command",
        # the fitted constants' bootstrap intervals, for people (calibration/fit_intervals.py)
        "fit_intervals")},
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
