"""The figures of `scape report scaling` (reports/scaling.py): speedup against GPUs, the
step's breakdown, the NIC-bandwidth x GPUs heatmap, and the sparsity and model-size lines,
each drawn from the sweep's rows with matplotlib's Agg backend (reports/figure_style.py: the
layout, colours and ticks every report figure shares)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from reports import figure_style as fs

BASELINE = "dense-adams"  # the scheme every speedup is over
BATCH_RULE = ("batch: the model's global batch, or one sequence per GPU once GPUs outnumber it "
              "(so past that count every step does more work)")
OUTLIER = 0.5  # schemes slower than half of dense AdamS go on their own panel
BAR_OUTLIER = 3.0  # bars taller than this x the median bar go on their own axis
MARKERS = "osD^v<>ph*X"


def _baseline_line(ax) -> None:
    ax.axhline(1.0, color="black", linewidth=0.9, linestyle=":", label="dense AdamS (1.0x)")


def _scheme_styles(schemes: list[str]) -> dict[str, dict]:
    """One colour and marker per scheme, the same in every panel."""
    return {s: {"color": f"C{i % 10}", "marker": MARKERS[i % len(MARKERS)]}
            for i, s in enumerate(schemes)}


def _speedup_panels(part: pd.DataFrame) -> list[tuple[str, list[str]]]:
    """The schemes on the main panel, and those that fall below OUTLIER somewhere on a panel of
    their own (a title that says so: the rest of such a line may sit near 1.0x)."""
    order = [s for s in dict.fromkeys(part["scheme"]) if s != BASELINE]
    low = [s for s in order
           if part.loc[part["scheme"] == s, "speedup_vs_dense_adams"].min() < OUTLIER]
    panels = [("schemes", [s for s in order if s not in low])]
    if low:
        panels.append((f"schemes that fall below {OUTLIER:g}x at some GPU count\n"
                       f"(their own y axis; dashed: {OUTLIER:g}x)", low))
    return [p for p in panels if p[1]]


def fig_speedup_vs_gpus(df: pd.DataFrame, path: Path, title: str) -> Path:
    """Speedup per scheme against GPUs on a linear speedup axis, dense AdamS the dotted 1.0x
    line; schemes that fall below OUTLIER x dense AdamS anywhere get their own panel so they do
    not flatten the rest; one colour and marker per scheme, one legend right of the panels."""
    part = df[(df["sweep"] == "gpus") & df["fits"]]
    panels = _speedup_panels(part)
    styles = _scheme_styles([s for _, schemes in panels for s in schemes])
    fig, axes = fs.figure(len(panels), figsize=(4.2 + 4.4 * len(panels), 4.8))
    counts = sorted(part["gpus"].unique())
    for ax, (label, schemes) in zip(axes[0], panels, strict=True):
        for scheme in schemes:
            g = part[part["scheme"] == scheme].sort_values("gpus")
            ax.plot(g["gpus"], g["speedup_vs_dense_adams"], label=scheme, alpha=0.85,
                    **styles[scheme])
        _baseline_line(ax)
        if label != "schemes":
            ax.axhline(OUTLIER, color="grey", linewidth=0.8, linestyle="--")
        fs.gpu_axis(ax, counts)
        ax.set_xlabel("GPUs")
        ax.set_ylabel("step speedup over dense AdamS (x)")
        ax.set_title(label, fontsize=9)
        ax.grid(True, alpha=0.3)
    handles = {h.get_label(): h for ax in axes[0] for h in ax.get_legend_handles_labels()[0]}
    handles["dense AdamS (1.0x)"] = handles.pop("dense AdamS (1.0x)")  # the baseline last
    fig.legend(list(handles.values()), list(handles), loc="outside right upper", fontsize=8)
    fig.suptitle(fs.wrap(f"{title}\n{BATCH_RULE}", 75 + 55 * (len(panels) - 1)), fontsize=9)
    return fs.save(fig, path)


def _bar_groups(totals: pd.Series) -> list[list[str]]:
    """The schemes whose bars fit one linear axis, then those BAR_OUTLIER x taller than the
    median bar (a 10 s step would flatten 0.3 s bars to slivers) for an axis of their own."""
    tall = totals > BAR_OUTLIER * totals.median()
    groups = [list(totals.index[~tall]), list(totals.index[tall])]
    return [g for g in groups if g]


# a step's parts as the simulator reports them (simulator/step/step_config.py StepResult):
# the compute stream's work, its waits for the other stages and for data-parallel traffic
STEP_PARTS = {"compute_s": "compute", "compression_s": "compression",
              "tp_comm_s": "tensor-parallel comm", "cp_comm_s": "context-parallel comm",
              "ep_comm_s": "expert-parallel comm", "pipeline_bubble_s": "pipeline bubble",
              "exposed_comm_s": "exposed data-parallel comm"}


def step_parts(rows: pd.DataFrame) -> pd.DataFrame:
    """Seconds of each part of each row's step (named for readers), the parts no row has left
    out, and what the parts leave of `step_time_s` as "other" where it is over 0.1% of a step
    (host waits the parts do not name): the parts add up to the step."""
    cols = [c for c in STEP_PARTS if c in rows and (c == "compute_s" or rows[c].fillna(0).any())]
    parts = rows[cols].fillna(0.0).rename(columns=STEP_PARTS)
    rest = rows["step_time_s"] - parts.sum(axis=1)
    if (rest.abs() > 1e-3 * rows["step_time_s"]).any():
        parts["other"] = rest
    return parts


def fig_breakdown(df: pd.DataFrame, path: Path, title: str) -> Path:
    """Stacked step parts per scheme at the largest GPU count; bars far taller than the rest
    go on a panel with their own y axis (its title says so)."""
    part = df[(df["sweep"] == "gpus") & df["fits"]]
    largest = part["gpus"].max()
    part = step_parts(part[part["gpus"] == largest].set_index("scheme"))
    parts = list(part.columns)
    groups = _bar_groups(part.sum(axis=1))
    fig, axes = fs.figure(len(groups), figsize=(9, 4.5),
                          gridspec_kw={"width_ratios": [len(g) + 1 for g in groups]})
    for n, (ax, schemes) in enumerate(zip(axes[0], groups, strict=True)):
        sub = part.loc[schemes]
        bottom = pd.Series(0.0, index=sub.index)
        for i, col in enumerate(parts):
            ax.bar(sub.index, sub[col], bottom=bottom, label=col, color=f"C{i}")
            bottom += sub[col]
        ax.set_ylabel("seconds per step" + (" (own axis)" if n else ""))
        ax.tick_params(axis="x", rotation=30)
        ax.grid(True, axis="y", alpha=0.3)
        if n:
            ax.set_title(f"own y axis:\nover {BAR_OUTLIER:g}x the median step", fontsize=9)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=len(parts), fontsize=8)
    fig.suptitle(f"{title}: step breakdown at {largest:,} GPUs", fontsize=11)
    return fs.save(fig, path)


def _nothing(fig, ax, text: str):
    """A figure that says why it is empty (rather than an empty plot and warnings)."""
    ax.axis("off")
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=10, wrap=True)
    return fig


NICE_TICKS = (1.0, 0.5, 2.0, 0.25, 4.0, 0.75, 1.5, 3.0, 8.0, 0.9, 1.1, 0.125, 6.0)


def _colorbar_ticks(norm, gap: float = 0.08) -> list[float]:
    """Round speedups either side of 1.0x, the first of NICE_TICKS first, each kept only where
    it stands `gap` of the bar's height clear of the others (the two halves differ in scale)."""
    kept: list[float] = []
    for t in NICE_TICKS:
        if norm.vmin <= t <= norm.vmax and all(abs(norm(t) - norm(k)) >= gap for k in kept):
            kept.append(t)
    return sorted(kept)


