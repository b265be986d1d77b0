"""What one transformer layer and the output head run, as shapes: the GEMMs (M x N x K), the
attention core's FLOPs and the bytes the memory-bound kernels move, per micro-batch on one GPU
of a tensor-parallel group (Megatron-LM's split: column-parallel QKV and MLP-in, row-parallel
output and MLP-out, Shoeybi et al. 2019 section 3; vocabulary-parallel logits).

The layouts are the two model families of profiles/models.py: GPT (fused QKV, GELU MLP, biases
fused into the GEMM epilogues, LayerNorm, dropout) and Llama (grouped-query attention, SwiGLU
with gate and up fused, RMSNorm, rotary embeddings, no dropout).
"""

from __future__ import annotations

from dataclasses import dataclass

from profiles import ModelProfile

ACT_BYTES = 2  # bf16 activations


@dataclass(frozen=True)
class Gemm:
    """One forward matrix product: [m x k] @ [k x n]; its backward runs the data gradient
    (m x k x n) and the weight gradient (k x n x m), the same FLOPs each."""

    name: str
    m: int  # tokens
    n: int  # output features on this GPU
    k: int  # reduction: input features on this GPU
    batch: int = 1  # independent products of this shape in one batched call

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * self.batch

    @property
    def bytes(self) -> float:
        """bf16 operands, each read or written once."""
        return 2.0 * self.batch * (self.m * self.k + self.k * self.n + self.m * self.n)

    def backward(self) -> tuple[Gemm, Gemm]:
        return (Gemm(f"{self.name} dgrad", self.m, self.k, self.n, self.batch),
                Gemm(f"{self.name} wgrad", self.k, self.n, self.m, self.batch))


@dataclass(frozen=True)
class LayerShapes:
    """One transformer layer, one micro-batch, one GPU."""

    gemms: tuple[Gemm, ...]
    # forward, FlashAttention's count (causal: half the s x s products; less where layers
    # attend through a sliding window: Arch.attention_share)
    attention_flops: float
    attention_core_flops_full: float  # forward, Megatron's count (the whole s x s product)
    memory_bytes: float  # forward; backward moves about twice as many
    memory_kernels: int  # forward elementwise kernels (each pays a launch)
    # attention without FlashAttention (Megatron-LM before it): the score and context products
    # as batched GEMMs over every head, and the fused scale-mask-softmax and (where the model
    # keeps it, `unfused_passes`) dropout over the b x heads x s x s scores (read and write
    # fp16, a mask byte): forward bytes
    unfused_gemms: tuple[Gemm, ...] = ()
    unfused_memory_bytes: float = 0.0
    # of memory_bytes, a MoE layer's routed experts' activation and its tokens' permutes in
    # and out (forward: read, write)
    moe_act_bytes: float = 0.0
    moe_permute_bytes: float = 0.0


@dataclass(frozen=True)
class Routing:
    """How a MoE layer's tokens reach its experts on one GPU: expert-parallel ranks, each
    expert's tensor-parallel ranks, and the busiest rank's load over the mean."""

    ep: int = 1
    etp: int = 1
    imbalance: float = 1.0


