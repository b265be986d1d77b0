"""Measured against predicted training steps (DESIGN section 7, `scape validate`).

For each scheme: run the real optimizer (scape/train) for a few steps on the calibrated machine
(optionally on the shaped-network testbed), take the median step time and its breakdown; then
simulate the same configuration from the measured profile alone and report the error. Nothing
measured here feeds the prediction: the profile's numbers come from `scape calibrate`, which
times collectives and kernels, never training steps.

"The same configuration" means what the CPU runtime does: fp32 gradients and parameters on the
wire, one bucket, no overlap of communication with backward (the runtime communicates after
backward), parameters all-gathered after the update, the flat buffer padded as the runtime pads
it, and the runtime's copies between model tensors and its flat buffers (kernel `flat_copy`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from datetime import date
from functools import lru_cache
from pathlib import Path

import pandas as pd

from profiles import HardwareProfile, UserError, load_model
from reports import roles
from reports.tables import git_revision
from scape.plan import Kernel, Plan, SchemeConfig, StepPlan, plan
from simulator.step.simulate import simulate_step
from simulator.step.step_config import StepConfig, StepResult
from vocabulary.atomic import atomic_path, to_csv_atomic, write_text_atomic
from vocabulary.units import format_duration


def runtime_plan(cfg: SchemeConfig, model: str, world: int,
                 hw: HardwareProfile | None = None) -> Plan:
    """The plan the runtime executes for `model`, plus its copies. The authors' reducer gets
    the collectives of its plan for the runtime model's own tensors, and the kernels of this
    runtime's passes (not the GPU loops its plan prices)."""
    from scape.schemes import runtime_class
    from scape.schemes.base import RUNTIME_DTYPES
    from scape.sharding import padded_size

    numel = load_model(model).n_params
    sizes, dense = runtime_tensors(model)
    copies = Kernel("pull grads, push params", "flat_copy", numel, "post", len(sizes))
    if cfg.scheme == "scape":
        base = plan(cfg, numel, world, RUNTIME_DTYPES, tensors=sizes, dense=dense)
        calibrated = hw is not None and "authors_step" in hw.kernels
        kernels = (*authors_runtime_kernels(cfg, sizes, dense, world, calibrated), copies)
        return Plan(base.scheme, tuple((w, StepPlan(s.ops, kernels)) for w, s in base.steps))
    padded = padded_size(numel, world, runtime_class(cfg).multiple)
    base = plan(cfg, padded, world, RUNTIME_DTYPES)
    return Plan(base.scheme, tuple((w, StepPlan(s.ops, (*s.kernels, copies)))
                                   for w, s in base.steps))


def runtime_tensors(model: str) -> tuple[list[int], list[bool]]:
    """The runtime model's trainable tensors in buffer order: sizes, and the one-dimensional
    (norm) ones the reducer sends whole."""
    sizes, dense = _runtime_tensors(model)
    return list(sizes), list(dense)


@lru_cache(maxsize=32)
def _runtime_tensors(model: str) -> tuple[tuple[int, ...], tuple[bool, ...]]:
    import torch

    from scape.schemes.scape_authors import tensor_layout
    from scape.train.model import GPT

    with torch.device("meta"):  # shapes only: no memory, whatever the model's size
        sizes, dense = tensor_layout(list(GPT(load_model(model)).parameters()))
    return tuple(sizes), tuple(dense)


