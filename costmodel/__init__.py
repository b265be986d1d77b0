"""The cost model as Python functions, for notebooks and sweeps (issue 58 item 5): `simulate`,
`compare` and `plan` take the options `scape simulate`, `scape compare` and `scape plan` take,
by their parameter names (`--micro-batch` is `micro_batch`, `--scheme` `scheme`), with the
commands' own defaults (read from the commands' declarations, so the two cannot drift), and
return what the commands print as JSON: a dict (simulate) or a pandas DataFrame (compare,
plan), every row carrying the options it ran with. A refused input raises
`profiles.UserError` with the command's one-line message. docs/python-api.md says what each
returns; tests/test_api.py runs the three lines below.

    >>> from costmodel import simulate, compare, plan
    >>> simulate("llama-7b", "dgx-h100", 64, scheme="scape:0.99", pp=2)["step_time_s"]
    >>> compare("llama-7b", "commodity-100gbe", 64, schemes="dense-adams,scape:0.99")
    >>> plan("deepseek-v3", "dgx-h100", "1T", max_gpus=4096).head()
"""

from __future__ import annotations

import inspect
from dataclasses import fields

import pandas as pd

from vocabulary.errors import UserError
from vocabulary.suggest import did_you_mean
from vocabulary.units import parse_length, parse_names, parse_tokens

__all__ = ["compare", "plan", "simulate"]


def _flags(command, given: dict) -> dict:
    """The command's parameters with its declared defaults (typer's OptionInfo.default),
    replaced by `given`; unknown names and missing required ones are refused."""
    declared = {name: getattr(p.default, "default", p.default)
                for name, p in inspect.signature(command).parameters.items()
                if name not in ("fmt", "trace")}
    unknown = [k for k in given if k not in declared]
    if unknown:
        raise UserError(f"{command.__name__.removesuffix('_cmd')}: unknown option {unknown[0]!r}"
                        f"{did_you_mean(unknown[0], declared)}")
    flags = {**declared, **given}
    missing = [k for k, v in flags.items() if v is ...]
    if missing:
        raise UserError(f"{command.__name__.removesuffix('_cmd')}: give {', '.join(missing)}")
    return _spelled(flags)


def _spelled(options: dict) -> dict:
    """`options` with a sequence length written as the command line reads it ("8k") read."""
    if isinstance(options.get("seq_len"), str):
        return {**options, "seq_len": parse_length(options["seq_len"])}
    return options


def simulate(model: str, hardware: str, gpus: int, **options) -> dict:
    """One training step, as `scape simulate ... --format json` prints it (its one row)."""
    from cli.common import step_options
    from cli.simulate import simulate as command
    from reports.step_rows import simulate_row

    flags = _flags(command, {"model": model, "hardware": hardware, "gpus": gpus, **options})
    row, _, _, _ = simulate_row(step_options(flags, flags["scheme"]))
    return row


def compare(model: str, hardware: str, gpus: int, **options) -> pd.DataFrame:
    """Every scheme of `schemes` (comma-separated; default the command's line-up) against
    `baseline`, as `scape compare ... --format json` prints them."""
    from cli.common import step_options
    from cli.compare import compare_cmd as command
    from reports.step_rows import compare_rows

    flags = _flags(command, {"model": model, "hardware": hardware, "gpus": gpus, **options})
    rows, _, _, _ = compare_rows(step_options(flags, flags["baseline"]), flags["schemes"])
    return pd.DataFrame(rows)


def plan(model: str, hardware: str, tokens: float | str, top: int | None = 10,
         **request) -> pd.DataFrame:
    """Plans ranked by time to train (simulator/planning/planner.py plan_training): `hardware`
    one profile or several comma-separated, `tokens` a number or `1T` / `500B`, `top` the
    plans simulated for sure (None: every feasible plan, as --exhaustive), `request` any
    field of simulator/planning/plan_request.py PlanRequest (max_gpus, schemes as a tuple or
    comma-separated, global_batch, price_per_gpu_hour, deadline_hours, ...)."""
    from profiles import load_hardware, load_model
    from simulator.planning.plan_request import PlanRequest
    from simulator.planning.planner import plan_training

    known = {f.name for f in fields(PlanRequest)} - {"model", "tokens", "hardware"}
    unknown = [k for k in request if k not in known]
    if unknown:
        raise UserError(f"plan: unknown option {unknown[0]!r}{did_you_mean(unknown[0], known)}")
    request = _spelled(request)
    if isinstance(request.get("schemes"), str):  # as --schemes reads it
        request["schemes"] = tuple(parse_names(request["schemes"], "schemes"))
    req = PlanRequest(load_model(model), parse_tokens(tokens),
                      tuple(load_hardware(h) for h in parse_names(hardware, "hardware")),
                      **request)
    from cli.plan import banded

    df = plan_training(req.validate(), keep=top)
    # with each row's band and ranges, as the command's JSON carries them
    return banded(df.head(top) if top is not None else df, req)
