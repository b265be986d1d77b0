"""Many step simulations at once: over every core, reusing each topology's collectives.

The planner and the scaling report both simulate hundreds of steps; items that share a
topology are handed out together, and each worker keeps the collectives of the topology it is
on (one at a time, so memory stays flat).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable

from profiles import UserError
from simulator.network.engine import PhaseCache
from simulator.network.topology import Topology, build_topology
from simulator.step.simulate import simulate_step
from simulator.step.step_config import StepConfig, StepResult

_CACHE: dict[Topology, PhaseCache] = {}
# topologies whose collectives a process keeps, the least recently used dropped first: the
# planner's search goes back and forth between a few GPU counts in the order of its bounds
# (simulator/planning/search.py), and each rebuild of a count's phases cost it a simulation's
# worth of time; a few keep memory flat
KEPT_TOPOLOGIES = 4


def phase_cache(cfg: StepConfig) -> PhaseCache:
    """The collectives built for cfg's topology: kept for the last KEPT_TOPOLOGIES
    topologies used in this process."""
    topo = build_topology(cfg.hardware, cfg.gpus)  # a frozen dataclass of numbers: a key
    cache = _CACHE.pop(topo, None) or PhaseCache(topo)
    _CACHE[topo] = cache  # the most recent last
    while len(_CACHE) > KEPT_TOPOLOGIES:
        del _CACHE[next(iter(_CACHE))]
    return cache


def simulate_cached(cfg: StepConfig) -> StepResult:
    """`simulate_step`, reusing the collectives built for this process's recent topologies."""
    return simulate_step(cfg, cache=phase_cache(cfg))


MAX_WORKERS = 1024  # processes; more than any host has cores, fewer than the OS can fork


def check_workers(workers: int | None) -> None:
    """Refuse a --workers value no pool can honour (None: every core)."""
    if workers is not None and not 1 <= workers <= MAX_WORKERS:
        raise UserError(f"--workers must be between 1 and {MAX_WORKERS}, got {workers}")


def parallel_map(fn: Callable, items: Iterable, workers: int | None = None,
                 progress: Callable[[int], None] | None = None) -> list:
    """[fn(x) for x in items], in order, on `workers` processes (default: every core);
    `progress(1)` after each item. Sort items by topology first to reuse caches."""
    items = list(items)
    check_workers(workers)
    workers = workers if workers is not None else (os.cpu_count() or 1)
    results = []
    if workers == 1 or len(items) < 8:
        for r in map(fn, items):
            results.append(r)
            if progress:
                progress(1)
        return results
    # imported here: a process pool (and the logging it pulls in) costs every CLI call that
    # never runs one a few ms at start-up (issue 58's 0.3 s)
    from concurrent.futures import ProcessPoolExecutor

    chunk = max(1, math.ceil(len(items) / (workers * 4)))
    with ProcessPoolExecutor(workers) as pool:
        for r in pool.map(fn, items, chunksize=chunk):
            results.append(r)
            if progress:
                progress(1)
    return results
