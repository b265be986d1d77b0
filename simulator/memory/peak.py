"""GPU memory per scheme, per pipeline stage: weights, gradients, optimizer state, scheme
state, activations and the loss, against what the GPU's memory leaves for them.

Every pipeline stage is priced (its layers, the embedding on the first, the output layer and
loss on the last, the micro-batches its schedule holds at once: simulator/memory/activations.py),
and the GPU's peak is the largest stage's. What a GPU holds beside the step's tensors is the
hardware profile's [memory] table: the device's bytes as the driver reports them, the CUDA
context, library workspaces and NCCL buffers outside PyTorch's allocator, and the allocator's
slack over what it allocated (profiles/hardware_schema.py MEMORY_FIELDS). Sources of each
term: docs/research/memory-terms.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from profiles import HardwareProfile, ModelProfile
from profiles.hardware import Memory
from scape.plan import INDEX_BYTES, SCAPE_SCHEMES, SHARDED_GRAD, ZERO_STAGE, Dtypes, SchemeConfig
from simulator.layout.shapes import Routing
from simulator.memory.activations import (
    embedding_kept_per_token,
    in_flight,
    layer_memory,
    loss_bytes_per_token,
    pipeline_buffers_per_token,
)

# Bytes of the optimizer state per parameter: master weights and moments, in fp32, or in bf16
# with the master's 16 low bits (Apex DistributedFusedAdam store_param_remainders: the bf16
# parameter holds the high bits)
OPTIMIZER_STATE_BYTES = {("adamw", "fp32"): 12, ("adams", "fp32"): 8,  # AdamS: no v
                         ("adamw", "bf16"): 6, ("adams", "bf16"): 4,
                         # fp32 master weights, bf16 moments (precision-aware optimizer)
                         ("adamw", "bf16-moments"): 8, ("adams", "bf16-moments"): 6}
SHARDED = SHARDED_GRAD  # ZeRO-1: gradient and optimizer state sharded over data parallelism
RESIDUAL_SCHEMES = frozenset({"quantized", "topk", "scalecom"})  # fp32 error feedback buffers
# A profile without a [memory] table: the datasheet's GB as the device's bytes (below what
# any 80 GB part reports: H100 SXM 81,559 MiB = 85.5e9 B), and the reserve terms of the
# shipped H100 profiles (their [memory] source says where each comes from)
DEFAULT_RESERVE = {"cuda_context_GiB": 0.3, "workspace_GiB": 0.2, "nccl_communicator_GiB": 1.0,
                   "fragmentation": 0.05}


def reserve(hw: HardwareProfile) -> tuple[Memory, str]:
    """The profile's [memory] table, or the default one; and which ("profile" | "default")."""
    if hw.memory is not None:
        return hw.memory, "profile"
    return Memory(device_MiB=hw.gpu.memory_GB * 1e9 / 2**20, source="simulator/memory/peak.py "
                  "DEFAULT_RESERVE", **DEFAULT_RESERVE), "default"


def usable_bytes(hw: HardwareProfile, communicators: int) -> float:
    """Bytes PyTorch's allocator may hand out on one GPU at the step's peak, with
    `communicators` NCCL communicators in use (`nccl_communicators`)."""
    return reserve(hw)[0].usable_bytes(communicators)


def usable_GB(hw: HardwareProfile, communicators: int) -> float:
    """`usable_bytes` in GB (1e9 bytes), as plans print and take it (--min-spare-gb)."""
    return usable_bytes(hw, communicators) / 1e9


