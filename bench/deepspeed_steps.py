"""BigScience's Megatron-DeepSpeed steps on Jean Zay against the model (issue 60, BLOOM).

Every row of profiles/external/bigscience-176b-steps.csv (BLOOM-176B candidates of 176-206B, TP 4
or 8, PP 6 or 12, micro-batch 1-4, timed by BigScience on 48 nodes of Jean Zay in February 2022
with the stack BLOOM then trained with) is simulated as its source states it: the shape's model
(bloom-176b's architecture with the row's hidden size, layers and heads, d_ff 4h), full
recomputation, Megatron's unfused attention (no FlashAttention in 2022), no sequence
parallelism, AdamW, on profiles/hardware/jean-zay-a100.toml, by two stacks:
- `deepspeed` (what ran): DeepSpeed's pipeline engine and its BF16_Optimizer, the fp32
  gradient folded in after every micro-batch and all-reduced after the last one, then the
  shard update and the bf16 parameters gathered (simulator/step/step_config.py
  deepspeed_scheme, simulator/step/compute.py BF16_OPTIMIZER_ACCUM_BYTES), the tied
  embedding's fp32 gradient all-reduced between the first and last stage before that
  (StepConfig._tied);
- `megatron`, the same layout as Megatron-LM's distributed optimizer would run it (gradients
  reduce-scattered in buckets during the backward), for comparison.
Nothing here is fitted: the A100's sustained share is dgx-a100's (fitted on Megatron-LM's own
steps), the network Jean Zay's published links. Not priced: CUDA_LAUNCH_BLOCKING=1, which the
runs set (every kernel waits for the one before; the source's own A/B pairs differ by 0-7%,
and not as an added cost per kernel would: 6% at 80 GPUs, 0% at 160 on the same model and
batch, chronicles-prequel.md "dealing with JZ hanging"),
and the fused-softmax constraints that some head counts break.

Memory: the model's reserved bytes plus what lives outside the allocator, against the
nvidia-smi figure of the embedding stage's node; and both directions of "fits": the rows that
ran should be accepted, the rows that ran out of memory refused. `--bands PATH` writes the
memory errors as the band `scape simulate` quotes for the deepspeed stack on jean-zay-a100
(shipped: profiles/external/memory-fidelity-bands-deepspeed.csv; reports/memory_fidelity.py).
`--step-bands PATH` writes the step errors of the runs that ran as the "how sure" band of a
step on jean-zay-a100 (shipped: profiles/external/deepspeed-step-fidelity-bands.csv, read by
reports/step_fidelity.py beside the other step bands): each row a configuration of its own;
not an untouched hold-out (late-constants.md row 52: read before the stack was built).

Run: SCAPE_PROFILE_DIR=profiles python bench/deepspeed_steps.py [--bands PATH]
     [--step-bands PATH]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cli.outputs import script_outputs  # noqa: E402
from profiles import UserError  # noqa: E402
from reports.step_fidelity import layout_of, summarize_sources  # noqa: E402
from simulator.memory.peak import memory_columns  # noqa: E402
from simulator.planning.options import (  # noqa: E402
    Batch,
    Parallelism,
    Pricing,
    SchemeOptions,
    StepOptions,
)
from simulator.step.simulate import simulate_step  # noqa: E402

DATA = REPO / "profiles" / "external" / "bigscience-176b-steps.csv"
BASE = REPO / "profiles" / "models" / "bloom-176b.toml"
HARDWARE = "jean-zay-a100"


def shape_model(folder: Path, hidden: int, layers: int, heads: int) -> Path:
    """A model file of bloom-176b's architecture at another shape (its [reference] parameter
    count dropped: it is BLOOM's)."""
    text = BASE.read_text()
    text = text.split("[reference]")[0] + "[training]" + text.split("[training]")[1]
    name = f"bloom-shape-{hidden}-{layers}-{heads}"
    for key, value in (("n_layers", layers), ("d_model", hidden), ("n_heads", heads),
                       ("n_kv_heads", heads), ("d_ff", 4 * hidden)):
        text = re.sub(rf"(?m)^{key} = \d+", f"{key} = {value}", text)
    text = text.replace('name = "bloom-176b"', f'name = "{name}"')
    path = folder / f"{name}.toml"
    path.write_text(text)
    return path


def options(row, model: Path, stack: str, hardware: str) -> StepOptions:
    """The row's step as its source states it (module docstring), by `stack` on `hardware`."""
    return StepOptions(
        str(model), hardware, int(row.dp * row.tp * row.pp),
        scheme=SchemeOptions("dense-adamw"),
        batch=Batch(int(row.mbs), int(row.seq), None, int(row.gbs)),
        parallelism=Parallelism(tp=int(row.tp), pp=int(row.pp), recompute="full",
                                sequence_parallel=False),
        pricing=Pricing(attention="unfused", stack=stack))


def price(row, model: Path, stack: str, hardware: str) -> dict:
    cfg = options(row, model, stack, hardware).config()
    res = simulate_step(cfg)
    mem = memory_columns(cfg)
    return {"step_s": res.step_time_s,
            "device_GB": mem["memory_reserved_GB"] + mem["memory_outside_GB"],
            "fits": bool(mem["fits_memory"]), "layout": layout_of(cfg), "gpus": cfg.gpus}


