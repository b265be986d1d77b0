"""The planner's branch and bound, lazy: best first over a tree whose nodes are a GPU count, a
layout and micro-batch of it, that layout with its pipeline's bound, and a plan (a scheme that
fits in memory with its recomputation). Every node carries a lower bound of its plans' hours
to train; a node is opened only when its bound is the lowest left, so GPU counts whose compute
alone could not make the plans kept are never laid out, and layouts whose bound is above them
are never asked about memory (issue 57: DeepSeek-V3 on up to 4,096 H100s had 58,016 feasible
plans; laying out and memory-checking all of them took longer than the whole answer may).

The bounds, each at most the next one down and at most the simulated step (tests check all):
- a GPU count: the global batch's compute at the cheapest per-sequence GPU-seconds any tensor
  degree, micro-batch and expert degree give (no recomputation, no communication, the whole
  batch spread over every GPU): what pipeline_bound's busiest stage or a pipeline-free step
  cannot beat (`count_floor_s`);
- a layout and micro-batch: its micro-batches' compute over its stages (`try_floor_s`);
- that layout, bounded: simulator/step/simulate.py lower_bound_s with no recomputation;
- a plan: lower_bound_s with the recomputation that fits;
- a plan simulated: its step.
"""

from __future__ import annotations

import heapq
import math
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

from profiles import HardwareProfile
from simulator.layout.pipeline import stage_layers
from simulator.planning.evaluate import (
    BUSY_FLOOR_SHARE,
    RANK_KEYS,
    SCAPE_FAMILY,
    _category,
    _evaluate,
    _layout_key,
    _qualifies,
    best_goodput,
    frontier_points,
    least_energy_MWh,
    least_power_MW,
    quality_ratio,
    steps_of,
)
from simulator.planning.plan_request import PlanRequest
from simulator.planning.space import (
    MICRO_BATCHES,
    TENSOR_DEGREES,
    Candidate,
    Try,
    count_reasons,
    count_tries,
    gpu_counts,
    measured_counts,
    scheme_of,
    try_fits,
)
from simulator.step.compute import host_slowdown, model_flops_utilisation
from simulator.step.simulate import _fwd_bwd, lower_bound_s

COUNT, TRY, BOUNDED, PLAN = range(4)  # node levels, in the order they open
SLACK = 1 - 1e-9  # the bound's float residue over the simulated step (tests/test_planner)
# simulations a search runs in its own process before it hands rounds to a pool of workers:
# a pool's workers fork cold (each builds the collectives of every topology it is handed
# again), so a search of DeepSeek-V3 on gb200-nvl72 (100 simulations) took 1.5 s on two
# workers and 1.0 s in one process (2026-12-02, 2 cores)
POOL_AFTER = 256


@dataclass(order=True)
class _Node:
    key: float  # the ranking's bound (hours, cost or hours to quality)
    order: int  # creation order: ties open in a fixed order
    level: int = field(compare=False)
    hours: float = field(compare=False)  # bound of the hours to train
    cost: float = field(compare=False)  # bound of the cost (USD)
    hw: HardwareProfile = field(compare=False)
    gpus: int = field(compare=False)
    item: Try | Candidate | None = field(compare=False)
    cats: tuple[bool, bool] = field(compare=False)  # may hold a dense / a non-SCAPE plan
    seconds: float = field(compare=False, default=0.0)  # the step-time bound it was pushed at


def compute_times(req: PlanRequest, hw: HardwareProfile, tp: int, mb: int, ep: int):
    """One micro-batch's forward and backward (simulator/step/compute.py ComputeTimes) on one
    GPU of a tensor-parallel group of `tp`, at expert degree `ep`, without recomputation: what
    a step's compute stream, or its pipeline's stages together, run per micro-batch at the
    least (the planner's own StepConfig prices it, remembered)."""
    cand = Candidate(hw, tp * req.cp, req.schemes[0], tp, mb, "none", 0.0, cp=req.cp, ep=ep,
                     etp=req.etp or 1)
    return _fwd_bwd(cand.step_config(req))


