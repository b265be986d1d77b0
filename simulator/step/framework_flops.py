"""Model FLOPs per token as Megatron-LM counts them for the TFLOP/s per GPU it logs and the
MFU its users quote (megatron/training/training.py `num_floating_point_operations`), so that a
published run that states only TFLOP/s is turned into a step time with the count its source
used, not this tool's (`compute.forward_flops_per_token`, which counts the whole score matrix
and the model's own parameters).

Two versions of that function are in published tables:
- "full" (Megatron-LM before commit 8873b55d6a, 2025-03-06): every layer's score and value
  products over the whole s x s matrix (`seq_length / hidden_size` in the attention term),
  the routed experts' width times top-k on every layer, no multi-latent-attention terms
  (the version at 8873b55d6a^);
- "causal" (from 8873b55d6a, "ADLR/megatron-lm!2789 - Fixes in number of floating-point
  operation estimates for MoE and attention layer", through the dev branch of 2025-11,
  eb0783b6d3): half the score matrix ("causal mask (only half of the mask is non-zero)"),
  dense and MoE layers counted apart (--moe-layer-freq), multi-latent attention's low-rank
  projections, and the multi-token-prediction layers where --mtp-num-layers is given.
Both count forward and backward as 3 x forward and no recomputation, as this tool's
`model_flops_per_step` does."""

from __future__ import annotations

from profiles.model_layers import mlp_of

VERSIONS = ("full", "causal")


def padded_vocab(vocab: int, divisible_by: int = 128, tp: int = 1) -> int:
    """Megatron's --make-vocab-size-divisible-by padding (default 128, times the tensor-
    parallel size: megatron/training/tokenizer/tokenizer.py `_vocab_size_with_padding`)."""
    step = divisible_by * tp
    return -(-vocab // step) * step


def megatron_flops_per_token(model, seq_len: int, version: str, mtp_layers: int = 0,
                             vocab: int | None = None) -> float:
    """FLOPs per token of one training step (forward and backward) as Megatron-LM's
    `num_floating_point_operations` counts them at `version` ("full" or "causal", module
    docstring), for `model` (profiles.ModelProfile) at `seq_len`; `vocab`: the padded
    vocabulary the run used (None: `padded_vocab` of the model's at Megatron's default).
    Sliding-window attention is counted as full attention, as Megatron's function does."""
    if version not in VERSIONS:
        raise ValueError(f"version {version!r}: one of {', '.join(VERSIONS)}")
    a, moe, mla = model.arch, model.moe, model.mla
    h, layers, s = a.d_model, a.n_layers, seq_len
    v = padded_vocab(a.vocab_size) if vocab is None else vocab
    gated = 1.5 if mlp_of(model.family, a) == "swiglu" else 1.0
    q_proj = a.head_dim * a.n_heads  # --kv-channels x heads
    if version == "full":
        if mla is not None or mtp_layers:
            raise ValueError("the 'full' count (Megatron before 2025-03-06) has no "
                             "multi-latent-attention or MTP terms")
        routed = 1 if moe is None else moe.top_k
        ffn = a.d_ff if moe is None else moe.d_ff_expert
        shared = 0 if moe is None else moe.shared_width
        per_layer = (  # x 12 h^2: the 8873b55d6a^ expression, divided by batch x seq
            (1 + a.n_kv_heads / a.n_heads + s / h) * q_proj / h
            + ffn / h * routed * gated + shared / h * gated + v / (2 * layers * h))
        return 12 * layers * h * h * per_layer
    moe_layers = 0 if moe is None else moe.moe_layers(layers)
    last_moe = moe is not None and moe.is_moe(layers - 1)
    dense = layers - moe_layers
    # MTP layers are of the last layer's kind (eb0783b6d3: `last_layer_is_moe`)
    moe_layers += mtp_layers if last_moe else 0
    dense += 0 if last_moe else mtp_layers
    n = layers + mtp_layers
    mlp = 12 * h * gated * (a.d_ff * dense + (
        0 if moe is None else (moe.d_ff_expert * moe.top_k + moe.shared_width) * moe_layers))
    if mla is not None:
        heads, qk = a.n_heads, mla.qk_nope_head_dim + mla.qk_rope_head_dim
        q_term = (h * heads * qk if mla.q_lora_rank == 0 else
                  mla.q_lora_rank * (h + heads * qk + 1))
        attention = 6 * (q_term
                         + mla.kv_lora_rank * (h + heads * (mla.qk_nope_head_dim
                                                            + mla.v_head_dim) + 1)
                         + h * mla.qk_rope_head_dim
                         + heads * mla.v_head_dim * h
                         + s * heads * qk / 2 + s * heads * mla.v_head_dim / 2)
    else:
        kv_proj = a.head_dim * a.n_kv_heads
        attention = 6 * (h * (q_proj + 2 * kv_proj) + q_proj * s / 2 * 2 + q_proj * h)
    mtp = 6 * mtp_layers * (3 * h + 2 * h * h)
    return mlp + attention * n + mtp + 6 * h * v * (mtp_layers + 1)
