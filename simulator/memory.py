"""GPU memory per scheme: weights, gradients, optimizer state, scheme state, activations.

Activations follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
Transformer Models", section 4): with flash attention (no s x s score tensors) and sequence
parallelism, a layer keeps about 34*s*b*h/t bytes in 16-bit training; with full recomputation
only its 2*s*b*h-byte input (plus one layer's working set during its recomputation). The logit
layer keeps s*b*V fp32 values per micro-batch, split over tensor-parallel ranks.
"""

from __future__ import annotations

from dataclasses import dataclass

from profiles import HardwareProfile, ModelProfile
from scape.plan import INDEX_BYTES, SCAPE_SCHEMES, SHARDED_GRAD, ZERO_STAGE, Dtypes, SchemeConfig

# Bytes of the fp32 optimizer state per parameter: master weights and moments.
OPTIMIZER_STATE_BYTES = {"adamw": 12, "adams": 8}  # AdamS keeps no second moment
SHARDED = SHARDED_GRAD  # ZeRO-1: gradient and optimizer state sharded over data parallelism
RESIDUAL_SCHEMES = frozenset({"quantized", "topk", "scalecom"})  # fp32 error feedback buffers
# CUDA context, NCCL buffers and allocator fragmentation: plan with 90% of the GPU's memory.
USABLE_FRACTION = 0.90


def usable_bytes(hw: HardwareProfile) -> float:
    """Bytes of one GPU's memory a plan may fill."""
    return hw.gpu.memory_GB * 1e9 * USABLE_FRACTION


def authors_state(n: float, scheme: SchemeConfig, largest: float = 0.0) -> float:
    """The authors' reducer's own buffers (profiles/external/scape-sc26.reducer.md section 0):
    the current and next packed masks (1 bit per element each, R:461), the fp32 payload of K,
    the fp32 residual of N on the GPU unless offloaded (R:475-483; offloaded, two fp32 GPU
    staging buffers of the `largest` tensor's size, R:522-535, section 4), and with the
    distributed optimizer a full fp32 parameter replica on the GPU unless offloaded
    (R:558-574). The optimizer state (m and fp32 master weights, no v) is counted as AdamS's."""
    masks = 2 * n / 8
    payload = 4 * scheme.density * n
    residual = 2 * 4 * largest if scheme.extra.get("residual_offload") else 4 * n
    replica = 0.0
    if scheme.extra.get("distributed_optimizer") and not scheme.extra.get("param_offload"):
        replica = 4 * n
    return masks + payload + residual + replica


@dataclass(frozen=True)
class MemoryUse:
    weights: float
    grads: float
    optimizer: float
    scheme_state: float
    activations: float

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer + self.scheme_state + self.activations

    def as_dict(self) -> dict[str, float]:
        return {**self.__dict__, "total": self.total}


