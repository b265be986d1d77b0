"""Communication plans: what each scheme sends and computes per step (DESIGN sections 3-5).

Torch-free: the simulator imports this module, and the runtime executes exactly these plans.

Size convention (nccl-tests, PERFORMANCE.md): a CommOp's `size_bytes` is the total array size S
of the collective: the full array for all_reduce and broadcast, the full (gathered) array for
reduce_scatter and all_gather, one rank's send buffer for all_to_all. Bytes a rank puts on the
wire follow from S: all_reduce 2(P-1)/P*S, reduce_scatter and all_gather (P-1)/P*S,
all_to_all (P-1)/P*S, broadcast S (root).

N parameters, P data-parallel ranks, density d = 1 - sparsity, k = d*N.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from profiles import UserError

COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all")
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

    def wire_bytes(self, world: int) -> float:
        """Bytes one rank sends for this op (the bandwidth term of DESIGN section 4)."""
        return WIRE_FACTOR[self.collective](world) * self.size_bytes


@dataclass(frozen=True)
class Kernel:
    """A compression or optimizer kernel over `elements` values, on the compute stream."""

    name: str
    kind: str  # a key of simulator.compute.KERNEL_BYTES
    elements: float
    stage: str = "pre"
    # parameter tensors it loops over, where it does (the runtime's copies and the authors'
    # reducer: a profile's per_tensor_us prices each); None: one pass over a flat buffer
    tensors: int | None = None


@dataclass(frozen=True)
class StepPlan:
    ops: tuple[CommOp, ...]
    kernels: tuple[Kernel, ...]

    def wire_bytes(self, world: int, micro_batches: int = 1) -> float:
        return sum(op.wire_bytes(world) * (micro_batches if op.every_micro_batch else 1)
                   for op in self.ops)


@dataclass(frozen=True)
class Plan:
    """A scheme's steady state: step kinds and the fraction of steps each takes."""

    scheme: str
    steps: tuple[tuple[float, StepPlan], ...]

    def wire_bytes(self, world: int, micro_batches: int = 1) -> float:
        """Bytes one rank sends per step, averaged over step kinds."""
        return sum(w * s.wire_bytes(world, micro_batches) for w, s in self.steps)


@dataclass(frozen=True)
class Dtypes:
    grad_bytes: int = 2  # gradients as reduced (bf16 in Megatron unless grad_reduce_in_fp32)
    param_bytes: int = 2  # parameters as all-gathered by the distributed optimizer (bf16)


@dataclass(frozen=True)
class SchemeConfig:
    """A scheme and its options; `validate` says what is wrong in one line."""

    scheme: str
    optimizer: str = "adams"  # adamw | adams
    sparsity: float = 0.0
    bits: int = 8
    bucket_bytes: float | None = None  # None: Megatron's default, see _buckets
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = False
    # SCAPE options (DESIGN section 5); defaults chosen by reports/convergence/ (tiny-gpt,
    # 1,000 steps, 2 ranks): no error feedback was best at 90% and 99% sparsity, the masked
    # update beat "all", |m| beat |m|/sqrt(v), and dense refresh every 10 steps hurt.
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
        if self.scheme not in SCHEMES:
            raise UserError(f"unknown scheme {self.scheme!r}; choose one of: {scheme_names()}")
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
SHAPES = ("geometric", "linear")  # density warm-up shapes


# Megatron's default (40M elements) gives tens for the largest models, PyTorch DDP's 25 MB a few
# thousand for a 70B model; each bucket is simulated, so a few bytes each would never end.
MAX_BUCKETS = 10_000


