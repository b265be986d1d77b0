"""Forward and backward time from shapes (issue 18): GEMMs on a roofline, attention at
FlashAttention's measured throughput, elementwise kernels at HBM bandwidth.

A GEMM of F FLOPs moving B bytes (its three bf16 operands once) takes

    t = launch + ((F / (eta * peak))^n + (B / (hbm * mem_efficiency))^n)^(1/n)

a smooth maximum of the compute and memory rooflines: `eta` is the largest fraction of peak a
matmul reaches (stas00/ml-engineering's MAMF table, profile [roofline]), `launch` and `n` were
fitted on five square shapes of OpenXLA's H100 GEMM table and predict its 15 held-out
transformer shapes within 3.9% median, 13.2% max (bench/fidelity_gemm.py). Tile and wave
quantization are not modelled: the held-out error is what that costs.

Attention runs at the profile's forward and backward fractions of peak over FlashAttention's
FLOP count (causal: half the s x s products; backward 2.5x forward, FlashAttention-2 section
4.1). Both GEMM and attention peaks are benchmark figures; a whole training step sustains a
share of them, the profile's `sustained` (clocks under sustained load, shapes other than the
benchmarks'), fitted on per-layer times of Megatron-LM on A100 (bench/fidelity_parallel.py).
Memory-bound kernels move the bytes simulator/layout/shapes.py counts at HBM bandwidth times the
profile's [compute] mem_efficiency, each paying one launch.
"""

from __future__ import annotations

from dataclasses import dataclass

from profiles import HardwareProfile, ModelProfile, UserError
from simulator.layout.shapes import (
    DEFAULT_FP8_RECIPE,
    Gemm,
    Routing,
    eager_extra,
    fp8_casts,
    fp8_copies,
    head_shapes,
    layer_shapes,
    unfused_passes,
)
from simulator.step.block_scaling import gemm_slowdown
from simulator.step.host import moe_host_trace

ATTN_BWD_FLOPS = 2.5  # backward FLOPs per forward FLOP of FlashAttention (5 matmuls vs 2)
# the GEMMs of each module Megatron-Core's --recompute-modules runs again, by name prefix
# (simulator/layout/shapes.py names them; moe_act runs none, only the experts' activation)
MODULE_GEMMS = {"mla_up_proj": ("q up", "kv up"), "mlp": ("mlp ",), "moe_act": (),
                "shared_experts": ("shared ",), "moe": ("router", "experts ", "shared ")}


def fp8_rate(hw: HardwareProfile, recipe: str | None = None) -> float:
    """FLOP/s of an FP8 GEMM's benchmark peak (Transformer Engine's, with --fp8), under
    `recipe` (None: per-tensor scales; blockwise on Hopper runs slower,
    simulator/step/block_scaling.py); refused where the profile does not give it."""
    r = hw.roofline
    if hw.gpu.peak_fp8_tflops is None or r is None or r.fp8_gemm_peak_fraction is None:
        raise UserError(f"--fp8: {hw.name} gives no FP8 GEMM rate ([gpu] peak_fp8_tflops and "
                        "[roofline] fp8_gemm_peak_fraction)")
    return (r.fp8_gemm_peak_fraction * hw.gpu.peak_fp8_tflops * 1e12
            / gemm_slowdown(hw.arch, recipe))


def gemm_s(g: Gemm, hw: HardwareProfile, fp8: bool = False, recipe: str | None = None) -> float:
    """Seconds for one bf16 GEMM on this profile's GPU, or an FP8 one (`fp8`: its inputs one
    byte each, at the FP8 rate of `recipe`'s scaling; the output stays 16-bit)."""
    r = hw.roofline
    peak = (fp8_rate(hw, recipe) if fp8
            else r.gemm_peak_fraction * hw.gpu.peak_bf16_tflops * 1e12)
    compute = g.flops / (r.sustained * peak)
    memory = (g.bytes - (g.m * g.k + g.k * g.n) * g.batch if fp8 else g.bytes) / _hbm_Bps(hw)
    n = r.gemm_blend
    return r.gemm_launch_us * 1e-6 + (compute**n + memory**n) ** (1 / n)


