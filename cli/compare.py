"""`scape compare`: every scheme side by side with its speedup over a baseline (its own module,
so that `scape simulate` builds one command's options, not two: issue 58 item 5)."""

import typer

from cli.app import app
from cli.common import (
    BATCH_OPTS,
    DENSE_STEPS_HELP,
    DTYPE_OPTS,
    OVERLAP_OPTS,
    PARALLEL_OPTS,
    REDUCER_OPTS,
    RUN_STEPS_HELP,
    SHAPE_HELP,
    STEP_OPTS,
    SYNC_HELP,
    WARMUP_HELP,
    AlgoChoice,
    AttentionChoice,
    DispatcherChoice,
    DtypeChoice,
    Format3,
    Fp8RecipeChoice,
    Fp8ScopeChoice,
    LossChoice,
    OptimizerDtypeChoice,
    RecomputeChoice,
    ScheduleChoice,
    ShapeChoice,
    StackChoice,
    SyncChoice,
    _schedule_name,
    _schedule_text,
    batch_text,
    model_label,
    moe_text,
    step_options,
)
from reports.memory_fidelity import memory_how_sure
from reports.schema import table_name, table_value
from reports.step_fidelity import how_sure, layout_of
from reports.step_rows import compare_rows
from reports.tables import Records, check_format, render
from simulator.memory.peak import thin_note
from simulator.network.collective import describe
from simulator.network.topology import build_topology
from simulator.planning.compare import DEFAULT_SCHEMES, resolved_scheme
from simulator.planning.options import compute_model


