"""The contract's types: what a plan is made of (collectives, kernels, steps), a scheme's
options and their checks, and which options each scheme reads (DESIGN sections 3-5).

Size convention (nccl-tests, PERFORMANCE.md): a CommOp's `size_bytes` is the total array size S
of the collective: the full array for all_reduce and broadcast, the full (gathered) array for
reduce_scatter and all_gather, one rank's send buffer for all_to_all. Bytes a rank puts on the
wire follow from S: all_reduce 2(P-1)/P*S, reduce_scatter and all_gather (P-1)/P*S,
all_to_all (P-1)/P*S, broadcast S (root).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from vocabulary.errors import UserError
from vocabulary.names import (
    DEFAULT_GRAD_DTYPE,
    DEFAULT_PARAM_DTYPE,
    DTYPE_BYTES,
    SCHEME_NAMES,
    SHAPES,
    scheme_names,
)
from vocabulary.suggest import did_you_mean

# When an op starts and what waits for it:
#   backward:       split in `buckets`, each launched when backward has produced its gradients;
#                   the optimizer update waits for all of them.
#   after_backward: launched when backward (and the step's pre-communication kernels) end;
#                   the update waits for it.
#   after_update:   launched after the update; the next step's forward waits for it.
#   next_forward:   launched after the update; the next step's forward waits for it bucket by
#                   bucket, so it overlaps that forward (Megatron's overlap_param_gather).
#   next_step:      launched after the update; waited for only when the next step packs its
#                   gradients, after its backward (SCAPE's mask all-gather, DESIGN section 5).
PHASES = ("backward", "after_backward", "after_update", "next_forward", "next_step")


# Kernels run on the compute stream: before communication (`pre`), as the update, or after it.
KERNEL_STAGES = ("pre", "update", "post")


INDEX_BYTES = 4  # int32 indices


# Bytes one rank puts on the wire per byte of S (the bandwidth terms of nccl-tests; they are
# also nccl-tests' busbw factors).
WIRE_FACTOR: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda p: 2 * (p - 1) / p,
    "reduce_scatter": lambda p: (p - 1) / p,
    "all_gather": lambda p: (p - 1) / p,
    "all_to_all": lambda p: (p - 1) / p,
    "broadcast": lambda p: 1.0,
}


@dataclass(frozen=True)
class CommOp:
    name: str
    collective: str
    size_bytes: float  # nccl-tests S, see module docstring
    phase: str
    buckets: int = 1  # equal parts, launched one after another as they become ready
    # issued again for every micro-batch (ZeRO-3 gathers and reduce-scatters), not once a step
    every_micro_batch: bool = False
    # the ranks it runs over: the data-parallel group ("dp"); the simulator's others (DESIGN
    # 10): a MoE model's expert data-parallel group ("expert"), and hybrid sharding's shard
    # and replica groups ("shard", "replica"), DeepSpeed's first and last pipeline stages
    # holding a tied embedding ("tied")
    group: str = "dp"

    def wire_bytes(self, world: int) -> float:
        """Bytes one rank sends for this op (the bandwidth term of DESIGN section 4)."""
        return WIRE_FACTOR[self.collective](world) * self.size_bytes


@dataclass(frozen=True)
class Kernel:
    """A compression or optimizer kernel over `elements` values, on the compute stream."""

    name: str
    kind: str  # a key of vocabulary.names.KERNEL_BYTES
    elements: float
    stage: str = "pre"
    # parameter tensors it loops over, where it does (the runtime's copies and the authors'
    # reducer: a profile's per_tensor_us prices each); None: one pass over a flat buffer
    tensors: int | None = None


@dataclass(frozen=True)
class StepPlan:
    ops: tuple[CommOp, ...]
    kernels: tuple[Kernel, ...]

    def wire_bytes(self, world: int, micro_batches: int = 1,
                   worlds: dict[str, int] | None = None) -> float:
        """Bytes one rank sends: each op over `world` ranks, or over `worlds[op.group]`."""
        worlds = worlds or {}
        return sum(op.wire_bytes(worlds.get(op.group, world))
                   * (micro_batches if op.every_micro_batch else 1) for op in self.ops)


@dataclass(frozen=True)
class Plan:
    """A scheme's steady state: step kinds and the fraction of steps each takes."""

    scheme: str
    steps: tuple[tuple[float, StepPlan], ...]

    def wire_bytes(self, world: int, micro_batches: int = 1,
                   worlds: dict[str, int] | None = None) -> float:
        """Bytes one rank sends per step, averaged over step kinds."""
        return sum(w * s.wire_bytes(world, micro_batches, worlds) for w, s in self.steps)


