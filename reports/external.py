"""`scape validate --external NAME`: other people's measurements, predicted (DESIGN section 9).

Protocol (printed with every result): the network (cost per ring step, bandwidth through the
transport) and the compute (MFU per model, optimizer step per element, fixed cost per step)
are fitted ONLY on the dense AdamS rows: the computation/communication split of the dense steps,
every model and GPU count (simulator/step/external_fit.py). Kernel costs of the SCAPE reducer are
not fitted at all: they come from the hardware profile's kernel model. The socket transport's
store-and-forward unit per ring step is not fitted either: it is NCCL's, sourced in the data
file's [transport] table. Every other row (SCAPE at
every density, with and without the distributed optimizer and CPU offload; the dense step times,
which the split sums to) is predicted by simulating the run's step on the fitted profile.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pandas as pd

from profiles import HardwareProfile, UserError, load_hardware, load_model
from profiles.external import ExternalData, ExternalRow, load_external
from profiles.hardware import Transport
from reports import roles
from reports.external_memory import MEMORY_PROTOCOL, memory_summary, memory_table
from reports.tables import git_revision, refuse_special_files
from scape.plan import plan
from simulator.step.external_fit import (
    SERIES,
    DenseRow,
    ExternalFit,
    accum_of,
    dense_dtypes,
    fit_dense,
    scheme_of,
)
from simulator.step.simulate import simulate_step
from simulator.step.step_config import StepConfig
from vocabulary.atomic import to_csv_atomic, write_text_atomic
from vocabulary.names import AUTO

BASE_HARDWARE = "vista-gh200"  # the cluster the authors ran on, before the fit
PREDICTED_QUANTITIES = ("step_ms", "compute_ms", "comm_ms")


def _step_config(ext: ExternalData, row: ExternalRow, hw: HardwareProfile) -> StepConfig:
    config = ext.config(row)
    if config is None:
        raise UserError(f"{row.cite}: no launch settings for {row.model} {row.series}")
    model = load_model(row.model)
    return StepConfig(model=model, hardware=hw, gpus=row.gpus, scheme=scheme_of(row, config),
                      micro_batch=config["micro_batch_size"],
                      seq_len=config["seq_length"],
                      global_batch=config["global_batch_size"], dtypes=dense_dtypes(),
                      algo=AUTO).validate()


def is_fit_input(ext: ExternalData, row: ExternalRow) -> bool:
    """A dense AdamS computation or communication number of a run with launch settings."""
    return (row.quantity in ("compute_ms", "comm_ms") and ext.config(row) is not None
            and SERIES.match(row.series)["scheme"] == "adams")


def dense_rows(ext: ExternalData) -> list[DenseRow]:
    """The dense AdamS computation/communication rows: the fit's only inputs."""
    split: dict[tuple, dict[str, float]] = {}
    first: dict[tuple, ExternalRow] = {}
    for r in ext.rows:
        if is_fit_input(ext, r):
            key = (r.model, r.series, r.gpus, r.table)
            split.setdefault(key, {})[r.quantity] = r.value / 1e3
            first.setdefault(key, r)
    out = []
    for key, values in sorted(split.items()):
        row = first[key]
        model, series, gpus, _ = key
        config = ext.config(row)
        cfg = scheme_of(row, config)
        profile = load_model(model)
        mb = config["micro_batch_size"]
        out.append(DenseRow(
            key=f"{model} {series} {gpus} GPUs", model=profile, gpus=gpus,
            accum=accum_of(config["global_batch_size"], mb, gpus), micro_batch=mb,
            seq_len=config["seq_length"],
            distributed_optimizer=bool(config.get("use_distributed_optimizer")),
            plan=plan(cfg, profile.n_params, gpus, dense_dtypes()),
            comm_s=values.get("comm_ms"), compute_s=values.get("compute_ms")))
    return out


def fitted_hardware(fit: ExternalFit, base: HardwareProfile, name: str) -> HardwareProfile:
    """`base` with the fitted transport (TCP sockets: NCCL_NET=Socket) and compute."""
    line = base.nic.bw_Gbps * 1e9 / 8
    src = (f"fitted by `scape validate --external` on {len(fit.inputs)} dense AdamS rows "
           "(communication and computation split) only")
    return replace(
        base, name=name,
        transport=Transport("socket", fit.bandwidth_Bps / line, fit.alpha_s * 1e6, 0.0, src,
                            chunk_kib=fit.chunk_bytes / 1024 if fit.chunk_bytes else None),
        compute=replace(base.compute, step_fixed_ms=fit.step_fixed_s * 1e3, source=src),
        model_mfu=dict(fit.mfu),
        kernels={**base.kernels, "optimizer_adams": {
            "fixed_us": 0.0, "ns_per_element": fit.optimizer_s_per_element * 1e9,
            "residual_pct": 0.0}})


