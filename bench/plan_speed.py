"""How fast the planner answers (issue 39's goals: `plan` for Llama-70B up to 4,096 GPUs in
<= 2 s, one step on the planner's path in <= 2 ms; issue 57's: DeepSeek-V3 on an H100 or GB200
profile up to 4,096 GPUs, expert parallelism searched, in <= 2 s; on this 2-core host).

Prints, each a median of --runs:
- the wall time of `scape plan --model M --tokens 1e12 --hardware H --max-gpus 4096` as a
  user runs it (a fresh process: imports included), for Llama-70B on dgx-h100 and
  DeepSeek-V3 on dgx-h100 and gb200-nvl72, bounded (default: the lazy search of
  simulator/planning/search.py) and, with --exhaustive-too, Llama-70B simulating every
  feasible plan;
- `scape plan` and `scape plan --pareto` for Llama-70B on dgx-h100, alternated run by run so
  that the host's drift falls on both, and their ratio (issue 61's goal: the Pareto view within
  2x of `plan`);
- in-process: candidates (memory of every try), lower bounds (one per layout), and the
  seconds per simulated step on the planner's path (simulate_cached, collectives reused).
Run one timing job at a time, with nothing else busy.

Run: python bench/plan_speed.py [--runs 3] [--exhaustive-too]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from profiles import load_hardware, load_model  # noqa: E402
from simulator.planning.plan_request import PlanRequest  # noqa: E402
from simulator.planning.planner import bounds, candidates  # noqa: E402
from simulator.step.batch import phase_cache, simulate_cached  # noqa: E402


def plan_args(model: str, hardware: str) -> list[str]:
    return [sys.executable, "-m", "cli", "plan", "--model", model, "--tokens", "1e12",
            "--hardware", hardware, "--max-gpus", "4096", "--format", "csv"]


PLAN = plan_args("llama-70b", "dgx-h100")
# (model, hardware) of the wall times printed
ASKED = (("llama-70b", "dgx-h100"), ("deepseek-v3", "dgx-h100"), ("deepseek-v3", "gb200-nvl72"))


def wall(args: list[str], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(args, cwd=REPO, check=True, capture_output=True)
        out.append(time.perf_counter() - t0)
    return out


def in_process(runs: int) -> dict:
    req = PlanRequest(load_model("llama-70b"), 1e12, (load_hardware("dgx-h100"),),
                      max_gpus=4096, workers=1).validate()
    t_cand, t_bound = [], []
    for _ in range(runs):
        from simulator.layout import pipeline
        from simulator.memory import activations, peak

        for cached in (peak._stage_activations, activations.in_flight,
                       activations.layer_memory, pipeline.pipeline_bound):
            cached.cache_clear()  # each run from cold, as a fresh process is
        from simulator.step import simulate as step_module
        from simulator.step import tp_overlap

        step_module.FWD_BWD.clear()
        tp_overlap.TP_COLLECTIVES.clear()
        t0 = time.perf_counter()
        cands, _ = candidates(req)
        t1 = time.perf_counter()
        lows = bounds(req, cands)
        t_cand.append(t1 - t0)
        t_bound.append(time.perf_counter() - t1)
    # the steps a bounded search simulates: the lowest bounds first
    order = sorted(range(len(cands)), key=lambda i: lows[i]["hours"])[:200]
    per_step = []
    for i in order:
        cfg = cands[i].step_config(req)
        cache = phase_cache(cfg)
        t0 = time.perf_counter()
        simulate_cached(cfg)
        per_step.append(time.perf_counter() - t0)
    del cache
    return {"feasible": len(cands), "candidates_s": statistics.median(t_cand),
            "bounds_s": statistics.median(t_bound), "step_ms": per_step}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--exhaustive-too", action="store_true",
                        help="also time --exhaustive (every feasible plan simulated; ~1 min)")
    args = parser.parse_args()
    if args.runs < 1:
        parser.exit(2, f"{parser.prog}: error: --runs must be at least 1\n")
    for model, hardware in ASKED:
        bounded = wall(plan_args(model, hardware), args.runs)
        print(f"scape plan {model} on {hardware} up to 4,096 GPUs (bounded, every core): "
              f"median {statistics.median(bounded):.2f} s over {args.runs} runs "
              f"({', '.join(f'{t:.2f}' for t in bounded)})")
    plain, frontier = [], []
    for _ in range(args.runs):  # alternated: a busy spell slows both, not one
        plain += wall(PLAN, 1)
        frontier += wall([*PLAN, "--pareto"], 1)
    ratio = statistics.median(frontier) / statistics.median(plain)
    print(f"scape plan llama-70b on dgx-h100, alternated with --pareto: plan median "
          f"{statistics.median(plain):.2f} s ({', '.join(f'{t:.2f}' for t in plain)}), --pareto "
          f"median {statistics.median(frontier):.2f} s ({', '.join(f'{t:.2f}' for t in frontier)})"
          f": {ratio:.2f}x (goal: within 2x)")
    if args.exhaustive_too:
        every = wall([*PLAN, "--exhaustive"], 1)
        print(f"  --exhaustive (every feasible plan simulated): {every[0]:.1f} s")
    got = in_process(args.runs)
    steps = sorted(got["step_ms"])
    print(f"in-process, llama-70b, every plan: {got['feasible']:,} feasible plans; candidates "
          f"(memory of every try) "
          f"{got['candidates_s']:.2f} s, lower bounds {got['bounds_s']:.2f} s (medians)")
    print(f"one simulated step on the planner's path, the 200 lowest bounds: median "
          f"{1000 * statistics.median(steps):.2f} ms, p90 {1000 * steps[int(0.9 * len(steps))]:.2f}"
          f" ms, max {1000 * steps[-1]:.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
