"""torchtitan's published H100 steps against the model (issue 61 item 3: FSDP runs priced too fast).

Every row of profiles/external/torchtitan-h100-steps.csv (torchtitan's December 2024 benchmark on
Meta's Grand Teton: Llama 3.1 8B, 70B and 405B, 8 to 512 H100 at the default 500 W limit; and
its June 2025 Async TP benchmark on the same hosts, Llama 3 8B and 70B at TP 8) is
simulated as its source states it, on profiles/hardware/grand-teton-h100.toml (the HBM2e part's
memory and bandwidth, its 500 W compute from a measured power-cap ratio; dgx-h100's sustained
share, fitted on other stacks' steps: nothing here is fitted on these rows):
- FSDP2 as dense-zero3 over the FSDP degree (`fsdp_scheme`), with AdamW, TP and CP as
  printed, the local batch one micro-batch (torchtitan ran no gradient accumulation there);
  with pipeline parallelism, what FSDP does there (simulator/step/step_config.py
  FSDP_UNDER_PP: parameters kept gathered through the step, dense-zero1), the local batch
  split into one micro-batch a stage (torchtitan's default: as many micro-batches as pipeline
  stages), every stage's outputs kept to the next step as PyTorch's pipelining did then
  (--pp-kept-outputs);
- the torchtitan stack, eager unless the row says torch.compile (simulator/layout/shapes.py
  eager_extra), Float8 as --fp8 (torchao's float8 linears, their casts priced as
  shapes.fp8_casts counts them), AsyncTP as TP communication overlapped;
- activation checkpointing: op-level selective, or full.
Rows the model refuses are listed with the reason. The error
is predicted / published - 1 of the step (published step = global batch x sequence / (TPS x
GPUs)); rows are grouped by what the run turned on.

`--bands PATH` writes these rows' "how sure" bands (profiles/external/torchtitan-step-
fidelity-bands.csv, read beside bench/step_loso.py's and bench/moe_steps.py's by
reports/step_fidelity.py): per (profile, layout class, dense), the rows' errors, each row a
configuration of its own, all held out (nothing is fitted on them); a step simulated on
grand-teton-h100 in one of these layouts then says how the model fared on them.

Run: SCAPE_PROFILE_DIR=profiles python bench/torchtitan_steps.py [--hardware PROFILE]
     [--bands PATH]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cli.outputs import script_outputs  # noqa: E402
from profiles import UserError  # noqa: E402
from reports.step_fidelity import layout_of, summarize_sources  # noqa: E402
from simulator.planning.options import (  # noqa: E402
    Batch,
    Overlap,
    Parallelism,
    Precision,
    Pricing,
    SchemeOptions,
    StepOptions,
)
from simulator.step.simulate import simulate_step  # noqa: E402
from simulator.step.step_config import FSDP_UNDER_PP  # noqa: E402

DATA = REPO / "profiles" / "external" / "torchtitan-h100-steps.csv"
HARDWARE = "grand-teton-h100"


def _flag(value) -> bool:
    return str(value).strip().lower() == "true"


def fsdp_scheme(pp: int) -> SchemeOptions:
    """torchtitan's data parallelism as a scheme: FSDP2 (dense-zero3), or under pipeline
    parallelism what FSDP does there (FSDP_UNDER_PP), with its optimizer, AdamW (its tomls'
    [optimizer] name). bench/moe_steps.py prices its torchtitan and FSDP rows with it too."""
    return SchemeOptions("dense-zero3" if pp == 1 else FSDP_UNDER_PP, optimizer="adamw")


def options(row, hardware: str) -> StepOptions:
    """The row's step as torchtitan ran it."""
    tp, pp = int(row.tp), int(row.pp)
    return StepOptions(
        row.model, hardware, int(row.gpus),
        scheme=fsdp_scheme(pp),
        batch=Batch(int(row.local_batch) // pp, int(row.seq), None, int(row.global_batch)),
        parallelism=Parallelism(tp=tp, pp=pp, cp=int(row.cp),
                                recompute=str(row.recompute)),
        precision=Precision(fp8=_flag(row.float8)),
        overlap=Overlap(tp_comm=_flag(row.async_tp) if tp > 1 else None),
        # December 2024: PyTorch's pipelining still kept every output until the next step
        pricing=Pricing(stack="torchtitan", torch_compile=_flag(row.compile),
                        pp_kept_outputs=True if pp > 1 else None))


def kind(row) -> str:
    """What the run turned on, the group its error is reported in."""
    parts = ["compile" if _flag(row.compile) else "eager"]
    if _flag(row.float8):
        parts.append("float8")
    if int(row.tp) > 1:
        parts.append("TP")
    if int(row.cp) > 1:
        parts.append("CP")
    return " + ".join(parts)


def source(row) -> str:
    """The benchmark a row is from: torchtitan's December 2024 tables (numbered) or its June
    2025 Async TP one (profiles/external/torchtitan-h100-steps.csv, `table`)."""
    return "torchtitan-2412" if str(row.table).isdigit() else "torchtitan-2506"


def price(row, hardware: str) -> dict:
    published = row.global_batch * row.seq / (row.tps_per_gpu * row.gpus)
    out = {"case": row.case, "table": row.table, "kind": kind(row), "gpus": row.gpus,
           "published_s": published, "hardware": hardware, "source": source(row)}
    try:
        cfg = options(row, hardware).config()
    except UserError as e:
        return {**out, "note": f"refused: {e}"}
    r = simulate_step(cfg)
    return {**out, "layout": layout_of(cfg), "predicted_s": r.step_time_s,
            "compute_s": r.compute_s, "exposed_comm_s": r.exposed_comm_s,
            "cp_comm_s": r.cp_comm_s, "error_pct": 100 * (r.step_time_s / published - 1),
            "note": ""}


def bands(df: pd.DataFrame) -> pd.DataFrame:
    """The priced rows' bands (module docstring: `--bands`): every row held out, each its own
    configuration."""
    held = df.dropna(subset=["error_pct"]).copy()
    held["schemes"] = "dense"  # FSDP2, or dense-zero1 under pipelining: dense either way
    held["framework"] = "torchtitan"
    held["config"] = held["case"]
    return summarize_sources(held).reset_index(drop=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hardware", default=HARDWARE,
                    help=f"the profile to price every row on (default {HARDWARE})")
    ap.add_argument("--bands", help="write the rows' bands here (shipped: "
                    "profiles/external/torchtitan-step-fidelity-bands.csv, priced on "
                    f"{HARDWARE})")
    args = ap.parse_args()
    if args.bands and args.hardware != HARDWARE:
        ap.error(f"--bands: the shipped bands are of the rows on their own hosts' profile, "
                 f"{HARDWARE}; drop --hardware {args.hardware}")
    script_outputs(ap, {"--bands": args.bands})
    rows = pd.read_csv(DATA, comment="#")
    df = pd.DataFrame([price(r, args.hardware) for r in rows.itertuples()])
    priced = df.dropna(subset=["error_pct"])
    pd.set_option("display.width", 200)
    print(f"# {len(rows)} published torchtitan H100 steps ({DATA.name}) on {args.hardware}; "
          f"nothing fitted on them\n")
    cols = ["case", "kind", "gpus", "published_s", "predicted_s", "error_pct", "compute_s",
            "exposed_comm_s", "cp_comm_s"]
    print(priced[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    e = priced["error_pct"]
    worst = priced.loc[e.abs().idxmax(), "case"]
    print(f"\n{len(priced)} rows priced: median |error| {e.abs().median():.1f}%, max "
          f"{e.abs().max():.1f}% ({worst}), median {e.median():+.1f}%")
    for k, g in priced.groupby("kind"):
        print(f"  {k}: {len(g)} rows, median |error| {g['error_pct'].abs().median():.1f}%, "
              f"median {g['error_pct'].median():+.1f}%")
    for r in df[df["error_pct"].isna()].itertuples():
        print(f"not priced: {r.case}: {r.note}")
    if args.bands:
        bands(df).to_csv(args.bands, index=False)
        print(f"bands written to {args.bands}")


if __name__ == "__main__":
    main()
