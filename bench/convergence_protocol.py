"""Convergence as the SCAPE authors train (issue 17): their protocol on a Llama-style model and
English text, 3 seeds per configuration, every run's log kept as a small CSV.

Protocol (the authors' Llama-500M runs, profiles/external/scape-sc26.logs-500m.md): LR warm-up
over 2% of the run then cosine decay to a tenth; global-norm clipping at 1.0 for every scheme
(for `scape` inside the reducer, --move-clip-grad-to-reducer); SCAPE with dense steps over the
first 2% then a linear density warm-up over the next 8% (their logged schedule), per-tensor
top-k of the error-corrected momentum. Model tiny-llama (2.3M parameters, the block of their
Llama-500M), corpus shakespeare (scape/train/data.py), 2 gloo ranks.

Runs are done in order and each is skipped when its CSV exists, so the study resumes where a
stopped one ended (split it over sessions with --max-runs or --max-minutes); `--report` only
rebuilds the tables, figure and tokens-to-quality data from the CSVs.

Usage: python bench/convergence_protocol.py [--steps 3000] [--seeds 0,1,2] [--max-minutes M]
       python bench/convergence_protocol.py --report
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

OUT = REPO / "reports" / "convergence-protocol"
QUALITY = REPO / "profiles" / "quality" / "convergence-protocol.toml"
SCRATCH = REPO / "out" / "convergence-protocol"  # full JSONL logs and checkpoints (ignored)
LRS = (1e-3, 2e-3, 4e-3)
DENSE_FRAC, WARMUP_FRAC = 0.02, 0.08  # the authors' 2,000 dense + 8,000 warm-up of 100,000
CLIP = 1.0


@dataclass(frozen=True)
class Run:
    """One configuration of the study: a scheme, its options and a learning rate (None: the
    best dense AdamS learning rate, known once those runs are done)."""

    scheme: str
    variant: str
    options: dict = field(default_factory=dict)
    lr: float | None = None
    sparsity: float = 0.0

    def tag(self, lr: float) -> str:
        return f"{self.scheme}-{self.variant}-lr{lr:g}".replace("/", "_")


def lineup(steps: int) -> list[Run]:
    """The issue's line-up: dense AdamS and AdamW and the authors' SCAPE at 90% and 99% at 3
    learning rates each; this project's variant, top-k, ScaleCom and int8 at the best one."""
    schedule = {"density_dense_steps": round(DENSE_FRAC * steps),
                "density_warmup_steps": round(WARMUP_FRAC * steps), "density_shape": "linear"}
    runs = [Run("dense-adams", "adams", {}, lr) for lr in LRS]
    for sparsity in (0.99, 0.9):
        runs += [Run("scape", f"authors-{sparsity:g}", {"sparsity": sparsity, **schedule}, lr,
                     sparsity) for lr in LRS]
    runs += [Run("dense-adamw", "adamw", {}, lr) for lr in LRS]
    runs += [
        Run("scape-partitioned", "project-0.99", {"sparsity": 0.99, **schedule}, None, 0.99),
        Run("topk", "dgc-0.99", {"sparsity": 0.99}, None, 0.99),
        Run("scalecom", "cltk-0.99", {"sparsity": 0.99}, None, 0.99),
        Run("quantized", "int8", {"bits": 8}, None, 0.0),
    ]
    return runs


def run_dir(tag: str, seed: int) -> Path:
    return OUT / "runs" / tag / f"seed{seed}"


def best_dense_lr(rows: pd.DataFrame | None = None) -> float | None:
    """The dense AdamS learning rate with the lowest mean final validation loss over the seeds
    done so far (None before any)."""
    rows = collect() if rows is None else rows
    dense = rows[rows["scheme"] == "dense-adams"] if len(rows) else rows
    if not len(dense):
        return None
    return float(dense.groupby("lr")["final_val_loss"].mean().idxmin())


