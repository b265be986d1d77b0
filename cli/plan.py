"""`scape plan`: the search over parallel layouts and schemes."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from cli.app import app
from cli.common import (
    BATCH_OPTS,
    DTYPE_OPTS,
    FP8_HELP,
    MOE_OPTS,
    PARALLEL_OPTS,
    STEP_OPTS,
    TP_OVERLAP_HELP,
    DispatcherChoice,
    DtypeChoice,
    Format3,
    Fp8RecipeChoice,
    Fp8ScopeChoice,
    PriceTierChoice,
    RankChoice,
    StackChoice,
    _progress,
)
from cli.run_options import RUN_OPTS, reliability_of
from profiles import UserError, load_hardware, load_model
from profiles.hardware import PRICE_TIER_KEYS
from reports.fidelity import heldout
from reports.memory_fidelity import memory_how_sure, reserved_under
from reports.step_fidelity import how_sure, layout_class, range_columns
from reports.step_fidelity import lookup as step_lookup
from reports.tables import check_format, comment_lines, render
from simulator.memory.peak import THIN_SPARE_PCT
from simulator.planning.options import Overlap, Precision
from simulator.planning.plan_request import PLAN_SCHEMES, PlanRequest
from simulator.run.sites import site_of
from vocabulary.units import figure_text, parse_names, parse_tokens

if TYPE_CHECKING:
    import pandas as pd


@app.command("plan")
def plan_cmd(
    model: str = STEP_OPTS["model"],
    tokens: float = typer.Option(..., "--tokens", "-t", parser=parse_tokens, metavar="TOKENS",
                                 help="tokens to train on, e.g. 1e12, 1T, 500B"),
    hardware: str = typer.Option(..., "--hardware", "-H", help="one or more, comma-separated"),
    max_gpus: int = typer.Option(4096, "--max-gpus",
                                 help="the most GPUs a plan may use (every count up to it "
                                      "that whole nodes and the layout allow)"),
    deadline_hours: float = typer.Option(None, "--deadline-hours",
                                        help="keep plans that train the tokens within "
                                             "this many hours (not with --budget-usd)"),
    min_mfu: float = typer.Option(None, "--min-mfu",
                                  help="keep plans whose model FLOPs utilisation (mfu column: "
                                       "model FLOP/s per GPU over its dense BF16 peak) is at "
                                       "least this, e.g. 0.3"),
    min_spare_gb: float = typer.Option(None, "--min-spare-gb",
                                       help="GB of each GPU's usable memory a plan must leave "
                                            "free at its peak (more recomputation, or no "
                                            "plan, where it would not): the caching "
                                            "allocator holds more than the live tensors"),
    failures_per_gpu_day: float = RUN_OPTS["failures_per_gpu_day"],
    restart_min: float = RUN_OPTS["restart_min"],
    checkpoint_gbps: float = RUN_OPTS["checkpoint_gbps"],
    storage_gbps: float = RUN_OPTS["storage_gbps"],
    checkpoint_every_min: float = RUN_OPTS["checkpoint_every_min"],
    async_checkpoint: bool = RUN_OPTS["async_checkpoint"],
    pue: float = RUN_OPTS["pue"],
    grid: str = RUN_OPTS["grid"],
    max_power_mw: float = typer.Option(None, "--max-power-mw",
                                       help="keep plans whose facility power while training "
                                            "(GPUs, nodes, PUE) is at most this many MW"),
    budget_usd: float = typer.Option(None, "--budget-usd",
                                    help="keep plans that cost at most this many USD at "
                                         "the GPU-hour price (not with --deadline-hours)"),
    price: float = typer.Option(None, "--price-per-gpu-hour",
                                help="USD; default: each hardware profile's [price] of the "
                                     "--price-tier"),
    price_tier: PriceTierChoice = typer.Option(
        "on-demand", "--price-tier",
        help="on-demand, reserved or spot: which [price] every cost pays; spot's "
             "interruptions (the profile's spot_interruptions_per_node_day) join the "
             "failures of wall_hours and wall_cost_usd"),
    spot_interruptions: float = typer.Option(
        None, "--spot-interruptions-per-node-day",
        help="with --price-tier spot: how often spot capacity is taken back, per node and "
             "day [default: the profile's]"),
    global_batch: int = typer.Option(None, "--global-batch", "--global-batch-size",
                                     help="sequences per step; default: the model profile's "
                                          "(Megatron --global-batch-size)"),
    seq_len: int = BATCH_OPTS["seq_len"],
    schemes: str = typer.Option(",".join(PLAN_SCHEMES), "--schemes",
                                help="comma-separated NAME or NAME:VALUE to plan with"),
    grad_dtype: DtypeChoice = DTYPE_OPTS["grad_dtype"],
    param_dtype: DtypeChoice = DTYPE_OPTS["param_dtype"],
    top: int = typer.Option(10, "--top", help="plans to print"),
    density_warmup_frac: float = typer.Option(
        0.0, "--density-warmup-frac", help="scape: density warms up from 1 over this fraction "
        "of the run's steps (the authors' scripts: 10k of 100k iterations, 0.1); 0: the "
        "target from the start"),
    tp_comm_overlap: bool = typer.Option(False, "--tp-comm-overlap/--no-tp-comm-overlap",
                                         help=TP_OVERLAP_HELP + " in every plan with tp "
                                              "above 1 (those run sequence parallelism); "
                                              "plans with tp 1 run without it"),
    fp8: bool = typer.Option(False, "--fp8/--no-fp8", help=FP8_HELP + " (every plan)"),
    fp8_recipe: Fp8RecipeChoice = PARALLEL_OPTS["fp8_recipe"],
    fp8_scope: Fp8ScopeChoice = PARALLEL_OPTS["fp8_scope"],
    cp: int = typer.Option(1, "--cp", "--context-parallel-size",
                           help="context-parallel ranks per sequence in every plan (not "
                                "searched; Megatron --context-parallel-size)"),
    ep: int = typer.Option(None, "--ep", "--expert-model-parallel-size",
                           "--expert-parallel-degree",
                           help="expert-parallel ranks in every plan of a model with experts "
                                "[default: searched, from half the largest that stays in one "
                                "NVLink domain to 8 times it]"),
    etp: int = typer.Option(None, "--etp", "--expert-tensor-parallel-size",
                            "--expert-tensor-parallel-degree",
                            help="tensor-parallel ranks of each expert in every plan "
                                 "[default: 1, as DeepSeek-V3's and Megatron's MoE recipes]"),
    moe_imbalance: float = MOE_OPTS["moe_imbalance"],
    moe_dispatcher: DispatcherChoice = MOE_OPTS["moe_dispatcher"],
    moe_overlap: bool | None = MOE_OPTS["moe_overlap"],
    moe_shared_overlap: bool | None = MOE_OPTS["moe_shared_overlap"],
    cuda_graphs: bool = PARALLEL_OPTS["cuda_graphs"],
    host_launch_us: float = PARALLEL_OPTS["host_launch_us"],
    stack: StackChoice = PARALLEL_OPTS["stack"],
    torch_compile: bool | None = PARALLEL_OPTS["torch_compile"],
    workers: int = typer.Option(None, "--workers", help="processes; default: every core"),
    quality: str = typer.Option(None, "--quality",
                                help="a convergence study (profiles/quality/STUDY.toml): adds "
                                     "each plan's time and cost to dense AdamS's quality"),
    rank: RankChoice = typer.Option("time", "--rank",
                             help="time (hours to train the tokens), cost (USD; with "
                                  "--deadline-hours: the cheapest plan that meets it), "
                                  "quality (hours to reach dense AdamS's final loss; needs "
                                  "--quality), wall-time / wall-cost: with failures, "
                                  "restarts and checkpoints (goodput), or energy (MWh of "
                                  "the run with failures, at the --pue)"),
    pareto_only: bool = typer.Option(False, "--pareto",
                                     help="show the time-cost frontier: the plans no other "
                                          "plan beats on both hours and cost, fastest first "
                                          "(simulates the plans whose lower bounds could be "
                                          "on it; all with --exhaustive)"),
    exhaustive: bool = typer.Option(False, "--exhaustive/--bounded",
                                    help="simulate every feasible plan; by default only "
                                         "those whose lower bound could still make the top "
                                         "(the same top plans, faster)"),
    fmt: Format3 = typer.Option("table", "--format", help="table|csv|json"),
):
    """Search GPU counts, schemes, micro-batching, tensor and pipeline parallelism and
    recomputation for a training run."""
    check_format(fmt)
    from profiles.quality import load_quality
    if top < 1:
        raise UserError(f"--top must be at least 1, got {top}")
    req = PlanRequest(
        load_model(model), tokens,
        tuple(load_hardware(h) for h in parse_names(hardware, "--hardware")),
        max_gpus=max_gpus, deadline_hours=deadline_hours, budget_usd=budget_usd,
        min_mfu=min_mfu, min_spare_GB=min_spare_gb, price_per_gpu_hour=price,
        global_batch=global_batch, seq_len=seq_len,
        schemes=tuple(parse_names(schemes, "--schemes")),
        precision=Precision(grad_dtype, param_dtype, fp8,
                            fp8_recipe=None if fp8_recipe is None else str(fp8_recipe),
                            fp8_scope=None if fp8_scope is None else str(fp8_scope)),
        density_warmup_frac=density_warmup_frac,
        workers=workers, quality=None if quality is None else load_quality(quality), rank=rank,
        overlap=Overlap(tp_comm=tp_comm_overlap), cp=cp, ep=ep, etp=etp,
        moe_imbalance=1.0 if moe_imbalance is None else moe_imbalance,
        moe_dispatcher="alltoall" if moe_dispatcher is None else str(moe_dispatcher),
        moe_overlap=bool(moe_overlap), moe_shared_overlap=bool(moe_shared_overlap),
        cuda_graphs=cuda_graphs, host_launch_us=host_launch_us,
        stack="megatron" if stack is None else str(stack),
        torch_compile=bool(torch_compile),
        reliability=reliability_of(failures_per_gpu_day, restart_min, checkpoint_gbps,
                                 storage_gbps, checkpoint_every_min, async_checkpoint),
        site=site_of(pue, grid), max_power_MW=max_power_mw, price_tier=str(price_tier),
        spot_interruptions_per_node_day=spot_interruptions,
    ).validate()
    # here, not at the top: `scape plan --help` and a refused request load neither the
    # planner nor pandas (imported by `banded`; pandas alone is 0.3 s of imports on a 2-core
    # host, issue 58)
    from simulator.planning.planner import best_dense, best_without

    df = searched(req, "simulating plans", keep=None if exhaustive else top,
                  frontier=pareto_only)
    everything = df  # the footnotes' best dense and non-SCAPE plans, frontier or not
    # ranked by cost: the cheapest plan under each of the profiles' other price tiers
    tiers = other_tier_tops(req) if rank in ("cost", "wall-cost") else {}
    if pareto_only:  # the frontier, fastest first: every plan that could be on it simulated
        df = df[df["pareto"]].sort_values(["hours", "cost_usd"], kind="stable").reset_index(
            drop=True).__finalize__(df)
    shown = banded(df.head(top), req)
    hardware_of = _named(req)

    asked = {"model": model, "hardware_asked": hardware, "schemes_asked": schemes,
             "price_per_gpu_hour": price, "price_tier": req.price_tier,
             "spot_interruptions_per_node_day": spot_interruptions,
             "tokens": tokens, "global_batch": req.batch,
             "seq_len": req.seq,
             "grad_dtype": grad_dtype, "param_dtype": param_dtype, "max_gpus": max_gpus,
             "deadline_hours": deadline_hours, "budget_usd": budget_usd, "min_mfu": min_mfu,
             "min_spare_gb": min_spare_gb,
             "failures_per_gpu_day": req.run_reliability.failures_per_gpu_day,
             "restart_min": req.run_reliability.restart_min,
             "checkpoint_gbps": req.run_reliability.checkpoint_GBps,
             "storage_gbps": req.run_reliability.storage_GBps,
             "checkpoint_every_min_asked": checkpoint_every_min,
             "async_checkpoint": async_checkpoint,
             "pue": req.run_site.pue, "grid_kg_per_kwh": req.run_site.grid_kg_per_kWh,
             "grid_asked": grid, "max_power_mw": max_power_mw,
             "density_warmup_frac": density_warmup_frac,
             # each row says whether its plan ran it (tp above 1 only): "tp_comm_overlap"
             "tp_comm_overlap_asked": tp_comm_overlap, "cp": cp, "fp8_asked": fp8,
             **({"fp8_recipe": req.fp8_recipe, "fp8_scope": req.fp8_scope} if fp8 else {}),
             "quality_study": quality, "rank": rank, "exhaustive": exhaustive,
             **({"cuda_graphs": cuda_graphs, "host_launch_us": host_launch_us}
                if cuda_graphs or host_launch_us is not None else {}),
             # the stack, where not Megatron's (whose plans carried none before it was asked)
             **({"stack": req.stack, "torch_compile": req.torch_compile}
                if req.stack != "megatron" else {}),
             "pareto_only": pareto_only,
             **({} if req.model.moe is None else {
                 "ep_asked": ep, "etp_asked": etp, "moe_imbalance": req.moe_imbalance,
                 "moe_dispatcher": req.moe_dispatcher, "moe_overlap": req.moe_overlap,
                 "moe_shared_overlap": req.moe_shared_overlap}),
             # found where the search looked (--exhaustive: all of them)
             "feasible_plans": df.attrs.get("feasible"),
             "gpu_counts_laid_out": df.attrs.get("counts_opened"),
             "gpu_counts_searched": " ".join(map(str, df.attrs.get("gpu_counts", []))),
             "simulated_plans": df.attrs.get("simulated"),
             **{f"cheapest_{t.replace('-', '_')}": plan_text(r) for t, r in tiers.items()}}
    if fmt != "table":  # every row carries the request it answers
        print(render(shown.assign(**asked), fmt))
        return
    cols = ["hardware", "gpus", "scheme", "tp", "pp", "dp", "schedule", "micro_batch",
            "grad_accum", "recompute", "memory_GB", "memory_spare_GB", "memory_spare_pct",
            "step_time_s", "mfu", "tokens_per_s", "hours", "hours_low", "hours_high",
            "gpu_hours", "usd_per_gpu_hour", "cost_usd", "cost_usd_low", "cost_usd_high",
            "interruptions", "checkpoint_every_min", "goodput", "wall_hours", "wall_cost_usd",
            "facility_MW", "energy_MWh", "tco2e", "pareto", "bottleneck", "quality"]
    ranked = {"quality": "time to dense AdamS's quality then cost",
              "cost": "cost then time to train",
              "wall-time": "wall time with failures then its cost",
              "wall-cost": "cost with failures then the wall time",
              "energy": "energy with failures then the wall time"}.get(
        rank, "time to train then cost")
    if pareto_only:
        ranked = (f"the time-cost frontier ({len(df)} plans no other plan beats on both), "
                  "fastest first")
    feasible, simulated = df.attrs.get("feasible", len(df)), df.attrs.get("simulated", len(df))
    skipped_why = ("a plan simulated is faster and cheaper than their lower bounds, so none "
                   "is on the frontier" if pareto_only
                   else "the others' lower bounds are above the plans shown")
    how_many = (f"{feasible} feasible plans" if simulated >= feasible else
                f"{feasible} feasible plans, {simulated} simulated ({skipped_why})")
    opened, counts_all = df.attrs.get("counts_opened"), len(df.attrs.get("gpu_counts", []))
    if opened is not None and opened < counts_all:  # the lazy search left counts unopened
        how_many = (f"{how_many}; {opened} of {counts_all} GPU counts laid out (the others' "
                    "compute floors cannot beat the plans shown)")
    header = (f"{model}, {tokens:.3g} tokens, global batch {req.batch} x seq {req.seq}; "
              f"{how_many}, ranked by {ranked}; schedule: pipeline (1f1b, or "
              f"interleaved x chunks); recompute: the least that fits; memory_spare_GB and "
              f"_pct: the usable memory left at the peak; mfu: model FLOP/s per GPU over its "
              f"dense BF16 peak; *_low, *_high: the range if the model errs no more than on "
              f"the held-out steps like the plan (-: unvalidated); pareto: no plan is both "
              f"faster and cheaper\noptions: "
              + ", ".join(f"{k} {_listed(v)}" for k, v in asked.items()))
    counts = df.attrs.get("gpu_counts", [])
    if counts:
        shown_counts = (", ".join(map(str, counts)) if len(counts) <= 16 else
                        ", ".join(map(str, counts[:12])) + ", ..., " + str(counts[-1]))
        header += (f"\nGPU counts searched ({len(counts)}: every count a layout's tp x pp x "
                   f"dp x cp fills in whole nodes): {shown_counts}")
    for reason in df.attrs.get("skipped", []):
        header += f"\nleft out: {reason}"
    header += "\n" + price_text(req, hardware_of, set(df["hardware"]))
    best = df.iloc[0]
    if best["hardware"] in hardware_of:
        header += "\ntop plan: " + how_sure(hardware_of[best["hardware"]], _band_layout(best, req),
                                            [best["scheme"]], None, int(best["gpus"]))
        header += "\ntop plan's " + memory_how_sure(hardware_of[best["hardware"]], req.stack)
    if req.quality is not None:
        q = req.quality
        cols += ["quality_tokens_ratio", "hours_to_quality", "cost_to_quality_usd"]
        header += (f"\nquality: tokens to reach dense AdamS's final loss over dense AdamS's, "
                   f"from {q.path} ({q.model} on {q.corpus}, {q.steps} steps, {q.date}): "
                   "a small-model reading applied to this run; -: no reading, or never "
                   "reached")
    if cp > 1:  # every plan's, but the dp column means nothing without it
        cols.insert(cols.index("dp"), "cp")
    if req.model.moe is not None:  # expert parallelism, searched or given
        cols[cols.index("dp"):cols.index("dp")] = ["ep", "etp"]
    if "rank_order" in shown and (shown["rank_order"] != "default").any():
        # a plan in Megatron-Core's tp-pp-dp order (a stage the default order cannot place)
        cols.insert(cols.index("schedule") + 1, "rank_order")
        header += ("\nrank_order: tp-pp-dp is Megatron-Core's --use-tp-pp-dp-mapping (a model "
                   "replica on consecutive GPUs), searched where a pipeline stage would "
                   "straddle NVLink domains unevenly in the default order")
    if density_warmup_frac > 0:
        cols.insert(cols.index("step_time_s") + 1, "run_mean_step_s")
        header += (f"\nscape: density warms up from 1 over {density_warmup_frac:.0%} of the run; "
                   "hours use run_mean_step_s")
    elif any(s.startswith("scape") for s in req.schemes):
        header += ("\nscape: every step at the target density; the authors' convergence runs "
                   "warm density up from 1 over the first 10% of the run "
                   "(--density-warmup-frac 0.1)")
    print(render(shown[cols], "table", header=header, floatfmt={
        "memory_GB": "{:.1f}", "memory_spare_GB": "{:.1f}", "memory_spare_pct": "{:.0f}",
        "mfu": "{:.3f}", "hours_low": "{:,.1f}", "hours_high": "{:,.1f}",
        "cost_usd_low": "{:,.0f}", "cost_usd_high": "{:,.0f}", "usd_per_gpu_hour": "{:.2f}",
        "step_time_s": "{:.3f}", "run_mean_step_s": "{:.3f}",
        "tokens_per_s": "{:,.0f}",
        "hours": "{:,.1f}", "gpu_hours": "{:,.0f}", "cost_usd": "{:,.0f}",
        "quality_tokens_ratio": "{:.3f}", "hours_to_quality": "{:,.1f}",
        "cost_to_quality_usd": "{:,.0f}", "interruptions": "{:,.0f}",
        "checkpoint_every_min": "{:.1f}", "goodput": "{:.3f}", "wall_hours": "{:,.1f}",
        "wall_cost_usd": "{:,.0f}", "facility_MW": "{:.2f}", "energy_MWh": "{:,.0f}",
        "tco2e": "{:,.0f}"}, schema=list(shown.assign(**asked).columns),
        keys=("hardware", "gpus", "scheme")))
    notes = []  # the footnotes, '#' lines wrapped to the table's width
    rel = req.run_reliability
    notes.append(
        f"wall_hours, wall_cost_usd, interruptions, goodput: the run with "
        f"{rel.failures_per_gpu_day:.2g} unexpected interruptions per GPU-day, "
        f"{rel.restart_min:g}-minute restarts and "
        + ("asynchronous checkpoints (staged over each GPU's host link, written behind the "
           "training)" if rel.async_save else "synchronous checkpoints")
        + f" of the weights and optimizer state at {rel.checkpoint_GBps:g} GB/s a GPU (up to "
        f"{rel.storage_GBps:g} GB/s) every "
        + ("checkpoint_every_min of work (Daly 2006" if rel.interval_min is None else
           f"{rel.interval_min:g} minutes of work (as typed; Daly 2006")
        + f"; simulator/run/goodput.py; planned maintenance not counted): {rel.source}"
        + ("" if rank in ("wall-time", "wall-cost") else "; plans are ranked by their hours "
           "without failures (--rank wall-time or wall-cost ranks with them)"))
    notes.append(_spread_note(req, best))
    if best["goodput"] < LOW_GOODPUT:  # e.g. spot capacity taken back every few minutes
        notes.append(
            f"the top plan trains {best['goodput']:.0%} of its wall time "
            f"({figure_text(best['wall_hours'], 0)} wall hours for {figure_text(best['hours'], 0)}"
            f" of work, {best['interruptions']:,.0f} interruptions): failures and restarts "
            "outweigh the steps" + ("" if rank in ("wall-time", "wall-cost") else
                                    "; --rank wall-time or wall-cost ranks plans with them"))
    notes.append(energy_note(req, set(df["hardware"]), hardware_of))
    if tiers:
        # the bill: with failures, where spot's taken-back capacity shows
        tops = {f"{req.price_tier} (asked)": best, **tiers}
        cheapest = min(tops, key=lambda t: tops[t]["wall_cost_usd"])
        notes.append(f"the cheapest plan under each price tier (--rank {rank}): "
                     + "; ".join(f"{t}: {plan_text(r)}" for t, r in tops.items())
                     + f"; the cheapest of them with failures: {cheapest} (prices and their dates: "
                     "usd_per_gpu_hour above)")
    dense = best_dense(everything)
    if best["quality"] != "dense" and dense is not None:
        notes.append(
            f"the top plan's scheme changes the update ({best['quality']}); the best dense "
            f"plan: {dense['gpus']} x {dense['hardware']}, {dense['scheme']}, tp {dense['tp']}, "
            f"pp {dense['pp']}: {figure_text(dense['hours'], 1)} h, "
            f"${figure_text(dense['cost_usd'], 0)} "
            f"({dense['hours'] / best['hours']:.2f}x the time, "
            f"{dense['cost_usd'] / best['cost_usd']:.2f}x the cost of the top plan)")
        if req.quality is None:  # with --quality its column quotes the study already
            notes.append(quality_evidence(best["scheme"]))
    rest = best_without(everything)
    if rest is not None and best["scheme"].startswith("scape"):
        notes.append(
            f"best plan without SCAPE: {rest['gpus']} x {rest['hardware']}, {rest['scheme']}"
            f", tp {rest['tp']}, pp {rest['pp']}: {rest['hours']:,.1f} h, "
            f"${rest['cost_usd']:,.0f} "
            f"({rest['hours'] / best['hours']:.2f}x the time, "
            f"{rest['cost_usd'] / best['cost_usd']:.2f}x the cost of the top plan)")
    thin = shown[shown["memory_spare_pct"] < THIN_SPARE_PCT]
    if len(thin):
        under, peaks = reserved_under()
        notes.append(
            f"thin headroom: {len(thin)} of the {len(shown)} plans shown "
            f"{'leaves' if len(thin) == 1 else 'leave'} under {THIN_SPARE_PCT:g}% of usable "
            f"memory free at the peak (the least: {thin['memory_spare_GB'].min():.1f} GB); the "
            "model counts live tensors and a fixed allocator slack, and published runs' "
            f"caching allocators reserved more ({under} of {peaks} reported reserved peaks are "
            "above the model's: profiles/external/memory-fidelity-bands.csv from "
            "bench/memory_published.py): --min-spare-gb GB plans with a margin")
    for note in notes:
        print("\n".join(comment_lines(note)))


# the project's own convergence study a lossy top plan quotes (profiles/quality/)
EVIDENCE_STUDY = "convergence-protocol"


def quality_evidence(spec: str) -> str:
    """What this project measured of a lossy scheme's quality: its entry in the shipped
    convergence study (loss gap, tokens to dense AdamS's loss, seeds, the study's model and
    steps), or that the study has none."""
    from profiles.quality import load_quality
    from simulator.planning.space import scheme_of

    study = load_quality(EVIDENCE_STUDY)
    s = scheme_of(spec)
    entry = study.lookup(s.scheme, s.sparsity)
    where = (f"{study.study} study ({study.model} on {study.corpus}, {study.steps:,} steps of "
             f"{study.tokens_per_step:,} tokens, {study.date}: a small model, not this run's "
             f"scale; {study.command})")
    if entry is None:
        return f"this project's quality evidence for {spec}: none in the {where}"
    got = (f"never reached dense AdamS's final loss, ending {entry.gap_pct:+.1f}% above it"
           if entry.tokens_ratio is None else
           f"{entry.tokens_ratio:.2f}x dense AdamS's tokens to its final loss, ending "
           f"{entry.gap_pct:+.1f}% from it")
    return (f"this project's quality evidence for {spec} ({entry.variant}, {entry.seeds} "
            f"seed(s)): {got}, in the {where}")


def other_tier_tops(req: PlanRequest) -> dict:
    """The top plan of `req`'s search under each price tier other than its own that every
    profile of the request prices (and, for spot, says how often capacity is taken back):
    one search a tier, ranked as `req` is. None where --price-per-gpu-hour prices every plan
    alike."""
    from dataclasses import replace

    if req.price_per_gpu_hour is not None:
        return {}
    tops = {}
    for tier in PRICE_TIER_KEYS:
        if tier == req.price_tier or any(hw.price is None or hw.price.lacks(tier)
                                         for hw in req.hardware):
            continue
        other = replace(req, price_tier=tier, spot_interruptions_per_node_day=None)
        tops[tier] = searched(other, f"simulating plans at the {tier} price", keep=1).iloc[0]
    return tops


def searched(req: PlanRequest, what: str, **kw) -> pd.DataFrame:
    """plan_training(req, **kw) with a progress bar saying `what`."""
    from simulator.planning.planner import plan_training

    with _progress(what) as bar:
        task = bar.add_task("plans", total=None)
        return plan_training(req, progress_total=lambda n: bar.update(task, total=n),
                             progress=lambda n: bar.advance(task, n), **kw)


def plan_text(r) -> str:
    """One plan in a few words: its layout, cost, and cost and wall hours with failures."""
    return (f"{r['gpus']} x {r['hardware']}, {r['scheme']}, tp {r['tp']}, pp {r['pp']}, "
            f"${figure_text(r['cost_usd'], 0)} at ${r['usd_per_gpu_hour']:.2f} a GPU-hour "
            f"(with failures ${figure_text(r['wall_cost_usd'], 0)}, "
            f"{figure_text(r['wall_hours'], 0)} wall hours, goodput {r['goodput']:.3f})")


def price_text(req: PlanRequest, hardware_of: dict, shown: set[str]) -> str:
    """The GPU-hour price behind every cost, and where it comes from: --price-per-gpu-hour,
    or each profile's [price] with the first clause of its source."""
    if req.price_per_gpu_hour is not None:
        return (f"usd_per_gpu_hour: {req.price_per_gpu_hour:g} for every plan "
                "(--price-per-gpu-hour)")
    parts = []
    tier = req.price_tier
    for name in sorted(n for n in shown if n in hardware_of):  # (two files of one name: none)
        price = hardware_of[name].price
        key = PRICE_TIER_KEYS[tier]
        where = price.sources.get(key, price.source).split(";")[0].split(" (http")[0]
        others = ", ".join(f"{t} {price.of(t):g}" for t in PRICE_TIER_KEYS
                           if t != tier and price.of(t) is not None)
        parts.append(f"{name} {price.of(tier):g} {tier}"
                     + (f" (read {price.date})" if price.date else "")
                     + (f", {others}" if others else "")
                     + f" ({where}; scape profiles show {name})")
    return "usd_per_gpu_hour: " + "; ".join(parts)


