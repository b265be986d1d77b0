"""Published GPU-hours of pre-training runs against this tool's step model and goodput model
(issue 60 item 4: GPU-hours within 15%).

Each row of profiles/external/published-gpu-hours.csv that names a model and GPU with a
shipped profile (MODELS, HARDWARE below) is priced as its source states it: its GPU count,
layout (tensor, pipeline, context, expert parallelism; the rest data-parallel), sequence,
global batch, tokens, precision and recomputation; a row that leaves its GPU count or layout
unstated is listed, not priced. Steps x simulated step time gives the GPU-hours of
steps; over the goodput model (simulator/run/goodput.py, its published defaults) the
GPU-hours with failures, restarts and checkpoints, which is what a model card's figure
counts. Nothing is fitted on these rows.

    SCAPE_PROFILE_DIR=profiles python bench/gpu_hours_published.py
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from profiles import UserError, load_model  # noqa: E402
from simulator.planning.options import (  # noqa: E402
    Batch,
    Overlap,
    Parallelism,
    Precision,
    SchemeOptions,
    StepOptions,
)
from simulator.run.defaults import default_reliability  # noqa: E402
from simulator.run.goodput import checkpoint_bytes, run_with_failures  # noqa: E402
from simulator.step.simulate import simulate_step  # noqa: E402

DATA = REPO / "profiles" / "external" / "published-gpu-hours.csv"
# the row's model as the source names it -> the shipped model profile of that architecture
MODELS = {"Llama 2 7B": "llama-7b", "Llama 2 70B": "llama-70b", "Llama 3.1 8B": "llama3-8b",
          "Llama 3.1 70B": "llama3-70b", "Llama 3.1 405B": "llama3-405b",
          "Llama 3 8B": "llama3-8b", "Llama 3 70B": "llama3-70b",
          "DeepSeek-V3": "deepseek-v3", "GPT-3 175B": "gpt3-175b"}
# the row's GPU -> the shipped profile of that GPU's usual node
HARDWARE = {"A100-80GB": "dgx-a100", "A100 80GB": "dgx-a100", "H100-80GB": "dgx-h100",
            "H100 80GB": "dgx-h100", "H800": "dgx-h800"}


def _int(value) -> int | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) \
        or str(value).strip() == "" else int(float(value))


def _match(name: str, table: dict[str, str]) -> str | None:
    key = str(name).strip()
    return table.get(key) or next((v for k, v in table.items() if k.lower() in key.lower()),
                                  None)


def price(row) -> dict:
    out = {"case": row.case, "published_gpu_hours": float(row.gpu_hours),
           "scope": row.gpu_hours_scope, "note": ""}
    model, hw = _match(row.model, MODELS), _match(row.gpu, HARDWARE)
    if model is None or hw is None:
        out["note"] = f"no shipped profile of {row.model if model is None else row.gpu}"
        return out
    gpus, seq = _int(row.gpus), _int(row.seq) or load_model(model).arch.seq_len
    tokens, batch_tokens = float(row.tokens), _int(row.global_batch_tokens)
    if isinstance(row.step_case, str) and row.step_case:
        return _priced(out, _same_run(row.step_case), gpus, tokens, seq)
    if gpus is None or not tokens or batch_tokens is None or (
            _int(row.tp) is None and _int(row.pp) is None):
        # GPU-hours depend on the layout (bubble, exposed communication): a row that does not
        # state it is not priced at a layout the tool would choose
        out["note"] = "the source leaves the GPU count, layout, tokens or batch unstated"
        return out
    tp, pp = _int(row.tp) or 1, _int(row.pp) or 1
    cp, ep = _int(row.cp) or 1, _int(row.ep) or 1
    sequences = max(1, round(batch_tokens / seq))
    opts = StepOptions(model, hw, gpus, scheme=SchemeOptions("dense-adamw"),
                       batch=Batch(1, seq, None, sequences),
                       parallelism=Parallelism(tp=tp, pp=pp, cp=cp, ep=ep,
                                               recompute=_recompute(row)),
                       precision=Precision(fp8=str(row.precision).lower() == "fp8"),
                       overlap=Overlap(tp_comm=True if tp > 1 else None))
    try:
        cfg = opts.config()
    except UserError as e:
        out["note"] = f"refused: {e}"
        return out
    return _priced(out, cfg, gpus, tokens, seq)


def _same_run(case: str):
    """The step of moe-blackwell-steps.csv's row `case`, with its recipe (bench/moe_steps.py)."""
    sys.path.insert(0, str(REPO / "bench"))
    import moe_steps

    rows = pd.read_csv(moe_steps.DATA, comment="#")
    (row,) = [r for r in rows.itertuples() if r.case == case]
    return moe_steps.options(row).config()


def _priced(out: dict, cfg, gpus: int, tokens: float, seq: int) -> dict:
    step = simulate_step(cfg).step_time_s
    steps = math.ceil(tokens / (cfg.sequences * seq))
    hours = steps * step / 3600
    run = run_with_failures(hours * 3600, gpus, checkpoint_bytes(cfg.model.n_params),
                            default_reliability())
    out.update(model=cfg.model.name, hardware=cfg.hardware.name, gpus=gpus, step_s=step,
               steps=steps,
               gpu_hours_steps=hours * gpus, goodput=run.goodput,
               gpu_hours=run.wall_s / 3600 * gpus)
    out["error_pct"] = 100 * (out["gpu_hours"] / out["published_gpu_hours"] - 1)
    out["error_steps_only_pct"] = 100 * (out["gpu_hours_steps"] / out["published_gpu_hours"] - 1)
    return out


def _recompute(row) -> str:
    """As the source says it: none, full, DeepSeek-V3's RMSNorm and MLA up-projections
    (Megatron-Core's layernorm and mla_up_proj modules), else Megatron's selective."""
    text = str(row.recompute).strip().lower()
    if text in ("", "nan", "no", "not stated") or text.startswith("none"):
        return "none"
    if text.startswith("full"):
        return "full"
    if "rmsnorm" in text and "mla" in text:
        return "selective:layernorm,mla_up_proj"
    return "selective"


def main() -> None:
    rows = pd.read_csv(DATA, comment="#")
    df = pd.DataFrame([price(r) for r in rows.itertuples()])
    pd.set_option("display.width", 200)
    priced = df.dropna(subset=["error_pct"]) if "error_pct" in df else df.iloc[0:0]
    cols = ["case", "gpus", "step_s", "gpu_hours_steps", "goodput", "gpu_hours",
            "published_gpu_hours", "error_pct", "error_steps_only_pct", "note"]
    print(priced[cols].to_string(index=False, float_format=lambda v: f"{v:,.3g}"))
    if len(priced):
        e = priced["error_pct"].abs()
        print(f"\n{len(priced)} runs: GPU-hours with failures median |error| {e.median():.1f}%, "
              f"max {e.max():.1f}% ({priced.loc[e.idxmax(), 'case']}); steps alone median "
              f"|error| {priced['error_steps_only_pct'].abs().median():.1f}%")
    for r in df[df.get("error_pct", pd.Series(dtype=float)).isna()].itertuples():
        print(f"not priced: {r.case}: {r.note}")


if __name__ == "__main__":
    main()