def predict_row(ext: ExternalData, row: ExternalRow, hw: HardwareProfile) -> float:
    """Seconds the simulator gives for `row`'s quantity."""
    result = simulate_step(_step_config(ext, row, hw))
    if row.quantity == "step_ms":
        return result.step_time_s
    if row.quantity == "comm_ms":
        return result.exposed_comm_s
    return result.step_time_s - result.exposed_comm_s


def validate_external(name: str, hardware: str = BASE_HARDWARE
                      ) -> tuple[pd.DataFrame, ExternalFit, dict]:
    """Fit on the dense rows, predict every row that has launch settings; the table, the fit,
    and what was left out (rows without launch settings, with why)."""
    ext = load_external(name)
    base = load_hardware(hardware)
    fit = fit_dense(dense_rows(ext), base, ext.chunk_bytes)
    hw = fitted_hardware(fit, base, f"{base.name}-socket")
    rows = []
    memory, skipped = memory_table(ext)  # memory rows: their own table, in MiB
    for r in ext.rows:
        if r.quantity not in PREDICTED_QUANTITIES:
            continue
        if ext.config(r) is None:
            skipped.append({"row": r.cite, "why": "no public launch settings (micro-batch, "
                            "model shape) for this table"})
            continue
        try:
            predicted = predict_row(ext, r, hw)
        except UserError as exc:  # name the profile the user gave, not the fit made from it
            raise UserError(f"--profile {hardware}: the authors' runs are fitted on this "
                            f"profile's hardware and then predicted, and {r.series} ({r.cite}) "
                            "cannot be: "
                            f"{str(exc).replace(f'profile {hw.name} ', 'the fit ')}; give a "
                            f"profile that has it, or leave --profile out ({BASE_HARDWARE})"
                            ) from None
        fitted = is_fit_input(ext, r)
        rows.append({"series": r.series, "model": r.model, "gpus": r.gpus,
                     # what was measured (step, comm, compute); the values are in seconds:
                     # the authors' names (step_ms, ...) say their files' unit, not these
                     "quantity": r.quantity.removesuffix("_ms"), "measured_s": r.value / 1e3,
                     "predicted_s": predicted,
                     "error_pct": 100 * (predicted / (r.value / 1e3) - 1),
                     "fitted": fitted, "role": role_of(r.series, fitted), "source": r.cite})
    table = pd.DataFrame(rows)
    meta = {"external": name, "hardware": hardware, "fitted_profile": hw.name,
            "transport": ext.transport, "git_revision": git_revision(), "skipped": skipped,
            "memory": memory}
    return table, fit, meta


# A row's part in the protocol: a fit input; in sample (a dense step row, which the fitted
# computation and communication rows of the same run sum to: the fit reproduces it, it does
# not predict it); or held out (a SCAPE row: nothing of SCAPE was fitted)
ROLES = roles.ROLES


def role_of(series: str, fitted: bool) -> str:
    if fitted:
        return "fitted"
    return "held-out" if series.startswith("scape") else "in-sample"


def summary(table: pd.DataFrame) -> dict:
    """The held-out rows' figures (the headline), and the in-sample rows' on their own."""
    held = table[table["role"] == "held-out"]
    inside = table[table["role"] == "in-sample"]
    figures = roles.figures(held["error_pct"])
    return {"predicted_rows": figures["rows"],
            "median_abs_error_pct": figures["median_abs_error_pct"],
            "max_abs_error_pct": figures["max_abs_error_pct"],
            "median_error_pct": figures["median_error_pct"],
            "scape_rows": int(held["series"].str.startswith("scape").sum()),
            "in_sample": roles.figures(inside["error_pct"])}


