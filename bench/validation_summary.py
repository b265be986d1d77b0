"""Gather `scape validate` results of several profiles into one table (results/validation/).

Usage: python bench/validation_summary.py out/validate/netbed-100mbit out/validate/... \
           [--out results/validation]
Copies each folder's validate.csv/json/png under OUT/<profile>/ and writes OUT/summary.md with
the whole table, the error statistics, and SCAPE 99%'s measured speedup over dense AdamS where
communication is at least 70% of the dense step.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pandas as pd

from cli.validate import NOTHING_FITTED
from reports import roles
from reports.tables import markdown


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+")
    parser.add_argument("--out", default="results/validation")
    args = parser.parse_args()
    out = Path(args.out)
    frames = []
    for folder in map(Path, args.folders):
        dest = out / folder.name
        dest.mkdir(parents=True, exist_ok=True)
        for name in ("validate.csv", "validate.json", "validate.png", "validate.rounds.csv"):
            if (folder / name).exists():  # the per-round table: only from --rounds runs
                shutil.copy(folder / name, dest / name)
        frames.append(pd.read_csv(folder / "validate.csv").assign(profile=folder.name))
    df = pd.concat(frames, ignore_index=True)
    err = df["error_pct"].abs()
    lines = [f"# scape validate: {len(df)} runs", "",
             f"Median |error| {err.median():.1f}%, max {err.max():.1f}% "
             f"(targets: median <= 5%, max <= 15%).", "",
             *(f"- {text}" for text in roles.role_lines(
                 df if "role" in df else df.assign(role="held-out"),
                 why_none=NOTHING_FITTED)), ""]
    for profile, group in df.groupby("profile", sort=False):
        e = group["error_pct"].abs()
        lines.append(f"- {profile}: median |error| {e.median():.1f}%, max {e.max():.1f}%")
    lines += ["", "## SCAPE 99% against dense AdamS, measured", ""]
    for (profile, ranks), group in df.groupby(["profile", "ranks"], sort=False):
        dense = group[group["scheme"] == "dense-adams"].iloc[0]
        scape = group[group["scheme"] == "scape:0.99"].iloc[0]
        share = dense["measured_comm_s"] / dense["measured_step_s"]
        lines.append(f"- {profile}, {ranks} ranks: dense AdamS {dense['measured_step_s']:.3f} s "
                     f"(communication {100 * share:.0f}% of it), SCAPE 99% "
                     f"{scape['measured_step_s']:.3f} s: "
                     f"{dense['measured_step_s'] / scape['measured_step_s']:.2f}x")
    cols = ["profile", "scheme", "ranks", "measured_step_s", "predicted_step_s", "error_pct",
            "measured_fwd_bwd_s", "measured_comm_s", "measured_kernels_s",
            "predicted_compute_s", "predicted_compression_s", "predicted_exposed_comm_s"]
    lines += ["", "## Every run", "", markdown(df[cols], "{:.4f}")]
    meta = [json.loads((out / f.name / "validate.json").read_text()) for f in map(Path,
                                                                                 args.folders)]
    lines += ["", "Configs and git revisions: " + "; ".join(
        f"{m['profile']} @ {m['git']} ({m['date']})" for m in meta)]
    df.to_csv(out / "all.csv", index=False)
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:12]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
