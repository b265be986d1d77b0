"""Fidelity of the step model (issue 19, item 6; issue 18, step times): published iteration
times (profiles/external/parallel-steps.csv: Megatron-LM with tensor and pipeline parallelism
on DGX A100, llm.c on A100 and H100, MosaicML's FSDP runs on A100 and H100, FlashAttention-2's
GPT runs on A100, NVIDIA's NeMo recipes of Nemotron-4 15B and 340B on DGX H100 in BF16 and of
GPT-3 175B and Nemotron-4 in FP8) against
`simulate_step` on the dgx-a100 and dgx-h100 profiles. Rows may name what differs from the GPT
layout (kv_heads, ffn, mlp, tied), their gradient reduction's width (grad_dtype), whether
their tensor-parallel communication overlapped its GEMMs (tp_overlap, as NeMo's
ub_tp_comm_overlap does: simulator/step/tp_overlap.py) and whether the distributed optimizer's
parameter all-gathers overlapped the next forward (overlap_param), and whether their linear
GEMMs ran FP8 (fp8: simulator/step/roofline.py); blank means GPT, bf16, not overlapped.

Forward and backward come from the profile's shapes model ([roofline], constants from
kernel-level sources and bench/fidelity_gemm.py), communication from the collective and NCCL
models. One constant, the share of the kernels' benchmark peaks a whole training step sustains
([roofline] sustained), is fitted on whole steps, per GPU: on A100 the eight iteration times of
Korthikanti et al. 2022 Table 5 (the korthikanti-* rows of profiles/external/parallel-steps.csv),
on H100 ten step times of GPT-3 175B from NVIDIA's dgxc-benchmarking recipes
(profiles/external/step-calibration.csv). Every other row of parallel-steps.csv is held out;
the script prints each one's error and the median and max |error| with the profiles as shipped,
and at the kernels' benchmark peaks (sustained 1) for comparison, then Korthikanti Table 4's
per-layer times (profiles/external/layer-times.csv) as a check of the kernels alone.

Each case runs as its source ran it; Narayanan's and Korthikanti's: GPT layout (learned
positions, tied embeddings, d_ff = 4h, vocabulary 51,200, sequence 2,048), Adam with fp32
master weights and a full gradient all-reduce (Megatron's DDP of 2021, no distributed
optimizer), overlapped with backward only under DDP=torch, the paper's micro-batch, chunks per
stage and recomputation, and attention as Megatron-LM ran it before FlashAttention (batched
score and context GEMMs, fused softmax).

The bands `scape simulate`, `compare` and `plan` show come from bench/step_loso.py: every
source predicted by a share fitted without it (rows held out here but from a fitted source are
not independent checks).

Usage: python bench/fidelity_parallel.py [--csv out.csv] [--cases narayanan]
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cli.outputs import script_outputs  # noqa: E402
from profiles import load_hardware, load_model  # noqa: E402
from profiles.models import Arch  # noqa: E402
from reports import roles  # noqa: E402
from scape.plan import Dtypes, make_config  # noqa: E402
from simulator.step.compute import fwd_bwd  # noqa: E402
from simulator.step.simulate import simulate_step  # noqa: E402
from simulator.step.step_config import StepConfig  # noqa: E402
from simulator.step.streams import tp_allreduce_s  # noqa: E402

DATA = REPO / "profiles" / "external" / "parallel-steps.csv"
LAYERS = REPO / "profiles" / "external" / "layer-times.csv"
H100_STEPS = REPO / "profiles" / "external" / "step-calibration.csv"
H100_PROFILES = ("dgx-h100", "aws-p5", "oci-h100-roce", "gcp-a3-mega")  # the same HGX H100 board
# the A100's sustained share is fitted on these whole steps (Korthikanti et al. 2022 Table 5),
# as the H100's is on NeMo's: the rest of parallel-steps.csv is held out
A100_CALIBRATION = "korthikanti-"


# the optional columns and the values each may take (blank: the first)
CHOICES = {"mlp": ("gelu", "squared_relu", "swiglu"), "grad_dtype": ("bf16", "fp32"),
           "loss": ("fp32", "eager", "fused", "chunked"), "optimizer_dtype": ("fp32", "bf16")}
FLAGS = ("tied", "tp_overlap", "overlap_param", "fp8", "dropout")  # true or false


def given(row, column: str, default):
    """A column the row may leave blank (older rows predate it): `default` where blank; a
    value outside the column's choices stops the bench, naming the row."""
    value = getattr(row, column, None)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return default
    if column in FLAGS:
        flag = {"true": True, "false": False}.get(str(value).strip().lower())
        if flag is None:
            raise SystemExit(f"{row.case}: {column} must be true or false, got {value!r}")
        return flag
    if column in CHOICES and value not in CHOICES[column]:
        raise SystemExit(f"{row.case}: {column} must be one of {', '.join(CHOICES[column])}, "
                         f"got {value!r}")
    return value


