"""Benchmark summary (issue 15's acceptance figures) from what the lent H100 measured on
2026-11-26: results/gpu-sessions/gpu-compute-run{1,2}.json (bench/gpu_compute.py),
profiles/measured/h100-2026-11-26.toml (scape calibrate compute / collectives) and
results/gpu-sessions/validate.csv (scape validate --backend nccl). Nothing is measured here;
every figure printed is computed from those files and the profiles, so it reruns on any host.

1. Forward+backward per model: time, TFLOP/s (3 x forward FLOPs, simulator.step.compute), MFU of the
   measured matmul peak and of the datasheet peak; this project's shape model of the same
   micro-batch on dgx-h100 (simulator.step.compute.fwd_bwd, [roofline]), a prediction never fitted
   to these rows; and the SCAPE authors' GH200 compute (scape-sc26 comp_comm_micro_bs_8, 32
   GPUs: 4 micro-batches of 8 per step), scaled to one micro-batch and to an H100 by the peak
   ratio (dgx-h100 / vista-gh200-socket [gpu]).
2. The optimizer step of Llama-1.8B on one GPU: dense AdamS and both SCAPE variants, and
   SCAPE's overhead over dense AdamS (goal <= 20 ms; the authors report 150-300 ms).
3. Selection at 1e8 and 1e9 (torch.topk against scape.select), quantize/dequantize at 1e8.
4. The NCCL validation tables: median and max |error| (goal <= 5% / 10%): ranks sharing the
   GPU over loopback (session 10), and over the shaped netbed at 1 Gbit/s and 200 Mbit/s
   (session 12: results/gpu-sessions/session12, two calls with the same profiles and code),
   with how far the two calls' measurements of the same run differ (the testbed's own
   repeatability, which bounds any prediction's error).
Session 12 (2026-11-26, the same H100 model) reran the optimizer and selection after the banded
selection and the reducer rewrite: gpu-compute-run3.json; sections 2 and 3 print both runs.
Session 13 (2026-11-26, an H200): results/gpu-sessions/session13 (run 4 in sections 2 and 3;
the netbed at 1 Gbit/s under CUDA MPS measured twice in section 4; section 5 its forward and
backward).
Usage: python bench/gpu_summary.py
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pandas as pd

from cli.validate import NOTHING_FITTED
from profiles import load_hardware, load_model
from profiles.external import AUTHORS_MICRO_BATCH, authors_compute_rows, authors_micro_batches
from reports import roles
from simulator.step.compute import fwd_bwd

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "results" / "gpu-sessions"
AUTHORS_GPUS = 32  # the comp_comm_micro_bs_8 column the issue quotes


def _load(name: str) -> dict:
    return json.loads((RUNS / name).read_text())


def authors_compute_s(model: str) -> tuple[float, int]:
    """(seconds of compute per micro-batch of 8 on one GH200, micro-batches per step) from the
    authors' dense AdamS computation time at 32 GPUs."""
    row = next(r for r in authors_compute_rows() if r.model == model and r.gpus == AUTHORS_GPUS)
    micro = authors_micro_batches(row)
    return row.value / 1e3 / micro, micro