def in_fp8(g: Gemm, scope: str) -> bool:
    """Whether an FP8 run (--fp8) runs GEMM `g` in FP8 under `scope` (names.py FP8_SCOPES):
    every linear's (`all`), or only the routed experts' grouped GEMMs (`experts`: torchtitan's
    --quantize.grouped_mm, the shapes' "experts in" / "experts out")."""
    return scope == "all" or g.name.startswith("experts")


def gemm_pass_s(g: Gemm, hw: HardwareProfile, fp8: bool, scope: str,
                recipe: str | None = None) -> tuple[float, float]:
    """(forward, backward) seconds of GEMM `g`: its product, and its two gradient products,
    in FP8 where an FP8 run (`fp8`) quantizes it under `scope` (`in_fp8`), scaled as
    `recipe` scales them (`fp8_rate`)."""
    q = fp8 and in_fp8(g, scope)
    return gemm_s(g, hw, q, recipe), sum(gemm_s(b, hw, q, recipe) for b in g.backward())


def _hbm_Bps(hw: HardwareProfile) -> float:
    return hw.gpu.hbm_bw_GBps * 1e9 * hw.compute.mem_efficiency


def attention_fractions(hw: HardwareProfile, kernel: str) -> tuple[float, float]:
    """Forward and backward shares of peak of the fused attention kernel: the profile's own
    (`flash`), or FlashAttention-2's where the profile gives it apart (`flash2`)."""
    r = hw.roofline
    if kernel == "flash":
        return r.attn_fwd_fraction, r.attn_bwd_fraction
    if r.attn_flash2_fwd_fraction is None:
        raise UserError(f"--attention flash2: {hw.name} gives no FlashAttention-2 rates "
                        "([roofline] attn_flash2_fwd_fraction, attn_flash2_bwd_fraction)")
    return r.attn_flash2_fwd_fraction, r.attn_flash2_bwd_fraction


@dataclass(frozen=True)
class PassTimes:
    """Seconds of one layer's (or the head's) forward and backward, and their parts."""

    fwd_s: float
    bwd_s: float
    parts: dict[str, float]  # gemm, attention, memory: forward + backward seconds


def host_launch_s(hw: HardwareProfile, cuda_graphs: bool, typed_us: float | None = None
                  ) -> float:
    """Seconds the host spends on one kernel of an eager pass, where that can hold the GPU
    back: the host time a kernel of Megatron-Core's MoE layer traced on a real GPU, scaled to
    this profile's host by its [compute] host_linear_us (simulator/step/host.py: the Python,
    PyTorch and CUDA work behind each launch); without that figure, the profile's host-side
    CUDA launch ([nccl] launch_us, fitted on nccl-tests' back-to-back calls: a C loop, a
    floor). 0 with CUDA graphs (a captured layer is one launch: Megatron-Core's
    --cuda-graph-impl, TE's make_graphed_callables) or where the profile has neither.
    `typed_us`: the user's own figure (a Kineto trace's launch times) instead of the
    profile's."""
    if cuda_graphs:
        return 0.0
    if typed_us is not None:
        return typed_us * 1e-6
    if hw.compute.host_linear_us is not None:
        return moe_host_trace().host_us(hw.compute.host_linear_us) * 1e-6
    if hw.nccl is None or hw.nccl.launch_us is None:
        return 0.0
    return hw.nccl.launch_us * 1e-6