def protocol_text(fit: ExternalFit) -> str:
    mfu = ", ".join(f"{m} {v:.3f}" for m, v in fit.mfu.items())
    return (
        "Fitted ONLY on the dense AdamS computation/communication rows "
        f"({len(fit.inputs)} numbers): cost per ring step {fit.alpha_s * 1e3:.3f} ms, "
        f"bandwidth through the transport {fit.bandwidth_Bps / 1e9:.3f} GB/s per GPU, "
        f"MFU {mfu}, optimizer step {fit.optimizer_s_per_element * 1e12:.1f} ps per element, "
        f"fixed cost per step {fit.step_fixed_s * 1e3:.1f} ms; assumed, not fitted: each ring "
        f"step stores and forwards up to {fit.chunk_bytes / 2**20:g} MiB per NIC (NCCL's "
        "proxy slice x ring channels, sourced in the data file's [transport]). "
        "Rows are fitted (role fitted), in sample (role in-sample: the dense step rows, which "
        "the fitted computation and communication rows of the same runs sum to) or held out "
        "(role held-out: every SCAPE row, nothing of SCAPE fitted); the headline figures are "
        "the held-out rows'. The SCAPE reducer's kernels come from the profile's kernel model, "
        "not from any SCAPE measurement.")


SOCKET_PROFILE = "vista-gh200-socket"  # profiles/hardware/, written from the fit


# tables of the base profile the fitted one replaces (the fit prices the Simple ring of a socket
# transport without NCCL's tuner), and the key it replaces in [compute]
REPLACED_TABLES = ("transport", "model_mfu", "kernels", "nccl")


def fitted_profile_text(fit: ExternalFit, base: HardwareProfile, name: str,
                        command: str, transport: dict | None = None) -> str:
    """The fitted cluster as a hardware profile: `base`'s TOML with its name and description
    replaced, its own [transport], [model_mfu], [kernels.*], [nccl] and step_fixed_ms dropped,
    and the fitted ones added, each with the rows and the command it came from."""
    src = (f"fitted by `{command}` (git {git_revision()}) on {len(fit.inputs)} dense AdamS "
           "rows of the SCAPE authors' GH200 runs (computation/communication split, "
           "profiles/external/scape-sc26.toml) only; NCCL_NET=Socket, NCCL_IB_DISABLE=1 in "
           "their training scripts (the scaling scripts set none; the rows' bandwidth says "
           "sockets)")
    line = base.nic.bw_Gbps * 1e9 / 8
    lines = []
    dropping = False  # inside a table of `base` the fit replaces
    for raw in Path(base.path).read_text().splitlines():
        if raw.lstrip().startswith("["):
            dropping = raw.split("]")[0].lstrip("[ ").strip().startswith(REPLACED_TABLES)
        if dropping or raw.startswith("step_fixed_ms"):
            continue
        if raw.startswith("name = "):
            raw = f"name = {json.dumps(name)}"  # a TOML basic string: JSON's escapes
        elif raw.startswith("description = "):
            raw = (f'description = "{base.name} with NCCL over TCP sockets, as the SCAPE '
                   'authors ran it: transport, MFU and optimizer step fitted to their dense '
                   'AdamS runs"')
        lines.append(raw)
        if raw.strip() == "[compute]":
            lines += [f"step_fixed_ms = {fit.step_fixed_s * 1e3:.6g}",
                      f'step_fixed_ms_source = "{src}"']
    mfu = "\n".join(f'"{m}" = {v:.6g}' for m, v in sorted(fit.mfu.items()))
    lines += [
        "", "# Written by `scape validate --external scape-sc26 --write-profile`: do not edit.",
        "[transport]", 'kind = "socket"',
        f"efficiency = {fit.bandwidth_Bps / line:.6g}  # of the NIC's line rate, per GPU",
        f"latency_us = {fit.alpha_s * 1e6:.6g}  # per ring step", "call_us = 0.0",
        f'source = "{src}"', *_chunk_lines(fit, transport or {}), "",
        "[model_mfu]", mfu, f'source = "{src}"', "",
        "[kernels.optimizer_adams]  # Megatron's whole optimizer step, per element updated",
        "fixed_us = 0.0", f"ns_per_element = {fit.optimizer_s_per_element * 1e9:.6g}",
        "residual_pct = 0.0", ""]
    return "\n".join(lines)


def _chunk_lines(fit: ExternalFit, transport: dict) -> list[str]:
    """The store-and-forward unit the fit assumed, with the data file's source for it."""
    if not fit.chunk_bytes:
        return []
    src = transport.get("chunk_kib_source", "assumed by the fit")
    return ["# assumed by the fit (not fitted): store-and-forward bytes per NIC and ring step",
            f"chunk_kib = {fit.chunk_bytes / 1024:.6g}", f'chunk_kib_source = "{src}"']


