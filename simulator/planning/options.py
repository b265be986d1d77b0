"""A step's options as a user gives them: small frozen dataclasses that the CLI builds once and
passes whole to simulate, compare and plan (as torchtitan's per-component configs do).

`None` means "not given" everywhere: `StepOptions.config` resolves what was not given (the
attention kernel, sequence parallelism, the TP overlap) and `StepOptions.ran` says what ran, so
every output carries the options it ran with. A value that was given is used or refused, never
replaced by a default.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from profiles import load_hardware, load_model
from scape.plan import Dtypes, foreign_options
from simulator.planning.compare import parse_scheme, refuse_unread
from simulator.step.compute import pricing
from simulator.step.step_config import (
    DEEPSPEED_OVERLAP,
    StepConfig,
    deepspeed_scheme,
    refuse_expert_options,
    stack_attention,
    stack_loss,
)
from vocabulary.errors import UserError
from vocabulary.names import DEFAULT_GRAD_DTYPE, DEFAULT_PARAM_DTYPE, DTYPE_BYTES

MAX_STEPS = 10**12  # far above any run: a typo is refused, not simulated for hours
# the share of a micro-batch's compute the host's wait must reach to be said unasked (a
# display rule: every eager pass waits a little, simulator/step/host.py)
HOST_SAID = 0.01


@dataclass(frozen=True)
class Batch:
    """Sequences per micro-batch and per step (`grad_accum` or `global_batch`, not both)."""

    micro_batch: int = 1
    seq_len: int | None = None  # None: the model profile's
    grad_accum: int | None = None  # None: 1, or what global_batch gives
    global_batch: int | None = None


@dataclass(frozen=True)
class Parallelism:
    """How the model is split: Megatron-Core's tensor, pipeline and context parallelism, and
    what its activations are recomputed."""

    tp: int = 1
    pp: int = 1
    pp_schedule: str = "1f1b"  # 1f1b | interleaved
    virtual_stages: int | None = None  # interleaved: model chunks per stage; None: 2
    # none | selective | selective-norm | selective-op | full | selective:<modules>
    # (vocabulary/recompute.py)
    recompute: str = "none"
    sequence_parallel: bool | None = None  # None: on wherever there is a TP group
    cp: int = 1
    # expert parallelism (a model with [moe]; simulator/step/moe.py): None is not given
    ep: int = 1
    etp: int | None = None  # None: --tp (Megatron-Core's default)
    moe_imbalance: float | None = None  # None: 1, even load (an assumption, said so)
    moe_dispatcher: str | None = None  # None: alltoall
    moe_overlap: bool | None = None  # None: off (Megatron-Core's default)
    moe_shared_overlap: bool | None = None  # None: off (Megatron-Core's default)
    # hybrid sharding: a ZeRO scheme's shard group (None: every data-parallel rank)
    shard_group: int | None = None
    # multi-token prediction layers (Megatron-Core --mtp-num-layers; None: none) and
    # Megatron-Core's --pipeline-model-parallel-layout (None: the even split)
    mtp_layers: int | None = None
    pp_layout: str | None = None
    # Megatron-Core --use-tp-pp-dp-mapping: ranks ordered tp, cp, pp, dp (a model replica on
    # consecutive GPUs); None: not given, Megatron's default order (tp, cp, dp, pp)
    tp_pp_dp_mapping: bool | None = None


@dataclass(frozen=True)
class Precision:
    """The dtypes gradients are reduced and parameters gathered in, and FP8 GEMMs."""

    grad_dtype: str = DEFAULT_GRAD_DTYPE  # fp32, as Megatron-LM, NeMo and torchtitan (names.py)
    param_dtype: str = DEFAULT_PARAM_DTYPE
    fp8: bool = False
    optimizer_dtype: str = "fp32"
    fp8_param_gather: bool = False  # the distributed optimizer gathers FP8 parameters
    fp8_recipe: str | None = None  # None: not given (Megatron's default, delayed)
    fp8_scope: str | None = None  # None: not given (every linear: names.py FP8_SCOPES)

    def dtypes(self) -> Dtypes:
        return Dtypes(_dtype(self.grad_dtype, "--grad-dtype"),
                      _dtype(self.param_dtype, "--param-dtype"))


@dataclass(frozen=True)
class Overlap:
    """What overlaps compute: the gradient reduction and parameter gather (Megatron's
    overlap_grad_reduce / overlap_param_gather, in buckets) and the tensor-parallel
    collectives (Transformer Engine's userbuffers)."""

    grad: bool | None = None
    param: bool | None = None
    bucket_mb: float | None = None
    tp_comm: bool | None = None  # None: off, Megatron-LM's default


@dataclass(frozen=True)
class SchemeOptions:
    """The scheme (NAME or NAME:VALUE) and the options of its family (None: its default)."""

    spec: str = "dense-adams"
    sparsity: float | None = None
    bits: int | None = None
    optimizer: str | None = None
    update_scope: str | None = None
    refresh_every: int | None = None
    error_feedback: bool | None = None
    score: str | None = None
    sync: str | None = None
    # the authors' reducer (scheme scape): the launch flags of their scaling scripts
    distopt: bool | None = None
    residual_offload: bool | None = None
    param_offload: bool | None = None
    # SCAPE's density schedule, and the run its steps are averaged over
    density_warmup: int | None = None
    density_dense_steps: int | None = None
    density_shape: str | None = None
    run_steps: int | None = None

    def reducer_extra(self) -> dict | None:
        """The authors' reducer options that were given (SchemeConfig.extra)."""
        given = {"distributed_optimizer": self.distopt,
                 "residual_offload": self.residual_offload,
                 "param_offload": self.param_offload}
        return {k: v for k, v in given.items() if v is not None} or None


@dataclass(frozen=True)
class Pricing:
    """How the step is priced: the collective algorithm, and forward/backward from shapes (with
    an attention kernel) or at an MFU."""

    algo: str = "auto"
    mfu: float | None = None
    attention: str | None = None  # None: flash, where shapes price the step
    loss: str | None = None  # None: the stack's (fp32 under Megatron, eager under torchtitan)
    stack: str | None = None  # None: megatron (what the training stack keeps, STACKS)
    metric_passes: int = 0  # a trainer's training-metric cross-entropies per micro-batch
    cuda_graphs: bool = False  # the layers replayed as CUDA graphs: no per-kernel host launch
    host_launch_us: float | None = None  # the host's time per kernel launch (None: profile's)
    # torchtitan's torch.compile fuses its elementwise ops (None: off, torchtitan's default)
    torch_compile: bool | None = None
    # PyTorch's pipelining keeps every micro-batch's outputs (torchtitan before 2025; None:
    # today's, none kept)
    pp_kept_outputs: bool | None = None


@dataclass(frozen=True)
class StepOptions:
    """One step as asked: model, hardware and GPU count by name, and the option groups."""

    model: str
    hardware: str
    gpus: int
    scheme: SchemeOptions = SchemeOptions()
    batch: Batch = Batch()
    parallelism: Parallelism = Parallelism()
    precision: Precision = Precision()
    overlap: Overlap = Overlap()
    pricing: Pricing = Pricing()

    def scheme_fields(self) -> dict:
        """The SchemeConfig fields the flags give (None: not given), bucket size checked."""
        return scheme_fields(self.scheme, self.overlap)

    def run_steps(self) -> int | None:
        """Steps to average over: `run_steps`, else the density schedule itself (what its dense
        steps and warm-up cost while they last; the authors' scripts warm up over 10k of 100k
        iterations), else none (steady step only). The scheme options are checked first."""
        self.scheme_fields()
        s = self.scheme
        return run_steps(s.run_steps, s.density_warmup, s.density_dense_steps, s.density_shape)

    def parallel(self) -> dict:
        """The parallel and pricing options as given, in the rows' column order."""
        p, pr = self.parallelism, self.pricing
        return {"pp": p.pp, "pp_schedule": str(p.pp_schedule),
                "virtual_stages": p.virtual_stages, "recompute": str(p.recompute),
                "sequence_parallel": p.sequence_parallel, "mfu": pr.mfu,
                "attention": None if pr.attention is None else str(pr.attention),
                "tp_comm_overlap": self.overlap.tp_comm, "cp": p.cp,
                "fp8": self.precision.fp8, "loss": pr.loss,
                "optimizer_dtype": str(self.precision.optimizer_dtype),
                "stack": None if pr.stack is None else str(pr.stack),
                "metric_passes": pr.metric_passes, "cuda_graphs": pr.cuda_graphs,
                "host_launch_us": pr.host_launch_us, "torch_compile": pr.torch_compile,
                "pp_kept_outputs": pr.pp_kept_outputs, "mtp_layers": p.mtp_layers,
                "pp_layout": p.pp_layout, "tp_pp_dp_mapping": p.tp_pp_dp_mapping}

    def experts(self) -> dict:
        """The expert-parallel options as given (None: not given)."""
        p = self.parallelism
        return {"ep": p.ep, "etp": p.etp, "moe_imbalance": p.moe_imbalance,
                "moe_dispatcher": None if p.moe_dispatcher is None else str(p.moe_dispatcher),
                "moe_overlap": p.moe_overlap, "moe_shared_overlap": p.moe_shared_overlap}

    def ran(self, cfg: StepConfig) -> dict:
        """`parallel()` as the step ran it: each given value, and what `config` chose for
        those not given (the attention kernel, sequence parallelism, the TP overlap); for a
        model with experts, its expert-parallel options as they ran (a dense model's rows
        carry none)."""
        chosen = ("attention", "sequence_parallel", "tp_comm_overlap", "loss", "stack")
        ran = {k: getattr(cfg, k) if k in chosen else v for k, v in self.parallel().items()}
        if cfg.pp_schedule == "interleaved" and cfg.pp > 1:  # the chunks it ran (None: 2)
            ran["virtual_stages"] = cfg.chunks_pp
        # hybrid sharding and FP8 parameter gathers, where asked (a plain run carries neither)
        if cfg.shard_group is not None:
            ran.update(shard_group=cfg.shard_group,
                       replica_groups=cfg.grad_ranks // cfg.shard_group)
        if cfg.fp8_param_gather:
            ran["fp8_param_gather"] = True
        if cfg.fp8:  # the recipe an FP8 run's casts were priced with, and what it quantized
            ran["fp8_recipe"] = cfg.cast_recipe
            ran["fp8_scope"] = cfg.quantized_gemms
        # torch.compile: a torchtitan run's rows say whether its elementwise ops were fused
        ran.pop("torch_compile", None)
        if cfg.stack == "torchtitan":
            ran["torch_compile"] = cfg.torch_compile
        # the pipeline's kept outputs: a torchtitan run with stages says which it priced
        ran.pop("pp_kept_outputs", None)
        if cfg.stack == "torchtitan" and cfg.pp > 1:
            ran["pp_kept_outputs"] = cfg.keeps_pp_outputs
        # MTP layers and a pipeline layout, where asked
        ran.pop("mtp_layers", None)
        ran.pop("pp_layout", None)
        if cfg.mtp_layers:
            ran["mtp_layers"] = cfg.mtp_layers
        if cfg.pp_layout is not None:
            ran["pp_layout"] = cfg.pp_layout
        ran.pop("tp_pp_dp_mapping", None)  # the rank order, where asked
        if cfg.tp_pp_dp_mapping:
            ran["tp_pp_dp_mapping"] = True
        # CUDA graphs and the host's time a kernel, where asked or where the host held the
        # layers back by HOST_SAID of their time or more: what it held back (every eager pass
        # waits a little, the host and GPU never overlapping perfectly: simulator/step/host.py)
        ran.pop("cuda_graphs", None)
        ran.pop("host_launch_us", None)
        from simulator.step.simulate import _fwd_bwd

        times = _fwd_bwd(cfg)
        wait = times.parts.get("host_wait", 0.0)
        if (cfg.cuda_graphs or cfg.host_launch_us is not None
                or wait >= HOST_SAID * (times.fwd_s + times.bwd_s)):
            from simulator.step.roofline import host_launch_s

            ran.update(cuda_graphs=cfg.cuda_graphs,
                       host_launch_us=host_launch_s(cfg.hardware, False,
                                                    cfg.host_launch_us) * 1e6,
                       host_wait_per_micro_batch_s=wait)
        if cfg.model.moe is not None:
            ran.update(ep=cfg.ep, etp=cfg.expert_tp, edp=cfg.edp,
                       moe_imbalance=cfg.moe_imbalance, moe_dispatcher=cfg.moe_dispatcher,
                       moe_overlap=cfg.moe_overlap, moe_shared_overlap=cfg.moe_shared_overlap)
        return ran

    def config(self, lineup: list[str] | None = None) -> StepConfig:
        """The step these options describe. With `lineup` (compare), the scheme flags are
        shared by the line-up's schemes: one that none of them reads is refused. An attention
        kernel given where forward and backward are priced by an MFU (which has none) is
        refused rather than ignored."""
        parallel = self.parallel()
        typed = parallel["attention"]
        tp = self.parallelism.tp
        if parallel["sequence_parallel"] and tp == 1:
            raise UserError("--sequence-parallel splits activations over the tensor-parallel "
                            "group, and --tp 1 has none: give --tp above 1 or leave it out")
        if parallel["sequence_parallel"] is None:
            parallel["sequence_parallel"] = tp > 1
        if parallel["stack"] is None:
            parallel["stack"] = "megatron"  # not given: Megatron-LM / NeMo
        if parallel["torch_compile"] is None:
            parallel["torch_compile"] = False  # not given: torchtitan's default, eager
        if parallel["loss"] is None:  # not given: the stack's own cross-entropy
            parallel["loss"] = stack_loss(parallel["stack"])
        hardware = load_hardware(self.hardware)
        if typed is None:  # not given: the stack's own attention kernel
            parallel["attention"] = stack_attention(parallel["stack"], hardware)
        if parallel["tp_comm_overlap"] is None:
            parallel["tp_comm_overlap"] = False  # not given: Megatron-LM's default
        if parallel["mtp_layers"] is None:
            parallel["mtp_layers"] = 0  # not given: Megatron-Core's default, none
        if parallel["tp_pp_dp_mapping"] is None:
            parallel["tp_pp_dp_mapping"] = False  # not given: Megatron's tp-cp-dp-pp order
        b = self.batch
        e = self.experts()
        moe = {"ep": e["ep"], "etp": e["etp"],
               "moe_imbalance": 1.0 if e["moe_imbalance"] is None else e["moe_imbalance"],
               "moe_dispatcher": ("alltoall" if e["moe_dispatcher"] is None
                                  else e["moe_dispatcher"]),
               "moe_overlap": bool(e["moe_overlap"]),
               "moe_shared_overlap": bool(e["moe_shared_overlap"])}
        model = load_model(self.model)
        refuse_expert_options(model, [f"--{k.replace('_', '-')}" for k, v in e.items()
                                      if v is not None and not (k == "ep" and v == 1)])
        scheme = scheme_config(self.scheme.spec, self.scheme_fields(),
                               self.scheme.reducer_extra(), lineup)
        if parallel["stack"] == "deepspeed":  # a typed overlap is refused, never replaced
            if self.overlap.grad or self.overlap.param:
                raise UserError(DEEPSPEED_OVERLAP)
            scheme = deepspeed_scheme(scheme)
        cfg = StepConfig(
            model=model, hardware=hardware,
            gpus=self.gpus, **moe, shard_group=self.parallelism.shard_group,
            fp8_param_gather=self.precision.fp8_param_gather,
            fp8_recipe=self.precision.fp8_recipe, fp8_scope=self.precision.fp8_scope,
            scheme=scheme,
            micro_batch=b.micro_batch, seq_len=b.seq_len,
            grad_accum=1 if b.grad_accum is None else b.grad_accum, tp=tp,
            global_batch=b.global_batch, dtypes=self.precision.dtypes(),
            algo=self.pricing.algo, **parallel,
        ).validate()
        if b.grad_accum is None and b.global_batch is None and model.global_batch:
            # neither given: the model's global batch, as plan and report scaling use
            cfg = replace(cfg, global_batch=model_batch(model.global_batch,
                                                        b.micro_batch * cfg.dp)).validate()
        if (b.grad_accum is not None and b.global_batch is not None
                and b.grad_accum != cfg.accum):
            raise UserError(f"--grad-accum {b.grad_accum} contradicts --global-batch "
                            f"{b.global_batch} (micro-batch {b.micro_batch} x data-parallel "
                            f"{cfg.dp} gives {cfg.accum} micro-batches per step): give one")
        mfu, how = pricing(cfg.model, cfg.hardware, cfg.mfu)
        if typed is not None and mfu is not None:
            raise UserError(f"--attention {typed}: forward and backward are priced by {how}, "
                            "which has no attention kernel; leave --attention out (or --mfu, "
                            "where it was given, to price from shapes)")
        return cfg


def model_batch(batch: int, per_step: int) -> int:
    """The model profile's global batch where it splits into whole micro-batches over the
    data-parallel ranks (`per_step` sequences, one micro-batch each), else the nearest that
    does (at least one micro-batch a rank): the default of simulate and compare, which the
    header and the rows state (`global_batch_default`)."""
    return per_step * max(1, round(batch / per_step))


def compute_model(cfg: StepConfig) -> str:
    """How this step's forward and backward are priced (shapes or an MFU, and why)."""
    return pricing(cfg.model, cfg.hardware, cfg.mfu)[1]


def _dtype(name: str, flag: str) -> int:
    if name not in DTYPE_BYTES:
        raise UserError(f"{flag} must be one of {', '.join(DTYPE_BYTES)}, got {name!r}")
    return DTYPE_BYTES[name]


def scheme_fields(scheme: SchemeOptions, overlap: Overlap) -> dict:
    """SchemeConfig fields from the flags (None: not given); a bucket size is checked here."""
    bucket_mb = overlap.bucket_mb
    if bucket_mb is not None and not (math.isfinite(bucket_mb) and bucket_mb > 0):
        raise UserError(f"--bucket-mb must be a finite positive size, got {bucket_mb!r} (one "
                        "bucket: give a size above the gradient's, e.g. 100000)")
    return {
        "sparsity": scheme.sparsity, "bits": scheme.bits, "optimizer": scheme.optimizer,
        "overlap_grad_reduce": overlap.grad, "overlap_param_gather": overlap.param,
        "bucket_bytes": bucket_mb * 1e6 if bucket_mb is not None else None,
        "update_scope": scheme.update_scope, "refresh_every": scheme.refresh_every,
        "error_feedback": scheme.error_feedback, "score": scheme.score,
        "sync": scheme.sync, "density_warmup_steps": scheme.density_warmup,
        "density_dense_steps": scheme.density_dense_steps,
        "density_shape": scheme.density_shape,
    }


def scheme_config(spec: str, fields: dict, extra: dict | None = None,
            lineup: list[str] | None = None):
    """A scheme from NAME[:VALUE] and the flags given (None: the scheme's default); an option
    the scheme does not read is refused. With `lineup` (compare), the flags are shared by the
    line-up's schemes: one that none of them reads is refused."""
    options = {k: v for k, v in fields.items() if v is not None}
    base = replace(parse_scheme("dense-adams"), **options)
    if extra:
        base = replace(base, extra={**base.extra, **extra})
    typed = frozenset(options) | frozenset(extra or ())
    if lineup is not None:
        refuse_unread([*lineup, spec], typed)
        typed -= set(foreign_options(parse_scheme(spec).scheme, typed))
    return parse_scheme(spec, base.validate(), given=typed)


def run_steps(run_steps: int | None, density_warmup: int | None,
              dense_steps: int | None = None, shape: str | None = None) -> int | None:
    """Steps to average over (`StepOptions.run_steps`), each bound checked."""
    for flag, value in (("--run-steps", run_steps), ("--density-warmup", density_warmup),
                        ("--density-dense-steps", dense_steps)):
        if value is not None and value > MAX_STEPS:
            raise UserError(f"{flag} must be at most {MAX_STEPS:.0e} steps, got {value}")
    if run_steps is not None and run_steps < 1:
        raise UserError(f"--run-steps must be positive, got {run_steps}")
    if shape is not None and not density_warmup:  # a shape of no warm-up would be dropped
        raise UserError(f"--density-shape {shape!s}: the shape of a density warm-up; give "
                        "--density-warmup W too")
    if dense_steps and not density_warmup and run_steps is None:
        raise UserError(f"--density-dense-steps {dense_steps} without a warm-up: the run to "
                        "average over would be the dense steps alone; give --run-steps (longer) "
                        "or --density-warmup")
    schedule = (density_warmup or 0) + (dense_steps or 0)
    if run_steps is not None and schedule > run_steps:
        raise UserError(f"--run-steps {run_steps} ends before the density schedule does "
                        f"({schedule} steps of dense steps and warm-up): the run would never "
                        "send at the sparsity asked for; a longer run, or a shorter schedule")
    if run_steps is not None:
        return run_steps
    return schedule if schedule > 0 else None
