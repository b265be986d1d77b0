"""`scape report scaling`: what-if sweeps over GPU count, NIC bandwidth, sparsity and model
size, as a Markdown and a self-contained HTML report with figures and the CSV behind each.

Every point is one simulated steady-state step. Batch: the model's global batch,
or one sequence per GPU once GPUs outnumber it (weak scaling); every scheme at a GPU count does
the same work per step. Layout: the fastest `scape plan` finds at that GPU count (tensor and
pipeline parallelism, micro-batch, the least recomputation that fits;
simulator/planning/planner.py), so a 70B or 405B report has points wherever plan has plans.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from profiles import HardwareProfile, ModelProfile, UserError, load_hardware, load_model
from reports.html import png_b64, render_html
from reports.html import table as html_table
from reports.scaling_figures import (
    BASELINE,
    fig_breakdown,
    fig_heatmap,
    fig_line,
    fig_run,
    fig_speedup_vs_gpus,
    step_parts,
)
from reports.tables import markdown, refuse_special_files
from simulator.planning.compare import parse_scheme
from simulator.planning.plan_request import PlanRequest
from simulator.planning.planner import UNMEASURED, candidates, evaluate_bounded
from simulator.step.batch import parallel_map, simulate_cached
from simulator.step.step_config import StepConfig
from vocabulary.atomic import to_csv_atomic, write_text_atomic
from vocabulary.units import span

SCHEMES = ("dense-adams", "dense-ddp", "quantized:8", "topk:0.99", "scalecom:0.99",
           "scape:0.9", "scape:0.99", "scape:0.999", "scape-partitioned:0.99")
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


def fills_nodes(gpus: int, node: int) -> bool:
    """Whether `gpus` is whole nodes of `node` GPUs, or divides one node."""
    return gpus % node == 0 or (gpus < node and node % gpus == 0)


def _ladder(counts: tuple[int, ...], node: int, step: int) -> tuple[int, ...]:
    """The GPU counts of a sweep on nodes of `node` GPUs: those of `counts` whole nodes make
    up (or that divide one node); on nodes of a size that is no power of two, also whole
    nodes times powers of `step` up to the first at or past the largest count, so that a node
    of 72 GPUs sweeps 72, 144, ... rather than the one count it divides."""
    fits = {g for g in counts if fills_nodes(g, node)}
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
    global_batch: int | None = None  # None: the model's (global_batch below)


def layout(model: ModelProfile, hw: HardwareProfile, scheme: str, gpus: int, seq: int,
           batch: int) -> StepConfig | None:
    """The fastest layout `scape plan` finds for this scheme at exactly `gpus` GPUs: tensor
    and pipeline parallelism (1F1B or interleaved), micro-batch and the least recomputation
    that fits (simulator/planning/planner.py candidates, then its bounded search for the best one);
    None if nothing fits."""
    req = PlanRequest(model, float(batch * seq), (hw,), max_gpus=gpus, global_batch=batch,
                      seq_len=seq, schemes=(scheme,), workers=1,
                      price_per_gpu_hour=1.0).validate()  # a price: ranking is by time
    cands, why = candidates(req, gpus_only=gpus)
    if not cands:
        unmeasured = [r for r in why if UNMEASURED in r and f": {gpus} GPU" in r]
        if unmeasured:  # a measured profile: say which counts it can price
            raise UserError(f"profile {hw.name} prices the rank counts it measured, not "
                            f"{gpus} GPUs: {unmeasured[0]}")
        return None
    best = evaluate_bounded(req, cands, 1).sort_values(["hours", "cost_usd"], kind="stable")
    row = best.iloc[0]
    keys = ("tp", "pp", "ep", "etp", "cp", "chunks", "micro_batch", "recompute")
    chosen = next(c for c in cands
                  if all(getattr(c, k) == row[k] for k in keys if k in row and hasattr(c, k)))
    return chosen.step_config(req)


def global_batch(model: ModelProfile, gpus: int) -> int:
    """The model's global batch, or one sequence per GPU once GPUs outnumber it, so every
    scheme at a given GPU count does the same work per step whatever its parallel layout."""
    return max(model.global_batch or gpus, gpus)


def _batch(p: Point) -> int:
    return global_batch(p.model, p.gpus) if p.global_batch is None else p.global_batch


def _step_config(p: Point) -> StepConfig | None:
    hw = p.hardware
    if p.nic_Gbps != hw.nic.bw_Gbps:
        nic = replace(hw.nic, bw_Gbps=p.nic_Gbps)
        if hw.nic.burst_bytes is not None:  # a netbed's tbf bucket holds 0.5 ms of its rate
            nic = replace(nic, burst_bytes=hw.nic.burst_bytes * p.nic_Gbps / hw.nic.bw_Gbps)
        hw = replace(hw, nic=nic)
    seq = p.model.arch.seq_len
    return layout(p.model, hw, p.scheme, p.gpus, seq, _batch(p))


def evaluate(p: Point) -> dict:
    cfg = _step_config(p)
    row = {"sweep": p.sweep, "model": p.model.name, "n_params": p.model.n_params,
           "hardware": p.hardware.name, "gpus": p.gpus, "scheme": p.scheme,
           "nic_Gbps": p.nic_Gbps, "sparsity": parse_scheme(p.scheme).sparsity,
           "global_batch": _batch(p)}
    if cfg is None:
        return {**row, "fits": False}
    r = simulate_cached(cfg)
    return {**row, "fits": True, "tp": cfg.tp, "pp": cfg.pp, "virtual_stages": cfg.chunks_pp,
            "micro_batch": cfg.micro_batch, "grad_accum": cfg.accum,
            "recompute": cfg.recompute, **r.as_dict(), **run_figures(cfg, r, _batch(p))}


def run_figures(cfg: StepConfig, r, batch: int) -> dict:
    """A run of these steps with failures and what it draws: its goodput (the published
    defaults, simulator/run/defaults.py; a run's goodput does not depend on its length) and its
    facility energy per token (simulator/run/energy.py at the default site; NaN without a
    [power] table)."""
    import math

    from simulator.run.defaults import default_reliability, on_profile
    from simulator.run.sites import site_of
    from simulator.step.power import run_and_energy

    work_s = 3600.0
    tokens = work_s / r.step_time_s * batch * cfg.model.arch.seq_len
    run, energy = run_and_energy(cfg, r, work_s,
                                 on_profile(default_reliability(), cfg.hardware),
                                 site_of(None, None), tokens)
    wh = math.nan if energy is None else energy.wh_per_token
    return {"goodput": run.goodput, "wh_per_token": wh}


def points(model: ModelProfile, hw: HardwareProfile, sweep: Sweep,
           schemes: tuple[str, ...] = SCHEMES, batch: int | None = None) -> list[Point]:
    """The sweep's points: every scheme over GPU counts, dense AdamS and SCAPE 99% over NIC
    rates and model sizes, SCAPE over sparsity; `batch`: one global batch for every point
    (None: the model's, or a sequence per GPU past it)."""
    nic = hw.nic.bw_Gbps
    pts = [Point("gpus", model, hw, g, s, nic, batch) for g in sweep.gpus for s in schemes]
    pts += [Point("bandwidth", model, hw, g, s, float(b), batch) for b in NIC_GBPS
            for g in sweep.gpus for s in (BASELINE, "scape:0.99") if b != nic]
    pts += [Point("sparsity", model, hw, g, f"scape:{x}" if x else BASELINE, nic, batch)
            for g in sweep.sparsity_gpus for x in SPARSITY]
    pts += [Point("model", load_model(m), hw, g, s, nic, batch) for m in MODELS
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


def _answer(df: pd.DataFrame, hw: HardwareProfile) -> str:
    """The report's answer first: SCAPE 99% at the largest GPU count, where it starts to pay
    over NIC bandwidth, and what the step is bound by there."""
    part = df[(df["sweep"] == "gpus") & df["fits"]]
    top = part["gpus"].max()
    at = part[part["gpus"] == top].set_index("scheme")
    if "scape:0.99" not in at.index or BASELINE not in at.index:
        return f"No SCAPE 99% plan fits at {top} GPUs of {hw.name}."
    s, d = at.loc["scape:0.99"], at.loc[BASELINE]
    shares = step_parts(at.loc[["scape:0.99"]]).iloc[0].to_dict()
    text = (f"At {top:,} GPUs of {hw.name}, SCAPE 99% takes {s['step_time_s']:.3f} s a step "
            f"against dense AdamS's {d['step_time_s']:.3f} s ({s['speedup_vs_dense_adams']:.2f}x); "
            f"its step is bound by {max(shares, key=shares.get)}.")
    bw = df[df["sweep"].isin(["bandwidth", "gpus"]) & df["fits"]
            & (df["scheme"] == "scape:0.99")].drop_duplicates(["gpus", "nic_Gbps"])
    if not bw.empty:
        paying = bw[bw["speedup_vs_dense_adams"] > 1.0].sort_values(["gpus", "nic_Gbps"])
        rates = f"{span(bw['nic_Gbps'].min(), bw['nic_Gbps'].max(), 'g')} Gb/s per NIC"
        if paying.empty:
            text += f" It pays nowhere in the sweep ({rates}, {span(bw['gpus'].min(), top)} GPUs)."
        else:
            where = ", ".join(f"{r.gpus} GPUs at {r.nic_Gbps:g} Gb/s "
                              f"({r.speedup_vs_dense_adams:.2f}x)"
                              for r in paying.itertuples(index=False))
            text += f" Of the sweep ({rates}) it pays only at: {where}."
    return text


def write_report(model: str, hardware: str, out: Path, quick: bool = False,
                 workers: int | None = None,
                 progress_total: Callable[[int], None] | None = None,
                 progress: Callable[[int], None] | None = None,
                 gpus: tuple[int, ...] | None = None, schemes: tuple[str, ...] | None = None,
                 batch: int | None = None) -> dict[str, Path]:
    """The report; `gpus`, `schemes`, `batch` (None: the sweep's own counts, SCHEMES, the
    model's global batch) are the user's --gpus, --schemes and --global-batch."""
    refuse_special_files(out)
    m, hw = load_model(model), load_hardware(hardware)
    sweep = (Sweep.quick if quick else Sweep.full)(hw.node.gpus_per_node)
    if gpus is not None:
        node = hw.node.gpus_per_node
        partial = [g for g in gpus if not fills_nodes(g, node)]
        if partial:
            raise UserError(f"--gpus {', '.join(map(str, partial))}: a count must fill whole "
                            f"{hw.name} nodes of {node} GPUs (or divide one)")
        counts = tuple(sorted(set(gpus)))
        sweep = Sweep(counts, counts, counts)
    if not sweep.gpus:
        raise UserError(f"no GPU count of the sweep fills whole {hw.name} nodes")
    if batch is not None and batch < 1:
        raise UserError(f"--global-batch must be at least 1, got {batch}")
    lineup = SCHEMES if schemes is None else tuple(dict.fromkeys((BASELINE, *schemes)))
    for spec in lineup:
        parse_scheme(spec)  # an unknown or misspelt scheme: refused before any simulation
    pts = points(m, hw, sweep, lineup, batch)
    if progress_total:
        progress_total(len(pts))
    df = run_sweep(pts, workers, progress)
    fitting = df[(df["sweep"] == "gpus") & df["fits"]]
    if fitting.empty:  # every figure and the answer would be empty
        counts = df.loc[df["sweep"] == "gpus", "gpus"]
        raise UserError(f"no step of the sweep fits in GPU memory: {m.name} on "
                        f"{span(counts.min(), counts.max(), ',')} GPUs of {hw.name}, whatever the "
                        "scheme and layout `scape plan` searches (tensor and pipeline "
                        "parallelism, micro-batch, recomputation): GPUs with more memory, or "
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
        "run": ("Goodput and energy per token against GPU count (a run with failures: the "
                "published failure rates, the default PUE and grid)",
                fig_run(df, out / "goodput_energy.png", title),
                df[(df["sweep"] == "gpus") & df["fits"]][
                    ["gpus", "scheme", "step_time_s", "goodput", "wh_per_token"]]),
    }
    files: dict[str, Path] = {}
    answer = _answer(df, hw)
    md = [f"# Scaling report: {title}", "", answer, "",
          f"{len(df)} points ({int(df['fits'].sum())} fit in memory). Batch: "
          + ("the model's global batch or one sequence per GPU once GPUs outnumber it"
             if batch is None else f"{batch:,} sequences (--global-batch)")
          + ", the same for every scheme at a GPU count. Schemes: "
          + ", ".join(lineup) + (" (--schemes, with the dense AdamS baseline)"
                                 if schemes is not None else "")
          + ". GPU counts: " + ", ".join(f"{g:,}" for g in sweep.gpus)
          + (" (--gpus)" if gpus is not None else "")
          + ". Layout: the fastest `scape plan` finds for each scheme at each GPU count "
          "(tensor and pipeline parallelism, micro-batch, the least "
          "recomputation that fits; the CSVs carry tp, pp, micro_batch, recompute). Speedup = "
          f"dense AdamS step time / scheme step time. Sweep: {'quick' if quick else 'full'}; "
          f"profiles {m.path} and {hw.path}.",
          ""]
    setup = md[4]
    html_figs = []
    for key, (caption, png, data) in figures.items():
        csv = out / f"{key}.csv"
        to_csv_atomic(data, csv, index=False)
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
    to_csv_atomic(df.astype({c: "Int64" for c in ("gpus", "tp", "grad_accum", "global_batch")
                             if c in df}), all_csv, index=False)
    md += [f"All points: [{all_csv.name}]({all_csv.name})", ""]
    files["all_csv"] = all_csv
    files["markdown"] = out / "scaling.md"
    files["html"] = out / "scaling.html"
    write_text_atomic(files["markdown"], "\n".join(md))
    speedups = {"heading": "Speedup table", "text": "", "png": "",
                "table": html_table(table, "{:.2f}"), "links": [all_csv.name]}
    write_text_atomic(files["html"], render_html(
        "report.html.j2", title=f"Scaling report: {title}", answer=answer, intro=[setup],
        sections=[*html_figs, speedups]))
    return files