def train_one(run: Run, lr: float, seed: int, args) -> dict:
    """Train one run on 2 gloo ranks and keep its small CSV log and summary."""
    from scape.plan import make_config
    from scape.train.launch import launch
    from scape.train.loop import TrainConfig

    tag = run.tag(lr)
    scratch = SCRATCH / tag / f"seed{seed}"
    shutil.rmtree(scratch, ignore_errors=True)
    cfg = TrainConfig(model=args.model, corpus=args.corpus, steps=args.steps,
                      micro_batch=args.micro_batch, seq_len=args.seq_len, lr=lr, seed=seed,
                      warmup_steps=round(DENSE_FRAC * args.steps), min_lr_ratio=0.1,
                      eval_every=args.eval_every, eval_batches=args.eval_batches,
                      final_eval_batches=args.final_eval_batches,
                      scheme=make_config(run.scheme, clip_grad=CLIP, **run.options),
                      out=str(scratch), timeout_s=120.0)
    t0 = time.perf_counter()
    summary = launch(cfg.validate(), args.nprocs)
    wall = time.perf_counter() - t0
    log = [json.loads(line) for line in (scratch / "log.jsonl").read_text().splitlines()]
    df = pd.DataFrame([{"step": r["step"], "loss": r["loss"], "lr": r["lr"],
                        "val_loss": r.get("val_loss"), "bytes": r["bytes"],
                        "step_s": r["step_s"]} for r in log])
    dest = run_dir(tag, seed)
    dest.mkdir(parents=True, exist_ok=True)
    df.to_csv(dest / "log.csv", index=False, float_format="%.6g")
    meta = {"scheme": run.scheme, "variant": run.variant, "sparsity": run.sparsity, "lr": lr,
            "seed": seed, "steps": args.steps, "nprocs": args.nprocs, "model": args.model,
            "corpus": args.corpus, "micro_batch": args.micro_batch, "seq_len": args.seq_len,
            "tokens_per_step": args.nprocs * args.micro_batch * args.seq_len,
            "final_val_loss": summary["final_val_loss"],
            "mean_bytes_per_step": summary["mean_bytes_per_step"], "wall_s": wall,
            "date": date.today().isoformat(), "config": summary["config"]}
    (dest / "run.json").write_text(json.dumps(meta, indent=1, default=str))
    shutil.rmtree(scratch, ignore_errors=True)  # the CSV keeps what the tables need
    return meta


def collect() -> pd.DataFrame:
    """One row per finished run (its run.json)."""
    rows = [json.loads(p.read_text()) for p in sorted(OUT.glob("runs/*/seed*/run.json"))]
    for r in rows:
        r.pop("config", None)
    return pd.DataFrame(rows)


def curve(tag: str, seed: int) -> pd.DataFrame:
    df = pd.read_csv(run_dir(tag, seed) / "log.csv")
    return df[df["val_loss"].notna()][["step", "val_loss"]]


def tokens_to(curve_df: pd.DataFrame, target: float) -> float | None:
    """Steps at which the validation curve first reaches `target`, linearly interpolated
    between evaluations (None: not reached)."""
    prev = None
    for step, val in curve_df[["step", "val_loss"]].itertuples(index=False):
        if val <= target:
            if prev is None:
                return float(step)
            s0, v0 = prev
            return s0 + (step - s0) * (v0 - target) / (v0 - val)
        prev = (step, val)
    return None


