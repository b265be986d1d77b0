"""Local top-k with residual (DGC style): values and indices all-gathered (DESIGN section 4)."""

from __future__ import annotations

from scape.plan.common import kept, optimizer_kernel
from scape.plan.dense import dense_ddp
from scape.plan.types import INDEX_BYTES, CommOp, Dtypes, Kernel, Plan, SchemeConfig, StepPlan


def topk(cfg: SchemeConfig, n: int, world: int, dt: Dtypes) -> Plan:
    """DGC-style local top-k of gradient + residual; values and int32 indices all-gathered."""
    if cfg.sparsity == 0:
        return dense_ddp(cfg, n, world, dt)
    k = kept(cfg.density, n)
    ops = (CommOp("top-k all-gather", "all_gather", world * k * (dt.grad_bytes + INDEX_BYTES),
                  "after_backward"),)
    kernels = (
        Kernel("select top-k (threshold)", "select", n, "pre"),
        Kernel("pack values+indices", "pack", k, "pre"),
        Kernel("scatter-add gathered", "scatter_add", world * k, "update"),
        optimizer_kernel(cfg, n),
    )
    return Plan(cfg.scheme, ((1.0, StepPlan(ops, kernels)),))