def compute_table(run: str = "gpu-compute-run1.json",
                  measured_peak_tflops: float | None = None) -> pd.DataFrame:
    """Section 1 from `run` (a bench/gpu_compute.py JSON under results/gpu-sessions); the
    matmul peak measured beside it (default: the H100 profile's). The H200's datasheet bf16
    peak is the H100's (device notes, H200.md), so dgx-h100 stands for both."""
    h100, gh200 = load_hardware("dgx-h100"), load_hardware("vista-gh200-socket")
    if measured_peak_tflops is None:
        measured_peak_tflops = load_hardware("measured/h100-2026-11-26").gpu.peak_bf16_tflops
    peak_ratio = gh200.gpu.peak_bf16_tflops / h100.gpu.peak_bf16_tflops
    rows = []
    for fb in _load(run)["fwd_bwd"]:
        model = load_model(fb["model"])
        shape = fwd_bwd(model, h100, fb["micro_batch"], fb["seq_len"])
        row = {"model": fb["model"], "micro_batch": fb["micro_batch"], "seq": fb["seq_len"],
               "flash": fb["flash"], "fwd_bwd_ms": 1e3 * fb["total_s"],
               "tflops": fb["tflops"],
               "mfu_of_measured_peak": fb["tflops"] / measured_peak_tflops,
               "mfu_of_datasheet": fb["tflops"] / h100.gpu.peak_bf16_tflops,
               "shape_model_ms": 1e3 * (shape.fwd_s + shape.bwd_s)}
        row["shape_model_err_pct"] = 100 * (row["shape_model_ms"] / row["fwd_bwd_ms"] - 1)
        try:
            per_mb, _micro = authors_compute_s(fb["model"])
        except StopIteration:
            per_mb = None
        if per_mb is not None:
            # their micro-batch is 8; ours may differ (a halved one that fit): per token
            scale = fb["micro_batch"] * fb["seq_len"] / (AUTHORS_MICRO_BATCH * model.arch.seq_len)
            row["authors_gh200_ms"] = 1e3 * per_mb * scale
            row["authors_as_h100_ms"] = row["authors_gh200_ms"] * peak_ratio
            row["ours_vs_authors_pct"] = 100 * (row["fwd_bwd_ms"] / row["authors_as_h100_ms"]
                                                - 1)
        rows.append(row)
    return pd.DataFrame(rows)


# each bench/gpu_compute.py run with an optimizer part: label -> file, GPU
OPT_RUNS = {"run2": ("gpu-compute-run2.json", "H100"), "run3": ("gpu-compute-run3.json", "H100"),
            "run4": ("session13/call1/gpu-compute.json", "H200")}


def optimizer_table() -> pd.DataFrame:
    rows = [{**r, "run": f"{run} ({gpu})"} for run, (name, gpu) in OPT_RUNS.items()
            for r in _load(name)["optimizer"] if "full_s" in r]
    return pd.DataFrame([{
        "run": r["run"], "scheme": r["scheme"], "density": r["density"], "params": r["params"],
        "full_step_ms": 1e3 * r["full_s"],
        "measured_whole": r["step_s"] is not None,
        "line_check_pct": r.get("line_err_pct"),
        "over_dense_ms": 1e3 * r["over_dense_s"]} for r in rows])


def selection_table() -> pd.DataFrame:
    """Milliseconds per method: run 2 (session 10), run 3 (session 12, with `banded`), run 4
    (session 13, the H200)."""
    df = pd.concat([pd.DataFrame(_load(name)["select"]).assign(run=f"{run} ({gpu})")
                    for run, (name, gpu) in OPT_RUNS.items()])
    wide = df.pivot_table(index=["run", "n", "density"], columns="method",
                          values="s").reset_index()
    for col in ("torch.topk", "threshold", "banded"):
        wide[col] = 1e3 * wide[col]
    first = pd.DataFrame(_load("gpu-compute-run1.json")["select"])
    old = first[first["method"] == "threshold"].set_index(["n", "density"])["s"] * 1e3
    wide["threshold_before_ms"] = [old.get((n, d)) for n, d in zip(wide["n"], wide["density"],
                                                                     strict=True)]
    return wide.rename(columns={"torch.topk": "torch_topk_ms", "threshold": "threshold_ms",
                                "banded": "banded_ms"})


S12, S13 = RUNS / "session12", RUNS / "session13"
# the same validation measured twice with the same profile: (first, repeat) folders
NETBED = {**{f"H100 {rate}": (S12 / f"netbed-{rate}", S12 / f"netbed-{rate}-repeat")
             for rate in ("1gbit", "200mbit")},
          "H200 1gbit under MPS": (S13 / "call2-mps" / "validation-netbed-1gbit-mps",
                                   S13 / "call3-mps-repeat")}