def write_outputs(table: pd.DataFrame, fit: ExternalFit, meta: dict, out: Path) -> dict:
    refuse_special_files(out)
    out.mkdir(parents=True, exist_ok=True)
    files = {"csv": out / "external.csv", "json": out / "external.json",
             "png": out / "external.png", "memory_csv": out / "external-memory.csv"}
    to_csv_atomic(table, files["csv"], index=False)
    memory = meta["memory"]
    to_csv_atomic(memory, files["memory_csv"], index=False)
    doc = {**{k: v for k, v in meta.items() if k != "memory"},
           "memory": {"protocol": MEMORY_PROTOCOL, "summary": memory_summary(memory),
                      "rows": memory.to_dict(orient="records")},
           "protocol": protocol_text(fit), "fit": {
        "alpha_s": fit.alpha_s, "bandwidth_Bps": fit.bandwidth_Bps, "mfu": fit.mfu,
        "optimizer_s_per_element": fit.optimizer_s_per_element,
        "step_fixed_s": fit.step_fixed_s, "chunk_bytes": fit.chunk_bytes,
        "inputs": list(fit.inputs), "residuals_pct": fit.residuals_pct},
        "summary": summary(table), "rows": table.to_dict(orient="records")}
    write_text_atomic(files["json"], json.dumps(doc, indent=1))
    figure(table, files["png"])
    return files


VARIANTS = ("-distopt-offload", "-distopt")  # the run options a series name ends with


def _family(series: str) -> tuple[str, str]:
    """A series split into its scheme family and its run variant: "scape-d0.1-distopt" is
    ("scape-d0.1", "distopt"), "adams" is ("adams", "plain")."""
    for suffix in VARIANTS:
        if series.endswith(suffix):
            return series.removesuffix(suffix), suffix.removeprefix("-")
    return series, "plain"


def figure(table: pd.DataFrame, path: Path) -> Path:
    """Step time against GPUs, measured (dots) and predicted (lines): a row per model, a
    panel per scheme family (AdamS, SCAPE at each density) so each holds its few run variants
    (plain, distributed optimizer, offload) in a colour and marker each; log axes labelled
    with plain numbers (4, 8, 16 GPUs; 0.5, 1, 2 s); rows share their step-time axis."""
    from reports import figure_style as fs

    steps = table[table["quantity"] == "step"].copy()
    steps[["family", "variant"]] = [_family(s) for s in steps["series"]]
    models = sorted(steps["model"].unique())
    families = list(dict.fromkeys(steps["family"]))
    variants = [v for v in ("plain", *(s.removeprefix("-") for s in reversed(VARIANTS)))
                if v in set(steps["variant"])]
    style = {v: {"color": f"C{i}", "marker": "os^"[i % 3]} for i, v in enumerate(variants)}
    fig, axes = fs.figure(len(families), len(models), sharey="row",
                          figsize=(3.6 * len(families) + 1.6, 3.4 * len(models)))
    for row, model in zip(axes, models, strict=True):
        for ax, family in zip(row, families, strict=True):
            part = steps[(steps["model"] == model) & (steps["family"] == family)]
            for variant, g in part.groupby("variant", sort=False):
                g = g.sort_values("gpus")
                ax.plot(g["gpus"], g["measured_s"], linestyle="none", label=variant,
                        **style[variant])
                ax.plot(g["gpus"], g["predicted_s"], "-", color=style[variant]["color"],
                        alpha=0.7)
            fs.gpu_axis(ax, sorted(steps["gpus"].unique()), rotation=0)
            ax.set_yscale("log")
            fs.plain_log_axis(ax.yaxis)
            ax.set_title(f"{model}: {family}", fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
        row[0].set_ylabel("step time (s)")
    for ax in axes[-1]:
        ax.set_xlabel("GPUs")
    handles = [_variant_handle(style[v], v) for v in variants]
    fig.legend(handles=handles, loc="outside right upper", fontsize=8,
               title="dots: measured\nlines: predicted", title_fontsize=8)
    return fs.save(fig, path)


def _variant_handle(style: dict, label: str):
    """A legend entry: the variant's marker on its predicted line."""
    from matplotlib.lines import Line2D

    return Line2D([], [], linestyle="-", label=label, **style)
