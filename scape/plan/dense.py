"""Dense data parallelism: DDP's all-reduce and ZeRO stages 1-3 (Megatron's distributed
optimizer, DeepSpeed/FSDP sharding), DESIGN section 4."""

from __future__ import annotations

from scape.plan.common import buckets, grad_phase, optimizer_kernel, param_phase
from scape.plan.types import CommOp, Dtypes, Plan, SchemeConfig, StepPlan


def dense_ddp(cfg: SchemeConfig, n: int, world: int, dt: Dtypes) -> Plan:
    """Full gradient all-reduce, bucketed and overlapped with backward; every rank updates N."""
    size = n * dt.grad_bytes
    op = CommOp("grad all-reduce", "all_reduce", size, grad_phase(cfg),
                buckets(size, dt.grad_bytes, cfg, world))
    return Plan(cfg.scheme, ((1.0, StepPlan((op,), (optimizer_kernel(cfg, n),))),))


def dense_zero1(cfg: SchemeConfig, n: int, world: int, dt: Dtypes) -> Plan:
    """Megatron distributed optimizer: gradient reduce-scatter, shard update, param all-gather.
    With `grad_all_reduce` (DeepSpeed's BF16_Optimizer, SchemeConfig) the gradient is
    all-reduced whole instead, and each rank still updates and gathers only its shard."""
    g, p = n * dt.grad_bytes, n * dt.param_bytes
    reduce = (("grad all-reduce", "all_reduce") if cfg.grad_all_reduce
              else ("grad reduce-scatter", "reduce_scatter"))
    ops = (
        CommOp(*reduce, g, grad_phase(cfg), buckets(g, dt.grad_bytes, cfg, world)),
        CommOp("param all-gather", "all_gather", p, param_phase(cfg),
               buckets(p, dt.param_bytes, cfg, world)),
    )
    return Plan(cfg.scheme, ((1.0, StepPlan(ops, (optimizer_kernel(cfg, n / world),))),))


def dense_zero2(cfg: SchemeConfig, n: int, world: int, dt: Dtypes) -> Plan:
    """ZeRO-2 (Rajbhandari et al. 2020, section 5.2): ZeRO-1's collectives, the gradient kept
    only as this rank's shard (simulator/memory/peak.py counts it so)."""
    return Plan(cfg.scheme, dense_zero1(cfg, n, world, dt).steps)


def dense_zero3(cfg: SchemeConfig, n: int, world: int, dt: Dtypes) -> Plan:
    """ZeRO-3 / FSDP FULL_SHARD (Rajbhandari et al. 2020, section 5.3; PyTorch FSDP): the
    parameters live as shards; every micro-batch all-gathers each unit's parameters before its
    forward and again before its backward (resharded in between), and reduce-scatters its
    gradients as backward produces them; the update runs on the shard. The forward gathers gate
    the forward unit by unit, the backward gathers are prefetched one unit ahead."""
    g, p = n * dt.grad_bytes, n * dt.param_bytes
    gathers = buckets(p, dt.param_bytes, cfg, world)
    ops = (
        CommOp("param all-gather (forward)", "all_gather", p, "next_forward", gathers, True),
        CommOp("param all-gather (backward)", "all_gather", p, "backward", gathers, True),
        CommOp("grad reduce-scatter", "reduce_scatter", g, "backward",
               buckets(g, dt.grad_bytes, cfg, world), True),
    )
    return Plan(cfg.scheme, ((1.0, StepPlan(ops, (optimizer_kernel(cfg, n / world),))),))
