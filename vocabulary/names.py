"""Names shared by every layer: the registries elsewhere are keyed by these.

A registry that builds or prices something (scape/plan/__init__.py SCHEMES, simulator/collectives
ALGORITHMS) lives with its code; the names it may hold live here, so that profiles can check a
file against them without importing the code that uses them (tests/test_architecture.py
asserts that each registry holds exactly these names).
"""

from __future__ import annotations

# --- schemes (DESIGN section 4) ----------------------------------------------------------
# Every communication scheme scape/plan/ builds a plan for.
SCHEME_NAMES = ("dense-ddp", "dense-zero1", "dense-zero2", "dense-zero3", "quantized", "topk",
                "scalecom", "scape", "scape-partitioned")
# Names people use for the paper's baselines: Megatron's distributed optimizer with each update.
ALIASES: dict[str, dict] = {
    "dense-adamw": {"scheme": "dense-zero1", "optimizer": "adamw"},
    "dense-adams": {"scheme": "dense-zero1", "optimizer": "adams"},
}


def scheme_names(sep: str = ", ") -> str:
    """Every name a scheme goes by: the paper's baseline aliases first, then the schemes."""
    return sep.join([*ALIASES, *SCHEME_NAMES])


# the schemes `scape validate` runs by default (cli/validate.py), here so that the command
# declares its options without importing the validation's pandas
VALIDATE_SCHEMES = ("dense-ddp", "dense-adams", "quantized:8", "topk:0.99", "scalecom:0.99",
                    "scape:0.9", "scape:0.99", "scape-partitioned:0.9", "scape-partitioned:0.99")
SHAPES = ("geometric", "linear")  # SCAPE's density warm-up shapes

# --- collectives and their algorithms (DESIGN sections 6 and 9) ---------------------------
COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all")
# The algorithms the simulator builds per collective (simulator/collectives ALGORITHMS), in
# the registry's order: `auto` without NCCL's tuner tries them in this order.
ALGORITHM_NAMES: dict[str, tuple[str, ...]] = {
    "all_reduce": ("ring", "tree", "hierarchical", "nvls", "nvls_tree", "collnet_direct"),
    "reduce_scatter": ("ring", "hierarchical", "via_all_reduce", "nvls"),
    "all_gather": ("ring", "hierarchical", "nvls"),
    "broadcast": ("ring", "flat"),
    "all_to_all": ("pairwise",),
}
AUTO = "auto"  # pick the fastest registered algorithm for each size
# How some backends implement a collective (gloo over TCP, as `scape calibrate` identifies
# it: reduce-scatter as a full all-reduce, a flat broadcast), never a choice `auto` makes.
BACKEND_ONLY: frozenset[tuple[str, str]] = frozenset(
    {("reduce_scatter", "via_all_reduce"), ("broadcast", "flat")})
# Algorithms that need hardware a topology may lack (NVSwitch multicast, SHARP switches):
# `auto` on a profile without NCCL's tuner never picks them; the tuner picks them where the
# profile says so.
NEEDS_HARDWARE: frozenset[tuple[str, str]] = frozenset({("all_reduce", "nvls"),
                                                       ("all_reduce", "nvls_tree"),
                                                       ("all_reduce", "collnet_direct"),
                                                       ("reduce_scatter", "nvls"),
                                                       ("all_gather", "nvls")})


def auto_candidates(op: str) -> list[str]:
    """The algorithms `auto` chooses among for `op`."""
    return [a for a in ALGORITHM_NAMES[op]
            if (op, a) not in BACKEND_ONLY and (op, a) not in NEEDS_HARDWARE]


def software_algorithms(op: str) -> list[str]:
    """The algorithms any backend can run for `op` (what `scape calibrate` fits a measured
    backend against): all but those that need switch hardware."""
    return [a for a in ALGORITHM_NAMES[op] if (op, a) not in NEEDS_HARDWARE]


# NCCL's protocols (src/include/device.h NCCL_PROTO_LL, LL128, SIMPLE), as simulator/network/nccl.py
# prices them, and the word for NCCL's own choice among them
PROTOCOLS = ("ll", "ll128", "simple")
AUTO_PROTO = "auto"

