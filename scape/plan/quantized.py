"""Block-quantized gradients with error feedback (DESIGN section 4)."""

from __future__ import annotations

import math

from scape.plan.common import optimizer_kernel
from scape.plan.dense import dense_ddp
from scape.plan.types import CommOp, Dtypes, Kernel, Plan, SchemeConfig, StepPlan


def quantized(cfg: SchemeConfig, n: int, world: int, dt: Dtypes) -> Plan:
    """Two-phase b-bit block quantization with error feedback (1-bit Adam, ZeRO++ qgZ).

    Each rank quantizes its gradient plus residual, all-to-all sends shard j to rank j, which
    dequantizes, averages, requantizes its shard; an all-gather returns the quantized shards.
    Scales: one fp32 per `quant_block` values. bits >= gradient width: plain dense-ddp.
    """
    if cfg.bits >= 8 * dt.grad_bytes:
        return dense_ddp(cfg, n, world, dt)
    payload = n * cfg.bits / 8 + math.ceil(n / cfg.quant_block) * 4
    ops = (
        CommOp("quantized all-to-all", "all_to_all", payload, "after_backward"),
        CommOp("quantized all-gather", "all_gather", payload, "after_backward"),
    )
    kernels = (
        Kernel("quantize grad + residual", "quantize", n, "pre"),
        Kernel("dequantize received shards", "dequantize", n, "pre"),
        Kernel("requantize reduced shard", "quantize", n / world, "pre"),
        Kernel("dequantize gathered", "dequantize", n, "update"),
        optimizer_kernel(cfg, n),
    )
    return Plan(cfg.scheme, ((1.0, StepPlan(ops, kernels)),))