def _break_at_one(ax, values) -> bool:
    """The cell edges between a speedup of at least 1.0x and one below it, drawn as a black
    line: the break between "SCAPE pays" and "it does not" (cells, not an interpolation)."""
    pays = np.ma.filled(values >= 1.0, False)
    known = ~np.ma.getmaskarray(values)
    rows, cols = pays.shape
    drawn = False
    for i in range(rows):
        for j in range(cols):
            if j + 1 < cols and known[i, j] and known[i, j + 1] and pays[i, j] != pays[i, j + 1]:
                ax.plot([j + 0.5, j + 0.5], [i - 0.5, i + 0.5], color="black", linewidth=2.2)
                drawn = True
            if i + 1 < rows and known[i, j] and known[i + 1, j] and pays[i, j] != pays[i + 1, j]:
                ax.plot([j - 0.5, j + 0.5], [i + 0.5, i + 0.5], color="black", linewidth=2.2)
                drawn = True
    return drawn


def _annotate_cells(ax, grid: pd.DataFrame, norm, cmap) -> None:
    """Each cell's speedup, black or white as its colour is light or dark."""
    for (i, j), v in pd.DataFrame(grid.values).stack().items():
        ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=8,
                color=fs.text_color(cmap(norm(v))))


def fig_heatmap(df: pd.DataFrame, path: Path, title: str) -> Path:
    """SCAPE 99%'s speedup over NIC bandwidth x GPUs on a diverging scale centred on 1.0x (blue:
    SCAPE pays, red: it does not), with the 1.0x contour drawn where the map crosses it."""
    plt = fs.plt()
    part = df[df["sweep"].isin(["bandwidth", "gpus"]) & (df["scheme"] == "scape:0.99")
              & df["fits"]]
    grid = part.pivot_table(index="nic_Gbps", columns="gpus", values="speedup_vs_dense_adams")
    fig, axes = fs.figure(figsize=(10, 4.2))
    ax = axes[0][0]
    if grid.empty:  # no SCAPE 99% step of the sweep fits in memory
        return fs.save(_nothing(fig, ax, f"{title}: no SCAPE 99% step of the sweep fits in GPU "
                                         "memory"), path)
    values = np.ma.masked_invalid(grid.values.astype(float))
    norm, cmap = fs.speedup_norm(values.compressed()), plt.get_cmap(fs.PAYS_CMAP)
    im = ax.imshow(values, aspect="auto", cmap=cmap, norm=norm, origin="lower")
    ax.set_xticks(range(len(grid.columns)), [f"{c:,}" for c in grid.columns], rotation=45)
    ax.set_yticks(range(len(grid.index)), [f"{b:g}" for b in grid.index])
    _annotate_cells(ax, grid, norm, cmap)
    crosses = _break_at_one(ax, values)
    ax.set_xlabel("GPUs")
    ax.set_ylabel("NIC Gb/s per NIC")
    verdict = ("black line: the 1.0x break" if crosses else
               "SCAPE pays everywhere" if values.min() >= 1.0 else "SCAPE pays nowhere here")
    ax.set_title(f"{title}: SCAPE 99% speedup over dense AdamS\n"
                 f"blue: faster than dense AdamS, red: slower; {verdict}", fontsize=10)
    bar = fig.colorbar(im, ax=ax, label="step speedup over dense AdamS (x)",
                       ticks=_colorbar_ticks(norm))
    bar.ax.yaxis.set_major_formatter(fs.plain_formatter())
    return fs.save(fig, path)