def authors_runtime_kernels(cfg: SchemeConfig, sizes: list[int], dense: list[bool],
                            world: int, calibrated: bool = False) -> tuple[Kernel, ...]:
    """The passes of scape/schemes/scape_authors.py over N elements: with `calibrated`, the
    profile's measured `authors_step` kernel (the whole local step at one rank, which selects
    every tensor: at P ranks the owner selects about 1/P of them, so this errs high by up to
    the selection's share); otherwise priced by the calibrated kernels they resemble (which
    a netbed run showed to miss about 35 ms of the runtime's 50-75 ms at 842k parameters):
    c = b1*m + (1-b1)*g + r and the residual (error feedback), the
    owner's top-k (select, one call per tensor it sparsifies: the slowest owner's calls, each
    with its fixed cost), the bitmap and the payload (pack), the masked g_sync and
    the AdamS update (two optimizer passes), the received bitmaps (dequantize); with the
    distributed optimizer the replica's decay and scatter (error feedback, scatter-add)."""
    from scape.plan.scape_authors import owner_pieces, selected

    n = sum(sizes)
    k = selected(cfg.density, sizes, dense)
    layout = owner_pieces(sizes, dense, world, bool(cfg.extra.get("distributed_optimizer")))
    # the owner that selects the most elements; its top-k calls, one per sparsified piece
    pieces = max(layout, key=lambda pcs: sum(b - a for a, b, d in pcs if not d))
    owned = sum(b - a for a, b, _ in pieces)
    # the calibrated step's per-tensor cost is its per-piece top-k (the benchmark selects all
    # of its 2-D tensors, authors_step_bench): here the slowest owner's sparsified pieces
    selecting = sum(1 for _, _, d in pieces if not d)
    kernels = [Kernel("reducer step (calibrated)", "authors_step", n, "pre", selecting)
               ] if calibrated else [
        Kernel("corrected momentum", "error_feedback", n, "pre"),
        *(Kernel("owner's top-k", "select", b - a, "pre") for a, b, d in pieces if not d),
        Kernel("bitmap pack", "pack", owned, "pre"),
        Kernel("payload pack", "pack", k, "pre"),
        Kernel("residual", "error_feedback", n, "pre"),
        # g_sync: [N] with the distributed optimizer, else its K entries on the mask
        Kernel("g_sync", "optimizer_adams",
               n if cfg.extra.get("distributed_optimizer") else k, "update"),
        Kernel("adams update", "optimizer_adams", n, "update"),
        Kernel("bitmaps unpacked", "dequantize", n, "post"),
    ]
    if cfg.extra.get("distributed_optimizer"):
        kernels += [Kernel("replica decay", "error_feedback", n, "post"),
                    Kernel("replica scatter", "scatter_add", k, "post")]
    return tuple(kernels)


def predict(hw: HardwareProfile, model: str, cfg: SchemeConfig, world: int,
            micro_batch: int, seq_len: int | None = None) -> StepResult:
    from scape.schemes import runtime_config
    from scape.schemes.base import RUNTIME_DTYPES

    profile = load_model(model)
    cfg = runtime_config(cfg)
    step = StepConfig(model=profile, hardware=hw, gpus=world, scheme=cfg,
                      micro_batch=micro_batch, seq_len=seq_len, dtypes=RUNTIME_DTYPES)
    # the runtime's loop runs its plan's kernels and no more: zero_grad(set_to_none=True),
    # clipping only where --clip-grad puts it in the plan (scape/train/loop.py)
    return simulate_step(step.validate(), the_plan=runtime_plan(cfg, model, world, hw),
                         step_work=False)


def probe_compute(hw: HardwareProfile, model: str, micro_batch: int, ranks: int,
                  repeats: int = 16) -> tuple[HardwareProfile, dict]:
    """`hw` with its forward/backward speed and host slowdown timed again now, by the probe of
    `scape calibrate compute` (real forward and backward steps of the model in 1..`ranks`
    processes, rounds interleaved; never a training step). A CPU host's speed drifts by 10-20%
    over minutes, more than the error a validation can resolve, so each run is predicted from
    the speed the machine has when it starts (kernels: probe_kernels; collectives stay as
    calibrated)."""
    from calibration.fwd_bwd import measure_concurrency, step_flops

    profile = load_model(model)
    slowdown, alone = measure_concurrency(model, micro_batch, ranks, repeats=repeats)
    flops = step_flops(profile, micro_batch, profile.arch.seq_len)  # per step, per rank
    mfu = flops / alone / (hw.gpu.peak_bf16_tflops * 1e12)
    fresh = replace(hw, compute=replace(hw.compute, mfu=mfu),
                    slowdown=(*slowdown, *hw.slowdown[ranks:]))
    return fresh, {"probe_fwd_bwd_s": alone, "probe_slowdown": slowdown[-1]}


