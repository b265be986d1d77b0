"""The failure, restart and checkpoint figures a plan uses where the user gives none, each
computed from profiles/external/reliability.csv (sources and quotes there and in
docs/research/reliability.md), by rules fixed before any published run was checked:

- interruptions per GPU-day: the median of the per-1,000-node-day failure rates the studies
  other than Llama 3 give (Meta's RSC-1 and RSC-2 clusters, Kokolis et al. 2024; BLOOM's and
  OPT-175B's logbooks), over 8 GPUs a node; their least and largest are the range. Llama 3's
  own rate is kept out: bench/goodput_published.py predicts it.
- restart: the geometric middle of Kokolis et al.'s 5-20 minute restart overhead.
- checkpoint writes: BLOOM's measured save (2.3 TB in about 40 s from 384 GPUs: 0.15 GB/s a
  GPU), up to the 2 TB/s Llama 3's storage sustained (the largest stated).
"""

from __future__ import annotations

import math
import statistics
from functools import lru_cache
from pathlib import Path

from simulator.run.goodput import Reliability

DATA = Path(__file__).resolve().parents[2] / "profiles" / "external" / "reliability.csv"
GPUS_PER_NODE = 8  # the studies' nodes (RSC: 8 A100; BLOOM, OPT: 8 A100 hosts)
RATES = (("kokolis-2024", "failure_rate_per_1000_node_days_rsc1"),
         ("kokolis-2024", "failure_rate_per_1000_node_days_rsc2"),
         ("bloom-derived", "gpu_failures_per_1000_node_days"),
         ("opt-derived", "hw_restarts_per_1000_node_days"))


@lru_cache(maxsize=1)
def _values() -> dict[tuple[str, str], float]:
    import csv

    with DATA.open() as f:
        rows = csv.DictReader(line for line in f if not line.startswith("#"))
        return {(r["source"], r["quantity"]): float(r["value"]) for r in rows
                if _number(r["value"])}


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def value(source: str, quantity: str) -> float:
    return _values()[source, quantity]


def failure_rates() -> dict[str, float]:
    """Interruptions per GPU-day of each study the default is the median of."""
    return {f"{s} {q}": value(s, q) / 1000 / GPUS_PER_NODE for s, q in RATES}


@lru_cache(maxsize=1)
def default_reliability() -> Reliability:
    rates = failure_rates()
    low, high = (value("kokolis-2024", f"restart_minutes_{end}") for end in ("min", "max"))
    per_gpu = value("bloom-derived", "checkpoint_write_GBps_per_gpu")
    storage = 1000 * value("llama3-paper", "storage_sustained_TBps")
    return Reliability(
        failures_per_gpu_day=statistics.median(rates.values()),
        restart_min=math.sqrt(low * high), checkpoint_GBps=per_gpu, storage_GBps=storage,
        rate_from_profile=True,
        source=f"profiles/external/reliability.csv (simulator/run/defaults.py): failures the "
               f"median of Meta RSC-1/RSC-2, BLOOM and OPT-175B; restart Kokolis et al.'s "
               f"{low:g}-{high:g} min; writes BLOOM's {per_gpu:g} GB/s a GPU up to Llama 3's "
               f"{storage / 1000:g} TB/s")


def failure_range() -> tuple[float, float]:
    """The least and largest interruptions per GPU-day of the studies."""
    rates = failure_rates().values()
    return min(rates), max(rates)


def on_profile(rel: Reliability, hw) -> Reliability:
    """`rel` for a run on `hw`: the profile's own failure rate ([failures], published for that
    cluster) where `rel`'s is the studies' median and not the user's."""
    own = getattr(hw, "failures", None)
    if own is None or not rel.rate_from_profile:
        return rel
    from dataclasses import replace

    return replace(rel, failures_per_gpu_day=own.failures_per_gpu_day,
                   source=f"{rel.source}; on {hw.name} its own {own.failures_per_gpu_day:.2g} "
                          f"interruptions per GPU-day ({own.source})")


def spread(work_s: float, gpus: int, checkpoint_bytes: float, rel: Reliability,
           host_GBps: float | None = None, extra_per_gpu_day: float = 0.0) -> tuple:
    """The run with failures at the studies' least and largest rates (failure_range), all
    else as `rel`: how far the answer moves with the failure rate alone. `extra_per_gpu_day`:
    interruptions on top of the hardware's own (spot capacity taken back)."""
    from dataclasses import replace

    from simulator.run.goodput import run_with_failures

    return tuple(run_with_failures(work_s, gpus, checkpoint_bytes,
                                   replace(rel, failures_per_gpu_day=rate + extra_per_gpu_day),
                                   host_GBps=host_GBps)
                 for rate in failure_range())
