"""`scape report scaling`: what-if sweeps over GPU count, NIC bandwidth, sparsity and model
size, as a Markdown and a self-contained HTML report with figures and the CSV behind each.

Every point is one simulated steady-state step. Batch: micro-batch 1, the model's global batch,
or one sequence per GPU once GPUs outnumber it (weak scaling); every scheme at a GPU count does
the same work per step. Layout: the smallest tensor-parallel degree inside a node that fits in
memory without recomputation, else the smallest with full recomputation.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from profiles import HardwareProfile, ModelProfile, UserError, load_hardware, load_model
from reports.tables import markdown
from scape.plan import Dtypes
from simulator.batch import parallel_map, simulate_cached
from simulator.compare import parse_scheme
from simulator.memory import memory_use, usable_bytes
from simulator.step import StepConfig

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
        ladder = tuple(g for g in (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
                       if g % node == 0 or (g < node and node % g == 0))
        return cls(ladder, ladder, ladder)

    @classmethod
    def quick(cls, node: int) -> Sweep:
        ladder = tuple(g for g in (8, 64, 512, 4096) if g % node == 0 or node % g == 0)
        return cls(ladder, ladder[-2:], ladder[-2:])


@dataclass(frozen=True)
class Point:
    sweep: str  # which figure the point belongs to
    model: ModelProfile
    hardware: HardwareProfile
    gpus: int
    scheme: str
    nic_Gbps: float


def layout(model: ModelProfile, hw: HardwareProfile, scheme: str, gpus: int, seq: int,
           batch: int) -> tuple[int, bool] | None:
    """(tensor-parallel degree, recompute): the smallest degree inside a node that fits
    without recomputation, else the smallest that fits with it; None if nothing fits."""
    cfg = parse_scheme(scheme)
    usable = usable_bytes(hw)
    degrees = [tp for tp in (1, 2, 4, 8) if hw.node.gpus_per_node % tp == 0
               and model.arch.n_heads % tp == 0 and tp <= gpus and batch % (gpus // tp) == 0]
    for recompute in (False, True):
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
        hw = replace(hw, nic=replace(hw.nic, bw_Gbps=p.nic_Gbps))
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
    row = {"sweep": p.sweep, "model": p.model.name, "hardware": p.hardware.name,
           "gpus": p.gpus, "scheme": p.scheme, "nic_Gbps": p.nic_Gbps,
           "sparsity": parse_scheme(p.scheme).sparsity}
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
    base = df[df["scheme"] == BASELINE].set_index(["model", "gpus", "nic_Gbps"])["step_time_s"]
    base = base[~base.index.duplicated()]
    keys = list(zip(df["model"], df["gpus"], df["nic_Gbps"], strict=True))
    df["speedup_vs_dense_adams"] = [
        base.get(k, float("nan")) / t if fit else float("nan")
        for k, t, fit in zip(keys, df.get("step_time_s", pd.Series(dtype=float)), df["fits"],
                             strict=True)
    ]
    return df


# ---- figures ----
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


def fig_speedup_vs_gpus(df: pd.DataFrame, path: Path, title: str) -> Path:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    part = df[(df["sweep"] == "gpus") & df["fits"]]
    for scheme, g in part.groupby("scheme", sort=False):
        ax.plot(g["gpus"], g["speedup_vs_dense_adams"], marker="o", label=scheme)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("GPUs")
    ax.set_ylabel("step speedup over dense AdamS")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
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


def fig_heatmap(df: pd.DataFrame, path: Path, title: str) -> Path:
    plt = _plt()
    part = df[df["sweep"].isin(["bandwidth", "gpus"]) & (df["scheme"] == "scape:0.99")
              & df["fits"]]
    grid = part.pivot_table(index="nic_Gbps", columns="gpus", values="speedup_vs_dense_adams")
    fig, ax = plt.subplots(figsize=(9, 3.8))
    im = ax.imshow(grid.values, aspect="auto", cmap="viridis", origin="lower")
    ax.set_xticks(range(len(grid.columns)), [str(c) for c in grid.columns], rotation=45)
    ax.set_yticks(range(len(grid.index)), [f"{b:g}" for b in grid.index])
    for (i, j), v in pd.DataFrame(grid.values).stack().items():
        ax.text(j, i, f"{v:.2g}", ha="center", va="center", color="white", fontsize=7)
    ax.set_xlabel("GPUs")
    ax.set_ylabel("NIC Gb/s per NIC")
    ax.set_title(f"{title}: SCAPE 99% speedup over dense AdamS")
    fig.colorbar(im, ax=ax)
    return _save(fig, path)


def fig_line(df: pd.DataFrame, sweep: str, x: str, xlabel: str, path: Path, title: str,
             group: str = "gpus") -> Path:
    plt = _plt()
    part = df[(df["sweep"] == sweep) & df["fits"] & (df["scheme"] != BASELINE)]
    fig, ax = plt.subplots(figsize=(8, 4.2))
    for key, g in part.groupby(group, sort=False):
        ax.plot(g[x].astype(str) if x == "model" else g[x], g["speedup_vs_dense_adams"],
                marker="o", label=f"{group} {key}")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("SCAPE step speedup over dense AdamS")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def write_report(model: str, hardware: str, out: Path, quick: bool = False,
                 workers: int | None = None,
                 progress_total: Callable[[int], None] | None = None,
                 progress: Callable[[int], None] | None = None) -> dict[str, Path]:
    m, hw = load_model(model), load_hardware(hardware)
    sweep = (Sweep.quick if quick else Sweep.full)(hw.node.gpus_per_node)
    if not sweep.gpus:
        raise UserError(f"no GPU count of the sweep fills whole {hw.name} nodes")
    pts = points(m, hw, sweep)
    if progress_total:
        progress_total(len(pts))
    df = run_sweep(pts, workers, progress)
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
    md = [f"# Scaling report: {title}", "",
          f"{len(df)} simulated steps ({int(df['fits'].sum())} fit in memory). Batch: "
          "micro-batch 1, the model's global batch or one sequence per GPU once GPUs outnumber "
          "it, the same for every scheme at a GPU count. Layout: the smallest tensor-parallel "
          "degree that fits without recomputation, else with full recomputation. Speedup = "
          "dense AdamS step time / scheme step time.",
          ""]
    html = [f"<h1>Scaling report: {title}</h1>", f"<p>{md[2]}</p>"]
    for key, (caption, png, data) in figures.items():
        csv = out / f"{key}.csv"
        data.to_csv(csv, index=False)
        files[f"{key}_png"], files[f"{key}_csv"] = png, csv
        md += [f"## {caption}", "", f"![{caption}]({png.name})", "",
               f"Data: [{csv.name}]({csv.name})", ""]
        b64 = base64.b64encode(png.read_bytes()).decode()
        html += [f"<h2>{caption}</h2>", f'<img alt="{caption}" src="data:image/png;base64,{b64}">',
                 f'<p>Data: <a href="{csv.name}">{csv.name}</a></p>']
    summary = df[(df["sweep"] == "gpus") & df["fits"]].pivot_table(
        index="gpus", columns="scheme", values="speedup_vs_dense_adams")
    md += ["## Speedup table", "", markdown(summary.reset_index(), "{:.2f}"), ""]
    all_csv = out / "all_points.csv"
    df.to_csv(all_csv, index=False)
    md += [f"All points: [{all_csv.name}]({all_csv.name})", ""]
    html += [f'<p>All points: <a href="{all_csv.name}">{all_csv.name}</a></p>']
    files["all_csv"] = all_csv
    files["markdown"] = out / "scaling.md"
    files["html"] = out / "scaling.html"
    files["markdown"].write_text("\n".join(md))
    files["html"].write_text("<!doctype html><html><head><meta charset='utf-8'><title>"
                             f"Scaling report: {title}</title></head><body>"
                             + "\n".join(html) + "</body></html>\n")
    return files