def _spread_note(req: PlanRequest, best) -> str:
    """The top plan's wall time at the studies' least and largest failure rates, and the
    profiles that carry their own rate."""
    from simulator.run.defaults import failure_range, on_profile, spread

    hw = next(h for h in req.hardware if h.name == best["hardware"])
    rel = req.reliability_on(hw)
    spot = rel.failures_per_gpu_day - on_profile(req.run_reliability, hw).failures_per_gpu_day
    gpus = int(best["gpus"])
    low, high = spread(best["hours"] * 3600, gpus,
                       best["checkpoint_write_s"] * rel.write_GBps(gpus) * 1e9, rel,
                       hw.gpu.host_bw_GBps, extra_per_gpu_day=spot)
    own = [f"{h.name} {h.failures.failures_per_gpu_day:.2g}" for h in req.hardware
           if h.failures is not None]
    least, largest = failure_range()
    return (f"failure rate: the top plan takes {low.wall_s / 3600:,.1f}-{high.wall_s / 3600:,.1f}"
            f" wall hours (goodput {high.goodput:.3f}-{low.goodput:.3f}) at the studies' least "
            f"and largest rates, {least:.2g}-{largest:.2g} interruptions per GPU-day"
            + (f" (with spot's {spot:.2g} more)" if spot > 0 else "") + ", all else as priced"
            + (f"; profiles with their cluster's own published rate (used unless "
               f"--failures-per-gpu-day is typed): {', '.join(own)}" if own else ""))


