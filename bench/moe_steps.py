"""Published mixture-of-experts and Blackwell steps against the model (issue 57 item 5).

Every row of profiles/external/moe-blackwell-steps.csv (quotes and sources there and in
docs/research/moe-blackwell-steps.md) is simulated with the shipped profiles as they are. One
constant was fitted on rows of this file: gb200-nvl72's [roofline] sustained share, on the
dense BF16 GB200 rows of source dgxc (`fit_share`, `--loso` shows the fit), which dgx-b200
takes too (the same B200 die, `SHARE_FROM`); those rows are in-sample and printed apart
(`IN_SAMPLE`), every other row is held out (the Hopper profiles' shares were fitted on dense
H100 steps of other sources, bench/fidelity_parallel.py). The error is predicted / published
- 1 of the step time, per row; rows are grouped by source, and by the kind of row (MoE or
dense; H100/H800 or Blackwell).

How a row becomes a step (each choice named, none fitted):
- layout: the row's TP, PP, virtual stages (interleaved when > 1), CP, EP and ETP (blank: TP,
  Megatron-Core's default, or 1 where EP x TP does not divide a stage's GPUs: the published
  run could not have had more), global batch, micro-batch (blank: 1), sequence, FP8 where the
  row says fp8 or mxfp8 (one FP8 rate: the profile's);
- scheme: dense-adamw (Megatron's distributed optimizer) for Megatron-Core, NeMo and
  Megatron-Bridge rows; dense-zero3 (FSDP) for torchtitan rows and rows whose `sharding` says
  fsdp, and under pipeline parallelism what FSDP does there, keep the stage's parameters
  gathered through the step (simulator/step/step_config.py FSDP_UNDER_PP: dense-zero1);
- torchtitan rows compiled (torch.compile, as both torchtitan sources state; read from
  session 43 on, before which they were priced eager: late-constants.md row 56);
- TP communication overlapped for NVIDIA's performance recipes with TP > 1 (their GPT-3 and
  Nemotron recipes turn it on: profiles/external/step-calibration.csv); off elsewhere, and
  wherever the run's own config turns it off (moe-recipes.csv tp_comm_overlap: the mlperf
  source's University-of-Florida 405B runs);
- recomputation: none where blank or none; full where full; Megatron's partial module lists
  ("selective: ...") as the norms recomputed with the attention core (selective-norm);
- the MoE token dispatcher, expert-parallel overlap, FP8 parameter gather and CUDA graphs
  (no per-kernel host launch where on; no row's step moves with it at the profiles' 4.5 us
  launch floor: docs/research/moe-host-bound.md) each run's own recipe states
  (profiles/external/moe-recipes.csv, docs/research/moe-recipes.md): flex (DeepEP or
  HybridEP) where it says so, alltoall where it says so or says nothing; the
  dispatch and combine overlapped where the recipe turns overlap_moe_expert_parallel_comm on
  (or DeepSeek's DualPipe); FP8 gathers where fp8_param_gather is on. Read after the first
  table was seen (late-constants.md rows 31-32): `--defaults` prices every row with the tool's
  defaults instead (alltoall, no overlap, 16-bit gathers), the sensitivity;
- Megatron-Core's tp-pp-dp rank order (--use-tp-pp-dp-mapping) where the run's config sets
  it (moe-recipes.csv tp_pp_dp_mapping: the mlperf source's GB200 and University-of-Florida
  405B runs); read after the first table was seen (late-constants.md row 71);
- the next step's parameter all-gathers overlapped with its forward (Megatron-Core's
  overlap_param_gather) where the run's config or log says so (moe-recipes.csv
  overlap_param_gather); read after the table was seen, for the mlperf rows in session 53
  (late-constants.md row 72) and NVIDIA's other recipes in session 54 (row 73); blank (the
  folding and mcore26 papers, the mcore baseline) Megatron's default, off; not passed for an
  FSDP row, where Megatron-FSDP's flag is the all-gather prefetch dense-zero3 always prices;
- the MTP layers and Megatron-Core pipeline layout of the rows whose recipe states both
  (profiles/external/pipeline-layouts.csv: Megatron-Bridge's DeepSeek-V3 rows); read after
  the table was seen (late-constants.md row 59, with what they move);
- attention: the fused kernel the stack prices by default (step_config.py stack_attention),
  except where a row's stack could not run it: profiles/external/attention-backends.csv
  (dgxc's DeepSeek-V3 rows on GB200, NeMo 25.04.01: Transformer Engine 2.2's unfused
  attention for latent heads of 192 / 128 on Blackwell); read after the table was seen
  (late-constants.md row 63);
- published step: stated, or global batch x sequence / (tokens per second per GPU x GPUs);
  rows that give only TFLOP/s are converted with their source's own FLOPs per token: the
  Megatron-LM count of the version the source ran (profiles/external/tflops-counts.csv,
  simulator/step/framework_flops.py; reported apart, with this tool's own count beside it as
  the sensitivity, and the counts checked on the rows that state both tokens/s and TFLOP/s).
Rows without a layout, or that the model refuses (it says why), are listed, not dropped; a
refusal of a run that ran is a failure of the model ("runs that ran are accepted").

`--loso`: the Blackwell fit left out source by source. For each source in turn, each Blackwell
profile's share is fitted on the OTHER sources' dense BF16 rows of the profile it takes its
share from (`SHARE_FROM`: dgx-b200 takes gb200-nvl72's; median log error zero, as
bench/fidelity_parallel.py fits H100's), and the left-out source's rows (FP8 and MoE included)
are predicted with it; in-sample rows are never counted. Nothing shipped changes.

`--bands PATH` writes the "how sure" bands of these rows (profiles/external/moe-step-fidelity-
bands.csv, read beside bench/step_loso.py's by reports/step_fidelity.py): per (profile, layout
class, dense schemes), the held-out rows stating a step or tokens per second, without source
dgxc's rows (the shipped Hopper and Blackwell sustained shares were fitted on dgxc-benchmarking
steps: none of its rows is held out from them).

Run: python bench/moe_steps.py [--csv PATH] [--source NAME] [--bands PATH]
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from step_loso import share_where_zero  # noqa: E402
from torchtitan_steps import fsdp_scheme  # noqa: E402

from cli.outputs import script_outputs  # noqa: E402
from profiles import UserError  # noqa: E402
from reports.step_fidelity import layout_of, summarize_sources  # noqa: E402
from simulator.memory.peak import step_communicators, step_memory, usable_bytes  # noqa: E402
from simulator.planning.options import (  # noqa: E402
    Batch,
    Overlap,
    Parallelism,
    Precision,
    Pricing,
    SchemeOptions,
    StepOptions,
)
from simulator.step.compute import forward_flops_per_token  # noqa: E402
from simulator.step.framework_flops import megatron_flops_per_token, padded_vocab  # noqa: E402
from simulator.step.simulate import simulate_step  # noqa: E402
from vocabulary.names import DEFAULT_GRAD_DTYPE  # noqa: E402
from vocabulary.recompute import with_modules  # noqa: E402

DATA = REPO / "profiles" / "external" / "moe-blackwell-steps.csv"
RECIPES = REPO / "profiles" / "external" / "moe-recipes.csv"
COUNTS = REPO / "profiles" / "external" / "tflops-counts.csv"
NVIDIA = ("NeMo", "Megatron")  # performance recipes: TP communication overlapped
BLACKWELL = ("dgx-b200", "gb200-nvl72")
# (source, hardware): the rows the shipped gb200-nvl72 sustained share was fitted on (their
# dense BF16 rows): in-sample
IN_SAMPLE = {("dgxc", "gb200-nvl72")}
# profile -> the profile whose fitted sustained share it takes (dgx-b200.toml [roofline]
# sustained_source: a GB200 carries the same B200 die)
SHARE_FROM = {"dgx-b200": "gb200-nvl72"}


def _int(value, default=None):
    return default if value is None or (isinstance(value, float) and math.isnan(value)) \
        else int(value)


# module names the rows' sources write for Megatron-Core's: the GB200 optimization guide's
# "--recompute-modules mlp up_proj" (mla_up_proj, the only up-projection module), and
# DeepSeek-V3's report, section 3.2.3 ("Recomputation of RMSNorm and MLA Up-Projection")
MODULE_ALIASES = {"up_proj": "mla_up_proj", "RMSNorm and MLA up-projection":
                  "layernorm mla_up_proj"}


def recompute_of(text) -> str:
    """The row's recomputation as this tool names it: none, full, or Megatron-Core's
    selective recomputation of the modules it lists (vocabulary/recompute.py)."""
    if not isinstance(text, str) or text.strip() in ("", "none"):
        return "none"
    if text.strip().startswith("full"):
        return "full"
    named = text.split(":", 1)[1].strip() if ":" in text else "core_attn"
    named = MODULE_ALIASES.get(named, named)
    return with_modules(" ".join(MODULE_ALIASES.get(m, m) for m in named.split()))


def by_case(path: Path) -> dict[str, dict]:
    """Per case, what a recipe table states ('' not stated)."""
    table = pd.read_csv(path, comment="#", dtype=str, keep_default_na=False)
    return {r["case"]: r for r in table.to_dict("records")}


# the dispatcher, overlap and FP8 gathers of each MoE row's recipe (moe-recipes.csv)
RECIPE = by_case(RECIPES)
# the attention kernel of the rows whose stack ran another than the tool's default for it
# (profiles/external/attention-backends.csv)
ATTENTION = by_case(REPO / "profiles" / "external" / "attention-backends.csv")
# the MTP layers and pipeline layout of the rows whose recipe states them
LAYOUTS = REPO / "profiles" / "external" / "pipeline-layouts.csv"
LAYOUT = by_case(LAYOUTS)
# how each source stating TFLOP/s only counted them (tflops-counts.csv), by source
COUNT = {r["source"]: r for r in pd.read_csv(COUNTS, comment="#", dtype=str,
                                             keep_default_na=False).to_dict("records")}
# what each row's recipe sets for recomputation and offloading where the published table does
# not say (profiles/external/step-recompute.csv)
RECOMPUTE_SET = REPO / "profiles" / "external" / "step-recompute.csv"
RECOMPUTE_RECIPE = by_case(RECOMPUTE_SET)
# what each row's recipe sets for its gradients' and optimizer state's precision
# (profiles/external/step-optimizer.csv; not found: the tool's fp32 defaults)
OPTIMIZER_SET = REPO / "profiles" / "external" / "step-optimizer.csv"
OPTIMIZER_RECIPE = by_case(OPTIMIZER_SET)


# the FP8 recipe a row names (Megatron-LM's --fp8-recipe names), from its case name first (the
# collector's suffix: mxfp8, -mx, fp8cs) and then its quote (the source's words: MXFP8; FP8-CS,
# or NeMo's "scaling factors calculated (computed) in the current step", which its performance
# summary says of every FP8 row from container 25.04 on; FP8-BLK or blockwise; delayed or
# FP8-DS); DeepSeek-V3's own run scales 1 x 128 tiles (its report, section 3.3.2): blockwise.
# None: the row names none (the tool's default, delayed). Read after the FP8 casts were
# priced (late-constants.md row 47).
RECIPE_WORDS = (("mxfp8", r"mxfp8|-mx$"),
                ("tensorwise", r"fp8[-_]?cs|current scaling|in the current step|"
                               r"Container: NeMo 25\.(0[4-9]|1[0-2])"),
                ("blockwise", r"fp8-blk|blockwise"), ("delayed", r"delayed|fp8-ds"))


def fp8_recipe_of(r) -> str | None:
    """The FP8 recipe row `r` names (RECIPE_WORDS), or None."""
    if r.precision != "fp8":
        return None
    for text in (r.case, str(r.quote)):
        for recipe, words in RECIPE_WORDS:
            if re.search(words, text, re.IGNORECASE):
                return recipe
    return "blockwise" if r.source == "dsv3" else None


def precision_of(r, said: dict, defaults: bool) -> Precision:
    """The row's FP8 and, as its recipe sets them, gradients reduced in bf16
    (grad_reduce_in_fp32 false: Megatron's bf16 main-gradient buffer), bf16 optimizer moments
    beside fp32 master weights (the precision-aware optimizer), FP8 parameter gathers and the
    GEMMs FP8 quantizes
    (moe-recipes.csv, else step-optimizer.csv); `defaults`: the tool's own (fp32)."""
    opt = {} if defaults else OPTIMIZER_RECIPE.get(r.case, {})
    fp8 = r.precision == "fp8"
    gather = said.get("fp8_param_gather") or opt.get("fp8_param_gather", "")
    moments = opt.get("exp_avg_dtype") == "bf16" and opt.get("exp_avg_sq_dtype") == "bf16" \
        and opt.get("main_params_dtype") in ("", "fp32")
    return Precision(grad_dtype="bf16" if opt.get("grad_reduce_in_fp32") == "false"
                     else DEFAULT_GRAD_DTYPE, fp8=fp8,
                     optimizer_dtype="bf16-moments" if moments else "fp32",
                     fp8_param_gather=fp8 and gather == "true",
                     fp8_recipe=None if defaults else fp8_recipe_of(r),
                     # the GEMMs the recipe quantizes (moe-recipes.csv fp8_scope; blank: all)
                     fp8_scope=(said.get("fp8_scope") or None) if fp8 and not defaults
                     else None)


def stated_recompute(r) -> tuple[str | None, str]:
    """(the row's recomputation as its table or, where the table is silent, its recipe states
    it; None where neither does), and where it came from."""
    if isinstance(r.recompute, str) and r.recompute.strip():
        return r.recompute, "table"
    said = RECOMPUTE_RECIPE.get(r.case, {}).get("recompute", "")
    return (said, "recipe") if said else (None, "unknown")


def options(r, defaults: bool = False) -> StepOptions:
    """The step a row describes (module docstring); `defaults`: the tool's MoE defaults
    instead of the recipe's dispatcher, overlap and FP8 gathers."""
    said = {} if defaults else RECIPE.get(r.case, {})
    layout = LAYOUT.get(r.case, {})  # its MTP layers and pipeline layout, where stated
    tp, pp = _int(r.tp, 1), _int(r.pp, 1)
    vp = _int(r.vp, 1)
    interleaved = pp > 1 and vp > 1
    torchtitan = "torchtitan" in r.framework
    ep, etp = _int(r.ep, 1), _int(r.etp)
    if etp is None and ep > 1 and (int(r.gpus) // pp) % (ep * tp):
        etp = 1  # not published, and EP x TP does not divide the stage: the run had ETP 1
    parallel = Parallelism(
        tp=tp, pp=pp, pp_schedule="interleaved" if interleaved else "1f1b",
        virtual_stages=vp if interleaved else None,
        recompute=recompute_of(stated_recompute(r)[0]),
        cp=_int(r.cp, 1), ep=ep, etp=etp,
        moe_dispatcher=said.get("dispatcher") or None,
        moe_overlap=True if said.get("ep_overlap") == "true" else None,
        moe_shared_overlap=True if said.get("shared_expert_overlap") == "true" else None,
        mtp_layers=_int(layout.get("mtp_layers")), pp_layout=layout.get("pp_layout") or None,
        tp_pp_dp_mapping=True if said.get("tp_pp_dp_mapping") == "true" else None)
    nvidia = any(name in r.framework for name in NVIDIA)
    fsdp = torchtitan or r.sharding == "fsdp"
    return StepOptions(
        r.model, r.hardware, int(r.gpus),
        scheme=fsdp_scheme(pp) if fsdp else SchemeOptions("dense-adamw"),
        batch=Batch(_int(r.micro_batch, 1), int(r.seq), None, int(r.global_batch)),
        parallelism=parallel,
        precision=precision_of(r, said, defaults),
        # TP communication overlapped for NVIDIA's recipes with TP > 1, unless the run's own
        # config says otherwise (moe-recipes.csv tp_comm_overlap)
        overlap=Overlap(tp_comm=True if tp > 1 and (said.get("tp_comm_overlap") == "true" or (
            nvidia and said.get("tp_comm_overlap", "") == "")) else None,
                        # the next step's parameter gathers overlapped with its forward, where
                        # the run's config says (moe-recipes.csv overlap_param_gather; blank:
                        # Megatron's default, off); under Megatron-FSDP the same flag is FSDP's
                        # all-gather prefetch, which the dense-zero3 scheme always prices
                        param=None if fsdp else {"true": True, "false": False}.get(
                            said.get("overlap_param_gather", ""))),
        # a torchtitan run keeps what torchtitan keeps (its loss, TP and pipeline buffers)
        pricing=Pricing(stack="torchtitan" if torchtitan else None,
                        attention=ATTENTION.get(r.case, {}).get("attention") or None,
                        # both torchtitan sources ran torch.compile (mxfp8.md: 'torch.compile
                        # enabled'; Nebius' train_671b.sh: --compile.enable): fused layers
                        torch_compile=True if torchtitan else None,
                        cuda_graphs=said.get("cuda_graphs") == "true"))


def source_flops_per_token(r, cfg) -> float:
    """The FLOPs per token (forward and backward) the row's source counted its TFLOP/s by
    (tflops-counts.csv); a source not in that file is refused, not priced by this tool's count."""
    c = COUNT.get(r.source)
    if c is None:
        raise UserError(f"{r.case}: its source {r.source!r} states TFLOP/s only and "
                        f"{COUNTS.name} does not say how it counted them")
    return megatron_flops_per_token(
        cfg.model, cfg.seq, c["count"].removeprefix("megatron-"), int(c["mtp_layers"]),
        padded_vocab(cfg.model.arch.vocab_size, int(c["vocab_divisible_by"]), cfg.tp))


def published_s(r, cfg, own_count: bool = False) -> float:
    """The row's published step time; `own_count`: a TFLOP/s row converted with this tool's
    FLOPs per token instead of its source's (the sensitivity)."""
    if r.step_from == "stated":
        return float(r.step_s)
    tokens = cfg.sequences * cfg.seq
    if r.step_from == "tokens":
        return tokens / (float(r.tokens_per_s_per_gpu) * cfg.gpus)
    per_token = (3 * forward_flops_per_token(cfg.model, cfg.seq) if own_count else
                 source_flops_per_token(r, cfg))
    return per_token * tokens / (float(r.tflops_per_gpu) * 1e12 * cfg.gpus)


def with_share(cfg, share: float | None):
    """`cfg` on its hardware with another sustained share (None: as shipped)."""
    if share is None:
        return cfg
    hw = cfg.hardware
    return replace(cfg, hardware=replace(hw, roofline=replace(hw.roofline, sustained=share)))


def evaluate(r, share: float | None = None, defaults: bool = False) -> dict:
    row = {"case": r.case, "source": r.source, "model": r.model, "hardware": r.hardware,
           "gpus": r.gpus, "precision": r.precision, "step_from": r.step_from,
           "moe": None, "published_s": math.nan, "predicted_s": math.nan,
           "error_pct": math.nan, "memory_GB": math.nan, "fits": None, "note": ""}
    if any(isinstance(v, float) and math.isnan(v) for v in (r.tp, r.pp, r.global_batch)):
        row["note"] = "no layout or batch published"
        return row
    try:
        cfg = options(r, defaults).config()
    except UserError as e:
        row["note"] = f"refused: {e}"
        return row
    row["moe"] = cfg.model.moe is not None
    row["layout"] = layout_of(cfg)
    row["framework"] = r.framework
    cfg = with_share(cfg, share)
    use = step_memory(cfg)
    row["memory_GB"] = use.total / 1e9
    row["fits"] = use.total <= usable_bytes(cfg.hardware, step_communicators(cfg))
    row["recompute"], row["recompute_from"] = cfg.recompute, stated_recompute(r)[1]
    row["offload"] = RECOMPUTE_RECIPE.get(r.case, {}).get("activation_offload", "")
    res = simulate_step(cfg)
    row["published_s"] = published_s(r, cfg)
    row["predicted_s"] = res.step_time_s
    row["error_pct"] = 100 * (res.step_time_s / row["published_s"] - 1)
    if r.step_from == "tflops":
        row["own_count_error_pct"] = 100 * (res.step_time_s / published_s(r, cfg, True) - 1)
    row.update(compute_s=res.compute_s, ep_comm_s=res.ep_comm_s or 0.0,
               exposed_comm_s=res.exposed_comm_s, bubble_s=res.pipeline_bubble_s,
               tp_comm_s=res.tp_comm_s)
    return row


def counts_check(rows: pd.DataFrame) -> str:
    """How well Megatron's two counts (simulator/step/framework_flops.py) give the FLOPs per
    token of the rows that state TFLOP/s and tokens/s or a step with its batch (TFLOP/s over
    tokens/s: their source's own count), per source: median and max |ratio - 1| of each
    count (no MTP layer: rows whose source counted one sit ~4% above the causal count)."""
    from profiles import load_model

    both = rows[rows["tflops_per_gpu"].notna() & (
        rows["tokens_per_s_per_gpu"].notna()
        | ((rows["step_from"] == "stated") & rows["global_batch"].notna()))]
    lines = ["  Megatron's counts against the rows stating TFLOP/s and tokens/s or a step "
             "(their source's FLOPs per token), median / max |count / source's - 1| (rows):"]
    for source, mine in both.groupby("source"):
        cells = []
        for version in ("full", "causal"):
            errs = []
            for r in mine.itertuples():
                model = load_model(r.model)
                if version == "full" and model.mla is not None:
                    continue  # the full count has no multi-latent-attention terms
                tokens_per_s = (float(r.tokens_per_s_per_gpu) if r.step_from != "stated" else
                                float(r.global_batch) * float(r.seq)
                                / (float(r.step_s) * float(r.gpus)))
                own = float(r.tflops_per_gpu) * 1e12 / tokens_per_s
                vocab = padded_vocab(model.arch.vocab_size, 128, _int(r.tp, 1))
                count = megatron_flops_per_token(model, int(r.seq), version, vocab=vocab)
                errs.append(abs(count / own - 1))
            cells.append(f"{version} {100 * statistics.median(errs):.1f} / "
                         f"{100 * max(errs):.1f}% ({len(errs)})" if errs else f"{version} -")
        lines.append(f"    {source}: " + "; ".join(cells))
    return "\n".join(lines)


def summary(df: pd.DataFrame, by: str) -> pd.DataFrame:
    if "error_pct" not in df.columns:  # no row of this kind priced (e.g. --source mlperf)
        df = df.assign(error_pct=float("nan"))
    priced = df.dropna(subset=["error_pct"])
    g = priced.groupby(by)["error_pct"]
    out = pd.DataFrame({"rows": g.size(), "median_abs_err_pct": g.apply(lambda e: e.abs().median()),
                        "max_abs_err_pct": g.apply(lambda e: e.abs().max()),
                        "median_err_pct": g.median()})
    return out.round(1)


# the source the shipped dgx-h100 (so dgx-b200's and dgx-h800's, assumed from it) and
# gb200-nvl72 sustained shares were fitted on (step-calibration.csv; row 30 of
# late-constants.md): its rows are never in a band
FIT_SOURCE = "dgxc"


def bands(df: pd.DataFrame) -> pd.DataFrame:
    """The held-out rows' bands (module docstring: `--bands`)."""
    held = df[df["error_pct"].notna() & (df["step_from"] != "tflops")
              & (df["source"] != FIT_SOURCE)].copy()
    held["schemes"] = "dense"  # dense-adamw or FSDP: every published run's
    return summarize_sources(held).reset_index(drop=True)


def fit_share(rows: pd.DataFrame, defaults: bool = False) -> float:
    """The sustained share at which `rows`' median log error is zero (bisection, 0.005)."""
    def median_log(share: float) -> float:
        errs = [evaluate(r, share, defaults)["error_pct"] for r in rows.itertuples()]
        return float(pd.Series([math.log1p(e / 100) for e in errs if e == e]).median())

    return share_where_zero(median_log, 0.3, 1.2, steps=12)


def loso(rows: pd.DataFrame, defaults: bool = False) -> pd.DataFrame:
    """Blackwell rows, each source predicted with shares fitted on the other sources' dense
    BF16 rows of the profile its own takes its share from (module docstring)."""
    from profiles import load_model

    is_dense = pd.Series([load_model(m).moe is None for m in rows["model"]], index=rows.index)
    dense = rows[is_dense & (rows["precision"] == "bf16") & rows["hardware"].isin(BLACKWELL)
                 & rows["tp"].notna()]
    out = []
    for source in sorted(set(rows["source"])):
        for hw in BLACKWELL:
            held = rows[(rows["source"] == source) & (rows["hardware"] == hw)]
            fit_rows = dense[(dense["source"] != source)
                             & (dense["hardware"] == SHARE_FROM.get(hw, hw))]
            if held.empty or fit_rows.empty:
                continue
            share = fit_share(fit_rows, defaults)
            for r in held.itertuples():
                row = evaluate(r, share, defaults)
                out.append({**row, "share": share,
                            "fitted_on": ";".join(sorted(set(fit_rows["source"])))})
    return pd.DataFrame(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", help="write the per-row table here")
    ap.add_argument("--source", help="only this source's rows")
    ap.add_argument("--bands", help="write the held-out rows' bands here (shipped: "
                    "profiles/external/moe-step-fidelity-bands.csv)")
    ap.add_argument("--defaults", action="store_true",
                    help="the tool's MoE defaults for every row (alltoall, no overlap, 16-bit "
                         "gathers), not the recipes' (the sensitivity of late-constants rows "
                         "31-32)")
    ap.add_argument("--loso", action="store_true",
                    help="also: Blackwell shares fitted leaving each source out")
    args = ap.parse_args()
    script_outputs(ap, {"--csv": args.csv, "--bands": args.bands})
    rows = pd.read_csv(DATA, comment="#")
    if args.source:
        rows = rows[rows["source"] == args.source]
    t0 = time.perf_counter()
    df = pd.DataFrame([evaluate(r, None, args.defaults) for r in rows.itertuples()])
    df["in_sample"] = [(s, h) in IN_SAMPLE and m is False and p == "bf16" for s, h, m, p in
                       zip(df["source"], df["hardware"], df["moe"], df["precision"],
                           strict=True)]
    df["kind"] = [("MoE" if m else "dense") + (", Blackwell" if h in BLACKWELL else ", Hopper")
                  if m is not None else "-" for m, h in zip(df["moe"], df["hardware"],
                                                            strict=True)]
    pd.set_option("display.width", 200)
    pd.set_option("display.max_rows", 500)
    pd.set_option("display.max_colwidth", 60)
    held_df = df[~df["in_sample"]]
    stated = held_df[held_df["step_from"] != "tflops"]
    print(f"# {len(df)} published rows ({DATA.relative_to(REPO)}); {int(df['in_sample'].sum())} "
          f"in-sample (gb200-nvl72's sustained share was fitted on them), the rest held out; "
          f"{time.perf_counter() - t0:.1f} s")
    print("\n## in-sample (the fit's own rows), apart")
    print(summary(df[df["in_sample"]], "source").to_string())
    print("\n## step time, held out, rows stating a step or tokens per second, per source "
          "(dgxc's held-out GB200 rows, FP8 and MoE, share their source with the fit)")
    print(summary(stated, "source").to_string())
    print("\n## the same rows by kind")
    print(summary(stated, "kind").to_string())
    print("\n## rows stating TFLOP/s only, converted with their source's FLOPs count "
          "(tflops-counts.csv)")
    tflops = held_df[held_df["step_from"] == "tflops"]
    print(summary(tflops, "source").to_string())
    print("  the same rows converted with this tool's own FLOPs per token instead (the "
          "sensitivity to the count):")
    print(summary(tflops.drop(columns="error_pct").rename(
        columns={"own_count_error_pct": "error_pct"}), "source").to_string())
    print(counts_check(rows))
    refused = df[df["note"].str.startswith("refused")]
    # the memory verdict counts only rows whose recomputation a source states and that offload
    # no activations to the host (not modelled); the others are reported apart
    judged = df[(df["recompute_from"] != "unknown") & ~df["offload"].fillna("").str.contains(
        "cpu_offloading")]
    apart = df[df["fits"].notna()].drop(judged.index, errors="ignore")
    print(f"\n## runs that ran: {int((judged['fits'] == True).sum())} accepted in memory, "  # noqa: E712
          f"{int((judged['fits'] == False).sum())} over the usable memory (priced anyway), "  # noqa: E712
          f"{len(refused)} refused by the layout rules; apart, {len(apart)} whose recomputation "
          f"no source states or that offload activations to the host (not modelled): "
          f"{int((apart['fits'] == True).sum())} accepted, "  # noqa: E712
          f"{int((apart['fits'] == False).sum())} over")  # noqa: E712
    for r in judged[judged["fits"] == False].itertuples():  # noqa: E712
        print(f"  over: {r.case}, {r.memory_GB:.1f} GB, recompute {r.recompute} "
              f"({r.recompute_from})")
    for r in refused.itertuples():
        print(f"  {r.case}: {r.note}")
    skipped = df[df["note"] == "no layout or batch published"]
    print(f"\n## not priced: {len(skipped)} rows without a published layout or batch: "
          + ", ".join(skipped["case"]))
    print("\n## every row")
    cols = ["case", "kind", "in_sample", "gpus", "precision", "published_s", "predicted_s",
            "error_pct", "memory_GB", "fits", "compute_s", "ep_comm_s", "exposed_comm_s",
            "bubble_s"]
    print(df.dropna(subset=["error_pct"])[cols].to_string(index=False,
                                                          float_format=lambda x: f"{x:.3f}"))
    if args.loso:
        held = loso(rows, args.defaults)
        held["kind"] = [("MoE" if m else "dense") + f", {p}" for m, p in
                        zip(held["moe"], held["precision"], strict=True)]
        print("\n## --loso: Blackwell rows with the sustained share fitted on the other "
              "sources' dense BF16 rows of the profile their share comes from (held out)")
        stated_h = held[held["step_from"] != "tflops"]
        print(summary(stated_h, "source").to_string())
        print(summary(stated_h, "kind").to_string())
        print(held.groupby(["source", "hardware"])[["share", "fitted_on"]].first().to_string())
    if args.csv:
        df.to_csv(args.csv, index=False)
    if args.bands:
        if args.source or args.defaults:
            ap.error("--bands: the shipped bands are of every row, priced as its recipe says "
                     "(no --source, no --defaults)")
        bands(df).to_csv(args.bands, index=False)
        print(f"bands written to {args.bands}")


if __name__ == "__main__":
    main()
