"""Per-GPU memory of published training runs against the memory model (simulator/memory/peak.py).

Two questions, on rows nobody fitted anything to:
1. Does the model refuse a run that ran? Every published step in profiles/external/
   parallel-steps.csv and step-calibration.csv ran on its GPUs, as did every row of
   profiles/external/published-memory.csv marked `ran`: each is priced, and its verdict
   printed with the share of usable memory left (negative: refused).
2. How close is the predicted peak to a reported one? Rows of published-memory.csv with a
   peak: the model's allocated peak, and with the profile's allocator slack where the source
   reports reserved memory (torchtitan's metrics print max reserved), against it.
The verdicts are printed again with the allocator slack at 0 and 10% (the shipped 5% is an
assumption: no published figure was found, docs/research/memory-terms.md section 9).

Each row is priced as its source states it: its attention kernel (`unfused` keeps the s x s
scores; `sdpa` runs a fused kernel, priced as `flash`; blank: flash, assumed) and its sequence
parallelism (the `sequence_parallel` column; blank with TP > 1: on, assumed, and counted). Both
directions are reported, per distinct configuration (rows the memory model cannot tell apart:
the same GPU, outcome and predicted peak, e.g. one NeMo recipe at eight GPU counts, or the
same run in two step tables, count once): runs that ran and were accepted, runs that ran and
were refused, runs published as not fitting that were refused, and those that were accepted.

Run: python bench/memory_published.py [--csv OUT]
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import fidelity_parallel as fp  # noqa: E402

from cli.outputs import script_outputs  # noqa: E402
from profiles import UserError, load_hardware  # noqa: E402
from profiles.models import Arch  # noqa: E402
from scape.plan import Dtypes, make_config  # noqa: E402
from simulator.memory.peak import (  # noqa: E402
    THIN_SPARE_PCT,
    memory_use,
    nccl_communicators,
    reserve,
    step_communicators,
    step_memory,
)

PUBLISHED = REPO / "profiles" / "external" / "published-memory.csv"
GIB = 2.0**30
# the GPU a row names -> the shipped profile of its host where one is shipped (torchtitan's
# and torchao's H100 96GB rows ran on Meta's Grand Teton hosts, grand-teton-h100; H200 rows on
# dgx-h200), else of its GPU family (its [memory] table); a row whose GPU has other memory than
# its profile's gets the datasheet's GB as the device's bytes (below what the driver reports)
# and the profile's reserve terms. Matched in this order: the first name a row's GPU contains.
GPU_PROFILE = {"GH200": "vista-gh200", "H100-96GB": "grand-teton-h100", "H100": "dgx-h100",
               "H200": "dgx-h200", "A100": "dgx-a100", "B200": "dgx-b200"}
# a row's sharding -> the scheme that holds the same state (simulator/memory/peak.py)
SHARDING = {"none": "dense-ddp", "zero1": "dense-zero1", "distopt": "dense-zero1",
            "zero2": "dense-zero2", "zero3": "dense-zero3", "fsdp": "dense-zero3",
            "hsdp": "dense-zero3"}
# a row's attention -> the memory model's: PyTorch's scaled_dot_product_attention runs a fused
# kernel (flash or memory-efficient) for bf16 training, keeping no s x s scores
ATTENTION = {"flash": "flash", "sdpa": "flash", "unfused": "unfused"}
RECOMPUTE = {"none": "none", "full": "full", "selective": "selective",
             "selective-op": "selective-op", "selective-norm": "selective-norm"}
# a row's loss -> the model's (fp32 logits through PyTorch's cross_entropy: "eager"); a row
# that does not say: its framework's default (llm-foundry: flash-attn's fused cross-entropy,
# ComposerMPTCausalLM loss_fn 'fused_crossentropy'; torchtitan: eager; else Megatron's fp32)
LOSS = {"fp32-logits": "eager", "fp32": "fp32", "fused": "fused", "chunked": "chunked"}
FRAMEWORK_LOSS = {"fsdp": "fused", "torchtitan": "eager"}
# rows whose micro-batch the source does not state and whose inferred one cannot hold on the
# GPU by any activation count (the data file's comment says why): priced and reported apart,
# with the micro-batches that fit, not counted as runs the model refuses
INFERRED_MICRO_BATCH = {"fa2-gpt3-2.7B-8k": "profiles/external/parallel-steps.csv, fa2-* comment"}
# a row's framework -> what its stack keeps (simulator/memory/activations.py; vocabulary STACKS)
STACK = {"torchtitan": "torchtitan"}
# sources whose torchtitan ran PyTorch's pipelining before it stopped keeping every stage's
# outputs until the next step (pytorch#153383, May 2025; torchtitan e5ef99aab, October 2025:
# docs/research/fsdp2-under-pp-memory.md section 2): their rows keep them
# (simulator/memory/activations.py pipeline_buffers_per_token)
KEPT_OUTPUTS = {"tt-bench-202412 Table 5", "tt-bench-202412 Table 6"}


def _blank(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value == ""


def _get(row, column, default=None):
    value = getattr(row, column, None)
    return default if _blank(value) else value


def step_rows() -> list[dict]:
    """Every published step of the step-time sets, as bench/fidelity_parallel.py builds it:
    each ran, none reports its memory."""
    return [{"case": row.case, "source": path.name, "gpu": row.hardware,
             "hardware": row.hardware, "ran": True, "peak_GiB": math.nan, "peak_kind": "none",
             "cfg": fp.step_config(row, load_hardware(row.hardware))}
            for path in (fp.DATA, fp.H100_STEPS)
            for row in pd.read_csv(path, comment="#").itertuples()]


def published_rows() -> tuple[list[dict], list[dict]]:
    """The rows of published-memory.csv the model can price; the others, with why not."""
    if not PUBLISHED.exists():
        return [], [{"case": str(PUBLISHED), "why": "no such file"}]
    rows, skipped = [], []
    base = fp.gpt(next(pd.read_csv(fp.DATA, comment="#").itertuples()))
    for row in pd.read_csv(PUBLISHED, comment="#").itertuples():
        gpu = str(_get(row, "gpu", ""))
        profile = next((p for g, p in GPU_PROFILE.items() if g in gpu), None)
        why = None
        if profile is None:
            why = f"no shipped profile of a {gpu or 'unnamed'} GPU"
        elif _blank(_get(row, "recompute")):
            why = "the source does not state the recomputation"
        elif str(_get(row, "recompute", "")) not in RECOMPUTE:
            why = f"recompute {row.recompute!r} is not modelled"
        elif str(_get(row, "offload", "none")) != "none":
            why = f"{row.offload} offload to host memory is not modelled"
        elif str(_get(row, "attention", "flash")) not in ATTENTION:
            why = f"attention {row.attention!r} is not modelled"
        elif str(_get(row, "sharding", "")) not in SHARDING:
            why = f"sharding {row.sharding!r} is not modelled"
        elif any(_blank(_get(row, c)) for c in ("layers", "hidden", "heads", "vocab", "seq",
                                                    "micro_batch", "gpus")):
            why = "the source leaves the model shape, sequence or micro-batch unstated"
        if why:
            skipped.append({"case": row.case, "why": why})
            continue
        mlp = str(_get(row, "mlp", "gelu"))
        hidden, ffn = int(row.hidden), int(_get(row, "ffn", 4 * int(row.hidden)))
        family = "gpt" if mlp == "gelu" else "llama"
        d_ff = 2 * ffn // 3 if mlp == "squared_relu" else ffn
        arch = Arch(n_layers=int(row.layers), d_model=hidden, n_heads=int(row.heads),
                    n_kv_heads=int(_get(row, "kv_heads", row.heads)), d_ff=d_ff,
                    vocab_size=int(row.vocab), seq_len=int(row.seq),
                    tied_embeddings=str(_get(row, "tied", "false")).lower() == "true",
                    source=str(PUBLISHED), assumed=None, dropout=False)
        model = replace(base, name=row.case, family=family, arch=arch, reference_params=None)
        gpus, tp, pp = int(row.gpus), int(_get(row, "tp", 1)), int(_get(row, "pp", 1))
        cp = int(_get(row, "cp", 1))
        dp = gpus // (tp * pp * cp)
        sharding = str(_get(row, "sharding", "none"))
        if str(_get(row, "framework", "")) == "torchtitan":  # FSDP over dp_shard x cp, always
            sharding = "fsdp"
        scheme = make_config(SHARDING[sharding], optimizer="adamw")
        grad = {"bf16": 2, "fp32": 4}[str(_get(row, "grad_dtype", "bf16"))]
        chunks = int(_get(row, "virtual_stages", 1))
        memory_GB = float(_get(row, "gpu_memory_GB", math.nan))
        stated_sp = _get(row, "sequence_parallel")
        sp = tp > 1 if stated_sp is None else bool(stated_sp)
        rows.append({
            "case": row.case, "source": str(_get(row, "source", "")), "gpu": gpu,
            "hardware": profile, "memory_GB": memory_GB,
            "ran": str(_get(row, "ran", "true")).lower() == "true",
            "peak_GiB": float(_get(row, "peak_GiB", math.nan)),
            "peak_kind": str(_get(row, "peak_kind", "unknown")),
            "communicators": nccl_communicators(dp * cp, tp, pp, cp),
            "assumed": ", ".join(a for a, blank in (
                ("attention flash", _blank(_get(row, "attention"))),
                ("sequence parallelism", tp > 1 and stated_sp is None)) if blank),
            "args": dict(model=model, scheme=scheme, dp=dp * cp, tp=tp,
                         micro_batch=int(row.micro_batch), seq_len=int(row.seq) // cp,
                         dtypes=Dtypes(grad_bytes=grad),
                         recompute=RECOMPUTE[str(_get(row, "recompute", "none"))],
                         sequence_parallel=sp, pp=pp, chunks=chunks,
                         attention=ATTENTION[str(_get(row, "attention", "flash"))],
                         micro_batches=None,
                         loss=LOSS.get(str(_get(row, "loss", "unknown")),
                                       FRAMEWORK_LOSS.get(str(_get(row, "framework", "")),
                                                          "fp32")),
                         optimizer_dtype=str(_get(row, "optimizer_dtype", "fp32")),
                         stack=STACK.get(str(_get(row, "framework", "")), "megatron"),
                         pp_kept_outputs=str(_get(row, "source", "")) in KEPT_OUTPUTS)})
    return rows, skipped


def authors_rows() -> pd.DataFrame:
    """The SCAPE authors' memory rows as `scape validate --external scape-sc26` predicts them."""
    from profiles.external import load_external
    from reports.external_memory import memory_table

    return memory_table(load_external("scape-sc26"))[0]


