"""A plan priced: its simulated step, hours, cost, bottleneck and quality note
(`_evaluate`), the lower bounds a search prunes by (`bounds`), and what ranks plans."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from functools import lru_cache

import pandas as pd

from scape.plan import SCAPE_SCHEMES
from simulator.memory.peak import usable_GB
from simulator.planning.plan_request import PlanRequest
from simulator.planning.space import Candidate, scheme_of
from simulator.run.energy import idle_power_W
from simulator.run.goodput import checkpoint_bytes, run_with_failures
from simulator.step.batch import parallel_map, phase_cache, simulate_cached
from simulator.step.compute import model_flops_utilisation
from simulator.step.power import run_and_energy
from simulator.step.schedule import run_mean
from simulator.step.simulate import lower_bound_s

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
    usable = usable_GB(cand.hardware, cand.communicators)
    use_spare = 100 * (1 - cand.memory_GB / usable)
    # the run with failures, restarts and checkpoints (spot capacity taken back joins the
    # failures), and its power, energy and emissions: NaN without a [power] table
    run, energy = run_and_energy(cfg, r, hours * 3600, req.reliability_on(cand.hardware),
                                 req.run_site, req.tokens)
    return {
        "hardware": cand.hardware.name, "gpus": cand.gpus, "scheme": cand.scheme,
        "tp": cand.tp, "pp": cand.pp,
        **({} if req.model.moe is None else {"ep": cand.ep, "etp": cand.etp}),
        **({"shard_group": cand.shard_group} if "dense-zero3" in
           {scheme_of(s).scheme for s in req.schemes} else {}),
        "schedule": ("-" if cand.pp == 1 else cand.schedule if cand.chunks == 1
                     else f"{cand.schedule} x{cand.chunks}"),
        "chunks": cand.chunks,
        # the rank order (Megatron-Core's tp-pp-dp where a stage alone could not be placed),
        # where it can differ: a dense model on a profile whose NVLink domain spans nodes
        **({"rank_order": "tp-pp-dp" if cand.mapping else "default"}
           if req.model.moe is None and any(h.node.domain_gpus > h.node.gpus_per_node
                                            for h in req.hardware) else {}),
        "dp": cfg.dp, "cp": cfg.cp, "tp_comm_overlap": cfg.tp_comm_overlap, "fp8": cfg.fp8,
        "micro_batch": cand.micro_batch,
        "grad_accum": cfg.accum, "recompute": cand.recompute, "memory_GB": cand.memory_GB,
        "memory_spare_pct": use_spare,
        # headroom in GB: a plan a few GB from the limit is one allocator spike from failing
        "memory_spare_GB": usable - cand.memory_GB,
        "step_time_s": r.step_time_s, "run_mean_step_s": mean_step,
        "tokens_per_s": req.batch * req.seq / mean_step,
        "mfu": model_flops_utilisation(req.model, cand.hardware, req.batch, req.seq, cand.gpus,
                                       mean_step),
        "hours": hours, "gpu_hours": hours * cand.gpus,
        "cost_usd": hours * cand.gpus * req.price(cand.hardware),
        # with failures (simulator/run/goodput.py): the wall time and its cost, the expected
        # interruptions, the checkpoint interval (Daly's) and the share of the wall time that
        # trains
        "interruptions": run.interruptions, "checkpoint_every_min": run.interval_s / 60,
        "checkpoint_write_s": run.checkpoint_write_s,
        "checkpoint_stall_s": run.save_stall_s, "goodput": run.goodput,
        "wall_hours": run.wall_s / 3600,
        "wall_cost_usd": run.wall_s / 3600 * cand.gpus * req.price(cand.hardware),
        "usd_per_gpu_hour": req.price(cand.hardware),
        "gpu_power_W": math.nan if energy is None else energy.gpu_W,
        "facility_MW": math.nan if energy is None else energy.facility_MW,
        "energy_MWh": math.nan if energy is None else energy.energy_MWh,
        "tco2e": math.nan if energy is None else energy.tco2e,
        "wh_per_mtoken": math.nan if energy is None else energy.wh_per_token * 1e6,
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


def _on_frontier(costs) -> list[bool]:
    """Of plans in (hours, cost) order, whether each is cheaper than every faster one."""
    best_cost, out = math.inf, []
    for cost in costs:
        out.append(cost < best_cost)
        best_cost = min(best_cost, cost)
    return out


def frontier_points(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The (hours, cost) pairs no other pair beats on both, as `pareto` keeps them: the
    frontier of points already on a frontier and new ones is the frontier of all of them, so
    the search keeps it up to date without a frame (issue 61 item 5)."""
    ordered = sorted(points)
    return [p for p, on in zip(ordered, _on_frontier(c for _, c in ordered), strict=True) if on]


def pareto(df: pd.DataFrame) -> pd.Series:
    """Plans no other plan beats on both hours and cost (the time-cost frontier)."""
    order = df.sort_values(["hours", "cost_usd"], kind="stable")
    return pd.Series(_on_frontier(order["cost_usd"]), index=order.index).reindex(df.index)


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



