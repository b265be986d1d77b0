"""The netbed validation's committed measurements predicted again by the current model
(issue 18: "nothing in the netbed validation gets worse"). `scape validate` measured real gloo
runs over shaped links and saved, per run, the measured step and the probes its prediction
used (the forward/backward time and host slowdown timed just before the run); this script
rebuilds each prediction from the same probes with the simulator as it is now and prints the
old and new errors against the same measurements. Runs whose kernels were probed as well
(their fixed costs were not saved) are skipped and counted. Runs saved before scheme `scape`
was renamed `scape-partitioned` (commit 89a2c96) are predicted as what they ran.

Usage: python bench/revalidate_netbed.py [--sets netbed-100mbit,netbed-400mbit,netbed-1gbit]
       python bench/revalidate_netbed.py --sets gpu   (the GPU netbed runs, one set each)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from calibration.fwd_bwd import step_flops  # noqa: E402
from cli.validate import NOTHING_FITTED  # noqa: E402
from profiles import load_hardware, load_model  # noqa: E402
from reports import roles  # noqa: E402
from reports.validate import predict  # noqa: E402
from simulator.planning.compare import parse_scheme  # noqa: E402

VALIDATION = REPO / "results" / "validation"
SETS = ("netbed-100mbit", "netbed-400mbit", "netbed-1gbit")
# the GPU netbed validations (results/gpu-sessions, NCCL ranks sharing one GPU): folder under
# results/gpu-sessions -> the committed profile its runs were predicted from (renamed from
# the stamped name the run gave it, which validate.json keeps)
GPU = REPO / "results" / "gpu-sessions"
GPU_SETS = {
    "session12/netbed-1gbit": "h100-netbed-1gbit-2026-11-26",
    "session12/netbed-200mbit": "h100-netbed-200mbit-2026-11-26",
    "session12/netbed-1gbit-repeat": "h100-netbed-1gbit-2026-11-26",
    "session12/netbed-200mbit-repeat": "h100-netbed-200mbit-2026-11-26",
    "session13/call1/validation-netbed-1gbit": "h200-netbed-1gbit-2026-11-26",
    "session13/call1/validation-netbed-200mbit": "h200-netbed-200mbit-2026-11-26",
    "session13/call2-mps/validation-netbed-1gbit-mps": "h200-netbed-1gbit-mps-2026-11-26",
    "session13/call3-mps-repeat": "h200-netbed-1gbit-mps-2026-11-26",
}
# the commit that renamed scheme `scape` (this project's variant until then) to
# `scape-partitioned` and gave the name to the authors' reducer: runs saved before it ran the
# variant under the old name
RENAME = "89a2c96"


def scheme_then(spec: str, measured_at: str) -> str:
    """The scheme a saved run's name meant when it ran."""
    name, colon, value = spec.partition(":")
    if name != "scape":
        return spec
    before = subprocess.run(["git", "merge-base", "--is-ancestor", measured_at, RENAME],
                            cwd=REPO, capture_output=True)
    if before.returncode not in (0, 1):
        raise SystemExit(f"cannot tell whether {measured_at} predates the rename {RENAME}: "
                         f"{before.stderr.decode().strip()} (needs the git history)")
    return f"scape-partitioned{colon}{value}" if before.returncode == 0 else spec


def probed(hw, model: str, micro_batch: int, ranks: int, row) -> object:
    """The profile as the run's probe left it (reports/validate.py, probe_compute); as it is
    where the run probed nothing (the GPU runs)."""
    if not hasattr(row, "probe_fwd_bwd_s"):
        return hw
    profile = load_model(model)
    flops = step_flops(profile, micro_batch, profile.arch.seq_len)
    mfu = flops / row.probe_fwd_bwd_s / (hw.gpu.peak_bf16_tflops * 1e12)
    slowdown = list(hw.slowdown)
    slowdown[ranks - 1] = row.probe_slowdown
    return replace(hw, compute=replace(hw.compute, mfu=mfu), slowdown=tuple(slowdown))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default=",".join(SETS),
                        help=f"of results/validation, or 'gpu': {', '.join(GPU_SETS)}")
    args = parser.parse_args()
    out, skipped = [], 0
    names = [n for part in args.sets.split(",") for n in (GPU_SETS if part == "gpu" else [part])]
    for name in names:
        where = GPU / name if name in GPU_SETS else VALIDATION / name
        meta = json.loads((where / "validate.json").read_text())
        rows = pd.read_csv(where / "validate.csv")
        if any(c.startswith("probe_") and c.endswith("_ns_per_element") for c in rows.columns):
            skipped += len(rows)
            continue
        hw = load_hardware(f"measured/{GPU_SETS.get(name) or Path(meta['profile']).stem}")
        for row in rows.itertuples():
            now = probed(hw, meta["model"], meta["micro_batch"], row.ranks, row)
            spec = scheme_then(row.scheme, meta["git"])
            r = predict(now, meta["model"], parse_scheme(spec), row.ranks, meta["micro_batch"])
            out.append({"set": name, "scheme": spec, "ranks": row.ranks,
                        "measured_s": row.measured_step_s, "then_s": row.predicted_step_s,
                        "now_s": r.step_time_s, "then_pct": row.error_pct,
                        "now_pct": 100 * (r.step_time_s / row.measured_step_s - 1)})
    df = pd.DataFrame(out)
    print(df.to_string(index=False, float_format=lambda x: f"{x:.4f}"))
    if len(names) > 1:  # each set's own figures: sets differ in testbed and machine
        per = df.assign(then=df["then_pct"].abs(), now=df["now_pct"].abs()).groupby(
            "set", sort=False)[["then", "now"]].agg(["median", "max"])
        print("\n|error| % per set\n" + per.to_string(float_format=lambda x: f"{x:.1f}"))
    then, now = df["then_pct"].abs(), df["now_pct"].abs()
    moved = (df["now_s"] / df["then_s"] - 1).abs().max()
    print("\n" + "\n".join(roles.role_lines(df.assign(role="held-out"), error="now_pct",
                                             why_none=NOTHING_FITTED)))
    print(f"{len(df)} runs ({skipped} skipped: kernels probed too): median |error| then "
          f"{then.median():.1f}%, now {now.median():.1f}%; max then {then.max():.1f}%, now "
          f"{now.max():.1f}%; largest change of a prediction {100 * moved:.2f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
