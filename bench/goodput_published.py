"""Interruptions and effective training time of published large runs against the goodput
model (simulator/run/goodput.py) with its default failure, restart and checkpoint figures
(simulator/run/defaults.py, computed from studies other than the runs checked here).

Checked (profiles/external/reliability.csv; held out: no default is computed from them):
- Llama 3 405B (the Llama 3 paper, section 3.3.4): 419 unexpected interruptions in a 54-day
  snapshot on 16,384 H100 (an 8,192-GPU stage also ran: the GPU count may be overstated), and
  "higher than 90%" effective training time;
- ByteDance MegaScale (arXiv 2402.15627): more than 90% effective training time for a run of
  more than 10,000 GPUs over several weeks, a model of hundreds of billions of parameters
  (175B taken here).
Each row is priced at the default failure rate and at the least and largest of the studies'
(the range the default's sources span).

    python bench/goodput_published.py
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from simulator.run.defaults import default_reliability, failure_range, value  # noqa: E402
from simulator.run.goodput import checkpoint_bytes, run_with_failures  # noqa: E402

DAY = 86_400.0


def predict(gpus: int, wall_days: float, params: float, rate: float | None = None):
    """The run that fills `wall_days` of wall time: its work found by solving for the wall."""
    rel = default_reliability()
    if rate is not None:
        rel = replace(rel, failures_per_gpu_day=rate)
    ckpt = checkpoint_bytes(params)
    probe = run_with_failures(wall_days * DAY, gpus, ckpt, rel)
    # goodput does not depend on the work: the work that fills the wall is wall x goodput
    return run_with_failures(wall_days * DAY * probe.goodput, gpus, ckpt, rel)


def main() -> None:
    rel = default_reliability()
    low, high = failure_range()
    print(f"defaults: {rel.failures_per_gpu_day:.2e} interruptions per GPU-day (studies' range "
          f"{low:.2e}-{high:.2e}), restart {rel.restart_min:g} min, checkpoint writes "
          f"{rel.checkpoint_GBps:g} GB/s a GPU up to {rel.storage_GBps:g} GB/s; {rel.source}")
    gpus = int(value("llama3-paper", "gpus"))
    days = value("llama3-paper", "snapshot_days")
    published = value("llama3-paper", "unexpected_interruptions")
    ett = value("llama3-paper", "effective_training_time_pct_min")
    print(f"\nLlama 3 405B, {gpus:,} GPUs, {days:g}-day snapshot: published {published:g} "
          f"unexpected interruptions, effective training time above {ett:g}%")
    print(f"{'failure rate':>28} {'interruptions':>14} {'error':>8} {'effective time':>15} "
          f"{'interval':>9} {'write':>7}")
    for name, rate in (("default", None), ("studies' least", low), ("studies' largest", high)):
        run = predict(gpus, days, 405e9, rate)
        print(f"{name:>28} {run.interruptions:14.0f} "
              f"{100 * (run.interruptions / published - 1):+7.0f}% {100 * run.goodput:14.1f}% "
              f"{run.interval_s / 60:7.1f} m {run.checkpoint_write_s:5.1f} s")
    run = predict(10_000, 21, 175e9)
    print(f"\nMegaScale, 10,000 GPUs, 3 weeks, 175B (published: above 90% effective time): "
          f"{100 * run.goodput:.1f}% at the default rate, "
          f"{100 * predict(10_000, 21, 175e9, high).goodput:.1f}% at the largest")


if __name__ == "__main__":
    main()
