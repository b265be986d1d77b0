"""The GEMM roofline's two fitted constants (simulator/step/roofline.py): launch time and the
smooth-max exponent, fitted per GPU on square shapes of a public GEMM table (split =
calibration) and checked on its held-out rows. H100: OpenXLA's BF16 table
(profiles/external/gemm-h100-xla.csv; held out: 15 transformer shapes); B200: the same table's
sm_100 key (profiles/external/gemm-b200-xla.csv; held out: the other 120 shapes of m, n, k in
256..4096, and every shape's FP8 rate at the BF16 fit, nothing fitted on FP8; and torch.mm's
squares from 1024 to 8192 in pytorch/ao #2427, profiles/external/gemm-b200-torch.csv); A100:
cuBLAS FP16 from Triton's matmul tutorial as posted in triton-lang/triton#3551 and
TensorRT-LLM#935 (profiles/external/gemm-a100.csv; held out: 19 more squares and 4 rows of
another run). Prints the fit and each shape's error; the shipped profiles carry the result
([roofline] gemm_launch_us, gemm_blend), except dgx-b200 and gb200-nvl72, which keep DGX H100's
(the B200 fit moved the published Blackwell steps both ways: docs/research/gemm-efficiency.md
section 1e).

Usage: python bench/fidelity_gemm.py [--hardware dgx-h100|dgx-b200|dgx-a100]
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from profiles import load_hardware  # noqa: E402
from simulator.layout.shapes import Gemm  # noqa: E402
from simulator.step.roofline import gemm_s  # noqa: E402

TABLES = {"dgx-h100": REPO / "profiles" / "external" / "gemm-h100-xla.csv",
          "dgx-b200": REPO / "profiles" / "external" / "gemm-b200-xla.csv",
          "dgx-a100": REPO / "profiles" / "external" / "gemm-a100.csv"}
# another harness's rows of the same GPU, only checked (torch.mm squares on a B200)
OTHER = {"dgx-b200": REPO / "profiles" / "external" / "gemm-b200-torch.csv"}


def predicted_tflops(hw, rows: pd.DataFrame, fp8: bool = False) -> np.ndarray:
    """TFLOP/s of each row's GEMM as simulator/step/roofline.py gemm_s prices it (`fp8`: at
    the profile's FP8 rate)."""
    return np.array([r.b * 2.0 * r.m * r.n * r.k / gemm_s(Gemm("x", r.m, r.n, r.k, r.b), hw, fp8)
                     / 1e12 for r in rows.itertuples()])


def summary(errors: pd.Series) -> str:
    """median / max |error| of a column of percentage errors."""
    e = errors.abs()
    return f"median |error| {e.median():.1f}%, max {e.max():.1f}% ({len(e)} shapes)"


def fit(hw, rows: pd.DataFrame) -> tuple[float, float]:
    """(launch us, blend) minimizing the squared log error over `rows`, on a 0.1 us x 0.05
    grid (the loss is smooth and two-dimensional: a grid is exact enough and has no
    dependency)."""
    best = (math.inf, 0.0, 0.0)
    for launch in np.arange(0.0, 20.0, 0.1):
        for blend in np.arange(1.0, 6.0, 0.05):
            h = replace(hw, roofline=replace(hw.roofline, gemm_launch_us=float(launch),
                                             gemm_blend=float(blend)))
            loss = float((np.log(predicted_tflops(h, rows) / rows["tflops"].to_numpy())
                          ** 2).sum())
            if loss < best[0]:
                best = (loss, float(launch), float(blend))
    return best[1], best[2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hardware", default="dgx-h100", choices=sorted(TABLES))
    args = parser.parse_args()
    hw = load_hardware(args.hardware)
    # the table is a benchmark's: the kernels' own peak, not a training step's sustained share
    hw = replace(hw, roofline=replace(hw.roofline, sustained=1.0))
    rows = pd.read_csv(TABLES[args.hardware], comment="#")
    cal = rows[rows["split"] == "calibration"]
    launch, blend = fit(hw, cal)
    fitted = replace(hw, roofline=replace(hw.roofline, gemm_launch_us=launch, gemm_blend=blend))
    rows = rows.assign(predicted=predicted_tflops(fitted, rows),
                       shipped=predicted_tflops(hw, rows))
    rows["error_pct"] = 100 * (rows["predicted"] / rows["tflops"] - 1)
    print(rows.to_string(index=False, float_format=lambda x: f"{x:.1f}"))
    held = rows["split"] != "calibration"
    print(f"\nfit on {len(cal)} square shapes: gemm_launch_us = {launch:.1f}, gemm_blend = "
          f"{blend:.2f} (profile {hw.name} ships {hw.roofline.gemm_launch_us:g}, "
          f"{hw.roofline.gemm_blend:g}); held out: {summary(rows.error_pct[held])}")
    shipped = 100 * (rows["shipped"] / rows["tflops"] - 1)
    print(f"  the profile's shipped constants: in sample {summary(shipped[~held])}; held out "
          f"{summary(shipped[held])}")
    big = held & (rows.m * rows.n * rows.k >= 2048 ** 3)
    print(f"  held-out shapes of >= 2048^3 multiply-adds (a training step's GEMMs): "
          f"{summary(rows.error_pct[big])}")
    if "fp8_tflops" in rows:  # the FP8 rate at the BF16 fit: nothing fitted on these
        fp8 = 100 * (predicted_tflops(fitted, rows, fp8=True) / rows["fp8_tflops"] - 1)
        print(f"  FP8 (e4m3 x e4m3 -> bf16) at the profile's fp8_gemm_peak_fraction and the "
              f"fit above: every shape {summary(fp8)}; >= 2048^3 {summary(fp8[big | ~held])}")
    if args.hardware in OTHER:  # the same GPU timed by another harness: checked, not fitted
        other = pd.read_csv(OTHER[args.hardware], comment="#")
        for name, h in (("the fit above", fitted), ("the shipped constants", hw)):
            e = 100 * (predicted_tflops(h, other) / other["tflops"] - 1)
            print(f"  {OTHER[args.hardware].name} with {name}: "
                  + ", ".join(f"{r.m}^3 {x:+.1f}%" for r, x in zip(other.itertuples(), e,
                                                                  strict=True)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
