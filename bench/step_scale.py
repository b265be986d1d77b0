"""Benchmark: wall time of simulating one llama-1.8b step per scheme at 32 to 131,072 GPUs.

Not a test: prints figures. Target (issue 4): under 1 s per step simulation up to 16,384 GPUs.
Usage: python bench/step_scale.py [--hardware dgx-h100] [--model llama-1.8b]
"""

from __future__ import annotations

import argparse
import time

from profiles import load_hardware, load_model
from simulator.planning.compare import DEFAULT_SCHEMES, parse_scheme
from simulator.step.simulate import simulate_step
from simulator.step.step_config import StepConfig

SCALES = (32, 1024, 16384, 131072)
BUDGET_S, BUDGET_UP_TO = 1.0, 16384


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hardware", default="dgx-h100")
    parser.add_argument("--model", default="llama-1.8b")
    parser.add_argument("--micro-batch", type=int, default=8)
    args = parser.parse_args()
    hw, model = load_hardware(args.hardware), load_model(args.model)
    print(f"# one {model.name} step (micro-batch {args.micro_batch}) on {hw.name}; wall = "
          "simulate_step from a cold cache (topology, collectives, simpy)")
    print(f"{'gpus':>7} {'scheme':>14} {'step_ms':>10} {'exposed_ms':>11} {'wall_s':>8}  ok")
    over = []
    for gpus in SCALES:
        for spec in DEFAULT_SCHEMES:
            cfg = StepConfig(model, hw, gpus, parse_scheme(spec), micro_batch=args.micro_batch)
            t0 = time.perf_counter()
            r = simulate_step(cfg)
            wall = time.perf_counter() - t0
            ok = wall < BUDGET_S or gpus > BUDGET_UP_TO
            if not ok:
                over.append((gpus, spec))
            print(f"{gpus:>7} {spec:>14} {r.step_time_s * 1e3:>10.2f} "
                  f"{r.exposed_comm_s * 1e3:>11.2f} {wall:>8.3f}  {'yes' if ok else 'NO'}")
    if over:
        print(f"# over {BUDGET_S} s at <= {BUDGET_UP_TO} GPUs: {over}")
    return 1 if over else 0


if __name__ == "__main__":
    raise SystemExit(main())
