"""What each layer of a model holds: its parameter tensors, with mixture-of-experts layers and
multi-head latent attention (DESIGN section 10). profiles/models.py reads the files; this module
says, layer by layer, which tensors a layer has, so that the parameter count, the tensors a
per-tensor scheme reduces, the FLOPs and the memory all come from one inventory.

Tensor order and fusion follow Megatron-Core: QKV fused in one weight and gate and up fused in
one (megatron/core/transformer/attention.py SelfAttention, mlp.py MLP); multi-head latent
attention as MLASelfAttention (megatron/core/transformer/multi_latent_attention.py: the query and
key/value down- and up-projections, their norms, the output projection); a MoE layer as MoELayer
(megatron/core/transformer/moe/moe_layer.py: a router weight of n_experts x h, the routed experts
each an MLP, the shared expert an MLP of its own width).
"""

from __future__ import annotations

from dataclasses import dataclass

from profiles.schema import Field

MLPS = ("swiglu", "gelu", "relu2")  # gated (gate, up, down) or not (in, out)
FAMILY_MLP = {"gpt": "gelu", "llama": "swiglu"}

MOE_FIELDS = {
    "n_experts": Field(int, ge=1, le=1 << 16),
    "top_k": Field(int, ge=1, le=1 << 16),
    "d_ff_expert": Field(int, ge=1, le=1 << 23),
    "n_shared_experts": Field(int, ge=0, le=1 << 10, required=False),
    "d_ff_shared": Field(int, ge=0, le=1 << 23, required=False),
    "first_dense_layers": Field(int, ge=0, le=100_000, required=False),
    "every": Field(int, ge=1, le=100_000, required=False),
    "groups": Field(int, ge=1, le=1 << 16, required=False),
    "group_topk": Field(int, ge=1, le=1 << 16, required=False),
    "source": Field(str, nonempty=True),
}
MLA_FIELDS = {
    "q_lora_rank": Field(int, ge=0, le=1 << 20),
    "kv_lora_rank": Field(int, ge=1, le=1 << 20),
    "qk_nope_head_dim": Field(int, ge=1, le=1 << 16),
    "qk_rope_head_dim": Field(int, ge=1, le=1 << 16),
    "v_head_dim": Field(int, ge=1, le=1 << 16),
    "source": Field(str, nonempty=True),
}


@dataclass(frozen=True)
class Moe:
    """The routed experts of a model's MoE layers (Megatron-Core's --num-experts,
    --moe-router-topk, --moe-ffn-hidden-size, --moe-shared-expert-intermediate-size,
    --moe-layer-freq)."""

    n_experts: int
    top_k: int
    d_ff_expert: int
    source: str
    n_shared_experts: int | None = None  # None: 0
    d_ff_shared: int | None = None  # None: n_shared_experts x d_ff_expert
    first_dense_layers: int | None = None  # None: 0
    every: int | None = None  # None: 1, every layer after the first dense ones
    # group-limited routing (Megatron-Core --moe-router-num-groups, --moe-router-group-topk;
    # DeepSeek-V3's node-limited routing): a token's experts come from `group_topk` of the
    # `groups` contiguous expert groups. None: any expert
    groups: int | None = None
    group_topk: int | None = None

    @property
    def shared_width(self) -> int:
        """FFN width of the shared expert(s) together."""
        if self.d_ff_shared is not None:
            return self.d_ff_shared
        return (self.n_shared_experts or 0) * self.d_ff_expert

    def is_moe(self, layer: int) -> bool:
        """Whether layer `layer` (0-based) has routed experts: after the leading dense ones,
        every `every`-th (HF's interleave_moe_layer_step counts from 1, as here)."""
        first, every = self.first_dense_layers or 0, self.every or 1
        return layer >= first and (layer - first + 1) % every == 0

    def moe_layers(self, n_layers: int, start: int = 0, stop: int | None = None) -> int:
        """MoE layers among layers start..stop-1 (default: all `n_layers`)."""
        return sum(self.is_moe(i) for i in range(start, n_layers if stop is None else stop))


@dataclass(frozen=True)
class Mla:
    """Multi-head latent attention (DeepSeek-V2 section 2.1, DeepSeek-V3 config.json)."""

    q_lora_rank: int  # 0: queries projected directly from h
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    source: str

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


def mlp_of(family: str, arch) -> str:
    return arch.mlp if arch.mlp is not None else FAMILY_MLP[family]


def mlp_tensors(h: int, f: int, mlp: str) -> list[tuple[int, bool]]:
    """An MLP of width f, fused as Megatron-Core holds it: (gate and up, down) or (in, out)."""
    if f == 0:
        return []
    return [((2 if mlp == "swiglu" else 1) * f * h, False), (f * h, False)]


def attention_tensors(arch, mla: Mla | None) -> list[tuple[int, bool]]:
    """A Llama-family layer's input norm and attention, up to its output projection."""
    h, hd, heads = arch.d_model, arch.head_dim, arch.n_heads
    if mla is not None:
        q = ([(h * heads * mla.qk_head_dim, False)] if mla.q_lora_rank == 0 else
             [(h * mla.q_lora_rank, False), (mla.q_lora_rank, True),
              (mla.q_lora_rank * heads * mla.qk_head_dim, False)])
        kv = [(h * (mla.kv_lora_rank + mla.qk_rope_head_dim), False), (mla.kv_lora_rank, True),
              (mla.kv_lora_rank * heads * (mla.qk_nope_head_dim + mla.v_head_dim), False)]
        return [(h, True), *q, *kv, (heads * mla.v_head_dim * h, False)]
    q, kv = heads * hd, arch.n_kv_heads * hd
    norms = [(hd, True), (hd, True)] if arch.qk_norm else []
    return [(h, True), (h * (q + 2 * kv), False), *norms, (q * h, False)]


def layer_tensors(family: str, arch, moe: Moe | None, mla: Mla | None, layer: int
                  ) -> list[tuple[int, bool]]:
    """(elements, is a norm or bias) of layer `layer`'s tensors that every rank of its
    tensor-parallel group holds a share of: all of a dense layer, and of a MoE layer its
    attention, norms, router and shared expert (the routed experts are `expert_tensors`)."""
    h, f = arch.d_model, arch.d_ff
    if family == "gpt":
        return [(h, True), (h, True), (3 * h * h, False), (3 * h, True), (h * h, False),
                (h, True), (h, True), (h, True), (h * f, False), (f, True),
                (f * h, False), (h, True)]
    mlp = mlp_of(family, arch)
    if moe is not None and moe.is_moe(layer):
        ffn = [(moe.n_experts * h, False), *mlp_tensors(h, moe.shared_width, mlp)]
    else:
        ffn = mlp_tensors(h, f, mlp)
    return [*attention_tensors(arch, mla), (h, True), *ffn]


def expert_tensors(family: str, arch, moe: Moe) -> list[tuple[int, bool]]:
    """One routed expert's tensors (Megatron-Core's grouped experts keep each expert's
    weights as tensors of their own: TEGroupedMLP weight0..weightN-1)."""
    return mlp_tensors(arch.d_model, moe.d_ff_expert, mlp_of(family, arch))


def expert_params(family: str, arch, moe: Moe | None) -> int:
    """Parameters of one routed expert (0 without experts)."""
    return 0 if moe is None else sum(s for s, _ in expert_tensors(family, arch, moe))