# a top plan whose goodput is below this gets a footnote: it mostly restarts
LOW_GOODPUT = 0.5


def energy_note(req: PlanRequest, shown: set[str], hardware_of: dict) -> str:
    """What the energy columns count, with the site's figures and their sources."""
    site = req.run_site
    bare = sorted(n for n in shown if n in hardware_of and hardware_of[n].power is None)
    return ("facility_MW, energy_MWh, tco2e: each GPU at its [power] gpu_wait_W plus the rest "
            "to gpu_max_W in proportion to the share of the step it computes, each node's "
            "node_other_W, times the PUE; over the wall time with failures (restarts at the "
            f"waiting draw); emissions location-based (simulator/run/energy.py): PUE "
            f"{site.pue:g}, grid {site.grid_kg_per_kWh:g} kg CO2e/kWh: {site.source}"
            + (f"; no [power] table, no energy figures: {', '.join(bare)}" if bare else ""))


def _listed(value):
    """An option's value as the header prints it: a comma list the user typed ("dense-adamw,
    dense-adams,...") bracketed with spaces, so the header wraps at 100 columns between its
    items instead of running one unbroken word past them (issue 58)."""
    if isinstance(value, str) and "," in value and " " not in value:
        return "[" + ", ".join(value.split(",")) + "]"
    return value


