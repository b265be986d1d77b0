"""`scape report scaling`: what-if sweeps over GPU count, NIC bandwidth, sparsity and model
size, as a Markdown and a self-contained HTML report with figures and the CSV behind each.

Every point is one simulated steady-state step. Batch: micro-batch 1, the model's global batch,
or one sequence per GPU once GPUs outnumber it (weak scaling); every scheme at a GPU count does
the same work per step. Layout: the smallest tensor-parallel degree inside a node that fits in
memory without recomputation, else the smallest with full recomputation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from profiles import HardwareProfile, ModelProfile, UserError, load_hardware, load_model
from reports.html import png_b64, render_html
from reports.html import table as html_table
from reports.tables import markdown, refuse_special_files
from scape.plan import Dtypes
from simulator.batch import parallel_map, simulate_cached
from simulator.compare import parse_scheme
from simulator.memory import memory_use, usable_bytes
from simulator.step_config import StepConfig

BASELINE = "dense-adams"
SCHEMES = ("dense-adams", "dense-ddp", "quantized:8", "topk:0.99", "scalecom:0.99",
           "scape:0.9", "scape:0.99", "scape:0.999")
NIC_GBPS = (100, 200, 400, 800)
SPARSITY = (0.0, 0.5, 0.9, 0.95, 0.99, 0.999)
MODELS = ("gpt-345m", "llama-500m", "llama-1.8b", "llama-7b", "llama-70b")


@dataclass(frozen=True)
class Sweep:
    gpus: tuple[int, ...]
    sparsity_gpus: tuple[int, ...]
    model_gpus: tuple[int, ...]

    @classmethod
    def full(cls, node: int) -> Sweep:
        ladder = _ladder((8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384), node, 2)
        return cls(ladder, ladder, ladder)

    @classmethod
    def quick(cls, node: int) -> Sweep:
        ladder = _ladder((8, 64, 512, 4096), node, 8)
        return cls(ladder, ladder[-2:], ladder[-2:])


def _ladder(counts: tuple[int, ...], node: int, step: int) -> tuple[int, ...]:
    """The GPU counts of a sweep on nodes of `node` GPUs: those of `counts` whole nodes make
    up (or that divide one node); on nodes of a size that is no power of two, also whole
    nodes times powers of `step` up to the first at or past the largest count, so that a node
    of 72 GPUs sweeps 72, 144, ... rather than the one count it divides."""
    fits = {g for g in counts if g % node == 0 or (g < node and node % g == 0)}
    if node & (node - 1) == 0:
        return tuple(sorted(fits))
    # whole nodes up to the first count at or past the largest one: as far as 8-GPU nodes go
    nodes = {node * step**k for k in range(32) if node * step ** (k - 1) < counts[-1]}
    return tuple(sorted(fits | nodes))


@dataclass(frozen=True)
class Point:
    sweep: str  # which figure the point belongs to
    model: ModelProfile
    hardware: HardwareProfile
    gpus: int
    scheme: str
    nic_Gbps: float


def layout(model: ModelProfile, hw: HardwareProfile, scheme: str, gpus: int, seq: int,
           batch: int) -> tuple[int, str] | None:
    """(tensor-parallel degree, recompute): the smallest degree inside a node that fits
    without recomputation, else the smallest that fits with it; None if nothing fits."""
    cfg = parse_scheme(scheme)
    usable = usable_bytes(hw)
    degrees = [tp for tp in (1, 2, 4, 8) if hw.node.gpus_per_node % tp == 0
               and model.arch.splits_over(tp) and tp <= gpus and batch % (gpus // tp) == 0]
    for recompute in ("none", "full"):
        for tp in degrees:
            use = memory_use(model, cfg, gpus // tp, tp, 1, seq, Dtypes(), recompute)
            if use.total <= usable:
                return tp, recompute
    return None


def global_batch(model: ModelProfile, gpus: int) -> int:
    """The model's global batch, or one sequence per GPU once GPUs outnumber it, so every
    scheme at a given GPU count does the same work per step whatever its parallel layout."""
    return max(model.global_batch or gpus, gpus)


def _step_config(p: Point) -> StepConfig | None:
    hw = p.hardware
    if p.nic_Gbps != hw.nic.bw_Gbps:
        nic = replace(hw.nic, bw_Gbps=p.nic_Gbps)
        if hw.nic.burst_bytes is not None:  # a netbed's tbf bucket holds 0.5 ms of its rate
            nic = replace(nic, burst_bytes=hw.nic.burst_bytes * p.nic_Gbps / hw.nic.bw_Gbps)
        hw = replace(hw, nic=nic)
    seq = p.model.arch.seq_len
    batch = global_batch(p.model, p.gpus)
    chosen = layout(p.model, hw, p.scheme, p.gpus, seq, batch)
    if chosen is None:
        return None
    tp, recompute = chosen
    return StepConfig(p.model, hw, p.gpus, parse_scheme(p.scheme), micro_batch=1,
                      seq_len=seq, global_batch=batch, tp=tp, recompute=recompute)


def evaluate(p: Point) -> dict:
    cfg = _step_config(p)
    row = {"sweep": p.sweep, "model": p.model.name, "n_params": p.model.n_params,
           "hardware": p.hardware.name, "gpus": p.gpus, "scheme": p.scheme,
           "nic_Gbps": p.nic_Gbps, "sparsity": parse_scheme(p.scheme).sparsity,
           "global_batch": global_batch(p.model, p.gpus)}
    if cfg is None:
        return {**row, "fits": False}
    r = simulate_cached(cfg)
    return {**row, "fits": True, "tp": cfg.tp, "grad_accum": cfg.accum,
            "recompute": cfg.recompute, **r.as_dict()}


def points(model: ModelProfile, hw: HardwareProfile, sweep: Sweep) -> list[Point]:
    nic = hw.nic.bw_Gbps
    pts = [Point("gpus", model, hw, g, s, nic) for g in sweep.gpus for s in SCHEMES]
    pts += [Point("bandwidth", model, hw, g, s, float(b)) for b in NIC_GBPS
            for g in sweep.gpus for s in (BASELINE, "scape:0.99") if b != nic]
    pts += [Point("sparsity", model, hw, g, f"scape:{x}" if x else BASELINE, nic)
            for g in sweep.sparsity_gpus for x in SPARSITY]
    pts += [Point("model", load_model(m), hw, g, s, nic) for m in MODELS
            for g in sweep.model_gpus for s in (BASELINE, "scape:0.99")]
    return pts


def run_sweep(pts: list[Point], workers: int | None = None,
              progress: Callable[[int], None] | None = None) -> pd.DataFrame:
    """Every point, over every core (same topology together so caches are reused)."""
    pts = sorted(pts, key=lambda p: (p.hardware.name, p.nic_Gbps, p.gpus))  # topology together
    df = pd.DataFrame(parallel_map(evaluate, pts, workers, progress))
    if "step_time_s" not in df:  # no point fits in GPU memory: rows carry no time at all
        df["step_time_s"] = float("nan")
    base = df[df["scheme"] == BASELINE].set_index(["model", "gpus", "nic_Gbps"])["step_time_s"]
    base = base[~base.index.duplicated()]
    keys = list(zip(df["model"], df["gpus"], df["nic_Gbps"], strict=True))
    df["speedup_vs_dense_adams"] = [
        base.get(k, float("nan")) / t if fit else float("nan")
        for k, t, fit in zip(keys, df["step_time_s"], df["fits"], strict=True)
    ]
    return df


# ---- figures ----
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


def _answer(df: pd.DataFrame, hw: HardwareProfile) -> str:
    """The report's answer first: SCAPE 99% at the largest GPU count, where it starts to pay
    over NIC bandwidth, and what the step is bound by there."""
    part = df[(df["sweep"] == "gpus") & df["fits"]]
    top = part["gpus"].max()
    at = part[part["gpus"] == top].set_index("scheme")
    if "scape:0.99" not in at.index or BASELINE not in at.index:
        return f"No SCAPE 99% plan fits at {top} GPUs of {hw.name}."
    s, d = at.loc["scape:0.99"], at.loc[BASELINE]
    shares = {"compute": s["compute_s"], "compression kernels": s["compression_s"],
              "tensor-parallel communication": s["tp_comm_s"],
              "exposed data-parallel communication": s["exposed_comm_s"]}
    text = (f"At {top:,} GPUs of {hw.name}, SCAPE 99% takes {s['step_time_s']:.3f} s a step "
            f"against dense AdamS's {d['step_time_s']:.3f} s ({s['speedup_vs_dense_adams']:.2f}x); "
            f"its step is bound by {max(shares, key=shares.get)}.")
    bw = df[df["sweep"].isin(["bandwidth", "gpus"]) & df["fits"]
            & (df["scheme"] == "scape:0.99")].drop_duplicates(["gpus", "nic_Gbps"])
    if not bw.empty:
        paying = bw[bw["speedup_vs_dense_adams"] > 1.0].sort_values(["gpus", "nic_Gbps"])
        rates = f"{bw['nic_Gbps'].min():g}-{bw['nic_Gbps'].max():g} Gb/s per NIC"
        if paying.empty:
            text += f" It pays nowhere in the sweep ({rates}, {bw['gpus'].min()}-{top} GPUs)."
        else:
            where = ", ".join(f"{r.gpus} GPUs at {r.nic_Gbps:g} Gb/s "
                              f"({r.speedup_vs_dense_adams:.2f}x)"
                              for r in paying.itertuples(index=False))
            text += f" Of the sweep ({rates}) it pays only at: {where}."
    return text


def write_report(model: str, hardware: str, out: Path, quick: bool = False,
                 workers: int | None = None,
                 progress_total: Callable[[int], None] | None = None,
                 progress: Callable[[int], None] | None = None) -> dict[str, Path]:
    refuse_special_files(out)
    m, hw = load_model(model), load_hardware(hardware)
    sweep = (Sweep.quick if quick else Sweep.full)(hw.node.gpus_per_node)
    if not sweep.gpus:
        raise UserError(f"no GPU count of the sweep fills whole {hw.name} nodes")
    pts = points(m, hw, sweep)
    if progress_total:
        progress_total(len(pts))
    df = run_sweep(pts, workers, progress)
    fitting = df[(df["sweep"] == "gpus") & df["fits"]]
    if fitting.empty:  # every figure and the answer would be empty
        counts = df.loc[df["sweep"] == "gpus", "gpus"]
        raise UserError(f"no step of the sweep fits in GPU memory: {m.name} on "
                        f"{counts.min():,}-{counts.max():,} GPUs of {hw.name}, whatever the "
                        "scheme, tensor-parallel degree or recomputation (the report's "
                        "layouts have no pipeline parallelism: `scape plan` searches those), or "
                        "a smaller model")
    out.mkdir(parents=True, exist_ok=True)
    title = f"{m.name} on {hw.name}"
    figures = {
        "speedup_vs_gpus": ("Speedup over dense AdamS against GPU count, per scheme",
                            fig_speedup_vs_gpus(df, out / "speedup_vs_gpus.png", title),
                            df[df["sweep"] == "gpus"]),
        "breakdown": ("Step-time breakdown at the largest GPU count",
                      fig_breakdown(df, out / "breakdown.png", title),
                      df[(df["sweep"] == "gpus") & (df["gpus"] == df["gpus"].max())]),
        "heatmap": ("SCAPE 99% speedup over NIC bandwidth and GPU count",
                    fig_heatmap(df, out / "heatmap_bandwidth_gpus.png", title),
                    df[df["sweep"].isin(["bandwidth", "gpus"])
                       & df["scheme"].isin([BASELINE, "scape:0.99"])]),
        "sparsity": ("SCAPE speedup against sparsity",
                     fig_line(df, "sparsity", "sparsity", "sparsity", out / "sparsity.png",
                              title), df[df["sweep"] == "sparsity"]),
        "model": ("SCAPE 99% speedup against model size",
                  fig_line(df, "model", "model", "model", out / "model_size.png",
                           f"SCAPE 99% on {hw.name} by model"), df[df["sweep"] == "model"]),
    }
    files: dict[str, Path] = {}
    answer = _answer(df, hw)
    md = [f"# Scaling report: {title}", "", answer, "",
          f"{len(df)} simulated steps ({int(df['fits'].sum())} fit in memory). Batch: "
          "micro-batch 1, the model's global batch or one sequence per GPU once GPUs outnumber "
          "it, the same for every scheme at a GPU count. Layout: the smallest tensor-parallel "
          "degree that fits without recomputation, else with full recomputation. Speedup = "
          f"dense AdamS step time / scheme step time. Sweep: {'quick' if quick else 'full'}; "
          f"profiles {m.path} and {hw.path}.",
          ""]
    setup = md[4]
    html_figs = []
    for key, (caption, png, data) in figures.items():
        csv = out / f"{key}.csv"
        data.to_csv(csv, index=False)
        files[f"{key}_png"], files[f"{key}_csv"] = png, csv
        md += [f"## {caption}", "", f"![{caption}]({png.name})", "",
               f"Data: [{csv.name}]({csv.name})", ""]
        html_figs.append({"heading": caption, "text": "", "png": png_b64(png), "table": None,
                          "links": [csv.name]})
    summary = df[(df["sweep"] == "gpus") & df["fits"]].pivot_table(
        index="gpus", columns="scheme", values="speedup_vs_dense_adams")
    table = summary.reset_index()
    table.columns.name = None  # the pivot's "scheme" label is not a column
    md += ["## Speedup table", "", markdown(table, "{:.2f}"), ""]
    all_csv = out / "all_points.csv"
    # counts stay counts where a point that fits nowhere left them blank (pandas made them float)
    df.astype({c: "Int64" for c in ("gpus", "tp", "grad_accum", "global_batch")
               if c in df}).to_csv(all_csv, index=False)
    md += [f"All points: [{all_csv.name}]({all_csv.name})", ""]
    files["all_csv"] = all_csv
    files["markdown"] = out / "scaling.md"
    files["html"] = out / "scaling.html"
    files["markdown"].write_text("\n".join(md))
    speedups = {"heading": "Speedup table", "text": "", "png": "",
                "table": html_table(table, "{:.2f}"), "links": [all_csv.name]}
    files["html"].write_text(render_html(
        "report.html.j2", title=f"Scaling report: {title}", answer=answer, intro=[setup],
        sections=[*html_figs, speedups]))
    return files