def price(rows: list[dict], slack: float | None = None) -> pd.DataFrame:
    """Each row's predicted peak (allocated; reserved with the slack), usable memory and
    verdict; `slack`: the allocator slack to use instead of the profile's."""
    out = []
    for r in rows:
        hw = load_hardware(r["hardware"])
        held = reserve(hw)[0]
        given = r.get("memory_GB", math.nan)
        if not math.isnan(given) and given != hw.gpu.memory_GB:  # another part of the family
            held = replace(held, device_MiB=given * 1e9 / 2**20)
        if slack is not None:
            held = replace(held, fragmentation=slack)
        try:
            use = step_memory(r["cfg"]) if "cfg" in r else memory_use(**r["args"])
        except UserError as e:
            out.append({"case": r["case"], "why": str(e)})
            continue
        comms = step_communicators(r["cfg"]) if "cfg" in r else r["communicators"]
        usable = held.usable_bytes(comms)
        reserved = use.total * (1 + held.fragmentation)
        predicted = reserved if r["peak_kind"] == "reserved" else use.total
        out.append({
            "case": r["case"], "gpu": r["gpu"], "ran": r["ran"],
            "allocated_GiB": use.total / GIB, "usable_GiB": usable / GIB,
            "spare_pct": 100 * (1 - use.total / usable), "fits": use.total <= usable,
            "peak_kind": r["peak_kind"], "reported_GiB": r["peak_GiB"],
            "predicted_GiB": predicted / GIB,
            "error_pct": 100 * (predicted / (r["peak_GiB"] * GIB) - 1)
            if not math.isnan(r["peak_GiB"]) else math.nan,
            "source": r["source"], "assumed": r.get("assumed", ""),
            "hardware": r["hardware"],
            "stack": r["cfg"].stack if "cfg" in r else r["args"]["stack"]})
    return pd.DataFrame(out)