def netbed_tables() -> list[tuple[str, pd.DataFrame]]:
    """Per testbed: both calls' measured step, the prediction (the same profile in both) and
    its error as the run printed it, and the second call's measurement against the first's.
    (bench/revalidate_netbed.py --sets gpu predicts them again with the model as it is now.)"""
    out = []
    for rate, (first, second) in NETBED.items():
        a, b = (pd.read_csv(d / "validate.csv") for d in (first, second))
        df = a[["scheme", "ranks", "measured_step_s", "predicted_step_s", "error_pct"]].merge(
            b[["scheme", "ranks", "measured_step_s", "error_pct"]], on=["scheme", "ranks"],
            suffixes=("", "_repeat"))
        df["repeat_vs_first_pct"] = 100 * (df["measured_step_s_repeat"]
                                           / df["measured_step_s"] - 1)
        out.append((rate, df))
    return out


def main() -> int:
    pd.set_option("display.width", 160)
    pd.set_option("display.max_columns", 20)
    env = _load("gpu-compute-run1.json")["environment"]
    print(f"# {env['gpu']}, torch {env['torch']}, CUDA {env['cuda']}, NCCL {env['nccl']}, "
          f"{env['date']}")
    print("\n## 1. forward+backward (bf16 autocast, FlashAttention)")
    print(compute_table().round(3).to_string(index=False))
    print("\n## 2. optimizer step, Llama-1.8B, one GPU (SCAPE overhead goal <= 20 ms)")
    print(optimizer_table().round(2).to_string(index=False))
    print("\n## 3. selection (ms; threshold = scape.select, before = kthvalue on CUDA)")
    print(selection_table().round(2).to_string(index=False))
    q = pd.DataFrame(_load("gpu-compute-run2.json")["quantize"])
    print("\n" + "; ".join(f"{r.kind} {r.n:.3g} values: {1e3 * r.s:.2f} ms"
                           for r in q.itertuples()))
    v = pd.read_csv(RUNS / "validate.csv")
    err = v["error_pct"].abs()
    print(f"\n## 4. NCCL validation ({len(v)} runs, {v['netbed'].iloc[0]}): median |error| "
          f"{err.median():.1f}%, max {err.max():.1f}% (goal 5% / 10%)\n"
          + "\n".join(roles.role_lines(v.assign(role="held-out"), why_none=NOTHING_FITTED)))
    print(v[["scheme", "ranks", "measured_step_s", "predicted_step_s", "error_pct",
             "measured_comm_s", "predicted_exposed_comm_s"]].round(4).to_string(index=False))
    for rate, df in netbed_tables():
        e1, e2 = df["error_pct"].abs(), df["error_pct_repeat"].abs()
        rep = df["repeat_vs_first_pct"].abs()
        print(f"\n## 4. NCCL validation on the netbed, {rate} ({len(df)} runs per call): "
              f"median |error| {e1.median():.1f}% / {e2.median():.1f}%, max {e1.max():.1f}% / "
              f"{e2.max():.1f}% (first / repeat call); the repeat against the first call: "
              f"median |difference| {rep.median():.1f}%, max {rep.max():.1f}%")
        print(df.round(4).to_string(index=False))
    for rate in ("1gbit", "200mbit"):  # session 13's time-sliced runs, measured once
        v = pd.read_csv(S13 / "call1" / f"validation-netbed-{rate}" / "validate.csv")
        err = v["error_pct"].abs()
        print(f"\n## 4. NCCL validation on the netbed, H200 {rate}, time-sliced (no MPS; "
              f"{len(v)} runs): median |error| {err.median():.1f}%, max {err.max():.1f}%")
    h200 = tomllib.loads((S13 / "call1" / "profiles" / "h200-compute-only.toml").read_text())
    env = _load("session13/call1/gpu-compute.json")["environment"]
    print(f"\n## 5. forward+backward on the H200 ({env['gpu']}, torch {env['torch']}, "
          f"{env['date']}; measured matmul peak {h200['gpu']['peak_bf16_tflops']:.0f} TFLOP/s)")
    print(compute_table("session13/call1/gpu-compute.json",
                        h200["gpu"]["peak_bf16_tflops"]).round(3).to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
