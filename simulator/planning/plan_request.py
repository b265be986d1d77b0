"""What `scape plan` is asked (`PlanRequest`): the model, tokens and hardware to plan for,
the limits (GPUs, deadline, budget, price), the schemes and the options every plan shares
(simulator/planning/options.py Precision and Overlap), each checked in one line before any plan is
simulated. The search itself is simulator/planning/planner.py."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from profiles import HardwareProfile, ModelProfile, UserError
from profiles.hardware import PRICE_TIER_KEYS, SPOT_RATE_KEY
from scape.plan import SCAPE_SCHEMES, Dtypes
from simulator.network.collective import MAX_GPUS
from simulator.planning.compare import parse_scheme, refuse_same
from simulator.planning.options import Overlap, Precision
from simulator.step.batch import check_workers
from simulator.step.compute import (
    check_fp8,
    check_fp8_recipe,
    check_fp8_scope,
    fp8_recipe_or_default,
    fp8_scope_or_default,
)
from simulator.step.step_config import (
    check_compile,
    check_cp,
    check_host_launch,
    refuse_expert_options,
    stack_loss,
)

# dense-zero3 (FSDP) is searched when asked for (--schemes): it gathers for every micro-batch,
# thousands of collectives per step at large accumulation, and would dominate the search time
PLAN_SCHEMES = (
    "dense-adamw", "dense-adams", "dense-ddp", "quantized:8", "quantized:4", "topk:0.99",
    "scalecom:0.99", "scape:0.9", "scape:0.99",
)
MAX_PRICE = 1e6  # USD per GPU-hour
MAX_TOKENS = 1e18  # a thousand times the largest runs' 15T; more overflows hours and cost


# what plans are ranked by: hours to train (then cost), cost (then hours), hours to reach
# dense AdamS's quality (needs a convergence study), or the wall time (then cost) or the cost
# (then wall time) with failures, restarts and checkpoints (simulator/run/goodput.py)
RANKS = ("time", "cost", "quality", "wall-time", "wall-cost", "energy")
# the GPU-hour prices a plan may pay (a profile's [price]); spot's interruptions join the
# failure model's
PRICE_TIERS = tuple(PRICE_TIER_KEYS)

@dataclass(frozen=True)
class PlanRequest:
    model: ModelProfile
    tokens: float
    hardware: tuple[HardwareProfile, ...]
    max_gpus: int = 4096
    deadline_hours: float | None = None
    budget_usd: float | None = None
    # plans below this model FLOPs utilisation are left out (simulator/step/compute.py mfu):
    # a plan with an 80% pipeline bubble is fast only by its GPU count
    min_mfu: float | None = None
    # GB of each GPU's usable memory a plan must leave free at its peak (--min-spare-gb): the
    # caching allocator holds more than the live tensors (most published reserved peaks are
    # above the model's, bench/memory_published.py), so a plan at 1 GB to spare may not run;
    # None: no margin
    min_spare_GB: float | None = None
    price_per_gpu_hour: float | None = None  # overrides every profile's price
    global_batch: int | None = None  # default: the model profile's
    seq_len: int | None = None
    schemes: tuple[str, ...] = PLAN_SCHEMES
    # the dtypes of every plan's gradients and parameters, and FP8 GEMMs in every plan
    precision: Precision = field(default_factory=Precision)
    workers: int | None = None  # processes; default: every core
    # SCAPE's density warm-up as a fraction of the run's steps (simulator/step/schedule.py); 0: the
    # target density from the first step. The authors' scripts: 10k of 100k iterations, 0.1.
    density_warmup_frac: float = 0.0
    # a convergence study's tokens to dense AdamS's quality (profiles/quality.py): with it each
    # plan also gets the time and cost to reach that quality, and `rank` may be "quality"
    quality: object | None = None  # profiles.quality.QualityStudy
    rank: str = "time"  # time | cost | quality
    # tensor-parallel collectives overlapped with their GEMMs in every plan with a TP group
    # (simulator/step/tp_overlap.py; the plans run sequence parallelism): overlap.tp_comm; the
    # gradient and parameter overlap of each scheme are its own (no flags here)
    overlap: Overlap = field(default_factory=Overlap)
    # context-parallel ranks per sequence in every plan (simulator/step/cp_comm.py); not searched
    cp: int = 1
    # expert parallelism of a model with experts (simulator/step/moe.py): None searches EP
    # (planner.expert_degrees) at ETP 1; given, every plan takes it
    ep: int | None = None
    etp: int | None = None
    moe_imbalance: float = 1.0
    moe_dispatcher: str = "alltoall"
    moe_overlap: bool = False
    moe_shared_overlap: bool = False  # Megatron-Core --moe-shared-expert-overlap
    # every plan's layers as CUDA graphs, and the host's time per kernel launch (None: the
    # profile's); simulator/step/roofline.py host_launch_s
    cuda_graphs: bool = False
    host_launch_us: float | None = None
    # the training stack every plan runs (vocabulary STACKS: what it keeps in memory, its
    # loss, attention kernel and, for torchtitan without torch_compile, eager elementwise ops)
    stack: str = "megatron"
    torch_compile: bool = False
    # failures, restarts and checkpoints (simulator/run/goodput.py): None, the published
    # studies' figures (simulator/run/defaults.py)
    reliability: object | None = None  # simulator.run.goodput.Reliability
    # where the run draws its power (simulator/run/energy.py Site): None, the defaults of
    # profiles/external/grid-intensity.csv; plans above `max_power_MW` of facility power are
    # left out
    site: object | None = None
    max_power_MW: float | None = None
    # which of a profile's [price] tiers every cost pays; spot capacity taken back at
    # `spot_interruptions_per_node_day` (None: the profile's) joins the failures
    price_tier: str = "on-demand"
    spot_interruptions_per_node_day: float | None = None

    def reliability_on(self, hw: HardwareProfile):
        """The failure figures a plan on `hw` runs with: the run's, and on spot capacity the
        interruptions of taking it back too (per node and day, so per GPU over its node)."""
        from simulator.run.defaults import on_profile

        rel = on_profile(self.run_reliability, hw)
        if self.price_tier != "spot":
            return rel
        from dataclasses import replace as _replace

        per_node = (self.spot_interruptions_per_node_day
                    if self.spot_interruptions_per_node_day is not None
                    else hw.price.spot_interruptions_per_node_day)
        return _replace(rel, failures_per_gpu_day=rel.failures_per_gpu_day
                        + per_node / hw.node.gpus_per_node,
                        source=f"{rel.source}; spot: {per_node:g} interruptions per node-day")

    @property
    def run_site(self):
        """The PUE and grid every plan's energy uses: the user's, else the defaults."""
        if self.site is not None:
            return self.site
        from simulator.run.sites import site_of

        return site_of(None, None)

    @property
    def run_reliability(self):
        """The figures every plan's goodput uses: the user's, else the defaults."""
        if self.reliability is not None:
            return self.reliability
        from simulator.run.defaults import default_reliability

        return default_reliability()

    def _check_tier(self) -> None:
        """A tier every profile prices (or --price-per-gpu-hour for all), and on spot a rate
        of taking capacity back, typed or the profile's."""
        if self.price_tier not in PRICE_TIERS:
            raise UserError(f"--price-tier must be one of {', '.join(PRICE_TIERS)}, got "
                            f"{self.price_tier!r}")
        rate = self.spot_interruptions_per_node_day
        if rate is not None and (self.price_tier != "spot" or not (math.isfinite(rate)
                                                                    and rate >= 0)):
            raise UserError("--spot-interruptions-per-node-day is for --price-tier spot, a "
                            f"number of interruptions per node and day, 0 or more; got {rate:g}"
                            f" with --price-tier {self.price_tier}")
        if self.price_tier == "on-demand":
            return
        key = PRICE_TIER_KEYS[self.price_tier]
        for hw in self.hardware:
            if hw.price is None:
                continue  # said where a price is first needed, as for on-demand
            lacks = hw.price.lacks(self.price_tier)
            if self.price_per_gpu_hour is None and key in lacks:
                raise UserError(f"--price-tier {self.price_tier}: {hw.name}'s [price] has no "
                                f"{key}; give --price-per-gpu-hour, or another tier")
            if rate is None and SPOT_RATE_KEY in lacks:
                raise UserError(f"--price-tier spot: {hw.name}'s [price] has no "
                                "spot_interruptions_per_node_day (how often spot capacity is "
                                "taken back): give --spot-interruptions-per-node-day")

    def _check_experts(self) -> None:
        """Expert options: for a model with experts, an EP that divides them and a load of 1
        or more; refused, not dropped, for a dense model."""
        moe = self.model.moe
        given = [f for f, on in (("--ep", self.ep is not None), ("--etp", self.etp is not None),
                                 ("--moe-imbalance", self.moe_imbalance != 1.0),
                                 ("--moe-overlap", self.moe_overlap),
                                 ("--moe-shared-overlap", self.moe_shared_overlap)) if on]
        if moe is None:
            refuse_expert_options(self.model, given)
            return
        if self.ep is not None and (self.ep < 1 or moe.n_experts % self.ep):
            valid = [e for e in range(1, moe.n_experts + 1) if moe.n_experts % e == 0]
            raise UserError(f"--ep {self.ep} must divide the {moe.n_experts} experts of "
                            f"{self.model.name}: one of {', '.join(map(str, valid))}")
        if self.etp is not None and self.etp < 1:
            raise UserError(f"--etp must be at least 1, got {self.etp}")
        if not (math.isfinite(self.moe_imbalance) and self.moe_imbalance >= 1.0):
            raise UserError(f"--moe-imbalance is the busiest expert-parallel rank's tokens over "
                            f"the mean: 1 or more, got {self.moe_imbalance!r}")

    @property
    def dtypes(self) -> Dtypes:
        return self.precision.dtypes()

    @property
    def fp8(self) -> bool:  # every plan's linear GEMMs in FP8 (simulator/step/roofline.py)
        return self.precision.fp8

    @property
    def fp8_recipe(self) -> str:  # how every FP8 plan scales its casts (given, or delayed)
        return fp8_recipe_or_default(self.precision.fp8_recipe)

    @property
    def fp8_scope(self) -> str:  # which GEMMs every FP8 plan quantizes (given, or all)
        return fp8_scope_or_default(self.precision.fp8_scope)

    @property
    def tp_comm_overlap(self) -> bool:
        return bool(self.overlap.tp_comm)

    @property
    def batch(self) -> int:
        if self.global_batch is not None:
            return self.global_batch
        return self.model.global_batch or 0

    @property
    def seq(self) -> int:
        return self.model.arch.seq_len if self.seq_len is None else self.seq_len

    @property
    def loss(self) -> str:
        """The stack's own cross-entropy (no --loss on plan)."""
        return stack_loss(self.stack)

    def validate(self) -> PlanRequest:
        check_host_launch(self.cuda_graphs, self.host_launch_us)
        check_compile(self.stack, self.torch_compile)
        if self.stack == "deepspeed":
            # the planner searches Megatron's schedules, overlaps and schemes, which
            # DeepSpeed's pipeline engine and BF16_Optimizer do not run
            raise UserError("plan searches Megatron-style layouts (interleaved schedules, "
                            "overlapped reductions, every scheme); --stack deepspeed is priced "
                            "by simulate and compare: give a layout there, or leave --stack "
                            "out")
        if self.rank not in RANKS:
            raise UserError(f"--rank must be one of {', '.join(RANKS)}, got {self.rank!r}")
        if self.max_power_MW is not None and not (math.isfinite(self.max_power_MW)
                                                  and self.max_power_MW > 0):
            raise UserError(f"--max-power-mw must be a positive number of megawatts, got "
                            f"{self.max_power_MW:g}")
        self._check_tier()
        needs_power = self.rank == "energy" or self.max_power_MW is not None
        unpowered = [hw.name for hw in self.hardware if hw.power is None]
        if needs_power and unpowered:
            flag = "--rank energy" if self.rank == "energy" else "--max-power-mw"
            raise UserError(f"{flag}: {', '.join(unpowered)} has no [power] table (what its "
                            "GPUs and nodes draw): give hardware whose profile has one, or a "
                            "profile of your own with [power]")
        if self.rank == "quality" and self.quality is None:
            raise UserError("--rank quality needs --quality STUDY (profiles/quality/STUDY.toml, "
                            "made by bench/convergence_protocol.py)")
        for name, value in (("--global-batch", self.global_batch), ("--seq-len", self.seq_len)):
            if value is not None and value < 1:
                raise UserError(f"{name} must be at least 1, got {value}")
        unread = [f for f, v in (("--overlap-grad", self.overlap.grad),
                                 ("--overlap-param", self.overlap.param),
                                 ("--bucket-mb", self.overlap.bucket_mb)) if v is not None]
        if unread:  # each plan's scheme overlaps as it does by default
            raise UserError(f"{', '.join(unread)}: not an option of plan")
        check_workers(self.workers)
        if self.max_gpus < 1:  # before anything that divides by it or compares with it
            raise UserError(f"--max-gpus must be at least 1, got {self.max_gpus}")
        check_cp(self.cp, self.seq)
        if self.cp > self.max_gpus:
            raise UserError(f"--cp {self.cp}: more context-parallel ranks than --max-gpus "
                            f"{self.max_gpus}")
        self._check_experts()
        # a finite positive number each: inf tokens or an inf price would rank plans by inf
        for name, value in (("--deadline-hours", self.deadline_hours),
                            ("--budget-usd", self.budget_usd),
                            ("--price-per-gpu-hour", self.price_per_gpu_hour)):
            if value is not None and not (math.isfinite(value) and value > 0):
                raise UserError(f"{name} must be a finite positive number, got {value!r}")
        # far above any GPU's rent: a larger figure overflows a run's cost to infinity
        if self.price_per_gpu_hour is not None and self.price_per_gpu_hour > MAX_PRICE:
            raise UserError(f"--price-per-gpu-hour must be at most {MAX_PRICE:,.0f} USD, got "
                            f"{self.price_per_gpu_hour:g}")
        check_tokens(self.tokens)
        if not 1 <= self.max_gpus <= MAX_GPUS:
            raise UserError(f"--max-gpus must be between 1 and {MAX_GPUS:,}, got "
                            f"{self.max_gpus}")
        if self.min_mfu is not None and not (math.isfinite(self.min_mfu)
                                             and 0 < self.min_mfu <= 1):
            raise UserError(f"--min-mfu is a share of the GPU's dense BF16 peak, above 0 and at "
                            f"most 1 (e.g. 0.35 for 35%), got {self.min_mfu!r}")
        if self.min_spare_GB is not None:
            from simulator.memory.peak import usable_GB

            if not (math.isfinite(self.min_spare_GB) and self.min_spare_GB >= 0):
                raise UserError(f"--min-spare-gb is GB of a GPU's memory to leave free, 0 or "
                                f"more (e.g. 4), got {self.min_spare_GB!r}")
            # the most a plan can have: one GPU, no NCCL communicator (a layout with
            # process groups has less: the search leaves those out)
            room, name = min(((usable_GB(hw, 0), hw.name) for hw in self.hardware),
                             default=(math.inf, None))
            if self.min_spare_GB >= room:
                raise UserError(f"--min-spare-gb {self.min_spare_GB:g} leaves nothing to train "
                                f"with: {name} has {room:.1f} GB usable per GPU; give less "
                                "than that")
        if self.deadline_hours is not None and self.budget_usd is not None:
            raise UserError("give either a deadline or a budget, not both")
        if not self.hardware:
            raise UserError("--hardware: give at least one hardware profile")
        if not self.schemes:
            raise UserError("--schemes: give at least one scheme")
        if self.batch < 1:
            raise UserError(f"model {self.model.name} has no default global batch (its "
                            "creators published none); give --global-batch: "
                            + published_batches(self.seq))
        check_tokens(self.tokens, self.batch, self.seq)
        paths = [hw.path for hw in self.hardware]
        twice = sorted({p for p in paths if paths.count(p) > 1})
        if twice:
            raise UserError(f"--hardware: {', '.join(twice)} given twice (by name and by path)")
        named = [hw.name for hw in self.hardware]
        alike = sorted({n for n in named if named.count(n) > 1})
        if alike:  # the rows name their hardware: two files of one name could not be told apart
            raise UserError(f"--hardware: two profiles named {', '.join(alike)} ("
                            + ", ".join(hw.path for hw in self.hardware if hw.name in alike)
                            + "): rename one")
        for hw in self.hardware:
            if self.fp8:  # before any plan is simulated
                check_fp8(self.model, hw)
            check_fp8_recipe(hw, self.precision.fp8_recipe, self.fp8)
            if self.price_per_gpu_hour is None and hw.price is None:
                raise UserError(f"hardware {hw.name} has no [price] in its profile; "
                                "give --price-per-gpu-hour")
        check_fp8_scope(self.model, self.precision.fp8_scope, self.fp8)
        parsed = [parse_scheme(spec) for spec in self.schemes]
        refuse_same(list(self.schemes), parsed)
        if not 0 <= self.density_warmup_frac <= 1:
            raise UserError("density warm-up fraction must be in [0, 1], got "
                            f"{self.density_warmup_frac:g}")
        if self.density_warmup_frac > 0 and parsed and not any(
                cfg.scheme in SCAPE_SCHEMES for cfg in parsed):
            raise UserError(f"--density-warmup-frac {self.density_warmup_frac:g}: no scheme of "
                            f"--schemes {','.join(self.schemes)} warms its density up (only "
                            "SCAPE's do)")
        return self

    def price(self, hw: HardwareProfile) -> float:
        if self.price_per_gpu_hour is not None:
            return self.price_per_gpu_hour
        return hw.price.of(self.price_tier)


