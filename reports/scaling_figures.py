"""The figures of `scape report scaling` (reports/scaling.py): speedup against GPUs, the
step's breakdown, the NIC-bandwidth x GPUs heatmap, and the sparsity and model-size lines,
each drawn from the sweep's rows with matplotlib's Agg backend."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

BASELINE = "dense-adams"  # the scheme every speedup is over
BATCH_RULE = ("batch: the model's global batch, or one sequence per GPU once GPUs outnumber it "
              "(so past that count every step does more work)")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _plt().close(fig)
    return path


OUTLIER = 0.5  # schemes slower than half of dense AdamS go on their own panel


def _gpu_axis(ax, counts) -> None:
    """A log2 GPU axis labelled with the counts themselves, not powers of two."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(counts), [f"{c:,}" for c in counts], rotation=45)
    ax.minorticks_off()


def fig_speedup_vs_gpus(df: pd.DataFrame, path: Path, title: str) -> Path:
    """Speedup per scheme against GPUs on a linear speedup axis; schemes that fall below
    OUTLIER x dense AdamS anywhere get their own panel so they do not flatten the rest; a
    marker style per scheme so overlapping lines stay apart; the batch rule is stated."""
    plt = _plt()
    part = df[(df["sweep"] == "gpus") & df["fits"]]
    low = {s for s, g in part.groupby("scheme") if g["speedup_vs_dense_adams"].min() < OUTLIER}
    panels = [("schemes", sorted(set(part["scheme"]) - low, key=list(part["scheme"]).index))]
    if low:
        panels.append((f"below {OUTLIER}x dense AdamS", sorted(low)))
    fig, axes = plt.subplots(1, len(panels), figsize=(8 + 4 * (len(panels) - 1), 4.8),
                             squeeze=False)
    markers = "osD^v<>ph*X"
    counts = sorted(part["gpus"].unique())
    for ax, (label, schemes) in zip(axes[0], panels, strict=True):
        for i, scheme in enumerate(schemes):
            g = part[part["scheme"] == scheme]
            ax.plot(g["gpus"], g["speedup_vs_dense_adams"], marker=markers[i % len(markers)],
                    linestyle="-" if i < 10 else "--", label=scheme, alpha=0.85)
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle=":")
        _gpu_axis(ax, counts)
        ax.set_xlabel("GPUs")
        ax.set_ylabel("step speedup over dense AdamS (x)")
        ax.set_title(label, fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    fig.suptitle(f"{title}\n{BATCH_RULE}", fontsize=9)
    return _save(fig, path)


def fig_breakdown(df: pd.DataFrame, path: Path, title: str) -> Path:
    plt = _plt()
    part = df[(df["sweep"] == "gpus") & df["fits"]]
    largest = part["gpus"].max()
    part = part[part["gpus"] == largest].set_index("scheme")
    parts = ["compute_s", "compression_s", "tp_comm_s", "exposed_comm_s"]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    bottom = pd.Series(0.0, index=part.index)
    for col in parts:
        ax.bar(part.index, part[col], bottom=bottom, label=col.removesuffix("_s"))
        bottom += part[col]
    ax.set_ylabel("seconds per step")
    ax.set_title(f"{title}: step breakdown at {largest} GPUs")
    ax.tick_params(axis="x", rotation=30)
    ax.legend(fontsize=8)
    return _save(fig, path)


def _nothing(fig, ax, text: str):
    """A figure that says why it is empty (rather than an empty plot and warnings)."""
    ax.axis("off")
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=10, wrap=True)
    return fig


def fig_heatmap(df: pd.DataFrame, path: Path, title: str) -> Path:
    plt = _plt()
    part = df[df["sweep"].isin(["bandwidth", "gpus"]) & (df["scheme"] == "scape:0.99")
              & df["fits"]]
    grid = part.pivot_table(index="nic_Gbps", columns="gpus", values="speedup_vs_dense_adams")
    fig, ax = plt.subplots(figsize=(9, 3.8))
    if grid.empty:  # no SCAPE 99% step of the sweep fits in memory
        return _save(_nothing(fig, ax, f"{title}: no SCAPE 99% step of the sweep fits in GPU "
                                       "memory"), path)
    im = ax.imshow(grid.values, aspect="auto", cmap="viridis", origin="lower")
    ax.set_xticks(range(len(grid.columns)), [str(c) for c in grid.columns], rotation=45)
    ax.set_yticks(range(len(grid.index)), [f"{b:g}" for b in grid.index])
    for (i, j), v in pd.DataFrame(grid.values).stack().items():
        ax.text(j, i, f"{v:.2g}", ha="center", va="center", color="white", fontsize=7)
    ax.set_xlabel("GPUs")
    ax.set_ylabel("NIC Gb/s per NIC")
    ax.set_title(f"{title}: SCAPE 99% speedup over dense AdamS")
    fig.colorbar(im, ax=ax, label="step speedup over dense AdamS (x)")
    return _save(fig, path)


def fig_line(df: pd.DataFrame, sweep: str, x: str, xlabel: str, path: Path, title: str,
             group: str = "gpus") -> Path:
    """Speedup against sparsity (density 1 - sparsity on a log axis) or model size (parameters
    on a log axis, each point named), one line per GPU count."""
    plt = _plt()
    part = df[(df["sweep"] == sweep) & df["fits"] & (df["scheme"] != BASELINE)].copy()
    fig, ax = plt.subplots(figsize=(8, 4.2))
    if part.empty:
        return _save(_nothing(fig, ax, f"{title}: no step of this sweep fits in GPU memory"),
                     path)
    if x == "model":
        part["x"] = part["n_params"]
        xlabel = "parameters"
    else:  # sparsity: the density sent, on a log axis, so 90%, 99% and 99.9% spread out
        part["x"] = 1 - part[x]
        xlabel = "density sent (1 - sparsity)"
    for key, g in part.groupby(group, sort=False):
        g = g.sort_values("x")
        ax.plot(g["x"], g["speedup_vs_dense_adams"], marker="o", label=f"{group} {key}")
        if x == "model":
            for _, r in g.iterrows():
                ax.annotate(r["model"], (r["x"], r["speedup_vs_dense_adams"]), fontsize=7,
                            xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log")
    if x == "model":  # 350M, 1.8B rather than powers of ten
        from matplotlib.ticker import FuncFormatter

        def human(v, _):
            return f"{v / 1e9:g}B" if v >= 1e9 else f"{v / 1e6:g}M"

        ax.xaxis.set_major_formatter(FuncFormatter(human))
        ax.xaxis.set_minor_formatter(FuncFormatter(human))
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle=":")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("SCAPE step speedup over dense AdamS (x)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)
