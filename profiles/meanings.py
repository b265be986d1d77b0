"""What each table and key of a profile means, in a reader's words: the comments of the
template `scape profiles new` writes (profiles/template.py). The types and bounds are the
schema's (profiles/hardware_schema.py, profiles/models.py); the units are in the key names
(profiles/schema.py UNITS). A key without a line here is written with its bounds alone."""

from __future__ import annotations

# table -> what it describes, and what stands in for it where an optional one is left out
# (simulator/step/fallbacks.py says the same per profile in `profiles check`)
TABLES = {
    "gpu": "one GPU: its peak rates and memory",
    "node": "one node (server)",
    "intra_node": "the GPU-to-GPU links inside a node, per GPU per direction",
    "nic": "the network cards that leave a node, per NIC per direction",
    "fabric": "the switches between nodes",
    "compute": "how fast the GPU computes a training step's kernels",
    "roofline": ("optional: forward and backward from the model's shapes (simulator/"
                 "step/roofline.py); without it, from FLOPs at [compute] mfu"),
    "memory": ("optional: what one GPU's memory holds beside a step's tensors (simulator/"
               "memory/peak.py); without it, [gpu] memory_GB less the shipped H100 terms"),
    "transport": ("optional: how NCCL moves bytes between nodes; without it the [nic] "
                  "efficiency and latency, and no fixed cost per call"),
    "nccl": ("optional: NCCL as this machine runs it (simulator/network/nccl.py); without it "
             "NCCL's tuner picks from a view of the links and the simulator prices Simple"),
    "price": "optional: the rent; without it `scape plan` needs --price-per-gpu-hour",
    "reference": ("optional: published measurements the model is checked against, never an "
                  "input"),
    "model_mfu": ("optional: model name = the MFU measured or fitted for that model, used "
                  "instead of [compute] mfu or [roofline] for it"),
    "arch": "the model's architecture (Megatron-LM's names)",
    "training": "optional: how the model is usually trained",
}

