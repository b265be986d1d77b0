"""Kernel time models: forward/backward from FLOPs, memory-bound kernels from bytes moved.

Forward FLOPs per token follow Narayanan et al. 2021 (Megatron-LM, SC'21, section 5.1):
2 FLOPs per multiply-accumulate over every weight matrix (the layers and the logit layer) plus
the attention score and value products, 2 * 2 * s * h per layer per token (Megatron counts the
full s x s product). Backward costs twice the forward. With an MFU (given, measured or the
profile's [compute] mfu), time = FLOPs / (peak BF16 * MFU); profiles with a [roofline] table
price forward and backward from the model's shapes instead (simulator/step/roofline.py).

Memory-bound kernels (optimizer updates, selection, packing, quantization) take
bytes moved / (HBM bandwidth * memory efficiency); bytes per element are counted below.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from profiles import HardwareProfile, ModelProfile, UserError
from simulator.layout.shapes import DEFAULT_FP8_RECIPE, FP8_RECIPES, Routing, layer_shapes
from simulator.step.roofline import (
    MODULE_GEMMS,
    fp8_rate,
    head_times,
    host_launch_s,
    layer_times,
    metric_pass_s,
)
from vocabulary.names import ATTENTION, FP8_SCOPES, KERNEL_BYTES
from vocabulary.recompute import check as check_recompute
from vocabulary.recompute import modules_of

# Kernel kinds and their HBM bytes per element are vocabulary/names.py's KERNEL_BYTES; a host
# op's launch (CPU-side dispatch, elements = launches) is priced at:
HOST_OP_S = 10e-6
HOST_OP_SOURCE = ("assumption inside the cited range: 'the before-kernel total: ~5-25 us of "
                  "CPU-side work per op' (Python, pybind11, autograd and ATen dispatch, "
                  "cudaLaunchKernel), https://jiahuanglin.xyz/all_lessons/gpu_kernel_serving/"
                  "18_pytorch_to_kernel.html; to be replaced by a GPU measurement")


@dataclass(frozen=True)
class ComputeTimes:
    """Per micro-batch forward and backward times of one GPU (tensor-parallel shard): the
    whole model, and one layer and the output head apart (pipeline stages hold some layers)."""

    fwd_s: float
    bwd_s: float  # with the recomputation it asks for
    flops_per_step_per_gpu: float  # forward + backward, all micro-batches, model FLOPs
    layer_fwd_s: float = 0.0
    layer_bwd_s: float = 0.0
    head_fwd_s: float = 0.0
    head_bwd_s: float = 0.0
    # one layer's attention core, forward and backward (recomputation not included): what a
    # context-parallel ring exchange overlaps (simulator/step/cp_comm.py)
    attn_fwd_s: float = 0.0
    attn_bwd_s: float = 0.0
    how: str = ""  # "roofline" or the MFU it ran at, and where that came from
    parts: dict = field(default_factory=dict)  # roofline: gemm/attention/memory seconds


def forward_flops_per_token(model: ModelProfile, seq_len: int) -> float:
    """A token's forward FLOPs: over the weights it touches (a MoE layer's top-k experts, not
    all of them) and its score and value products."""
    a = model.arch
    matmul = 2 * (a.n_layers * model.active_layer_params + a.vocab_size * a.d_model)
    attention = 2 * 2 * a.n_layers * seq_len * a.n_heads * model.attn_head_dim
    return matmul + attention


def model_flops_per_step(model: ModelProfile, sequences: int, seq_len: int) -> float:
    """The model's FLOPs of one step, as published runs count them for TFLOP/s per GPU and
    MFU: forward and backward (3 x forward_flops_per_token) of every token, without
    recomputation."""
    return 3 * forward_flops_per_token(model, seq_len) * sequences * seq_len


def model_flops_utilisation(model: ModelProfile, hw: HardwareProfile, sequences: int,
                            seq_len: int, gpus: int, step_s: float) -> float:
    """Model FLOPs utilisation: the model's FLOP/s per GPU (model_flops_per_step) over the
    profile's dense BF16 peak ([gpu] peak_bf16_tflops), as MFU is quoted (Chowdhery et al.
    2022, PaLM appendix B; NeMo's and torchtitan's MFU), FP8 runs included."""
    return model_flops_per_step(model, sequences, seq_len) / (
        gpus * step_s * hw.gpu.peak_bf16_tflops * 1e12)


def pricing(model: ModelProfile, hw: HardwareProfile, mfu: float | None = None
            ) -> tuple[float | None, str]:
    """(the MFU forward and backward run at, or None for shapes; how that was decided): the
    user's `mfu`, else one the profile measured or fitted for this model, else the profile's
    shapes model ([roofline]), else its [compute] mfu."""
    if mfu is not None:
        return mfu, f"mfu {mfu:g} (given)"
    if model.name in hw.model_mfu:
        return hw.model_mfu[model.name], f"mfu {hw.model_mfu[model.name]:.4g} ([model_mfu])"
    if hw.roofline is not None:
        return None, "shapes ([roofline])"
    return hw.compute.mfu, f"mfu {hw.compute.mfu:g} ([compute])"


def check_fp8(model: ModelProfile, hw: HardwareProfile, mfu: float | None = None) -> None:
    """Refuse --fp8 where it cannot be priced: forward and backward priced by an MFU (one rate
    for every kernel, `pricing`), or a profile without an FP8 GEMM rate (`fp8_rate`)."""
    rate, how = pricing(model, hw, mfu)
    if rate is not None:
        raise UserError(f"--fp8 prices the layers' GEMMs from their shapes; forward and backward "
                        f"are priced here by {how}, one rate for every kernel: leave --fp8 out, "
                        "or price from shapes (no --mfu, a profile with [roofline])")
    fp8_rate(hw)


def fp8_recipe_or_default(given: str | None) -> str:
    """The FP8 recipe a run's casts are priced with: the one given, else Megatron-LM's
    default."""
    return DEFAULT_FP8_RECIPE if given is None else given


def fp8_scope_or_default(given: str | None) -> str:
    """Which GEMMs an FP8 run runs in FP8: the scope given, else every linear layer's
    (Transformer Engine's fp8_autocast around the whole model, as Megatron-Core runs it)."""
    return "all" if given is None else given


def check_fp8_scope(model: ModelProfile, given: str | None, fp8: bool = True) -> None:
    """Refuse an FP8 scope given without --fp8, one this tool does not know, or `experts` on
    a model without routed experts."""
    if given is None:
        return
    if not fp8:
        raise UserError(f"--fp8-scope {given} says which GEMMs an FP8 run quantizes: give "
                        "--fp8 too")
    if given not in FP8_SCOPES:
        raise UserError(f"--fp8-scope must be one of {', '.join(FP8_SCOPES)}, got {given!r}")
    if given == "experts" and model.moe is None:
        raise UserError(f"--fp8-scope experts quantizes the routed experts' GEMMs; "
                        f"{model.name} has no experts: give --fp8-scope all (or leave it out)")


def check_fp8_recipe(hw: HardwareProfile, given: str | None, fp8: bool = True) -> None:
    """Refuse an FP8 recipe given without --fp8, one this tool does not know, or one the GPU
    cannot run: MXFP8's block scales are applied inside Blackwell's tensor cores (fifth
    generation; Hopper has no MXFP8 GEMM: Megatron-LM
    docs/discussions/deepseek-v3-gb200-optimization, section 1), so --fp8-recipe mxfp8 needs
    a profile whose GPU is a Blackwell ([nccl] arch)."""
    if given is not None and not fp8:
        raise UserError(f"--fp8-recipe {given} says how an FP8 run scales its tensors: give "
                        "--fp8 too")
    if not fp8:
        return
    recipe = fp8_recipe_or_default(given)
    if recipe not in FP8_RECIPES:
        raise UserError(f"--fp8-recipe must be one of {', '.join(FP8_RECIPES)} (Megatron-LM's "
                        f"names), got {recipe!r}")
    arch = hw.arch
    if recipe == "mxfp8" and arch != "blackwell":
        what = arch or "of an architecture its profile does not say ([nccl] arch)"
        raise UserError(f"--fp8-recipe mxfp8 needs Blackwell tensor cores (MXFP8 GEMMs); "
                        f"{hw.name}'s GPU is {what}: give tensorwise, delayed or blockwise, "
                        "or a Blackwell profile (dgx-b200, gb200-nvl72)")


def unsaved_gemm_share(model: ModelProfile) -> float:
    """The share of a layer's linear FLOPs in the matmuls torchtitan's op-level selective
    checkpointing recomputes (every second one: K, the output projection, and the up
    projection in SwiGLU or the MLP's second GEMM in a GPT layer)."""
    a = model.arch
    h, f, kv = a.d_model, a.d_ff, a.n_kv_heads * a.head_dim
    if model.family == "gpt":  # fused QKV (saved), projection, fc1 (saved), fc2
        return (h * h + f * h) / (3 * h * h + h * h + 2 * f * h)
    return (h * kv + h * h + h * f) / (h * (h + 2 * kv) + h * h + 3 * h * f)


def module_share(model: ModelProfile, module: str) -> float:
    """The share of a mean layer's linear FLOPs in a module's GEMMs (priced at an MFU, where
    no per-kernel time exists): the dense and MoE layers weighted by their counts, even
    routing."""
    def share(moe_layer: bool) -> float:
        gemms = layer_shapes(model, 1, model.arch.seq_len, moe_layer=moe_layer).gemms
        own = sum(g.flops for g in gemms if g.name.startswith(MODULE_GEMMS[module]))
        return own / sum(g.flops for g in gemms) if own else 0.0

    if model.moe is None:
        return share(False)
    w = model.moe_share
    return (1 - w) * share(False) + w * share(True)


def recompute_s(model: ModelProfile, recompute: str, layer_f: float, attn_f: float,
                parts: dict | None) -> float:
    """Seconds a layer's backward adds to recompute what the policy did not keep
    (simulator/memory/activations.py): the attention core (Megatron's selective, Korthikanti et
    al. 2022 section 5), with the norms too (Megatron-Core's --recompute-modules layernorm),
    the forward of each module Megatron-Core's --recompute-modules names (latent attention's
    up-projections, the dense MLP, the shared expert, the MoE layer, the experts' activation:
    their GEMMs and elementwise kernels, simulator/step/roofline.py), the unsaved matmuls
    and every elementwise kernel (torchtitan's op-level policy), or the whole forward.
    `parts`: the shapes model's per-layer parts (None: priced at an MFU, where the matmuls
    stand for the whole layer but attention)."""
    if recompute in ("none", "full"):
        return 0.0 if recompute == "none" else layer_f
    modules = modules_of(recompute)
    if modules is not None:  # Megatron's selective: each module's forward again
        t = attn_f if "core_attn" in modules else 0.0
        if "layernorm" in modules:
            t += parts["norm_fwd"] if parts else 0.0
        # the MoE layer recomputed whole runs its shared expert and activation in it
        inside = {"shared_experts", "moe_act"} if "moe" in modules else set()
        for m in sorted(modules - {"core_attn", "layernorm"} - inside):
            t += parts[f"{m}_fwd"] if parts else module_share(model, m) * (layer_f - attn_f)
        return t
    share = unsaved_gemm_share(model)
    if parts:
        return share * parts["gemm_fwd"] + parts["memory_fwd"]
    return share * (layer_f - attn_f)


def fwd_bwd(
    model: ModelProfile, hw: HardwareProfile, micro_batch: int, seq_len: int, tp: int = 1,
    grad_accum: int = 1, *, mfu: float | None = None, recompute: str = "none",
    sequence_parallel: bool = False, attention: str = "flash", cp: int = 1, fp8: bool = False,
    metric_passes: int = 0, routing: Routing | None = None, cuda_graphs: bool = False,
    host_launch_us: float | None = None, eager: bool = False,
    fp8_recipe: str = DEFAULT_FP8_RECIPE, accum_pass_bytes: float = 0.0,
    expert_loop: bool = True, fp8_scope: str = "all",
) -> ComputeTimes:
    """Forward and backward time of one micro-batch on one GPU (tensor parallel degree `tp`).

    From the model's shapes where the profile has a [roofline] table (simulator/step/roofline.py),
    unless an MFU is given (`mfu`, the user's override) or the profile measured or fitted one
    for this model ([model_mfu]); from FLOPs at that MFU otherwise. Recomputation adds to the
    backward: `full` the layers' forward, `selective` the attention core's (Korthikanti et al.
    2022, section 5). `cp` context-parallel ranks each run seq_len / cp tokens of the
    micro-batch (simulator/layout/shapes.py layer_shapes). `fp8`: the layers' linear GEMMs at the
    profile's FP8 rate (shapes only: simulator/step/roofline.py gemm_s). `metric_passes`: a
    trainer's extra cross-entropy passes over the logits (simulator/step/roofline.py head_times),
    priced on the output layer's forward. `routing`: how a MoE model's tokens reach its
    experts (expert parallelism and load; simulator/layout/shapes.py moe_work), which sets the
    grouped expert GEMMs' shapes; at an MFU a token's top-k experts count, whatever the
    routing. From shapes, a layer's pass waits for the host where it launches the pass's
    kernels slower than the GPU runs them (simulator/step/roofline.py host_launch_s);
    `cuda_graphs` (the layers captured as CUDA graphs) removes that wait; `host_launch_us`:
    the host's time per launch (None: the profile's). `eager`: the layers' elementwise ops
    run one PyTorch kernel each (torchtitan without torch.compile; roofline.layer_times).
    `fp8_recipe`: how an FP8 run scales its casts (simulator/layout/shapes.py FP8_RECIPES);
    `fp8_scope`: which GEMMs run in FP8 (all linears, or the routed experts' alone:
    roofline.in_fp8). `accum_pass_bytes`: bytes each of the GPU's parameters moves after
    every micro-batch's backward, at HBM bandwidth (grad_accum_pass_s: DeepSpeed's
    BF16_Optimizer).
    `expert_loop`: the stack launches each local expert's kernels apart (Megatron-Core, TE),
    so an eager MoE layer's host launches what roofline.layer_times traced; False: one
    grouped GEMM (torchtitan)."""
    check_recompute(recompute)
    if attention not in ATTENTION:
        raise UserError(f"attention must be one of {', '.join(ATTENTION)}, got {attention!r}")
    a, tokens = model.arch, micro_batch * seq_len / cp  # this context-parallel rank's
    flops = 3 * forward_flops_per_token(model, seq_len) * tokens / tp * grad_accum  # FLOP
    if fp8:
        check_fp8(model, hw, mfu)
        check_fp8_recipe(hw, fp8_recipe)
    mfu, how = pricing(model, hw, mfu)
    if mfu is not None:
        rate = hw.gpu.peak_bf16_tflops * 1e12 * mfu  # FLOP/s achieved
        # s: one layer's s x s products
        attn = 4.0 * seq_len * a.n_heads * model.attn_head_dim * tokens / tp / rate
        layer_f = 2.0 * model.active_layer_params * tokens / tp / rate + attn
        head_f = 2.0 * a.vocab_size * a.d_model * tokens / tp / rate
        layer, head = (layer_f, 2 * layer_f, attn, 2 * attn), (
            head_f + metric_pass_s(model, hw, tokens, tp) * metric_passes, 2 * head_f)
        parts: dict = {}
    else:
        lt = layer_times(model, hw, micro_batch, seq_len, tp, sequence_parallel, attention,
                         cp, fp8, routing, host_launch_s(hw, cuda_graphs, host_launch_us),
                         eager, fp8_recipe, expert_loop, fp8_scope)
        ht = head_times(model, hw, micro_batch, seq_len, tp, cp, metric_passes)
        layer = (lt.fwd_s, lt.bwd_s, lt.parts["attention_fwd"], lt.parts["attention_bwd"])
        head = (ht.fwd_s, ht.bwd_s)
        parts = {k: a.n_layers * lt.parts[k] + ht.parts[k] for k in ("gemm", "attention",
                                                                      "memory")}
        parts["host_wait"] = a.n_layers * lt.parts["host_wait"]  # the layers' (none: 0)
    layer_f, layer_b, attn_f, attn_b = layer
    layer_b += recompute_s(model, recompute, layer_f, attn_f, parts and lt.parts)
    if accum_pass_bytes:
        layer_acc, head_acc = grad_accum_pass_s(model, hw, tp, accum_pass_bytes)
        layer_b, head = layer_b + layer_acc, (head[0], head[1] + head_acc)
        if parts:
            parts["memory"] += a.n_layers * layer_acc + head_acc
    return ComputeTimes(
        fwd_s=a.n_layers * layer_f + head[0], bwd_s=a.n_layers * layer_b + head[1],
        flops_per_step_per_gpu=flops, layer_fwd_s=layer_f, layer_bwd_s=layer_b,
        head_fwd_s=head[0], head_bwd_s=head[1], attn_fwd_s=attn_f, attn_bwd_s=attn_b,
        how=how, parts=parts)


# bytes a parameter moves when DeepSpeed's BF16_Optimizer folds a micro-batch's bf16 gradient
# into its fp32 one (deepspeed/runtime/bf16_optimizer.py update_hp_grads, as of DeepSpeed
# 6719b46, May 2022: hp_grad.add_(lp.grad.to(float32)), after every micro-batch's backward,
# engine.py and pipe/engine.py _exec_backward_pass): the cast reads 2 and writes 4, the add reads
# 4 + 4 and writes 4
BF16_OPTIMIZER_ACCUM_BYTES = 2 + 4 + 4 + 4 + 4


def grad_accum_pass_s(model: ModelProfile, hw: HardwareProfile, tp: int,
                      bytes_per_param: float) -> tuple[float, float]:
    """(one layer's, the output layer's) seconds of a memory-bound pass of `bytes_per_param`
    over the parameters one tensor-parallel rank holds, after each micro-batch's backward: the
    layer's parameters over `tp` (LayerNorms and biases that every rank keeps counted once),
    the vocabulary's vocab x d_model over `tp` (the output layer, or the tied embedding on the
    last stage; the first stage's embedding copy is not priced). The two kernels a tensor
    launches are not counted (about 12 tensors a layer at a few microseconds each)."""
    hbm = hw.gpu.hbm_bw_GBps * 1e9 * hw.compute.mem_efficiency  # B/s
    a = model.arch
    return (model.layer_params / tp * bytes_per_param / hbm,
            a.vocab_size * a.d_model / tp * bytes_per_param / hbm)


OPTIMIZER_SIBLING = {"optimizer_adamw": "optimizer_adams", "optimizer_adams": "optimizer_adamw"}


def kernel_time(kind: str, elements: float, hw: HardwareProfile,
                tensors: int | None = None) -> float:
    """Seconds for a memory-bound kernel over `elements` values: the measured constants of a
    calibrated profile where it has them, bytes moved over memory bandwidth otherwise. A
    kernel that loops over `tensors` parameter tensors pays the profile's per_tensor_us for
    each beyond (or short of) the benchmark's own count, where the profile measured it."""
    measured = hw.kernels.get(kind)
    sibling = OPTIMIZER_SIBLING.get(kind)
    if measured is None and sibling in hw.kernels:
        # one optimizer measured (or fitted), the other not: both are memory-bound passes over
        # the same elements, so the other takes the measured time scaled by the bytes each
        # moves (an unmeasured AdamW priced from datasheet bandwidth came out cheaper than a
        # fitted AdamS, which moves less)
        return (kernel_time(sibling, elements, hw, tensors)
                * KERNEL_BYTES[kind] / KERNEL_BYTES[sibling])
    base = _kernel_time(kind, elements, hw, measured)
    if tensors is None or not measured or measured.get("per_tensor_us") is None:
        return base
    return max(0.0, base + measured["per_tensor_us"] * 1e-6 * (tensors - measured["tensors"]))


def _kernel_time(kind: str, elements: float, hw: HardwareProfile, measured: dict | None
                 ) -> float:
    if measured is not None and "sizes" in measured and elements > 0:
        # the measured curve, interpolated log-log (the cost per element changes as a kernel
        # leaves the caches, which no single line fits); past its ends, at the end's rate
        sizes, secs = np.log(measured["sizes"]), np.log(measured["seconds"])
        x = math.log(elements)
        if x <= sizes[0] or x >= sizes[-1]:
            end = 0 if x <= sizes[0] else -1
            return math.exp(secs[end]) * elements / measured["sizes"][end]
        return math.exp(np.interp(x, sizes, secs))
    if measured is not None:
        return measured["fixed_us"] * 1e-6 + measured["ns_per_element"] * 1e-9 * elements
    if kind == "host_ops":
        return HOST_OP_S * elements
    if kind == "authors_step":
        raise UserError(f"profile {hw.name} has no calibrated authors_step kernel: run scape "
                        "calibrate compute --out NAME --kinds authors_step")
    if kind == "host_copy":
        if hw.gpu.host_bw_GBps is None:
            raise UserError(f"profile {hw.name} gives no [gpu] host_bw_GBps: cannot price "
                            "copies between host and GPU memory (CPU offload)")
        return elements / (hw.gpu.host_bw_GBps * 1e9 * hw.compute.mem_efficiency)
    return KERNEL_BYTES[kind] * elements / (hw.gpu.hbm_bw_GBps * 1e9 * hw.compute.mem_efficiency)


def sharing_waits(hw: HardwareProfile, ranks: int) -> dict[str, float]:
    """{kernel kind: seconds one call of it takes more} when `ranks` ranks share one GPU, as
    the profile's [sharing] table measured them (calibration/sharing.py: the one-GPU NCCL
    testbed); empty for a profile without it (each rank computes on its own device) or one
    rank."""
    if not hw.sharing or ranks < 2:
        return {}
    measured = next(iter(hw.sharing.values()))
    if ranks not in measured:
        raise UserError(f"profile {hw.name} measured ranks sharing its GPU at "
                        f"{', '.join(map(str, sorted(measured)))} ranks, not {ranks}: rerun "
                        f"scape calibrate collectives --share-gpu --nprocs {ranks}")
    return {kind: by_ranks[ranks] for kind, by_ranks in hw.sharing.items()}


def host_slowdown(hw: HardwareProfile, ranks: int) -> float:
    """How much slower compute runs when `ranks` ranks share one host (a CPU testbed, whose
    profile measured it); 1 for GPUs, each of which computes alone."""
    if not hw.slowdown:
        return 1.0
    if ranks > len(hw.slowdown):
        raise UserError(f"profile {hw.name} measured compute with up to {len(hw.slowdown)} "
                        f"ranks sharing the host, not {ranks}: rerun scape calibrate compute "
                        f"--max-ranks {ranks}")
    return hw.slowdown[ranks - 1]