def kernel_kinds(hw: HardwareProfile, model: str, configs: list[SchemeConfig],
                 worlds: list[int]) -> list[str]:
    """The calibrated kernel kinds the runs' predictions price: those of their runtime plans
    that the profile holds."""
    from scape.schemes import runtime_config

    kinds = {k.kind for cfg in configs for world in worlds
             for _, step in runtime_plan(runtime_config(cfg), model, world, hw).steps
             for k in step.kernels}
    return sorted(kinds & set(hw.kernels))


def probe_kernels(hw: HardwareProfile, kinds: list[str], threads: int = 1,
                  repeats: int = 5) -> tuple[HardwareProfile, dict]:
    """`hw` with the kernels of `kinds` timed again now, by the same microbenchmarks as `scape
    calibrate compute` (each kernel alone at 5 sizes, with a rank's torch threads; never a
    training step). A profile's kernels may come from another host (its [measured] table says
    which): on 2026-11-25 this host ran the authors' reducer step 3x faster than the host
    that calibrated it, and the prediction missed by +35% until the kernels were retimed."""
    from calibration.compute import measure_kernels

    if not kinds:
        return hw, {}
    fresh = measure_kernels(repeats=repeats, kinds=kinds, threads=threads)
    return replace(hw, kernels={**hw.kernels, **fresh}), {
        f"probe_{k}_ns_per_element": fresh[k]["ns_per_element"] for k in kinds}


def run(hw: HardwareProfile, model: str, configs: list[tuple[str, SchemeConfig]],
        worlds: list[int], micro_batch: int, steps: int, rounds: int, probe: bool, netbed,
        dest: Path, say: Callable[[str], None] = lambda _: None, backend: str = "gloo",
        share_gpu: bool = False) -> pd.DataFrame:
    """Every scheme at every rank count, `rounds` times interleaved: measured, then predicted
    from the profile (its forward/backward and, once a round, its kernels timed again first
    when `probe`). One row per run; rows so far are kept in dest/validate.partial.csv."""
    kinds = kernel_kinds(hw, model, [cfg for _, cfg in configs], worlds) if probe else []
    link = link_name(netbed, backend, share_gpu)
    rows = []
    total, t0 = rounds * len(worlds) * len(configs), time.monotonic()

    def left() -> str:
        """Runs done so far, and the time the rest should take at their average pace."""
        done = len(rows)
        if not done:
            return f"run 1/{total}"
        rate = (time.monotonic() - t0) / done
        return f"run {done + 1}/{total}, about {format_duration(rate * (total - done))} left"

    for rnd in range(1, rounds + 1):
        if kinds:
            say(f"validate: round {rnd}/{rounds}: timing kernels {', '.join(kinds)} ...")
        now, kernel_probe = probe_kernels(hw, kinds) if probe else (hw, {})
        for world in worlds:
            for spec_text, cfg in configs:
                say(f"validate: round {rnd}/{rounds}: {spec_text} on {world} ranks "
                    f"({link}); {left()} ...")
                timed, probed = (probe_compute(now, model, micro_batch, world) if probe
                                 else (now, {}))
                predicted = predict(timed, model, cfg, world, micro_batch)
                run_dir = dest / "runs" / f"{spec_text.replace(':', '-')}-{world}ranks-r{rnd}"
                measured = measure(model, cfg, world, micro_batch, steps, netbed, run_dir,
                                   backend=backend, share_gpu=share_gpu)
                rows.append({"round": rnd, **row(spec_text, world, link, measured, predicted),
                             **probed, **kernel_probe})
                to_csv_atomic(pd.DataFrame(rows), dest / "validate.partial.csv", index=False)
    (dest / "validate.partial.csv").unlink(missing_ok=True)
    return pd.DataFrame(rows)