def _buckets(size: float, elem_bytes: int, cfg: SchemeConfig, world: int) -> int:
    """Equal buckets of at most `bucket_bytes`. By default Megatron-Core's: max(40M, 1M x DP)
    elements (megatron/core/distributed/distributed_data_parallel_config.py, bucket_size), so
    large data-parallel groups get few, large buckets. Megatron uses one bucket when it does not
    overlap: pass bucket_bytes=inf for that."""
    if cfg.bucket_bytes is not None:
        limit = cfg.bucket_bytes
    else:
        limit = max(40e6, 1e6 * world) * elem_bytes
    ratio = size / limit  # inf where a subnormal limit overflows the division
    buckets = max(1, math.ceil(ratio)) if ratio <= MAX_BUCKETS else ratio
    if buckets > MAX_BUCKETS:
        given = (f"--bucket-mb {limit / 1e6:g}" if cfg.bucket_bytes is not None else
                 f"the default bucket ({limit / 1e6:g} MB, Megatron's max(40M, 1M x DP) "
                 "elements)")
        raise UserError(f"{given} cuts {size / 1e6:,.0f} MB into {buckets:.3g} buckets; at "
                        f"most {MAX_BUCKETS:,}: give a larger --bucket-mb where the command "
                        "takes one, or a smaller model")
    return buckets


def _grad_phase(cfg: SchemeConfig) -> str:
    return "backward" if cfg.overlap_grad_reduce else "after_backward"


def _param_phase(cfg: SchemeConfig) -> str:
    return "next_forward" if cfg.overlap_param_gather else "after_update"


def _optimizer(cfg: SchemeConfig, elements: float) -> Kernel:
    return Kernel(f"{cfg.optimizer} update", f"optimizer_{cfg.optimizer}", elements, "update")


def dense_ddp(cfg: SchemeConfig, n: int, world: int, dt: Dtypes) -> Plan:
    """Full gradient all-reduce, bucketed and overlapped with backward; every rank updates N."""
    size = n * dt.grad_bytes
    op = CommOp("grad all-reduce", "all_reduce", size, _grad_phase(cfg),
                _buckets(size, dt.grad_bytes, cfg, world))
    return Plan(cfg.scheme, ((1.0, StepPlan((op,), (_optimizer(cfg, n),))),))


def dense_zero1(cfg: SchemeConfig, n: int, world: int, dt: Dtypes) -> Plan:
    """Megatron distributed optimizer: gradient reduce-scatter, shard update, param all-gather."""
    g, p = n * dt.grad_bytes, n * dt.param_bytes
    ops = (
        CommOp("grad reduce-scatter", "reduce_scatter", g, _grad_phase(cfg),
               _buckets(g, dt.grad_bytes, cfg, world)),
        CommOp("param all-gather", "all_gather", p, _param_phase(cfg),
               _buckets(p, dt.param_bytes, cfg, world)),
    )
    return Plan(cfg.scheme, ((1.0, StepPlan(ops, (_optimizer(cfg, n / world),))),))


def dense_zero2(cfg: SchemeConfig, n: int, world: int, dt: Dtypes) -> Plan:
    """ZeRO-2 (Rajbhandari et al. 2020, section 5.2): ZeRO-1's collectives, the gradient kept
    only as this rank's shard (simulator/memory.py counts it so)."""
    return Plan(cfg.scheme, dense_zero1(cfg, n, world, dt).steps)


def dense_zero3(cfg: SchemeConfig, n: int, world: int, dt: Dtypes) -> Plan:
    """ZeRO-3 / FSDP FULL_SHARD (Rajbhandari et al. 2020, section 5.3; PyTorch FSDP): the
    parameters live as shards; every micro-batch all-gathers each unit's parameters before its
    forward and again before its backward (resharded in between), and reduce-scatters its
    gradients as backward produces them; the update runs on the shard. The forward gathers gate
    the forward unit by unit, the backward gathers are prefetched one unit ahead."""
    g, p = n * dt.grad_bytes, n * dt.param_bytes
    gathers = _buckets(p, dt.param_bytes, cfg, world)
    ops = (
        CommOp("param all-gather (forward)", "all_gather", p, "next_forward", gathers, True),
        CommOp("param all-gather (backward)", "all_gather", p, "backward", gathers, True),
        CommOp("grad reduce-scatter", "reduce_scatter", g, "backward",
               _buckets(g, dt.grad_bytes, cfg, world), True),
    )
    return Plan(cfg.scheme, ((1.0, StepPlan(ops, (_optimizer(cfg, n / world),))),))


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
        _optimizer(cfg, n),
    )
    return Plan(cfg.scheme, ((1.0, StepPlan(ops, kernels)),))


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


