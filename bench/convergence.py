"""Convergence study (issue 3): tiny-gpt on the Python-stdlib byte corpus, 2 ranks on gloo,
every scheme for the same steps; final validation losses, loss curves, and SCAPE option
variants to choose its defaults. Writes results/convergence/convergence/ (table CSV + Markdown,
figure, the command that made them).
Usage: python bench/convergence.py [--steps 1000] [--nprocs 2]
       [--out results/convergence/convergence]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd

from reports.tables import markdown
from scape.plan import make_config
from scape.train.launch import launch
from scape.train.loop import TrainConfig

RUNS = (
    ("dense-adamw", {}),
    ("dense-adams", {}),
    ("scape-partitioned", {"sparsity": 0.9}),
    ("scape-partitioned", {"sparsity": 0.99}),
    ("topk", {"sparsity": 0.99}),
    ("scalecom", {"sparsity": 0.99}),
    ("quantized", {"bits": 8}),
)
# SCAPE readings at 99% (DESIGN section 5 options), to choose the defaults
VARIANTS = (
    ("scape-partitioned", {"sparsity": 0.9, "error_feedback": True}),
    ("scape-partitioned", {"sparsity": 0.99, "error_feedback": True}),
    ("scape-partitioned", {"sparsity": 0.99, "update_scope": "all", "error_feedback": True}),
    ("scape-partitioned", {"sparsity": 0.99, "refresh_every": 10, "error_feedback": True}),
    ("scape-partitioned", {"sparsity": 0.99, "score": "m_over_sqrt_v", "error_feedback": True}),
    ("scape-partitioned", {"sparsity": 0.99, "refresh_every": 10}),
    ("scape-partitioned", {"sparsity": 0.99, "refresh_every": 4}),
    ("scape-partitioned", {"sparsity": 0.9, "refresh_every": 10}),
)


TRAIN_KEYS = ("lr", "warmup_steps", "seed")  # options of a run that belong to TrainConfig


def label(name: str, opts: dict) -> str:
    return name + "".join(f" {k}={v}" for k, v in opts.items())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--nprocs", type=int, default=2)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--no-variants", action="store_true")
    parser.add_argument("--runs", help='JSON list of [scheme, {options}] instead of the '
                        'default line-up, e.g. \'[["scape-partitioned", {"sparsity": 0.99}]]\'')
    parser.add_argument("--append", action="store_true",
                        help="add these runs to an existing table.csv instead of replacing it")
    parser.add_argument("--out", default="results/convergence/convergence")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    base = TrainConfig(steps=args.steps, micro_batch=args.micro_batch, seq_len=args.seq_len,
                       lr=args.lr, eval_every=max(1, args.steps // 10), warmup_steps=50)
    runs = RUNS + (() if args.no_variants else VARIANTS)
    if args.runs:
        runs = tuple((name, opts) for name, opts in json.loads(args.runs))
    rows, curves = [], {}
    if args.append and (out / "table.csv").exists():
        old = pd.read_csv(out / "table.csv")
        rows = old.drop(columns=["gap_vs_dense_adams_pct", "gap_vs_best_dense_adams_pct",
                                 "mean_bytes_vs_dense_pct"], errors="ignore").to_dict("records")
        for tag in old["run"]:
            run_dir = out / "runs" / tag.replace(" ", "_").replace("=", "-")
            log = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]
            curves[tag] = [(r["step"], r["loss"], r.get("val_loss")) for r in log]
    for name, opts in runs:
        tag = label(name, opts)
        run_dir = out / "runs" / tag.replace(" ", "_").replace("=", "-")
        t0 = time.perf_counter()
        scheme_opts = {k: v for k, v in opts.items() if k not in TRAIN_KEYS}
        train_opts = {k: v for k, v in opts.items() if k in TRAIN_KEYS}  # e.g. a run's own lr
        summary = launch(replace(base, scheme=make_config(name, **scheme_opts), out=str(run_dir),
                                 **train_opts), args.nprocs)
        log = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]
        curves[tag] = [(r["step"], r["loss"], r.get("val_loss")) for r in log]
        rows.append({"run": tag, "final_val_loss": summary["final_val_loss"],
                     "final_train_loss": summary["final_train_loss"],
                     "bytes_per_step": summary["bytes_per_step"],
                     "mean_bytes_per_step": summary.get("mean_bytes_per_step"),
                     "median_step_ms": summary["median_step_s"] * 1e3,
                     "wall_s": time.perf_counter() - t0})
        print(f"{tag:<45} val {summary['final_val_loss']:.4f}  "
              f"{time.perf_counter() - t0:.0f} s", flush=True)
    df = pd.DataFrame(rows)
    # gaps need a dense AdamS reading in the table (NaN without one, rather than no table)
    ref = df.loc[df["run"] == "dense-adams", "final_val_loss"].min()
    df["gap_vs_dense_adams_pct"] = (df["final_val_loss"] / ref - 1) * 100
    # every learning rate tried for dense AdamS counts: the fair reference is its best
    best = df.loc[df["run"].str.startswith("dense-adams"), "final_val_loss"].min()
    df["gap_vs_best_dense_adams_pct"] = (df["final_val_loss"] / best - 1) * 100
    # mean density actually sent (density warm-up runs send more early on)
    dense_bytes = df.loc[df["run"].str.startswith("dense-adams"), "mean_bytes_per_step"].max()
    df["mean_bytes_vs_dense_pct"] = df["mean_bytes_per_step"] / dense_bytes * 100
    df.to_csv(out / "table.csv", index=False)
    command = "python bench/convergence.py " + " ".join(
        f"'{a}'" if " " in a or "{" in a else a for a in sys.argv[1:])
    with open(out / "command.txt", "a" if args.append else "w") as fh:
        fh.write(command + "\n")
    (out / "table.md").write_text(
        f"# Convergence study\n\nCommands: see command.txt. tiny-gpt, {args.nprocs} ranks (gloo), "
        f"{args.steps} steps, micro-batch {args.micro_batch} x {args.seq_len} bytes per rank, "
        f"lr {args.lr} (warmup 50, cosine to 10%).\n\n"
        + markdown(df, "{:.4f}") + "\n\n![loss curves](loss_curves.png)\n")
    _figure(curves, out / "loss_curves.png")
    print(df.to_string(index=False))
    return 0


def _figure(curves: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5))
    for ax in (ax1, ax2):
        ax.set_prop_cycle(color=plt.cm.tab20.colors)
    for tag, pts in curves.items():
        steps = [s for s, _, _ in pts]
        losses = pd.Series([loss for _, loss, _ in pts]).rolling(25, min_periods=1).mean()
        ax1.plot(steps, losses, label=tag, linewidth=1)
        val = [(s, v) for s, _, v in pts if v is not None]
        ax2.plot([s for s, _ in val], [v for _, v in val], marker="o", label=tag, linewidth=1)
    ax1.set_title("train loss (25-step mean)")
    ax2.set_title("validation loss")
    for ax in (ax1, ax2):
        ax.set_xlabel("step")
        ax.grid(True, alpha=0.3)
    ax2.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
