"""How far the step model is from published training steps like the one asked about: the
leave-one-source-out errors of bench/step_loso.py (every published step predicted by a model
calibrated without its source), grouped into bands and shown by `scape simulate`, `compare`
and `plan` ("how sure is the answer"); each band names its sources.

A band is (shipped hardware profile, layout, schemes): data parallel only or with tensor or
pipeline stages (the tensor-parallel all-reduces and the pipeline bubble are what the layout
adds), and dense schemes, the only ones published runs used. bench/step_loso.py writes the
bands to profiles/external/step-fidelity-bands.csv (`--bands`); `lookup` reads them. A step priced
another way than those runs were (a typed --mfu, a profile that is not the shipped one, a
compressed scheme) has no band, and says so: never a band borrowed from another setting.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from profiles import shipped
from reports.calibration_reach import beyond_measured
from reports.fidelity import heldout, stored, summarize
from vocabulary.units import span

if TYPE_CHECKING:
    import pandas as pd

STEP_BANDS = (Path(__file__).resolve().parents[1] / "profiles" / "external"
              / "step-fidelity-bands.csv")
# the mixture-of-experts and Blackwell rows' bands (bench/moe_steps.py --bands); a key it shares
# with step-fidelity-bands.csv (MLPerf's 8B on H100 at TP 2) is merged by all_bands
MOE_BANDS = STEP_BANDS.with_name("moe-step-fidelity-bands.csv")
# torchtitan's own published H100 steps on their Grand Teton hosts (bench/torchtitan_steps.py
# --bands): keys of their own too (grand-teton-h100 is no other file's profile)
TORCHTITAN_BANDS = STEP_BANDS.with_name("torchtitan-step-fidelity-bands.csv")
# BigScience's Megatron-DeepSpeed sweep on Jean Zay (bench/deepspeed_steps.py --step-bands):
# jean-zay-a100 is no other file's profile either
DEEPSPEED_BANDS = STEP_BANDS.with_name("deepspeed-step-fidelity-bands.csv")
KEYS = ["hardware", "layout", "schemes"]
SOURCE = "profiles/external/step-fidelity-bands.csv from bench/step_loso.py"
BAND_FILES = ((STEP_BANDS, SOURCE),
              (MOE_BANDS, "profiles/external/moe-step-fidelity-bands.csv from bench/moe_steps.py"),
              (TORCHTITAN_BANDS, "profiles/external/torchtitan-step-fidelity-bands.csv from "
                                 "bench/torchtitan_steps.py"),
              (DEEPSPEED_BANDS, "profiles/external/deepspeed-step-fidelity-bands.csv from "
                                "bench/deepspeed_steps.py"))


def all_bands() -> dict[tuple[str, ...], dict]:
    """Every shipped step band by (hardware, layout, schemes), each with the file it is from.
    A key two files band (a class step_loso's runs and the MoE/Blackwell bench's both hold
    out rows of) is one band: the first file's medians, every row counted and the larger
    max |error| (what the answer's range uses), and `also` naming the other file's rows."""
    out: dict[tuple[str, ...], dict] = {}
    for path, source in BAND_FILES:
        for key, band in stored(path, tuple(KEYS)).items():
            first = out.get(key)
            if first is None:
                out[key] = {**band, "from": source}
                continue
            also = (f"{band['rows']} more from {source} (median |error| "
                    f"{float(band['median_abs_err_pct']):g}%, max "
                    f"{float(band['max_abs_err_pct']):g}%: {band['cases']})")
            out[key] = {**first, "rows": str(int(first["rows"]) + int(band["rows"])),
                        "max_abs_err_pct": str(max(float(first["max_abs_err_pct"]),
                                                   float(band["max_abs_err_pct"]))),
                        "sources": f"{first['sources']}; {band['sources']}",
                        "first_rows": first.get("first_rows", first["rows"]),
                        # the other file's rows as configurations of their own (its runs)
                        "configs": (str(int(first["configs"]) + int(band.get("configs")
                                                                    or band["rows"]))
                                    if first.get("configs") else first.get("configs")),
                        "also": "; ".join(filter(None, (first.get("also"), also)))}
    return out


def layout_class(tp: int, pp: int, tp_overlap: bool = False, cp: int = 1,
                 fp8: bool = False, moe: bool = False, graphs: bool = False) -> str:
    """Data parallel alone, or with tensor or pipeline stages; tensor-parallel communication
    overlapped with its GEMMs (simulator/step/tp_overlap.py) and context parallelism
    (simulator/step/cp_comm.py) are layouts of their own: what the model leaves exposed there
    differs. FP8 GEMMs are a class of their own too (another GEMM rate, the profile's
    measured FP8 matmul's), and so is a model with experts (its dispatch and combine, its
    grouped expert GEMMs). A model with experts whose layers replay as CUDA graphs (`graphs`,
    --cuda-graphs) is another: of bench/moe_steps.py's published MoE steps on Blackwell, the 13
    run with them are within 23% of the model, while 12 of the 20 run without them were 25-66%
    slower (the host's per-operation time, which the model does not price:
    docs/research/moe-host-bound.md), so one's band never vouches for the other. Dense steps
    keep one class: none of theirs moved with it (bench/moe_steps.py: no row's step moves with
    the launch floor)."""
    suffix = ((", mixture-of-experts" + (", CUDA graphs" if graphs else "")) if moe else "") + (
        ", FP8" if fp8 else "")
    if tp == 1 and pp == 1 and cp == 1:
        return "data parallel" + suffix
    name = "tensor/pipeline parallel" if tp > 1 or pp > 1 else "data parallel"
    if tp_overlap and tp > 1:
        name += ", TP comm overlapped"
    return name + (", context parallel" if cp > 1 else "") + suffix


def layout_of(cfg) -> str:
    """The layout class of a simulated step (simulator.step.simulate.StepConfig)."""
    return layout_class(cfg.tp, cfg.pp, cfg.tp_comm_overlap, cfg.cp, cfg.fp8,
                        cfg.model.moe is not None, cfg.cuda_graphs)


def scheme_class(scheme: str) -> str:
    """Dense schemes differ in how they shard and reduce, which the published runs cover
    (Megatron's DDP, ZeRO-1, FSDP); every other scheme is its own class."""
    return "dense" if scheme.startswith("dense") else scheme


def config_medians(held: pd.DataFrame, err: str = "error_pct") -> pd.Series:
    """Each distinct configuration's median error (`held`'s `config` column: rows alike but
    for their GPU count or software release, bench/step_loso.py config_ids), so a
    configuration published at eight scales counts once."""
    return held.groupby("config")[err].median()


def summarize_sources(held: pd.DataFrame) -> pd.DataFrame:
    """The bands of bench/step_loso.py's leave-one-stack-out rows (`held`: case, hardware,
    layout, schemes, gpus, source, framework, error_pct, and config where rows repeat a
    configuration): per (profile, layout, schemes), the job sizes, the rows (and distinct
    configurations, each counted once in the medians; the max is the worst row), and the
    sources with their frameworks and row counts."""
    bands = summarize(held, KEYS, "error_pct")
    groups = held.groupby(KEYS)
    sizes = groups["gpus"].agg(lambda g: span(g.min(), g.max()))  # '64', not '64-64'
    named = groups.apply(
        lambda part: "; ".join(f"{s} ({f}) {n}" for (s, f), n in
                               part.groupby(["source", "framework"]).size().items()),
        include_groups=False)
    keys = [tuple(k) for k in bands[KEYS].itertuples(index=False)]
    bands.insert(len(KEYS), "gpus", [sizes[k] for k in keys])
    if "config" in held:  # bench/moe_steps.py's rows are each a configuration of their own
        per = {k: config_medians(part) for k, part in groups}
        bands.insert(bands.columns.get_loc("rows") + 1, "configs", [len(per[k]) for k in keys])
        bands["median_abs_err_pct"] = [round(per[k].abs().median(), 1) for k in keys]
        bands["median_err_pct"] = [round(per[k].median(), 1) for k in keys]
    bands["sources"] = [named[k] for k in keys]
    return bands


def _band(hw, layout: str, scheme: str, mfu: float | None) -> tuple[dict | None, str]:
    """The band of a step like this one (`layout`: its `layout_class`), or None and why
    there is none."""
    if mfu is not None:
        return None, (f"its compute is your --mfu {mfu:g}; the held-out runs checked the "
                      "profile's own compute model")
    if not shipped(hw):
        return None, (f"no published step ran on {hw.path}; the bands are of the shipped "
                      "hardware profiles")
    bands = all_bands()
    band = bands.get((hw.name, layout, scheme_class(scheme)))
    if band is None and scheme_class(scheme) != "dense":
        return None, f"no published {scheme} step was held out"
    if band is None:
        # the layouts of this profile that do have one: a step a flag away from checked runs
        # (the TP overlap, FP8) says which
        moe = "mixture-of-experts" in layout  # a model's own kind: dense or with experts
        # each with how the model fared there (its rows and signed median error), so a
        # step next to checked ones still says which way the model leaned on them
        others = [f"{k[1]} ({b['rows']} step{'s' if str(b['rows']) != '1' else ''}, median "
                  f"{float(b['median_err_pct']):+.1f}%)"
                  for k, b in sorted(bands.items()) if k[0] == hw.name and k[2] == "dense"
                  and ("mixture-of-experts" in k[1]) == moe]
        return None, (f"no published step on this profile and layout ({hw.name}, {layout}) "
                      "was held out" + (f"; held-out layouts on {hw.name}: "
                                        + "; ".join(others) if others else ""))
    n = int(band["rows"])  # steps of dense schemes (the only ones published runs used)
    configs = band.get("configs")  # csv text; the MoE bands (leave-one-source-out) have none
    alike = (f" ({configs} distinct configuration{'s' if configs != '1' else ''}: the median "
             "counts each once)" if configs and int(configs) < n else "")
    fitted = "stack" if configs else "source"
    return band, (f"{n} published dense step{'s' if n != 1 else ''}{alike} on this profile and "
                  f"layout ({hw.name}, {layout}, runs of {band['gpus']} GPUs, each with its own "
                  f"model, batch and attention kernel; sources: {band['sources']}), each "
                  f"predicted with the sustained share fitted without its {fitted},")


def lookup(hw, layout: str, scheme: str, mfu: float | None) -> dict:
    """The band of a step like this one as output columns (`heldout`, prefixed heldout_step)."""
    return heldout(_band(hw, layout, scheme, mfu)[0], "heldout_step")


def band_range(value: float, max_abs_err_pct: float | None
               ) -> tuple[float, float] | tuple[None, None]:
    """Where the measured value of a predicted `value` (a step time, or hours and dollars,
    which scale with it) lies if the model errs on it no more than on the held-out steps of
    its band (largest |error| m): error = predicted / measured - 1 lies in [-m, m], so the
    measured value in [value / (1 + m), value / (1 - m)]. (None, None) without a band: the
    answer is unvalidated, never given a range borrowed from another setting."""
    if max_abs_err_pct is None or max_abs_err_pct != max_abs_err_pct:  # None or NaN
        return None, None
    m = float(max_abs_err_pct) / 100
    return value / (1 + m), (value / (1 - m) if m < 1 else math.inf)


def range_columns(row: dict, names: tuple[str, ...], band_col: str = "heldout_step_max_abs_err_pct"
                  ) -> dict:
    """`name_low` and `name_high` (a `_s` name: `name_low_s`, `name_high_s`) of each of
    `names` in `row`, from the row's band (band_range)."""
    out = {}
    for name in names:
        low, high = band_range(row[name], row.get(band_col))
        stem, unit = (name.removesuffix("_s"), "_s") if name.endswith("_s") else (name, "")
        out[f"{stem}_low{unit}"], out[f"{stem}_high{unit}"] = low, high
    return out


def how_sure(hw, layout: str, schemes: list[str], mfu: float | None,
             gpus: int | None = None) -> str:
    """One line on how far published steps like these were from the model: the dense band,
    which schemes no published run checks (what they add to a dense step: their compression
    kernels and their own collectives), and, on `gpus` GPUs of a calibrated profile, whether
    the answer goes beyond the scale its calibration measured (reports/calibration_reach.py)."""
    dense, why = _band(hw, layout, "dense", mfu)
    text = (f"how sure: {why} held out: {_figures(dense)}" if dense is not None
            else f"how sure: unvalidated: {why}")
    others = [s for s in schemes if scheme_class(s) != "dense"]
    if others and (dense is not None or why.startswith("no published step on this")):
        text += (f"; {', '.join(others)}: no published step was held out, so what "
                 f"{'it adds' if len(others) == 1 else 'they add'} to a dense step is "
                 "unvalidated")
    if any(s.startswith("scape") for s in others):
        text += "; SCAPE's own step times: scape validate --external scape-sc26"
    beyond = None if gpus is None else beyond_measured(hw, gpus)
    return text + (f"; {beyond}" if beyond else "")


def _figures(band: dict) -> str:
    also = band.get("also")
    return (f"median |error| {float(band['median_abs_err_pct']):g}%, max "
            f"{float(band['max_abs_err_pct']):g}%, median {float(band['median_err_pct']):+g}% "
            f"(-: the model is fast; {band.get('from', SOURCE)}"
            + (f"; the medians are of its {band['first_rows']} steps, the max of all, with "
               f"{also}" if also else "") + ")")