def gpt(row) -> object:
    """The case's model as a profile (the shipped gpt-345m with its numbers replaced): GPT
    layout unless the row says otherwise. `mlp` squared_relu (Nemotron-4: a plain up and down
    projection of width `ffn`, squared ReLU, no biases, grouped-query attention with `kv_heads`)
    is built as the llama family with d_ff = 2 ffn / 3, whose three SwiGLU projections then
    hold exactly the parameters and FLOPs of the two plain ones (3 h 2f/3 = 2 h f); what
    differs is the GEMMs' shapes and the elementwise bytes of the gate. `mlp` swiglu (Llama:
    gate, up and down projections of width `ffn`, RMSNorm, rotary positions) is the llama
    family as it is."""
    base = load_model("gpt-345m")
    hidden = int(row.hidden)
    ffn = int(given(row, "ffn", 4 * hidden))
    mlp = given(row, "mlp", "gelu")
    squared_relu = mlp == "squared_relu"
    if squared_relu and (2 * ffn) % 3:
        raise SystemExit(f"{row.case}: ffn {ffn} has no whole 2/3 for the llama layout")
    arch = Arch(n_layers=int(row.layers), d_model=hidden, n_heads=int(row.heads),
                n_kv_heads=int(given(row, "kv_heads", row.heads)),
                d_ff=2 * ffn // 3 if squared_relu else ffn, vocab_size=int(row.vocab),
                seq_len=int(row.seq), tied_embeddings=given(row, "tied", True),
                source=str(DATA), assumed=None, dropout=given(row, "dropout", None))
    return replace(base, name=row.case, description=row.case, arch=arch, reference_params=None,
                   family="gpt" if mlp == "gelu" else "llama")


def measured_step_s(row) -> float:
    """The stated time, global batch over the stated tokens/s, or the source's FLOPs per step
    over GPUs x the stated TFLOP/s: Narayanan et al.'s eq. (3) (`flops`), or the
    FlashAttention-2 paper's 6 s N + 12 l h s^2 per sequence, N every parameter (`fa2`)."""
    if row.step_from == "stated":
        return float(row.step_s)
    if row.step_from == "tokens":
        return row.global_batch * row.seq / row.tokens_per_s
    if row.step_from == "fa2":
        n, s = gpt(row).n_params, row.seq
        per_seq = 6 * s * n + 12 * row.layers * row.hidden * s**2  # FLOP
        return row.global_batch * per_seq / (row.gpus * row.tflops_per_gpu * 1e12)
    b, s, h, n_layers, vocab = row.global_batch, row.seq, row.hidden, row.layers, row.vocab
    flops = 96 * b * s * n_layers * h**2 * (1 + s / (6 * h) + vocab / (16 * n_layers * h))
    return flops / (row.gpus * row.tflops_per_gpu * 1e12)


def check_params(row) -> None:
    """The GPT-layout model must have the parameters the source states (within 1%: MPT has
    no biases and ALiBi instead of learned positions)."""
    if isinstance(row.params, float) and math.isnan(row.params):
        return
    n = gpt(row).n_params
    if abs(n / row.params - 1) > 0.01:
        raise SystemExit(f"{row.case}: the model has {n:,} parameters, the source "
                         f"{row.params:,.0f}")


