"""Leave-one-stack-out step times: each published step predicted by a model calibrated
without any row of its own stack (issue 39, "honest confidence"; issue 61 item 6: by stack,
not by source, since two sources share Megatron-LM).

The step model has one fitted constant per GPU: the [roofline] `sustained` share of the
kernels' benchmark peaks a whole training step reaches (bench/fidelity_parallel.py fits it on
Korthikanti et al.'s A100 steps and NVIDIA's H100 GPT-3 175B steps, and holds the rest out).
Rows of one stack (framework, kernels, launch habits) share their errors, so a row held out of
the fit but from the fit's own stack is not an independent check: Narayanan's and
Korthikanti's rows are two sources but one stack (Megatron-LM). Here every stack in turn is
left out: the share is fitted (median log error zero, bench/fidelity_parallel.py
calibrate_steps' rule) on every other stack's rows of that GPU, and the left-out stack's rows
are predicted (`--by source` gives the older, looser leave-one-source-out for comparison).

Rows alike in everything but their GPU count (weak scaling at a fixed batch per GPU) or their
software release are one configuration run again: NeMo's 62 rows are 8. Every figure is
counted both ways: rows, and distinct configurations, whose median takes each configuration's
median error once (the max stays the worst row). The errors, grouped by (hardware profile,
layout, schemes) with the stacks they come from, are the bands `scape simulate`, `compare` and
`plan` print as "how sure" (profiles/external/step-fidelity-bands.csv, `--bands`). In-sample
rows (the shipped fit's own residuals) are printed apart and are in no band.

`--without KNOB,...` prices every row with a choice made after held-out errors were seen taken
back (profiles/external/late-constants.md, entries 34-36): `flash2` (the MosaicML H100 rows'
FlashAttention-2 rates: they run on the profile's `flash` instead), `interference` (the SM
share a running collective takes from compute: none), `recompute-tp` (a fully recomputed
layer's tensor-parallel collectives paid once, not again in the backward).

Each row is simulated once per share of GRID and priced between them by interpolation in
1 / share; the interpolation's largest departure from a direct simulation at the shipped
shares is printed.

Run: python bench/step_loso.py [--bands PATH] [--csv PATH] [--by stack|source]
     [--without flash2,interference,recompute-tp]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import fidelity_parallel as fp  # noqa: E402

from cli.outputs import script_outputs  # noqa: E402
from reports.step_fidelity import (  # noqa: E402
    config_medians,
    layout_class,
    scheme_class,
    summarize_sources,
)

GRID = (0.45, 0.55, 0.65, 0.75, 0.85, 0.95, 1.05, 1.15)  # sustained shares simulated
# the stack each source's runs used (the CSVs' header comments give the evidence)
FRAMEWORK = {"narayanan": "Megatron-LM", "korthikanti": "Megatron-LM", "dgxc": "NeMo",
             "mosaic": "llm-foundry (FSDP)", "llmc": "llm.c", "fa2": "flash-attn trainer",
             "torchtitan": "torchtitan"}


# columns that only say how large a run was, what it measured or where it came from: rows
# alike in every other column are one configuration (the ratio of global batch to GPUs, the
# accumulation a GPU runs, stays part of it)
SCALE_ONLY = {"case", "gpus", "global_batch", "step_s", "step_from", "tflops_per_gpu",
              "tokens_per_s", "params", "source", "family", "stack"}
LATE_KNOBS = ("flash2", "interference", "recompute-tp")


def family(hardware: str) -> str:
    """The GPU whose sustained share a row informs (the H100 profiles share one)."""
    return "H100" if hardware in fp.H100_PROFILES else hardware


def all_rows() -> pd.DataFrame:
    """Every published step: parallel-steps.csv and the H100 calibration rows, with source."""
    rows = pd.concat([pd.read_csv(fp.DATA, comment="#"), pd.read_csv(fp.H100_STEPS,
                                                                      comment="#")],
                     ignore_index=True)
    rows["source"] = rows["case"].str.split("-").str[0]
    unknown = sorted(set(rows["source"]) - set(FRAMEWORK))
    if unknown:
        raise SystemExit(f"no framework named for source(s) {', '.join(unknown)}: add to "
                         "FRAMEWORK")
    rows["family"] = rows["hardware"].map(family)
    rows["stack"] = rows["source"].map(FRAMEWORK)
    rows["config"] = config_ids(rows)
    return rows


def config_ids(rows: pd.DataFrame) -> pd.Series:
    """Each row's configuration: `source:n`, the same n for rows alike in every column but
    SCALE_ONLY's (and the same batch per GPU)."""
    cols = [c for c in rows.columns if c not in SCALE_ONLY and c != "config"]
    key = ["|".join(map(str, (*values, batch / gpus))) for values, batch, gpus in zip(
        rows[cols].itertuples(index=False), rows["global_batch"], rows["gpus"], strict=True)]
    ids: dict[str, str] = {}
    for source, k in zip(rows["source"], key, strict=True):
        ids.setdefault(k, f"{source}:{sum(i.startswith(source + ':') for i in ids.values())}")
    return pd.Series([ids[k] for k in key], index=rows.index)


