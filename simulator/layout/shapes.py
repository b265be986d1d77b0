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
    attention_flops: float  # forward, FlashAttention's count (causal: half the s x s products)
    attention_core_flops_full: float  # forward, Megatron's count (the whole s x s product)
    memory_bytes: float  # forward; backward moves about twice as many
    memory_kernels: int  # forward elementwise kernels (each pays a launch)
    # attention without FlashAttention (Megatron-LM before it): the score and context products
    # as batched GEMMs over every head, and the fused scale-mask-softmax and dropout over the
    # b x heads x s x s scores (read and write fp16, a mask byte): forward bytes
    unfused_gemms: tuple[Gemm, ...] = ()
    unfused_memory_bytes: float = 0.0


def layer_shapes(model: ModelProfile, micro_batch: int, seq_len: int, tp: int = 1,
                 sequence_parallel: bool = False, cp: int = 1) -> LayerShapes:
    """`cp` context-parallel ranks split the sequence: each holds seq_len / cp tokens of
    every GEMM and elementwise kernel, and its queries attend to all seq_len keys (the
    causal half of it, load-balanced: 1/cp of the whole attention)."""
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
        gemms = (Gemm("qkv", tokens, (h + 2 * kv) // t, h), Gemm("attn out", tokens, h, h // t),
                 Gemm("gate+up", tokens, 2 * f // t, h), Gemm("mlp down", tokens, h, f // t))
        # two RMSNorms (read h, write h), two residual adds (read 2h, write h); rotary on q and
        # k (read, write), SwiGLU (read gate and up, write f)
        replicated = 2 * 2 * h + 2 * 3 * h
        split = 2 * (h + kv) // t + 3 * f // t
        per_token = ACT_BYTES * (replicated / (t if sequence_parallel else 1) + split)
        kernels = 6
    # 4 b s^2 heads head_dim: the score and value products; causal FlashAttention skips the
    # masked half (FlashAttention-2, Dao 2023, section 4.1)
    full = 4.0 * micro_batch * seq_len**2 * heads * a.head_dim / cp
    products = micro_batch * heads
    unfused = (Gemm("scores", seq_len, seq_len, a.head_dim, products),
               Gemm("context", seq_len, a.head_dim, seq_len, products))
    scores = float(products) * seq_len**2
    return LayerShapes(gemms, full / 2, full, per_token * tokens, kernels, unfused,
                       scores * (2 * ACT_BYTES + 2 * ACT_BYTES + 1))


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