def step_config(row, hw) -> StepConfig:
    """The row's step on profile `hw`, as the source ran it."""
    scheme = make_config(row.scheme, optimizer="adamw", overlap_grad_reduce=bool(row.overlap_grad),
                         overlap_param_gather=given(row, "overlap_param", False))
    grad_bytes = {"bf16": 2, "fp32": 4}[given(row, "grad_dtype", "bf16")]
    return StepConfig(
        gpt(row), hw, int(row.gpus), scheme, micro_batch=int(row.micro_batch),
        seq_len=int(row.seq), dtypes=Dtypes(grad_bytes=grad_bytes),
        global_batch=int(row.global_batch), tp=int(row.tp), pp=int(row.pp),
        pp_schedule="interleaved" if row.chunks > 1 else "1f1b",
        virtual_stages=int(row.chunks) if row.chunks > 1 else None, recompute=row.recompute,
        sequence_parallel=bool(row.sequence_parallel), attention=row.attention,
        tp_comm_overlap=given(row, "tp_overlap", False), fp8=given(row, "fp8", False),
        loss=given(row, "loss", "fp32"), optimizer_dtype=given(row, "optimizer_dtype", "fp32"),
        metric_passes=int(given(row, "train_metrics", 0)),
        stack=given(row, "training_stack", "megatron"))


def simulate(row, hw) -> dict:
    cfg = step_config(row, hw)
    t0 = time.perf_counter()
    r = simulate_step(cfg)
    return {"predicted_s": r.step_time_s, "compute_s": r.compute_s, "tp_comm_s": r.tp_comm_s,
            "bubble_s": r.pipeline_bubble_s, "exposed_dp_s": r.exposed_comm_s,
            "sim_s": time.perf_counter() - t0}


def layer_ms(hw, case, row) -> tuple[float, float]:
    """Predicted forward and backward of one layer of the 22B model (Table 4's setting), each
    with its two tensor-parallel all-reduces, ms."""
    cfg = StepConfig(gpt(case), hw, 8, make_config("dense-ddp"), micro_batch=4, seq_len=2048,
                     tp=8, recompute=row.recompute, sequence_parallel=bool(row.sequence_parallel),
                     attention="unfused").validate()
    t = fwd_bwd(cfg.model, hw, 4, 2048, 8, recompute=row.recompute,
                sequence_parallel=bool(row.sequence_parallel), attention="unfused")
    tp = 2 * tp_allreduce_s(cfg)
    return 1e3 * (t.layer_fwd_s + tp), 1e3 * (t.layer_bwd_s + tp)


def sustained(hw, factor: float):
    """The profile sustaining `factor` of its kernels' benchmark peaks."""
    return replace(hw, roofline=replace(hw.roofline, sustained=factor))


def layer_check(hw, cases: pd.DataFrame) -> pd.DataFrame:
    """Korthikanti Table 4's ten per-layer forward and backward times (one layer of the 22B
    model) against the profile: a check of the kernels without the rest of a step."""
    case = cases[cases["case"] == "korthikanti-22B-full"].iloc[0]
    out = []
    for r in pd.read_csv(LAYERS, comment="#").itertuples():
        f, b = layer_ms(hw, case, r)
        out.append({"experiment": r.experiment, "fwd_ms": r.fwd_ms, "pred_fwd_ms": f,
                    "bwd_ms": r.bwd_ms, "pred_bwd_ms": b})
    return pd.DataFrame(out)


def authors_compute_check() -> pd.DataFrame:
    """The SCAPE authors' dense AdamS computation per step on GH200 (profiles/external/
    scape-sc26.toml, comp_comm_micro_bs_8: Llama-500M and 1.8B, micro-batch 8, global batch
    1024, 4-64 GPUs) against the dgx-h100 shapes model with the GH200's peak and HBM bandwidth
    (vista-gh200-socket [gpu]): forward+backward of one micro-batch times the micro-batches of a
    step. Neither model nor profile was fitted on these rows (vista-gh200-socket's [model_mfu]
    was, and is not used). The authors' computation also holds their optimizer step and other
    per-step work the shapes model leaves out."""
    from profiles.external import AUTHORS_MICRO_BATCH, authors_compute_rows, authors_micro_batches
    from simulator.step.compute import fwd_bwd

    h100, gh200 = load_hardware("dgx-h100"), load_hardware("vista-gh200-socket")
    hw = replace(h100, gpu=replace(h100.gpu, peak_bf16_tflops=gh200.gpu.peak_bf16_tflops,
                                   hbm_bw_GBps=gh200.gpu.hbm_bw_GBps))
    out = []
    for r in authors_compute_rows():
        m = load_model(r.model)
        micro = authors_micro_batches(r)  # micro-batches per step
        t = fwd_bwd(m, hw, AUTHORS_MICRO_BATCH, m.arch.seq_len)
        pred = micro * (t.fwd_s + t.bwd_s) * 1e3  # ms
        out.append({"model": r.model, "gpus": r.gpus, "micro_batches": micro,
                    "authors_ms": r.value, "predicted_ms": pred,
                    "error_pct": 100 * (pred / r.value - 1)})
    return pd.DataFrame(out)


