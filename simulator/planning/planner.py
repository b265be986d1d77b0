"""Capacity planning: search GPU counts, schemes, micro-batching, tensor and pipeline
parallelism (1F1B or interleaved) and recomputation for a training run of T tokens; keep what
fits in memory and meets the deadline or budget; rank by time to train (or to dense AdamS's
quality) and cost."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache

import pandas as pd

from profiles import HardwareProfile, UserError
from scape.plan import SCAPE_SCHEMES, SchemeConfig
from simulator.layout.shapes import Routing
from simulator.memory.peak import first_fit, usable_bytes
from simulator.network.topology import domain_used
from simulator.planning.compare import parse_scheme
from simulator.planning.plan_request import PlanRequest
from simulator.step.batch import parallel_map, phase_cache, simulate_cached
from simulator.step.schedule import run_mean
from simulator.step.simulate import lower_bound_s
from simulator.step.step_config import StepConfig
from vocabulary.units import never_zero

MICRO_BATCHES = (1, 2, 4, 8)
TENSOR_DEGREES = (1, 2, 4, 8)  # searched where they divide the NVLink domain
MAX_PIPELINE = 64  # stages searched at most
# pipeline schedules searched for pp > 1: 1F1B, and Megatron's interleaved schedule over 2
# model chunks per stage and over the most of INTERLEAVED_MORE that leave each chunk a layer.
# More chunks shorten the bubble and (the warm-up's 2 (p - 1) + (v - 1) p chunk forwards of
# L / (p v) layers each) the activations held; they cost v times the stage-to-stage sends, so
# the fewest (2) stays searched beside the most. Published runs interleave far more than 2
# chunks (NeMo's GPT-3 175B: 12 per stage; Llama 3 405B on 16 stages)
PIPELINE_SCHEDULES = (("1f1b", 1), ("interleaved", 2))
INTERLEAVED_MORE = (8, 4)
# the first that fits, cheapest first: none; the norms recomputed (Megatron-Core's
# --recompute-modules layernorm; with fused attention Megatron's core-attention recompute
# saves nothing more); torchtitan's op-level policy; the whole layer
RECOMPUTE_ORDER = ("none", "selective-norm", "selective-op", "full")
# a plan whose overheads (bubble, exposed communication, compression) stay below this share of
# its step is compute-bound: its bottleneck column says so
COMPUTE_BOUND = 0.10
# schemes that change the update (what dense AdamS would compute) where they compress: their
# quality is evidence, not a given (quantized at the gradient's own width runs dense)
LOSSY = frozenset({"quantized", "topk", "scalecom", "scape", "scape-partitioned"})
# points on SCAPE's density warm-up per plan: against 257 points, 17 were within 0.31% on
# gpt-345m / llama-1.8b / llama-7b (33: 0.08%), at a 17th of the simulations
RUN_MEAN_NODES = 17
SCAPE_FAMILY = "scape"
# the words every reason for a GPU count a measured profile did not measure carries: the
# planner tells those reasons apart from the others by them
UNMEASURED = "its measurements cover"


@lru_cache(maxsize=256)
def scheme_of(spec: str) -> SchemeConfig:
    """A plan's scheme, parsed once: a planner builds a step for thousands of candidates of a
    handful of schemes (the config is frozen, so they share it)."""
    return parse_scheme(spec)


@dataclass(frozen=True)
class Candidate:
    hardware: HardwareProfile
    gpus: int
    scheme: str
    tp: int
    micro_batch: int
    recompute: str
    memory_GB: float
    pp: int = 1
    schedule: str = "1f1b"
    chunks: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1
    shard_group: int | None = None  # hybrid sharding's group; None: every data-parallel rank

    def step_config(self, req: PlanRequest) -> StepConfig:
        """The step this plan runs."""
        moe = {} if req.model.moe is None else {
            "ep": self.ep, "etp": self.etp, "moe_imbalance": req.moe_imbalance,
            "moe_dispatcher": req.moe_dispatcher, "moe_overlap": req.moe_overlap}
        return StepConfig(
            req.model, self.hardware, self.gpus, scheme_of(self.scheme),
            micro_batch=self.micro_batch, seq_len=req.seq, global_batch=req.batch, tp=self.tp,
            dtypes=req.dtypes, recompute=self.recompute, pp=self.pp, pp_schedule=self.schedule,
            virtual_stages=self.chunks if self.schedule == "interleaved" else None,
            tp_comm_overlap=req.tp_comm_overlap and self.tp > 1, cp=self.cp, fp8=req.fp8,
            shard_group=self.shard_group, **moe)


def pipeline_degrees(n_layers: int) -> list[int]:
    """Pipeline stages searched, up to MAX_PIPELINE and the layer count: the divisors of the
    layer count (even stages) and the products of twos and threes (uneven splits,
    simulator/layout/pipeline.py stage_layers), so that node counts like 3, 6, 12 or 24 times a
    power of two have layouts."""
    top = min(n_layers, MAX_PIPELINE)
    smooth = {2**a * 3**b for a in range(7) for b in range(4)}
    return sorted(d for d in range(1, top + 1) if n_layers % d == 0 or d in smooth)


def gpu_counts(hw: HardwareProfile, req: PlanRequest) -> list[int]:
    """Every GPU count up to the request's max_gpus, in whole nodes, that a layout of the
    request fills: tensor x pipeline x data x context parallel, the data-parallel degree
    dividing the global batch (so its micro-batches split evenly)."""
    g, domain = hw.node.gpus_per_node, hw.node.domain_gpus
    tps = [t for t in TENSOR_DEGREES if domain % t == 0 or g % t == 0]
    dps = [d for d in range(1, req.batch + 1) if req.batch % d == 0]
    counts = {t * p * d * req.cp for t in tps for p in pipeline_degrees(req.model.arch.n_layers)
              for d in dps}
    return sorted(n for n in counts if n <= req.max_gpus and n % g == 0)


def expert_degrees(req: PlanRequest, domain: int, stage_gpus: int) -> list[int]:
    """Expert-parallel degrees searched for a pipeline stage of `stage_gpus` GPUs (at ETP
    `req.etp`, else 1): the one asked, else the powers of two that divide the experts and the
    stage and sit in one NVLink domain or fill whole ones, from half the largest that stays in
    one domain to 8 times it (more experts per rank cost memory, more ranks across the network
    cost dispatch time: the search keeps both sides of the domain; `domain`: the job's GPUs
    in one NVLink domain). [1] without experts."""
    moe = req.model.moe
    if moe is None:
        return [1]
    etp = req.etp or 1
    valid = [e for e in (2**i for i in range(17)) if e <= moe.n_experts
             and moe.n_experts % e == 0 and stage_gpus % (e * etp) == 0
             and (domain % (e * etp) == 0 or (e * etp) % domain == 0)
             and e >= req.moe_imbalance]  # a rank's load is at most all of them
    if req.ep is not None:
        return [req.ep] if req.ep in valid else []
    inside = max((e for e in valid if e * etp <= domain), default=1)
    return [e for e in valid if inside // 2 <= e <= inside * 8]


def shard_groups(scheme: str, ranks: int, tp: int, domain: int) -> list[int | None]:
    """Shard groups searched for a scheme over `ranks` data-parallel ranks: every rank (None),
    and for FSDP (dense-zero3) also hybrid sharding over one NVLink domain's data-parallel
    ranks (FSDP2 HSDP's usual group: gathers on NVLink, all-reduces across), where that is a
    proper divisor of the ranks."""
    inside = domain // tp
    if scheme != "dense-zero3" or inside < 2 or inside >= ranks or ranks % inside:
        return [None]
    return [None, inside]


def layouts(req: PlanRequest, hw: HardwareProfile, gpus: int):
    """(tp, pp, schedule, chunks, ep) a job of `gpus` GPUs can take: tensor parallelism inside
    an NVLink domain dividing the heads and the sequence (sequence parallelism, on with tensor
    parallelism, splits it; context parallelism first, `req.cp`), pipeline stages that leave
    whole tensor- and context-parallel groups and at least a layer per model chunk, and for a
    model with experts the expert-parallel degrees `expert_degrees` searches."""
    n_layers, cp = req.model.arch.n_layers, req.cp
    domain = domain_used(hw, gpus)
    for tp in (t for t in TENSOR_DEGREES if domain % t == 0
               and req.model.arch.splits_over(t) and (req.seq // cp) % t == 0
               and t * cp <= gpus):
        for pp in pipeline_degrees(n_layers):
            stage = gpus // pp
            if gpus % (tp * pp * cp) or (domain % stage and stage % domain):
                continue  # a stage in part of a node, or in whole nodes
            for ep in expert_degrees(req, domain, gpus // pp):
                if pp == 1:
                    yield tp, pp, "1f1b", 1, ep
                    continue
                more = next((v for v in INTERLEAVED_MORE if pp * v <= n_layers), None)
                for schedule, chunks in (*PIPELINE_SCHEDULES, *(() if more is None else
                                                               (("interleaved", more),))):
                    if pp * chunks <= n_layers:
                        yield tp, pp, schedule, chunks, ep


def measured_counts(hw: HardwareProfile) -> set[int] | None:
    """The rank counts a measured profile can price (compute shared on one host up to its
    measured count; collectives at the counts whose per-call overhead was measured); None:
    any count (a profile of GPUs, priced from its hardware)."""
    counts = None
    if hw.slowdown:
        counts = set(range(1, len(hw.slowdown) + 1))
    for measured in hw.collectives.values():
        overheads = measured.get("overhead_s") or {}
        if overheads:  # one rank calls no collective
            counts = ({1, *overheads} if counts is None else counts & {1, *overheads})
    return counts


@dataclass(frozen=True)
class Try:
    """A layout and micro-batch a GPU count can take, before memory decides the schemes and
    the recomputation that fit."""

    tp: int
    pp: int
    schedule: str
    chunks: int
    ep: int
    micro_batch: int

    @property
    def layout(self) -> tuple:  # what the schemes that fit no smaller micro-batch share
        return self.tp, self.pp, self.schedule, self.chunks, self.ep


def count_reasons(req: PlanRequest, hw: HardwareProfile, counts: list[int], gpus_only,
                  why: Counter) -> None:
    """Why a profile has no GPU count to lay out at all (whole nodes, none filled)."""
    if req.max_gpus < hw.node.gpus_per_node:  # the planner rents whole nodes
        why[f"{hw.name}: --max-gpus {req.max_gpus} is below one node "
            f"({hw.node.gpus_per_node} GPUs), and plans rent whole nodes"] += 1
    elif not counts and gpus_only is None:  # whole nodes, but no layout fills them
        why[f"{hw.name}: no layout (tp x pp x dp x cp, dp dividing the global batch "
            f"{req.batch}) fills whole nodes of {hw.node.gpus_per_node} GPUs up to "
            f"--max-gpus {req.max_gpus}"] += 1


def count_tries(req: PlanRequest, hw: HardwareProfile, gpus: int, why: Counter) -> list[Try]:
    """Every layout and micro-batch of `gpus` GPUs that splits the global batch (memory not
    yet asked); why the others fail, counted in `why`."""
    priced = measured_counts(hw)
    if priced is not None and gpus not in priced:  # skipped, with the reason, not fatal
        why[f"{hw.name}: {gpus} GPU{'s' if gpus > 1 else ''}: {UNMEASURED} "
            f"{', '.join(map(str, sorted(priced))) or 'no'} ranks (scape calibrate "
            f"collectives --nprocs, compute --max-ranks)"] += 1
        return []
    if req.cp > 1 and gpus % req.cp:
        why[f"{gpus} GPUs do not split into --cp {req.cp} context-parallel ranks"] += 1
        return []
    shapes = list(layouts(req, hw, gpus))
    if not shapes and req.ep is not None:
        why[f"{hw.name}: {gpus} GPUs: --ep {req.ep} x --etp {req.etp or 1} divides no "
            "pipeline stage's GPUs in whole NVLink domains"] += 1
    elif not shapes:
        why[f"{hw.name}: {gpus} GPUs: no tensor-parallel degree divides the heads and "
            f"the sequence{' over --cp ' + str(req.cp) if req.cp > 1 else ''}"] += 1
    out = []
    for tp, pp, schedule, chunks, ep in shapes:
        dp = gpus // (tp * pp * req.cp)
        for mb in MICRO_BATCHES:
            if req.batch % (mb * dp):
                why["global batch does not split over the data-parallel ranks"] += 1
            elif chunks > 1 and (req.batch // (mb * dp)) % pp:
                why["interleaved: micro-batches not a multiple of the stages"] += 1
            else:
                out.append(Try(tp, pp, schedule, chunks, ep, mb))
    return out


def try_fits(req: PlanRequest, hw: HardwareProfile, gpus: int, t: Try, why: Counter,
             states: dict, too_big: dict) -> list[Candidate]:
    """The plans of one layout and micro-batch that fit in memory: every scheme (and shard
    group) with the least recomputation that fits; why the others do not, in `why`.
    `states`: each scheme's state per stage, shared by the micro-batches of a profile;
    `too_big`: per layout, the smallest micro-batch at which a scheme fitted with no policy
    (a larger one holds more activations and the same state, so it does not fit either:
    counted, not priced)."""
    usable, etp, domain = usable_bytes(hw), req.etp or 1, domain_used(hw, gpus)
    tp, pp, chunks, ep, mb = t.tp, t.pp, t.chunks, t.ep, t.micro_batch
    dp = gpus // (tp * pp * req.cp)
    routing = None if req.model.moe is None else Routing(ep, etp, req.moe_imbalance)
    failed = too_big.setdefault((hw.name, gpus, t.layout), {})
    kept = []
    for spec in req.schemes:
        scheme = scheme_of(spec)
        if pp > 1 and scheme.scheme == "dense-zero3":
            why["dense-zero3 (FSDP) with pipeline stages: not modelled"] += 1
            continue
        if failed.get(spec, math.inf) <= mb:
            why[f"does not fit in {hw.name} memory ({usable / 1e9:.0f} GB usable per GPU)"] += 1
            continue
        for shard in shard_groups(scheme.scheme, dp * req.cp, tp, domain):
            # what step_memory gives the plan's StepConfig (a test checks), without building
            # one for every try
            fit = first_fit(req.model, scheme, shard or dp * req.cp, tp, mb,
                            req.seq // req.cp, req.dtypes, RECOMPUTE_ORDER, usable, pp, chunks,
                            req.batch // (mb * dp), states,
                            (spec, shard or dp, tp, pp, chunks, routing), routing,
                            gpus // (pp * ep * etp))
            if fit is None:
                if shard is None:  # a smaller shard group holds more
                    failed[spec] = min(failed.get(spec, math.inf), mb)
                why[f"does not fit in {hw.name} memory "
                    f"({usable / 1e9:.0f} GB usable per GPU)"] += 1
                break
            kept.append(Candidate(hw, gpus, spec, tp, mb, fit[0], fit[1] / 1e9, pp,
                                  t.schedule, chunks, req.cp, ep, etp, shard))
    return kept


def candidates(req: PlanRequest, gpus_only: int | None = None
               ) -> tuple[list[Candidate], Counter]:
    """Every configuration that fits in memory and splits the global batch; why others fail.
    `gpus_only`: only that GPU count's (report scaling prices one count at a time)."""
    kept, why = [], Counter()
    for hw in req.hardware:
        counts = [n for n in gpu_counts(hw, req) if gpus_only in (None, n)]
        count_reasons(req, hw, counts, gpus_only, why)
        states: dict = {}
        too_big: dict = {}
        for gpus in counts:
            for t in count_tries(req, hw, gpus, why):
                kept += try_fits(req, hw, gpus, t, why, states, too_big)
    return kept, why


def _evaluate(args: tuple[Candidate, PlanRequest]) -> dict:
    cand, req = args
    cfg = cand.step_config(req)
    r = simulate_cached(cfg)
    # a run is whole steps: the last one runs in full though it needs only part of its tokens
    steps = steps_of(req)
    mean_step = r.step_time_s
    if req.density_warmup_frac > 0 and cfg.scheme.scheme in SCAPE_SCHEMES:
        scheme = replace(cfg.scheme, density_warmup_steps=round(req.density_warmup_frac * steps))
        mean_step = run_mean(replace(cfg, scheme=scheme), steps, phase_cache(cfg),
                             nodes=RUN_MEAN_NODES).mean_step_s
    hours = steps * mean_step / 3600
    ratio = quality_ratio(req.quality, cfg.scheme) if req.quality is not None else None
    use_spare = 100 * (1 - cand.memory_GB * 1e9 / usable_bytes(cand.hardware))
    return {
        "hardware": cand.hardware.name, "gpus": cand.gpus, "scheme": cand.scheme,
        "tp": cand.tp, "pp": cand.pp,
        **({} if req.model.moe is None else {"ep": cand.ep, "etp": cand.etp}),
        **({"shard_group": cand.shard_group} if "dense-zero3" in
           {scheme_of(s).scheme for s in req.schemes} else {}),
        "schedule": ("-" if cand.pp == 1 else cand.schedule if cand.chunks == 1
                     else f"{cand.schedule} x{cand.chunks}"),
        "chunks": cand.chunks,
        "dp": cfg.dp, "cp": cfg.cp, "tp_comm_overlap": cfg.tp_comm_overlap, "fp8": cfg.fp8,
        "micro_batch": cand.micro_batch,
        "grad_accum": cfg.accum, "recompute": cand.recompute, "memory_GB": cand.memory_GB,
        "memory_spare_pct": use_spare,
        "step_time_s": r.step_time_s, "run_mean_step_s": mean_step,
        "tokens_per_s": req.batch * req.seq / mean_step,
        "hours": hours, "gpu_hours": hours * cand.gpus,
        "cost_usd": hours * cand.gpus * req.price(cand.hardware),
        "usd_per_gpu_hour": req.price(cand.hardware),
        "bottleneck": bottleneck(r),
        "quality": quality_note(cfg.scheme, ratio, req.quality is not None),
        "exposed_comm_share": r.exposed_comm_s / r.step_time_s,
        # tokens this scheme needs to reach dense AdamS's final loss, over dense AdamS's (NaN:
        # the study has no reading of it, or it never got there)
        "quality_tokens_ratio": math.nan if ratio is None else ratio,
        "hours_to_quality": math.nan if ratio is None else hours * ratio,
        "cost_to_quality_usd": (math.nan if ratio is None
                                else hours * ratio * cand.gpus * req.price(cand.hardware)),
    }


def bottleneck(r) -> str:
    """The largest share of the step that is not the layers' compute, with its share; a step
    whose overheads are all below COMPUTE_BOUND of it is compute-bound, said with their sum."""
    overheads = {"pipeline bubble": r.pipeline_bubble_s,
                 "exposed data-parallel comm": r.exposed_comm_s,
                 "tensor-parallel comm": r.tp_comm_s, "context-parallel comm": r.cp_comm_s,
                 "compression kernels": r.compression_s,
                 "expert-parallel comm": r.ep_comm_s or 0.0}
    name = max(overheads, key=overheads.get)
    total = sum(overheads.values()) / r.step_time_s
    if total < COMPUTE_BOUND:
        return f"compute (overheads {total:.0%})"
    return f"{name} {overheads[name] / r.step_time_s:.0%}"


def lossy(scheme) -> bool:
    """Whether the scheme's update differs from dense AdamS's (or AdamW's)."""
    if scheme.scheme == "quantized":
        return scheme.bits < 16
    return scheme.scheme in LOSSY and scheme.sparsity > 0


def quality_note(scheme, ratio: float | None, studied: bool) -> str:
    """What is known of a plan's quality: dense; a study's tokens-to-quality ratio; or that
    nothing measured it at this scale."""
    if not lossy(scheme):
        return "dense"
    if ratio is not None:
        return f"{ratio:.2f}x tokens to dense quality (small-model study)"
    return ("never reached dense quality in the study" if studied
            else "not measured at this scale")


def pareto(df: pd.DataFrame) -> pd.Series:
    """Plans no other plan beats on both hours and cost (the time-cost frontier)."""
    order = df.sort_values(["hours", "cost_usd"], kind="stable")
    best_cost, keep = math.inf, []
    for idx, cost in zip(order.index, order["cost_usd"], strict=True):
        keep.append((idx, cost < best_cost))
        best_cost = min(best_cost, cost)
    return pd.Series(dict(keep)).reindex(df.index)


def quality_ratio(study, scheme) -> float | None:
    """The study's tokens-to-quality ratio for a scheme config (dense AdamS itself: 1.0 by
    definition); None when the study has no entry or the scheme never reached the quality."""
    name = scheme.scheme
    if name in ("dense-zero1", "dense-zero2", "dense-zero3"):  # the same updates
        name = f"dense-{scheme.optimizer}"
    if name == "quantized" and scheme.bits != 8:  # the study ran int8 only
        return None
    entry = study.lookup(name, 0.0 if name == "quantized" else scheme.sparsity)
    if entry is None:
        return 1.0 if name == "dense-adams" else None
    return entry.tokens_ratio


def evaluate_all(req: PlanRequest, cands: list[Candidate],
                 progress: Callable[[int], None] | None = None) -> pd.DataFrame:
    """Simulate every candidate, over every core; `progress(n)` after each one."""
    # topology together, and the schemes of one layout side by side: they share its pipeline
    cands = sorted(cands, key=lambda c: (c.hardware.name, c.gpus, c.tp, c.pp, c.schedule,
                                         c.micro_batch, c.recompute))
    return pd.DataFrame(parallel_map(_evaluate, [(c, req) for c in cands], req.workers,
                                     progress))


def steps_of(req: PlanRequest) -> int:
    """Whole steps to train the request's tokens (the last one runs in full)."""
    return math.ceil(req.tokens / (req.batch * req.seq))


def _layout_key(c: Candidate) -> tuple:
    """What a plan's lower bound depends on: everything but its scheme and shard group (the
    data-parallel communication the bound leaves out). The expert degrees are in it: a key
    without them gave every EP of a layout the first one's bound (issue 57's planner)."""
    return (c.hardware.name, c.gpus, c.tp, c.pp, c.schedule, c.chunks, c.micro_batch,
            c.recompute, c.cp, c.ep, c.etp)


def _bounds_of(args: tuple[list[Candidate], PlanRequest]) -> list[float]:
    """lower_bound_s of each candidate (one list per worker: the request and hardware are
    pickled once per list, not once per candidate)."""
    chosen, req = args
    return [lower_bound_s(c.step_config(req)) for c in chosen]


def bounds(req: PlanRequest, cands: list[Candidate], pool=None, workers: int = 1
           ) -> list[dict]:
    """Per candidate, what no simulation of it can beat (simulator/step/simulate.py lower_bound_s):
    its hours, cost and hours to quality at that bound (inf where a quality ranking has no
    reading for its scheme). One bound per layout: schemes share it; with a `pool`, the
    layouts' bounds are split over its `workers`."""
    first: dict[tuple, Candidate] = {}
    for c in cands:
        first.setdefault(_layout_key(c), c)
    keys, layouts_ = list(first), list(first.values())
    if pool is not None and workers > 1 and len(layouts_) >= 64:
        size = math.ceil(len(layouts_) / workers)
        parts = [(layouts_[i:i + size], req) for i in range(0, len(layouts_), size)]
        values = [v for part in pool.map(_bounds_of, parts) for v in part]
    else:
        values = _bounds_of((layouts_, req))
    seen = dict(zip(keys, values, strict=True))
    steps, out = steps_of(req), []
    for c in cands:
        hours = steps * seen[_layout_key(c)] / 3600
        ratio = (quality_ratio(req.quality, scheme_of(c.scheme))
                 if req.quality is not None else None)
        out.append({"hours": hours, "cost_usd": hours * c.gpus * req.price(c.hardware),
                    "hours_to_quality": math.inf if ratio is None else hours * ratio})
    return out


# the value each ranking orders plans by, then the tie-break
RANK_KEYS = {"time": ("hours", "cost_usd"), "cost": ("cost_usd", "hours"),
             "quality": ("hours_to_quality", "cost_to_quality_usd")}


def _qualifies(req: PlanRequest, row: dict) -> bool:
    return ((req.deadline_hours is None or row["hours"] <= req.deadline_hours)
            and (req.budget_usd is None or row["cost_usd"] <= req.budget_usd)
            and (req.rank != "quality" or not math.isnan(row["hours_to_quality"])))


@lru_cache(maxsize=1024)
def _category(scheme: str) -> tuple[bool, bool]:
    """(dense, not SCAPE): the plans the table's footnotes name the best of."""
    return not lossy(scheme_of(scheme)), not scheme.startswith(SCAPE_FAMILY)


def evaluate_bounded(req: PlanRequest, cands: list[Candidate], keep: int,
                     progress: Callable[[int], None] | None = None, frontier: bool = False
                     ) -> pd.DataFrame:
    """Simulate candidates in the order of their bounds until the `keep` best plans (by the
    request's ranking, deadline and budget applied) and the best dense and best non-SCAPE
    plans are known: a plan not simulated is bounded worse than each of them, so the ranking's
    top `keep` is the one simulating every candidate gives (branch and bound; a test compares
    them). Candidates whose bound already misses the deadline or budget are not simulated.
    `frontier`: also every plan of the time-cost frontier (`pareto`). The search is
    simulator/planning/search.py's, from these candidates only."""
    from simulator.planning.search import search

    df, _ = search(req, keep, frontier, progress, plans=(cands, bounds(req, cands)))
    return df


def _refuse_none(req: PlanRequest, why: Counter) -> None:
    """No configuration of the request fits: say why, with what to change."""
    reasons = "; ".join(f"{n} configuration{'s' if n > 1 else ''}: {r}"
                        for r, n in why.most_common(3))
    if all("below one node" in r for r in why):
        raise UserError(f"no plan for {req.model.name} ({reasons}): give --max-gpus of at "
                        "least one node")
    if all(UNMEASURED in r for r in why):
        raise UserError(f"no plan for {req.model.name} ({reasons}): measure the GPU counts "
                        "to plan, or give --max-gpus within those measured")
    if all("does not split" in r or UNMEASURED in r for r in why):
        sizes = sorted({c for hw in req.hardware for c in gpu_counts(hw, req)})
        raise UserError(f"no configuration of {req.model.name} fits ({reasons}): give a "
                        f"--global-batch that the data-parallel ranks divide (the GPU "
                        f"counts here: {', '.join(map(str, sizes))}), now {req.batch}")
    raise UserError(f"no configuration of {req.model.name} fits ({reasons}); relax: more "
                    "GPUs (--max-gpus), GPUs with more memory, or a smaller global batch")


def plan_training(req: PlanRequest, progress_total: Callable[[int], None] | None = None,
                  progress: Callable[[int], None] | None = None, keep: int | None = None,
                  frontier: bool = False) -> pd.DataFrame:
    """Feasible plans ranked by time to train, then cost (or as `req.rank` says). Raises
    UserError when none is. `keep`: the plans the caller shows; only they (and the best dense
    and non-SCAPE plans) are simulated for sure, the rest as far as their bounds require
    (simulator/planning/search.py: GPU counts and layouts are opened lazily, so `feasible`
    counts the plans found where the search looked); None: every feasible plan is simulated.
    `frontier` (with `keep`): the whole time-cost frontier is simulated too (`pareto` marks
    it)."""
    from simulator.planning.search import search

    req.validate()
    no_reading = UserError(f"no scheme of --schemes has a tokens-to-quality reading in "
                           f"{req.quality.path if req.quality else None} that reached dense "
                           "AdamS's loss")
    if keep is None:
        cands, why = candidates(req)
        if not cands:
            _refuse_none(req, why)
        if progress_total:
            progress_total(len(cands))
        df = evaluate_all(req, cands, progress)
        df.attrs["feasible"] = len(cands)
        df.attrs["counts_opened"] = sum(len(gpu_counts(hw, req)) for hw in req.hardware)
    else:
        df, why = search(req, keep, frontier, progress, progress_total)
    if df.empty:  # nothing fits, or nothing meets the deadline, budget or quality ranking
        first = ("cost" if req.budget_usd is not None and req.deadline_hours is None
                 else "time")
        relaxed, why_all = search(replace(req, deadline_hours=None, budget_usd=None,
                                          rank=first), 1)
        if relaxed.empty:
            _refuse_none(req, why_all)
        if req.rank == "quality" and req.deadline_hours is None and req.budget_usd is None:
            raise no_reading
        # every bound misses the deadline or budget: say by how much the best does
        attrs = {k: df.attrs.get(k, relaxed.attrs.get(k))
                 for k in ("feasible", "simulated", "counts_opened")}
        df = relaxed
        df.attrs.update(attrs)
    df.attrs["gpu_counts"] = sorted({n for hw in req.hardware
                                     for n in gpu_counts(hw, req)})
    df.attrs.setdefault("simulated", len(df))
    # GPU counts a measured profile cannot price: the table says they were left out
    df.attrs["skipped"] = sorted(r for r in why if UNMEASURED in r)
    attrs = dict(df.attrs)
    if req.rank == "quality":  # time to dense AdamS's quality; plans without a reading go
        reached = df["hours_to_quality"].notna()
        if not reached.any():
            raise no_reading
        df = df[reached].sort_values(["hours_to_quality", "cost_to_quality_usd"],
                                     kind="stable").reset_index(drop=True)
    elif req.rank == "cost":
        df = df.sort_values(["cost_usd", "hours"], kind="stable").reset_index(drop=True)
    else:
        df = df.sort_values(["hours", "cost_usd"], kind="stable").reset_index(drop=True)
    df["pareto"] = pareto(df)
    df.attrs.update(attrs)
    if req.deadline_hours is not None:
        ok = df[df["hours"] <= req.deadline_hours]
        if ok.empty:
            best = df.iloc[0]
            raise UserError(
                f"no plan trains {req.tokens:.3g} tokens within {req.deadline_hours:g} h: the "
                f"fastest takes {figure_text(best['hours'], 1)} h ({best['gpus']} x "
                f"{best['hardware']}, "
                f"{best['scheme']}); relax --deadline-hours or raise --max-gpus")
        df = ok
    if req.budget_usd is not None:
        ok = df[df["cost_usd"] <= req.budget_usd]
        if ok.empty:
            cheapest = df.sort_values("cost_usd").iloc[0]
            raise UserError(
                f"no plan trains {req.tokens:.3g} tokens for ${req.budget_usd:,.6g}: the "
                f"cheapest costs ${figure_text(cheapest['cost_usd'], 0)} ({cheapest['gpus']} x "
                f"{cheapest['hardware']}, {cheapest['scheme']}); relax --budget-usd")
        df = ok
    return df.reset_index(drop=True)


def figure_text(value: float, decimals: int) -> str:
    """`value` with thousands separators and `decimals` places, never rounded to zero."""
    return never_zero(f"{value:,.{decimals}f}", value)


def best_dense(df: pd.DataFrame) -> pd.Series | None:
    """The top plan whose update is dense AdamS's (or AdamW's)."""
    rest = df[df["quality"] == "dense"]
    return None if rest.empty else rest.iloc[0]


def best_without(df: pd.DataFrame, family: str = SCAPE_FAMILY) -> pd.Series | None:
    """The top plan whose scheme is not of `family` (to say how far the winner is from it)."""
    rest = df[~df["scheme"].str.startswith(family)]
    return None if rest.empty else rest.iloc[0]