def steps_of(req: PlanRequest) -> int:
    """Whole steps to train the request's tokens (the last one runs in full)."""
    return math.ceil(req.tokens / (req.batch * req.seq))


def _layout_key(c: Candidate) -> tuple:
    """What a plan's lower bound depends on: everything but its scheme and shard group (the
    data-parallel communication the bound leaves out). The expert degrees are in it: a key
    without them gave every EP of a layout the first one's bound (issue 57's planner)."""
    return (c.hardware.name, c.gpus, c.tp, c.pp, c.schedule, c.chunks, c.micro_batch,
            c.recompute, c.cp, c.ep, c.etp, c.mapping)


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
             "quality": ("hours_to_quality", "cost_to_quality_usd"),
             "wall-time": ("wall_hours", "wall_cost_usd"),
             "wall-cost": ("wall_cost_usd", "wall_hours"),
             "energy": ("energy_MWh", "wall_hours")}


# of a GPU count's compute floor, what its plans' GPUs are taken to compute at the least (each
# GPU computes at least its share of the step's work; a margin for the stages whose share is
# below the mean)
BUSY_FLOOR_SHARE = 0.9


def least_energy_MWh(req: PlanRequest, hw, gpus: int, seconds: float,
                     busy_floor_s: float = 0.0) -> float:
    """Energy no plan of `gpus` GPUs of `hw` stepping in at least `seconds` can use: every
    second of its wall time (at least its hours over the best goodput) at the waiting GPUs'
    and the rest of the nodes' draw, and each step's `busy_floor_s` of compute at the rest of
    the GPUs' board limit (simulator/run/energy.py), times the PUE."""
    steps = steps_of(req)
    wall_s = steps * seconds / best_goodput(req, gpus, hw)
    p = hw.power
    busy_s = steps * min(seconds, busy_floor_s)
    joules = (wall_s * idle_power_W(p, gpus, hw.node.gpus_per_node)
              + busy_s * gpus * (p.gpu_max_W - p.gpu_wait_W))
    return joules * req.run_site.pue / 3.6e9


def least_power_MW(req: PlanRequest, hw, gpus: int) -> float:
    """Facility power no plan of `gpus` GPUs of `hw` stays under while training: its GPUs
    waiting and the rest of its nodes, times the PUE."""
    return idle_power_W(hw.power, gpus, hw.node.gpus_per_node) * req.run_site.pue / 1e6


def best_goodput(req: PlanRequest, gpus: int, hw=None) -> float:
    """The most goodput any plan on `gpus` GPUs can have: its checkpoint is at least the
    weights (2 B a parameter; a plan's adds its optimizer state, which only lowers it), and
    goodput does not depend on the run's length (Daly's wall time is linear in the work). A
    bound on a plan's hours over it bounds its wall hours (the search's lower bounds)."""
    # each profile's own figures (its failure rate, spot's, its host link for an asynchronous
    # save); without `hw`, the most any of them allows
    best = 0.0
    for h in (hw,) if hw is not None else req.hardware:
        rel = req.reliability_on(h)
        if rel.async_save and h.gpu.host_bw_GBps is None:
            return 1.0  # its plans are refused (no host link): nothing is above 1
        best = max(best, _best_goodput(req.model.n_params, rel, gpus, h.gpu.host_bw_GBps))
    return best


@lru_cache(maxsize=4096)
def _best_goodput(params: int, rel, gpus: int, host_GBps: float | None) -> float:
    # an hour of work: goodput does not depend on the run's length, so the interval is not
    # checked against it (each plan's own run is)
    return run_with_failures(3600.0, gpus, checkpoint_bytes(params, 2, 0), rel,
                             host_GBps=host_GBps, whole_run=False).goodput


def _qualifies(req: PlanRequest, row: dict) -> bool:
    return ((req.deadline_hours is None or row["hours"] <= req.deadline_hours)
            and (req.max_power_MW is None or row["facility_MW"] <= req.max_power_MW)
            and (req.min_mfu is None or row["mfu"] >= req.min_mfu)
            and (req.budget_usd is None or row["cost_usd"] <= req.budget_usd)
            and (req.rank != "quality" or not math.isnan(row["hours_to_quality"])))


@lru_cache(maxsize=1024)
def _category(scheme: str) -> tuple[bool, bool]:
    """(dense, not SCAPE): the plans the table's footnotes name the best of."""
    return not lossy(scheme_of(scheme)), not scheme.startswith(SCAPE_FAMILY)


def evaluate_all(req: PlanRequest, cands: list[Candidate],
                 progress: Callable[[int], None] | None = None) -> pd.DataFrame:
    """Simulate every candidate, over every core; `progress(n)` after each one."""
    # topology together, and the schemes of one layout side by side: they share its pipeline
    cands = sorted(cands, key=lambda c: (c.hardware.name, c.gpus, c.tp, c.pp, c.schedule,
                                         c.micro_batch, c.recompute))
    return pd.DataFrame(parallel_map(_evaluate, [(c, req) for c in cands], req.workers,
                                     progress))