def aggregate(rounds: pd.DataFrame) -> pd.DataFrame:
    """One row per scheme and rank count: the median over rounds of every timing, the error
    of the median prediction against the median measurement, and how far the rounds'
    measurements of the run spread (largest over smallest, minus 1; NaN with one round): a
    testbed that does not repeat to within the goal cannot show a model meets it."""
    keys = ["scheme", "ranks", "netbed"]
    numeric = [c for c in rounds.columns if c not in keys and c != "round"
               and pd.api.types.is_numeric_dtype(rounds[c])]
    groups = rounds.groupby(keys, sort=False)
    df = groups[numeric].median().reset_index()
    df["error_pct"] = 100 * (df["predicted_step_s"] / df["measured_step_s"] - 1)
    df["rounds"] = groups["round"].count().to_numpy()
    step = groups["measured_step_s"]
    spread = 100 * (step.max() / step.min() - 1).to_numpy()
    df["measured_spread_pct"] = [x if n > 1 else float("nan")
                                 for x, n in zip(spread, df["rounds"], strict=True)]
    df["role"] = "held-out"  # no step is fitted (row())
    return df


def train_config(model: str, cfg: SchemeConfig, micro_batch: int, steps: int,
                 out: Path | None = None, seq_len: int | None = None,
                 autocast: str | None = None):
    """The training run a validation measures (no evaluation; a short LR warm-up)."""
    from scape.train.loop import TrainConfig

    return TrainConfig(model=model, scheme=cfg, steps=steps, micro_batch=micro_batch,
                       seq_len=seq_len, eval_every=0, out=None if out is None else str(out),
                       warmup_steps=min(5, steps), autocast=autocast).validate()


def check_runnable(model: str, cfg: SchemeConfig, world: int, micro_batch: int,
                   steps: int, backend: str = "gloo") -> None:
    """Refuse, before any run, what the runtime would refuse or the host could not hold. gloo
    ranks hold the model in the host's memory; NCCL ranks hold it on their GPUs, which nothing
    checks before the run: the host estimate (CPU fp32, attention scores materialized) would
    refuse runs a GPU holds with FlashAttention and bf16."""
    from scape.train.launch import check_host_memory

    config = train_config(model, cfg, micro_batch, steps)
    if backend == "gloo":
        check_host_memory(config, world)


def measure(model: str, cfg: SchemeConfig, world: int, micro_batch: int, steps: int,
            netbed, out: Path, seq_len: int | None = None, backend: str = "gloo",
            share_gpu: bool = False) -> dict:
    from scape.train.launch import launch

    # on GPUs in bf16 autocast, as `scape calibrate compute` times the forward and backward there
    tc = train_config(model, cfg, micro_batch, steps, out, seq_len,
                      autocast="bf16" if backend == "nccl" else None)
    return launch(tc, world, backend, netbed=netbed, share_gpu=share_gpu)


def link_name(netbed, backend: str = "gloo", share_gpu: bool = False) -> str:
    """What joined the ranks, as the table's `netbed` column says it."""
    if netbed:
        return str(netbed)
    if backend == "nccl":
        return "nccl sockets, shared GPU" if share_gpu else "nccl"
    return "loopback"


def row(spec: str, world: int, link: str, measured: dict, predicted: StepResult) -> dict:
    m, p = measured["median_step_s"], predicted.step_time_s
    b = measured["breakdown_median_s"]
    kernels = sum(v for k, v in b.items() if k not in ("fwd_bwd_s", "comm_s", "wait_s"))
    return {
        "scheme": spec, "ranks": world, "netbed": link,
        "measured_step_s": m, "predicted_step_s": p, "error_pct": 100 * (p / m - 1),
        "measured_fwd_bwd_s": b.get("fwd_bwd_s", 0.0), "measured_comm_s": b.get("comm_s", 0.0),
        "measured_kernels_s": kernels,
        "predicted_compute_s": predicted.compute_s,
        "predicted_compression_s": predicted.compression_s,
        "predicted_exposed_comm_s": predicted.exposed_comm_s,
        "bytes_per_step": measured["bytes_per_step"],
        # calibrate times collectives and kernels, never a training step: no step is fitted
        "role": "held-out",
    }