def kept(density: float, n: float) -> int:
    """How many of n values a sparsifier keeps: round(d * n), at least one."""
    return max(1, round(density * n))


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
        _optimizer(cfg, n),
    )
    return Plan(cfg.scheme, ((1.0, StepPlan(ops, kernels)),))


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
        _optimizer(cfg, n),
    )
    return Plan(cfg.scheme, ((1.0, StepPlan(ops, kernels)),))


def mask_bytes(n: int, world: int, k: float) -> float:
    """SCAPE mask all-gather size: per shard, int32 indices or a bitmap, whichever is smaller."""
    per_rank = min(k / world * INDEX_BYTES, math.ceil(math.ceil(n / world) / 8))
    return world * per_rank


def scape_partitioned(cfg: SchemeConfig, n: int, world: int, dt: Dtypes) -> Plan:
    """This project's partitioned SCAPE (DESIGN section 5): AdamS with first-moment masks chosen
    per shard. (`scape` itself is the authors' reducer: scape/plan_authors.py.)

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
        CommOp("param all-gather", "all_gather", param_size, _param_phase(cfg),
               _buckets(param_size, dt.param_bytes, cfg, world)),
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
        kernels += [_optimizer(cfg, k / world), Kernel("weight decay", "scale", n, "update"),
                    select]
    else:
        kernels += [_optimizer(cfg, n / world), select]
    sparse = StepPlan(ops, tuple(kernels))
    if cfg.refresh_every == 0:
        return Plan(cfg.scheme, ((1.0, sparse),))
    zero1 = dense_zero1(cfg, n, world, dt).steps[0][1]
    # a refresh step is dense, and still chooses and gathers the next mask
    dense = StepPlan((*zero1.ops, mask), (*zero1.kernels, select))
    r = cfg.refresh_every
    return Plan(cfg.scheme, ((1 - 1 / r, sparse), (1 / r, dense)))


def _scape_authors(*args) -> Plan:
    # imported when called: scape/plan_authors.py imports this module's types
    from scape.plan_authors import scape_authors

    return scape_authors(*args)


Builder = Callable[[SchemeConfig, int, int, Dtypes], Plan]
SCHEMES: dict[str, Builder] = {
    "dense-ddp": dense_ddp,
    "dense-zero1": dense_zero1,
    "dense-zero2": dense_zero2,
    "dense-zero3": dense_zero3,
    "quantized": quantized,
    "topk": topk,
    "scalecom": scalecom,
    "scape": _scape_authors,  # the authors' reducer, scape/plan_authors.py
    "scape-partitioned": scape_partitioned,
}
# Schemes whose plan depends on the parameter tensors, not only their total.
PER_TENSOR = frozenset({"scape"})
# Both SCAPE variants: the density schedule applies to them.
SCAPE_SCHEMES = frozenset({"scape", "scape-partitioned"})
DENSITY_OPTIONS = ("density_warmup_steps", "density_dense_steps", "density_shape")
# Schemes whose ranks each hold only a shard of the synced gradient and of the optimizer state
# (ZeRO-1; simulator/memory.py counts the state so): clipping by the gradient's global norm
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


# Names people use for the paper's baselines: Megatron's distributed optimizer with each update.
ALIASES: dict[str, dict] = {
    "dense-adamw": {"scheme": "dense-zero1", "optimizer": "adamw"},
    "dense-adams": {"scheme": "dense-zero1", "optimizer": "adams"},
}


def scheme_names(sep: str = ", ") -> str:
    """Every name a scheme goes by: the paper's baseline aliases first, then the schemes."""
    return sep.join([*ALIASES, *SCHEMES])


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
