"""What `scape reproduce` puts beside its prediction: how the predicted speedup moves with the
NIC bandwidth and the micro-batch (a table and a figure), and the same prediction with forward
and backward at the rate a GPU measured (`--compute-profile`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd

from profiles import HardwareProfile, UserError, load_hardware
from reports.reproduce_settings import (
    GPUS,
    MICRO_BATCH_SWEEP,
    NIC_SWEEP_GBPS,
    SETTINGS,
    setting_config,
)
from simulator.step.simulate import simulate_step


def sensitivity(hw: HardwareProfile) -> pd.DataFrame:
    """SCAPE-99% speedup over dense AdamS against NIC bandwidth and against micro-batch."""
    rows = []
    for s in SETTINGS:
        for gbps in NIC_SWEEP_GBPS:
            h = replace(hw, nic=replace(hw.nic, bw_Gbps=float(gbps)))
            dense = simulate_step(setting_config(s, h, "dense-adams", 0.0)).step_time_s
            sparse = simulate_step(setting_config(s, h, "scape", 0.99)).step_time_s
            rows.append({"model": s.model, "sweep": "nic_Gbps", "x": gbps,
                         "speedup": dense / sparse})
        for mb in MICRO_BATCH_SWEEP:
            dense = simulate_step(setting_config(s, hw, "dense-adams", 0.0, mb)).step_time_s
            sparse = simulate_step(setting_config(s, hw, "scape", 0.99, mb)).step_time_s
            rows.append({"model": s.model, "sweep": "micro_batch", "x": mb,
                         "speedup": dense / sparse})
    return pd.DataFrame(rows)


def _nic_label(hw: HardwareProfile | None) -> tuple[str, float | None]:
    """The NIC sweep's axis label, as what it plots: the NIC's line rate, which a transport
    (vista-gh200-socket: NCCL over TCP sockets) moves only a fraction of; and that fraction
    (None where the NIC's own efficiency applies, or the profile is unknown)."""
    per = "per NIC" if hw is None or hw.nic.nics_per_node != 1 else "per node, one NIC"
    if hw is None or hw.transport is None:
        return f"NIC line rate (Gb/s {per})", None
    eff = hw.transport.efficiency
    return (f"NIC line rate (Gb/s {per}); the {hw.transport.kind} transport moves "
            f"{100 * eff:.2g}% of it"), eff


def _profile(hardware: str | HardwareProfile) -> HardwareProfile | None:
    """The profile behind a name (None where it is no profile here: the figure still draws,
    with the plain line-rate label)."""
    if isinstance(hardware, HardwareProfile):
        return hardware
    try:
        return load_hardware(hardware)
    except UserError:
        return None


def sensitivity_figure(df: pd.DataFrame, path: Path, hardware: str | HardwareProfile) -> Path:
    """The two sweeps side by side; the NIC axis is the line rate the sweep sets, with what
    the profile's transport moves of it on a second axis above; one legend below both."""
    from reports import figure_style as fs

    hw = _profile(hardware)
    name = hw.name if hw is not None else str(hardware)
    nic_label, eff = _nic_label(hw)
    fig, axes = fs.figure(2, figsize=(11, 4.8))
    for ax, (sweep, xlabel) in zip(axes[0], (("nic_Gbps", nic_label),
                                             ("micro_batch", "micro-batch size (grad-accum as "
                                              "in the setting)")), strict=True):
        part = df[df["sweep"] == sweep]
        for model, g in part.groupby("model"):
            ax.plot(g["x"], g["speedup"], marker="o", label=model)
        ax.axhline(3.26, color="grey", linestyle="--", linewidth=1,
                   label="paper: 3.26x (Llama-1.8B)")
        ticks = sorted(part["x"].unique())
        fs.gpu_axis(ax, ticks, rotation=0)
        ax.set_xlabel(fs.wrap(xlabel, 60), fontsize=9)
        ax.set_ylabel("SCAPE 99% step speedup over dense AdamS")
        ax.grid(True, alpha=0.3)
        if sweep == "nic_Gbps" and eff is not None:
            _moved_axis(ax, ticks, eff)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=len(labels), fontsize=8)
    fig.suptitle(f"Sensitivity of the predicted SCAPE speedup ({GPUS} GPUs, {name} profile)")
    return fs.save(fig, path, dpi=120)


def _moved_axis(ax, ticks: list[float], eff: float) -> None:
    """A top axis at the same points: the Gb/s the transport moves at each line rate."""
    from reports import figure_style as fs

    top = ax.secondary_xaxis("top", functions=(lambda x: x * eff, lambda x: x / eff))
    fs.plain_log_axis(top.xaxis, [t * eff for t in ticks])
    top.xaxis.set_major_formatter(fs.plain_formatter(digits=2))
    top.tick_params(axis="x", which="minor", top=False)
    top.set_xlabel("moved through the transport (Gb/s)", fontsize=9)


