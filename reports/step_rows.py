"""The rows `scape simulate` and `scape compare` print: one step (or a line-up of schemes)
from a `StepOptions`, with the options it ran with, its memory, and how far held-out published
steps like it were from the model (reports/step_fidelity.py). Every output (table, CSV, JSON,
a trace) is made from these rows."""

from __future__ import annotations

from reports.step_fidelity import layout_of, range_columns
from reports.step_fidelity import lookup as step_lookup
from simulator.memory.peak import memory_columns, refuse_if_too_big
from simulator.planning.compare import compare_records, resolved_scheme
from simulator.planning.options import StepOptions, compute_model
from simulator.step.compute import model_flops_per_step
from simulator.step.power import step_energy
from simulator.step.schedule import run_mean
from simulator.step.simulate import simulate_step
from simulator.step.step_config import StepConfig, StepResult
from vocabulary.units import parse_names


def _asked(opts: StepOptions, cfg: StepConfig) -> dict:
    """The batch, layout and pricing columns as the step ran them."""
    b, p = opts.batch, opts.precision
    return {"micro_batch": b.micro_batch, "seq_len": cfg.seq, "grad_accum": cfg.accum,
            "global_batch": cfg.sequences, "tp": opts.parallelism.tp, **opts.ran(cfg),
            "dp": cfg.dp, "compute_model": compute_model(cfg), "grad_dtype": p.grad_dtype,
            "param_dtype": p.param_dtype, "algo": opts.pricing.algo}


def model_tflops(cfg: StepConfig, step_s: float) -> float:
    """The model's FLOP/s per GPU at this step time, as published runs quote TFLOP/s per GPU:
    forward and backward of every token of the step (simulator/step/compute.py
    model_flops_per_step: the matmuls and the full s x s attention products), without
    recomputation, over the GPUs and the step."""
    flops = model_flops_per_step(cfg.model, cfg.sequences, cfg.seq)
    return flops / (cfg.gpus * step_s) / 1e12


def simulate_row(opts: StepOptions, trace: bool = False
                 ) -> tuple[dict, StepConfig, StepResult, int | None]:
    """One step's row, its config, its result (with every micro-batch's spans when `trace`)
    and the run it was averaged over (None: the steady step only). A step no GPU can hold is
    refused: a step time for it would mislead."""
    steps = opts.run_steps()
    cfg = opts.config()
    spec = opts.scheme.spec
    refuse_if_too_big(cfg, spec)
    result = simulate_step(cfg, trace=trace)
    sure = step_lookup(cfg.hardware, layout_of(cfg), spec, cfg.mfu)
    asked = _asked(opts, cfg)
    row = {"model": opts.model, "hardware": opts.hardware,
           "hardware_profile": cfg.hardware.path, "gpus": opts.gpus, "scheme": spec,
           **resolved_scheme(cfg.scheme), **asked, **result.as_dict(), **memory_columns(cfg),
           "model_tflops_per_gpu": model_tflops(cfg, result.step_time_s),
           **step_energy(cfg, result), **sure}
    row.update(range_columns(row, ("step_time_s",)))
    if steps:
        mean = run_mean(cfg, steps)
        row.update(run_steps=steps, run_mean_step_s=mean.mean_step_s,
                   run_mean_bytes_per_gpu=mean.mean_bytes_per_gpu)
    return row, cfg, result, steps


def compare_rows(opts: StepOptions, schemes: str
                 ) -> tuple[list[dict], dict, StepConfig, int | None]:
    """Every scheme of `schemes` (comma-separated, sharing the flags) against the baseline
    `opts.scheme.spec`: the rows (plain dicts: `scape compare`'s table prints without pandas),
    each carrying the options it ran with, those options, the baseline's config and the run
    averaged over."""
    steps = opts.run_steps()
    lineup = parse_names(schemes, "--schemes")
    cfg = opts.config(lineup)
    baseline = opts.scheme.spec
    rows = compare_records(cfg, lineup, baseline, steps)
    for row in rows:  # each row's band and the step time's range from it
        band = step_lookup(cfg.hardware, layout_of(cfg), row["scheme"], cfg.mfu)
        row.update(band)
        row.update(range_columns({**band, "step_time_s": row["step_time_s"]},
                                 ("step_time_s",)))
    asked = {"model": opts.model, "hardware": opts.hardware,
             "hardware_profile": cfg.hardware.path, "gpus": opts.gpus, "baseline": baseline,
             **_asked(opts, cfg), "run_steps": steps}
    return [{**row, **asked} for row in rows], asked, cfg, steps
