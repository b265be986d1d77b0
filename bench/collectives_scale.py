"""Benchmark: wall time of simulating a 1 GiB all-reduce at 8 to 131,072 GPUs on a fat tree.

Not a test: prints figures. Target (issue 2): ring and hierarchical each under 0.5 s of wall
time at every scale. Usage: python bench/collectives_scale.py [--hardware dgx-h100] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

from profiles import load_hardware
from simulator.network.collective import collective_time
from simulator.network.topology import build_topology

SCALES = (8, 1024, 16384, 131072)
ALGOS = ("ring", "hierarchical", "tree")
BUDGET_S = 0.5


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hardware", default="dgx-h100")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--size", type=int, default=2**30)
    args = parser.parse_args()
    hw = load_hardware(args.hardware)
    print(f"# 1 GiB all_reduce on {hw.name}; wall = whole library call (topology, flows, "
          f"max-min, simpy), median of {args.repeat} runs, first run in brackets")
    print(f"{'gpus':>7} {'algo':>12} {'sim_time_ms':>12} {'busbw_GBps':>11} "
          f"{'wall_s':>8} {'(first)':>8}  within {BUDGET_S} s")
    over = []
    for gpus in SCALES:
        build_topology(hw, gpus)  # validate up front
        for algo in ALGOS:
            walls = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                res = collective_time(hw, gpus, "all_reduce", algo, args.size)
                walls.append(time.perf_counter() - t0)
            wall = statistics.median(walls)
            ok = max(walls) < BUDGET_S
            if not ok and algo in ("ring", "hierarchical"):
                over.append((gpus, algo))
            print(f"{gpus:>7} {algo:>12} {res.time_s * 1e3:>12.3f} {res.busbw_GBps:>11.2f} "
                  f"{wall:>8.3f} {walls[0]:>8.3f}  {'yes' if ok else 'NO'}")
    if over:
        print(f"# over budget: {over}")
    return 1 if over else 0


if __name__ == "__main__":
    raise SystemExit(main())