def calibrate_steps(hw, rows: pd.DataFrame) -> tuple[float, pd.DataFrame]:
    """The sustained share at which these whole steps' median log error is zero (bisection:
    a lower share only slows every step), rounded to 0.005, and its table."""
    def median_log_error(factor):
        df = run({hw.name: sustained(hw, factor)}, rows)
        return float((df["predicted_s"] / df["measured_s"]).map(math.log).median()), df

    lo, hi = 0.50, 1.10
    for _ in range(14):
        mid = (lo + hi) / 2
        if median_log_error(mid)[0] > 0:  # predicted too slow: the GPU sustains more
            lo = mid
        else:
            hi = mid
    best = round((lo + hi) / 2 / 0.005) * 0.005
    return best, median_log_error(best)[1]


def run(hardware: dict, rows: pd.DataFrame) -> pd.DataFrame:
    out = []
    for row in rows.itertuples():
        check_params(row)
        measured = measured_step_s(row)
        sim = simulate(row, hardware[row.hardware])
        out.append({"case": row.case, "hardware": row.hardware, "scheme": row.scheme,
                    "tp": row.tp, "pp": row.pp, "v": row.chunks,
                    "tp_overlap": given(row, "tp_overlap", False),
                    "fp8": given(row, "fp8", False),
                    "gpus": row.gpus, "mb": row.micro_batch, "recompute": row.recompute,
                    "measured_s": measured, **sim,
                    "error_pct": 100 * (sim["predicted_s"] / measured - 1)})
    return pd.DataFrame(out)


def predicted_at_share(job: tuple) -> pd.Series:
    """(share, profiles, rows[, late knobs taken back]) -> each row's predicted step with
    every profile's sustained share set to `share` (bench/step_loso.py runs one per
    process)."""
    f, shipped, rows, *rest = job
    without = tuple(rest[0]) if rest else ()
    shipped, rows = without_late(without, shipped, rows)
    profiles = {n: sustained(h, f) for n, h in shipped.items()}
    with _tp_paid_once(enabled="recompute-tp" in without):
        return run(profiles, rows).set_index("case")["predicted_s"].rename(f)


def without_late(knobs: tuple[str, ...], profiles: dict, rows: pd.DataFrame
                 ) -> tuple[dict, pd.DataFrame]:
    """The profiles and rows with late choices taken back (profiles/external/late-constants.md
    entries 34-36): `flash2`, the MosaicML H100 rows on the profile's `flash` rates instead of
    FlashAttention-2's (e2463b2); `interference`, no SM share taken by a running collective
    (a440287); `recompute-tp` is taken back by _tp_paid_once while the rows run."""
    if "flash2" in knobs:
        mosaic = rows["case"].str.startswith("mosaic-h100") & (rows["attention"] == "flash2")
        rows = rows.assign(attention=rows["attention"].where(~mosaic, "flash"))
    if "interference" in knobs:
        profiles = {n: replace(h, compute=replace(h.compute, interference=0.0))
                    for n, h in profiles.items()}
    return profiles, rows


@contextlib.contextmanager
def _tp_paid_once(enabled: bool):
    """While it lasts, a fully recomputed layer's tensor-parallel collectives are paid once,
    as before e7848eb (simulator/step/tp_overlap.py layer_tp_s pays the forward's again in
    the backward)."""
    if not enabled:
        yield
        return
    from simulator.step import simulate as sim
    from simulator.step import tp_overlap

    def once(cfg):
        return (0.0, 0.0) if cfg.tp == 1 else tp_overlap._passes(cfg)

    shipped = sim.layer_tp_s
    sim.layer_tp_s = once
    try:
        yield
    finally:
        sim.layer_tp_s = shipped


def summary(df: pd.DataFrame, label: str) -> str:
    err = df["error_pct"].abs()
    return (f"{label}: held out {len(df)} rows, median |error| {err.median():.1f}%, max "
            f"{err.max():.1f}% ({df.loc[err.idxmax(), 'case']}), median error "
            f"{df['error_pct'].median():+.1f}%")


