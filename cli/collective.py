"""`scape collective`: one collective on a hardware profile, size by size."""

from __future__ import annotations

import pandas as pd
import typer

from cli.common import (
    AlgoChoice,
    Format3,
    OpChoice,
    ProtoChoice,
    app,
)
from profiles import load_hardware
from reports.tables import check_format, render
from simulator.collective import describe, sweep
from simulator.network import build_topology
from simulator.units import format_bytes, parse_sizes


@app.command()
def collective(
    hardware: str = typer.Option(..., "--hardware", "-H", help="hardware profile name or path"),
    gpus: int = typer.Option(..., "--gpus", "-g", help="number of GPUs taking part"),
    op: OpChoice = typer.Option("all_reduce", "--op",
                           help="all_reduce|reduce_scatter|all_gather|broadcast|all_to_all"),
    algo: AlgoChoice = typer.Option("auto", "--algo",
                             help="ring|tree|nvls|hierarchical|pairwise|auto (profiles with "
                                  "[nccl]: what NCCL's tuner picks, like NCCL_ALGO; others: "
                                  "the fastest in this model)"),
    proto: ProtoChoice = typer.Option("auto", "--proto",
                              help="ll|ll128|simple|auto: the protocol, as NCCL_PROTO forces "
                                   "it (profiles with [nccl]; others run simple)"),
    sizes: str = typer.Option("1KiB..1GiB", "--sizes",
                              help="list 1KiB,1MiB,1GiB or doubling range 1KiB..8GiB"),
    fmt: Format3 = typer.Option("table", "--format", help="table|csv|json"),
):
    """Simulate one collective over a sweep of sizes; prints an nccl-tests-like table."""
    check_format(fmt)
    size_list = parse_sizes(sizes)
    hw = load_hardware(hardware)
    results = sweep(hw, gpus, op, algo, size_list, proto)
    df = pd.DataFrame([{**r.as_dict(), "algo_asked": algo, "proto_asked": proto,
                        "hardware": hw.name} for r in results])
    if fmt != "table":
        print(render(df, fmt))
        return
    df.insert(1, "size", [format_bytes(s) for s in df["size_bytes"]])
    df["time_us"] = df["time_s"] * 1e6
    table = df[["size_bytes", "size", "time_us", "algbw_GBps", "busbw_GBps", "algo", "proto"]]
    header = (f"{op}, algo {algo}, {describe(build_topology(hw, gpus))}\n"
              "sizes in nccl-tests convention; GB/s = 1e9 bytes/s")
    print(render(table, "table", header=header, floatfmt={
        "time_us": "{:.1f}", "algbw_GBps": "{:.2f}", "busbw_GBps": "{:.2f}"}))
