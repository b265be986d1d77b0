"""The options of a run with failures, checkpoints and energy (issue 60), shared by `plan` and
`simulate --tokens`: declared once, read into simulator/run's Reliability and Site."""

from __future__ import annotations

import typer

from profiles import UserError

RUN_OPTS = {
    "failures_per_gpu_day": typer.Option(
        None, "--failures-per-gpu-day",
        help="unexpected interruptions per GPU and day [default: the median of published "
             "studies, simulator/run/defaults.py]"),
    "restart_min": typer.Option(None, "--restart-min",
                                help="minutes a restart takes (relaunch, reload) "
                                     "[default: 10, published studies]"),
    "checkpoint_gbps": typer.Option(None, "--checkpoint-gbps",
                                    help="GB/s each GPU writes its checkpoint at "
                                         "[default: 0.15, BLOOM's measured save]"),
    "storage_gbps": typer.Option(None, "--storage-gbps",
                                 help="GB/s the storage takes from the whole job "
                                      "[default: 2000, Llama 3's]"),
    "checkpoint_every_min": typer.Option(
        None, "--checkpoint-every-min",
        help="minutes of work between checkpoints, at most the run's [default: the interval "
             "that maximises goodput, Daly 2006]"),
    "async_checkpoint": typer.Option(
        False, "--async-checkpoint",
        help="saves staged in host memory over each GPU's host link and written to storage "
             "behind the training (Megatron-Core --async-save, PyTorch DCP async_save) "
             "[default: synchronous saves]"),
    "pue": typer.Option(None, "--pue",
                        help="the building's facility power over its IT power [default: "
                             "1.10, a hyperscale fleet's; profiles/external/"
                             "grid-intensity.csv]"),
    "grid": typer.Option(None, "--grid",
                         help="the grid's carbon intensity: kg CO2e per kWh, or a named "
                              "grid (us-average, france, us-virginia, ...) [default: "
                              "us-average, EIA 2023]"),
}


def typed_run_options(flags: dict) -> list[str]:
    """The run options a command's `flags` (its parameters by name) hold as typed, named by
    their flags: None, and a switch left off, is not given."""
    return [RUN_OPTS[name].param_decls[0] for name in RUN_OPTS
            if flags[name] is not None and flags[name] is not False]


def reliability_of(failures: float | None, restart: float | None, gbps: float | None,
                   storage: float | None, interval_min: float | None = None,
                   async_save: bool = False):
    """The failure figures the user typed, each used (or refused by Reliability's rules),
    the published defaults for the rest; None where none was typed."""
    figures = (failures, restart, gbps, storage)
    if all(v is None for v in figures) and interval_min is None and not async_save:
        return None
    from dataclasses import replace

    from simulator.run.defaults import default_reliability

    d = default_reliability()
    try:
        return replace(d, failures_per_gpu_day=d.failures_per_gpu_day if failures is None
                       else failures, restart_min=d.restart_min if restart is None else restart,
                       checkpoint_GBps=d.checkpoint_GBps if gbps is None else gbps,
                       storage_GBps=d.storage_GBps if storage is None else storage,
                       interval_min=interval_min, async_save=async_save,
                       rate_from_profile=failures is None,
                       source=d.source if all(v is None for v in figures) else
                       "as typed" + ("" if None not in figures else f"; the rest from {d.source}"))
    except UserError as e:  # the rule, named by the flag the user typed
        text = str(e)
        for field, flag in (("failures_per_gpu_day", "--failures-per-gpu-day"),
                            ("restart_min", "--restart-min"),
                            ("checkpoint_GBps", "--checkpoint-gbps"),
                            ("storage_GBps", "--storage-gbps"),
                            ("interval_min", "--checkpoint-every-min")):
            text = text.replace(field, flag)
        raise UserError(text) from None