# --- kernels (simulator/step/compute.py prices them) --------------------------------------------
# HBM bytes read + written per element, counted from each kernel's loads and stores
# (fp32 master weights, gradients and optimizer state; bf16 model weights).
KERNEL_BYTES: dict[str, float] = {
    # AdamW: read w, g, m, v (4 x 4 B); write w, m, v (3 x 4 B) and the bf16 copy (2 B).
    "optimizer_adamw": 30.0,
    # AdamS: no second-moment state: read w, g, m; write w, m and the bf16 copy.
    "optimizer_adams": 22.0,
    # Threshold selection: a sampled threshold, then one pass reading |x| and writing a mask
    # byte, one pass compacting: about 3 reads of 4 B.
    "select": 12.0,
    # Pack k values at k int32 indices: read index and value, write value (per packed element).
    "pack": 12.0,
    # Scatter-add gathered (value, index) pairs into a dense fp32 buffer: read 8 B, RMW 8 B.
    "scatter_add": 16.0,
    # Quantize: read fp32 gradient and residual, write the residual and the b-bit code.
    "quantize": 13.0,
    # Dequantize: read the code, write fp32.
    "dequantize": 5.0,
    # Error feedback: read gradient and residual, write residual (and the sent part).
    "error_feedback": 12.0,
    # Scale in place (SCAPE's weight decay over every coordinate): read and write fp32.
    "scale": 8.0,
    # The CPU runtime's copies between model tensors and its flat fp32 buffers: read the
    # gradient, write the flat gradient; read the master, write the parameter (4 x 4 B).
    "flat_copy": 16.0,
    # A Python loop's elementwise work, already counted in bytes (scape/plan/scape_authors.py).
    "reducer_bytes": 1.0,
    # The gradient's global norm for clipping: read each fp32 gradient once (Megatron-Core's
    # get_grad_norm_fp32, one multi_tensor_l2norm over the main grads; PyTorch's
    # clip_grad_norm_, foreach norms); simulator/step/per_step.py
    "grad_norm": 4.0,
    # The clip's scaling: read and write each fp32 gradient (PyTorch's clip_grads_with_norm_
    # multiplies by the clamped coefficient every step, to avoid a host sync)
    "clip_scale": 8.0,
    # Zero a buffer: write each byte once (elements counted in bytes, as reducer_bytes)
    "memset": 1.0,
}
# Kinds not priced by HBM bytes: a host op's launch (CPU-side dispatch, elements = launches),
# a copy over the CPU-GPU link (elements = bytes), the authors' optimizer step as measured.
OTHER_KINDS = ("host_ops", "host_copy", "authors_step")
# the step's own once-a-step work (simulator/step/per_step.py), compute like the update
PER_STEP_KINDS = frozenset({"grad_norm", "clip_scale", "memset"})
COMPRESSION_KINDS = (frozenset(KERNEL_BYTES) | set(OTHER_KINDS)) - {
    "optimizer_adamw", "optimizer_adams", "flat_copy"} - PER_STEP_KINDS

# --- a step's choices (simulate, compare, plan) -------------------------------------------
# activation recomputation: none; Megatron's selective (the attention core, Korthikanti et al.
# 2022), with the norms too (Megatron-Core --recompute-modules core_attn layernorm);
# torchtitan's op-level selective checkpointing (every second matmul recomputed); full
RECOMPUTE = ("none", "selective", "selective-norm", "selective-op", "full")
# the loss: cross-entropy on fp32 logits (Megatron-Core's vocabulary-parallel one, gradient in
# place), PyTorch's eager cross_entropy on fp32 logits (torchtitan, Hugging Face), a fused
# cross-entropy on the bf16 logits, or a chunked fused linear cross-entropy (Liger-Kernel)
LOSSES = ("fp32", "eager", "fused", "chunked")
# what the training stack keeps beside the layer inventory (simulator/memory/activations.py):
# Megatron-LM / NeMo (tensor parallelism saves sharded inputs and gathers them again in the
# backward, pipeline outputs are freed once sent), or torchtitan (DTensor tensor parallelism saves
# the gathered inputs of its linears and computes the loss-parallel cross-entropy; PyTorch's
# pipelining keeps every micro-batch's receive buffers until the next step, and before 2025 its
# outputs too: StepConfig.pp_kept_outputs)
STACKS = ("megatron", "torchtitan", "deepspeed")
# Megatron-Core's MoE token dispatchers (--moe-token-dispatcher-type; simulator/step/moe.py)
MOE_DISPATCHERS = ("alltoall", "allgather", "flex")
# Megatron-LM's --fp8-recipe names (megatron/training/arguments.py), priced in
# simulator/layout/shapes.py FP8_RECIPES
FP8_RECIPE_NAMES = ("tensorwise", "delayed", "mxfp8", "blockwise")
# which GEMMs --fp8 runs in FP8: every linear layer (Transformer Engine under Megatron-Core,
# torchtitan's --quantize.linear), or the routed experts' grouped GEMMs alone (torchtitan's
# --quantize.grouped_mm without --quantize.linear); simulator/step/roofline.py in_fp8
FP8_SCOPES = ("all", "experts")
# the optimizer state's dtype: fp32 moments and master weights; bf16 moments with 16-bit
# master remainders (NeMo's distributed_fused_adam dtype bf16, store_param_remainders); or bf16
# moments beside fp32 master weights (Megatron-Core's precision-aware optimizer,
# --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16, as Megatron-Bridge's DeepSeek-V3 recipes run)
OPTIMIZER_DTYPES = ("fp32", "bf16", "bf16-moments")
# shapes model: the profile's fused attention (cuDNN on H100, FlashAttention-2 on A100),
# FlashAttention-2 itself (stacks before cuDNN's kernel reached PyTorch), or Megatron-LM's
# attention before FlashAttention
ATTENTION = ("flash", "flash2", "unfused")
SCHEDULES = ("1f1b", "interleaved")  # pipeline schedules (simulator/layout/pipeline.py)
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}  # the dtypes gradients and parameters travel in
# the gradients' dtype on the wire where none is given: fp32, as the stacks modelled reduce them
# under bf16 mixed precision. Megatron-LM megatron/training/arguments.py: "bfloat16 requires
# gradient accumulation and all-reduce to be done in fp32" (accumulate_allreduce_grads_in_fp32
# forced on with --bf16 unless --grad-reduce-in-bf16); NeMo's bf16-mixed plugin sets
# grad_reduce_in_fp32; torchtitan's FSDP2 MixedPrecisionPolicy reduce_dtype is its
# mixed_precision_reduce, "float32" by default; the SCAPE authors pass
# --accumulate-allreduce-grads-in-fp32 (reports/reproduce_settings.py)
DEFAULT_GRAD_DTYPE = "fp32"
# parameters gathered by a distributed optimizer / FSDP: in the 16-bit compute dtype
DEFAULT_PARAM_DTYPE = "bf16"