def measured_compute(hw: HardwareProfile, compute_profile: str) -> tuple[HardwareProfile, dict]:
    """`hw` with each setting's forward and backward priced at the rate a measured profile
    timed for that model (issue 15 item 4): its MFU of its own matmul peak x that peak is the
    achieved FLOP/s; over the datasheet peak of its GPU ([measured] gpu_profile, a shipped
    profile) that is an MFU, which on `hw`'s GPU scales with the two datasheet peaks (an
    H100 and a GH200's Hopper GPU: the same 989.4 TFLOP/s). Returns (that profile, the MFU
    per model)."""
    if not compute_profile.strip():
        raise UserError("--compute-profile: give a measured profile, measured/NAME (scape "
                        "calibrate compute writes one)")
    try:
        m = load_hardware(compute_profile)
    except UserError as exc:
        if "unknown hardware profile" not in str(exc):  # a profile found but broken: as is
            raise
        raise UserError(f"--compute-profile {compute_profile}: {exc}; a measured profile is "
                        "named measured/NAME (scape profiles list shows them)") from None
    if not m.measured:
        raise UserError(f"--compute-profile {compute_profile}: not a measured profile; give "
                        "measured/NAME (scape calibrate compute writes one)")
    ref_name = m.measured.get("gpu_profile")
    if not ref_name:
        raise UserError(f"--compute-profile {compute_profile}: its [measured] table names no "
                        "gpu_profile (the shipped profile of the GPU it measured, whose "
                        "datasheet peak turns its speed into an MFU)")
    try:
        ref = load_hardware(ref_name)
    except UserError as exc:
        raise UserError(f"--compute-profile {compute_profile}: its [measured] gpu_profile "
                        f"{ref_name!r} is no hardware profile here ({exc})") from None
    mfus = {}
    for s in SETTINGS:
        timed = s.model in m.model_mfu or m.measured.get("compute_model") == s.model
        if not timed:
            raise UserError(f"--compute-profile {compute_profile}: it timed no forward and "
                            f"backward of {s.model}; run scape calibrate compute --model "
                            f"{s.model} there")
        mfus[s.model] = m.mfu_for(s.model) * m.gpu.peak_bf16_tflops / ref.gpu.peak_bf16_tflops
        if mfus[s.model] > 1:  # faster than the named GPU's datasheet: not that GPU
            raise UserError(f"--compute-profile {compute_profile}: {s.model} ran at "
                            f"{mfus[s.model]:,.2f}x the datasheet peak of its [measured] "
                            f"gpu_profile {ref_name} ({ref.gpu.peak_bf16_tflops:g} TFLOP/s); "
                            "that names another GPU than the one it measured")
    return replace(hw, model_mfu={**hw.model_mfu, **mfus}), mfus


def compute_check(hw: HardwareProfile, pred: pd.DataFrame, measured: pd.DataFrame, mfus: dict,
                  compute_profile: str) -> pd.DataFrame:
    """Dense AdamS's forward+backward per step on 32 GPUs, as `hw` prices it (`pred`, from
    `predict`) and from the measured compute (`measured`, `predict` of `measured_compute`'s
    profile), against the authors' GH200 computation time (the models they report)."""
    from profiles.external import authors_compute_rows

    authors = {r.model: r for r in authors_compute_rows() if r.gpus == GPUS}

    def dense_compute_s(df: pd.DataFrame, model: str) -> float:
        return float(df.loc[(df["model"] == model) & (df["scheme"] == "dense-adams"),
                            "compute_s"].iloc[0])

    rows = []
    for s in SETTINGS:
        model_s, meas_s = dense_compute_s(pred, s.model), dense_compute_s(measured, s.model)
        row = authors.get(s.model)
        # their table ran micro-batch 8; a step holds the same tokens at any micro-batch (the
        # global batch is fixed), so the setting's own micro-batch is compared as it is
        paper_s = row.value / 1e3 if row is not None else None
        rows.append({
            "model": s.model, "micro_batch": s.micro_batch,
            "profile_compute_s": model_s, "measured_compute_s": meas_s,
            "measured_mfu": mfus[s.model], "profile_mfu": hw.mfu_for(s.model),
            "authors_compute_s": paper_s,
            "profile_err_pct": None if paper_s is None else 100 * (model_s / paper_s - 1),
            "measured_err_pct": None if paper_s is None else 100 * (meas_s / paper_s - 1),
            "compute_profile": compute_profile,
            "authors_source": None if row is None else row.cite,
        })
    return pd.DataFrame(rows)


def side_by_side(pred: pd.DataFrame, measured: pd.DataFrame) -> pd.DataFrame:
    """Each (model, scheme) step predicted with the profile's compute and with the measured
    compute."""
    keys = ["model", "scheme", "sparsity"]
    cols = ["step_time_s", "compute_s", "speedup_vs_dense_adams"]
    return pred[keys + cols].merge(measured[keys + cols], on=keys,
                                   suffixes=("", "_measured_compute"))