def memory_use(
    model: ModelProfile, scheme: SchemeConfig, dp: int, tp: int, micro_batch: int,
    seq_len: int, dtypes: Dtypes, recompute: str = "none", sequence_parallel: bool = True,
    pp: int = 1, chunks: int = 1, attention: str = "flash", micro_batches: int | None = None,
) -> MemoryUse:
    """Bytes one GPU holds at its peak (end of forward of its micro-batch). With pipeline
    parallelism, a GPU of the first stage (the largest peak), counted with as many layers as the
    busiest stage (n_layers / p rounded up) and the embedding, and
    the activations of the micro-batches 1F1B keeps in flight there: p of them for its n/p
    layers, the same as one micro-batch through every layer, times 1 + (p - 1)/(p v) when
    interleaved over v chunks (Korthikanti et al. 2022, section 4.2.3). `micro_batches` (a
    step's, its gradient accumulation): fewer than p leave the first stage as many in flight,
    not p; None: at least p."""
    a = model.arch
    # the busiest stage's layers with the embedding: at most one layer more than the first's
    stage_params = sum(size for size, _ in model.stage_tensors(pp))
    n = stage_params / tp  # parameters this GPU's tensor-parallel shard holds
    optimizer = "adams" if scheme.scheme in SCAPE_SCHEMES else scheme.optimizer
    state = OPTIMIZER_STATE_BYTES[optimizer] * n
    distopt = scheme.scheme == "scape" and scheme.extra.get("distributed_optimizer", False)
    if scheme.scheme in SHARDED or distopt:
        state /= dp
    extra = 0.0
    # a residual where something is left unsent: sparsity, or bits below the gradient's
    # (quantized at its width runs as dense-ddp, scape/plan/quantized.py)
    compresses = (scheme.sparsity > 0 if scheme.scheme != "quantized"
                  else scheme.bits < 8 * dtypes.grad_bytes)
    if scheme.scheme in RESIDUAL_SCHEMES and compresses:
        extra = 4 * n
    if scheme.scheme == "scape":
        extra = authors_state(n, scheme, max(size for size, _ in model.tensors()) / tp)
    if scheme.scheme == "scape-partitioned" and scheme.sparsity > 0:
        k = scheme.density * n
        mask = min(k * INDEX_BYTES, n / 8)  # the whole mask, gathered on every rank
        compact = k * dtypes.grad_bytes  # the packed gradient buffer
        residual = 4 * n if scheme.error_feedback else 0.0
        extra = mask + compact + residual
    weights, grads = dtypes.param_bytes * n, dtypes.grad_bytes * n
    stage = ZERO_STAGE.get(scheme.scheme, 0)
    if stage >= 2:  # the gradient as a shard, plus the bucket being reduced
        unit = n / a.n_layers
        grads = grads / dp + dtypes.grad_bytes * unit
    if stage == 3:  # the parameters as a shard, plus the unit in use and the one prefetched
        weights = weights / dp + 2 * dtypes.param_bytes * unit
    sbh = seq_len * micro_batch * a.d_model
    # bytes per layer kept for backward (Korthikanti et al. 2022, Table 2, with FlashAttention
    # keeping no s x s scores, so selective recomputation saves nothing more): 34sbh/t with
    # sequence parallelism, sbh(10 + 24/t) without (LayerNorm and dropout inputs replicated)
    kept = 34 * sbh / tp if sequence_parallel or tp == 1 else sbh * (10 + 24 / tp)
    if attention == "unfused" and recompute == "none":  # softmax output, dropout mask, scores
        kept += 5 * a.n_heads * seq_len * seq_len * micro_batch / tp
    if recompute == "full":
        per_layer, working = 2 * sbh / tp, kept  # the input, and one layer while recomputed
    else:
        per_layer, working = kept, 0.0
    logits = 4 * seq_len * micro_batch * a.vocab_size / tp if pp == 1 else 0.0  # last stage
    in_flight = 1 + (pp - 1) / (pp * chunks) if chunks > 1 else 1.0
    if micro_batches is not None and chunks == 1 and micro_batches < pp:
        in_flight = micro_batches / pp  # its n/p layers hold m micro-batches, not p
    return MemoryUse(
        weights=weights,
        grads=grads,
        optimizer=state,
        scheme_state=extra,
        activations=a.n_layers * per_layer * in_flight + working + logits,
    )


def step_memory(cfg) -> MemoryUse:
    """What one GPU of a simulated step (simulator.step.StepConfig) holds at its peak: with
    context parallelism, the activations of its seq / cp tokens, and state sharded over the
    data-parallel ranks with the context-parallel ones (`grad_ranks`). The key/value blocks a
    ring exchange keeps (one buffer per step, up to cp of seq / cp tokens each) are not
    counted."""
    return memory_use(cfg.model, cfg.scheme, cfg.grad_ranks, cfg.tp, cfg.micro_batch,
                      cfg.seq // cfg.cp, cfg.dtypes, cfg.recompute, cfg.sequence_parallel,
                      cfg.pp, cfg.chunks_pp, cfg.attention, cfg.accum)


def memory_columns(cfg) -> dict:
    """memory_GB, its parts and whether it fits, for a result row."""
    use = step_memory(cfg)
    return {"memory_GB": use.total / 1e9,
            **{f"memory_{k}_GB": v / 1e9 for k, v in use.as_dict().items() if k != "total"},
            "usable_memory_GB": usable_bytes(cfg.hardware) / 1e9,
            "fits_memory": use.total <= usable_bytes(cfg.hardware)}


def refuse_if_too_big(cfg, scheme: str | None = None) -> None:
    """A UserError, with the breakdown, when one GPU of the step cannot hold it; `scheme`:
    the scheme as the user named it (dense-adams rather than the dense-zero1 it runs)."""
    from profiles import UserError

    use = step_memory(cfg)
    usable = usable_bytes(cfg.hardware)
    if use.total > usable:
        parts = ", ".join(f"{k} {v / 1e9:.1f}" for k, v in use.as_dict().items() if k != "total")
        sharded = cfg.scheme.scheme in SHARDED or cfg.scheme.extra.get("distributed_optimizer")
        hint = ("more GPUs (--gpus) to shard the optimizer state further" if sharded else
                "a scheme that shards the optimizer state (dense-adams, scape-partitioned, "
                "scape --distributed-optimizer)")
        raise UserError(
            f"{cfg.model.name} with {scheme or cfg.scheme.scheme} needs "
            f"{use.total / 1e9:.1f} GB per GPU ({parts} GB), {cfg.hardware.name} has "
            f"{usable / 1e9:.1f} GB usable "
            f"({USABLE_FRACTION:.0%} of {cfg.hardware.gpu.memory_GB:g} GB): try tensor "
            f"parallelism (--tp), a smaller --micro-batch, or {hint}")