def summarize(df: pd.DataFrame) -> dict:
    """Median and max |error|; with several rounds also the median and max spread of the
    rounds' measurements (aggregate's measured_spread_pct)."""
    err = df["error_pct"].abs()
    out = {"median_abs_error_pct": float(err.median()), "max_abs_error_pct": float(err.max()),
           "n": len(df), "median_error_pct": float(df["error_pct"].median()),
           "by_role": roles.by_role(df if "role" in df else df.assign(role="held-out"))}
    spread = df["measured_spread_pct"].dropna() if "measured_spread_pct" in df else []
    if len(spread):
        out |= {"median_round_spread_pct": float(spread.median()),
                "max_round_spread_pct": float(spread.max())}
    return out


def save(df: pd.DataFrame, out: Path, config: dict) -> list[Path]:
    """CSV with the resolved config and git revision beside it, and a figure."""
    import json

    out.mkdir(parents=True, exist_ok=True)
    csv = out / "validate.csv"
    with atomic_path(csv) as tmp:  # minutes of runs: whole or not at all
        df.to_csv(tmp, index=False)
    meta = out / "validate.json"
    write_text_atomic(meta, json.dumps({**config, "git": git_revision(),
                                        "date": str(date.today()), **summarize(df)}, indent=2))
    png = figure(df, out / "validate.png")
    return [csv, meta, png]


def figure(df: pd.DataFrame, png: Path) -> Path:
    """Predicted against measured step, one colour per link and rank count, with the +-5%
    band; the legend below the square plot, where it hides no point."""
    from reports import figure_style as fs

    fig, axes = fs.figure(figsize=(6.5, 7))
    ax = axes[0][0]
    for (netbed, ranks), group in df.groupby(["netbed", "ranks"]):
        ax.scatter(group["measured_step_s"] * 1e3, group["predicted_step_s"] * 1e3,
                   label=f"{netbed}, {ranks} ranks", s=25)
    hi = 1.1 * max(df["measured_step_s"].max(), df["predicted_step_s"].max()) * 1e3
    ax.plot([0, hi], [0, hi], color="grey", lw=1)
    ax.fill_between([0, hi], [0, 0.95 * hi], [0, 1.05 * hi], color="grey", alpha=0.15,
                    label="±5%")
    ax.set(xlabel="measured median step (ms)", ylabel="predicted step (ms)", xlim=(0, hi),
           ylim=(0, hi), title="scape validate: predicted against measured")
    fs.legend_outside(ax, "lower center", ncols=2)
    return fs.save(fig, png, dpi=120)


def check_profile_complete(hw_path: str) -> None:
    from profiles.measured import missing_tables

    missing = missing_tables(Path(hw_path))
    if missing:
        which = "collectives" if {"nic", "collectives"} & set(missing) else "compute"
        from profiles.files import ROOT

        if (ROOT / "hardware" / Path(hw_path).name).resolve() == Path(hw_path).resolve():
            # a shipped profile describes a cluster, not this machine: nothing to calibrate
            raise UserError(f"--profile {Path(hw_path).stem} describes a cluster, not this "
                            f"machine (it lacks {', '.join(missing)}); validate runs a measured "
                            "profile: scape calibrate collectives --out NAME, then "
                            "--profile measured/NAME")
        raise UserError(f"profile {hw_path} lacks {', '.join(missing)}: run scape calibrate "
                        f"{which} --out {Path(hw_path).stem} first")
