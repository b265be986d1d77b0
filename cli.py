"""The `scape` command line: parse, call a library function, print. No logic lives here."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict

import pandas as pd
import typer

try:  # recent typer vendors click
    from typer._click import exceptions as click_exc
except ImportError:  # older typer depends on click itself
    from click import exceptions as click_exc

from profiles import UserError, check_profile, find, load_hardware, names
from reports.tables import check_format, render
from simulator.collective import describe, sweep
from simulator.network import build_topology
from simulator.units import format_bytes, parse_sizes


class App(typer.Typer):
    """A Typer app whose errors a user can cause end in one line on stderr and exit code 2."""

    def __call__(self, *args, **kwargs):
        try:
            rv = super().__call__(*args, standalone_mode=False, **kwargs)
        except UserError as exc:
            _fail(str(exc))
        except typer.Exit as exc:
            sys.exit(exc.exit_code)
        except typer.Abort:
            print("scape: aborted", file=sys.stderr)
            sys.exit(130)
        except click_exc.ClickException as exc:
            if not exc.format_message():  # e.g. a group called without a command: help shown
                sys.exit(exc.exit_code)
            _fail(exc.format_message())
        sys.exit(rv if isinstance(rv, int) else 0)


def _fail(message: str) -> None:
    print(f"scape: error: {message}", file=sys.stderr)
    sys.exit(2)


app = App(
    help="Communication cost modeler for LLM training: SCAPE, its baselines, real and simulated.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
profiles_app = typer.Typer(help="List, show and check hardware and model profiles.",
                           no_args_is_help=True)
app.add_typer(profiles_app, name="profiles")


@profiles_app.command("list")
def profiles_list(fmt: str = typer.Option("table", "--format", help="table|csv|json")):
    """The embedded profiles, with a one-line description each."""
    check_format(fmt)
    rows = []
    for kind in ("hardware", "model"):
        for name in names(kind):
            _, prof = find(f"{'models' if kind == 'model' else kind}/{name}")
            rows.append({"kind": kind, "name": name, "description": prof.description})
    print(render(pd.DataFrame(rows), fmt))


@profiles_app.command("show")
def profiles_show(
    name: str = typer.Argument(..., help="a profile name (dgx-h100, llama-7b) or a TOML path"),
    fmt: str = typer.Option("table", "--format", help="table|json"),
):
    """Every value of one profile, with its source; for models the computed parameter count."""
    check_format(fmt, ("table", "json"))
    kind, prof = find(name)
    data = asdict(prof)
    if kind == "model":
        data["n_params"] = prof.n_params
    if fmt == "json":
        print(json.dumps(data, indent=2))
        return
    print(f"{kind} profile {prof.name}: {prof.description}\n  file: {prof.path}")
    for key, value in data.items():
        if isinstance(value, dict):
            print(f"[{key}]")
            for k, v in value.items():
                if k != "sources" and v is not None:
                    print(f"  {k} = {v}")
            for k, v in (value.get("sources") or {}).items():
                print(f"  {k}_source = {v}")
        elif key not in ("name", "description", "path") and value is not None:
            is_count = isinstance(value, int) and not isinstance(value, bool)
            print(f"{key} = {value:,}" if is_count else f"{key} = {value}")


@profiles_app.command("check")
def profiles_check(path: str = typer.Argument(..., help="path to a profile TOML file")):
    """Validate a profile file: unknown or missing keys, wrong units, out-of-range values."""
    kind, prof = check_profile(path)
    extra = f", {prof.n_params:,} parameters" if kind == "model" else ""
    print(f"ok: {path} is a valid {kind} profile ({prof.name}{extra})")


@app.command()
def collective(
    hardware: str = typer.Option(..., "--hardware", "-H", help="hardware profile name or path"),
    gpus: int = typer.Option(..., "--gpus", "-g", help="number of GPUs taking part"),
    op: str = typer.Option("all_reduce", "--op",
                           help="all_reduce|reduce_scatter|all_gather|broadcast|all_to_all"),
    algo: str = typer.Option("auto", "--algo",
                             help="ring|tree|hierarchical|pairwise|auto (fastest per size)"),
    sizes: str = typer.Option("1KiB..1GiB", "--sizes",
                              help="list 1KiB,1MiB,1GiB or doubling range 1KiB..8GiB"),
    fmt: str = typer.Option("table", "--format", help="table|csv|json"),
):
    """Simulate one collective over a sweep of sizes; prints an nccl-tests-like table."""
    check_format(fmt)
    size_list = parse_sizes(sizes)
    hw = load_hardware(hardware)
    results = sweep(hw, gpus, op, algo, size_list)
    df = pd.DataFrame([{**r.as_dict(), "hardware": hw.name} for r in results])
    if fmt != "table":
        print(render(df, fmt))
        return
    df.insert(1, "size", [format_bytes(s) for s in df["size_bytes"]])
    df["time_us"] = df["time_s"] * 1e6
    table = df[["size_bytes", "size", "time_us", "algbw_GBps", "busbw_GBps", "algo"]]
    header = (f"{op}, algo {algo}, {describe(build_topology(hw, gpus))}\n"
              "sizes in nccl-tests convention; GB/s = 1e9 bytes/s")
    print(render(table, "table", header=header, floatfmt={
        "time_us": "{:.1f}", "algbw_GBps": "{:.2f}", "busbw_GBps": "{:.2f}"}))


if __name__ == "__main__":
    app()
