"""Model profiles: architecture numbers, and the parameter count computed from them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

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

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

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

    @property
    def dropout(self) -> bool:
        """Whether the layers keep dropout masks: the profile's [arch] dropout, else the
        family's."""
        given = self.arch.dropout
        return FAMILY_DROPOUT[self.family] if given is None else given

    @property
    def n_params(self) -> int:
        return count_params(self.family, self.arch)

    @property
    def layer_params(self) -> int:
        """Parameters of one transformer layer."""
        return LAYER_PARAMS[self.family](self.arch)

    def tensors(self) -> list[tuple[int, bool]]:
        """(elements, is a norm or bias) of each parameter tensor, in Megatron-Core's order
        (embedding, the layers, final norm, output head), fused as Megatron-Core fuses them:
        QKV in one weight, gate and up projections in one. Sizes sum to `n_params`; per-tensor
        schemes (the SCAPE authors' per-layer top-k, which sends norms and biases dense) need
        them."""
        a = self.arch
        h, f = a.d_model, a.d_ff
        if self.family == "gpt":
            layer = [(h, True), (h, True), (3 * h * h, False), (3 * h, True), (h * h, False),
                     (h, True), (h, True), (h, True), (h * f, False), (f, True),
                     (f * h, False), (h, True)]
            head = [(a.seq_len * h, False)]  # learned positions
            final = [(h, True), (h, True)]
        else:
            kv = a.n_kv_heads * a.head_dim
            layer = [(h, True), (h * (h + 2 * kv), False), (h * h, False), (h, True),
                     (2 * f * h, False), (f * h, False)]
            head, final = [], [(h, True)]
        out = [] if a.tied_embeddings else [(a.vocab_size * h, False)]
        return [(a.vocab_size * h, False), *head, *layer * a.n_layers, *final, *out]

    def stage_tensors(self, stages: int, layers: int | None = None) -> list[tuple[int, bool]]:
        """The tensors of the first of `stages` pipeline stages: the embedding (and learned
        positions) and its `layers` layers (default: n_layers / stages, rounded up). The first
        stage is the one whose gradients a step waits for last (it ends the backward)."""
        if stages == 1:
            return self.tensors()
        if layers is None:
            layers = -(-self.arch.n_layers // stages)
        every = self.tensors()
        per_layer = (len(every) - (4 if self.family == "gpt" else 2)
                     - (0 if self.arch.tied_embeddings else 1)) // self.arch.n_layers
        front = 2 if self.family == "gpt" else 1  # embedding (and positions)
        return every[: front + per_layer * layers]


def _gpt_layer(a: Arch) -> int:
    h, f = a.d_model, a.d_ff
    norms = 2 * 2 * h  # two LayerNorms, weight and bias
    attn = h * 3 * h + 3 * h + h * h + h  # fused QKV and output projection, with biases
    mlp = h * f + f + f * h + h  # GELU MLP with biases
    return norms + attn + mlp


def _llama_layer(a: Arch) -> int:
    h, f = a.d_model, a.d_ff
    kv = a.n_kv_heads * a.head_dim  # width of K and V (grouped-query attention)
    norms = 2 * h  # two RMSNorms, weight only
    attn = h * h + 2 * h * kv + h * h  # q, k, v, o; no biases
    mlp = 3 * h * f  # SwiGLU: gate, up, down
    return norms + attn + mlp


LAYER_PARAMS = {"gpt": _gpt_layer, "llama": _llama_layer}


def count_params(family: str, a: Arch) -> int:
    """Parameter count from the architecture numbers (GPT-2/Megatron or Llama layout)."""
    head = 0 if a.tied_embeddings else a.vocab_size * a.d_model
    embed = a.vocab_size * a.d_model
    if family == "gpt":
        positions = a.seq_len * a.d_model  # learned position embeddings
        final_norm = 2 * a.d_model
        return embed + positions + a.n_layers * _gpt_layer(a) + final_norm + head
    final_norm = a.d_model  # llama: rotary positions carry no parameters
    return embed + a.n_layers * LAYER_PARAMS[family](a) + final_norm + head


MODEL_TABLES = {"arch": ARCH_FIELDS, "reference": REFERENCE_FIELDS,
                "training": TRAINING_FIELDS}


def parse_model(path: Path | str, doc: dict[str, Any]) -> ModelProfile:
    """Validate a parsed TOML document and build a `ModelProfile`. Every error of the file is
    found before any is raised (profiles/problems.py), in one `ProfileError`."""
    problems = Problems(path)
    alias = require_tables(path, doc, required={"arch"}, optional={"reference", "training"},
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
    arch = Arch(**given["arch"]) if "arch" in given else None
    if arch is not None:
        with problems.gather("arch"):
            _check_heads(path, arch)
    ref = given.get("reference")
    training = given.get("training", {"global_batch": None, "source": None})
    if arch is not None and ref is not None and family_known and problems.sound("arch"):
        with problems.gather():
            _check_count(path, count_params(top_values["family"], arch), ref)
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
    )


def _check_heads(path, arch: Arch) -> None:
    """Megatron's attention needs whole heads per d_model and whole query groups per KV head."""
    if arch.d_model % arch.n_heads:
        raise ProfileError(
            f"{path}: [arch] n_heads: must divide d_model ({arch.d_model}), got {arch.n_heads}"
        )
    if arch.n_heads % arch.n_kv_heads:
        raise ProfileError(
            f"{path}: [arch] n_kv_heads: must divide n_heads ({arch.n_heads}), "
            f"got {arch.n_kv_heads}"
        )


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
