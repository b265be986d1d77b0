"""What the scheme builders share: gradient buckets as Megatron-Core sizes them, the phases
overlap puts collectives in, the optimizer kernel, and k of a density."""

from __future__ import annotations

import math

from scape.plan.types import Kernel, SchemeConfig
from vocabulary.errors import UserError

# Megatron's default (40M elements) gives tens for the largest models, PyTorch DDP's 25 MB a few
# thousand for a 70B model; each bucket is simulated, so a few bytes each would never end.
MAX_BUCKETS = 10_000


def buckets(size: float, elem_bytes: int, cfg: SchemeConfig, world: int) -> int:
    """Equal buckets of at most `bucket_bytes`. By default Megatron-Core's: max(40M, 1M x DP)
    elements (megatron/core/distributed/distributed_data_parallel_config.py, bucket_size), so
    large data-parallel groups get few, large buckets. Megatron uses one bucket when it does not
    overlap: pass bucket_bytes=inf for that."""
    if cfg.bucket_bytes is not None:
        limit = cfg.bucket_bytes
    else:
        limit = max(40e6, 1e6 * world) * elem_bytes
    ratio = size / limit  # inf where a subnormal limit overflows the division
    count = max(1, math.ceil(ratio)) if ratio <= MAX_BUCKETS else ratio
    if count > MAX_BUCKETS:
        given = (f"--bucket-mb {limit / 1e6:g}" if cfg.bucket_bytes is not None else
                 f"the default bucket ({limit / 1e6:g} MB, Megatron's max(40M, 1M x DP) "
                 "elements)")
        raise UserError(f"{given} cuts {size / 1e6:,.0f} MB into {count:.3g} buckets; at "
                        f"most {MAX_BUCKETS:,}: give a larger --bucket-mb where the command "
                        "takes one, or a smaller model")
    return count


def grad_phase(cfg: SchemeConfig) -> str:
    return "backward" if cfg.overlap_grad_reduce else "after_backward"


def param_phase(cfg: SchemeConfig) -> str:
    return "next_forward" if cfg.overlap_param_gather else "after_update"


def optimizer_kernel(cfg: SchemeConfig, elements: float) -> Kernel:
    return Kernel(f"{cfg.optimizer} update", f"optimizer_{cfg.optimizer}", elements, "update")


def kept(density: float, n: float) -> int:
    """How many of n values a sparsifier keeps: round(d * n), at least one."""
    return max(1, round(density * n))
