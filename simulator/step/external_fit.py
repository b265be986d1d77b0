"""Fit a cluster's network and compute to published dense-baseline measurements (DESIGN 9).

The protocol, printed with every result: parameters are fitted ONLY on the dense AdamS rows of
an external data set (its communication times and computation times, every model and GPU
count); every other row (SCAPE, memory) is then predicted, never fitted.

Network: the dense step's communication is the plan's collectives (an fp32 all-reduce without
the distributed optimizer; an fp32 reduce-scatter and a bf16 all-gather with it), each run as
the simulator runs it alone: time = alpha * A + bytes * C / B, with A (latency steps) and C
(bytes on the busiest link per byte) read off the simulator's own ring (simulator/network/fit.py,
`coefficients`). Two numbers are fitted: alpha, the transport's cost per ring step, and B, the
bytes per second one GPU's NIC moves through it. The transport's store-and-forward unit C (the
data file's [transport] chunk_kib, from NCCL's source) is not fitted: its fill, min(C, bytes per
step)/B per step, is a data term, so the fit stays linear in (alpha, 1/B).

Compute: the dense step's computation is accum * t_mb(model) + the optimizer step over the
parameters each GPU updates (N, or N/P with the distributed optimizer) + a fixed cost per step.
t_mb = forward+backward FLOPs of one micro-batch / (peak * MFU(model)); the optimizer step
(Megatron's: norm, AdamS, copies) costs a fitted time per element updated. Fitted: one MFU per
model, the optimizer's seconds per element, and the fixed cost, by least relative squares.
Memory-bound kernels of other schemes keep the profile's own memory efficiency: the optimizer
step's rate is the rate of that step, not of HBM.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

import numpy as np

from profiles import HardwareProfile, ModelProfile, UserError
from profiles.external import ExternalRow
from profiles.hardware import Transport
from scape.plan import Dtypes, Plan, SchemeConfig, make_config
from simulator.network import nccl
from simulator.network.fit import coefficients, scaled_lstsq
from simulator.step.compute import forward_flops_per_token


@dataclass(frozen=True)
class DenseRow:
    """One dense-baseline measurement the fit may use."""

    key: str  # a name for the row in the output
    model: ModelProfile
    gpus: int
    accum: int  # micro-batches per step per GPU
    micro_batch: int
    seq_len: int
    distributed_optimizer: bool
    plan: Plan  # the dense scheme's communication plan at this size
    comm_s: float | None  # measured communication, or None
    compute_s: float | None  # measured computation, or None


@dataclass(frozen=True)
class ExternalFit:
    alpha_s: float  # per ring step through the transport
    bandwidth_Bps: float  # per GPU NIC through the transport
    mfu: dict[str, float]  # per model name
    optimizer_s_per_element: float
    step_fixed_s: float
    inputs: tuple[str, ...]  # the rows the fit used
    residuals_pct: dict[str, float] = field(default_factory=dict)  # per fitted row
    chunk_bytes: float = 0.0  # the transport's store-and-forward chunk the fit assumed


def socket_view(hw: HardwareProfile) -> HardwareProfile:
    """`hw` as NCCL's tuner sees it over TCP sockets (NCCL_NET=Socket in the authors' training
    scripts; their scaling scripts set none, and the dense rows' 3.6 GB/s says sockets):
    what the fitted profile will be, before the fit gives its rates."""
    return replace(hw, transport=Transport("socket", 1.0, 0.0, 0.0, "NCCL_NET=Socket"),
                   nccl=None)  # the fitted profile keeps no [nccl] table (fitted_hardware)


def algorithm(collective: str, size: float, gpus: int, hw: HardwareProfile | None) -> str:
    """The algorithm NCCL runs `collective` of `size` bytes with on `gpus` GPUs of `hw`, one
    per node (simulator/network/nccl.py tuner_view: its tuner's choice, as `auto` prices every
    step); a ring where no tuner applies (no `hw`, or a collective NCCL does not tune)."""
    view = nccl.tuner_view(hw, gpus) if hw is not None else None
    if view is None or collective not in nccl.TUNED_OPS:
        return "ring"
    return nccl.decide(collective, size, view)[0]


def comm_coefficients(plan: Plan, gpus: int, chunk_bytes: float = 0.0,
                      hw: HardwareProfile | None = None) -> tuple[float, float]:
    """(A, W): the plan's communication time is alpha * A + W / B for `gpus` GPUs, one per
    node, each behind its own NIC (the simulator's algorithms, run alone: each collective as
    NCCL's tuner chooses it on `hw`, a ring without `hw`); A counts the latency steps, W the
    bytes on the busiest link with the pipeline fill of a transport that forwards
    `chunk_bytes` per step."""
    a = w = 0.0
    for weight, step in plan.steps:
        for op in step.ops:
            algo = algorithm(op.collective, op.size_bytes, gpus, hw)
            ca, cc = coefficients(op.collective, algo, gpus, op.size_bytes, chunk_bytes)
            a += weight * ca
            w += weight * cc * op.size_bytes
    return a, w


def _relative_lstsq(design: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Minimize sum((design @ x / y - 1)^2)."""
    return scaled_lstsq(design / y[:, None], np.ones(len(y)))


def fit_dense(rows: list[DenseRow], hw: HardwareProfile, chunk_bytes: float = 0.0
              ) -> ExternalFit:
    """Fit the network (alpha, B) on the rows' communication times and the compute (MFU per
    model, optimizer step per element, fixed cost per step) on their computation times."""
    comm = [r for r in rows if r.comm_s is not None]
    comp = [r for r in rows if r.compute_s is not None]
    if len(comm) < 2 or len(comp) < 2:
        raise UserError("the fit needs at least two dense communication and two computation "
                        "measurements")
    view = socket_view(hw)
    coef = [comm_coefficients(r.plan, r.gpus, chunk_bytes, view) for r in comm]
    y = np.array([r.comm_s for r in comm])
    alpha, inv_b = _relative_lstsq(np.array([[a, w] for a, w in coef]), y)
    if not (alpha >= 0 and inv_b > 0):
        raise UserError(f"network fit is not physical (alpha {alpha:.3g} s, 1/B {inv_b:.3g}): "
                        "the dense communication rows do not follow a ring")
    models = sorted({r.model.name for r in comp})
    peak = hw.gpu.peak_bf16_tflops * 1e12
    design = []
    for r in comp:
        flops = 3 * forward_flops_per_token(r.model, r.seq_len) * r.micro_batch * r.seq_len
        row = [r.accum * flops / peak if r.model.name == m else 0.0 for m in models]
        n_opt = r.model.n_params / (r.gpus if r.distributed_optimizer else 1)
        row += [n_opt, 1.0]
        design.append(row)
    x = _relative_lstsq(np.array(design), np.array([r.compute_s for r in comp]))
    inv_mfu, per_elem, fixed = x[: len(models)], x[len(models)], x[len(models) + 1]
    if (inv_mfu < 1).any() or per_elem < 0 or fixed < 0:
        raise UserError(f"compute fit is not physical on {hw.name} (MFU above 1, or a negative "
                        "optimizer or fixed cost): the rows' computation times do not fit its "
                        f"GPU ({hw.gpu.model}, {hw.gpu.peak_bf16_tflops:g} TFLOP/s); give the "
                        "profile of the cluster they were measured on")
    fit = ExternalFit(
        alpha_s=float(alpha), bandwidth_Bps=float(1 / inv_b),
        mfu={m: float(1 / v) for m, v in zip(models, inv_mfu, strict=True)},
        optimizer_s_per_element=float(per_elem), step_fixed_s=float(fixed),
        inputs=tuple([f"{r.key} comm" for r in comm] + [f"{r.key} compute" for r in comp]),
        chunk_bytes=float(chunk_bytes),
    )
    res = {}
    for r, (a, w) in zip(comm, coef, strict=True):
        res[f"{r.key} comm"] = 100 * ((fit.alpha_s * a + w / fit.bandwidth_Bps) / r.comm_s - 1)
    for r, d in zip(comp, design, strict=True):
        res[f"{r.key} compute"] = 100 * (float(np.dot(d, x)) / r.compute_s - 1)
    return ExternalFit(**{**fit.__dict__, "residuals_pct": res})


def dense_dtypes() -> Dtypes:
    """Megatron-LM as the SCAPE authors ran it: --bf16 --accumulate-allreduce-grads-in-fp32,
    so fp32 gradients on the wire and bf16 parameters all-gathered by the distributed
    optimizer."""
    return Dtypes(grad_bytes=4, param_bytes=2)


def accum_of(global_batch: int, micro_batch: int, gpus: int) -> int:
    if global_batch % (micro_batch * gpus):
        raise UserError(f"global batch {global_batch} does not split into micro-batches of "
                        f"{micro_batch} over {gpus} GPUs")
    return global_batch // (micro_batch * gpus)


SERIES = re.compile(r"^(?P<scheme>adams|scape-d(?P<density>[0-9.]+))(?P<distopt>-distopt)?"
                    r"(?P<offload>-offload)?$")


def scheme_of(row: ExternalRow, config: dict) -> SchemeConfig:
    """The scheme a series ran, from its launch settings: Megatron's dense AdamS (all-reduce,
    or the distributed optimizer), or the authors' SCAPE reducer at its density and offload
    flags. No overlap: the scripts pass no --overlap-grad-reduce / --overlap-param-gather."""
    m = SERIES.match(row.series)
    if m is None:
        raise UserError(f"{row.cite}: series {row.series!r} is not one this tool can simulate")
    distopt = bool(config.get("use_distributed_optimizer"))
    no_overlap = {"overlap_grad_reduce": False, "overlap_param_gather": False,
                  "bucket_bytes": float("inf")}
    # --clip-grad: with the distributed optimizer the norm is summed over the shards by
    # one-element all-reduces (Megatron's get_grad_norm_fp32 for dense; for SCAPE the reducer's
    # clip norm and Megatron's norm for the log, scape/plan/scape_authors.py); without it none
    no_overlap["clip_grad"] = config.get("clip_grad")
    if m["scheme"] == "adams":
        return make_config("dense-zero1" if distopt else "dense-ddp", optimizer="adams",
                           **no_overlap)
    density = float(config.get("topk_adams_density", m["density"]))
    return make_config(
        "scape", sparsity=1 - density, **no_overlap,
        extra={"distributed_optimizer": distopt,
               "residual_offload": bool(config.get("topk_adams_residual_cpu_offload")),
               "param_offload": bool(config.get("topk_adams_full_param_cpu_offload"))})