def report(args) -> pd.DataFrame:
    """summary.csv, loss curves and the tokens-to-quality data from the runs' CSVs."""
    rows = collect()
    if not len(rows):
        raise SystemExit("no finished runs under " + str(OUT / "runs"))
    rows["tag"] = [Run(s, v).tag(lr) for s, v, lr in rows[["scheme", "variant", "lr"]]
                   .itertuples(index=False)]
    g = rows.groupby(["scheme", "variant", "sparsity", "lr", "tag", "steps"], as_index=False)
    summary = g.agg(seeds=("seed", "count"), mean_val_loss=("final_val_loss", "mean"),
                    std_val_loss=("final_val_loss", "std"), min_val_loss=("final_val_loss", "min"),
                    max_val_loss=("final_val_loss", "max"),
                    mean_bytes=("mean_bytes_per_step", "mean"), wall_s=("wall_s", "sum"))
    dense = summary[summary["scheme"] == "dense-adams"]
    best = dense.loc[dense["mean_val_loss"].idxmin()]
    summary["gap_pct"] = (summary["mean_val_loss"] / best["mean_val_loss"] - 1) * 100
    summary["mean_bytes_ratio"] = summary["mean_bytes"] / best["mean_bytes"]
    # tokens to dense AdamS's final quality, on the seed-mean validation curve
    target = best["mean_val_loss"]
    mean_curves = {}
    for tag, part in rows.groupby("tag"):
        curves = [curve(tag, s).set_index("step")["val_loss"] for s in part["seed"]]
        mean_curves[tag] = pd.concat(curves, axis=1).mean(axis=1).reset_index()
        mean_curves[tag].columns = ["step", "val_loss"]
    dense_steps = tokens_to(mean_curves[best["tag"]], target)
    ratios = []
    for tag in summary["tag"]:
        steps = tokens_to(mean_curves[tag], target)
        ratios.append(None if steps is None else steps / dense_steps)
    summary["tokens_to_dense_quality"] = ratios
    summary = summary.sort_values(["scheme", "sparsity", "lr"]).drop(columns="tag")
    OUT.mkdir(parents=True, exist_ok=True)
    summary.to_csv(OUT / "summary.csv", index=False, float_format="%.6g")
    _figure(rows, mean_curves, summary, best, OUT / "loss_curves.png")
    _quality(summary, best, dense_steps, rows)
    _markdown(summary, best)
    return summary


def _figure(rows, mean_curves, summary, best, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # each configuration at its best learning rate, plus dense AdamS's best, on one panel;
    # every learning rate of the swept schemes on the other
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5.5))
    at_best = summary.loc[summary.groupby(["scheme", "variant"])["mean_val_loss"].idxmin()]
    for ax, sel, title in ((ax1, at_best, "each configuration at its best learning rate"),
                           (ax2, summary, "every run configuration")):
        ax.set_prop_cycle(color=plt.cm.tab20.colors)
        for r in sel.itertuples(index=False):
            tag = Run(r.scheme, r.variant).tag(r.lr)
            c = mean_curves[tag]
            ax.plot(c["step"], c["val_loss"], label=f"{r.scheme} {r.variant} lr {r.lr:g} "
                    f"({r.seeds} seeds)", linewidth=1.2)
        ax.axhline(best["mean_val_loss"], color="black", linestyle=":", linewidth=1)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.set_ylabel("validation loss (nats per byte, mean over seeds)")
        ax.grid(True, alpha=0.3)
        lo = best["mean_val_loss"]
        ax.set_ylim(lo - 0.1, lo + 0.9)
    ax1.legend(fontsize=7)
    ax2.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle("Convergence protocol: tiny-llama on Shakespeare, 2 ranks; dotted: best dense "
                 "AdamS final")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _quality(summary, best, dense_steps, rows) -> None:
    """profiles/quality/convergence-protocol.toml: tokens to dense AdamS quality per scheme at
    its best learning rate, for the planner."""
    at_best = summary.loc[summary.groupby(["scheme", "variant"])["mean_val_loss"].idxmin()]
    lines = [
        "# Tokens to reach dense AdamS's final validation loss, relative to dense AdamS",
        "# (bench/convergence_protocol.py; see reports/convergence-protocol/).",
        'study = "convergence-protocol"',
        'command = "python bench/convergence_protocol.py --report"',
        f'date = "{date.today().isoformat()}"',
        f'model = "{rows["model"].iloc[0]}"',
        f'corpus = "{rows["corpus"].iloc[0]}"',
        f"tokens_per_step = {int(rows['tokens_per_step'].iloc[0])}",
        f"steps = {int(best['steps'])}",
        f"dense_adams_lr = {best['lr']:g}",
        f"dense_adams_final_val_loss = {best['mean_val_loss']:.6f}",
        f"dense_adams_steps_to_quality = {dense_steps:.1f}",
        "",
    ]
    for r in at_best.itertuples(index=False):
        ratio = r.tokens_to_dense_quality
        lines += ["[[scheme]]", f'scheme = "{r.scheme}"', f'variant = "{r.variant}"',
                  f"sparsity = {r.sparsity:g}", f"lr = {r.lr:g}", f"seeds = {r.seeds}",
                  f"final_val_loss = {r.mean_val_loss:.6f}", f"gap_pct = {r.gap_pct:.4f}",
                  f"mean_bytes_ratio = {r.mean_bytes_ratio:.6f}",
                  f"tokens_ratio = {ratio:.4f}" if ratio is not None and not math.isnan(ratio)
                  else "reached = false  # never reached dense AdamS's final loss", ""]
    QUALITY.parent.mkdir(parents=True, exist_ok=True)
    QUALITY.write_text("\n".join(lines))