def nccl_communicators(grad_ranks: int, tp: int = 1, pp: int = 1, cp: int = 1, ep: int = 1,
                       etp: int = 1, edp: int = 1, shard: int | None = None) -> int:
    """NCCL communicators one GPU of a step uses, each holding its own buffers ([memory]
    nccl_communicator_GiB; NVIDIA/nccl #986 quoting #864: "More communicators = more memory
    used"): one per process group of more than one rank that the step communicates over,
    as Megatron-Core's parallel_state.py builds them (PyTorch creates a group's communicator
    at its first collective, so a group the step never uses costs nothing). The gradient
    group of `grad_ranks` (data parallel with context parallel), or with hybrid sharding its
    `shard` group and the replicas' group across them; tensor, pipeline (its sends and
    receives) and context parallel; with expert parallelism, the all-to-all group, the
    expert data-parallel group of `edp` and expert tensor parallelism where it is not TP."""
    groups = [tp, pp, cp]
    if shard is not None and shard < grad_ranks:
        groups += [shard, grad_ranks // shard]
    else:
        groups.append(grad_ranks)
    if ep > 1:
        groups += [ep, edp, etp if etp != tp else 1]
    return sum(1 for g in groups if g > 1)


def step_communicators(cfg) -> int:
    """`nccl_communicators` of a simulated step (simulator.step.step_config.StepConfig)."""
    return nccl_communicators(cfg.grad_ranks, cfg.tp, cfg.pp, cfg.cp, cfg.ep, cfg.expert_tp,
                              cfg.edp, cfg.shard_group)


# a step leaving less of its usable memory free is "thin" (plan's footnote, the memory
# bench's count): the allocator slack the model adds is 5% (an assumption, DEFAULT_RESERVE)
THIN_SPARE_PCT = 5.0


def thin_note(spare_pct: float) -> str | None:
    """What a step that fits with under THIN_SPARE_PCT of its usable memory to spare should be
    told (issue 61: an 80B run near the limit ran far slower than priced), or None."""
    if not 0 <= spare_pct < THIN_SPARE_PCT:
        return None
    return (f"thin headroom: {spare_pct:.1f}% of the usable memory is left at the peak (under "
            f"{THIN_SPARE_PCT:g}%). Near the limit PyTorch's caching allocator frees its cache "
            "and retries allocations (torch.cuda.memory_stats: num_alloc_retries), which slows "
            "steps by an amount this model does not price, and a fragmented allocator may not "
            "fit at all: plan with a margin (plan --min-spare-gb)")


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
    """Bytes one GPU holds at its peak, by kind; `stage`: the pipeline stage whose GPUs peak
    highest (0 without pipelining)."""

    weights: float
    grads: float
    optimizer: float
    scheme_state: float
    activations: float
    loss: float = 0.0  # the logits and cross-entropy at the end of the forward (last stage)
    stage: int = 0
    # a gradient reduction's own copy, where the peak is that reduction's (`reduce_copy`)
    comm_buffer: float = 0.0

    @property
    def total(self) -> float:
        return (self.weights + self.grads + self.optimizer + self.scheme_state
                + self.activations + self.loss + self.comm_buffer)

    def as_dict(self) -> dict[str, float]:
        parts = ("weights", "grads", "optimizer", "scheme_state", "activations", "loss",
                 "comm_buffer")
        return {**{k: getattr(self, k) for k in parts}, "total": self.total}


# bytes a parameter's 16-bit copy takes in DeepSpeed's gradient all-reduce: a bf16 engine's
# communication_data_type is bf16 when the config names none (deepspeed/runtime/engine.py,
# as of 56c52238, April 2022), and allreduce_bucket casts the bucket to it before the
# all-reduce (`tensor_to_allreduce = tensor.to(self.communication_data_type)`), copying the
# result back after; the pipeline engine hands it BF16_Optimizer's flat fp32 gradient of each
# parameter group (_bf16_reduce_grads, get_grads_for_reduction) and allreduce_no_retain
# reduces a group larger than its 5e8-element bucket whole, so the copy is the size of the
# stage's largest group: nearly all its parameters (the weight-decay group).
REDUCE_COPY_BYTES = 2


def reduce_copy(scheme: SchemeConfig, weights: float, dtypes: Dtypes) -> float:
    """Bytes of the 16-bit copy a GPU makes of its fp32 gradient to all-reduce it, after the
    step's last backward (REDUCE_COPY_BYTES; `weights`: the stage's parameter bytes at
    `dtypes.param_bytes` each): DeepSpeed's BF16_Optimizer (the deepspeed stack, whose scheme
    all-reduces the gradient whole: step_config.deepspeed_scheme); 0 elsewhere (Megatron's
    and FSDP's reductions work on their gradient buffers in place, in buckets)."""
    if not scheme.grad_all_reduce or dtypes.grad_bytes <= REDUCE_COPY_BYTES:
        return 0.0
    return REDUCE_COPY_BYTES * weights / dtypes.param_bytes


@lru_cache(maxsize=256)
def _layer_params(model: ModelProfile) -> int:
    return model.layer_params


@lru_cache(maxsize=256)
def largest_tensor(model: ModelProfile) -> int:
    """Elements of the model's largest parameter tensor (the authors' offload staging)."""
    return max(size for size, _ in model.tensors())


def stage_params(model: ModelProfile, layers: int, first: bool, last: bool, pp: int) -> int:
    """Parameters of a pipeline stage of `layers` layers: the embedding (and learned positions)
    on the first, the final norm and output layer on the last; with tied embeddings and
    pipelining the last stage holds its own copy of the embedding (Megatron-Core's
    shared_embedding_or_output_weight)."""
    a = model.arch
    n = layers * _layer_params(model)
    if first:
        n += a.vocab_size * a.d_model + (a.seq_len * a.d_model if model.family == "gpt" else 0)
    if last:
        n += (2 if model.family == "gpt" else 1) * a.d_model
        if not a.tied_embeddings or pp > 1:
            n += a.vocab_size * a.d_model
    return n


def state_bytes(model: ModelProfile, scheme: SchemeConfig, n: float, dp: int, tp: int,
                dtypes: Dtypes, optimizer_dtype: str = "fp32", pp: int = 1,
                unit: bool = True) -> tuple[float, float, float, float]:
    """(weights, grads, optimizer, scheme state) bytes of a GPU holding `n` parameters of its
    stage's tensor-parallel shard, over `dp` ranks of gradient reduction. FSDP under pipeline
    parallelism keeps the stage's parameters gathered and its gradients unreduced from the
    first micro-batch to the last (torchtitan: reshard_after_forward off and the
    reduce-scatter deferred with pipelining; docs/research/memory-terms.md section 7).
    `unit`: whether FSDP's unit in flight (a layer gathered, its gradient being reduced)
    is counted here (once a GPU: not again for its routed experts)."""
    optimizer = "adams" if scheme.scheme in SCAPE_SCHEMES else scheme.optimizer
    state = OPTIMIZER_STATE_BYTES[optimizer, optimizer_dtype] * n
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
        extra = authors_state(n, scheme, largest_tensor(model) / tp)
    if scheme.scheme == "scape-partitioned" and scheme.sparsity > 0:
        k = scheme.density * n
        mask = min(k * INDEX_BYTES, n / 8)  # the whole mask, gathered on every rank
        compact = k * dtypes.grad_bytes  # the packed gradient buffer
        residual = 4 * n if scheme.error_feedback else 0.0
        extra = mask + compact + residual
    weights, grads = dtypes.param_bytes * n, dtypes.grad_bytes * n
    if scheme.grad_all_reduce:
        # DeepSpeed's BF16_Optimizer keeps the parameters' own bf16 gradients beside its fp32
        # ones from one backward to the next (bf16_optimizer.py: update_hp_grads with
        # clear_lp_grads=False in the pipeline engine, cleared before the next backward)
        grads += dtypes.param_bytes * n
    stage = ZERO_STAGE.get(scheme.scheme, 0)
    # FSDP's unit: one layer
    unit = _layer_params(model) / tp if stage >= 2 and unit else 0.0
    if stage >= 2:  # the gradient as a shard, plus the unit being reduced
        grads = grads / dp + dtypes.grad_bytes * unit
    # the sharded parameters: a low-precision shard beside the fp32 master (DeepSpeed
    # ZeRO-3, 2 + 2 + 12 bytes), or none where gradients reduce in fp32, FSDP's mixed
    # precision, whose sharded parameter is the fp32 master the optimizer steps ("it keeps the
    # high-precision sharded parameters in memory anyway ... does not require any extra memory
    # to keep a high-precision copy", MixedPrecisionPolicy; 4 + 4 + 8 bytes;
    # docs/research/memory-terms.md section 7)
    shard = 0.0 if dtypes.grad_bytes == 4 else weights / dp
    if stage == 3 and pp > 1:  # the whole stage gathered, its gradients whole
        weights, grads = shard + dtypes.param_bytes * n, grads / dp + dtypes.grad_bytes * n
    elif stage == 3:  # the parameters as a shard, plus the unit in use and the one prefetched
        weights = shard + 2 * dtypes.param_bytes * unit
    return weights, grads, state, extra


def memory_use(
    model: ModelProfile, scheme: SchemeConfig, dp: int, tp: int, micro_batch: int,
    seq_len: int, dtypes: Dtypes, recompute: str = "none", sequence_parallel: bool = True,
    pp: int = 1, chunks: int = 1, attention: str = "flash", micro_batches: int | None = None,
    loss: str = "fp32", optimizer_dtype: str = "fp32", stack: str = "megatron",
    routing: Routing | None = None, edp: int | None = None, fp8: bool = False,
    pp_kept_outputs: bool = False, split: tuple | None = None, mtp: int = 0,
) -> MemoryUse:
    """Bytes one GPU holds at its peak: every pipeline stage priced at the end of a forward
    (its stored micro-batches, the loss on the last stage) or during a recomputed layer's
    backward, whichever is higher, and the highest stage returned. `micro_batches`: a step's
    (its gradient accumulation; None: as many as stages, the fewest 1F1B fills). A model with
    experts: a GPU holds 1/(EP x ETP) of its stage's routed experts (`routing`), their
    optimizer state sharded over the `edp` expert data-parallel ranks where the scheme shards
    it (None: `dp`). `fp8`: the linears' saved inputs in FP8 (activations.py fp8_saved).
    `pp_kept_outputs`: PyTorch's pipelining kept every stage's outputs until the next step
    (torchtitan before 2025; activations.py pipeline_buffers_per_token). `split`: a pipeline
    layout's decoder layers per model chunk (None: the even split); `mtp`: multi-token
    prediction layers on the last stage (_stage_activations)."""
    best = None
    for s, params, activations, loss_b in _stage_activations(
            model, tp, micro_batch, seq_len, recompute, sequence_parallel, pp, chunks,
            attention, pp if micro_batches is None else micro_batches, loss, stack, routing,
            fp8, pp_kept_outputs, split, mtp):
        parts = _stage_state(model, scheme, s, params, dp, tp, dtypes, optimizer_dtype, pp,
                             chunks, routing, edp, split, mtp)
        use = MemoryUse(*parts, activations, loss_b, s)
        # after the last backward, a whole-gradient all-reduce's copy beside the state (the
        # micro-batches' activations freed by then): the stage's peak where it is larger
        copy = reduce_copy(scheme, parts[0], dtypes)
        if copy > activations + loss_b:
            use = MemoryUse(*parts, 0.0, 0.0, s, comm_buffer=copy)
        if best is None or use.total > best.total:
            best = use
    return best


@lru_cache(maxsize=4096)
def _stage_experts(model: ModelProfile, pp: int, chunks: int, stage: int,
                   split: tuple | None = None, mtp: int = 0) -> float:
    """Routed-expert parameters of a pipeline stage's layers (a mean layer's each; the last
    stage's MTP layers too)."""
    return sum(_split(model, pp, chunks, split, mtp)[stage]) * model.expert_layer_params


def _split(model: ModelProfile, pp: int, chunks: int, split: tuple | None, mtp: int
           ) -> list[list[int]]:
    """Layers of each model chunk, [stage][chunk]: `split` (a pipeline layout's,
    StepConfig.layer_split) or the even split, with `mtp` MTP layers counted in the last
    stage's last chunk (what they hold is a layer's)."""
    from simulator.layout.pipeline import stage_layers

    layers = ([list(row) for row in split] if split is not None
              else stage_layers(model.arch.n_layers, pp, chunks))
    layers[-1][-1] += mtp
    return layers


def _stage_state(model: ModelProfile, scheme: SchemeConfig, stage: int, params: float, dp: int,
                 tp: int, dtypes: Dtypes, optimizer_dtype: str, pp: int, chunks: int,
                 routing: Routing | None, edp: int | None, split: tuple | None = None,
                 mtp: int = 0) -> tuple[float, float, float, float]:
    """(weights, grads, optimizer, scheme state) of one stage's GPU: its dense parameters over
    the tensor-parallel ranks and `dp`, its routed experts over EP x ETP and `edp`."""
    experts = (_stage_experts(model, pp, chunks, stage, split, mtp) if model.moe is not None
               else 0.0)
    dense = state_bytes(model, scheme, (params - experts) / tp, dp, tp, dtypes,
                        optimizer_dtype, pp)
    if experts == 0:
        return dense
    r = routing or Routing()
    routed = state_bytes(model, scheme, experts / (r.ep * r.etp), dp if edp is None else edp,
                         tp, dtypes, optimizer_dtype, pp, unit=False)
    return tuple(a + b for a, b in zip(dense, routed, strict=True))


def first_fit(model: ModelProfile, scheme: SchemeConfig, dp: int, tp: int, micro_batch: int,
              seq_len: int, dtypes: Dtypes, recomputes: tuple[str, ...], usable: float,
              pp: int, chunks: int, micro_batches: int, states_cache: dict | None = None,
              cache_key: tuple | None = None, routing: Routing | None = None,
              edp: int | None = None, fp8: bool = False, loss: str = "fp32",
              stack: str = "megatron", pp_kept_outputs: bool = False
              ) -> tuple[str, float] | None:
    """The first of `recomputes` whose peak (memory_use's, with its defaults: sequence
    parallelism, fused attention, fp32 optimizer) fits `usable` bytes, with that
    peak; None if none does. The scheme's state is priced once for every policy tried (what
    the planner asks of every layout and scheme; a test checks it against memory_use), and
    with `states_cache` once for every micro-batch: `cache_key` must then name the scheme,
    dp, tp, pp, chunks and the routing (the stages' state depends on nothing else).
    `routing`, `edp`, `fp8`, `loss`, `stack`, `pp_kept_outputs`: a model's experts and FP8
    linears, the loss and the training stack, as memory_use takes them."""
    states = None
    for recompute in recomputes:
        stages = _stage_activations(model, tp, micro_batch, seq_len, recompute, True, pp,
                                    chunks, "flash", micro_batches, loss, stack,
                                    routing, fp8, pp_kept_outputs)
        if states is None and states_cache is not None:
            states = states_cache.get(cache_key)
        if states is None:  # the same stages for every policy (peak_candidates)
            parts = (_stage_state(model, scheme, s, params, dp, tp, dtypes, "fp32", pp,
                                  chunks, routing, edp) for s, params, _, _ in stages)
            # (the stage's state, its gradient reduction's copy: reduce_copy)
            states = [(sum(p), reduce_copy(scheme, p[0], dtypes)) for p in parts]
            if states_cache is not None:
                states_cache[cache_key] = states
        # a stage's peak: its activations' or its gradient reduction's copy (memory_use)
        total = max(st + max(act + loss, copy)
                    for (st, copy), (_, _, act, loss) in zip(states, stages, strict=True))
        if total <= usable:
            return recompute, total
    return None


@lru_cache(maxsize=16384)
def _stage_activations(model: ModelProfile, tp: int, micro_batch: int, seq_len: int,
                       recompute: str, sequence_parallel: bool, pp: int, chunks: int,
                       attention: str, m: int, loss: str, stack: str = "megatron",
                       routing: Routing | None = None, fp8: bool = False,
                       kept_outputs: bool = False, split: tuple | None = None,
                       mtp: int = 0) -> tuple[tuple[int, int, float, float], ...]:
    """(stage, parameters, activation bytes, loss bytes) of each stage that can peak
    (peak_candidates): what does not depend on the scheme, remembered (the planner prices
    every scheme of a layout). `mtp` multi-token prediction layers on the last stage, as
    Megatron-Core holds them there: each a decoder layer with its stored activations, a
    2h -> h projection and two norms, the embedding the layer looks its tokens up in (a copy
    on the last stage with pipelining), and its own logits and loss."""
    layers = _split(model, pp, chunks, split, mtp)  # [stage][chunk], MTP layers counted
    tokens = seq_len * micro_batch  # of this context-parallel rank
    per_layer = layer_memory(model, model.dropout, attention, seq_len, tp,
                             sequence_parallel or tp == 1, recompute, stack, routing, fp8)
    loss_b = loss_bytes_per_token(model, tp, loss, sequence_parallel, stack) * tokens
    out = []
    for s in peak_candidates(layers):
        last = s == pp - 1
        params = stage_params(model, sum(layers[s]), s == 0, last, pp)
        if last and mtp:  # the projections and norms; the embedding copy with pipelining
            h = model.arch.d_model
            params += mtp * (2 * h * h + 2 * h) + (model.arch.vocab_size * h if pp > 1 else 0)
        stored = in_flight(s, pp, m, tuple(layers[s])) * per_layer.kept * tokens
        if pp > 1:  # the engine's own buffers (DeepSpeed's: its in-flight micro-batches')
            stored += pipeline_buffers_per_token(model, tp, m, s == 0, last, stack,
                                                 kept_outputs, in_flight(s, pp, m, (1,))) * tokens
        if s == 0:  # the micro-batches the first model chunk holds, each with its embedding
            chunk0 = (1,) + (0,) * (len(layers[s]) - 1)
            stored += (in_flight(s, pp, m, chunk0) * tokens
                       * embedding_kept_per_token(model, tp, sequence_parallel))
        working = per_layer.working * tokens
        stage_loss = loss_b * (1 + mtp)  # each MTP layer's logits and loss besides the model's
        # the peak: the end of a forward (the loss on the last stage), or a recomputed
        # layer's backward (its tensors again beside the stored ones)
        if last and stage_loss >= working:
            out.append((s, params, stored, stage_loss))
        else:
            out.append((s, params, stored + working, 0.0))
    return tuple(out)


def peak_candidates(layers: list[list[int]]) -> list[int]:
    """The stages that can peak: the first and the last (the embedding, the loss), and of the
    stages between, the first of each layer split; a later stage with the same layers holds
    the same state and no more micro-batches (1F1B's p - s, the interleaved warm-up's
    2 (p - s - 1) + (v - 1) p both fall with s)."""
    seen, out = set(), [0, len(layers) - 1]
    for s in range(1, len(layers) - 1):
        if tuple(layers[s]) not in seen:
            seen.add(tuple(layers[s]))
            out.append(s)
    return sorted(set(out))


def step_memory(cfg) -> MemoryUse:
    """What one GPU of a simulated step (simulator.step.step_config.StepConfig) holds at its
    peak: with context parallelism, the activations of its seq / cp tokens, and state sharded
    over the data-parallel ranks with the context-parallel ones (`grad_ranks`), or over a
    shard group (hybrid sharding); FP8 parameters at a byte each where they are gathered so,
    and with --fp8 the linears' saved inputs in FP8 (activations.py fp8_saved).
    The key/value blocks a ring exchange keeps (one buffer per step, up to cp of seq / cp
    tokens each) are not counted."""
    return memory_use(cfg.model, cfg.scheme, cfg.shard_ranks, cfg.tp, cfg.micro_batch,
                      cfg.seq // cfg.cp, cfg.plan_dtypes, cfg.recompute, cfg.sequence_parallel,
                      cfg.pp, cfg.chunks_pp, cfg.attention, cfg.accum, cfg.loss,
                      cfg.optimizer_dtype, cfg.stack, cfg.routing, cfg.edp,
                      # Transformer Engine saves FP8 inputs where every linear is FP8; an
                      # experts-only scope's saved inputs are counted 16-bit (an upper bound)
                      cfg.fp8 and cfg.quantized_gemms == "all",
                      cfg.keeps_pp_outputs,
                      None if cfg.pp_layout is None else tuple(map(tuple, cfg.layer_split())),
                      cfg.mtp_layers)


def memory_columns(cfg) -> dict:
    """memory_GB (what PyTorch's allocator hands out at the peak), its parts, the stage that
    peaks, what the allocator reserves for it and what lives outside the allocator (the NCCL
    communicators counted), and how much is left, for a result row. It fits where the
    reserved and the outside bytes fit the device (the same as the allocated fitting the
    usable)."""
    use = step_memory(cfg)
    held, which = reserve(cfg.hardware)
    comms = step_communicators(cfg)
    usable = held.usable_bytes(comms)
    return {"memory_GB": use.total / 1e9,
            **{f"memory_{k}_GB": v / 1e9 for k, v in use.as_dict().items() if k != "total"},
            "memory_peak_stage": use.stage,
            "memory_reserved_GB": use.total * (1 + held.fragmentation) / 1e9,
            "memory_outside_GB": held.outside_GiB(comms) * 2**30 / 1e9,
            "nccl_communicators": comms,
            "device_memory_GB": held.device_MiB * 2**20 / 1e9,
            "usable_memory_GB": usable / 1e9,
            "memory_spare_pct": 100 * (1 - use.total / usable),
            "memory_reserve": which,
            "fits_memory": use.total <= usable}


def describe_outside(hw: HardwareProfile, communicators: int) -> str:
    """The parts of what the profile holds outside PyTorch's allocator with `communicators`
    in use, in words (GiB, as the profile gives them)."""
    held, _ = reserve(hw)
    if held.context_GiB is not None:
        return ("CUDA context, workspaces and NCCL buffers: the profile's one context_GiB, "
                "whatever the layout")
    return (f"GiB: CUDA context {held.cuda_context_GiB:g}, workspaces {held.workspace_GiB:g}, "
            f"{communicators} NCCL communicator{'s' if communicators != 1 else ''} x "
            f"{held.nccl_communicator_GiB:g}")


def describe_reserve(hw: HardwareProfile, communicators: int) -> str:
    """How the usable bytes follow from the profile and the layout's communicators, in
    words."""
    held, which = reserve(hw)
    return (f"{held.usable_bytes(communicators) / 1e9:.1f} GB usable: "
            f"{held.device_MiB:,.0f} MiB on the device, less "
            f"{held.outside_GiB(communicators):g} GiB outside the allocator "
            f"({describe_outside(hw, communicators)}), over 1 + {held.fragmentation:g} "
            "allocator slack" + ("" if which == "profile" else "; the profile has no [memory] "
                                 "table, so these are simulator/memory/peak.py's defaults"))


def refuse_if_too_big(cfg, scheme: str | None = None) -> None:
    """A UserError, with the breakdown, when one GPU of the step cannot hold it; `scheme`:
    the scheme as the user named it (dense-adams rather than the dense-zero1 it runs)."""
    from profiles import UserError

    use = step_memory(cfg)
    comms = step_communicators(cfg)
    usable = usable_bytes(cfg.hardware, comms)
    if use.total > usable:
        parts = ", ".join(f"{k} {v / 1e9:.1f}" for k, v in use.as_dict().items()
                          if k != "total" and v > 0)
        where = f" on pipeline stage {use.stage}" if cfg.pp > 1 else ""
        sharded = cfg.scheme.scheme in SHARDED or cfg.scheme.extra.get("distributed_optimizer")
        hint = ("more GPUs (--gpus) to shard the optimizer state further" if sharded else
                "a scheme that shards the optimizer state (dense-adams, scape-partitioned, "
                "scape --distributed-optimizer)")
        moe = cfg.model.moe
        experts = ("more expert parallelism (--ep, dividing the "
                   f"{moe.n_experts} experts), " if moe is not None and cfg.ep < moe.n_experts
                   else "")
        recompute = ("" if cfg.recompute == "full" else
                     "activation recomputation (--recompute selective-op or full), ")
        from simulator.memory.suggest import fitting_changes

        fits = fitting_changes(cfg, lambda c: step_memory(c).total,
                               lambda c: usable_bytes(c.hardware, step_communicators(c)))
        advice = (f"each of these fits, the cheapest in step time first: "
                  f"{'; '.join(fits)}" if fits else
                  f"try {recompute}tensor or pipeline parallelism (--tp, --pp), {experts}a "
                  f"smaller --micro-batch, or {hint}")
        raise UserError(
            f"{cfg.model.name} with {scheme or cfg.scheme.scheme} needs "
            f"{use.total / 1e9:.1f} GB per GPU{where} ({parts} GB), {cfg.hardware.name} has "
            f"{describe_reserve(cfg.hardware, comms)}: {advice}")
