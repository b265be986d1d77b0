"""The report of the convergence protocol (bench/convergence_protocol.py, issue 17): from the
runs' CSVs under results/convergence/convergence-protocol/, the summary table, the loss-curve
figures, the Markdown page and the tokens-to-quality study profiles/quality/ reads (`scape
plan --quality`). `python bench/convergence_protocol.py --report` runs it."""

from __future__ import annotations

import json
import math
from datetime import date
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "results" / "convergence" / "convergence-protocol"
QUALITY = REPO / "profiles" / "quality" / "convergence-protocol.toml"


def run_dir(tag: str, seed: int) -> Path:
    return OUT / "runs" / tag / f"seed{seed}"


def collect() -> pd.DataFrame:
    """One row per finished run (its run.json)."""
    rows = []
    for path in sorted(OUT.glob("runs/*/seed*/run.json")):
        r = json.loads(path.read_text())
        r.pop("config", None)
        r.setdefault("part", "main")
        r["tag"] = path.parent.parent.name
        rows.append(r)
    return pd.DataFrame(rows)


def curve(tag: str, seed: int) -> pd.DataFrame:
    df = pd.read_csv(run_dir(tag, seed) / "log.csv")
    return df[df["val_loss"].notna()][["step", "val_loss"]]


def tokens_to(curve_df: pd.DataFrame, target: float) -> float | None:
    """Steps at which the validation curve first reaches `target`, linearly interpolated
    between evaluations (None: not reached)."""
    prev = None
    for step, val in curve_df[["step", "val_loss"]].itertuples(index=False):
        # the reference's own final point, rounded in the CSV (runs before 2026-11-25 03:10
        # kept 6 digits) and summed in another order
        if val <= target * (1 + 1e-5):
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
    g = rows.groupby(["part", "scheme", "variant", "sparsity", "lr", "tag", "steps"],
                     as_index=False)
    summary = g.agg(seeds=("seed", "count"), mean_val_loss=("final_val_loss", "mean"),
                    std_val_loss=("final_val_loss", "std"), min_val_loss=("final_val_loss", "min"),
                    max_val_loss=("final_val_loss", "max"),
                    mean_bytes=("mean_bytes_per_step", "mean"), wall_s=("wall_s", "sum"))
    mean_curves = {}
    for tag, part in rows.groupby("tag"):
        curves = [curve(tag, s).set_index("step")["val_loss"] for s in part["seed"]]
        mean_curves[tag] = pd.concat(curves, axis=1).mean(axis=1).reset_index()
        mean_curves[tag].columns = ["step", "val_loss"]
    # every run is measured against the best dense AdamS of its own length: its gap, its bytes
    # and the tokens it needs to reach that dense run's final validation loss (on the
    # seed-mean curves)
    refs = {}
    for steps, same in summary.groupby("steps"):
        dense = same[same["scheme"] == "dense-adams"]
        if len(dense):
            ref = dense.loc[dense["mean_val_loss"].idxmin()]
            # the target on the curves' own sample: the reference's last curve point (runs
            # from 2026-11-25 04:05 on log it beside the larger final sample; older runs' last
            # point is that larger sample, a small inconsistency)
            target = mean_curves[ref["tag"]]["val_loss"].iloc[-1]
            refs[steps] = (ref, target, tokens_to(mean_curves[ref["tag"]], target))
    gap, ratio_bytes, ratio_tokens = [], [], []
    for r in summary.itertuples(index=False):
        ref, target, ref_steps = refs.get(r.steps, (None, None, None))
        if ref is None:
            gap.append(math.nan), ratio_bytes.append(math.nan), ratio_tokens.append(math.nan)
            continue
        gap.append((r.mean_val_loss / ref["mean_val_loss"] - 1) * 100)
        ratio_bytes.append(r.mean_bytes / ref["mean_bytes"])
        reached = tokens_to(mean_curves[r.tag], target)
        ratio_tokens.append(math.nan if reached is None or not ref_steps
                            else reached / ref_steps)
    summary["gap_pct"], summary["mean_bytes_ratio"] = gap, ratio_bytes
    summary["tokens_to_dense_quality"] = ratio_tokens  # NaN: never reached
    main = summary[summary["part"] == "main"]
    best, _, dense_steps = refs[main["steps"].iloc[0]]
    summary = summary.sort_values(["part", "steps", "scheme", "sparsity", "lr"])
    OUT.mkdir(parents=True, exist_ok=True)
    summary.drop(columns="tag").to_csv(OUT / "summary.csv", index=False, float_format="%.6g")
    _figure(mean_curves, main, best, OUT / "loss_curves.png")
    if (summary["part"] != "main").any():
        _figure_parts(mean_curves, summary, OUT / "ablation_curves.png")
    _quality(main, best, dense_steps, rows)
    _markdown(summary, best)
    return summary.drop(columns="tag")