def grid_times(rows: pd.DataFrame, workers: int | None = None,
               without: tuple[str, ...] = ()) -> pd.DataFrame:
    """Each row's predicted step at every share of GRID (with the late knobs `without` taken
    back), and its measured step; the shares split over `workers` processes (default: every
    core)."""
    import os
    from concurrent.futures import ProcessPoolExecutor

    shipped = fp.shipped_profiles(rows)
    jobs = [(f, shipped, rows, without) for f in GRID]
    workers = workers if workers is not None else (os.cpu_count() or 1)
    if workers > 1:  # the worker lives in fidelity_parallel, an importable module
        with ProcessPoolExecutor(min(workers, len(jobs))) as pool:
            out = list(pool.map(fp.predicted_at_share, jobs))
    else:
        out = [fp.predicted_at_share(j) for j in jobs]
    table = pd.concat(out, axis=1)
    table["measured_s"] = [fp.measured_step_s(r) for r in rows.itertuples()]
    return table


def at(times: pd.Series, share: float) -> float:
    """A row's step at `share`, linear in 1 / share between the GRID points around it."""
    xs = [1 / f for f in GRID]  # falling
    ys = [times[f] for f in GRID]
    x = 1 / share
    for i in range(len(xs) - 1):
        if xs[i + 1] <= x <= xs[i]:
            w = (x - xs[i + 1]) / (xs[i] - xs[i + 1])
            return ys[i + 1] + w * (ys[i] - ys[i + 1])
    raise SystemExit(f"share {share} outside the grid {GRID[0]}-{GRID[-1]}")


def fit_share(times: pd.DataFrame) -> float:
    """The share at which these rows' median log error is zero (fidelity_parallel's
    calibrate_steps rule, rounded to 0.005)."""
    def median_log(f: float) -> float:
        return float(pd.Series([math.log(at(r, f) / r["measured_s"])
                                for _, r in times.iterrows()]).median())

    share = share_where_zero(median_log, GRID[0], GRID[-1])
    return min(max(share, GRID[0]), GRID[-1])


def share_where_zero(median_log, lo: float, hi: float, steps: int = 30) -> float:
    """The sustained share in [lo, hi] where `median_log(share)` (the rows' median log error,
    falling as the share grows) crosses zero, by bisection, rounded to 0.005."""
    for _ in range(steps):
        mid = (lo + hi) / 2
        if median_log(mid) > 0:  # predicted too slow: the GPU sustains more
            lo = mid
        else:
            hi = mid
    return round((lo + hi) / 2 / 0.005) * 0.005


