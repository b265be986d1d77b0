"""Activation memory as the stacks allocate it: what one transformer layer keeps for its
backward, tensor by tensor, under each recomputation policy; what the loss holds at the end of
the forward; and how many micro-batches each pipeline stage holds at its peak.

The inventory follows Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
Transformer Models", section 4.1, Table 2: 34 s b h + 5 a s^2 b bytes per GPT layer) term by
term, so that a layer without dropout (Llama, Nemotron, MPT) keeps no dropout masks, a SwiGLU
MLP keeps its two fc1 outputs, grouped-query attention keeps narrower K and V, and fused
attention (FlashAttention, cuDNN) keeps no s x s scores but its output and a log-sum-exp
(Dao 2023, FlashAttention-2 Algorithm 2). Sources of each policy and term:
docs/research/memory-terms.md.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from simulator.layout.shapes import Routing
from vocabulary.errors import UserError
from vocabulary.names import LOSSES, STACKS
from vocabulary.recompute import check as check_recompute
from vocabulary.recompute import modules_of

# the policy each tensor survives: "all" only where nothing is recomputed (and Megatron's
# selective, which recomputes only the attention core's s x s tensors); "op" also under
# torchtitan's op-level selective checkpointing (outputs of matmuls 1, 3, 5, 7 of the layer and
# of the attention kernel; torchtitan/distributed/activation_checkpoint.py _custom_policy:
# every second mm is recomputed); "input" under every policy (the checkpoint's input)
ALL, OP, INPUT = "all", "op", "input"
NORM_OUT = "norm output"  # recomputed by Megatron-Core's --recompute-modules layernorm
SCORES = "scores"  # the unfused attention core's s x s tensors: Megatron's selective
OP_ONLY = "op only"  # kept by op-level checkpointing alone (a matmul output others free)


@dataclass(frozen=True)
class Tensor:
    name: str
    bytes_per_token: float  # B per token of the micro-batch (of this context-parallel rank)
    split: str  # "tp": split over tensor-parallel ranks; "sp": only with sequence parallelism
    kept_by: str  # ALL | OP | INPUT | NORM_OUT | SCORES | OP_ONLY
    # the Megatron-Core --recompute-modules whose recomputation frees it
    # (vocabulary/recompute.py MODULES)
    freed_by: frozenset[str] = frozenset()
    # saved by a linear layer for its weight gradient alone: Transformer Engine keeps it in
    # FP8 under --fp8 (`fp8_saved`)
    linear_input: bool = False


def fp8_saved(tensors: list[Tensor], act_bytes: int = 2) -> list[Tensor]:
    """The tensors a layer keeps under Transformer Engine's FP8 (Megatron-Core's --fp8):
    a linear layer saves its input as the FP8 copy its GEMM read, 1 byte an element
    (transformer_engine/pytorch/module/linear.py _Linear.forward: `saved_inputmat = inputmat`
    or its FP8 transpose; LayerNormLinear's norm writes its output in FP8 directly), so the
    inputs of QKV, fc1, fc2, the experts' grouped GEMMs and latent attention's up-projections
    take 1 byte; the attention output is also kept in 16 bits by the attention kernel, whose
    backward reads it, so the projection's FP8 copy comes on top."""
    out = []
    for t in tensors:
        if t.linear_input:
            out.append(replace(t, bytes_per_token=t.bytes_per_token / act_bytes))
        else:
            out.append(t)
        if t.name == "attention output (projection input)":
            out.append(replace(t, name="projection input (FP8 copy)",
                               bytes_per_token=t.bytes_per_token / act_bytes))
    return out


def _by(*modules: str) -> frozenset[str]:
    return frozenset(modules)


def layer_tensors(arch, family: str, dropout: bool, attention: str, seq: int,
                  act_bytes: int = 2, stack: str = "megatron", mla=None,
                  shared: bool = False) -> list[Tensor]:
    """The tensors one layer keeps for its backward without recomputation (bytes per token;
    `seq` the sequence each attention score row spans). Megatron-Core's order: norm, QKV,
    attention, projection, norm, fc1, activation, fc2. With sequence parallelism Megatron
    saves the QKV and fc1 inputs sequence-sharded and gathers them again in the backward
    (tensor_parallel/layers.py, sequence_parallel: all-gather in backward); torchtitan's
    DTensor plan gathers them before the linears (PrepareModuleInput Shard(1) -> Replicate) and
    the linears save the gathered copy ("gathered": never divided over tensor-parallel
    ranks; docs/research/memory-terms.md section 12). Queries and the attention output are
    heads x head width wide (wider than h in Qwen3 and gpt-oss). `mla`: multi-head latent
    attention (profiles/model_layers.py Mla): the down-projections' latents, their norms'
    outputs (the up-projections' inputs), and per head the up-projected queries, keys (with the
    rotary part) and values, which --recompute-modules mla_up_proj frees (Megatron-Core
    MLASelfAttention). `shared`: the MLP is a MoE layer's shared expert
    (--recompute-modules shared_experts or moe frees it, not mlp)."""
    h, f, heads = arch.d_model, arch.d_ff, arch.n_heads
    kv = arch.n_kv_heads * arch.head_dim  # width of K and of V (grouped-query attention)
    q_width = arch.q_width
    b = act_bytes
    linear_in = "gathered" if stack == "torchtitan" else "sp"  # the QKV and fc1 inputs
    out = [Tensor("norm1 input (the layer's input)", b * h, "sp", INPUT),
           Tensor("QKV input (norm1 output)", b * h, linear_in, NORM_OUT, _by("layernorm"),
                  True)]
    if mla is None:
        out += [Tensor("Q", b * q_width, "tp", OP),  # mm 1: kept by op-level checkpointing
                Tensor("K", b * kv, "tp", ALL),
                Tensor("V", b * kv, "tp", OP)]  # mm 3
    else:
        up = _by("mla_up_proj")
        qk, latent = heads * mla.qk_head_dim, mla.kv_lora_rank + mla.qk_rope_head_dim
        if mla.q_lora_rank:
            out += [Tensor("query latent (q down output)", b * mla.q_lora_rank, "sp", ALL),
                    Tensor("query latent normed (q up input)", b * mla.q_lora_rank,
                           "gathered", ALL, linear_input=True)]
        out += [Tensor("key-value latent (kv down output)", b * latent, "sp", ALL),
                Tensor("key-value latent normed (kv up input)", b * mla.kv_lora_rank,
                       "gathered", ALL, linear_input=True),
                Tensor("Q (up-projected, with rotary)", b * qk, "tp", OP, up),
                Tensor("K (up-projected, with rotary)", b * qk, "tp", ALL, up),
                Tensor("V (up-projected)", b * heads * mla.v_head_dim, "tp", OP, up)]
        q_width = heads * mla.v_head_dim  # the attention output: a value's width per head
    out.append(Tensor("attention output (projection input)", b * q_width, "tp", OP))
    if attention == "unfused":  # softmax output (and its dropout mask and output), a s x s
        per_row = (2 + (1 + 2 if dropout else 0)) * heads * seq  # Korthikanti: 5 a s^2 b
        out.append(Tensor("attention scores (unfused)", per_row, "tp", SCORES,
                          _by("core_attn")))
    else:  # fp32 log-sum-exp per head and token (FlashAttention-2 Algorithm 2, L)
        out.append(Tensor("softmax log-sum-exp", 4 * heads, "tp", OP))
    if dropout:  # 1-byte masks of the two residual dropouts (Korthikanti Table 2)
        out.append(Tensor("attention dropout mask", h, "sp", ALL))
    out += [Tensor("norm2 input", b * h, "sp", ALL),
            Tensor("fc1 input (norm2 output)", b * h, linear_in, NORM_OUT, _by("layernorm"),
                   True)]
    # a MoE layer's shared expert sits inside the MoE layer that `moe` recomputes whole
    mlp = _by("shared_experts", "moe") if shared else _by("mlp")
    if family == "llama" and arch.mlp in ("gelu", "relu2"):  # ungated (Nemotron-4)
        out += [Tensor("fc1 output (activation input)", b * f, "tp", OP, mlp),
                Tensor("activation output (fc2 input)", b * f, "tp", ALL, mlp, True)]
    elif family == "llama":  # SwiGLU: gate and up projections, then their product into fc2
        out += [Tensor("fc1 gate output", b * f, "tp", OP, mlp),  # mm 5 (torchtitan's w1)
                Tensor("fc1 up output", b * f, "tp", ALL, mlp),  # mm 6 (w3): recomputed
                Tensor("activation output (fc2 input)", b * f, "tp", ALL, mlp, True)]
    else:  # GeLU: fc1 output and the activation's output
        out += [Tensor("fc1 output (activation input)", b * f, "tp", OP, mlp),
                Tensor("activation output (fc2 input)", b * f, "tp", ALL, mlp, True)]
    out.append(Tensor("fc2 output", b * h, "sp", OP_ONLY))  # mm 7
    if dropout:
        out.append(Tensor("MLP dropout mask", h, "sp", ALL))
    return out


def _kept(tensor: Tensor, recompute: str) -> bool:
    if tensor.kept_by == INPUT:
        return True
    if recompute == "selective-op":
        return tensor.kept_by in (OP, OP_ONLY)
    if recompute == "none":
        return tensor.kept_by != OP_ONLY
    modules = modules_of(recompute)  # Megatron's selective: what its modules free
    if modules is None:  # full: the input only
        return False
    return tensor.kept_by != OP_ONLY and not tensor.freed_by & modules


def _sharded(tensor: Tensor, tp: int, sequence_parallel: bool) -> float:
    if tensor.split == "gathered":
        return tensor.bytes_per_token
    if tensor.split == "tp" or (sequence_parallel and tp > 1):
        return tensor.bytes_per_token / tp
    return tensor.bytes_per_token


@dataclass(frozen=True)
class LayerMemory:
    """Bytes per token one layer keeps on one GPU (`kept`), and the bytes per token the layer
    being recomputed materializes again during its backward (`working`: what the policy did
    not keep; 0 when it keeps everything)."""

    kept: float
    working: float


def routed_tensors(model, routing, act_bytes: int = 2) -> list[Tensor]:
    """What a MoE layer keeps for its routed experts beyond a dense layer's attention half,
    in bytes per token of the micro-batch split over tensor-parallel ranks as a GPU holds
    them: the router's fp32 probabilities, and per (token, expert) pair on this GPU (the
    busiest rank's: top-k x imbalance x ETP pairs per token, sequence-parallel) the
    dispatched hidden state (the grouped fc1's input), fc1's outputs and the activation's at
    1/ETP of the expert's width (Megatron-Core's TEGroupedMLP saves them as a dense MLP's),
    and fc2's output until the combine."""
    moe, h, b = model.moe, model.arch.d_model, act_bytes
    pairs = moe.top_k * routing.imbalance  # per token, before the ETP gather
    width = moe.d_ff_expert  # x pairs x ETP / ETP: a GPU's share of each pair's width
    gated = model.gated_mlp
    fc1 = [Tensor("expert fc1 gate output", b * pairs * width, "tp", OP, _by("moe")),
           Tensor("expert fc1 up output", b * pairs * width, "tp", ALL, _by("moe"))] if gated \
        else [Tensor("expert fc1 output", b * pairs * width, "tp", OP, _by("moe"))]
    # --recompute-modules moe recomputes the whole MoE layer from its input (Megatron-Core
    # moe_layer.py, the checkpointed router, dispatch, experts and combine); moe_act only the
    # experts' activation (its output)
    layer, act = _by("moe"), _by("moe", "moe_act")
    return [Tensor("router probabilities (fp32)", 4 * moe.n_experts, "sp", ALL, layer),
            Tensor("dispatched tokens (expert fc1 input)", b * pairs * routing.etp * h, "tp",
                   ALL, layer, True),
            *fc1,
            Tensor("expert activation output (fc2 input)", b * pairs * width, "tp", ALL, act,
                   True),
            Tensor("expert fc2 output", b * pairs * routing.etp * h, "tp", OP_ONLY)]


def _kept_and_again(tensors: list[Tensor], tp: int, sequence_parallel: bool, recompute: str
                    ) -> tuple[float, float]:
    kept = sum(_sharded(t, tp, sequence_parallel) for t in tensors if _kept(t, recompute))
    # what the recomputed forward materializes again beside what was kept: the whole layer's
    # under full recomputation; under Megatron's selective modules, each module is recomputed
    # just before its own backward and its outputs freed after it, so the largest module's
    # (the MoE layer's, where it is recomputed, holds its activation and shared expert)
    freed = [t for t in tensors if t.kept_by != OP_ONLY and not _kept(t, recompute)]
    modules = modules_of(recompute)
    if modules is None:
        return kept, sum(_sharded(t, tp, sequence_parallel) for t in freed)
    groups: dict[str, float] = {}
    for t in freed:
        by = t.freed_by & modules
        key = "moe" if "moe" in by else min(by)
        groups[key] = groups.get(key, 0.0) + _sharded(t, tp, sequence_parallel)
    return kept, max(groups.values(), default=0.0)


@lru_cache(maxsize=4096)
def layer_memory(model, dropout: bool, attention: str, seq: int, tp: int,
                 sequence_parallel: bool, recompute: str, stack: str = "megatron",
                 routing=None, fp8: bool = False) -> LayerMemory:
    """A mean layer's bytes per token (a MoE model's dense and MoE layers weighted by their
    counts; `routing`, simulator/layout/shapes.py Routing, how the MoE layers' tokens spread:
    None is one expert-parallel rank, even load). `fp8`: Megatron-Core's --fp8 with
    Transformer Engine, whose linears save FP8 inputs (`fp8_saved`); torchtitan's float8
    (torchao) is priced as 16-bit: torchao's published peaks are the same with and without
    it (profiles/external/published-memory.csv, torchao-*-fp8 rows)."""
    saved = fp8_saved if fp8 and stack == "megatron" else (lambda ts: ts)
    check_recompute(recompute)
    if stack not in STACKS:
        raise UserError(f"--stack must be one of {', '.join(STACKS)}, got {stack!r}")
    tensors = saved(layer_tensors(model.arch, model.family, dropout, attention, seq,
                                  stack=stack, mla=model.mla))
    kept, again = _kept_and_again(tensors, tp, sequence_parallel, recompute)
    if model.moe is None:
        return LayerMemory(kept, again)
    # a MoE layer: the dense layer's tensors with the shared expert's width, and the routed
    shared = replace(model.arch, d_ff=model.moe.shared_width)
    moe = saved([t for t in layer_tensors(shared, model.family, dropout, attention, seq,
                                          stack=stack, mla=model.mla, shared=True)
                 if t.bytes_per_token > 0] + routed_tensors(model, routing or Routing()))
    moe_kept, moe_again = _kept_and_again(moe, tp, sequence_parallel, recompute)
    w = model.moe_share
    return LayerMemory((1 - w) * kept + w * moe_kept, (1 - w) * again + w * moe_again)


# bytes per logit the loss holds at the end of the forward, on the last stage: bf16 logits
# (2), and with fp32 the fp32 softmax (or log-softmax) the backward needs (4): Megatron-Core's
# vocab_parallel_cross_entropy(logits.float()) and torchtitan's cross_entropy(pred.float());
# "fused" keeps the bf16 logits alone, its kernel writing the gradient over them (flash-attn's
# CrossEntropyLoss(inplace_backward=True), llm-foundry's default loss; Transformer Engine's
# fused cross-entropy); "chunked" (a fused linear cross-entropy, Liger-Kernel) never holds the
# whole logits (sources: docs/research/memory-terms.md section 4)
# "eager": PyTorch's cross_entropy(pred.float()) (torchtitan, Hugging Face) keeps the fp32
# log-softmax (4), and its backward holds beside it the fp32 gradient nll_loss hands it (4)
# and the fp32 gradient of the logits its one kernel writes (4): 12 at the start of the
# backward, when every layer's activations are still held. This term was derived after the
# torchtitan rows of bench/memory_published.py came out 16-37% under their reported peaks
# with the 6 bytes of "fp32" (said so: a choice made after seeing errors); each byte per
# logit moves an 8B row at local batch 2, sequence 8192 by 2.1 GB
LOSS_BYTES = {"fp32": 2 + 4, "eager": 4 + 4 + 4, "fused": 2, "chunked": 0}
# "eager" under torchtitan's tensor parallelism runs PyTorch's loss_parallel
# (torch/distributed/tensor/parallel/loss.py): its backward holds the saved fp32 log-softmax,
# zeros_like of it, its exp and their sum at once, 16 bytes per logit of the vocabulary shard
# (docs/research/memory-terms.md section 12)
LOSS_PARALLEL_BYTES = 4 + 4 + 4 + 4


def loss_bytes_per_token(model, tp: int, loss: str, sequence_parallel: bool,
                         stack: str = "megatron") -> float:
    """Bytes per token the output layer and loss hold at the end of the forward: the final
    norm's input and output (torchtitan's output layer saves its sequence-gathered input:
    ColwiseParallel(input_layouts=Shard(1))), and the logits (split over tensor-parallel
    ranks, a vocabulary-parallel output layer)."""
    if loss not in LOSSES:
        raise UserError(f"--loss must be one of {', '.join(LOSSES)}, got {loss!r}")
    a = model.arch
    sharded = tp if sequence_parallel and tp > 1 else 1
    gathered = stack == "torchtitan" and tp > 1
    norm = 2 * a.d_model / sharded + 2 * a.d_model / (1 if gathered else sharded)
    per_logit = LOSS_PARALLEL_BYTES if gathered and loss == "eager" else LOSS_BYTES[loss]
    return norm + per_logit * a.vocab_size / tp


def pipeline_buffers_per_token(model, tp: int, micro_batches: int, first: bool, last: bool,
                               stack: str, kept_outputs: bool = False,
                               in_flight: int = 0) -> float:
    """Bytes per token of one micro-batch that a pipeline stage's engine keeps beyond its
    layers' activations, times the micro-batches it keeps them for: none under Megatron (its
    schedule frees a sent output's data, deallocate_output_tensor, and receives into buffers
    it drops after use); under DeepSpeed's pipeline engine each of the `in_flight`
    micro-batches' outputs until its backward (stages before the last:
    `deepspeed_output_per_token`); under PyTorch's pipelining (torch/distributed/pipelining/stage.py
    PipelineStage._prepare_forward_infra and _prepare_backward_infra: buffers made for every
    micro-batch up front) a receive buffer for every micro-batch's input (stages after the
    first) with the gradient left on it until the next step, and one for its output's gradient
    (stages before the last). `kept_outputs`: the pipelining of late 2024 (torchtitan's
    December 2024 benchmark) also kept every output until the next step (output_chunks; on
    the last stage the bf16 logits; docs/research/memory-terms.md section 12); PyTorch keeps
    only the last stage's since pytorch#153383 (May 2025), and torchtitan asks for none since
    e5ef99aab (October 2025, `return_outputs=False`; docs/research/fsdp2-under-pp-memory.md
    section 2). Between the two (the last stage's logits alone) is not modelled."""
    if stack == "deepspeed":
        return 0.0 if last else in_flight * deepspeed_output_per_token(model, tp)
    if stack != "torchtitan" or micro_batches < 1:
        return 0.0
    hidden = 2 * model.arch.d_model / tp  # bf16, sequence-sharded
    per = 0.0
    if not first:
        per += 2 * hidden  # the input's receive buffer and its gradient
    if not last:
        per += hidden  # the output gradient's receive buffer
    if kept_outputs:  # every output until the next step: the logits on the last stage
        per += 2 * model.arch.vocab_size / tp if last else hidden
    return per * micro_batches


def embedding_kept_per_token(model, tp: int, sequence_parallel: bool) -> float:
    """Bytes per token of one micro-batch that the first stage's embedding keeps for its
    backward beside the layers' activations: no stack recomputes it (Megatron-LM's full
    recomputation checkpoints the transformer layers only; DeepSpeed's pipeline checkpoints
    only ParallelTransformerLayerPipe, deepspeed/runtime/pipe/module.py _is_checkpointable,
    "excludes the embedding layer"). Its output is the first layer's input, counted with the
    layer; beside it: the embedding dropout's mask (torch.nn.Dropout keeps a bool mask, one
    byte an element; under sequence parallelism Megatron scatters the embedding first,
    language_model.py Embedding.forward) where the model has dropout, and where the model has
    an embedding LayerNorm (BLOOM's --embed-layernorm, bigscience Megatron-DeepSpeed
    megatron/mpu/layers.py VocabParallelEmbedding: apex's MixedFusedLayerNorm on the reduced
    output) its bf16 input and fp32 mean and inverse deviation."""
    h = model.arch.d_model
    mask = h / (tp if sequence_parallel and tp > 1 else 1) if model.dropout else 0.0
    norm = 2 * h + 8 if model.arch.embed_layernorm else 0.0
    return mask + norm


def deepspeed_output_per_token(model, tp: int) -> float:
    """Bytes per token of one micro-batch that DeepSpeed's pipeline engine keeps of a stage's
    output until that micro-batch's backward (stages before the last): the output tensor in
    pipe_buffers['outputs'] (deepspeed/runtime/pipe/engine.py _exec_forward_pass), whose data
    is freed and replaced by its 1/TP partition where tensor parallelism partitions it
    (is_pipe_partitioned: PartitionedTensor keeps a clone of the local part). Megatron frees
    a sent output's data instead (deallocate_output_tensor)."""
    hidden = 2 * model.arch.d_model  # bf16
    return hidden / tp


@lru_cache(maxsize=4096)
def in_flight(stage: int, stages: int, micro_batches: int, layers: tuple[int, ...]) -> int:
    """The most layer-micro-batches `stage` holds at once (each micro-batch's activations
    through one of its model chunks, `layers[chunk]` layers), walking the order the schedule
    runs its forwards and backwards (simulator/layout/pipeline.py stage_order: Megatron-Core's 1F1B,
    p - s - 1 warm-up forwards, and its interleaved schedule). Without pipelining: one
    micro-batch through every layer."""
    import numpy as np

    from simulator.layout.pipeline import order_chunks

    if stages == 1:
        return sum(layers)
    forward, chunk = order_chunks(stage, stages, micro_batches, len(layers))
    held = np.cumsum(np.where(forward, 1, -1) * np.asarray(layers)[chunk])
    return int(held.max(initial=0))
