"""ScaleCom's CLT-k: the leader's indices broadcast, the k values all-reduced (DESIGN
section 4)."""

from __future__ import annotations

from scape.plan.common import kept, optimizer_kernel
from scape.plan.dense import dense_ddp
from scape.plan.types import INDEX_BYTES, CommOp, Dtypes, Kernel, Plan, SchemeConfig, StepPlan


def scalecom(cfg: SchemeConfig, n: int, world: int, dt: Dtypes) -> Plan:
    """ScaleCom CLT-k: a cyclic leader's top-k indices are broadcast; everyone's values at those
    indices are all-reduced; low-pass filtered error feedback keeps the rest."""
    if cfg.sparsity == 0:
        return dense_ddp(cfg, n, world, dt)
    k = kept(cfg.density, n)
    ops = (
        CommOp("leader indices broadcast", "broadcast", k * INDEX_BYTES, "after_backward"),
        CommOp("CLT-k values all-reduce", "all_reduce", k * dt.grad_bytes, "after_backward"),
    )
    kernels = (
        Kernel("leader select top-k (threshold)", "select", n, "pre"),
        Kernel("pack values", "pack", k, "pre"),
        Kernel("low-pass error feedback", "error_feedback", n, "update"),
        optimizer_kernel(cfg, n),
    )
    return Plan(cfg.scheme, ((1.0, StepPlan(ops, kernels)),))
