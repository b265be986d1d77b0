"""`scape simulate`: one training step of one scheme (`scape compare`, several side by side, is
cli/compare.py's)."""

import typer

from cli.app import app
from cli.common import (
    BATCH_OPTS,
    DENSE_STEPS_HELP,
    DTYPE_OPTS,
    EF_HELP,
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
    OptimizerChoice,
    OptimizerDtypeChoice,
    RecomputeChoice,
    ScheduleChoice,
    ScopeChoice,
    ScoreChoice,
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
from cli.outputs import output_file
from cli.run_options import RUN_OPTS, reliability_of, typed_run_options
from profiles import UserError
from reports.memory_fidelity import memory_how_sure
from reports.schema import also_line, table_name, table_value
from reports.step_fidelity import how_sure, layout_of
from reports.step_rows import simulate_row
from reports.tables import check_format, comment_lines, render
from simulator.memory.peak import describe_outside, thin_note
from simulator.network.collective import describe
from simulator.network.topology import build_topology
from simulator.planning.compare import resolved_scheme
from simulator.step.per_step import describe as describe_per_step
from simulator.step.trace import write_trace
from vocabulary.names import scheme_names
from vocabulary.units import parse_tokens


def _range_line(row: dict) -> str:
    """The step time's range as a '#' line: where measured steps like it fell
    (step_time_low_s, step_time_high_s), or why there is none."""
    low, high = row["step_time_low_s"], row["step_time_high_s"]
    if low is None:  # no band
        return "#   step_time_low_s, step_time_high_s: none, the step is unvalidated (how sure)"
    return (f"#   step_time_low_s, step_time_high_s: {table_value('step_time_s', low):,.0f}-"
            f"{table_value('step_time_s', high):,.0f} ms, the measured step if the model errs "
            "no more than on the held-out steps like it")


@app.command()
def simulate(
    model: str = STEP_OPTS["model"], hardware: str = STEP_OPTS["hardware"],
    gpus: int = STEP_OPTS["gpus"],
    scheme: str = typer.Option("dense-adams", "--scheme", "-s",
                               help=scheme_names("|") + ", or NAME:VALUE (scape:0.99)"),
    sparsity: float = typer.Option(None, "--sparsity", help="fraction not sent, in [0, 1)"),
    bits: int = typer.Option(None, "--bits", help="quantized: 1, 4, 8, 16 or 32"),
    optimizer: OptimizerChoice = typer.Option(None, "--optimizer", help="adamw|adams"),
    micro_batch: int = BATCH_OPTS["micro_batch"], seq_len: int = BATCH_OPTS["seq_len"],
    grad_accum: int = BATCH_OPTS["grad_accum"], global_batch: int = BATCH_OPTS["global_batch"],
    tp: int = BATCH_OPTS["tp"],
    grad_dtype: DtypeChoice = DTYPE_OPTS["grad_dtype"],
    param_dtype: DtypeChoice = DTYPE_OPTS["param_dtype"],
    overlap_grad: bool = OVERLAP_OPTS["overlap_grad"],
    overlap_param: bool = OVERLAP_OPTS["overlap_param"],
    bucket_mb: float = OVERLAP_OPTS["bucket_mb"],
    update_scope: ScopeChoice = typer.Option(None, "--update-scope",
                                     help="scape-partitioned: masked|all"),
    refresh_every: int = typer.Option(None, "--refresh-every",
                                      help="scape-partitioned: a dense step every R steps "
                                           "(0: none; 1 is refused: that is ZeRO-1 AdamS)"),
    error_feedback: bool = typer.Option(None, "--error-feedback/--no-error-feedback",
                                        help=EF_HELP),
    score: ScoreChoice = typer.Option(None, "--score", help="scape-partitioned: m|m_over_sqrt_v"),
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
    tokens: float = typer.Option(None, "--tokens", "-t", parser=parse_tokens,
                                 metavar="TOKENS",
                                 help="tokens to train on (1e12, 1T, 500B): adds the run of "
                                      "them as plan prices it (hours, failures, checkpoints, "
                                      "goodput, energy, carbon)"),
    failures_per_gpu_day: float = RUN_OPTS["failures_per_gpu_day"],
    restart_min: float = RUN_OPTS["restart_min"],
    checkpoint_gbps: float = RUN_OPTS["checkpoint_gbps"],
    storage_gbps: float = RUN_OPTS["storage_gbps"],
    checkpoint_every_min: float = RUN_OPTS["checkpoint_every_min"],
    async_checkpoint: bool = RUN_OPTS["async_checkpoint"],
    pue: float = RUN_OPTS["pue"],
    grid: str = RUN_OPTS["grid"],
    trace: str = typer.Option(None, "--trace", help="write a Chrome trace JSON (Perfetto)"),
    fmt: Format3 = typer.Option("table", "--format", help="table|csv|json"),
):
    """Simulate one training step: step time, breakdown and bytes per GPU (with --tokens,
    the run of them: hours, failures, goodput, energy)."""
    check_format(fmt)
    if trace is not None:
        output_file(trace, "--trace")
    run = {name: value for name, value in locals().items() if name in RUN_OPTS}
    typed = typed_run_options(run)
    if typed and tokens is None:  # a run's option without a run: refused, not ignored
        raise UserError(f"{', '.join(typed)} price a run: give --tokens (the tokens to train "
                        "on) with them")
    opts = step_options(locals(), scheme)  # built once from the flags, passed whole
    row, cfg, result, steps = simulate_row(opts, trace=trace is not None)
    if tokens is not None:
        row.update(_run_row(cfg, result, row, tokens, run))
    if trace:  # the trace carries the options and results of its row
        write_trace(trace, result.spans, f"{model} on {gpus} x {hardware}: {scheme}", row)
    if fmt != "table":  # one row, the same shape as every command's rows
        import pandas as pd  # only CSV and JSON: the table prints without it (0.25 s)

        print(render(pd.DataFrame([row]), fmt))
        return
    out: list[str] = []  # the table's lines: the header, then one value a line
    out.append(f"# {scheme} on {describe(build_topology(cfg.hardware, gpus))}")
    out.append(f"# profile {hardware} ({cfg.hardware.path})")
    out.append(f"# {model_label(model, cfg)}: {batch_text(cfg, grad_accum, global_batch)}, "
          f"tp {tp}, pp {pp}{_schedule_name(cfg)}, "
          + (f"cp {cfg.cp}, " if cfg.cp > 1 else "") + f"data-parallel {cfg.dp}, recompute "
          f"{cfg.recompute}, algo {algo}; forward/backward: {row['compute_model']}")
    if cfg.model.moe is not None:
        out.append(f"# experts: {moe_text(cfg)}")
    out += [f"# note: {n}" for n in cfg.notes()]
    out.append("# scheme options: " + ", ".join(f"{k} {v}" for k, v in
                                            resolved_scheme(cfg.scheme).items()))
    out.append(f"# grad_dtype {grad_dtype}, param_dtype {param_dtype}, attention "
          f"{row.get('attention')}, sequence_parallel {row.get('sequence_parallel')}, "
          f"tp_comm_overlap {row.get('tp_comm_overlap')}, fp8 {row.get('fp8')}, "
          + (f"fp8_recipe {row['fp8_recipe']}, " if "fp8_recipe" in row else "")
          + (f"fp8_scope {row['fp8_scope']}, " if "fp8_scope" in row else "")
          + (f"pp_kept_outputs {row['pp_kept_outputs']}, " if "pp_kept_outputs" in row else "")
          + f"mfu {row.get('mfu')}, stack {row.get('stack')}, loss {row.get('loss')}, "
          f"metric_passes {cfg.metric_passes}, global_batch {cfg.sequences}")
    if "host_wait_per_micro_batch_s" in row:  # asked: the host's launches, CUDA graphs
        out.append(f"# host: {row['host_launch_us']:.3g} us a kernel; "
                   + ("CUDA graphs: no pass waits for it" if cfg.cuda_graphs else
                      f"the layers wait {row['host_wait_per_micro_batch_s'] * 1e3:.3f} ms a "
                      "micro-batch for it (--cuda-graphs removes the wait)"))
    out.append(f"# {how_sure(cfg.hardware, layout_of(cfg), [scheme], cfg.mfu, cfg.gpus)}")
    for key in ("step_time_s", "compute_s", "per_step_s", "compression_s", "tp_comm_s",
                "exposed_comm_s",
                "overlapped_comm_s", *(("pipeline_bubble_s",) if pp > 1 else ()),
                *(("cp_comm_s",) if cfg.cp > 1 else ()),
                *(("ep_comm_s",) if cfg.model.moe is not None else ()),
                "interference_s"):
        # the table prints milliseconds: the name says so (issue 42: no value under a name
        # of another unit); CSV and JSON keep the seconds under the _s name
        out.append(f"{table_name(key):>20}  {table_value(key, row[key]):12.3f} ms")
        if key == "step_time_s":  # its range: the band's largest held-out error either way
            out.append(_range_line(row))
        if key == "per_step_s":  # a part of compute: say which part
            out.append(f"#   per_step_ms: of compute_ms, once a step after the backward: "
                       f"{describe_per_step(cfg)}")
    out.append(f"{table_name('bytes_per_gpu'):>20}  "
          f"{table_value('bytes_per_gpu', row['bytes_per_gpu']):12.4f} GB")
    parts = ", ".join(f"{k} {row[f'memory_{k}_GB']:.1f}" for k in (
        "weights", "grads", "optimizer", "scheme_state", "activations"))
    out.append(f"{'memory_GB':>20}  {row['memory_GB']:12.2f} GB of "
          f"{row['usable_memory_GB']:.1f} usable, {row['memory_spare_pct']:.0f}% to spare")
    out.append(f"#   GB: {parts}, loss {row['memory_loss_GB']:.1f}; peak on pipeline stage "
               f"{row['memory_peak_stage']}")
    if row["memory_comm_buffer_GB"] > 0:  # the peak is the gradient all-reduce's, not a pass's
        out.append(f"#   the peak comes after the last backward: comm_buffer "
                   f"{row['memory_comm_buffer_GB']:.1f} GB is the 16-bit copy DeepSpeed makes "
                   "of the fp32 gradient to all-reduce it (simulator/memory/peak.py "
                   "reduce_copy); the activations are freed by then")
    # allocated and reserved are two numbers (torch.cuda.max_memory_allocated / _reserved):
    # fitting is judged on the reserved bytes and what lives outside the allocator
    out.append(f"#   reserved by the allocator {row['memory_reserved_GB']:.1f} GB, outside it "
               f"{row['memory_outside_GB']:.1f} GB "
               f"({describe_outside(cfg.hardware, row['nccl_communicators'])}), of "
               f"{row['device_memory_GB']:.1f} GB on the device")
    thin = thin_note(row["memory_spare_pct"])
    if thin:
        out.extend(comment_lines(thin))
    out.append(f"# {memory_how_sure(cfg.hardware, cfg.stack)}")
    out.append(f"{'model_tflops_per_gpu':>20}  {row['model_tflops_per_gpu']:12.1f} TFLOP/s "
          "(model FLOPs: forward + backward, no recompute)")
    if "gpu_power_W" in row:  # what the step draws (simulator/run/energy.py, default site)
        # the value on its row, its reading on a '#' line that wraps at 100 columns
        out.append(f"{'step_energy_kWh':>20}  {row['step_energy_kWh']:12.3f} kWh")
        out.append(f"#   step_energy_kWh: {row['gpu_power_W']:.0f} W a GPU, "
                   f"{row['facility_kW']:,.1f} kW for the job with its nodes and the default "
                   "PUE; plan prices runs and carbon")
    if tokens is not None:
        out += _run_lines(row)
    if steps:
        out.append(f"# averaged over a run of {steps} steps ({_schedule_text(cfg.scheme)}):")
        for key, unit, form in (("run_mean_step_s", "ms", "12.3f"),
                                ("run_mean_bytes_per_gpu", "GB", "12.4f")):
            out.append(f"{table_name(key):>20}  {table_value(key, row[key]):{form}} {unit}")
    shown = [line.split()[0] for line in out if not line.startswith("#")]
    header = "\n".join(line for line in out if line.startswith("#"))
    also = also_line(list(row), shown, header)  # what only CSV and JSON print
    print("\n".join(wrapped for line in out + ([also] if also else []) for wrapped in (
        comment_lines(line.removeprefix("# ")) if line.startswith("# ") else [line])))
    if trace:
        print(f"# trace: {trace} (open in https://ui.perfetto.dev)")


def _run_row(cfg, result, row: dict, tokens: float, run: dict) -> dict:
    """The run of `tokens` at this step (its run mean where --run-steps gave one), with the
    failure and site options the user typed (`run`, by RUN_OPTS's names) and the published
    defaults for the rest, and those options as they ran."""
    from simulator.planning.plan_request import check_tokens
    from simulator.run.defaults import default_reliability, on_profile, spread
    from simulator.run.sites import site_of
    from simulator.step.power import run_columns

    check_tokens(tokens, cfg.sequences, cfg.seq)
    rel = on_profile(reliability_of(
        run["failures_per_gpu_day"], run["restart_min"], run["checkpoint_gbps"],
        run["storage_gbps"], run["checkpoint_every_min"], run["async_checkpoint"])
        or default_reliability(), cfg.hardware)
    site = site_of(run["pue"], run["grid"])
    got = run_columns(cfg, result, row.get("run_mean_step_s", result.step_time_s), tokens,
                      rel, site)
    low, high = spread(got["hours"] * 3600, cfg.gpus,
                       got["checkpoint_write_s"] * rel.write_GBps(cfg.gpus) * 1e9, rel,
                       cfg.hardware.gpu.host_bw_GBps)
    return {**got, "wall_hours_least_rate": low.wall_s / 3600,
            "wall_hours_largest_rate": high.wall_s / 3600,
            "failures_per_gpu_day": rel.failures_per_gpu_day,
            "restart_min": rel.restart_min, "checkpoint_gbps": rel.checkpoint_GBps,
            "storage_gbps": rel.storage_GBps,
            "checkpoint_every_min_asked": run["checkpoint_every_min"],
            "async_checkpoint": run["async_checkpoint"], "pue": site.pue,
            "grid_kg_per_kwh": site.grid_kg_per_kWh, "grid_asked": run["grid"],
            "run_source": f"{rel.source}; {site.source}"}


def _run_lines(row: dict) -> list[str]:
    """The table's lines of a --tokens run."""
    from simulator.run.defaults import failure_range

    out = [f"# the run of {row['tokens']:.3g} tokens: {row['steps']:,} steps; with "
           f"{row['failures_per_gpu_day']:.2g} unexpected interruptions per GPU-day, "
           f"{row['restart_min']:g}-minute restarts and "
           + ("asynchronous" if row["async_checkpoint"] else "synchronous")
           + f" checkpoints every {row['checkpoint_every_min']:.1f} minutes of work"
           + (" (as typed)" if row["checkpoint_every_min_asked"] is not None else
              " (Daly 2006's optimum)")
           + f", each stopping training {row['checkpoint_stall_s']:.2f} s "
           f"(simulator/run/goodput.py): {row['run_source']}"]
    for key, unit, form in (("hours", "h", ",.1f"), ("gpu_hours", "GPU-h", ",.0f"),
                            ("interruptions", "", ",.1f"), ("goodput", "", ".3f"),
                            ("wall_hours", "h", ",.1f")):
        out.append(f"{key:>20}  {row[key]:12{form}} {unit}".rstrip())
    low, high = failure_range()
    out.append(f"#   at the studies' least and largest failure rates ({low:.2g}-{high:.2g} per "
               f"GPU-day), all else as above: {row['wall_hours_least_rate']:,.1f}-"
               f"{row['wall_hours_largest_rate']:,.1f} wall hours")
    if "energy_MWh" in row:
        out.append(f"{'energy_MWh':>20}  {row['energy_MWh']:12,.1f} MWh (facility, PUE "
                   f"{row['pue']:g}, over the wall time)")
        out.append(f"{'tco2e':>20}  {row['tco2e']:12,.1f} t CO2e (location-based, "
                   f"{row['grid_kg_per_kwh']:g} kg/kWh)")
    return out