def leave_one_out(rows: pd.DataFrame, times: pd.DataFrame, by: str = "stack") -> pd.DataFrame:
    """Each row predicted with the share fitted on its GPU's rows of other stacks (`by`
    "source": of other sources)."""
    out = []
    for fam, part in rows.groupby("family"):
        for left in sorted(set(part[by])):
            fit_rows = part[part[by] != left]
            if fit_rows.empty:  # the GPU's only stack: nothing to calibrate on without it
                continue
            share = fit_share(times.loc[fit_rows["case"]])
            for r in part[part[by] == left].itertuples():
                source = r.source
                predicted = at(times.loc[r.case], share)
                measured = times.loc[r.case, "measured_s"]
                out.append({
                    "case": r.case, "source": source, "framework": FRAMEWORK[source],
                    "config": r.config,
                    "hardware": r.hardware, "family": fam, "gpus": r.gpus,
                    "layout": layout_class(int(r.tp), int(r.pp),
                                           fp.given(r, "tp_overlap", False), 1,
                                           fp.given(r, "fp8", False)),
                    "schemes": scheme_class(r.scheme), "share": share,
                    "fitted_on": ";".join(sorted(set(fit_rows["source"]))),
                    "fitted_stacks": ";".join(sorted(set(fit_rows["stack"]))),
                    "measured_s": measured, "predicted_s": predicted,
                    "error_pct": 100 * (predicted / measured - 1)})
    return pd.DataFrame(out)


def in_sample(rows: pd.DataFrame, times: pd.DataFrame) -> pd.DataFrame:
    """The shipped fits' own rows at the shipped shares: residuals, not predictions."""
    calibration, _ = fp.split(pd.read_csv(fp.DATA, comment="#"))
    fitted = set(calibration["case"]) | set(pd.read_csv(fp.H100_STEPS, comment="#")["case"])
    shipped = fp.shipped_profiles(rows)
    out = []
    for r in rows[rows["case"].isin(fitted)].itertuples():
        share = shipped[r.hardware].roofline.sustained
        t = times.loc[r.case]
        out.append({"case": r.case, "hardware": r.hardware, "share": share, "config": r.config,
                    "error_pct": 100 * (at(t, share) / t["measured_s"] - 1)})
    return pd.DataFrame(out)


def interpolation_error(rows: pd.DataFrame, times: pd.DataFrame,
                        without: tuple[str, ...] = ()) -> float:
    """The largest |interpolated / simulated - 1| at the shipped shares, in %."""
    shipped = fp.shipped_profiles(rows)
    direct = pd.concat([fp.predicted_at_share((shipped[h].roofline.sustained, shipped, part,
                                               without))
                        for h, part in rows.groupby("hardware")])
    worst = 0.0
    for r in rows.itertuples():
        share = shipped[r.hardware].roofline.sustained
        worst = max(worst, abs(at(times.loc[r.case], share) / direct[r.case] - 1))
    return 100 * worst


WORST = 5  # held-out rows printed with their breakdowns (issue 61's acceptance)


def worst_breakdowns(rows: pd.DataFrame, held: pd.DataFrame, without: tuple[str, ...] = ()
                     ) -> pd.DataFrame:
    """The WORST held-out rows by |error|, each simulated again at the share it was predicted
    with (its profile's sustained share set to it, the late knobs `without` taken back) and
    broken down as simulate reports a step: compute (of it the once-a-step work), the
    tensor-parallel communication waited for, exposed data-parallel communication, the
    pipeline bubble and the slowdown beside collectives, in seconds."""
    from simulator.step.simulate import simulate_step

    top = held.reindex(held["error_pct"].abs().sort_values(ascending=False).index).head(WORST)
    shipped = fp.shipped_profiles(rows)
    out = []
    for h in top.itertuples():
        row = rows[rows["case"] == h.case]
        profiles, row = fp.without_late(without, shipped, row)
        hw = fp.sustained(profiles[h.hardware], h.share)
        r = simulate_step(fp.step_config(next(row.itertuples()), hw))
        out.append({"case": h.case, "measured_s": h.measured_s, "predicted_s": h.predicted_s,
                    "error_pct": h.error_pct, "share": h.share, "simulated_s": r.step_time_s,
                    "compute_s": r.compute_s,
                    "per_step_s": r.per_step_s, "tp_comm_s": r.tp_comm_s,
                    "exposed_comm_s": r.exposed_comm_s, "bubble_s": r.pipeline_bubble_s,
                    "interference_s": r.interference_s})
    return pd.DataFrame(out)