def _figure(mean_curves, summary, best, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # each configuration at its best learning rate, plus dense AdamS's best, on one panel;
    # every learning rate of the swept schemes on the other
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5.5))
    at_best = summary.loc[summary.groupby(["scheme", "variant"])["mean_val_loss"].idxmin()]
    # one colour per configuration (scheme and variant), one line style per learning rate, so
    # that the curves of a swept scheme read as one family
    configs = sorted({(r.scheme, r.variant) for r in summary.itertuples(index=False)})
    colours = dict(zip(configs, plt.cm.tab10.colors * 3, strict=False))
    rates = sorted(set(summary["lr"]))
    styles = dict(zip(rates, ["-", "--", ":", "-.", (0, (5, 1, 1, 1)), (0, (1, 3))] * 3,
                      strict=False))
    for ax, sel, title in ((ax1, at_best, "each configuration at its best learning rate"),
                           (ax2, summary, "every run configuration")):
        for r in sel.itertuples(index=False):
            c = mean_curves[r.tag]
            ax.plot(c["step"], c["val_loss"], label=f"{r.scheme} {r.variant} lr {r.lr:g} "
                    f"({r.seeds} seeds)", linewidth=1.3, color=colours[(r.scheme, r.variant)],
                    linestyle="-" if ax is ax1 else styles[r.lr])
        ax.axhline(best["mean_val_loss"], color="black", linestyle=":", linewidth=1)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.set_ylabel("validation loss (nats per byte, mean over seeds)")
        ax.grid(True, alpha=0.3)
        lo = best["mean_val_loss"]
        # the early steps are cut off, never a configuration's final loss (ScaleCom 99% ended
        # at 2.6, above the old fixed top)
        ax.set_ylim(lo - 0.1, max(lo + 0.9, sel["mean_val_loss"].max() + 0.15))
    ax1.legend(fontsize=7)
    ax2.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle("Convergence protocol: tiny-llama on Shakespeare, 2 ranks; dotted: best dense "
                 "AdamS final")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _figure_parts(mean_curves, summary, path: Path) -> None:
    """The ablation and the longer runs beside the main runs they change: best dense AdamS
    and the authors' SCAPE 99% at its best rate (seed means)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    main = summary[summary["part"] == "main"]
    refs = [main[main["scheme"] == "dense-adams"], main[main["variant"] == "authors-0.99"]]
    refs = [r.loc[r["mean_val_loss"].idxmin()] for r in refs if len(r)]
    parts = [p for p in ("ablation", "long") if (summary["part"] == p).any()]
    fig, axes = plt.subplots(1, len(parts), figsize=(7 * len(parts), 5.5), squeeze=False)
    for ax, part in zip(axes[0], parts, strict=True):
        sel = summary[summary["part"] == part]
        for r in [*refs, *sel.itertuples(index=False)]:
            is_ref = isinstance(r, pd.Series)
            c = mean_curves[r["tag"] if is_ref else r.tag]
            label = (f"{r['scheme']} {r['variant']} lr {r['lr']:g} (main, {r['seeds']} seeds)"
                     if is_ref else f"{r.scheme} {r.variant} lr {r.lr:g} ({r.steps} steps)")
            ax.plot(c["step"], c["val_loss"], label=label, linewidth=1.6 if is_ref else 1.1,
                    color="black" if is_ref and r["scheme"] == "dense-adams" else None,
                    linestyle="--" if is_ref else "-")
        ax.set_title(f"{part}: SCAPE 99% changed one part at a time" if part == "ablation"
                     else "3x the steps")
        ax.set_xlabel("step")
        ax.set_ylabel("validation loss (nats per byte)")
        ax.grid(True, alpha=0.3)
        lo = min(r["mean_val_loss"] for r in refs) if refs else 1.5
        ax.set_ylim(lo - 0.15, lo + 0.9)
        ax.legend(fontsize=6.5)
    fig.suptitle("Convergence protocol, ablation and longer runs (seed 0 unless stated)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _quality(summary, best, dense_steps, rows) -> None:
    """profiles/quality/convergence-protocol.toml: tokens to dense AdamS quality per scheme at
    its best learning rate, for the planner."""
    at_best = summary.loc[summary.groupby(["scheme", "variant"])["mean_val_loss"].idxmin()]
    lines = [
        "# Tokens to reach dense AdamS's final validation loss, relative to dense AdamS",
        "# (bench/convergence_protocol.py; see results/convergence/convergence-protocol/).",
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

    cols = ["part", "scheme", "variant", "sparsity", "lr", "seeds", "steps", "mean_val_loss",
            "std_val_loss", "gap_pct", "mean_bytes_ratio", "tokens_to_dense_quality"]
    table = summary[cols].copy()
    table["lr"] = [f"{lr:g}" for lr in table["lr"]]  # 6.25e-05 and 1.25e-4 differ at 4 places
    (OUT / "summary.md").write_text(
        "# Convergence protocol\n\nRebuilt by `python bench/convergence_protocol.py --report` "
        "from runs/*/seed*/log.csv. Gap: mean final validation loss over seeds against the best "
        f"dense AdamS of the same length (main: lr {best['lr']:g}, "
        f"{best['mean_val_loss']:.4f}); tokens_to_dense_quality: tokens to reach that loss "
        "over the tokens dense AdamS took (empty: never reached).\n\n"
        + markdown(table, "{:.4f}") + "\n\n![loss curves](loss_curves.png)\n"
        + ("\n![ablation and longer runs](ablation_curves.png)\n"
           if (OUT / "ablation_curves.png").exists() else ""))


def _best(rows: pd.DataFrame, mask) -> pd.Series:
    """The configuration with the lowest mean final validation loss among `mask`'s rows."""
    means = rows[mask].groupby(["scheme", "variant", "lr"])["final_val_loss"].mean()
    if not len(means):
        raise SystemExit("the main study has not run the configurations this part needs")
    scheme, variant, lr = means.idxmin()
    return pd.Series({"scheme": scheme, "variant": variant, "lr": lr})
