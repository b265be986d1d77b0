"""Run-average step time under SCAPE's density warm-up.

The SCAPE authors' runs (mz687/SCAPE_SC26, `_scheduled_density`) do not send at the target
density from the start: the mask's density falls geometrically from 1 to d over W steps,
d(t) = d ** min(1, t / W); their scripts set W to 10k steps (GPT-345M; Llama-500M: 8k after
2k) of runs of up to 100k iterations (`--train-iters 100000`). A steady-state step
(`simulate_step`) then says what the last steps cost, not what the run costs: with W = the
whole run at d = 0.01, a step sends on average (1 - d) / ln(1 / d) = 21% of the dense bytes.
This module averages the step over the schedule: sum_t step(d(t)) over the warm-up by the
trapezoid rule on `nodes` points of t (the step time is smooth in t: bytes follow d(t), a
geometric curve), plus the steady steps. Dense steps before the warm-up (the Llama-500M runs:
2k at density 1, then a linear warm-up over 8k) cost one dense step each.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import pairwise

from scape.plan import SCAPE_SCHEMES
from simulator.network.engine import PhaseCache
from simulator.network.topology import build_topology
from simulator.step.simulate import simulate_step
from simulator.step.step_config import StepConfig, StepResult

NODES = 33  # points on the warm-up; tests/test_schedule.py measures the error against every step


@dataclass(frozen=True)
class RunMean:
    run_steps: int
    warmup_steps: int  # steps before the target density (dense steps and warm-up) in the run
    mean_step_s: float  # average step time over the run, seconds
    mean_bytes_per_gpu: float  # average data-parallel bytes one GPU sends per step
    steady: StepResult  # the step at the target density


def _steady(scheme):
    """The scheme at its target density from step 1 (no schedule)."""
    return replace(scheme, density_warmup_steps=0, density_dense_steps=0)


def _at_density(cfg: StepConfig, density: float, cache: PhaseCache) -> StepResult:
    scheme = replace(_steady(cfg.scheme), sparsity=1.0 - density)
    return simulate_step(replace(cfg, scheme=scheme), cache=cache)


def run_mean(cfg: StepConfig, run_steps: int, cache: PhaseCache | None = None,
             nodes: int = NODES) -> RunMean:
    """Average step time and bytes over a run of `run_steps` steps of `cfg`, whose scheme's
    density schedule (SchemeConfig.density_at: dense steps, then a geometric or linear warm-up)
    sets the density of each step. Other schemes: the steady step."""
    if run_steps < 1:
        raise ValueError(f"run_steps must be positive, got {run_steps}")
    cache = cache or PhaseCache(build_topology(cfg.hardware, cfg.gpus))
    scheme = cfg.scheme
    steady = simulate_step(replace(cfg, scheme=_steady(scheme)), cache=cache)
    scheduled = scheme.scheme in SCAPE_SCHEMES and scheme.sparsity > 0
    d = min(scheme.density_dense_steps, run_steps) if scheduled else 0
    w = min(scheme.density_warmup_steps, run_steps - d) if scheduled else 0
    step_sum = bytes_sum = 0.0
    if d:  # the dense steps: one step time each
        dense = _at_density(cfg, 1.0, cache)
        step_sum, bytes_sum = d * dense.step_time_s, d * dense.bytes_per_gpu
    if w <= 1:
        rest = run_steps - d
        return RunMean(run_steps, d, (step_sum + rest * steady.step_time_s) / run_steps,
                       (bytes_sum + rest * steady.bytes_per_gpu) / run_steps, steady)
    nodes = max(2, min(nodes, w))
    h = (w - 1) / (nodes - 1)  # steps between nodes
    for i in range(nodes):
        t = d + 1 + i * h
        r = _at_density(cfg, scheme.density_at(t), cache)
        weight = h / 2 if i in (0, nodes - 1) else h  # trapezoid over t in [1, w] ...
        step_sum += weight * r.step_time_s
        bytes_sum += weight * r.bytes_per_gpu
        if i in (0, nodes - 1):  # ... plus half of each end: a sum over w integer steps
            step_sum += r.step_time_s / 2
            bytes_sum += r.bytes_per_gpu / 2
    rest = run_steps - d - w
    return RunMean(run_steps, d + w, (step_sum + rest * steady.step_time_s) / run_steps,
                   (bytes_sum + rest * steady.bytes_per_gpu) / run_steps, steady)


def piecewise_mean(cfg: StepConfig, points: list[tuple[int, float]], run_steps: int,
                   cache: PhaseCache | None = None, nodes: int = NODES) -> RunMean:
    """Average step time and bytes over a run whose density follows the straight lines between
    `points` (step, density), ascending in step from step 0, and stays at the last density to
    `run_steps` (the schedule the SCAPE authors logged: dense to 2000, then linear to d at
    10000). Each sloped segment is integrated by the trapezoid rule on `nodes` points; a flat
    one costs one step time per step."""
    if run_steps < 1:
        raise ValueError(f"run_steps must be positive, got {run_steps}")
    steps = [t for t, _ in points]
    if steps[0] != 0 or steps != sorted(steps) or not all(0 < d <= 1 for _, d in points):
        raise ValueError(f"points must start at step 0, ascend, and hold densities in (0, 1]: "
                         f"{points}")
    cache = cache or PhaseCache(build_topology(cfg.hardware, cfg.gpus))
    known: dict[float, StepResult] = {}

    def at(d: float) -> StepResult:
        if d not in known:
            known[d] = _at_density(cfg, d, cache)
        return known[d]

    tail = (min(run_steps, max(steps)), run_steps, points[-1][1], points[-1][1])
    segments = [(t0, min(t1, run_steps), d0, d0 + (d1 - d0) * (min(t1, run_steps) - t0)
                 / (t1 - t0)) for (t0, d0), (t1, d1) in pairwise(points)
                if t0 < run_steps and t1 > t0]
    step_sum = bytes_sum = 0.0
    for t0, t1, d0, d1 in [*segments, tail]:
        n = t1 - t0
        if n <= 0:
            continue
        k = 1 if d0 == d1 else nodes
        results = [at(d0 + (d1 - d0) * i / max(1, k - 1)) for i in range(k)]
        weights = [1.0] if k == 1 else [0.5 if i in (0, k - 1) else 1.0 for i in range(k)]
        scale = n / sum(weights)
        step_sum += scale * sum(w * r.step_time_s for w, r in zip(weights, results, strict=True))
        bytes_sum += scale * sum(w * r.bytes_per_gpu
                                 for w, r in zip(weights, results, strict=True))
    moving = [i for i, (_, d) in enumerate(points) if d != points[-1][1]]
    warm = min(run_steps, points[moving[-1] + 1][0]) if moving else 0  # the target reached
    return RunMean(run_steps, warm, step_sum / run_steps, bytes_sum / run_steps,
                   at(points[-1][1]))