def published_batches(seq: int) -> str:
    """The shipped models' published global batches in tokens, and what each is in sequences
    of `seq` tokens: what a user without a batch of their own can pick from."""
    from profiles import load_model
    from profiles.loader import names

    rows = []
    for name in names("model"):
        m = load_model(name)
        if m.global_batch is not None and m.n_params >= 1e9:  # runs of today's sizes
            rows.append((m.global_batch * m.arch.seq_len, name))
    rows.sort()
    said = "; ".join(f"{name} {tokens / 1e6:.1f}M tokens = {tokens / seq:,.0f} sequences"
                     for tokens, name in rows)
    return (f"the published batches of the shipped models, at this run's {seq:,} tokens a "
            f"sequence: {said} (`scape profiles show MODEL` gives each source)")


def check_tokens(tokens, sequences: int | None = None, seq: int | None = None) -> None:
    """--tokens as `plan` and `simulate --tokens` take it: a finite positive number up to
    MAX_TOKENS, and (given a step's `sequences` x `seq`) at least one step: a run is whole
    steps, and a fraction of one is no run."""
    if not (isinstance(tokens, int | float) and math.isfinite(tokens) and tokens > 0):
        raise UserError(f"--tokens must be a finite positive number, got {tokens!r}")
    if tokens > MAX_TOKENS:
        raise UserError(f"--tokens must be at most {MAX_TOKENS:g}, got {tokens!r}")
    if sequences is not None and tokens < sequences * seq:
        raise UserError(f"--tokens {tokens:g} is less than one step of {sequences} "
                        f"sequences x {seq} tokens ({sequences * seq:,}); give at least that, "
                        "or a smaller --global-batch")