def agreement(df: pd.DataFrame) -> pd.DataFrame:
    """Published outcome against the model's decision, per distinct configuration: rows with
    the same GPU, outcome and predicted allocated peak (to the byte) are one configuration (the
    memory model gives every input it reads a say in that peak, so rows it prices alike differ
    only in what it does not read, a GPU count under unsharded state, a software release)."""
    priced = df[df["allocated_GiB"].notna()].copy()
    priced["config"] = list(zip(priced["gpu"], priced["ran"], priced["allocated_GiB"],
                                strict=True))
    def outcomes(frame: pd.DataFrame) -> pd.DataFrame:
        return pd.crosstab(frame["ran"].map({True: "ran", False: "did not fit"}),
                           frame["fits"].map({True: "accepted", False: "refused"})).reindex(
            index=["ran", "did not fit"], columns=["accepted", "refused"], fill_value=0)

    return pd.concat([outcomes(priced.drop_duplicates("config")),
                      outcomes(priced).add_suffix("_rows")], axis=1)


def smaller_micro_batches(rows: list[dict], case: str) -> list[tuple[int, float]]:
    """(micro-batch, spare %) of a step row at each smaller power-of-two micro-batch."""
    row = next(r for r in rows if r["case"] == case)
    out, mb = [], row["cfg"].micro_batch // 2
    while mb >= 1:
        priced = price([{**row, "cfg": replace(row["cfg"], micro_batch=mb)}])
        out.append((mb, float(priced["spare_pct"].iloc[0])))
        mb //= 2
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", default=None, help="also write the table here")
    parser.add_argument("--bands", default=None,
                        help="write the reported peaks' errors per (profile, stack) here "
                             "(shipped: profiles/external/memory-fidelity-bands.csv)")
    args = parser.parse_args()
    script_outputs(parser, {"--csv": args.csv, "--bands": args.bands})
    published, skipped = published_rows()
    rows = step_rows() + published
    df = price(rows)
    fmt = {"float_format": lambda x: f"{x:.1f}", "index": False}
    ran = df[df["ran"]]
    print("1. runs that ran: the model's verdict (spare_pct: share of usable memory left)")
    print(ran[["case", "gpu", "allocated_GiB", "usable_GiB", "spare_pct", "fits"]]
          .to_string(**fmt))
    failed = df[df["why"].notna()] if "why" in df else df.iloc[:0]
    for r in failed.itertuples():
        print(f"not priced: {r.case}: {r.why}")
    inferred = ran[ran["case"].isin(INFERRED_MICRO_BATCH)]
    ran = ran[~ran["case"].isin(INFERRED_MICRO_BATCH)]
    refused = ran[~ran["fits"]]
    print(f"\n{len(ran)} runs that ran; refused: {len(refused)}"
          + (f" ({', '.join(refused['case'])})" if len(refused) else "")
          + f"; thin (< {THIN_SPARE_PCT:g}% spare): "
          f"{int(((ran['spare_pct'] < THIN_SPARE_PCT) & ran['fits']).sum())}")
    for r in inferred.itertuples():
        print(f"reported apart: {r.case}, micro-batch inferred, not stated "
              f"({INFERRED_MICRO_BATCH[r.case]}): {r.spare_pct:+.1f}% spare at it; "
              + "; ".join(f"micro-batch {mb}: {spare:+.1f}%"
                          for mb, spare in smaller_micro_batches(rows, r.case)))
    nofit = df[~df["ran"].astype(bool) & df["allocated_GiB"].notna()]
    print("\nruns published as not fitting: the model's verdict")
    print(nofit[["case", "gpu", "allocated_GiB", "usable_GiB", "spare_pct", "fits", "source"]]
          .to_string(**fmt))
    counted = df[~df["case"].isin(INFERRED_MICRO_BATCH)]
    print("\nboth directions: published outcome (rows) against the model's decision (columns), "
          "per distinct configuration (rows of the table counted in the _rows columns)")
    print(agreement(counted).to_string())
    assumed = counted[counted["assumed"].fillna("") != ""]
    if len(assumed):
        print(f"{len(assumed)} priced rows assume what their source does not state: "
              + "; ".join(f"{a} ({n})" for a, n in assumed["assumed"].value_counts().items()))
    peaks = df[df["reported_GiB"].notna()]
    if len(peaks):
        print("\n2. rows with a reported peak (nothing fitted on them; error_pct signed: "
              "negative, the model under-predicts)")
        print(peaks[["case", "gpu", "peak_kind", "reported_GiB", "predicted_GiB", "error_pct",
                     "source"]].to_string(**fmt))
        err = peaks["error_pct"].abs()
        print(f"\n{len(peaks)} rows: median |error| {err.median():.1f}%, max {err.max():.1f}% "
              f"({peaks.loc[err.idxmax(), 'case']}), median error "
              f"{peaks['error_pct'].median():+.1f}%; under-predicted "
              f"{int((peaks['error_pct'] < 0).sum())} of {len(peaks)}")
        by_source = peaks["source"].str.split().str[0]  # "tt-bench-202412 Table 1" -> its id
        for (kind, source), part in peaks.groupby(["peak_kind", by_source]):
            e = part["error_pct"]
            print(f"  {kind} peaks, {source}: {len(part)} rows, median {e.median():+.1f}%, "
                  f"range {e.min():+.1f}% to {e.max():+.1f}%")
    authors = authors_rows()
    print("\n3. the SCAPE authors' Megatron-LM memory table (scape validate --external "
          "scape-sc26, reports/external_memory.py: an interval over the unstated GPU count and "
          "allocated-to-reserved, the error to its nearer end)")
    aerr = authors["error_pct"].abs()
    print(f"{len(authors)} rows: median |error| {aerr.median():.1f}%, max {aerr.max():.1f}% "
          f"({authors.loc[aerr.idxmax(), 'series']} {authors.loc[aerr.idxmax(), 'model']})")
    if len(peaks):
        both = pd.concat([peaks["error_pct"], authors["error_pct"]]).abs()
        print(f"all {len(both)} reported peaks: median |error| {both.median():.1f}%, max "
              f"{both.max():.1f}%")
    for s in skipped:
        print(f"skipped: {s['case']}: {s['why']}")
    print("\nsensitivity to the allocator slack (shipped: 5%, an assumption):")
    for slack in (0.0, 0.10):
        alt = price(rows, slack)
        alt_ran = alt[alt["ran"] & ~alt["case"].isin(INFERRED_MICRO_BATCH)]
        line = f"  slack {slack:.0%}: refused {int((~alt_ran['fits']).sum())} of {len(alt_ran)}"
        alt_peaks = alt[alt["reported_GiB"].notna()]
        if len(alt_peaks):
            e = alt_peaks["error_pct"].abs()
            line += f"; peaks median |error| {e.median():.1f}%, max {e.max():.1f}%"
        print(line)
    if args.csv:
        df.to_csv(args.csv, index=False)
    if args.bands:
        memory_bands(peaks).to_csv(args.bands, index=False)
        print(f"bands written to {args.bands}")
    return 0


def memory_bands(peaks: pd.DataFrame) -> pd.DataFrame:
    """The reported peaks' signed errors per (shipped profile, stack, kind of peak): what
    `scape simulate`, `compare` and `plan` quote beside a memory figure
    (reports/memory_fidelity.py)."""
    from reports.fidelity import summarize
    from reports.memory_fidelity import KEYS

    out = summarize(peaks, list(KEYS), "error_pct")
    # how many of each band's peaks the model is below (plan's thin-headroom footnote)
    under = peaks.assign(under=peaks["error_pct"] < 0).groupby(list(KEYS))["under"].sum()
    return out.assign(under=[int(under[tuple(r)]) for r in out[list(KEYS)].values.tolist()])


if __name__ == "__main__":
    raise SystemExit(main())