def _markdown(summary, best) -> None:
    from reports.tables import markdown

    cols = ["scheme", "variant", "sparsity", "lr", "seeds", "steps", "mean_val_loss",
            "std_val_loss", "gap_pct", "mean_bytes_ratio", "tokens_to_dense_quality"]
    (OUT / "summary.md").write_text(
        "# Convergence protocol\n\nRebuilt by `python bench/convergence_protocol.py --report` "
        "from runs/*/seed*/log.csv. Gap: mean final validation loss over seeds against the best "
        f"dense AdamS (lr {best['lr']:g}, {best['mean_val_loss']:.4f}).\n\n"
        + markdown(summary[cols], "{:.4f}") + "\n\n![loss curves](loss_curves.png)\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--nprocs", type=int, default=2)
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--model", default="tiny-llama")
    parser.add_argument("--corpus", default="shakespeare")
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--eval-batches", type=int, default=16)
    parser.add_argument("--final-eval-batches", type=int, default=256,
                        help="the final validation loss: 256 x 4 x 128 bytes (131 kB) of the "
                             "held-out works")
    parser.add_argument("--max-runs", type=int, default=None, help="stop after this many runs")
    parser.add_argument("--max-minutes", type=float, default=None,
                        help="start no run after this many minutes")
    parser.add_argument("--only", default=None, help="run only tags containing this text")
    parser.add_argument("--report", action="store_true", help="only rebuild the tables")
    parser.add_argument("--out", default=None, help="a trial's folder instead of "
                        "reports/convergence-protocol (its quality TOML goes there too)")
    args = parser.parse_args()
    if args.out is not None:
        global OUT, QUALITY
        OUT = Path(args.out)
        QUALITY = OUT / "quality.toml"
    if args.report:
        print(report(args).to_string(index=False))
        return 0
    seeds = [int(s) for s in args.seeds.split(",")]
    t_start, done = time.perf_counter(), 0
    for seed in seeds:
        for run in lineup(args.steps):
            lr = run.lr if run.lr is not None else best_dense_lr()
            if lr is None:
                print(f"skip {run.scheme} {run.variant}: no dense AdamS run yet", flush=True)
                continue
            tag = run.tag(lr)
            if args.only and args.only not in tag:
                continue
            if (run_dir(tag, seed) / "run.json").exists():
                continue
            minutes = (time.perf_counter() - t_start) / 60
            if (args.max_runs is not None and done >= args.max_runs) or (
                    args.max_minutes is not None and minutes >= args.max_minutes):
                print(f"stopping after {done} runs, {minutes:.1f} min", flush=True)
                return 0
            meta = train_one(run, lr, seed, args)
            done += 1
            print(f"{tag} seed {seed}: val {meta['final_val_loss']:.4f} "
                  f"bytes/step {meta['mean_bytes_per_step']:,.0f} {meta['wall_s']:.0f} s "
                  f"({(time.perf_counter() - t_start) / 60:.1f} min in all)", flush=True)
    report(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