def memory_band(ran: pd.DataFrame) -> pd.DataFrame:
    """The published peaks' signed errors as one band (reports/memory_fidelity.py's columns):
    peak kind "nvidia-smi": the allocator's reserved bytes and what lives outside it."""
    from reports.fidelity import summarize
    from reports.memory_fidelity import KEYS

    peaks = ran[ran["memory_error_pct"].notna()].assign(
        hardware=HARDWARE, stack="deepspeed", peak_kind="nvidia-smi",
        error_pct=lambda d: d["memory_error_pct"])
    return summarize(peaks, list(KEYS), "error_pct").assign(
        under=int((peaks["error_pct"] < 0).sum()))


def step_bands(ran: pd.DataFrame) -> pd.DataFrame:
    """The runs that ran, their step errors as bands (reports/step_fidelity.py's columns),
    each row a configuration of its own."""
    held = ran[ran["error_pct"].notna()].assign(
        hardware=HARDWARE, schemes="dense", source="bigscience", framework="Megatron-DeepSpeed",
        config=lambda d: d["case"])
    return summarize_sources(held).reset_index(drop=True)


def priced(megatron: bool = True) -> pd.DataFrame:
    """Every row of DATA priced by the deepspeed stack on HARDWARE (its step, its memory on
    the device and the error against the published figures, whether it fits) and, with
    `megatron`, by the Megatron stack on dgx-a100 for comparison."""
    df = pd.read_csv(DATA, comment="#")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for row in df.itertuples():
            model = shape_model(Path(tmp), int(row.nhidden), int(row.nlayers), int(row.nheads))
            out = {"case": row.case, "tp": row.tp, "pp": row.pp, "mbs": row.mbs,
                   "heads": row.nheads, "outcome": row.outcome,
                   "published_s": row.sec_per_it, "published_GB": row.mem_GB}
            try:
                ds = price(row, model, "deepspeed", HARDWARE)
                out.update(predicted_s=ds["step_s"], device_GB=ds["device_GB"],
                           fits=ds["fits"], layout=ds["layout"], gpus=ds["gpus"])
            except UserError as e:  # the model refuses the layout: not fitting, or a rule
                out.update(predicted_s=float("nan"), device_GB=float("nan"), fits=False,
                           refused=str(e)[:90])
            if megatron:
                try:
                    out["megatron_dgx_s"] = price(row, model, "megatron", "dgx-a100")["step_s"]
                except UserError:
                    out["megatron_dgx_s"] = float("nan")
            rows.append(out)
    res = pd.DataFrame(rows)
    res["error_pct"] = 100 * (res.predicted_s / res.published_s - 1)
    res["memory_error_pct"] = 100 * (res.device_GB / res.published_GB - 1)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bands", help="write the memory errors' band here (shipped: "
                    "profiles/external/memory-fidelity-bands-deepspeed.csv)")
    ap.add_argument("--step-bands", help="write the step errors' bands here (shipped: "
                    "profiles/external/deepspeed-step-fidelity-bands.csv)")
    args = ap.parse_args()
    script_outputs(ap, {"--bands": args.bands, "--step-bands": args.step_bands})
    res = priced()
    ran = res[res.outcome == "ran"].copy()
    ran["megatron_dgx_error_pct"] = 100 * (ran.megatron_dgx_s / ran.published_s - 1)
    cols = ["case", "tp", "pp", "mbs", "heads", "published_s", "predicted_s", "error_pct",
            "megatron_dgx_error_pct", "published_GB", "device_GB", "memory_error_pct", "fits"]
    print(f"# {len(res)} rows of {DATA.relative_to(REPO)} on {HARDWARE}; nothing fitted on them")
    print(ran[cols].round(2).to_string(index=False))

    def line(name: str, errors) -> str:
        e = [x for x in errors if x == x]
        return (f"{name}: {len(e)} rows (each a distinct configuration), median |error| "
                f"{statistics.median(abs(x) for x in e):.1f}%, max {max(abs(x) for x in e):.1f}%,"
                f" median {statistics.median(e):+.1f}%")

    print()
    print(line("step, deepspeed stack on jean-zay-a100", ran.error_pct))
    for tp in sorted(ran.tp.unique()):
        print("  " + line(f"TP {tp}", ran.error_pct[ran.tp == tp]))
    print(line("step, megatron stack on dgx-a100 (before)", ran.megatron_dgx_error_pct))
    print(line("device memory vs nvidia-smi (- : the model is below)", ran.memory_error_pct))
    oom = res[res.outcome == "oom"]
    accepted = int(ran.fits.sum())
    refused = int((~oom.fits.astype(bool)).sum())
    print(f"fits: {accepted} of {len(ran)} runs that ran accepted; {refused} of {len(oom)} runs "
          f"that ran out of memory refused")
    for r in oom.itertuples():
        print(f"  {r.case}: {'refused' if not r.fits else 'accepted'}"
              + (f" ({r.device_GB:.1f} GB on the device)" if r.fits else ""))
    if args.bands:
        memory_band(ran).to_csv(args.bands, index=False)
        print(f"band written to {args.bands}")
    if args.step_bands:
        step_bands(ran).to_csv(args.step_bands, index=False)
        print(f"step bands written to {args.step_bands}")


if __name__ == "__main__":
    main()