@dataclass(frozen=True)
class Dtypes:
    # gradients as reduced: fp32 in Megatron-LM, NeMo and torchtitan under bf16 (names.py)
    grad_bytes: int = DTYPE_BYTES[DEFAULT_GRAD_DTYPE]
    param_bytes: int = DTYPE_BYTES[DEFAULT_PARAM_DTYPE]  # as the distributed optimizer gathers


@dataclass(frozen=True)
class SchemeConfig:
    """A scheme and its options; `validate` says what is wrong in one line."""

    scheme: str
    optimizer: str = "adams"  # adamw | adams
    sparsity: float = 0.0
    bits: int = 8
    bucket_bytes: float | None = None  # None: Megatron's default, see buckets
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = False
    # ZeRO-1 whose gradients are all-reduced whole, each rank then updating its shard:
    # DeepSpeed's BF16_Optimizer (deepspeed/runtime/pipe/engine.py _bf16_reduce_grads
    # all-reduces its fp32 gradients), where Megatron's distributed optimizer reduce-scatters
    grad_all_reduce: bool = False
    # SCAPE options (DESIGN section 5); defaults chosen by results/convergence/convergence/
    # (tiny-gpt, 1,000 steps, 2 ranks): no error feedback was best at 90% and 99% sparsity, the
    # masked update beat "all", |m| beat |m|/sqrt(v), and dense refresh every 10 steps hurt.
    score: str = "m"  # m | m_over_sqrt_v
    error_feedback: bool = False
    update_scope: str = "masked"  # masked | all
    refresh_every: int = 0  # 0: never a dense refresh step; R >= 2: every R-th step dense
    # What the compact buffer carries: "gradient" (this project's first reading of DESIGN
    # section 5) or "momentum" (each rank's error-corrected first moment, as the authors' public
    # Megatron reducer does); the convergence study compares them.
    sync: str = "gradient"
    # SCAPE's density schedule (`scheduled_density`): `density_dense_steps` steps at density 1,
    # then a warm-up of `density_warmup_steps` from 1 to d, geometric (the authors' reducer
    # today) or linear (the reducer their Llama-500M convergence runs logged)
    density_warmup_steps: int = 0
    density_dense_steps: int = 0
    density_shape: str = "geometric"  # geometric | linear
    # global-norm clipping of the synced gradient before the update (Megatron --clip-grad;
    # for `scape` inside the reducer, as --move-clip-grad-to-reducer does); None: no clipping
    clip_grad: float | None = None
    select_per: str = "shard"  # shard | tensor (each tensor's part of a shard keeps its share)
    quant_block: int = 2048  # values per fp32 scale in block quantization
    extra: dict = field(default_factory=dict)

    @property
    def density(self) -> float:
        return 1.0 - self.sparsity

    def density_at(self, t: float) -> float:
        """Density of SCAPE's mask at step t (1-based) under this config's schedule."""
        return scheduled_density(self.density, t, self.density_warmup_steps,
                                 self.density_dense_steps, self.density_shape)

    def validate(self) -> SchemeConfig:
        if self.scheme not in SCHEME_NAMES:
            raise UserError(f"unknown scheme {self.scheme!r}"
                            f"{did_you_mean(self.scheme, SCHEME_NAMES)}; choose one of: "
                            f"{scheme_names()}")
        if self.optimizer not in ("adamw", "adams"):
            raise UserError(f"optimizer must be adamw or adams, got {self.optimizer!r}")
        if not 0.0 <= self.sparsity < 1.0:
            raise UserError(f"sparsity must be in [0, 1) (--sparsity, or NAME:VALUE), got "
                            f"{self.sparsity}")
        if self.bits not in (1, 4, 8, 16, 32):
            raise UserError(f"bits must be one of 1, 4, 8, 16, 32, got {self.bits}")
        if self.score not in ("m", "m_over_sqrt_v"):
            raise UserError(f"score must be m or m_over_sqrt_v, got {self.score!r}")
        if self.update_scope not in ("masked", "all"):
            raise UserError(f"update_scope must be masked or all, got {self.update_scope!r}")
        if self.refresh_every < 0:
            raise UserError(f"refresh_every must be >= 0, got {self.refresh_every}")
        if self.refresh_every == 1:  # R = 1 would make every step a dense refresh step
            raise UserError("refresh_every 1 makes every step dense, which is ZeRO-1 AdamS "
                            "(sparsity 0); give 0 (no refresh steps) or 2 and more")
        if self.sync not in ("gradient", "momentum"):
            raise UserError(f"sync must be gradient or momentum, got {self.sync!r}")
        if self.sync == "momentum" and (self.refresh_every or self.update_scope != "masked"
                                        or self.score != "m"):
            raise UserError("sync=momentum runs with the masked update, the |c| score and no "
                            "refresh steps (its residual already carries everything unsent)")
        if self.density_warmup_steps < 0:
            raise UserError(f"density warm-up must be >= 0 steps, got "
                            f"{self.density_warmup_steps}")
        if self.density_dense_steps < 0:
            raise UserError(f"density dense steps must be >= 0, got {self.density_dense_steps}")
        if self.density_shape not in SHAPES:
            raise UserError(f"density shape must be one of {', '.join(SHAPES)}, got "
                            f"{self.density_shape!r}")
        if self.clip_grad is not None and not (math.isfinite(self.clip_grad)
                                               and self.clip_grad > 0):
            raise UserError(f"--clip-grad must be a positive number, got {self.clip_grad}")
        if self.select_per not in ("shard", "tensor"):
            raise UserError(f"select_per must be shard or tensor, got {self.select_per!r}")
        if self.scheme == "scape":
            self._check_authors_options()
        beta = self.extra.get("lowpass_beta")
        if self.scheme == "scalecom" and beta is not None and not 0 < beta <= 1:
            raise UserError(f"--lowpass-beta must be in (0, 1], got {beta}")
        if self.bucket_bytes is not None and not self.bucket_bytes > 0:
            raise UserError(f"bucket size must be positive, got {self.bucket_bytes}")
        return self

    def _check_authors_options(self) -> None:
        """`scape` is the authors' reducer: the partitioned variant's options do not apply."""
        default = SchemeConfig("scape")
        foreign = [f"--{name.replace('_', '-')}" for name in PARTITIONED_OPTIONS
                   if getattr(self, name) != getattr(default, name)]
        if foreign:
            raise UserError(f"{', '.join(foreign)}: options of scape-partitioned (this "
                            "project's variant), not of scape (the authors' reducer)")
        unknown = set(self.extra) - set(AUTHORS_OPTIONS)
        if unknown:
            raise UserError(f"scape takes no option {', '.join(sorted(unknown))}; its options: "
                            f"{', '.join(AUTHORS_OPTIONS)}")
        if self.extra.get("param_offload") and not self.extra.get("distributed_optimizer"):
            raise UserError("the full-parameter CPU offload needs the distributed optimizer "
                            "(the authors' config check)")


