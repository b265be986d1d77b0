"""Fidelity of the collective model against published nccl-tests tables (issue 18).

Every row of profiles/external/public-collectives.csv (sources in public-collectives.md) is
predicted with `scape collective`'s model on the named hardware profile: NCCL's tuner choice
where the run left NCCL's default (`auto`), ring where it forced NCCL_ALGO=Ring, launched as the
run launched it (`gpus_per_process`: nccl-tests' -g). One constant is fitted per GPU host, on a
subset named here (CALIBRATION: for 8x H100 the A2 rows below 1 MiB, for 8x A100 the C2 rows
below 1 MiB, where no byte costs anything): the host's launch of one call on one GPU (nccl-tests
times calls launched back to back, so a call whose GPUs finish sooner waits for the next
launch, and those runs' one process launched for 8 GPUs), the median of those rows' times over
their GPUs per process; it is that profile's [nccl] launch_us (the other H100 profiles carry
dgx-h100's). Every other row is held out.
Prints each case's errors by size and the median and max |error| of held-out rows from 1 MiB
up (the issue's range) and below it.

With --bands PATH it also writes the held-out errors grouped by shipped profile, node count
class, launch and size class (reports/fidelity.py): profiles/external/fidelity-bands.csv is
that file, which `scape collective` shows beside each size.

Usage: python bench/fidelity_public.py [--csv out/fidelity.csv] [--bands PATH]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cli.outputs import script_outputs  # noqa: E402
from profiles import load_hardware  # noqa: E402
from profiles.external import default_gpus_per_process  # noqa: E402
from reports import roles  # noqa: E402
from reports.fidelity import bands  # noqa: E402
from simulator.network.collective import sweep  # noqa: E402

DATA = REPO / "profiles" / "external" / "public-collectives.csv"
MIB = 2**20


def predict(rows: pd.DataFrame) -> pd.DataFrame:
    out = []
    for (_case, hw_name, gpus, op, algo, per_process), part in rows.groupby(
            ["case", "hardware", "gpus", "op", "nccl_algo", "gpus_per_process"], sort=False):
        hw = load_hardware(hw_name)
        results = sweep(hw, int(gpus), op, algo, [int(s) for s in part["size_bytes"]],
                        gpus_per_process=int(per_process))
        for (_, row), res in zip(part.iterrows(), results, strict=True):
            out.append({**row.to_dict(), "pred_us": res.time_s * 1e6, "algo": res.algo,
                        "proto": res.proto})
    df = pd.DataFrame(out)
    df["err_pct"] = (df["pred_us"] / df["time_us"] - 1) * 100
    return df


# the profile whose launch floor each case prefix's rows below 1 MiB are fitted for
CALIBRATION = {"A2-": "dgx-h100", "C2-": "dgx-a100"}


def calibration(df: pd.DataFrame, prefix: str | None = None) -> pd.Series:
    """The rows a launch floor is fitted on: those of `prefix`, or of every calibration case."""
    prefixes = tuple(CALIBRATION) if prefix is None else (prefix,)
    return df["case"].str.startswith(prefixes) & (df["size_bytes"] < MIB)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", help="write every row with its prediction here")
    parser.add_argument("--bands", help="write the held-out errors by band here "
                                        "(profiles/external/fidelity-bands.csv is shipped)")
    args = parser.parse_args()
    script_outputs(parser, {"--csv": args.csv, "--bands": args.bands})
    rows = pd.read_csv(DATA)
    # a row that does not say how its run was launched (rows in the file's earlier layout, or
    # an empty last field) takes the documented default, and the output says which cases did
    if "gpus_per_process" not in rows:
        rows["gpus_per_process"] = float("nan")
    per_node = {h: load_hardware(h).node.gpus_per_node for h in rows["hardware"].unique()}
    unsaid = rows["gpus_per_process"].isna()
    if unsaid.any():
        rows.loc[unsaid, "gpus_per_process"] = [
            default_gpus_per_process(int(g), per_node[h])
            for g, h in zip(rows.loc[unsaid, "gpus"], rows.loc[unsaid, "hardware"], strict=True)]
        print("gpus_per_process not given, defaulted (one node: its GPUs; several: 1) for: "
              + ", ".join(rows.loc[unsaid, "case"].unique()))
    launched = pd.to_numeric(rows["gpus_per_process"], errors="coerce")
    bad = ~((launched >= 1) & (launched % 1 == 0))  # a count of GPUs, nothing else
    if bad.any():
        parser.exit(2, f"{parser.prog}: error: {DATA}: gpus_per_process must be a whole number "
                       f"of GPUs from 1 (case {rows.loc[bad, 'case'].iloc[0]}: "
                       f"{rows.loc[bad, 'gpus_per_process'].iloc[0]!r})\n")
    rows["gpus_per_process"] = launched.astype(int)
    for prefix, profile in CALIBRATION.items():
        fit = calibration(rows, prefix)
        per_process = rows.loc[fit, "gpus_per_process"].unique()
        if len(per_process) != 1:  # one launch cost from runs launched alike
            parser.exit(2, f"{parser.prog}: error: calibration rows of {prefix[:-1]} mix GPUs "
                           f"per process ({sorted(int(p) for p in per_process)})\n")
        floor = rows.loc[fit, "time_us"].median()
        used = load_hardware(profile).nccl.launch_us
        print(f"launch fitted on {fit.sum()} calibration rows ({prefix[:-1]} below 1 MiB, "
              f"{per_process[0]} GPUs per process): floor {floor:.2f} us, "
              f"{floor / per_process[0]:.3f} us per GPU; profile {profile} [nccl] "
              f"launch_us = {used:.3f}")
    df = predict(rows)
    df["held_out"] = ~calibration(df)
    df["role"] = df["held_out"].map({True: "held-out", False: "fitted"})
    pd.set_option("display.width", 160)
    for case, part in df.groupby("case", sort=False):
        print(f"\n## {case} ({part['hardware'].iloc[0]}, {part['gpus'].iloc[0]} GPUs, "
              f"{part['op'].iloc[0]}, NCCL_ALGO {part['nccl_algo'].iloc[0]})")
        print(part[["size_bytes", "time_us", "pred_us", "err_pct", "algo", "proto"]]
              .to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    print()
    held = df["held_out"]
    for label, sel in (("from 1 MiB up (held out)", held & (df["size_bytes"] >= MIB)),
                       ("below 1 MiB (held out)", held & (df["size_bytes"] < MIB)),
                       ("in sample: the calibration rows (launch_us fitted on them)", ~held)):
        print(roles.line(label, df.loc[sel, "err_pct"]))
        by_case = df[sel].groupby("case", sort=False)["err_pct"].agg(
            lambda s: f"median {s.abs().median():.1f}%, max {s.abs().max():.1f}%")
        width = max(map(len, df["case"].unique()))  # one column however long a case's name
        for case, text in by_case.items():
            print(f"  {case:<{width}} {text}")
    outputs = []
    if args.csv is not None:
        outputs.append(("--csv", args.csv, df))
    if args.bands is not None:
        outputs.append(("--bands", args.bands, bands(df, per_node)))
    for flag, path, table in outputs:
        try:
            table.to_csv(path, index=False)
        except OSError as exc:
            parser.exit(2, f"{parser.prog}: error: {flag} {path}: cannot write it "
                           f"({exc.strerror or exc})\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
