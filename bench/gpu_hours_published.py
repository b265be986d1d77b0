"""Published GPU-hours of pre-training runs against this tool's step model and goodput model
(issue 60 item 4: GPU-hours within 15%).

Each row of profiles/external/published-gpu-hours.csv that names a model and GPU with a
shipped profile (MODELS, HARDWARE below) is priced as its source states it: its GPU count,
layout (tensor, pipeline, context, expert parallelism; the rest data-parallel), sequence,
global batch, micro-batch and attention kernel where stated, tokens, precision and
recomputation; a row that leaves its GPU count or layout
unstated is listed, not priced. Steps x simulated step time gives the GPU-hours of
steps; over the goodput model (simulator/run/goodput.py, its published defaults) the
GPU-hours with failures, restarts and checkpoints, which is what a model card's figure
counts. A case whose figure covers stages run at different layouts (Llama 3 405B: 8K
pre-training, then long context at CP 16) is priced stage by stage as
profiles/external/published-gpu-hours-phases.csv states them, each stage with its own
failures, and summed. Nothing is fitted on these rows.

`--phases-chunks N` prices every phase at N model chunks a pipeline rank (1: 1F1B), the
sensitivity of the chunks read from the Llama 3 paper (late-constants.md row 41).

Energy and emissions (issue 60 item 4: within 20%): a priced row whose source publishes its
energy or emissions is priced by the source's own accounting, which its columns state (each
GPU at power_W_per_gpu, times the PUE where one is stated, times grid_gCO2_per_kWh), applied to
the model's GPU-hours; the accounting is used only where it gives the source's own figure
from the source's own GPU-hours (within 1%), and a figure whose grid or power is not stated
is listed, not priced. Beside it, the tool's own accounting (simulator/run/energy.py: each GPU
at its load, the rest of the node, the PUE stated or the default) over the same run.

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
from reports.step_rows import model_tflops  # noqa: E402
from simulator.planning.options import (  # noqa: E402
    Batch,
    Overlap,
    Parallelism,
    Precision,
    Pricing,
    SchemeOptions,
    StepOptions,
)
from simulator.run.defaults import default_reliability, on_profile  # noqa: E402
from simulator.run.energy import run_energy  # noqa: E402
from simulator.run.goodput import checkpoint_bytes, run_with_failures  # noqa: E402
from simulator.run.sites import site_of  # noqa: E402
from simulator.step.power import mean_busy  # noqa: E402
from simulator.step.simulate import simulate_step  # noqa: E402

DATA = REPO / "profiles" / "external" / "published-gpu-hours.csv"
PHASES = REPO / "profiles" / "external" / "published-gpu-hours-phases.csv"
# each priced step against the source's own step or TFLOP/s, printed under the table
STAGE_LINES: list[str] = []
# the row's model as the source names it -> the shipped model profile of that architecture
MODELS = {"Llama 2 7B": "llama-7b", "Llama 2 70B": "llama-70b", "Llama 3.1 8B": "llama3-8b",
          "Llama 3.1 70B": "llama3-70b", "Llama 3.1 405B": "llama3-405b",
          "Llama 3 8B": "llama3-8b", "Llama 3 70B": "llama3-70b",
          "DeepSeek-V3": "deepseek-v3", "GPT-3 175B": "gpt3-175b", "BLOOM 176B": "bloom-176b"}
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


def price(row, phases: list = (), chunks: int | None = None) -> dict:
    out = {"case": row.case, "published_gpu_hours": float(row.gpu_hours),
           "scope": row.gpu_hours_scope, "note": ""}
    model, hw = _match(row.model, MODELS), _stated_text(row, "hardware_profile")
    hw = hw or _match(row.gpu, HARDWARE)
    if model is None or hw is None:
        out["note"] = f"no shipped profile of {row.model if model is None else row.gpu}"
        return out
    gpus, seq = _int(row.gpus), _int(row.seq) or load_model(model).arch.seq_len
    tokens, batch_tokens = float(row.tokens), _int(row.global_batch_tokens)
    stages = [p for p in phases if p.case == row.case]
    if stages:
        return _phased(out, model, hw, stages, row.precision, chunks)
    if isinstance(row.step_case, str) and row.step_case:
        return _priced(out, _same_run(row.step_case), gpus, tokens, seq)
    if gpus is None or not tokens or batch_tokens is None or (
            _int(row.tp) is None and _int(row.pp) is None):
        # GPU-hours depend on the layout (bubble, exposed communication): a row that does not
        # state it is not priced at a layout the tool would choose
        out["note"] = "the source leaves the GPU count, layout, tokens or batch unstated"
        return out
    try:
        cfg = _config(model, hw, row, gpus, seq, batch_tokens, row.precision)
    except UserError as e:
        out["note"] = f"refused: {e}"
        return out
    ramp = _rampup(row, model, hw, gpus, seq, precision=row.precision)
    return _priced(out, cfg, gpus, tokens, seq, float(getattr(row, "step_s_stated", "nan")),
                   ramp)


def _rampup(row, model: str, hw: str, gpus: int, seq: int, precision) -> tuple | None:
    """(tokens, seconds) of the run's batch-size ramp-up as its source states it (column
    `rampup`, Megatron's --rampup-batch-size START INCREMENT SAMPLES: the global batch grows
    by INCREMENT every SAMPLES / ((global - START) / INCREMENT) samples, megatron/
    microbatches.py RampupBatchsizeNumMicroBatches), each batch size's steps simulated at its
    micro-batch (`rampup_micro_batch` below `rampup_micro_batch_until` sequences, the row's
    above); None where the row states none."""
    text = _stated_text(row, "rampup")
    if text is None:
        return None
    start, step, samples = (int(float(x)) for x in text.split())
    final = round(float(row.global_batch_tokens) / seq)
    increments = (final - start) // step
    per_increment = samples / increments  # samples at each batch size
    small_mb, until = _int(getattr(row, "rampup_micro_batch", None)), _int(
        getattr(row, "rampup_micro_batch_until", None))
    seconds = 0.0
    for batch in range(start, final, step):
        mb = small_mb if small_mb is not None and until is not None and batch < until else None
        at = row._replace(global_batch_tokens=batch * seq,
                          **({"micro_batch": mb} if mb is not None else {}))
        cfg = _config(model, hw, at, gpus, seq, batch * seq, precision)
        seconds += math.ceil(per_increment / batch) * simulate_step(cfg).step_time_s
    return samples * seq, seconds


def _config(model: str, hw: str, row, gpus: int, seq: int, batch_tokens: int, precision,
            schedule: str = "1f1b", chunks: int | None = None):
    """The step of `row`'s layout (a run's row or one of its phases) as the source states it."""
    tp, pp = _int(row.tp) or 1, _int(row.pp) or 1
    cp, ep = _int(row.cp) or 1, _int(getattr(row, "ep", None)) or 1
    sequences = max(1, round(batch_tokens / seq))
    interleaved = schedule == "interleaved" and (chunks or 1) > 1
    attention = getattr(row, "attention", None)
    opts = StepOptions(model, hw, gpus, scheme=SchemeOptions("dense-adamw"),
                       batch=Batch(_int(getattr(row, "micro_batch", None)) or 1, seq, None,
                                   sequences),
                       pricing=Pricing(attention=attention if isinstance(attention, str)
                                       else None, stack=_stated_text(row, "stack")),
                       parallelism=Parallelism(
                           tp=tp, pp=pp, cp=cp, ep=ep, recompute=_recompute(row),
                           sequence_parallel=_stated(row, "sequence_parallel"),
                           pp_schedule="interleaved" if interleaved else "1f1b",
                           virtual_stages=chunks if interleaved else None),
                       precision=Precision(fp8=str(precision).lower() == "fp8"),
                       overlap=Overlap(tp_comm=_stated(row, "tp_comm_overlap",
                                                        True if tp > 1 else None)))
    return opts.config()


def _stated_text(row, column: str) -> str | None:
    """A text column of the row where the source states it (None: blank or absent)."""
    value = getattr(row, column, None)
    return None if value is None or (isinstance(value, float) and math.isnan(value)) \
        else str(value).strip() or None


def _stated(row, column: str, otherwise=None):
    """A true/false column of the row as its source states it; `otherwise` where blank."""
    value = getattr(row, column, None)
    if isinstance(value, bool):
        return value
    return {"true": True, "false": False}.get(str(value).strip().lower(), otherwise)


def _phased(out: dict, model: str, hw: str, stages: list, precision,
            chunks: int | None) -> dict:
    """`out` priced stage by stage (published-gpu-hours-phases.csv): each stage's steps at
    its own layout, with its own failures; GPU-hours summed, the step time tokens-weighted."""
    total = {"gpu_hours_steps": 0.0, "gpu_hours": 0.0, "tokens": 0.0, "step_x_tokens": 0.0}
    row_case = out["case"]
    for st in stages:
        v = _int(st.virtual_stages) if chunks is None else chunks
        try:
            cfg = _config(model, hw, st, _int(st.gpus), _int(st.seq),
                          _int(st.global_batch_tokens), precision, str(st.pp_schedule), v)
        except UserError as e:
            out["note"] = f"refused ({st.phase}): {e}"
            return out
        one = _priced({}, cfg, _int(st.gpus), float(st.tokens), _int(st.seq))
        stated = float(st.tflops_per_gpu)
        if not math.isnan(stated):  # the stage's step against the source's own TFLOP/s
            tflops = model_tflops(cfg, one["step_s"])
            STAGE_LINES.append(f"{row_case} {st.phase}: {cfg.chunks_pp} chunks a rank, step "
                               f"{one['step_s']:.2f} s, {tflops:.0f} TFLOP/s a GPU against "
                               f"{stated:.0f} stated ({100 * (tflops / stated - 1):+.0f}%; "
                               f"this tool's FLOPs count the full s x s attention, the "
                               f"source's count is not stated)")
        for k in ("gpu_hours_steps", "gpu_hours"):
            total[k] += one[k]
        total["tokens"] += float(st.tokens)
        total["step_x_tokens"] += one["step_s"] * float(st.tokens)
    out.update(model=model, hardware=hw, gpus=max(_int(st.gpus) for st in stages),
               step_s=total["step_x_tokens"] / total["tokens"],
               gpu_hours_steps=total["gpu_hours_steps"], gpu_hours=total["gpu_hours"],
               goodput=total["gpu_hours_steps"] / total["gpu_hours"],
               note=f"{len(stages)} stages ({', '.join(st.phase for st in stages)}); "
                    f"step_s tokens-weighted")
    _errors(out)
    return out


def _errors(out: dict) -> None:
    out["error_pct"] = 100 * (out["gpu_hours"] / out["published_gpu_hours"] - 1)
    out["error_steps_only_pct"] = 100 * (out["gpu_hours_steps"] / out["published_gpu_hours"] - 1)


def _same_run(case: str):
    """The step of moe-blackwell-steps.csv's row `case`, with its recipe (bench/moe_steps.py)."""
    sys.path.insert(0, str(REPO / "bench"))
    import moe_steps

    rows = pd.read_csv(moe_steps.DATA, comment="#")
    (row,) = [r for r in rows.itertuples() if r.case == case]
    return moe_steps.options(row).config()