class _Floors:
    """The compute floors of one request's GPU counts and layouts, from the per-micro-batch
    compute of each tensor degree, micro-batch and expert degree (remembered)."""

    def __init__(self, req: PlanRequest):
        self.req, self.times = req, {}

    def of(self, hw: HardwareProfile, tp: int, mb: int, ep: int):
        key = (hw.name, id(hw), tp, mb, ep)
        if key not in self.times:
            self.times[key] = compute_times(self.req, hw, tp, mb, ep)
        return self.times[key]

    def count_floor_s(self, hw: HardwareProfile, gpus: int) -> float:
        """Seconds no layout of `gpus` GPUs can step in: batch x cp x tp x compute / (mb x
        gpus) (a layout's micro-batches per stage, accum / pp, times its compute per
        micro-batch) at the least over every tensor degree, micro-batch and expert degree a
        layout could take (a superset of those searched: a floor)."""
        req = self.req
        tps = [t for t in TENSOR_DEGREES if req.model.arch.splits_over(t)
               and (req.seq // req.cp) % t == 0] or [1]
        eps = [1]
        if req.model.moe is not None:
            n = req.model.moe.n_experts
            eps = ([req.ep] if req.ep is not None else
                   [e for e in (2**i for i in range(17)) if e <= n and n % e == 0
                    and e >= req.moe_imbalance] or [1])

        def seconds(t: int, mb: int, e: int) -> float:
            times = self.of(hw, t, mb, e)
            return times.fwd_s + times.bwd_s

        best = min(t * seconds(t, mb, e) / mb for t in tps for mb in MICRO_BATCHES
                   for e in eps)
        return req.batch * req.cp * best * min(1.0, host_slowdown(hw, gpus)) / gpus

    def try_floor_s(self, hw: HardwareProfile, gpus: int, t: Try) -> float:
        """Seconds a layout cannot step in: its compute alone, as pipeline_bound's busiest
        stage counts it (simulator/layout/pipeline.py): for each stage, micro-batch 0's
        forward and backward through model chunk 0 of the stages before it, and then every
        micro-batch through its own layers (the output layer on the last); no communication,
        no sends. Without pipelining, every micro-batch through the whole model."""
        dp = gpus // (t.tp * t.pp * self.req.cp)
        accum = self.req.batch // (t.micro_batch * dp)
        times = self.of(hw, t.tp, t.micro_batch, t.ep)
        slow = min(1.0, host_slowdown(hw, gpus))
        if t.pp == 1:
            return accum * slow * (times.fwd_s + times.bwd_s)
        layer = times.layer_fwd_s + times.layer_bwd_s  # s per layer and micro-batch
        head = times.head_fwd_s + times.head_bwd_s
        busiest, before = 0.0, 0.0
        rows = stage_layers(self.req.model.arch.n_layers, t.pp, t.chunks)
        for s, row in enumerate(rows):
            work = sum(row) * layer + (head if s == t.pp - 1 else 0.0)
            busiest = max(busiest, before + accum * work)
            before += row[0] * layer + (head if s == t.pp - 1 and t.chunks == 1 else 0.0)
        return slow * busiest


class Search:
    """Best-first branch and bound over one request (see the module's docstring). `keep`: the
    plans the caller shows; `frontier`: also every plan of the time-cost frontier."""

    def __init__(self, req: PlanRequest, keep: int, frontier: bool = False,
                 progress: Callable[[int], None] | None = None,
                 progress_total: Callable[[int], None] | None = None):
        self.req, self.keep, self.frontier = req, keep, frontier
        self.progress, self.progress_total = progress, progress_total
        self.key = RANK_KEYS[req.rank][0]
        self.steps = steps_of(req)
        self.why: Counter = Counter()
        self.heap: list[_Node] = []
        self.made = 0
        self.rows: list[dict] = []
        self.kept: list[dict] = []
        self.front: list[tuple[float, float]] = []
        self.plans = 0  # plans found (fit in memory)
        self.counts_opened = 0
        self.floors = _Floors(req)
        self.settled = [False, False]  # best dense, best non-SCAPE plan found for good
        self.bounds: dict[tuple, float] = {}  # lower_bound_s per layout (schemes share it)
        self.busy_floors: dict[tuple, float] = {}  # _busy_floor_s per (profile, GPU count)
        self.states: dict[str, dict] = {}
        self.too_big: dict = {}
        self.pool = None  # made once POOL_AFTER plans were simulated here
        self.workers = 1
        cats = [_category(s) for s in req.schemes]
        self.all_cats = (any(c[0] for c in cats), any(c[1] for c in cats))
        ratios = ([quality_ratio(req.quality, scheme_of(s)) for s in req.schemes]
                  if req.quality is not None else [])
        self.best_ratio = min((r for r in ratios if r is not None), default=math.inf)

    # -- nodes ------------------------------------------------------------------------
    def _push(self, level: int, seconds: float, hw: HardwareProfile, gpus: int, item,
              scheme: str | None = None, parent: _Node | None = None) -> None:
        req = self.req
        if parent is not None:  # a child's plans are its parent's: both bounds hold, and
            # keys that never fall along a path keep a settled category settled (_needs)
            seconds = max(seconds, parent.seconds)
        hours = self.steps * seconds / 3600
        cost = hours * gpus * req.price(hw)
        if ((req.deadline_hours is not None and hours > req.deadline_hours)
                or (req.budget_usd is not None and cost > req.budget_usd)
                or (req.max_power_MW is not None
                    and least_power_MW(req, hw, gpus) > req.max_power_MW)
                or (req.min_mfu is not None and model_flops_utilisation(
                    req.model, hw, req.batch, req.seq, gpus, seconds) < req.min_mfu)):
            return  # no plan below it meets the deadline, budget or MFU (a bound's is the
            # most any plan below it reaches)
        if scheme is None:
            cats, ratio = self.all_cats, self.best_ratio
        else:
            cats = _category(scheme)
            ratio = (quality_ratio(req.quality, scheme_of(scheme)) if req.quality is not None
                     else None)
            ratio = math.inf if ratio is None else ratio
        # the ranking's own bound only (a node is pushed thousands of times a search: the
        # goodput and energy bounds are worked out where they rank)
        if self.key == "hours":
            key = hours
        elif self.key == "cost_usd":
            key = cost
        elif self.key == "hours_to_quality":
            key = hours * ratio
        elif self.key == "wall_hours":
            key = hours / best_goodput(req, gpus, hw)
        elif self.key == "wall_cost_usd":
            key = cost / best_goodput(req, gpus, hw)
        else:  # energy_MWh
            key = least_energy_MWh(req, hw, gpus, seconds, self._busy_floor_s(hw, gpus))
        if not math.isfinite(key):
            return
        heapq.heappush(self.heap, _Node(key, self.made, level, hours, cost, hw, gpus, item,
                                        cats, seconds))
        self.made += 1

    def _busy_floor_s(self, hw: HardwareProfile, gpus: int) -> float:
        """Seconds of a step every plan of `gpus` GPUs computes, at the least (the energy
        bound's): a share of the count's compute floor, remembered per count."""
        key = (hw.name, gpus)
        if key not in self.busy_floors:
            self.busy_floors[key] = BUSY_FLOOR_SHARE * self.floors.count_floor_s(hw, gpus)
        return self.busy_floors[key]

    def seed_counts(self) -> None:
        """A node per GPU count of every profile, at its compute floor."""
        req = self.req
        for hw in req.hardware:
            counts = gpu_counts(hw, req)
            count_reasons(req, hw, counts, None, self.why)
            priced = measured_counts(hw)
            for gpus in counts:
                if priced is not None and gpus not in priced:
                    count_tries(req, hw, gpus, self.why)  # says why it is left out
                    continue
                self._push(COUNT, self.floors.count_floor_s(hw, gpus), hw, gpus, None)

    def seed_plans(self, cands: list[Candidate], lows: list[dict]) -> None:
        """Plans already found (and bounded: planner.bounds): only they are searched."""
        for c, low in zip(cands, lows, strict=True):
            self._push(PLAN, low["hours"] * 3600 / self.steps, c.hardware, c.gpus, c,
                       c.scheme)
        self.plans += len(cands)

    def _bound(self, c: Candidate) -> float:
        key = _layout_key(c)
        if key not in self.bounds:
            self.bounds[key] = lower_bound_s(c.step_config(self.req))
        return self.bounds[key]

    def _open(self, node: _Node) -> None:
        req, hw, gpus = self.req, node.hw, node.gpus
        if node.level == COUNT:
            self.counts_opened += 1
            for t in count_tries(req, hw, gpus, self.why):
                self._push(TRY, self.floors.try_floor_s(hw, gpus, t), hw, gpus, t,
                           parent=node)
        elif node.level == TRY:
            t = node.item
            c = Candidate(hw, gpus, req.schemes[0], t.tp, t.micro_batch, "none", 0.0, t.pp,
                          t.schedule, t.chunks, req.cp, t.ep, req.etp or 1, mapping=t.mapping)
            self._push(BOUNDED, self._bound(c), hw, gpus, t, parent=node)
        else:  # BOUNDED: the schemes that fit, each at its own bound
            found = try_fits(req, hw, gpus, node.item, self.why,
                             self.states.setdefault(hw.name, {}), self.too_big)
            self.plans += len(found)
            for c in found:
                self._push(PLAN, self._bound(c), hw, gpus, c, c.scheme, parent=node)
            if found and self.progress_total:
                self.progress_total(self.plans)

    # -- the search -------------------------------------------------------------------
    def _next_low(self, cat: int | None) -> float:
        """The lowest bound left of a node that may hold a plan of category `cat` (None:
        any; 0: dense, 1: not SCAPE)."""
        if cat is None:
            return self.heap[0].key if self.heap else math.inf
        return min((n.key for n in self.heap if n.cats[cat]), default=math.inf)

    def _settled(self, need: int, member, cat: int | None) -> bool:
        low = self._next_low(cat)
        if low == math.inf:  # nothing left that could hold one
            return True
        values = sorted(r[self.key] for r in self.kept if member(r))
        return len(values) >= need and values[need - 1] < low * SLACK

    def _needs(self) -> tuple[bool, bool]:
        """Whether the best dense, the best non-SCAPE plan is still open (the footnotes).
        Once settled a category stays settled (keys never fall along a path, so the lowest
        bound left only rises, and the best plan kept only improves): it is not asked
        again."""
        members = (lambda r: r["quality"] == "dense",
                   lambda r: not r["scheme"].startswith(SCAPE_FAMILY))
        for cat in (0, 1):
            if not self.settled[cat]:
                self.settled[cat] = self._settled(1, members[cat], cat)
        return not self.settled[0], not self.settled[1]

    def _dominated(self, node: _Node) -> bool:
        """On the frontier run: a simulated plan is faster than the node's bound and no
        dearer than its cost bound, and the node holds no category still needed (asked only
        of a beaten node that holds one: the heap scan it costs is the frontier run's
        largest, issue 61 item 5)."""
        if not any(h < node.hours * SLACK and c <= node.cost * SLACK for h, c in self.front):
            return False
        if not (node.cats[0] or node.cats[1]):
            return True
        need = self._needs()
        return not (need[0] and node.cats[0]) and not (need[1] and node.cats[1])

    def _done(self) -> bool:
        return (self._settled(self.keep, lambda r: True, None)
                and not any(self._needs()))

    def run(self, workers: int = 1) -> pd.DataFrame:
        """Open and simulate until the answer is settled (`_done`), in this process; past
        POOL_AFTER simulations, over `workers` processes."""
        self.workers = workers
        while self.heap:
            batch = 8 if self.pool is None else 16 * workers
            if not self.frontier and self._done():
                break
            # a node is judged while still on the heap: what it may hold counts in _needs
            if self.heap[0].level != PLAN:
                pruned = self.frontier and self._dominated(self.heap[0])
                node = heapq.heappop(self.heap)
                if not pruned:
                    self._open(node)
                continue
            picked: list[Candidate] = []
            while self.heap and self.heap[0].level == PLAN and len(picked) < batch:
                pruned = self.frontier and self._dominated(self.heap[0])
                node = heapq.heappop(self.heap)
                if not pruned:
                    picked.append(node.item)
            if picked:
                self._simulate(picked)
        df = pd.DataFrame(self.rows)
        df.attrs.update(simulated=len(self.rows), feasible=self.plans,
                        counts_opened=self.counts_opened)
        return df

    def _simulate(self, picked: list[Candidate]) -> None:
        # topology together, so each worker's chunk reuses the collectives it builds
        # (simulator/step/batch.py phase_cache); the rows' order does not matter
        picked = sorted(picked, key=lambda c: (c.hardware.name, c.gpus, c.tp, c.pp, c.ep,
                                               c.schedule, c.chunks, c.micro_batch))
        chosen = [(c, self.req) for c in picked]
        workers = self.workers
        if self.pool is None and workers > 1 and len(self.rows) >= POOL_AFTER:
            from concurrent.futures import ProcessPoolExecutor

            self.pool = ProcessPoolExecutor(workers)
        got = (list(self.pool.map(_evaluate, chosen,
                                  chunksize=max(1, len(chosen) // workers)))
               if self.pool is not None and len(chosen) >= 8
               else [_evaluate(c) for c in chosen])
        self.rows += got
        if self.progress:
            self.progress(len(got))
        self.kept += [r for r in got if _qualifies(self.req, r)]
        if self.frontier:
            self.front = frontier_points(self.front + [(r["hours"], r["cost_usd"])
                                                       for r in got])


def search(req: PlanRequest, keep: int, frontier: bool = False,
           progress: Callable[[int], None] | None = None,
           progress_total: Callable[[int], None] | None = None,
           plans: tuple[list[Candidate], list[dict]] | None = None
           ) -> tuple[pd.DataFrame, Counter]:
    """The simulated plans a bounded answer needs (its top `keep` by the request's ranking,
    deadline and budget applied, its best dense and best non-SCAPE plans, and with `frontier`
    every plan of the time-cost frontier), and why the configurations opened failed. From
    every GPU count of the request, opened lazily; or from `plans` (candidates with their
    planner.bounds)."""
    workers = req.workers if req.workers is not None else (os.cpu_count() or 1)
    s = Search(req, keep, frontier, progress, progress_total)
    if plans is None:
        s.seed_counts()
    else:
        s.seed_plans(*plans)
    try:
        return s.run(workers), s.why
    finally:
        if s.pool is not None:
            s.pool.shutdown()