def split(cases: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The A100 calibration rows and the held-out rest of parallel-steps.csv."""
    a100_steps = cases[cases["case"].str.startswith(A100_CALIBRATION)]
    return a100_steps, cases.drop(a100_steps.index)


def shipped_profiles(cases: pd.DataFrame) -> dict:
    return {name: load_hardware(name) for name in sorted(set(cases["hardware"]))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", default=None, help="also write the table here")
    parser.add_argument("--cases", default=None, help="only cases whose name contains this")
    args = parser.parse_args()
    script_outputs(parser, {"--csv": args.csv})
    cases = pd.read_csv(DATA, comment="#")
    a100_steps, held = split(cases)
    rows = held[held["case"].str.contains(args.cases)] if args.cases else held
    t0 = time.perf_counter()
    shipped = shipped_profiles(cases)
    factor, fit = calibrate_steps(shipped["dgx-a100"], a100_steps)
    h100, h100_fit = calibrate_steps(load_hardware("dgx-h100"), pd.read_csv(H100_STEPS,
                                                                             comment="#"))
    fitted = {n: h100 if n in H100_PROFILES else factor for n in shipped}
    ran = {label: run(profiles, rows) for label, profiles in (
        ("shipped", shipped),
        ("peak", {n: sustained(h, 1.0) for n, h in shipped.items()}),
        ("refit", {n: sustained(h, fitted[n]) for n, h in shipped.items()}))}
    base = ran["shipped"]
    both = base[["case", "hardware", "tp", "pp", "v", "gpus", "mb", "recompute", "measured_s",
                 "predicted_s", "error_pct", "bubble_s", "tp_comm_s"]].assign(
        peak_error_pct=ran["peak"]["error_pct"], role="held-out")
    print(both.to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    columns = ["case", "gpus", "measured_s", "predicted_s", "error_pct"]
    print(f"\nA100 calibration rows (Korthikanti et al. 2022 Table 5, Megatron-LM on DGX A100) "
          f"at the fitted sustained share {factor:.3f} (dgx-a100):")
    print(fit[columns].to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    print(f"\nH100 calibration rows (NVIDIA dgxc-benchmarking GPT-3 175B, suites 24.11 and "
          f"25.02, profiles/external/step-calibration.csv) at the fitted "
          f"sustained share {h100:.3f} (H100 profiles: {', '.join(H100_PROFILES)}):")
    print(h100_fit[columns].to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    print("\ncheck, neither fitted nor counted (Korthikanti Table 4, one layer of the 22B model "
          "alone, ms) on dgx-a100 as shipped: a whole step's share prices kernels measured "
          "without the rest of a step")
    print(layer_check(shipped["dgx-a100"], cases).to_string(
        index=False, float_format=lambda x: f"{x:.2f}"))
    authors = authors_compute_check()
    err = authors["error_pct"].abs()
    print("\ncheck, neither fitted nor counted: the SCAPE authors' GH200 computation per step "
          "(dense AdamS, micro-batch 8) against the dgx-h100 shapes model at the GH200's peak "
          f"and HBM bandwidth: median |error| {err.median():.1f}%, max {err.max():.1f}%")
    print(authors.to_string(index=False, float_format=lambda x: f"{x:.1f}"))
    print()
    shipped_factors = ", ".join(f"{n} {h.roofline.sustained:g}" for n, h in shipped.items())
    print(summary(base, f"profiles as shipped (sustained: {shipped_factors})"))
    print(roles.line("in sample (the fitted calibration rows: A100 Korthikanti Table 5, H100 "
                     "step-calibration.csv, at the shares fitted now)",
                     pd.concat([fit["error_pct"], h100_fit["error_pct"]])))
    for source, part in base.groupby(base["case"].str.split("-").str[0], sort=False):
        print(summary(part.reset_index(drop=True), f"  {source} rows"))
    print(summary(ran["peak"], "kernels at their benchmark peaks (sustained 1)"))
    if any(not math.isclose(h.roofline.sustained, fitted[n], abs_tol=1e-9)
           for n, h in shipped.items()):
        print(summary(ran["refit"], f"sustained as fitted now (A100 {factor:.3f}, H100 "
                                    f"{h100:.3f})"))
    print(f"wall time {time.perf_counter() - t0:.1f} s")
    if args.csv:
        calibration = pd.concat([fit, h100_fit], ignore_index=True).assign(role="fitted")
        pd.concat([both, calibration[[c for c in calibration.columns if c in both.columns]]],
                  ignore_index=True).to_csv(args.csv, index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