def layer_times(model: ModelProfile, hw: HardwareProfile, micro_batch: int, seq_len: int,
                tp: int = 1, sequence_parallel: bool = False, attention: str = "flash",
                cp: int = 1, fp8: bool = False, routing: Routing | None = None,
                host_s: float = 0.0, eager: bool = False,
                fp8_recipe: str = DEFAULT_FP8_RECIPE, expert_loop: bool = True,
                fp8_scope: str = "all") -> PassTimes:
    """One transformer layer on one GPU: forward and backward (without recomputation).
    `attention`: flash (the profile's fused attention at its measured rates), flash2
    (FlashAttention-2's rates where the profile gives them apart) or unfused (the score
    and context products as batched GEMMs on the roofline, the softmax and, where the model
    keeps dropout, the dropout over the s x s scores at HBM bandwidth: Megatron-LM before
    FlashAttention, or Transformer Engine where no fused kernel takes the heads). A model with
    experts: the mean of its dense and MoE layers, each weighted by its count (`routing`
    routes the MoE layers' tokens). `host_s` (`host_launch_s`): the host's time per kernel
    launch; a pass waits for its host by what the traced blend of host and GPU time adds to
    the GPU's (`host_waits`: most where the two are alike; the pass's `host_wait`). `eager`:
    PyTorch runs the layer op by op (torchtitan without torch.compile): its elementwise kernels
    move what simulator/layout/shapes.py eager_extra counts on top of the fused ones.
    `fp8_recipe`: how an FP8 run scales its casts (simulator/layout/shapes.py FP8_RECIPES);
    `fp8_scope`: which GEMMs it quantizes (`in_fp8`). `expert_loop`: the
    stack runs each local expert's GEMMs and elementwise kernels one by one (Megatron-Core's
    SequentialMLP and Transformer Engine's GroupedLinear launch a GEMM an expert), so an
    eager MoE layer's host launches what simulator/step/host.py traced; False: one grouped
    GEMM for all of them (torchtitan's torch._grouped_mm), the fused count."""
    args = (model, hw, micro_batch, seq_len, tp, sequence_parallel, attention, cp, fp8)
    more = {"host_s": host_s, "eager": eager, "fp8_recipe": fp8_recipe,
            "fp8_scope": fp8_scope}
    if model.moe is None:
        return _layer_times(*args, **more)
    more["expert_loop"] = expert_loop
    w = model.moe_share
    dense = _layer_times(*args, **more) if w < 1 else None
    routed = _layer_times(*args, moe_layer=True, routing=routing, **more)
    if dense is None:
        return routed

    def mean(x: float, y: float) -> float:
        return (1 - w) * x + w * y

    return PassTimes(mean(dense.fwd_s, routed.fwd_s), mean(dense.bwd_s, routed.bwd_s),
                     {k: mean(dense.parts[k], routed.parts[k]) for k in dense.parts})


