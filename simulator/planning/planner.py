"""Capacity planning: search GPU counts, schemes, micro-batching, tensor, pipeline and expert
parallelism (1F1B or interleaved) and recomputation for a training run of T tokens; keep what
fits in memory and meets the deadline or budget; rank by time to train (or to dense AdamS's
quality) and cost. The parts: the search space (simulator/planning/space.py), a plan priced
(evaluate.py), the lazy branch and bound over them (search.py); here, the answer."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import replace

import pandas as pd

from profiles import UserError
from simulator.planning.evaluate import RANK_KEYS, SCAPE_FAMILY, bounds, evaluate_all, pareto
from simulator.planning.plan_request import PlanRequest
from simulator.planning.search import search
from simulator.planning.space import UNMEASURED, Candidate, Try, candidates, gpu_counts, layouts
from vocabulary.units import figure_text

# what callers import from here, defined in the parts the planner is made of
__all__ = ["UNMEASURED", "Try", "best_dense", "best_without", "bounds", "candidates",
           "evaluate_bounded", "figure_text", "layouts", "plan_training"]



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


# a `keep` at or past this many plans simulates every feasible plan (keep None): the lazy
# search's bookkeeping, run again each round, costs more than it saves once nearly every plan
# is kept (llama-7b on dgx-h100, --top 99999999999: 119 s lazily, 21 s so; 2026-12-03)
EVERY_PLAN_FROM = 1000


def plan_training(req: PlanRequest, progress_total: Callable[[int], None] | None = None,
                  progress: Callable[[int], None] | None = None, keep: int | None = None,
                  frontier: bool = False) -> pd.DataFrame:
    """Feasible plans ranked by time to train, then cost (or as `req.rank` says). Raises
    UserError when none is. `keep`: the plans the caller shows; only they (and the best dense
    and non-SCAPE plans) are simulated for sure, the rest as far as their bounds require
    (simulator/planning/search.py: GPU counts and layouts are opened lazily, so `feasible`
    counts the plans found where the search looked); None, or EVERY_PLAN_FROM or more: every
    feasible plan is simulated.
    `frontier` (with `keep`): the whole time-cost frontier is simulated too (`pareto` marks
    it)."""
    req.validate()
    no_reading = UserError(f"no scheme of --schemes has a tokens-to-quality reading in "
                           f"{req.quality.path if req.quality else None} that reached dense "
                           "AdamS's loss")
    if keep is not None and keep >= EVERY_PLAN_FROM:
        keep = None
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
        relaxed, why_all = search(replace(req, deadline_hours=None, budget_usd=None, min_mfu=None,
                                          max_power_MW=None, rank=first), 1)
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
    else:  # time, cost, or either with failures (evaluate.py RANK_KEYS)
        df = df.sort_values(list(RANK_KEYS[req.rank]), kind="stable").reset_index(drop=True)
    df["pareto"] = pareto(df)
    df.attrs.update(attrs)
    # each constraint keeps the plans that meet it, or says how near the nearest comes:
    # (the limit asked, None where not; its column; at most, else at least; the refusal given
    # the nearest plan)
    limits = (
        (req.deadline_hours, "hours", True, lambda b: (
            f"no plan trains {req.tokens:.3g} tokens within {req.deadline_hours:g} h: the "
            f"fastest takes {figure_text(b['hours'], 1)} h ({b['gpus']} x {b['hardware']}, "
            f"{b['scheme']}); relax --deadline-hours or raise --max-gpus")),
        (req.min_mfu, "mfu", False, lambda b: (
            f"no plan reaches --min-mfu {req.min_mfu:g}: of the {len(df)} plan(s) simulated, "
            f"the highest reaches {b['mfu']:.3f} ({b['gpus']} x {b['hardware']}, "
            f"{b['scheme']}, tp {b['tp']}, pp {b['pp']}); lower --min-mfu")),
        (req.max_power_MW, "facility_MW", True, lambda b: (
            f"no plan draws at most {req.max_power_MW:g} MW while training: the least draws "
            f"{b['facility_MW']:.3g} MW ({b['gpus']} x {b['hardware']}, {b['scheme']}; "
            "facility power: GPUs, nodes and PUE); relax --max-power-mw")),
        (req.budget_usd, "cost_usd", True, lambda b: (
            f"no plan trains {req.tokens:.3g} tokens for ${req.budget_usd:,.6g}: the cheapest "
            f"costs ${figure_text(b['cost_usd'], 0)} ({b['gpus']} x {b['hardware']}, "
            f"{b['scheme']}); relax --budget-usd")),
    )
    for limit, column, at_most, refusal in limits:
        if limit is None:
            continue
        ok = df[df[column] <= limit] if at_most else df[df[column] >= limit]
        if ok.empty:
            # the plan nearest the limit (the fastest, the highest MFU, the least power, the
            # cheapest), first in rank order among equals
            nearest = df.sort_values(column, ascending=at_most, kind="stable").iloc[0]
            raise UserError(refusal(nearest))
        df = ok
    return df.reset_index(drop=True)


def best_dense(df: pd.DataFrame) -> pd.Series | None:
    """The top plan whose update is dense AdamS's (or AdamW's)."""
    rest = df[df["quality"] == "dense"]
    return None if rest.empty else rest.iloc[0]


def best_without(df: pd.DataFrame, family: str = SCAPE_FAMILY) -> pd.Series | None:
    """The top plan whose scheme is not of `family` (to say how far the winner is from it)."""
    rest = df[~df["scheme"].str.startswith(family)]
    return None if rest.empty else rest.iloc[0]