# Options of the partitioned variant only, and the authors' reducer's own (SchemeConfig.extra).
PARTITIONED_OPTIONS = ("score", "error_feedback", "update_scope", "refresh_every", "sync",
                       "select_per")


AUTHORS_OPTIONS = ("distributed_optimizer", "residual_offload", "param_offload",
                   "exclude_from_topk")


def scheduled_density(density: float, t: float, warmup_steps: int, dense_steps: int = 0,
                      shape: str = "geometric") -> float:
    """Density of SCAPE's mask at step t (mz687/SCAPE_SC26 `_scheduled_density`): 1 for the
    first D = `dense_steps` steps, then with u = min(1, (t - D) / W) over W = `warmup_steps`,
    d ** u (geometric, the reducer at ebb256c) or 1 - (1 - d) * u (linear, the reducer the
    Llama-500M convergence runs used: their logs give d(S) = 1 - 0.9 (S - 2000) / 8000,
    profiles/external/scape-sc26.logs-500m.md), then d."""
    if t <= dense_steps:
        return 1.0
    if t - dense_steps >= warmup_steps:  # also without a warm-up (W = 0)
        return density
    u = (t - dense_steps) / warmup_steps
    return density**u if shape == "geometric" else 1.0 - (1.0 - density) * u


# Schemes whose plan depends on the parameter tensors, not only their total.
PER_TENSOR = frozenset({"scape"})