def _layer_times(model: ModelProfile, hw: HardwareProfile, micro_batch: int, seq_len: int,
                 tp: int, sequence_parallel: bool, attention: str, cp: int, fp8: bool,
                 moe_layer: bool = False, routing: Routing | None = None,
                 host_s: float = 0.0, eager: bool = False,
                 fp8_recipe: str = DEFAULT_FP8_RECIPE, expert_loop: bool = True,
                 fp8_scope: str = "all") -> PassTimes:
    s = layer_shapes(model, micro_batch, seq_len, tp, sequence_parallel, cp, moe_layer,
                     routing)
    r = hw.roofline
    peak = hw.gpu.peak_bf16_tflops * 1e12 * r.sustained  # FLOP/s a training step sustains
    launch = r.gemm_launch_us * 1e-6
    # --fp8: the layer's linear GEMMs in FP8, forward and both gradients (Transformer Engine's
    # recipe), or with --fp8-scope experts the routed experts' alone; attention and the output
    # layer stay 16-bit
    each = [gemm_pass_s(g, hw, fp8, fp8_scope, fp8_recipe)  # (s, s) in s.gemms' order
            for g in s.gemms]
    fwd_each = [f for f, _ in each]
    gemm_f, gemm_b = sum(fwd_each), sum(b for _, b in each)
    if attention in ("flash", "flash2"):
        fwd, bwd = attention_fractions(hw, attention)
        attn_f = launch + s.attention_flops / (fwd * peak)
        attn_b = launch + ATTN_BWD_FLOPS * s.attention_flops / (bwd * peak)
        attn_kernels = (1, 1)  # forward, backward
    else:
        passes = unfused_passes(model)  # softmax, and dropout where the model keeps it
        softmax = passes * launch + s.unfused_memory_bytes / _hbm_Bps(hw)
        attn_f = sum(gemm_s(g, hw) for g in s.unfused_gemms) + softmax
        attn_b = sum(gemm_s(b, hw) for g in s.unfused_gemms for b in g.backward()) + 2 * softmax
        attn_kernels = (len(s.unfused_gemms) + passes, 2 * len(s.unfused_gemms) + 2 * passes)
    kernels, moved = s.memory_kernels, s.memory_bytes
    if eager:  # op by op: the same values through more kernels, fp32 on the way
        more, extra = eager_extra(model, micro_batch * seq_len // cp, tp, sequence_parallel,
                                  moe_layer)
        moved, kernels = moved + more, kernels + extra
    mem_f = kernels * launch + moved / _hbm_Bps(hw)
    mem_b = 2 * mem_f  # each elementwise kernel's backward reads its input and output grads
    casts_f = casts_b = 0
    if fp8:  # the GEMMs' operands cast to 8 bits (shapes.fp8_casts), forward and backward
        cast_f, cast_b, casts_f, casts_b = fp8_casts(
            tuple(g for g in s.gemms if in_fp8(g, fp8_scope)), eager, fp8_recipe,
            fp8_copies(hw.arch, fp8_recipe))
        mem_f += casts_f * launch + cast_f / _hbm_Bps(hw)
        mem_b += casts_b * launch + cast_b / _hbm_Bps(hw)
    # the two norms alone (read h, write h per token each): what recomputing them costs
    tokens = micro_batch * seq_len // cp / (tp if sequence_parallel else 1)
    norm_f = 2 * launch + 2 * 2 * 2 * model.arch.d_model * tokens / _hbm_Bps(hw)
    # the kernels the host launches for the pass (the same ones the launch terms above count:
    # a GEMM each, two in the backward; the attention's; the elementwise ones, twice back),
    # and how long the GPU waits where the host launches them slower than it runs them
    # the forward of each module Megatron-Core's --recompute-modules can run again
    # (simulator/step/compute.py recompute_s): its GEMMs (MODULE_GEMMS), and the routed
    # experts' activation and, for the whole MoE layer, its tokens' permutes
    act_f = (launch + s.moe_act_bytes / _hbm_Bps(hw)) if moe_layer else 0.0
    permute_f = (3 * launch + s.moe_permute_bytes / _hbm_Bps(hw)) if moe_layer else 0.0
    modules = {f"{m}_fwd": sum(t for g, t in zip(s.gemms, fwd_each, strict=True)
                               if g.name.startswith(prefixes))
               for m, prefixes in MODULE_GEMMS.items()}
    modules["moe_act_fwd"] += act_f
    modules["moe_fwd"] += act_f + permute_f
    gpu_f, gpu_b = gemm_f + attn_f + mem_f, gemm_b + attn_b + mem_b
    kernels_f = len(s.gemms) + attn_kernels[0] + kernels + casts_f
    kernels_b = 2 * len(s.gemms) + attn_kernels[1] + 2 * kernels + casts_b
    if moe_layer and expert_loop and host_s > 0:
        kernels_f, kernels_b = _traced_moe_kernels(model, s, routing, kernels_f, kernels_b)
    wait_f, wait_b = host_waits(kernels_f * host_s, kernels_b * host_s, gpu_f, gpu_b)
    return PassTimes(gpu_f + wait_f, gpu_b + wait_b,
                     {"gemm": gemm_f + gemm_b, "attention": attn_f + attn_b,
                      "memory": mem_f + mem_b, "attention_fwd": attn_f,
                      "attention_bwd": attn_b, "gemm_fwd": gemm_f, "memory_fwd": mem_f,
                      "norm_fwd": norm_f, "host_wait": wait_f + wait_b, **modules})


def host_waits(host_f: float, host_b: float, gpu_f: float, gpu_b: float
               ) -> tuple[float, float]:
    """(forward, backward) seconds a pass's GPU waits for its host: the forward and backward
    together take the traced blend of their host and GPU times (simulator/step/host.py
    `MoeHostTrace.pass_s`, fitted on whole traced passes, forward and backward), over the
    GPU's own time; shared between the two by their host time."""
    host = host_f + host_b
    if host <= 0.0:
        return 0.0, 0.0
    wait = moe_host_trace().pass_s(host, gpu_f + gpu_b) - (gpu_f + gpu_b)
    return wait * host_f / host, wait * host_b / host