def _attention_gemms(model: ModelProfile, tokens: int, t: int) -> tuple[Gemm, ...]:
    """A Llama-family layer's projections on one tensor-parallel rank: fused QKV and output
    (grouped-query), or multi-head latent attention's down-projections (whole on every rank),
    up-projections (column-parallel) and output (row-parallel), as Megatron-Core's
    MLASelfAttention splits them."""
    a, mla, h = model.arch, model.mla, model.arch.d_model
    if mla is None:
        q, kv = a.q_width, a.n_kv_heads * a.head_dim
        return (Gemm("qkv", tokens, (q + 2 * kv) // t, h), Gemm("attn out", tokens, h, q // t))
    heads = a.n_heads // t
    q = ((Gemm("q", tokens, heads * mla.qk_head_dim, h),) if mla.q_lora_rank == 0 else
         (Gemm("q down", tokens, mla.q_lora_rank, h),
          Gemm("q up", tokens, heads * mla.qk_head_dim, mla.q_lora_rank)))
    return (*q, Gemm("kv down", tokens, mla.kv_lora_rank + mla.qk_rope_head_dim, h),
            Gemm("kv up", tokens, heads * (mla.qk_nope_head_dim + mla.v_head_dim),
                 mla.kv_lora_rank),
            Gemm("attn out", tokens, h, heads * mla.v_head_dim))


def _mlp_gemms(name: str, tokens: int, h: int, f: int, gated: bool, t: int, batch: int = 1
               ) -> tuple[Gemm, ...]:
    if f == 0 or tokens == 0:
        return ()
    return (Gemm(f"{name} in", tokens, (2 if gated else 1) * f // t, h, batch),
            Gemm(f"{name} out", tokens, h, f // t, batch))


def moe_work(model: ModelProfile, tokens: int, t: int, sequence_parallel: bool,
             routing: Routing) -> tuple[tuple[Gemm, ...], float, float]:
    """A MoE layer's FFN on one GPU: (GEMMs, (token, expert) pairs it runs, tokens routed by
    it). The router scores this rank's tokens (sequence-parallel: 1/t of them); the shared
    expert is an MLP split over the tensor-parallel ranks; the routed experts run as one
    grouped GEMM over this rank's n_experts / EP experts, each on the pairs the EP x ETP group
    sends it, at 1/ETP of its width (Megatron-Core's TEGroupedMLP). Pairs are the busiest
    rank's: the mean times `imbalance`."""
    a, moe = model.arch, model.moe
    h = a.d_model
    gated = model.gated_mlp
    routed = tokens / (t if sequence_parallel else 1)  # this rank's tokens at the router
    pairs = routed * routing.etp * moe.top_k * routing.imbalance
    local = moe.n_experts // routing.ep
    per_expert = max(1, round(pairs / local))
    gemms = (Gemm("router", round(routed), moe.n_experts, h),
             *_mlp_gemms("shared", tokens, h, moe.shared_width, gated, t),
             *_mlp_gemms("experts", per_expert, h, moe.d_ff_expert, gated, routing.etp,
                         local))
    return gemms, pairs, routed


# Bytes per element PyTorch's eager kernels move where a fused kernel reads and writes each
# value once (2 + 2 bytes in bf16), counted from the ops each runs:
# - RMSNorm, composite (torchtitan/models/norms.py RMSNorm, as ATen's rms_norm,
#   aten/src/ATen/native/layer_norm.cpp): x.float() (read 2, write 4), pow (4, 4), mean
#   (read 4), add eps and rsqrt (one value a row), x * rsqrt (4, 4), type_as (4, 2), * weight
#   (2, 2): 36 bytes in 8 kernels;
# - rotary embedding (torchtitan's apply_rotary_emb on q and k): .float() (2, 4), the
#   complex multiply by freqs_cis (4, 4), type_as (4, 2): 20 bytes in 3 kernels each;
# - repeat_kv where keys and values have fewer heads than queries: expand then reshape copies
#   each to every query head (read kv, write q wide, 2 bytes each), a kernel each;
# - SwiGLU as F.silu(w1 x) * w3 x: silu (2, 2) then mul (4, 2) over the hidden width: 10
#   bytes a value in 2 kernels where a fused kernel moves 6 in 1.
EAGER_NORM_BYTES, EAGER_NORM_KERNELS = 36, 8
EAGER_ROPE_BYTES, EAGER_ROPE_KERNELS = 20, 3
EAGER_SWIGLU_BYTES, FUSED_SWIGLU_BYTES = 10, 6
FUSED_BYTES = 2 * ACT_BYTES  # read once, write once


def eager_extra(model: ModelProfile, tokens: float, t: int, sequence_parallel: bool,
                moe_layer: bool = False) -> tuple[float, int]:
    """Bytes and kernels one layer's forward adds on one GPU where PyTorch runs it op by op
    (eager mode: torchtitan without torch.compile) over the fused kernels `layer_shapes`
    counts (Megatron-Core's Transformer Engine and Apex kernels, or torch.compile's): its two
    RMSNorms, rotary embedding, GQA key and value copies and, in a dense layer, its SwiGLU
    (a MoE layer's experts are left as fused). A GPT-family layer adds none: nn.LayerNorm and
    GELU are single kernels in eager PyTorch too."""
    if model.family == "gpt":
        return 0.0, 0
    a = model.arch
    q, kv = a.q_width, a.n_kv_heads * a.head_dim
    norm_width = a.d_model / (t if sequence_parallel else 1)
    per_token = (2 * (EAGER_NORM_BYTES - FUSED_BYTES) * norm_width
                 + (EAGER_ROPE_BYTES - FUSED_BYTES) * (q + kv) / t)
    kernels = 2 * (EAGER_NORM_KERNELS - 1) + 2 * EAGER_ROPE_KERNELS - 1
    if kv < q:  # keys and values, each read at kv and written at q wide
        per_token += 2 * ACT_BYTES * (kv + q) / t
        kernels += 2
    if not moe_layer and model.gated_mlp:
        per_token += (EAGER_SWIGLU_BYTES - FUSED_SWIGLU_BYTES) * a.d_ff / t
        kernels += 1
    return per_token * tokens, kernels


def unfused_passes(model: ModelProfile) -> int:
    """The elementwise kernels unfused attention runs over the scores each way: the scaled,
    masked softmax, and dropout where the model keeps it (profiles/models.py dropout)."""
    return 2 if model.dropout else 1


def layer_shapes(model: ModelProfile, micro_batch: int, seq_len: int, tp: int = 1,
                 sequence_parallel: bool = False, cp: int = 1, moe_layer: bool = False,
                 routing: Routing | None = None) -> LayerShapes:
    """`cp` context-parallel ranks split the sequence: each holds seq_len / cp tokens of
    every GEMM and elementwise kernel, and its queries attend to all seq_len keys (the
    causal half of it, load-balanced: 1/cp of the whole attention). `moe_layer`: a layer of
    routed experts (`moe_work`) in place of the dense MLP, routed as `routing` says."""
    a = model.arch
    h, f, t = a.d_model, a.d_ff, tp
    tokens = micro_batch * seq_len // cp
    heads = a.n_heads // t
    if model.family == "gpt":
        gemms = (Gemm("qkv", tokens, 3 * h // t, h), Gemm("attn out", tokens, h, h // t),
                 Gemm("mlp in", tokens, f // t, h), Gemm("mlp out", tokens, h, f // t))
        # two LayerNorms (read h, write h), two residual adds (read 2h, write h), two dropouts
        # (read h, write h and a mask byte), GELU (read f, write f) -- bytes per token
        replicated = 2 * 2 * h + 2 * 3 * h + 2 * 2 * h  # LayerNorm, residual, dropout values
        split = 2 * f // t
        masks = 2 * h  # one byte per element per dropout
        per_token = (ACT_BYTES * replicated + masks) / (t if sequence_parallel else 1) + (
            ACT_BYTES * split)
        kernels = 7
    else:
        kv = a.n_kv_heads * a.head_dim
        gated = model.gated_mlp
        act = 3 if gated else 2  # the activation reads gate and up (or its input), writes f
        attn = _attention_gemms(model, tokens, t)
        extra_bytes, kernels, moe_act, permute = 0.0, 6, 0.0, 0.0
        if moe_layer:
            mlp, pairs, _ = moe_work(model, tokens, t, sequence_parallel, routing or Routing())
            f = model.moe.shared_width
            r = routing or Routing()
            # each pair: permuted in and out (read and write h each way), its activation at
            # 1/ETP of the expert's width
            moe_act = ACT_BYTES * pairs * act * model.moe.d_ff_expert / r.etp
            permute = ACT_BYTES * pairs * 4 * h
            extra_bytes = permute + moe_act
            kernels += 4  # router top-k, permute, the experts' activation, unpermute
        else:
            mlp = _mlp_gemms("mlp", tokens, h, f, gated, t)
        gemms = (*attn, *mlp)
        # two RMSNorms (read h, write h), two residual adds (read 2h, write h); rotary on q and
        # k (read, write), SwiGLU (read gate and up, write f)
        replicated = 2 * 2 * h + 2 * 3 * h
        split = 2 * (a.q_width + kv) // t + act * f // t
        per_token = ACT_BYTES * (replicated / (t if sequence_parallel else 1) + split)
    # 4 b s^2 heads head_dim: the score and value products; causal FlashAttention skips the
    # masked half (FlashAttention-2, Dao 2023, section 4.1)
    hd = model.attn_head_dim
    full = 4.0 * micro_batch * seq_len**2 * heads * hd / cp
    products = micro_batch * heads
    unfused = (Gemm("scores", seq_len, seq_len, round(hd), products),
               Gemm("context", seq_len, round(hd), seq_len, products))
    scores = float(products) * seq_len**2
    extra = 0.0 if model.family == "gpt" else extra_bytes
    # a model with local attention on some layers (gpt-oss: a 128-token window every other
    # layer) does that much less of it: fused kernels skip the blocks the window masks
    causal = full / 2 * a.attention_share(seq_len)
    # unfused: the softmax reads and writes the scores; dropout, where the model keeps it,
    # reads them again and writes its output and a one-byte mask (a model without attention
    # dropout runs none: PyTorch's dropout returns its input at p = 0)
    passes = unfused_passes(model)
    return LayerShapes(gemms, causal, full, per_token * tokens + extra, kernels, unfused,
                       scores * (2 * ACT_BYTES + (passes - 1) * (2 * ACT_BYTES + 1)),
                       *((0.0, 0.0) if model.family == "gpt" else (moe_act, permute)))


# FP8 training casts each FP8 GEMM's activation operand before the product: the input in the
# forward and the output gradient in the backward, each read once in bf16 and written twice in
# 8 bits, a row-wise copy for one product and a column-wise one for the weight gradient
# (NVIDIA/TransformerEngine transformer_engine/pytorch/module/linear.py _Linear.forward:
# `input_quantizer.set_usage(rowwise=True, columnwise=backward_needs_input)`, the backward's
# grad_output_preprocess the same for the output gradient; grouped_linear.py quantizes the
# experts' tokens alike): 2 + 1 + 1 bytes an element, one kernel each; once in 8 bits
# (`fp8_copies`) where one per-tensor copy serves both products. Where a LayerNorm-Linear
# module quantizes its input inside the norm (layernorm_linear.py `with_quantized_norm`: the
# norm writes FP8 in place of bf16) nothing comes on top: Megatron-Core's TE layers do so for
# the fused QKV and the dense MLP's first GEMM, and for MLA's up-projections after their q and
# kv norms, under the delayed recipe (FP8_RECIPES says what the others add); op by op (eager
# PyTorch) every input is cast. Not counted, so a lower bound:
# weights (quantized once a step, cached over micro-batches by is_first_microbatch), MXFP8's
# scale-factor swizzles, current scaling's amax all-reduce over the model-parallel group (one
# float). The router stays 16-bit (Megatron-LM docs/discussions/deepseek-v3-gb200-optimization:
# "SDPA/Embedding/LM Head/Router/Loss/Optimizer, etc., remain at their original high
# precision").
FP8_CAST_BYTES = ACT_BYTES + 1 + 1
NORM_QUANTIZED = ("qkv", "mlp in", "q up", "kv up")
# the recipes whose FP8 tensor has one scale (Transformer Engine's Float8Quantizer and
# Float8CurrentScalingQuantizer): where the GPU's tensor cores take FP8 operands in any layout,
# its data serves the row-wise and the column-wise use, so the cast writes one 8-bit copy, not
# a copy and its transpose (transformer_engine/pytorch/csrc/quantizer.cpp create_tensor:
# `with_transpose = columnwise_usage && !is_non_tn_fp8_gemm_supported`, the same rule in
# Transformer Engine 2.2, bee4649c, extensions/quantizer.cpp `create_transpose`;
# common/transformer_engine.cpp nvte_is_non_tn_fp8_gemm_supported: compute capability 10.x and
# 13.x on, i.e. B200 and GB200, not Hopper). MXFP8 and blockwise scale along one axis, so their
# column-wise copy is quantized apart on every GPU (Float8BlockQuantizer, MXFP8Quantizer).
PER_TENSOR_RECIPES = ("delayed", "tensorwise")
NON_TN_FP8_ARCHS = ("blackwell",)  # [nccl] arch of the profiles with compute capability 10.x


def fp8_copies(arch: str | None, recipe: str) -> int:
    """The 8-bit copies an FP8 cast writes (FP8_CAST_BYTES counts two) on a GPU of `arch`
    (the hardware profile's [nccl] arch) under `recipe` (PER_TENSOR_RECIPES)."""
    return 1 if recipe in PER_TENSOR_RECIPES and arch in NON_TN_FP8_ARCHS else 2


@dataclass(frozen=True)
class Fp8Recipe:
    """What an FP8 recipe adds to each cast (FP8_CAST_BYTES, one kernel), and what it costs
    where a LayerNorm-Linear module quantizes its norm's output (`norm`): "free" (the norm
    writes FP8 itself), "cast" (the norm writes bf16 and finds the amax; one cast kernel reads
    it and writes the two FP8 copies) or "full" (the norm writes bf16; a cast as any other)."""

    extra_bytes: float  # an element, on top of FP8_CAST_BYTES
    extra_kernels: int  # a cast, on top of its own kernel
    norm: str


# By Megatron-LM's --fp8-recipe names (megatron/training/arguments.py: tensorwise, delayed (the
# default), mxfp8, blockwise; Transformer Engine's Float8CurrentScaling, DelayedScaling,
# MXFP8BlockScaling, Float8BlockScaling), read in Transformer Engine's C++ extensions:
# - delayed: the scale comes from the amax history and the cast records the new amax as it
#   goes; the norm quantizes its own output (normalization.cpp: Float8 quantizers FULLY_FUSED);
# - tensorwise (current scaling): "we need to compute amax and scale before quantization"
#   (cast.cpp: nvte_compute_amax, a kernel reading the tensor, then
#   nvte_compute_scale_from_amax, then the cast): one more read of 2 bytes an element and two
#   more kernels; after a norm, the norm finds the amax (FUSED_NORM_AMAX_FP8) and one cast
#   follows;
# - mxfp8: an E8M0 scale byte per 32 values for the row-wise and the column-wise copy; the norm
#   writes bf16 and a cast follows (UNFUSED unless NVTE_NORM_FWD_USE_CUDNN=1, cuDNN's fused
#   MXFP8 norm: not modelled);
# - blockwise (DeepSeek-V3's: 1 x 128 tiles for activations and gradients): an fp32 scale per
#   128 values, each way; the norm unfused.
FP8_RECIPES = {"delayed": Fp8Recipe(0.0, 0, "free"),
               "tensorwise": Fp8Recipe(float(ACT_BYTES), 2, "cast"),
               "mxfp8": Fp8Recipe(2 / 32, 0, "full"),
               "blockwise": Fp8Recipe(2 * 4 / 128, 0, "full")}
DEFAULT_FP8_RECIPE = "delayed"  # Megatron-LM's --fp8-recipe default


def fp8_cast_bytes(recipe: str, copies: int = 2) -> float:
    """Bytes one element's FP8 cast moves under `recipe`: read 16-bit, write a byte an element
    a copy (`copies`: fp8_copies), plus the recipe's own reads and scales (FP8_RECIPES)."""
    return ACT_BYTES + copies + FP8_RECIPES[recipe].extra_bytes


def fp8_casts(gemms: tuple[Gemm, ...], eager: bool = False, recipe: str = DEFAULT_FP8_RECIPE,
              copies: int = 2) -> tuple[float, float, int, int]:
    """(forward bytes, backward bytes, forward kernels, backward kernels) one micro-batch's
    FP8 casts of these GEMMs' operands move on one GPU under `recipe` (FP8_CAST_BYTES, plus
    FP8_RECIPES' share); `copies`: the 8-bit copies each writes (fp8_copies)."""
    r = FP8_RECIPES[recipe]
    cast_bytes = ACT_BYTES + copies  # read 16-bit, write a byte an element a copy
    each, kernels = fp8_cast_bytes(recipe, copies), 1 + r.extra_kernels
    cast = [g for g in gemms if g.name != "router"]
    normed = [] if eager else [g for g in cast if g.name in NORM_QUANTIZED]
    plain = [g for g in cast if g not in normed]
    fwd = each * sum(float(g.m) * g.k * g.batch for g in plain)
    fwd_kernels = kernels * len(plain)
    if r.norm != "free":  # the norm's output cast after it (its amax found there, "cast")
        norm_each = cast_bytes if r.norm == "cast" else each
        fwd += norm_each * sum(float(g.m) * g.k * g.batch for g in normed)
        fwd_kernels += (1 if r.norm == "cast" else kernels) * len(normed)
    return (fwd, each * sum(float(g.m) * g.n * g.batch for g in cast), fwd_kernels,
            kernels * len(cast))


@dataclass(frozen=True)
class HeadShapes:
    """The output layer and its cross-entropy, one micro-batch, one GPU."""

    gemm: Gemm
    memory_bytes: float  # forward: read the bf16 logits, write fp32 (vocabulary-parallel CE)


def head_shapes(model: ModelProfile, micro_batch: int, seq_len: int, tp: int = 1,
                cp: int = 1) -> HeadShapes:
    a = model.arch
    tokens = micro_batch * seq_len // cp  # this context-parallel rank's share
    vocab = a.vocab_size / tp
    return HeadShapes(Gemm("logits", tokens, round(vocab), a.d_model), 6.0 * tokens * vocab)
