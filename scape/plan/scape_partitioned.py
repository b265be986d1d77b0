"""This project's partitioned SCAPE variant (DESIGN section 5)."""

from __future__ import annotations

import math
from dataclasses import replace

from scape.plan.common import buckets, kept, optimizer_kernel, param_phase
from scape.plan.dense import dense_zero1
from scape.plan.types import INDEX_BYTES, CommOp, Dtypes, Kernel, Plan, SchemeConfig, StepPlan


def mask_bytes(n: int, world: int, k: float) -> float:
    """SCAPE mask all-gather size: per shard, int32 indices or a bitmap, whichever is smaller."""
    per_rank = min(k / world * INDEX_BYTES, math.ceil(math.ceil(n / world) / 8))
    return world * per_rank


def scape_partitioned(cfg: SchemeConfig, n: int, world: int, dt: Dtypes) -> Plan:
    """This project's partitioned SCAPE (DESIGN section 5): AdamS with first-moment masks chosen
    per shard. (`scape` itself is the authors' reducer: scape/plan/scape_authors.py.)

    A sparse step: pack the k gradient values on last step's mask, reduce-scatter the compact
    buffer (each rank gets the k/P values of its shard), update the shard, choose the next mask
    on the shard (O(N/P) threshold selection on |m|), all-gather the mask asynchronously (waited
    for at the next step's pack), all-gather parameters (compact k values when only masked
    coordinates change, dense otherwise). A dense refresh step every `refresh_every` steps is a
    dense-zero1 step; sparsity 0 is dense-zero1 exactly. With sync=momentum the bytes are the
    same (the buffer carries error-corrected first moments instead of gradients). The plan is
    the steady state: steps of a density warm-up send more (k of that step's density).
    """
    cfg = replace(cfg, optimizer="adams")
    if cfg.sparsity == 0:
        return dense_zero1(cfg, n, world, dt)
    k = kept(cfg.density, math.ceil(n / world)) * world  # the same count on every shard
    mask = CommOp("mask all-gather", "all_gather", mask_bytes(n, world, k), "next_step")
    param_size = k * dt.param_bytes if cfg.update_scope == "masked" else n * dt.param_bytes
    ops = (
        CommOp("compact grad reduce-scatter", "reduce_scatter", k * dt.grad_bytes,
               "after_backward"),
        CommOp("param all-gather", "all_gather", param_size, param_phase(cfg),
               buckets(param_size, dt.param_bytes, cfg, world)),
        mask,
    )
    select = Kernel("select next mask (threshold on shard)", "select", n / world, "post")
    kernels = [Kernel("pack on mask", "pack", k, "pre")]
    if cfg.error_feedback or cfg.sync == "momentum":
        kernels.append(Kernel("error feedback", "error_feedback", n, "pre"))
    if cfg.sync == "momentum":
        # the next mask is chosen from what is about to be sent; only the mask takes the
        # AdamS step, and weight decay touches every coordinate
        select = replace(select, stage="pre")
        kernels += [optimizer_kernel(cfg, k / world), Kernel("weight decay", "scale", n, "update"),
                    select]
    else:
        kernels += [optimizer_kernel(cfg, n / world), select]
    sparse = StepPlan(ops, tuple(kernels))
    if cfg.refresh_every == 0:
        return Plan(cfg.scheme, ((1.0, sparse),))
    zero1 = dense_zero1(cfg, n, world, dt).steps[0][1]
    # a refresh step is dense, and still chooses and gathers the next mask
    dense = StepPlan((*zero1.ops, mask), (*zero1.kernels, select))
    r = cfg.refresh_every
    return Plan(cfg.scheme, ((1 - 1 / r, sparse), (1 / r, dense)))