def banded(shown, req):
    """`shown` (plan rows) with each row's held-out band and the ranges of its step time,
    hours and cost, as `scape plan` prints them and costmodel.plan returns them: how far
    published steps like each plan were from the model (the planner prices compute with each
    profile's own model: no --mfu here). Rows name their profile, and two profiles of one name
    (a copy beside the shipped one) leave the name without a band."""
    import pandas as pd

    hardware_of = _named(req)
    shown = shown.assign(**{col: [
        step_lookup(hardware_of[r.hardware], _band_layout(r, req), r.scheme, None)[col]
        if r.hardware in hardware_of else empty for r in shown.itertuples()]
        for col, empty in heldout(None, "heldout_step").items()})
    # each figure's range from its band (reports/step_fidelity.py band_range; empty: none)
    return shown.join(pd.DataFrame([range_columns(r, ("step_time_s", "hours", "cost_usd"))
                                    for r in shown.to_dict(orient="records")],
                                   index=shown.index))


def _named(req) -> dict:
    """The request's profiles by name, leaving out a name two profiles share."""
    names = [hw.name for hw in req.hardware]
    return {hw.name: hw for hw in req.hardware if names.count(hw.name) == 1}


def _band_layout(r, req) -> str:
    """A plan row's band layout (a row tuple or a Series)."""
    return layout_class(r.tp, r.pp, r.tp_comm_overlap, r.cp, r.fp8,
                        req.model.moe is not None, req.cuda_graphs)