def _model_axis(ax, part: pd.DataFrame) -> None:
    """Ticks at the models' sizes, named by model (no minor labels to pile up)."""
    sizes = part.drop_duplicates("model").sort_values("x")
    fs.plain_log_axis(ax.xaxis, list(sizes["x"]))
    ax.set_xticklabels([f"{m} ({fs.human_params(n)})" for m, n in
                        zip(sizes["model"], sizes["x"], strict=True)], fontsize=8, rotation=30,
                       ha="right", rotation_mode="anchor")
    ax.tick_params(axis="x", which="minor", bottom=False)


def _density_axis(ax, part: pd.DataFrame) -> None:
    """Ticks at the densities swept, each with the sparsity it sends."""
    dens = sorted(part["x"].unique())
    fs.plain_log_axis(ax.xaxis, dens)
    ax.set_xticklabels([f"{d:g}\n{100 * (1 - d):g}%" for d in dens], fontsize=8)
    ax.tick_params(axis="x", which="minor", bottom=False)


def fig_line(df: pd.DataFrame, sweep: str, x: str, xlabel: str, path: Path, title: str,
             group: str = "gpus") -> Path:
    """Speedup against sparsity (density 1 - sparsity on a log axis) or model size (parameters
    on a log axis, ticks named by model), one line for each of a few representative GPU
    counts (darker: more GPUs); the CSV holds every count swept."""
    part = df[(df["sweep"] == sweep) & df["fits"] & (df["scheme"] != BASELINE)].copy()
    fig, axes = fs.figure(figsize=(9, 4.4))
    ax = axes[0][0]
    if part.empty:
        return fs.save(_nothing(fig, ax, f"{title}: no step of this sweep fits in GPU memory"),
                       path)
    part["x"] = part["n_params"] if x == "model" else 1 - part[x]
    keys = sorted(part[group].unique())
    shown = fs.representative(keys)
    for key, color, marker in zip(shown, fs.ordinal_colors(len(shown)), MARKERS, strict=False):
        g = part[part[group] == key].sort_values("x")
        ax.plot(g["x"], g["speedup_vs_dense_adams"], marker=marker, color=color,
                label=f"{key:,} GPUs" if group == "gpus" else f"{group} {key}")
    ax.set_xscale("log")
    if x == "model":
        _model_axis(ax, part)
        ax.set_xlabel("model (parameters, log axis)")
    else:  # the density sent, on a log axis, so 90%, 99% and 99.9% spread out
        _density_axis(ax, part)
        ax.set_xlabel("density sent (1 - sparsity), log axis; below it: the sparsity")
    _baseline_line(ax)
    ax.set_ylabel("SCAPE step speedup over dense AdamS (x)")
    note = ("" if len(shown) == len(keys) else
            f"\n{len(shown)} of {len(keys)} GPU counts drawn; {sweep}.csv holds all")
    ax.set_title(f"{title}{note}", fontsize=10)
    ax.grid(True, alpha=0.3)
    fs.legend_outside(ax)
    return fs.save(fig, path)