def _traced_moe_kernels(model: ModelProfile, s, routing: Routing | None, kernels_f: float,
                        kernels_b: float) -> tuple[float, float]:
    """The kernels an eager MoE layer's host launches: the fused count's MoE part (the router,
    shared and experts' GEMMs, once forward and twice back, and the 4 routing kernels
    layer_shapes adds) swapped for what Megatron-Core's MoE layer launched over this rank's
    local experts in the trace (simulator/step/host.py)."""
    r = routing or Routing()
    moe_gemms = sum(g.name.startswith(MODULE_GEMMS["moe"]) for g in s.gemms)
    traced_f, traced_b = moe_host_trace().kernels(model.moe.n_experts // r.ep,
                                                  model.moe.shared_width > 0)
    return (kernels_f - (moe_gemms + 4) + traced_f,
            kernels_b - 2 * (moe_gemms + 4) + traced_b)


# Bytes one cross-entropy pass of PyTorch moves per logit when a trainer computes a training
# metric on bf16 logits under autocast (torch.nn.CrossEntropyLoss -> log_softmax, on autocast's
# fp32 list): the fp32 copy of the logits (read 2, write 4), then log_softmax's rows, too long
# for shared memory at vocabulary sizes (50,368 x 4 B > an A100's or H100's 164/228 KB), read
# three times (max, sum of exponentials, output) and written once (12 + 4); the gather of the
# target's entry is negligible. Two kernels a pass. Composer runs every declared training
# metric on each micro-batch's logits (composer/trainer/trainer.py _train_microbatch, after
# AFTER_BACKWARD: `if self.state.train_metrics ...: self._eval_train_metrics(device_batch)`),
# and llm-foundry's MPT declares two, LanguageCrossEntropy and LanguagePerplexity, each a
# torch CrossEntropyLoss (composer/metrics/nlp.py); llm-foundry added `use_train_metrics`
# (default on) in PR #642, 2023-10-02. Counted from the kernels, not fitted; found after the
# MPT rows of the published steps were seen too fast (bench/step_loso.py, said in
# profiles/external/parallel-steps.csv).
METRIC_CE_BYTES = 2 + 4 + 3 * 4 + 4
METRIC_CE_KERNELS = 2


def metric_pass_s(model: ModelProfile, hw: HardwareProfile, tokens: float, tp: int = 1
                  ) -> float:
    """Seconds of one training-metric cross-entropy pass over `tokens` tokens' logits."""
    launch = hw.roofline.gemm_launch_us * 1e-6 if hw.roofline is not None else 0.0
    return (METRIC_CE_KERNELS * launch
            + METRIC_CE_BYTES * tokens * model.arch.vocab_size / tp / _hbm_Bps(hw))


def head_times(model: ModelProfile, hw: HardwareProfile, micro_batch: int, seq_len: int,
               tp: int = 1, cp: int = 1, metric_passes: int = 0) -> PassTimes:
    """The logit layer and its cross-entropy on one GPU; `metric_passes` more cross-entropy
    passes over the logits, forward only (a trainer's training metrics, METRIC_CE_BYTES)."""
    s = head_shapes(model, micro_batch, seq_len, tp, cp)
    launch = hw.roofline.gemm_launch_us * 1e-6
    gemm_f = gemm_s(s.gemm, hw)
    gemm_b = sum(gemm_s(b, hw) for b in s.gemm.backward())
    mem = 2 * launch + s.memory_bytes / _hbm_Bps(hw)  # softmax forward, its gradient backward
    metrics = metric_passes * metric_pass_s(model, hw, micro_batch * seq_len / cp, tp)
    return PassTimes(gemm_f + mem + metrics, gemm_b + mem,
                     {"gemm": gemm_f + gemm_b, "attention": 0.0, "memory": 2 * mem + metrics,
                      "attention_fwd": 0.0, "attention_bwd": 0.0})