def line(df: pd.DataFrame, label: str) -> str:
    """Rows and distinct configurations, each configuration's median |error| counted once in
    the median; the max is the worst row."""
    err = df["error_pct"].abs()
    per = config_medians(df)
    return (f"{label}: {len(df)} rows, {len(per)} configurations; median |error| "
            f"{per.abs().median():.1f}% by configuration ({err.median():.1f}% by row), max "
            f"{err.max():.1f}% ({df.loc[err.idxmax(), 'case']}), median {per.median():+.1f}%")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bands", default=None,
                        help="write the leave-one-stack-out bands here (shipped: "
                             "profiles/external/step-fidelity-bands.csv)")
    parser.add_argument("--csv", default=None, help="also write every row's prediction here")
    parser.add_argument("--by", choices=("stack", "source"), default="stack",
                        help="leave out each stack (shipped bands) or each source")
    parser.add_argument("--without", default="",
                        help=f"late choices to take back, comma-separated: "
                             f"{', '.join(LATE_KNOBS)} (or 'all')")
    args = parser.parse_args()
    without = tuple(LATE_KNOBS) if args.without == "all" else tuple(
        k for k in args.without.split(",") if k)
    unknown = sorted(set(without) - set(LATE_KNOBS))
    if unknown:
        parser.error(f"--without {','.join(unknown)}: not a late knob; choose from "
                     f"{', '.join(LATE_KNOBS)} or all")
    if args.bands and (without or args.by != "stack"):
        parser.error("--bands writes the shipped bands: only with --by stack and no --without")
    script_outputs(parser, {"--bands": args.bands, "--csv": args.csv})
    t0 = time.perf_counter()
    rows = all_rows()
    times = grid_times(rows, without=without)
    held = leave_one_out(rows, times, by=args.by)
    fitted = in_sample(rows, times)
    fmt = {"index": False, "float_format": lambda x: f"{x:.3f}"}
    print(held[["case", "config", "framework", "hardware", "layout", "share", "fitted_on",
                "measured_s", "predicted_s", "error_pct"]].to_string(**fmt))
    print()
    print(f"late choices taken back: {', '.join(without) or 'none (as shipped)'}")
    print(line(fitted, "in-sample (the shipped fits' own rows at the shipped shares)"))
    print(line(held, f"held out, leave-one-{args.by}-out (each {args.by} predicted by a share "
                     f"fitted without it)"))
    for stack, part in held.groupby("framework"):
        print("  " + line(part.reset_index(drop=True),
                          f"{stack} ({', '.join(sorted(set(part['source'])))}), share "
                          f"{', '.join(f'{s:g}' for s in sorted(set(part['share'])))}"))
    skipped = sorted(set(rows["case"]) - set(held["case"]))
    if skipped:
        print(f"  not predicted (the only {args.by} on its GPU): {', '.join(skipped)}")
    print(f"the {WORST} worst held-out rows, simulated again at their held-out share "
          "(simulated_s = compute + tp + exposed + bubble; predicted_s, the grid's "
          "interpolation, is within the figure below of it):")
    print(worst_breakdowns(rows, held, without).to_string(**fmt))
    print(f"interpolation in 1/share against direct simulation at the shipped shares: max "
          f"{interpolation_error(rows, times, without):.2f}%")
    print(f"wall time {time.perf_counter() - t0:.1f} s")
    if args.csv:  # every row twice: predicted without its stack, and in the shipped fit
        pd.concat([held.assign(role="held-out"), fitted.assign(role="fitted")],
                  ignore_index=True).to_csv(args.csv, index=False)
    if args.bands:
        summarize_sources(held).to_csv(args.bands, index=False)
        print(f"bands written to {args.bands}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