# Both SCAPE variants: the density schedule applies to them.
SCAPE_SCHEMES = frozenset({"scape", "scape-partitioned"})


DENSITY_OPTIONS = ("density_warmup_steps", "density_dense_steps", "density_shape")


# Schemes whose ranks each hold only a shard of the synced gradient and of the optimizer state
# (ZeRO-1; simulator/memory/peak.py counts the state so): clipping by the gradient's global norm
# costs them a one-value all-reduce (Megatron's get_grad_norm_fp32 does the same).
SHARDED_GRAD = frozenset({"dense-zero1", "dense-zero2", "dense-zero3", "scape-partitioned"})


# ZeRO stages beyond 1: the gradient (2) and the parameters (3) live as shards too
ZERO_STAGE = {"dense-zero2": 2, "dense-zero3": 3}


NORM_BYTES = 8  # the squared norm, fp64


# Schemes whose NAME:VALUE and --sparsity give the fraction not sent, and the one whose give bits.
SPARSE_SCHEMES = ("topk", "scalecom", "scape", "scape-partitioned")


BITS_SCHEMES = ("quantized",)


# The schemes each option applies to; an option typed for a scheme that does not read it is
# refused (a value the user typed is used or refused, never dropped). Options not named here
# (optimizer, overlap, buckets) apply to every scheme.
OPTION_SCHEMES: dict[str, tuple[str, ...]] = {
    "sparsity": SPARSE_SCHEMES, "bits": BITS_SCHEMES,
    **{name: tuple(sorted(SCAPE_SCHEMES)) for name in DENSITY_OPTIONS},
    "unmasked_moment": ("scape-partitioned",),
    **{name: ("scape-partitioned",) for name in PARTITIONED_OPTIONS},
    **{name: ("scape",) for name in AUTHORS_OPTIONS},
    "lowpass_beta": ("scalecom",),
    # the schemes whose collectives a flag moves: ZeRO-3 gathers and reduces on its own
    # schedule, and the sparse and quantized schemes send after backward, once the whole
    # gradient is there to select from or quantize (their dense fallbacks, sparsity 0 and
    # bits at the gradient's width, are dense-ddp's)
    "overlap_grad_reduce": ("dense-ddp", "dense-zero1", "dense-zero2"),
    "overlap_param_gather": ("dense-zero1", "dense-zero2", "scape-partitioned"),
}


def foreign_options(scheme: str, typed) -> list[str]:
    """The options among `typed` (SchemeConfig fields or extra keys) that `scheme` ignores."""
    return sorted(o for o in typed if scheme not in OPTION_SCHEMES.get(o, (scheme,)))


# SchemeConfig options whose flag is not the option's own name with dashes
FLAGS = {"density_warmup_steps": "--density-warmup", "overlap_grad_reduce": "--overlap-grad",
         "overlap_param_gather": "--overlap-param"}


def flag(option: str) -> str:
    """The command-line flag of a SchemeConfig option."""
    return FLAGS.get(option, "--" + option.replace("_", "-"))
