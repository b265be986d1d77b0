"""Tensor-parallel communication per layer, exposed or overlapped with the GEMMs beside it.

Megatron's tensor parallelism with sequence parallelism (Korthikanti et al. 2022, section 4.2.2)
runs, per layer and pass, an all-gather of the b s h activations before each column-parallel
GEMM (QKV, MLP in) and a reduce-scatter after each row-parallel one (attention out, MLP out):
run plainly, two all-reduces' worth each pass, and the compute stream waits for them.

Transformer Engine's userbuffers overlap (Megatron-Core `--tp-comm-overlap`, NeMo
`ub_tp_comm_overlap`, which NVIDIA's dgxc-benchmarking recipes for GPT-3 175B and Nemotron-4
turn on) hides them behind GEMMs, by its default methods (`initialize_ub` in
transformer_engine/pytorch/module/base.py, read, not copied):
- ring exchange (`qkv_fprop`, `fc1_fprop`, `proj_dgrad`, `fc2_dgrad`): the all-gather's
  tp - 1 point-to-point steps against the GEMM in tp chunks, the first on the local shard;
- pipeline (`proj_fprop`, `fc2_fprop`, `num_splits` 4): the GEMM in 4 chunks, each chunk's
  reduce-scatter beside the next chunk, the last one's exposed;
- bulk (`qkv_dgrad`/`fc1_dgrad`: the all-gather of the layer's input for the weight gradient
  beside the data-gradient GEMM; `qkv_wgrad`/`fc1_wgrad`: the data gradient's reduce-scatter
  beside the weight-gradient GEMM): the whole collective beside the whole GEMM.
Each collective is priced as a ring on the group's own links (the ring exchange is
point-to-point: no NVLS). With FP8 the all-gathers move one byte a value and the GEMMs run at
the FP8 rate, with the overlap or without it. What the overlap
costs the GEMMs (the SMs its copies hold, smaller GEMM tiles) is not modelled: a profile's
sustained share, fitted on whole steps that ran with it, carries it.

torchtitan's async tensor parallelism (`enable_async_tensor_parallel`: PyTorch's micro-pipeline
TP, an Inductor pass over the compiled forward and backward graphs) overlaps less
(`_torchtitan_passes`): it fuses an all-gather into the matmuls that consume it and a matmul
into the reduce-scatter of its output, each in tp chunks, and nothing else; no collective runs
beside an unrelated GEMM as Transformer Engine's bulk method does.

Recomputation runs collectives again where the recomputed ops need their outputs: a fully
recomputed layer all of its forward's; torchtitan's op-level selective checkpointing the
sequence-parallel all-gathers of a Llama-family layer (`sac_regathers`).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from simulator.layout.shapes import ACT_BYTES, Gemm, layer_shapes
from simulator.network.collective import calibrated
from simulator.network.engine import PhaseCache, time_alone
from simulator.network.topology import build_topology
from simulator.step.compute import pricing
from simulator.step.profile_memo import ProfileMemo
from simulator.step.roofline import _hbm_Bps, gemm_s

PIPELINE_SPLITS = 4  # Transformer Engine's default num_splits for the pipeline method


def tp_collective_s(cfg, op: str, algo: str, value_bytes: float | None = None) -> float:
    """One collective of a layer's activations (b s h of this context-parallel rank's tokens,
    `value_bytes` each, default the activations' width) on a tensor-parallel group, on its
    node's links alone; `algo` as NCCL would run it there (auto: NVLS on an NVSwitch node with
    [nccl]) or forced."""
    if cfg.tp == 1:
        return 0.0
    size = cfg.activation_values * (cfg.dtypes.param_bytes if value_bytes is None
                                    else value_bytes)
    # the planner asks the same collective for every scheme of a layout
    return TP_COLLECTIVES.get(cfg.hardware, (op, algo, cfg.tp, size),
                              lambda: _tp_collective_s(cfg.hardware, op, algo, cfg.tp, size))


def _tp_collective_s(hw, op: str, algo: str, tp: int, size: float) -> float:
    node = build_topology(hw, tp)  # past an NVLink domain: whole domains, over the network
    c = calibrated(hw, op, algo, tp, size, nodes=node.nodes)
    phases = c.applied(PhaseCache(node).phases(op, c.algo, [np.arange(tp)], c.moved))
    # no launch floor inside a step: the host enqueues ahead of the GPU (the floor is what
    # nccl-tests' back-to-back calls measure)
    return max(time_alone(node, phases), c.min_s) + c.overhead_s


TP_COLLECTIVES = ProfileMemo()  # tp_collective_s's answers


def _gemm_time(g: Gemm, cfg) -> float:
    """A GEMM's time as the step's compute model prices it: from its shape on a [roofline]
    profile, else its FLOPs at the MFU forward and backward run at."""
    mfu, _ = pricing(cfg.model, cfg.hardware, cfg.mfu)
    if mfu is None:
        return gemm_s(g, cfg.hardware, cfg.fp8, cfg.cast_recipe)
    return g.flops / (cfg.hardware.gpu.peak_bf16_tflops * 1e12 * mfu)


def _ag_width(cfg) -> int | None:
    """Bytes a value of the layer's all-gathers: one with FP8 (TE gathers the FP8-cast input,
    its overlap buffers too: initialize_ub "AllGather buffers use fp8 when using fp8 recipe";
    torchao's float8 TP alike), else the activations' width (None); reduce-scatters stay
    16-bit."""
    return 1 if cfg.fp8 else None


def _ring(comm_s: float, gemm: float, tp: int) -> float:
    """Exposed by a ring exchange: each of the tp - 1 steps waits for the slower of its
    transfer and its GEMM chunk (the first chunk, local, waits for nothing)."""
    return (tp - 1) * max(0.0, comm_s / (tp - 1) - gemm / tp)


def _pipeline(comm_s: float, gemm: float, splits: int = PIPELINE_SPLITS) -> float:
    """Exposed by the pipeline method: the last chunk's reduce-scatter, and any chunk's that
    outlasts the next GEMM chunk."""
    return comm_s / splits + (splits - 1) * max(0.0, comm_s / splits - gemm / splits)


def _bulk(comm_s: float, gemm: float) -> float:
    """Exposed by the bulk method: what the collective takes beyond the GEMM beside it."""
    return max(0.0, comm_s - gemm)


def layer_tp_s(cfg) -> tuple[float, float]:
    """Seconds the compute stream spends on one layer's tensor-parallel communication in the
    forward and in the backward: without sequence parallelism two all-reduces each pass (as
    NCCL runs them: NVLS on an NVSwitch node with [nccl]); with it two all-gathers and two
    reduce-scatters (Megatron's sequence parallelism issues those, not all-reduces, so NCCL's
    NVLS all-reduce does not price them), the all-gathers of FP8 values with `cfg.fp8`
    (Transformer Engine gathers the FP8-cast input); or with `cfg.tp_comm_overlap` what its
    overlap leaves exposed. A fully recomputed layer runs its forward's collectives again in
    the backward."""
    if cfg.tp == 1:
        return 0.0, 0.0
    fwd, bwd = _passes(cfg)
    return fwd, bwd + (fwd if cfg.recompute == "full" else _regathers_s(cfg))


def sac_regathers(cfg) -> float:
    """All-gathers per layer that torchtitan's op-level selective checkpointing runs again in
    the backward. Its policy (torchtitan models/llama3/infra/parallelize.py @f4048f8e, June
    2025, `_save_list` and `_custom_policy`; torchtitan/distributed/activation_checkpoint.py
    at HEAD keeps the same save list) saves every matmul but every second one, the attention,
    and the reduce-scatters' outputs, and recomputes everything else: the key projection and
    SwiGLU's w3, the second and sixth matmuls of a layer, are recomputed, and their input is
    the sequence-parallel all-gather of the normed activations, which is not saved, so both
    of the layer's all-gathers run again. A MoE layer gathers its input too (torchtitan
    `apply_moe_ep_tp`: experiments/llama4/infra/parallelize.py @f4048f8e, models/llama4/infra/
    parallelize.py @eca011c0: "moe":
    PrepareModuleInputOutput from Shard(1) to Replicate in, Partial to Shard(1) out, "all-gather
    for input, reduce-scatter for output"), and its recomputed matmuls need that input (the
    router's gate is the fifth matmul, saved; the shared expert's w1 the sixth, recomputed;
    routed experts recompute from the gathered tokens): both of its all-gathers run again as
    well (what the experts' own recomputation costs is not modelled). A GPT-family layer
    (fused QKV saved, its second MLP matmul recomputed from the saved first one's output)
    gathers nothing again. 0 for other stacks and policies, or without sequence parallelism."""
    if (cfg.stack != "torchtitan" or cfg.recompute != "selective-op" or cfg.tp == 1
            or not cfg.sequence_parallel or cfg.model.family == "gpt"):
        return 0.0
    return 2.0


def _regathers_s(cfg) -> float:
    """Seconds the backward's recomputation spends on `sac_regathers` all-gathers: each
    exposed as a plain all-gather, or with the overlap on, exposed as the ring exchange leaves
    it beside the recomputed GEMM it feeds (the key projection's share of the QKV GEMM, half
    of the MLP's input GEMM)."""
    n = sac_regathers(cfg)
    if n == 0:
        return 0.0
    dense = n - 1  # of the n, the MLP's or the MoE's (the attention's is the other)
    width = _ag_width(cfg)
    if not cfg.tp_comm_overlap:
        return n * tp_collective_s(cfg, "all_gather", cfg.algo, width)
    ag = tp_collective_s(cfg, "all_gather", "ring", width)
    gemms = layer_shapes(cfg.model, cfg.micro_batch, cfg.seq, cfg.tp, True, cfg.cp).gemms
    qkv, fc1 = gemms[0], gemms[-2]
    a = cfg.model.arch
    kv = a.n_kv_heads * a.head_dim
    key = replace(qkv, n=max(1, round(qkv.n * kv / (a.n_heads * a.head_dim + 2 * kv))))
    up = replace(fc1, n=max(1, fc1.n // 2))  # w3, one of the gate/up pair fc1 holds
    return (_ring(ag, _gemm_time(key, cfg), cfg.tp)
            + dense * _ring(ag, _gemm_time(up, cfg), cfg.tp))


def tp_bytes_per_layer(cfg) -> float:
    """Bytes one GPU sends in one layer's tensor-parallel collectives per micro-batch: four
    all-reduces' worth (a ring's 2 (t - 1) / t of the activations each), six where the forward
    is recomputed whole; with FP8 and sequence parallelism their all-gather halves move one
    byte a value."""
    if cfg.tp == 1:
        return 0.0
    reduces = 6 if cfg.recompute == "full" else 4
    if cfg.fp8 and cfg.sequence_parallel:
        reduces *= (1 + 1 / cfg.dtypes.param_bytes) / 2
    width = _ag_width(cfg) or cfg.dtypes.param_bytes  # the re-gathers' values (sac_regathers)
    return ((reduces * 2 * cfg.dtypes.param_bytes + sac_regathers(cfg) * width)
            * (cfg.tp - 1) / cfg.tp * cfg.activation_values)


def _passes(cfg) -> tuple[float, float]:
    """`layer_tp_s` of one forward and one backward, without recomputation."""
    ag_width = _ag_width(cfg)
    if not cfg.tp_comm_overlap:
        if cfg.sequence_parallel:
            pair = (tp_collective_s(cfg, "all_gather", cfg.algo, ag_width)
                    + tp_collective_s(cfg, "reduce_scatter", cfg.algo))
            return 2 * pair, 2 * pair
        allreduce = tp_collective_s(cfg, "all_reduce", cfg.algo)
        return 2 * allreduce, 2 * allreduce
    if cfg.stack == "torchtitan":
        return _torchtitan_passes(cfg)
    ag = tp_collective_s(cfg, "all_gather", "ring", ag_width)
    rs = tp_collective_s(cfg, "reduce_scatter", "ring")
    qkv, proj, fc1, fc2 = _overlapped_gemms(cfg)
    t = cfg.tp

    def dgrad(g: Gemm) -> float:
        return _gemm_time(g.backward()[0], cfg)

    def wgrad(g: Gemm) -> float:
        return _gemm_time(g.backward()[1], cfg)

    fwd = (_ring(ag, _gemm_time(qkv, cfg), t) + _pipeline(rs, _gemm_time(proj, cfg))
           + _ring(ag, _gemm_time(fc1, cfg), t) + _pipeline(rs, _gemm_time(fc2, cfg)))
    bwd = (_ring(ag, dgrad(proj), t) + _ring(ag, dgrad(fc2), t)
           + sum(_bulk(ag, dgrad(g)) + _bulk(rs, wgrad(g)) for g in (qkv, fc1)))
    return fwd, bwd


def _overlapped_gemms(cfg) -> tuple[Gemm, Gemm, Gemm, Gemm]:
    """(QKV, attention out, MLP in, MLP out): the column-parallel input GEMMs and row-parallel
    output GEMMs an overlap pairs with a layer's collectives (latent attention's first
    projection stands for its QKV)."""
    gemms = layer_shapes(cfg.model, cfg.micro_batch, cfg.seq, cfg.tp, True, cfg.cp).gemms
    return gemms[0], next(g for g in gemms if g.name == "attn out"), gemms[-2], gemms[-1]


def partials_sum_s(cfg) -> float:
    """Seconds of the local sum after one micro-pipelined matmul + reduce-scatter: PyTorch's
    `_fused_matmul_reduce_scatter_impl` (torch/distributed/_symmetric_memory/__init__.py,
    via `_pipelined_produce_and_all2all`) pulls each peer's partial chunk into a stacked
    [tp, M/tp, N] buffer in the matmul's 16-bit output dtype (FP8 GEMMs too) and sums it
    over tp in one kernel: it reads the b s h activations' partials whole and writes a tp-th
    of them, on the compute stream, where NCCL's reduce-scatter reduces inside its own kernel."""
    return (1 + 1 / cfg.tp) * cfg.activation_values * ACT_BYTES / _hbm_Bps(cfg.hardware)


def _torchtitan_passes(cfg) -> tuple[float, float]:
    """`_passes` under torchtitan's async TP, as PyTorch's micro-pipeline pass runs a Llama
    layer (torch/_inductor/fx_passes/micro_pipeline_tp.py, applied to the forward and the
    backward graph alike; read at pytorch/pytorch 5f65158a, not copied):
    - an all-gather feeding matmuls (`fused_all_gather_matmul`: the attention's input into wq,
      wk, wv; the MLP's into w1, w3; in the backward the output gradient into wo's and w2's
      data gradients) runs in tp chunks, the local shard's first, each peer's shard copied
      while the previous one multiplies: a ring exchange (`_ring`);
    - a matmul whose output alone is reduce-scattered (`fused_matmul_reduce_scatter`: wo and
      w2 forward) runs in tp chunks, each copied to its owner while the next computes (a
      ring again), then sums the partials (`partials_sum_s`);
    - the backward's input-gradient reduce-scatters of the attention and the MLP are not
      fused: torchtitan's plan gathers each module's input once (parallelize_llama.py
      `prepare_module_input` for "attention" and "feed_forward"), so that gradient is the sum
      of wq's, wk's and wv's (w1's and w3's) data gradients, not one matmul's output, and the
      pass matches only a reduce-scatter of one matmul (`find_reduce_scatter_patterns`):
      each runs as without async TP, on the compute stream's path;
    - nothing gathers the input again for the weight gradients (Transformer Engine's bulk
      overlap): the forward's gathered input is saved, or recomputed by the recomputed forward
      with its own fused gather (`sac_regathers`, `layer_tp_s`).
    """
    ag = tp_collective_s(cfg, "all_gather", "ring", _ag_width(cfg))
    rs = tp_collective_s(cfg, "reduce_scatter", "ring")
    qkv, proj, fc1, fc2 = _overlapped_gemms(cfg)
    t = cfg.tp
    summed = partials_sum_s(cfg)
    fwd = (_ring(ag, _gemm_time(qkv, cfg), t) + _ring(rs, _gemm_time(proj, cfg), t)
           + _ring(ag, _gemm_time(fc1, cfg), t) + _ring(rs, _gemm_time(fc2, cfg), t)
           + 2 * summed)
    bwd = (_ring(ag, _gemm_time(proj.backward()[0], cfg), t)
           + _ring(ag, _gemm_time(fc2.backward()[0], cfg), t)
           + 2 * tp_collective_s(cfg, "reduce_scatter", cfg.algo))
    return fwd, bwd
