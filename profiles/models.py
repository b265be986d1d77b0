"""Model profiles: architecture numbers, and the parameter count computed from them."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from profiles.model_layers import (
    MLA_FIELDS,
    MLPS,
    MOE_FIELDS,
    Mla,
    Moe,
    expert_params,
    expert_tensors,
    layer_tensors,
    mlp_of,
)
from profiles.problems import Problems
from profiles.schema import Field, require_tables, validate_table
from vocabulary.errors import ProfileError

# Upper bounds: a hundred times past today's largest models (Llama 3 405B: 126 layers, d 16384,
# d_ff 53248, 128 heads, vocab 128256, context 131072), so that a typo cannot make a
# simulation run for hours or overflow.
ARCH_FIELDS = {
    "n_layers": Field(int, ge=1, le=100_000),
    "d_model": Field(int, ge=1, le=1 << 21),
    "n_heads": Field(int, ge=1, le=1 << 16),
    "n_kv_heads": Field(int, ge=1, le=1 << 16),
    "d_ff": Field(int, ge=1, le=1 << 23),
    "vocab_size": Field(int, ge=2, le=1 << 27),
    "seq_len": Field(int, ge=1, le=1 << 24),
    "tied_embeddings": Field(bool),
    "source": Field(str, nonempty=True),
    "assumed": Field(str, required=False),
    # dropout in the layers (residual and attention dropout); not given: the family's (GPT
    # and Megatron's GPT defaults 0.1; Llama none)
    "dropout": Field(bool, required=False),
    # a head's width where it is not d_model / n_heads (Qwen3, gpt-oss, Gemma)
    "head_dim": Field(int, ge=1, le=1 << 16, required=False),
    # RMSNorm on each head's queries and keys (Qwen3, OLMo 2): two head_dim vectors a layer
    "qk_norm": Field(bool, required=False),
    # local attention on some layers: each query attends to the last `sliding_window` tokens
    # (itself included), on `sliding_window_share` of the layers (gpt-oss: every other layer,
    # 0.5; Mistral 7B: all, 1.0); both or neither. Changes the attention's work, not parameters
    "sliding_window": Field(int, ge=1, le=1 << 24, required=False),
    "sliding_window_share": Field(float, gt=0, le=1, required=False),
    # the MLP: gated SwiGLU (gate, up, down), or ungated GELU or squared ReLU (Nemotron-4);
    # not given: the family's (profiles/model_layers.py FAMILY_MLP)
    "mlp": Field(str, choices=MLPS, required=False),
    # a LayerNorm on the embedding's output before the first layer (BLOOM's --embed-layernorm,
    # bigscience Megatron-DeepSpeed megatron/mpu/layers.py VocabParallelEmbedding.norm): its
    # input is kept for the backward on the first stage (simulator/memory/activations.py
    # embedding_kept_per_token); its 2 x d_model parameters are not counted
    "embed_layernorm": Field(bool, required=False),
}
REFERENCE_FIELDS = {
    "n_params": Field(int, ge=1),
    "tolerance": Field(float, ge=0, le=0.5, required=False),
    "source": Field(str, nonempty=True),
}
TRAINING_FIELDS = {
    "global_batch": Field(int, ge=1, le=1 << 30),
    "source": Field(str, nonempty=True),
}
# GPT-2 (resid_pdrop, attn_pdrop 0.1) and Megatron-LM's GPT defaults (--hidden-dropout and
# --attention-dropout 0.1); Llama trains without dropout (meta-llama/llama model.py has none)
FAMILY_DROPOUT = {"gpt": True, "llama": False}
TOP_FIELDS = {
    "name": Field(str, nonempty=True),
    "description": Field(str, nonempty=True),
    "family": Field(str, choices=("gpt", "llama")),
}


@dataclass(frozen=True)
class Arch:
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    vocab_size: int
    seq_len: int
    tied_embeddings: bool
    source: str
    assumed: str | None
    dropout: bool | None = None  # None: not given, the family's (FAMILY_DROPOUT)
    head_width: int | None = None  # [arch] head_dim; None: d_model / n_heads
    qk_norm: bool | None = None  # None: none
    sliding_window: int | None = None  # None: every layer attends to the whole sequence
    sliding_window_share: float | None = None  # the layers that attend through the window
    mlp: str | None = None  # None: the family's
    embed_layernorm: bool | None = None  # None: none

    def attention_share(self, seq_len: int) -> float:
        """The causal attention's work at `seq_len` over the whole sequence's, a mean layer:
        a query at position i attends to min(i, w) keys, so a windowed layer does
        s w - w (w - 1) / 2 of the full s (s + 1) / 2 score products (w >= s: all of them)."""
        w, s = self.sliding_window, seq_len
        if w is None or w >= s:
            return 1.0
        local = (s * w - w * (w - 1) / 2) / (s * (s + 1) / 2)
        return 1 - self.sliding_window_share * (1 - local)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads if self.head_width is None else self.head_width

    @property
    def q_width(self) -> int:
        """Width of the queries (and of the attention output): heads x head width."""
        return self.n_heads * self.head_dim

    def splits_over(self, tp: int) -> bool:
        """Whether `tp` tensor-parallel ranks can split the attention: Megatron gives each
        rank whole query heads and whole key/value groups."""
        return self.n_heads % tp == 0 and self.n_kv_heads % tp == 0


@dataclass(frozen=True)
class ModelProfile:
    name: str
    description: str
    family: str
    arch: Arch
    reference_params: int | None
    reference_tolerance: float
    reference_source: str | None
    path: str
    global_batch: int | None = None  # sequences per step in the model's usual training
    global_batch_source: str | None = None
    moe: Moe | None = None  # routed experts ([moe]); None: a dense model
    mla: Mla | None = None  # multi-head latent attention ([mla]); None: grouped-query

    def _layer(self, i: int) -> list[tuple[int, bool]]:
        return layer_tensors(self.family, self.arch, self.moe, self.mla, i)

    @cached_property
    def expert_params(self) -> int:
        """Parameters of one routed expert (0 without experts)."""
        return expert_params(self.family, self.arch, self.moe)

    @property
    def attn_head_dim(self) -> float:
        """The width of one head's score and value products, averaged (latent attention's
        query-key heads are wider than its value heads)."""
        if self.mla is None:
            return self.arch.head_dim
        return (self.mla.qk_head_dim + self.mla.v_head_dim) / 2

    @cached_property
    def moe_layers(self) -> int:
        """Layers with routed experts."""
        return 0 if self.moe is None else self.moe.moe_layers(self.arch.n_layers)

    @property
    def moe_share(self) -> float:
        """The share of the layers that have routed experts (0 for a dense model)."""
        return self.moe_layers / self.arch.n_layers

    @property
    def gated_mlp(self) -> bool:
        """Whether the MLPs (and the experts) are gated: SwiGLU's gate and up."""
        return mlp_of(self.family, self.arch) == "swiglu"

    @property
    def dropout(self) -> bool:
        """Whether the layers keep dropout masks: the profile's [arch] dropout, else the
        family's."""
        given = self.arch.dropout
        return FAMILY_DROPOUT[self.family] if given is None else given

    @cached_property
    def n_params(self) -> int:
        return count_params(self.family, self.arch, self.moe, self.mla)

    @cached_property  # the layer inventory is walked once a model
    def layer_params(self) -> float:
        """Parameters of one transformer layer, routed experts included; a mean over the
        layers where they differ (a MoE model's dense and MoE layers)."""
        return _mean_layer(self.family, self.arch, self.moe, self.mla)

    @cached_property
    def expert_layer_params(self) -> float:
        """Routed-expert parameters of a mean layer (0 for a dense model): what expert
        parallelism shards instead of tensor parallelism."""
        return self.moe_layers * self.moe.n_experts * self.expert_params / self.arch.n_layers \
            if self.moe else 0.0

    @cached_property
    def active_layer_params(self) -> float:
        """Parameters a token's forward touches in a mean layer: all of a dense layer; of a MoE
        layer its attention, router, shared expert and top-k routed experts."""
        if self.moe is None:
            return self.layer_params
        return (self.layer_params - self.expert_layer_params
                + self.moe_layers * self.moe.top_k * self.expert_params / self.arch.n_layers)

    @cached_property
    def active_params(self) -> float:
        """Parameters one token's forward touches (the embedding counted once)."""
        return self.n_params - self.arch.n_layers * (self.layer_params
                                                     - self.active_layer_params)

    def tensors(self) -> list[tuple[int, bool]]:
        """(elements, is a norm or bias) of each parameter tensor, in Megatron-Core's order
        (embedding, the layers, final norm, output head), fused as Megatron-Core fuses them:
        QKV in one weight, gate and up projections in one. Sizes sum to `n_params`; per-tensor
        schemes (the SCAPE authors' per-layer top-k, which sends norms and biases dense) need
        them."""
        a = self.arch
        h = a.d_model
        final = [(h, True), (h, True)] if self.family == "gpt" else [(h, True)]
        out = [] if a.tied_embeddings else [(a.vocab_size * h, False)]
        return [*self._front(), *self._layers(a.n_layers), *final, *out]

    def _front(self) -> list[tuple[int, bool]]:
        """The embedding, and a GPT's learned positions."""
        a = self.arch
        positions = [(a.seq_len * a.d_model, False)] if self.family == "gpt" else []
        return [(a.vocab_size * a.d_model, False), *positions]

    def _layers(self, layers: int) -> list[tuple[int, bool]]:
        if self.moe is None:  # every layer alike
            return self._layer(0) * layers
        return [t for i in range(layers) for t in self._layer(i)]

    def stage_expert_tensors(self, layers: int) -> list[tuple[int, bool]]:
        """The routed experts' tensors of the first `layers` layers, every expert of each MoE
        layer (an expert-parallel rank holds 1/EP of them)."""
        if self.moe is None:
            return []
        one = expert_tensors(self.family, self.arch, self.moe)
        return one * (self.moe.n_experts * self.moe.moe_layers(self.arch.n_layers, 0, layers))

    def stage_tensors(self, stages: int, layers: int | None = None) -> list[tuple[int, bool]]:
        """The tensors of the first of `stages` pipeline stages: the embedding (and learned
        positions) and its `layers` layers (default: n_layers / stages, rounded up). The first
        stage is the one whose gradients a step waits for last (it ends the backward)."""
        if stages == 1:
            return self.tensors()
        if layers is None:
            layers = -(-self.arch.n_layers // stages)
        return [*self._front(), *self._layers(layers)]


def _mean_layer(family: str, a: Arch, moe: Moe | None, mla: Mla | None) -> float:
    """Parameters of a mean layer, routed experts included (exact, an int, for a model whose
    layers are alike)."""
    if family == "gpt":
        return _gpt_layer(a)
    if moe is None:
        return sum(s for s, _ in layer_tensors(family, a, None, mla, 0))
    total = sum(s for i in range(a.n_layers) for s, _ in layer_tensors(family, a, moe, mla, i))
    total += moe.moe_layers(a.n_layers) * moe.n_experts * expert_params(family, a, moe)
    return total / a.n_layers


def _gpt_layer(a: Arch) -> int:
    h, f = a.d_model, a.d_ff
    norms = 2 * 2 * h  # two LayerNorms, weight and bias
    attn = h * 3 * h + 3 * h + h * h + h  # fused QKV and output projection, with biases
    mlp = h * f + f + f * h + h  # GELU MLP with biases
    return norms + attn + mlp


def count_params(family: str, a: Arch, moe: Moe | None = None, mla: Mla | None = None
                 ) -> int:
    """Parameter count from the architecture numbers (GPT-2/Megatron or Llama layout; a
    Llama-family model's experts and latent attention, profiles/model_layers.py)."""
    head = 0 if a.tied_embeddings else a.vocab_size * a.d_model
    embed = a.vocab_size * a.d_model
    if family == "gpt":
        positions = a.seq_len * a.d_model  # learned position embeddings
        final_norm = 2 * a.d_model
        return embed + positions + a.n_layers * _gpt_layer(a) + final_norm + head
    final_norm = a.d_model  # llama: rotary positions carry no parameters
    return embed + round(a.n_layers * _mean_layer(family, a, moe, mla)) + final_norm + head


MODEL_TABLES = {"arch": ARCH_FIELDS, "reference": REFERENCE_FIELDS,
                "training": TRAINING_FIELDS, "moe": MOE_FIELDS, "mla": MLA_FIELDS}


def parse_model(path: Path | str, doc: dict[str, Any]) -> ModelProfile:
    """Validate a parsed TOML document and build a `ModelProfile`. Every error of the file is
    found before any is raised (profiles/problems.py), in one `ProfileError`."""
    problems = Problems(path)
    alias = require_tables(path, doc, required={"arch"},
                           optional={"reference", "training", "moe", "mla"},
                           problems=problems, fields_of=MODEL_TABLES)
    top = {k: v for k, v in doc.items() if not isinstance(v, dict) and k not in MODEL_TABLES}
    top_values, _ = validate_table(path, "", top, TOP_FIELDS, problems)
    family_known = top_values["family"] is not None  # None: absent or in error
    given: dict[str, dict[str, Any]] = {}
    for table, fields in MODEL_TABLES.items():
        data = doc.get(alias.get(table, table))
        if not isinstance(data, dict):
            continue  # absent, or not a table: said by require_tables
        before = len(problems)
        values, _ = validate_table(path, table, data, fields, problems, shown=alias.get(table))
        if len(problems) > before or table in alias:
            problems.bad.add(table)
        else:
            given[table] = values
    arch = None
    if "arch" in given:
        values = dict(given["arch"])  # [arch] head_dim is the field head_width
        head = values.pop("head_dim")
        arch = Arch(**values, head_width=head)
    if arch is not None:
        with problems.gather("arch"):
            _check_heads(path, arch, top_values.get("family"))
    moe = Moe(**given["moe"]) if "moe" in given else None
    mla = Mla(**given["mla"]) if "mla" in given else None
    if family_known:
        with problems.gather("moe"):
            _check_moe(path, top_values["family"], arch, moe, mla)
    ref = given.get("reference")
    training = given.get("training", {"global_batch": None, "source": None})
    if (arch is not None and ref is not None and family_known and problems.sound("arch")
            and problems.sound("moe")):
        with problems.gather():
            _check_count(path, count_params(top_values["family"], arch, moe, mla), ref)
    problems.raise_any()
    return ModelProfile(
        name=top_values["name"],
        description=top_values["description"],
        family=top_values["family"],
        arch=arch,
        reference_params=ref["n_params"] if ref else None,
        reference_tolerance=(ref["tolerance"] if ref and ref["tolerance"] is not None else 0.01),
        reference_source=ref["source"] if ref else None,
        path=str(path),
        global_batch=training["global_batch"],
        global_batch_source=training["source"],
        moe=moe,
        mla=mla,
    )


def _check_moe(path, family: str, arch: Arch | None, moe: Moe | None, mla: Mla | None) -> None:
    """Experts and latent attention are Llama-family layers; a token's top-k must be among the
    experts; the leading dense layers must leave a MoE layer."""
    for table, given in (("moe", moe), ("mla", mla)):
        if given is not None and family != "llama":
            raise ProfileError(f"{path}: [{table}]: a {family} model has no such layers; "
                               "experts and latent attention are read for family 'llama'")
    if moe is None:
        return
    if moe.top_k > moe.n_experts:
        raise ProfileError(f"{path}: [moe] top_k: a token picks at most the {moe.n_experts} "
                           f"experts there are, got {moe.top_k}")
    if arch is not None and moe.moe_layers(arch.n_layers) == 0:
        raise ProfileError(f"{path}: [moe] first_dense_layers / every: no layer of the "
                           f"{arch.n_layers} has experts")
    if (moe.groups is None) != (moe.group_topk is None):
        raise ProfileError(f"{path}: [moe] groups and group_topk: the expert groups and how "
                           "many of them a token's experts come from; give both or neither")
    if moe.groups is not None:
        if moe.n_experts % moe.groups:
            near = sorted((g for g in range(1, moe.n_experts + 1) if moe.n_experts % g == 0),
                          key=lambda g: (abs(g - moe.groups), g))[:2]
            raise ProfileError(f"{path}: [moe] groups: must divide the {moe.n_experts} "
                               f"experts, got {moe.groups} (nearest: "
                               f"{' or '.join(map(str, sorted(near)))})")
        if moe.group_topk > moe.groups:
            raise ProfileError(f"{path}: [moe] group_topk: at most the {moe.groups} groups, "
                               f"got {moe.group_topk}")
        if moe.top_k > moe.group_topk * (moe.n_experts // moe.groups):
            raise ProfileError(f"{path}: [moe] group_topk: {moe.group_topk} groups of "
                               f"{moe.n_experts // moe.groups} experts hold fewer than the "
                               f"top_k {moe.top_k}")


def _check_heads(path, arch: Arch, family: str | None = None) -> None:
    """Megatron's attention needs whole heads per d_model (unless the head width is given) and
    whole query groups per KV head; a llama's rotary embeddings rotate channel pairs, so its
    head width is even (an odd width fails inside `scape train`'s RoPE); a sliding window comes
    with the share of layers that use it."""
    if arch.head_width is None and arch.d_model % arch.n_heads:
        raise ProfileError(
            f"{path}: [arch] n_heads: must divide d_model ({arch.d_model}), got {arch.n_heads}"
        )
    if arch.n_heads % arch.n_kv_heads:
        raise ProfileError(
            f"{path}: [arch] n_kv_heads: must divide n_heads ({arch.n_heads}), "
            f"got {arch.n_kv_heads}"
        )
    if (arch.sliding_window is None) != (arch.sliding_window_share is None):
        raise ProfileError(f"{path}: [arch] sliding_window and sliding_window_share: the window "
                           "and the share of layers that use it; give both or neither")
    if family == "llama" and arch.head_dim % 2:
        near = sorted((h for h in range(1, arch.d_model + 1)
                       if arch.d_model % h == 0 and (arch.d_model // h) % 2 == 0),
                      key=lambda h: (abs(h - arch.n_heads), h))[:2]
        field = "head_dim" if arch.head_width is not None else "n_heads"
        hint = ("an even head_dim" if arch.head_width is not None else
                "n_heads " + " or ".join(_with_groups(h, arch.n_kv_heads) for h in sorted(near))
                if near else "an even width")
        raise ProfileError(
            f"{path}: [arch] {field}: a llama's head width must be even (rotary position "
            f"embeddings rotate pairs of channels), got {arch.head_dim} "
            f"(d_model {arch.d_model} / n_heads {arch.n_heads}); give {hint}")


def _with_groups(n_heads: int, n_kv_heads: int) -> str:
    """A suggested head count, with the KV head count it needs where the file's does not
    divide it (the largest that does, below the file's), so that following the hint does not
    fail on the next rule (issue 58)."""
    if n_heads % n_kv_heads == 0:
        return str(n_heads)
    kv = max(k for k in range(1, min(n_kv_heads, n_heads) + 1) if n_heads % k == 0)
    return f"{n_heads} with n_kv_heads {kv}"


def _check_count(path, n_params: int, ref: dict[str, Any]) -> None:
    """The count computed from [arch] against the published one, within its tolerance."""
    tolerance = ref["tolerance"] if ref["tolerance"] is not None else 0.01
    rel = abs(n_params - ref["n_params"]) / ref["n_params"]
    if rel > tolerance:
        raise ProfileError(
            f"{path}: [reference] n_params: computed {n_params:,} parameters from "
            f"[arch], {rel:.1%} away from the reference {ref['n_params']:,} "
            f"(tolerance {tolerance:.1%})"
        )