KEYS = {
    ("", "name"): "the profile's name: must equal the file name (without .toml)",
    ("", "description"): "one line on what the profile describes",
    ("", "family"): "the layer layout the parameter count follows",
    ("gpu", "model"): ("the GPU's name as the vendor writes it (NCCL's tuner reads its "
                       "architecture off it: A100, H100, B200, ...)"),
    ("gpu", "peak_bf16_tflops"): "dense BF16 tensor-core peak (the datasheet's sparse figure / 2)",
    ("gpu", "peak_fp8_tflops"): "dense FP8 tensor-core peak; needed to price --fp8",
    ("gpu", "memory_GB"): "the memory the datasheet states",
    ("gpu", "hbm_bw_GBps"): "memory bandwidth",
    ("gpu", "host_bw_GBps"): "CPU-GPU link per direction (PCIe, NVLink-C2C); needed for offload",
    ("gpu", "sms"): "streaming multiprocessors (with [compute] nccl_ctas: the interference)",
    ("node", "gpus_per_node"): "GPUs in one node",
    ("intra_node", "kind"): "the links inside a node (none: one GPU per node)",
    ("intra_node", "bw_GBps"): "line rate per GPU per direction (NVLink 4: 450, not 900)",
    ("intra_node", "efficiency"): "the share of the line rate a collective reaches",
    ("intra_node", "latency_us"): "per ring step inside the node",
    ("nic", "nics_per_node"): "NICs used for collectives per node (divides or is a multiple "
                              "of gpus_per_node)",
    ("nic", "bw_Gbps"): "line rate per NIC per direction, in bits (NDR: 400)",
    ("nic", "efficiency"): "the share of the line rate a collective reaches",
    ("nic", "latency_us"): "per inter-node ring step through one leaf switch",
    ("nic", "burst_bytes"): "a token-bucket link's bucket (measured netbed profiles only)",
    ("fabric", "topology"): "the only topology modelled",
    ("fabric", "nodes_per_leaf"): "nodes under one leaf switch (per rail where rail-optimized)",
    ("fabric", "oversubscription"): "leaf downlink over uplink bandwidth (1: non-blocking)",
    ("fabric", "switch_latency_us"): "per extra switch when a path crosses the spine",
    ("compute", "mfu"): ("model FLOPs utilization of forward and backward; only without a "
                         "[roofline] table"),
    ("compute", "mem_efficiency"): "the share of hbm_bw_GBps memory-bound kernels reach",
    ("compute", "interference"): ("compute slowdown while a collective runs beside it; or "
                                  "give nccl_ctas (with [gpu] sms) to derive it"),
    ("compute", "nccl_ctas"): "SMs a running NCCL collective holds (one CTA per channel)",
    ("compute", "step_fixed_ms"): "host time every step pays besides the kernels",
    ("compute", "host_linear_us"): ("the host CPU's time for one BF16 torch.nn.Linear forward "
                                    "(TE issue #2053's benchmark): scales the traced host "
                                    "time a kernel of an eager pass"),
    ("roofline", "gemm_peak_fraction"): "the best matmul's share of peak_bf16_tflops",
    ("roofline", "gemm_launch_us"): "fixed time per GEMM kernel",
    ("roofline", "gemm_blend"): "smooth-max exponent joining the compute and memory rooflines",
    ("roofline", "attn_fwd_fraction"): "fused attention forward, share of peak",
    ("roofline", "attn_bwd_fraction"): "fused attention backward, share of peak",
    ("roofline", "attn_flash2_fwd_fraction"): "FlashAttention-2 forward (--attention flash2)",
    ("roofline", "attn_flash2_bwd_fraction"): "FlashAttention-2 backward (give both or neither)",
    ("roofline", "sustained"): "the share of those peaks a whole training step sustains",
    ("roofline", "fp8_gemm_peak_fraction"): "an FP8 GEMM's share of peak_fp8_tflops (--fp8)",
    ("memory", "device_MiB"): "what nvidia-smi reports as memory.total, in MiB",
    ("memory", "cuda_context_GiB"): "the CUDA context, outside PyTorch's allocator",
    ("memory", "workspace_GiB"): "cuBLAS and Transformer Engine workspaces",
    ("memory", "nccl_communicator_GiB"): "NCCL's buffers per communicator the layout uses",
    ("memory", "context_GiB"): "all that in one lump, whatever the layout (or the parts)",
    ("memory", "fragmentation"): "the allocator's reserved over allocated bytes, less 1",
    ("transport", "kind"): "NCCL's network transport",
    ("transport", "efficiency"): "the share of the NIC line rate bulk collectives reach",
    ("transport", "latency_us"): "per inter-node ring step",
    ("transport", "call_us"): "fixed cost of one inter-node collective call",
    ("transport", "chunk_kib"): "store-and-forward unit of a ring step, in KiB (without [nccl])",
    ("transport", "message_us"): "per network message, unseen by NCCL's tuner (needs [nccl])",
    ("nccl", "arch"): "the GPU architecture NCCL's tuning tables are indexed by",
    ("nccl", "nvls"): "NVLink SHARP in the NVSwitches (Hopper and later)",
    ("nccl", "channels"): "channels NCCL's graph search finds",
    ("nccl", "launch_us"): "the host's time to launch one NCCL call on one GPU",
    ("nccl", "net_latency_us"): "latency the network plugin adds per inter-node step",
    ("nccl", "collnet"): "SHARP in the InfiniBand switches (NCCL_COLLNET_ENABLE=1)",
    ("nccl", "proto"): "NCCL_PROTO as the platform sets it, e.g. \"Simple,LL128\"",
    ("nccl", "gdr"): "GPUDirect RDMA to the NICs (false: LL128 off across nodes)",
    ("nccl", "launch_adds"): "a process driving several GPUs: their launches add to the call",
    ("nccl", "rank_share_sizes"): "NCCL before 2.22.3: its tuner sizes all-gather and "
                                  "reduce-scatter by one rank's share",
    ("compute", "ep_overlap_share"): "the share of the hideable expert-parallel dispatch and "
                                     "combine Megatron-Core's overlap hides on this GPU",
    ("nccl", "a2a_call_us"): "an all-to-all across nodes: its fixed cost, microseconds",
    ("nccl", "a2a_peer_us"): "an all-to-all across nodes: its cost per peer off the node, "
                             "microseconds",
    ("price", "usd_per_gpu_hour"): "on-demand price per GPU-hour, US dollars",
    ("reference", "ring_allreduce_busbw_GBps"): "a published ring all-reduce bus bandwidth",
    ("reference", "ring_allreduce_gpus"): "the GPUs of that measurement",
    ("arch", "n_layers"): "transformer layers",
    ("arch", "d_model"): "hidden size",
    ("arch", "n_heads"): "attention (query) heads",
    ("arch", "n_kv_heads"): "key/value heads (grouped-query attention; = n_heads without it)",
    ("arch", "d_ff"): "MLP inner size",
    ("arch", "vocab_size"): "vocabulary (as padded for training)",
    ("arch", "seq_len"): "sequence length of a sample",
    ("arch", "tied_embeddings"): "whether the output head shares the embedding's weights",
    ("arch", "assumed"): "what of the above is assumed rather than published",
    ("arch", "dropout"): "dropout in the layers (absent: the family's default)",
    ("reference", "n_params"): "a published parameter count, checked against [arch]'s",
    ("reference", "tolerance"): "how far the computed count may be from it (a fraction)",
    ("training", "global_batch"): "sequences per optimizer step",
}
