"""Benchmark: a 1,000+-configuration what-if sweep (the scaling report's points for three
model/hardware pairs), over every core. Target (issue 6): under 60 s on 2 cores.
Usage: python bench/scaling_sweep.py [--workers N]
"""

from __future__ import annotations

import argparse
import os
import time

from profiles import load_hardware, load_model
from reports.scaling import Sweep, points, run_sweep

PAIRS = (("llama-7b", "dgx-h100"), ("llama-1.8b", "vista-gh200"), ("gpt-345m", "dgx-a100"),
         ("llama-500m", "commodity-100gbe"))
BUDGET_S = 60.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=os.cpu_count())
    args = parser.parse_args()
    pts = []
    for model, hardware in PAIRS:
        hw = load_hardware(hardware)
        pts += points(load_model(model), hw, Sweep.full(hw.node.gpus_per_node))
    t0 = time.perf_counter()
    df = run_sweep(pts, args.workers)
    wall = time.perf_counter() - t0
    print(f"# {len(pts)} configurations ({int(df['fits'].sum())} fit in memory), "
          f"{args.workers} worker(s), {os.cpu_count()} cores")
    print(f"wall_s {wall:.1f}  per_config_ms {wall / len(pts) * 1e3:.1f}  "
          f"{'within' if wall < BUDGET_S else 'OVER'} {BUDGET_S:.0f} s")
    return 0 if wall < BUDGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