def fig_run(df: pd.DataFrame, path: Path, title: str) -> Path:
    """A run with failures against GPUs, per scheme: its goodput (the share of the wall time
    that trains: simulator/run/goodput.py) and its facility energy per thousand tokens
    (simulator/run/energy.py; a profile without [power] says so instead)."""
    part = df[(df["sweep"] == "gpus") & df["fits"]]
    schemes = list(dict.fromkeys(part["scheme"]))
    styles = _scheme_styles(schemes)
    fig, axes = fs.figure(2, figsize=(9.6, 4.8))
    counts = sorted(part["gpus"].unique())
    energy = part["wh_per_token"].notna().any() if "wh_per_token" in part else False
    for ax, column, label, scale in (
            (axes[0][0], "goodput", "goodput (share of the wall time that trains)", 1.0),
            (axes[0][1], "wh_per_token", "facility energy per 1,000 tokens (Wh)", 1e3)):
        if column == "wh_per_token" and not energy:
            _nothing(fig, ax, "no [power] table in this hardware profile:\nno energy figures")
            continue
        for scheme in schemes:
            g = part[part["scheme"] == scheme].sort_values("gpus")
            ax.plot(g["gpus"], g[column] * scale, label=scheme, alpha=0.85, **styles[scheme])
        fs.gpu_axis(ax, counts)
        ax.set_xlabel("GPUs")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
    handles = {h.get_label(): h for ax in axes[0] for h in ax.get_legend_handles_labels()[0]}
    if handles:
        fig.legend(list(handles.values()), list(handles), loc="outside right upper", fontsize=8)
    fig.suptitle(fs.wrap(f"{title}\n{BATCH_RULE}", 80), fontsize=9)
    return fs.save(fig, path)
