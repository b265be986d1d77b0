"""What the remaining issue-61 misses are made of: three checks on the published rows themselves,
each against the model's own terms (nothing here changes the product or is read by it).

1. torchtitan's 8B and 405B long-sequence rows (profiles/external/torchtitan-h100-steps.csv,
   sequence >= 32k, priced as bench/torchtitan_steps.py prices them): each step split into its
   attention seconds A (the fused kernel's forward and backward, and its forward again where the
   layers are recomputed) and the rest R. With R held, the one factor k on A (a faster or slower
   attention kernel at these lengths: the profile's FlashAttention-2 rates were measured at 8k,
   Dao-AILab/flash-attention PR #1791) that minimizes the rows' max |error|, and that max. If
   no k brings the max under 20%, no attention rate can; if one does, the miss is the kernel's
   rate at long sequences, not the rest of the step.
2. BigScience's Megatron-DeepSpeed rows (profiles/external/bigscience-176b-steps.csv, priced as
   bench/deepspeed_steps.py prices them): whether the model's shortfall (published - predicted,
   seconds) grows as a fixed cost per layer and micro-batch on the pipeline's busiest stage,
   c x (micro-batches + stages - 1) x its layers, the signature of a per-kernel or per-layer
   host cost that no amount of GPU work hides. c is fitted on the same rows (least squares
   through 0), so the errors it leaves are in-sample: a diagnostic of the miss's form, not a
   prediction.
3. The same rows' out-of-memory boundary: whether any threshold on the model's own device
   memory refuses every run that did not fit and accepts every run that ran. Where the
   largest run that ran is priced at or above the smallest run that did not, no threshold
   (no allocator slack, no usable-memory margin) can do both: the model would have to order
   those runs differently.

Run: SCAPE_PROFILE_DIR=profiles python bench/held_out_bounds.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import deepspeed_steps as ds  # noqa: E402
import torchtitan_steps as tt  # noqa: E402

from simulator.step.simulate import _fwd_bwd, simulate_step  # noqa: E402
from vocabulary.recompute import modules_of  # noqa: E402

LONG_SEQ = 32768  # the torchtitan rows from here up (check 1)
K_GRID = np.arange(0.50, 1.50001, 0.001)  # the attention factors scanned (check 1)
GOAL_MAX_PCT = 20.0  # issue 61's max for published sweeps


def attention_split(cfg, step_s: float) -> tuple[float, float]:
    """(attention seconds, the rest) of a step: a layer's fused-attention forward and backward
    on this GPU, and its forward again where the recomputation runs it
    (simulator/step/compute.py recompute_s: `full` and Megatron's core_attn), times the layer
    passes on the step's critical path: every layer of every micro-batch without a pipeline,
    the busiest stage's layers (micro-batches + stages - 1) times through one (1F1B's fill
    and drain)."""
    t = _fwd_bwd(cfg)
    again = cfg.recompute == "full" or "core_attn" in (modules_of(cfg.recompute) or ())
    layer = t.parts["attention"] / cfg.model.arch.n_layers + (t.attn_fwd_s if again else 0.0)
    attention = layer * passes(cfg)
    return attention, step_s - attention


def passes(cfg) -> int:
    """Layer passes (forward and backward of one layer and micro-batch) on a step's critical
    path (`attention_split`)."""
    if cfg.pp == 1:
        return cfg.accum * cfg.model.arch.n_layers
    return (cfg.accum + cfg.pp - 1) * max(sum(stage) for stage in cfg.layer_split())


def attention_factor() -> pd.DataFrame:
    """Check 1's rows: published, predicted, attention and rest seconds."""
    df = pd.read_csv(tt.DATA, comment="#")
    rows = []
    for row in df[df.seq >= LONG_SEQ].itertuples():
        cfg = tt.options(row, tt.HARDWARE).config()
        step = simulate_step(cfg).step_time_s
        attention, rest = attention_split(cfg, step)
        rows.append({"case": row.case, "model": row.model, "cp": int(row.cp),
                     "published_s": row.global_batch * row.seq / (row.tps_per_gpu * row.gpus),
                     "predicted_s": step, "attention_s": attention, "rest_s": rest})
    return pd.DataFrame(rows)


def best_factor(d: pd.DataFrame) -> tuple[float, float]:
    """(k, max |error| %) minimizing the rows' max |error| with attention x k."""
    err = np.abs((d.rest_s.values[None, :] + K_GRID[:, None] * d.attention_s.values[None, :])
                 / d.published_s.values[None, :] - 1)
    worst = err.max(axis=1)
    i = int(worst.argmin())
    return float(K_GRID[i]), 100 * float(worst[i])