def _priced(out: dict, cfg, gpus: int, tokens: float, seq: int,
            stated_step_s: float | None = None, ramp: tuple | None = None) -> dict:
    res = simulate_step(cfg)
    step = res.step_time_s
    if stated_step_s is not None and not math.isnan(stated_step_s):
        STAGE_LINES.append(f"{out['case']}: step {step:.2f} s against {stated_step_s:.2f} s "
                           f"stated ({100 * (step / stated_step_s - 1):+.0f}%)")
    ramp_tokens, ramp_s = ramp or (0.0, 0.0)
    steps = math.ceil((tokens - ramp_tokens) / (cfg.sequences * seq))
    hours = (steps * step + ramp_s) / 3600
    if ramp:
        at_full_s = ramp_tokens / (cfg.sequences * seq) * step  # the same tokens at full batch
        STAGE_LINES.append(f"{out['case']}: batch-size ramp-up, {ramp_tokens / 1e9:.1f}B tokens "
                           f"in {ramp_s / 3600:.0f} h, {(ramp_s - at_full_s) / 3600:.0f} h "
                           f"more than at the full batch")
    run = run_with_failures(hours * 3600, gpus, checkpoint_bytes(cfg.model.n_params),
                            default_reliability())
    if cfg.hardware.failures is not None and "published_gpu_hours" in out:
        # the profile's own rate (simulator/run/defaults.py on_profile): printed, not the
        # headline, where it was read from the run priced here
        own = run_with_failures(hours * 3600, gpus, checkpoint_bytes(cfg.model.n_params),
                                on_profile(default_reliability(), cfg.hardware))
        STAGE_LINES.append(
            f"{out['case']}: with {cfg.hardware.name}'s own failure rate "
            f"({cfg.hardware.failures.failures_per_gpu_day:.2g} per GPU-day) instead of the "
            f"studies' median: goodput {own.goodput:.3f}, GPU-hours "
            f"{100 * (own.wall_s / 3600 * gpus / out['published_gpu_hours'] - 1):+.1f}%")
    out.update(model=cfg.model.name, hardware=cfg.hardware.name, gpus=gpus, step_s=step,
               steps=steps,
               gpu_hours_steps=hours * gpus, goodput=run.goodput,
               gpu_hours=run.wall_s / 3600 * gpus,
               # what the tool's own energy accounting needs (energy_rows)
               busy=mean_busy(cfg, res), power=cfg.hardware.power,
               gpus_per_node=cfg.hardware.node.gpus_per_node, work_s=hours * 3600,
               wall_s=run.wall_s, tokens=tokens)
    if "published_gpu_hours" in out:
        _errors(out)
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


