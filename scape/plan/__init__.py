"""Communication plans: what each scheme sends and computes per step (DESIGN sections 3-5).

The byte contract that joins the real runtime and the simulator. Torch-free: it imports only
the vocabulary (and nothing else of the project), the simulator schedules these plans, and the
runtime executes exactly them. One file per scheme, registered in `SCHEMES` below; the types
and option tables are scape/plan/types.py (size convention: nccl-tests', stated there).

N parameters, P data-parallel ranks, density d = 1 - sparsity, k = d*N.
"""

from __future__ import annotations

from collections.abc import Callable

from scape.plan.common import MAX_BUCKETS, kept
from scape.plan.dense import dense_ddp, dense_zero1, dense_zero2, dense_zero3
from scape.plan.quantized import quantized
from scape.plan.scalecom import scalecom
from scape.plan.scape_authors import scape_authors
from scape.plan.scape_partitioned import mask_bytes, scape_partitioned
from scape.plan.topk import topk
from scape.plan.types import (
    AUTHORS_OPTIONS,
    BITS_SCHEMES,
    DENSITY_OPTIONS,
    FLAGS,
    INDEX_BYTES,
    KERNEL_STAGES,
    NORM_BYTES,
    OPTION_SCHEMES,
    PARTITIONED_OPTIONS,
    PER_TENSOR,
    PHASES,
    SCAPE_SCHEMES,
    SHARDED_GRAD,
    SPARSE_SCHEMES,
    WIRE_FACTOR,
    ZERO_STAGE,
    CommOp,
    Dtypes,
    Kernel,
    Plan,
    SchemeConfig,
    StepPlan,
    flag,
    foreign_options,
    scheduled_density,
)
from vocabulary.errors import UserError
from vocabulary.names import ALIASES, COLLECTIVES, SCHEME_NAMES

# One builder per name of vocabulary/names.py SCHEME_NAMES, in that order (the aliases
# dense-adamw/dense-adams are there too).
Builder = Callable[[SchemeConfig, int, int, Dtypes], Plan]
SCHEMES: dict[str, Builder] = {
    "dense-ddp": dense_ddp,
    "dense-zero1": dense_zero1,
    "dense-zero2": dense_zero2,
    "dense-zero3": dense_zero3,
    "quantized": quantized,
    "topk": topk,
    "scalecom": scalecom,
    "scape": scape_authors,  # the authors' reducer, scape/plan/scape_authors.py
    "scape-partitioned": scape_partitioned,
}


def make_config(name: str, **options) -> SchemeConfig:
    """A validated SchemeConfig from a scheme name or alias and options (None means default)."""
    base = dict(ALIASES.get(name, {"scheme": name}))
    base.update({k: v for k, v in options.items() if v is not None})
    return SchemeConfig(**base).validate()


def plan(cfg: SchemeConfig, n_params: int, world: int, dtypes: Dtypes | None = None,
         tensors: list[int] | None = None, dense: list[bool] | None = None) -> Plan:
    """The communication plan of `cfg` for N parameters over `world` data-parallel ranks.
    `tensors` (sizes, buffer order) and `dense` (never-sparsified tensors) matter to per-tensor
    schemes; without them the parameters are one tensor."""
    cfg.validate()
    if world < 1:
        raise UserError(f"world size must be at least 1, got {world}")
    if n_params < 1:
        raise UserError(f"parameter count must be positive, got {n_params}")
    if tensors is not None and sum(tensors) != n_params:
        raise UserError(f"tensor sizes sum to {sum(tensors)}, not the {n_params} parameters")
    if cfg.scheme in PER_TENSOR:
        result = SCHEMES[cfg.scheme](cfg, n_params, world, dtypes or Dtypes(), tensors, dense)
    else:
        result = SCHEMES[cfg.scheme](cfg, n_params, world, dtypes or Dtypes())
    if cfg.clip_grad is not None and cfg.scheme in SHARDED_GRAD:
        norm = CommOp("grad-norm all-reduce", "all_reduce", NORM_BYTES, "after_backward")
        result = Plan(result.scheme, tuple((w, StepPlan((*s.ops, norm), s.kernels))
                                           for w, s in result.steps))
    if world == 1:  # one rank talks to nobody: keep the kernels, drop the collectives
        steps = tuple((w, StepPlan((), s.kernels)) for w, s in result.steps)
        result = Plan(result.scheme, steps)
    return result


__all__ = [
    "ALIASES", "AUTHORS_OPTIONS", "BITS_SCHEMES", "COLLECTIVES", "DENSITY_OPTIONS", "FLAGS",
    "INDEX_BYTES", "KERNEL_STAGES", "MAX_BUCKETS", "NORM_BYTES", "OPTION_SCHEMES",
    "PARTITIONED_OPTIONS", "PER_TENSOR", "PHASES", "SCAPE_SCHEMES", "SCHEMES", "SCHEME_NAMES",
    "SHARDED_GRAD", "SPARSE_SCHEMES", "WIRE_FACTOR", "ZERO_STAGE", "CommOp", "Dtypes", "Kernel",
    "Plan", "SchemeConfig", "StepPlan", "flag", "foreign_options", "kept", "make_config",
    "mask_bytes", "plan", "scheduled_density",
]