def per_layer_cost(res: pd.DataFrame) -> pd.DataFrame:
    """Check 2's rows: each run that ran with its shortfall and the pipeline's
    (micro-batches + stages - 1) x layers of its busiest stage."""
    df = pd.read_csv(ds.DATA, comment="#")
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for row in df[df.outcome == "ran"].itertuples():
            model = ds.shape_model(Path(tmp), int(row.nhidden), int(row.nlayers),
                                   int(row.nheads))
            cfg = ds.options(row, model, "deepspeed", ds.HARDWARE).config()
            out.append({"case": row.case, "tp": int(row.tp), "mbs": int(row.mbs),
                        "published_s": row.sec_per_it, "passes": passes(cfg)})
    got = pd.DataFrame(out).merge(res[["case", "predicted_s"]], on="case")
    got["short_s"] = got.published_s - got.predicted_s
    return got


def fit_through_zero(x: pd.Series, y: pd.Series) -> float:
    return float((x * y).sum() / (x * x).sum())


def line(name: str, errors) -> str:
    e = list(errors)
    return (f"{name}: {len(e)} rows, median |error| {statistics.median(abs(x) for x in e):.1f}%,"
            f" max {max(abs(x) for x in e):.1f}%")


def main() -> None:
    print("# 1. torchtitan rows from sequence 32k: one factor on the attention seconds "
          "(the rest of each step held)")
    d = attention_factor()
    d["error_pct"] = 100 * (d.predicted_s / d.published_s - 1)
    print(d.round(3).to_string(index=False))
    for name, part in [("all", d), *d.groupby("model")]:
        k, worst = best_factor(part)
        now = float(part.error_pct.abs().max())
        print(f"  {name}: now max |error| {now:.1f}%; best factor on attention {k:.3f} "
              f"(the kernel {100 * (1 / k - 1):+.1f}% in rate) -> max {worst:.1f}%"
              + ("" if worst <= GOAL_MAX_PCT else f" (above the {GOAL_MAX_PCT:g}% goal: "
                 "no attention rate alone reaches it)"))
    print()
    print("# 2. Megatron-DeepSpeed rows: the shortfall against (micro-batches + stages - 1) x "
          "the busiest stage's layers")
    res = ds.priced(megatron=False)
    g = per_layer_cost(res)
    c = fit_through_zero(g.passes, g.short_s)
    g["c_ms"] = 1e3 * g.short_s / g.passes
    g["error_pct"] = 100 * (g.predicted_s / g.published_s - 1)
    g["with_c_pct"] = 100 * ((g.predicted_s + c * g.passes) / g.published_s - 1)
    print(g[["case", "tp", "mbs", "published_s", "predicted_s", "passes", "c_ms", "error_pct",
             "with_c_pct"]].round(2).to_string(index=False))
    print(f"  c fitted on all {len(g)} rows: {1e3 * c:.2f} ms a layer and micro-batch "
          "(in-sample)")
    for tp, part in g.groupby("tp"):
        for mbs, sub in part.groupby("mbs"):
            print(f"    TP {tp}, micro-batch {mbs}: c per row {sub.c_ms.min():.1f}-"
                  f"{sub.c_ms.max():.1f} ms ({len(sub)} rows)")
    print("  " + line("as priced", g.error_pct))
    print("  " + line("with c added (in-sample, not a prediction)", g.with_c_pct))
    print()
    print("# 3. the same rows' out-of-memory boundary on the model's own device memory")
    ran = res[res.outcome == "ran"].dropna(subset=["device_GB"])
    oom = res[res.outcome == "oom"].dropna(subset=["device_GB"])
    top = ran.loc[ran.device_GB.idxmax()]
    print(f"  largest that ran: {top.case} {top.device_GB:.1f} GB priced "
          f"({top.published_GB:g} GB published)")
    for r in oom.sort_values("device_GB").itertuples():
        apart = "" if r.device_GB > top.device_GB else " (at or below a run that ran)"
        print(f"  did not fit: {r.case} {r.device_GB:.1f} GB priced{apart}")
    low = float(oom.device_GB.min()) if len(oom) else float("inf")
    print("  a threshold separating the two: "
          + (f"any between {top.device_GB:.1f} and {low:.1f} GB" if low > top.device_GB else
             "none (the model prices a run that did not fit at or below one that ran)"))


if __name__ == "__main__":
    main()