def _number(value) -> float | None:
    return None if value is None or str(value).strip() in ("", "nan") else float(value)


def energy_rows(priced: pd.DataFrame, rows: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Each priced run's energy and emissions against what its source publishes, by the
    source's own accounting (module docstring); and why the others are not priced."""
    out, why = [], []
    stated = {r.case: r for r in rows.itertuples()}
    for p in priced.itertuples():
        src = stated[p.case]
        mwh, tco2 = _number(src.energy_MWh), _number(src.tCO2eq_location)
        if mwh is None and tco2 is None:
            continue
        watts, pue, grid = (_number(src.power_W_per_gpu), _number(src.pue),
                            _number(src.grid_gCO2_per_kWh))
        if watts is None:
            why.append(f"{p.case}: its source states no power a GPU")
            continue
        if mwh is None and grid is None:
            why.append(f"{p.case}: its {tco2:g} t CO2e, no energy or grid intensity stated")
            continue
        factor = watts * (pue or 1.0) / 1e6  # MWh a GPU-hour, as the source counts
        if mwh is not None and abs(p.published_gpu_hours * factor / mwh - 1) > 0.01:
            why.append(f"{p.case}: {p.published_gpu_hours:,.0f} GPU-hours x {watts:g} W"
                       f"{f' x PUE {pue:g}' if pue else ''} do not give its {mwh:g} MWh")
            continue
        row = {"case": p.case, "W_per_gpu": watts, "pue": pue or "not counted",
               "model_MWh": p.gpu_hours * factor, "published_MWh": mwh}
        if mwh is not None:
            row["energy_error_pct"] = 100 * (row["model_MWh"] / mwh - 1)
        if tco2 is not None and grid is None:
            why.append(f"{p.case}: its {tco2:g} t CO2e, no grid intensity stated")
        elif tco2 is not None:
            row.update(grid_g_per_kWh=grid, model_t=row["model_MWh"] * grid / 1e3,
                       published_t=tco2)
            row["emissions_error_pct"] = 100 * (row["model_t"] / tco2 - 1)
        # a run priced stage by stage has no one step to draw from (no busy share)
        if not pd.isna(p.busy) and p.power is not None:
            site = site_of(pue, None if grid is None else str(grid / 1e3))
            own = run_energy(p.power, site, int(p.gpus), int(p.gpus_per_node), p.busy,
                             p.work_s, p.wall_s, p.tokens)
            row.update(own_gpu_W=own.gpu_W, own_facility_MWh=own.energy_MWh,
                       own_pue=site.pue)
        out.append(row)
    return pd.DataFrame(out), why


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--phases-chunks", type=int, default=None,
                    help="price every stage at this many model chunks a pipeline rank "
                         "(1: 1F1B; default: each stage's own, as its source reads)")
    args = ap.parse_args()
    rows = pd.read_csv(DATA, comment="#")
    phases = list(pd.read_csv(PHASES, comment="#").itertuples())
    df = pd.DataFrame([price(r, phases, args.phases_chunks) for r in rows.itertuples()])
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
    for line in STAGE_LINES:
        print(line)
    energy, why = energy_rows(priced, rows)
    if len(energy):
        print("\nEnergy and emissions by each source's own accounting, at the model's GPU-hours; "
              "own_*: this tool's accounting (each GPU at its load, the rest of the node, the "
              "PUE) over the same run")
        print(energy.to_string(index=False, float_format=lambda v: f"{v:,.4g}"))
        for col, what in (("energy_error_pct", "energy"), ("emissions_error_pct", "emissions")):
            if col in energy:
                e = energy[col].dropna().abs()
                print(f"{what}: {len(e)} run(s), median |error| {e.median():.1f}%, max "
                      f"{e.max():.1f}% (the goal: 20%)")
    for line in why:
        print(f"energy not priced: {line}")
    for r in df[df.get("error_pct", pd.Series(dtype=float)).isna()].itertuples():
        print(f"not priced: {r.case}: {r.note}")


if __name__ == "__main__":
    main()