@app.command("compare")
def compare_cmd(
    model: str = STEP_OPTS["model"], hardware: str = STEP_OPTS["hardware"],
    gpus: int = STEP_OPTS["gpus"],
    schemes: str = typer.Option(",".join(DEFAULT_SCHEMES), "--schemes",
                                help="comma-separated NAME or NAME:VALUE"),
    baseline: str = typer.Option("dense-adams", "--baseline",
                                 help="the scheme every speedup is over (NAME or NAME:VALUE)"),
    micro_batch: int = BATCH_OPTS["micro_batch"], seq_len: int = BATCH_OPTS["seq_len"],
    grad_accum: int = BATCH_OPTS["grad_accum"], global_batch: int = BATCH_OPTS["global_batch"],
    tp: int = BATCH_OPTS["tp"],
    grad_dtype: DtypeChoice = DTYPE_OPTS["grad_dtype"],
    param_dtype: DtypeChoice = DTYPE_OPTS["param_dtype"],
    overlap_grad: bool = OVERLAP_OPTS["overlap_grad"],
    overlap_param: bool = OVERLAP_OPTS["overlap_param"],
    bucket_mb: float = OVERLAP_OPTS["bucket_mb"],
    sync: SyncChoice = typer.Option(None, "--sync", help=SYNC_HELP),
    distopt: bool = REDUCER_OPTS["distopt"],
    residual_offload: bool = REDUCER_OPTS["residual_offload"],
    param_offload: bool = REDUCER_OPTS["param_offload"],
    density_warmup: int = typer.Option(None, "--density-warmup", help=WARMUP_HELP),
    density_dense_steps: int = typer.Option(None, "--density-dense-steps",
                                            help=DENSE_STEPS_HELP),
    density_shape: ShapeChoice = typer.Option(None, "--density-shape", help=SHAPE_HELP),
    run_steps: int = typer.Option(None, "--run-steps", help=RUN_STEPS_HELP),
    algo: AlgoChoice = OVERLAP_OPTS["algo"],
    pp: int = PARALLEL_OPTS["pp"], pp_schedule: ScheduleChoice = PARALLEL_OPTS["pp_schedule"],
    virtual_stages: int = PARALLEL_OPTS["virtual_stages"],
    recompute: RecomputeChoice = PARALLEL_OPTS["recompute"],
    recompute_modules: str = PARALLEL_OPTS["recompute_modules"],
    sequence_parallel: bool | None = PARALLEL_OPTS["sequence_parallel"],
    mfu: float = PARALLEL_OPTS["mfu"],
    attention: AttentionChoice = PARALLEL_OPTS["attention"],
    tp_comm_overlap: bool | None = PARALLEL_OPTS["tp_comm_overlap"],
    cp: int = PARALLEL_OPTS["cp"],
    ep: int = PARALLEL_OPTS["ep"], etp: int = PARALLEL_OPTS["etp"],
    moe_imbalance: float = PARALLEL_OPTS["moe_imbalance"],
    moe_dispatcher: DispatcherChoice = PARALLEL_OPTS["moe_dispatcher"],
    moe_overlap: bool | None = PARALLEL_OPTS["moe_overlap"],
    moe_shared_overlap: bool | None = PARALLEL_OPTS["moe_shared_overlap"],
    shard_group: int = PARALLEL_OPTS["shard_group"],
    mtp_layers: int = PARALLEL_OPTS["mtp_layers"],
    pp_layout: str = PARALLEL_OPTS["pp_layout"],
    tp_pp_dp_mapping: bool | None = PARALLEL_OPTS["tp_pp_dp_mapping"],
    fp8: bool = PARALLEL_OPTS["fp8"],
    fp8_param_gather: bool = PARALLEL_OPTS["fp8_param_gather"],
    fp8_recipe: Fp8RecipeChoice = PARALLEL_OPTS["fp8_recipe"],
    fp8_scope: Fp8ScopeChoice = PARALLEL_OPTS["fp8_scope"],
    loss: LossChoice = PARALLEL_OPTS["loss"],
    optimizer_dtype: OptimizerDtypeChoice = PARALLEL_OPTS["optimizer_dtype"],
    stack: StackChoice = PARALLEL_OPTS["stack"],
    metric_passes: int = PARALLEL_OPTS["metric_passes"],
    torch_compile: bool | None = PARALLEL_OPTS["torch_compile"],
    pp_kept_outputs: bool | None = PARALLEL_OPTS["pp_kept_outputs"],
    cuda_graphs: bool = PARALLEL_OPTS["cuda_graphs"],
    host_launch_us: float = PARALLEL_OPTS["host_launch_us"],
    fmt: Format3 = typer.Option("table", "--format", help="table|csv|json"),
):
    """Every scheme side by side with its speedup over the baseline."""
    check_format(fmt)
    opts = step_options(locals(), baseline)  # built once from the flags, passed whole
    rows, asked, cfg, steps = compare_rows(opts, schemes)
    extra = opts.scheme.reducer_extra()
    every = Records(rows)  # what CSV and JSON print
    if fmt != "table":  # every row carries the configuration it was simulated in
        print(render(every.frame(), fmt))
        return
    # the step time's range beside it (reports/step_fidelity.py band_range; "-": unvalidated)
    shown = Records([{"scheme": r["scheme"]} for r in rows])
    for col in ("step_time_s", "step_time_low_s", "step_time_high_s", "compute_s",
                "compression_s", "exposed_comm_s", "overlapped_comm_s",
                "bytes_per_gpu"):  # in the unit the name says
        shown[table_name(col)] = [table_value(col, r[col]) for r in rows]
    shown["speedup"] = [r["speedup"] for r in rows]
    # memory per GPU, and a flag on the rows no GPU can hold (their step time is hypothetical)
    shown["memory_GB"] = [r["memory_GB"] for r in rows]
    shown["fits_memory"] = ["yes" if r["fits_memory"] else "NO" for r in rows]
    header = (f"{model_label(model, cfg)} on {describe(build_topology(cfg.hardware, gpus))}\n"
              f"{batch_text(cfg, grad_accum, global_batch)}, tp {tp}, "
              f"pp {pp}{_schedule_name(cfg)}, " + (f"cp {cfg.cp}, " if cfg.cp > 1 else "")
              + f"dp {cfg.dp}, recompute {cfg.recompute}; "
              f"forward/backward: {compute_model(cfg)}; "
              f"speedup = {baseline} step time / scheme step time; memory_GB per GPU of "
              f"{rows[0]['usable_memory_GB']:.1f} usable\n"
              "options: " + ", ".join(f"{k} {v}" for k, v in {
                  **asked, **{k: v for k, v in resolved_scheme(cfg.scheme).items()
                              if k in ("overlap_grad_reduce", "overlap_param_gather",
                                       "bucket_MB")},
                  # typed scheme options the rows' own columns carry in csv and json
                  **({"sync": sync} if sync is not None else {}),
                  **({"scheme_options": dict(extra)} if extra else {})}.items()))
    if cfg.model.moe is not None:
        header += f"\nexperts: {moe_text(cfg)}"
    header += "".join(f"\nnote: {n}" for n in cfg.notes())
    header += "\n" + how_sure(cfg.hardware, layout_of(cfg), [r["scheme"] for r in rows],
                              cfg.mfu, cfg.gpus)
    header += "\n" + memory_how_sure(cfg.hardware, cfg.stack)
    fitting = [r["memory_spare_pct"] for r in rows if r["fits_memory"]]
    if len(fitting) < len(rows):
        header += ("\nfits_memory NO: one GPU cannot hold that configuration; its times are "
                   "what it would take if it could")
    thin = thin_note(min(fitting) if fitting else -1.0)
    if thin:
        header += "\n" + thin.replace("thin headroom: ", "thin headroom (the tightest row): ")
    if steps:
        for col in ("run_mean_step_s", "run_mean_bytes_per_gpu"):
            shown[table_name(col)] = [table_value(col, r[col]) for r in rows]
        shown["run_speedup"] = [r["run_speedup"] for r in rows]
        header += (f"\nrun_*: averaged over a run of {steps} steps, SCAPE "
                   f"{_schedule_text(cfg.scheme)}")
    print(render(shown, "table", header=header, floatfmt={
        c: "{:.3f}" for c in shown.columns if c not in ("scheme", "fits_memory")},
        schema=every.columns))
