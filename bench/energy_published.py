"""Issue 60 item 2's check: the power model of simulator/run/energy.py against the measured
GPU draw of public training runs (profiles/external/published-energy.csv).

Of the 48 public runs that state energy or emissions (docs/research/published-energy.md),
almost all compute them as GPU-hours x a nominal board power x a constant: their figures
check arithmetic, not a power model. Two state a measured mean draw over whole runs (Olmo 3
7B and 32B on H100, restarts and checkpoints included); each is priced here as the tool's
own top plan of the nearest shipped model (`model_like`) on the run's hardware, over the run's
tokens at up to 1,024 GPUs: its gpu_power_W (the waiting draw plus the rest to the board
limit in proportion to the step the mean GPU computes), and over the run's wall time with
failures, GPU energy per GPU-hour. Nothing is fitted on these rows. Also printed: what the
rest of a node adds to its GPUs' draw ([power] node_other_W), beside the 1.74x for non-GPU
hardware a secondary summary of Morrison et al. 2026 gives.

    SCAPE_PROFILE_DIR=profiles python bench/energy_published.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from profiles import load_hardware, load_model  # noqa: E402
from simulator.planning.plan_request import PlanRequest  # noqa: E402
from simulator.planning.planner import plan_training  # noqa: E402

DATA = REPO / "profiles" / "external" / "published-energy.csv"
MAX_GPUS = 1024


def main() -> int:
    rows = pd.read_csv(DATA, comment="#")
    out = []
    for r in rows.itertuples():
        hw = load_hardware(r.hardware)
        req = PlanRequest(load_model(r.model_like), float(r.tokens), (hw,), max_gpus=MAX_GPUS,
                          workers=1, schemes=("dense-adams",),
                          global_batch=int(r.global_batch)).validate()
        best = plan_training(req, keep=1).iloc[0]
        # the GPUs' own energy over the wall time (restarts at the waiting draw): per GPU-hour
        # of the run's work, the draw a GPU-hours x power figure would use
        p = hw.power
        lost = best["wall_hours"] - best["hours"]
        gpu_Wh = best["gpu_power_W"] * best["hours"] + p.gpu_wait_W * lost
        mean_W = gpu_Wh / best["wall_hours"]
        out.append({"case": r.case, "model_like": r.model_like, "plan_gpus": int(best["gpus"]),
                    "tp": int(best["tp"]), "pp": int(best["pp"]),
                    "measured_W": r.measured_W_per_gpu, "model_W": mean_W,
                    "error_pct": 100 * (mean_W / r.measured_W_per_gpu - 1),
                    "measured_MWh": r.energy_MWh,
                    "model_MWh_at_their_gpu_hours": r.gpu_hours * mean_W / 1e6})
    df = pd.DataFrame(out)
    print(df.to_string(index=False, float_format=lambda x: f"{x:,.1f}"))
    err = df["error_pct"].abs()
    print(f"\n{len(df)} runs: the mean GPU draw over the wall time, median |error| "
          f"{err.median():.1f}%, max {err.max():.1f}% (nothing fitted on them)")
    for name in ("dgx-h100", "dgx-a100", "dgx-b200", "gb200-nvl72"):
        p = load_hardware(name).power
        per = load_hardware(name).node.gpus_per_node
        share = (p.gpu_max_W + p.node_other_W / per) / p.gpu_max_W
        print(f"{name}: the rest of a node adds {p.node_other_W / per:,.0f} W to each GPU's "
              f"{p.gpu_max_W:,.0f} W at its limit: x{share:.2f} before the PUE (Morrison et al. "
              "2026 use x1.74 for non-GPU hardware, as a secondary summary gives it)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
