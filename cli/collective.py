"""`scape collective`: one collective on a hardware profile, size by size."""

from __future__ import annotations

import math
import sys

import typer

from cli.app import app
from cli.common import ALGO_HELP, AlgoChoice, Format3, ProtoChoice
from profiles import UserError, load_hardware, shipped
from profiles.external import published_collective
from reports.fidelity import cross_op_lookup, lookup
from reports.schema import table_name, table_value
from reports.tables import Records, check_format, render
from simulator.network.collective import describe, fit_warning, sweep
from simulator.network.topology import build_topology
from vocabulary.names import ALGORITHM_NAMES
from vocabulary.suggest import did_you_mean, spelled
from vocabulary.units import format_bytes, parse_sizes

DEFAULT_SIZES = "1KiB..1GiB"  # without --sizes or a published run's own sizes


def _op(value: str) -> str:
    """--op as typed, in any case or with any separators ('alltoall', 'AllReduce'): the
    collective it names, or refused with the nearest."""
    name = spelled(value, ALGORITHM_NAMES)
    if name is None:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(ALGORITHM_NAMES)}"
                                 f"{did_you_mean(value, ALGORITHM_NAMES)}")
    return name


@app.command()
def collective(
    hardware: str = typer.Option(..., "--hardware", "-H", help="hardware profile name or path"),
    # -g is nccl-tests' (GPUs per process), so GPUs taking part are spelled out
    gpus: int = typer.Option(..., "--gpus", help="number of GPUs taking part (all nodes)"),
    op: str = typer.Option("all_reduce", "--op", callback=_op,
                           help="all_reduce|reduce_scatter|all_gather|broadcast|all_to_all "
                                "(also as nccl-tests' binaries spell them: allreduce, "
                                "alltoall, ...)"),
    algo: AlgoChoice = typer.Option("auto", "--algo",
                             help=ALGO_HELP),
    proto: ProtoChoice = typer.Option("auto", "--proto",
                              help="ll|ll128|simple|auto: the protocol, as NCCL_PROTO forces "
                                   "it (profiles with [nccl]; others run simple)"),
    sizes: str = typer.Option(None, "--sizes",
                              help="list 1KiB,1MiB,1GiB or doubling range 1KiB..8GiB "
                                   "(doubling while not past the end, as nccl-tests: 3..100 "
                                   f"ends at 96) [default: {DEFAULT_SIZES}]"),
    gpus_per_process: int = typer.Option(None, "--gpus-per-process", "-g",
                                         help="GPUs one process drives, as nccl-tests' -g: "
                                              "back-to-back calls come no faster than its "
                                              "launches, one per GPU [default: 1, one process "
                                              "per GPU as training runs; a --published run's "
                                              "own]"),
    published: str = typer.Option(None, "--published",
                                  help="beside a published nccl-tests run: a case of "
                                       "profiles/external/public-collectives.csv (e.g. "
                                       "A1-nvls); its sizes unless --sizes is given"),
    fmt: Format3 = typer.Option("table", "--format", help="table|csv|json"),
):
    """Simulate one collective over a sweep of sizes; prints an nccl-tests-like table."""
    check_format(fmt)
    hw = load_hardware(hardware)
    run = None if published is None else _published(published, hw, gpus, str(op),
                                                    str(algo), str(proto), gpus_per_process)
    if gpus_per_process is None:  # not given: the published run's, else one process per GPU
        gpus_per_process = run.gpus_per_process if run is not None else 1
    size_list = (sorted(run.rows) if run is not None and sizes is None
                 else parse_sizes(sizes if sizes is not None else DEFAULT_SIZES))
    if run is not None and not any(int(x) in run.rows for x in size_list):
        raise UserError(f"--sizes {sizes}: the published run {run.case} measured none of "
                        f"them (its sizes: {format_bytes(min(run.rows))}.."
                        f"{format_bytes(max(run.rows))}, doubling); leave --sizes out for them")
    results = sweep(hw, gpus, op, algo, size_list, proto, gpus_per_process)
    warning = fit_warning(hw, str(op))
    memory = hw.gpu.memory_GB * 1e9
    if max(size_list) > memory:  # nccl-tests' buffers must fit; this model would still price it
        too_big = (f"warning: sizes above {hw.gpu.memory_GB:g} GB exceed the memory of one "
                   f"{hw.gpu.model}: no GPU of {hw.name} can hold such a buffer; those rows "
                   "are arithmetic, not a run that could happen")
        warning = too_big if warning is None else f"{warning}\n{too_big}"
    if warning is not None:
        for line in warning.splitlines():
            print(f"scape: {line}", file=sys.stderr)
    is_shipped = shipped(hw)
    cross = _cross_op(hw, str(op), str(algo), str(proto))

    def band(size: float) -> dict:
        """How far published runs like this call were from the model: of the shipped profile,
        or, for an op a calibrated profile did not measure, predicted from the ops it did."""
        if cross is not None:
            return cross_op_lookup(hw.measured["gpu_profile"], cross, str(op), gpus,
                                   hw.node.gpus_per_node, gpus_per_process, size)
        return lookup(hw.name if is_shipped and _banded(op, algo, proto) else "", gpus,
                      hw.node.gpus_per_node, gpus_per_process, size)

    # one record a size (a plain table: pandas, 0.25 s of imports, only for CSV and JSON)
    df = Records([{**r.as_dict(), "algo_asked": algo, "proto_asked": proto,
                   "gpus_per_process": gpus_per_process,
                   "hardware": hardware, "hardware_profile": hw.path, **band(r.size_bytes)}
                  for r in results])
    beyond, per_size = _beyond_logs(hw, str(op), gpus, size_list)
    if beyond is not None:  # a profile fitted on nccl-tests logs: where this goes past them
        df["beyond_logs"] = per_size
    if run is not None:  # the published time where the run measured this size
        df["published_case"] = [run.case] * len(df)
        df["published_us"] = [run.rows.get(int(s), (None, None))[0] for s in df["size_bytes"]]
        df["error_pct"] = [math.nan if p is None else 100 * (t * 1e6 / p - 1)
                           for t, p in zip(df["time_s"], df["published_us"], strict=True)]
    # the size as nccl-tests prints it, and the fidelity band in words: in every format
    df["size"] = [format_bytes(s) for s in df["size_bytes"]]
    df["held_out"] = [
        "" if not n else f"{med:.0f}%/{top:.0f}% of {n} ({sign:+.0f}%)"
        for n, med, top, sign in zip(df["heldout_rows"], df["heldout_median_abs_err_pct"],
                                     df["heldout_max_abs_err_pct"],
                                     df["heldout_median_err_pct"], strict=True)]
    if fmt != "table":
        print(render(df.frame(), fmt))
        return
    schema = list(df.columns)
    df[table_name("time_s")] = [table_value("time_s", t) for t in df["time_s"]]
    columns = ["size_bytes", "size", table_name("time_s"), "algbw_GBps", "busbw_GBps", "algo",
               "proto", "held_out"]
    header = (f"{op}, algo {algo}, proto {proto}, gpus per process {gpus_per_process}, "
              f"{describe(build_topology(hw, gpus))}\n"
              f"profile {hw.path}\n"
              "sizes in nccl-tests convention; GB/s = 1e9 bytes/s\n")
    if cross is not None:
        header += (
            f"held_out: {op} is predicted from this profile's fit on "
            f"{', '.join(cross)}: median/max |error| of such predictions on N sizes of the "
            f"shipped public nccl-tests logs of {hw.measured['gpu_profile']}'s GPU like this "
            "call (a fit on "
            + (f"{cross[0]} only" if len(cross) == 1 else "the other ops of the same log")
            + f" predicting {op}, NCCL's choice or a forced ring, pooled; 1/2/3+ nodes, "
            "launch, size below 1 MiB/to 64 MiB/above; in "
            "brackets the median signed error, - = the model is fast; "
            "profiles/external/cross-op-bands.csv from bench/nccl_tests_holdout.py --bands); "
            "blank: no public log like it")
    else:
        header += (
            "held_out: median/max |error| of the model on N published runs' sizes like this "
            "(all-reduce, all-gather and reduce-scatter with NCCL's choice or a forced ring, "
            "pooled; same shipped profile, 1/2/3+ nodes, launch, size below 1 MiB/to 64 "
            "MiB/above; in brackets the median signed error, - = the model is fast; "
            "profiles/external/fidelity-bands.csv from bench/fidelity_public.py); blank: no "
            "published run like it")
    if warning is not None:
        header += f"\n{warning}"
    if beyond is not None:
        columns.append("beyond_logs")
        m = hw.measured
        measured = [m["logs_ops"].replace(",", ", ") + " on " + m["logs_gpus"].replace(",", ", ")
                    + " GPUs", *([m["logs_nodes"].replace(",", ", ") + " node(s)"]
                                 if "logs_nodes" in m else []),
                    f"{format_bytes(m['logs_min_bytes'])}..{format_bytes(m['logs_max_bytes'])}"]
        header += (f"\nbeyond_logs: what this request takes beyond the nccl-tests logs "
                   f"{hw.name} was fitted on (scape calibrate nccl-tests: "
                   f"{', '.join(measured)}), extrapolated by the model: "
                   + ("; ".join(beyond) if beyond else "only where the column says"))
    if run is not None:  # blank where the run has no such size
        columns += ["published_us", "error_pct"]
        for col, form in (("published_us", "{:.1f}"), ("error_pct", "{:+.1f}")):
            df[col] = ["" if v is None or (isinstance(v, float) and math.isnan(v))
                       else form.format(v) for v in df[col]]
        header += (f"\npublished: {run.case}, out-of-place time of nccl-tests (sources in "
                   "profiles/external/public-collectives.md); error = simulated / published - 1")
    print(render(df[columns], "table", header=header, floatfmt={
        "time_us": "{:.1f}", "algbw_GBps": "{:.2f}", "busbw_GBps": "{:.2f}"}, schema=schema))


def _beyond_logs(hw, op: str, gpus: int, sizes: list[int]
                 ) -> tuple[list[str] | None, list[str]]:
    """Where a request goes beyond what a profile's nccl-tests logs measured ([measured]
    logs_*, written by scape calibrate nccl-tests): the call's own reasons (an op the logs did
    not measure, more GPUs or nodes than their runs), and per size what it extrapolates (its
    reasons, and a size outside the logs'). (None, blanks) for a profile without logs."""
    m = hw.measured
    if "logs_ops" not in m:
        return None, ["" for _ in sizes]
    ops, counts = m["logs_ops"].split(","), m["logs_gpus"].split(",")
    spans = m["logs_nodes"].split(",") if "logs_nodes" in m else None  # None: the link fit's
    nodes = math.ceil(gpus / hw.node.gpus_per_node)
    reasons = [(word, text) for word, text, past in (
        ("op", f"{op} was not measured", op not in ops),
        ("gpus", f"{gpus} GPUs (the logs' runs: {', '.join(counts)})", str(gpus) not in counts),
        ("nodes", f"{nodes} node(s) (the logs' runs: {', '.join(spans or [])})",
         spans is not None and str(nodes) not in spans)) if past]
    words = [w for w, _ in reasons]
    per_size = [", ".join(words + (["size"] if not m["logs_min_bytes"] <= s
                                   <= m["logs_max_bytes"] else [])) for s in sizes]
    return [t for _, t in reasons], per_size


def _cross_op(hw, op: str, algo: str, proto: str) -> list[str] | None:
    """The ops a profile `scape calibrate nccl-tests` fitted with NCCL's path measured, where
    this call asks another one as NCCL's tuner (or a forced ring) runs it: what the cross-op
    bands were measured for (bench/nccl_tests_holdout.py); else None. A profile of the link
    fit (no logs_nodes), one written before the profile it fitted was recorded ([measured]
    gpu_profile) and the ops its logs measured have no such band."""
    m = hw.measured
    if "logs_ops" not in m or "logs_nodes" not in m or "gpu_profile" not in m:
        return None
    ops = m["logs_ops"].split(",")
    if op in ops or algo not in ("auto", "ring") or proto != "auto":
        return None
    return ops


def _banded(op: str, algo: str, proto: str) -> bool:
    """Whether published runs like this call exist: they ran all-reduce, all-gather and
    reduce-scatter with NCCL's own choice of algorithm and protocol, or a forced ring."""
    return (op in ("all_reduce", "all_gather", "reduce_scatter") and algo in ("auto", "ring")
            and proto == "auto")


def _published(case: str, hw, gpus: int, op: str, algo: str, proto: str,
               gpus_per_process: int | None):
    """The published run, refused where it ran in another setting than the command's (a
    copy of its profile elsewhere, however named, is another setting)."""
    run = published_collective(case)
    is_shipped = shipped(hw)
    asked = (hw.name if is_shipped else hw.path, gpus, op, algo,
             run.gpus_per_process if gpus_per_process is None else gpus_per_process)
    ran = (run.hardware, run.gpus, run.op, run.nccl_algo, run.gpus_per_process)
    if hw.name == run.hardware and not is_shipped:  # same name, another file
        raise UserError(f"--published {case} ran on the shipped {run.hardware} profile; "
                        f"{hw.path} is another file of that name (a copy may differ): give "
                        f"-H {run.hardware}")
    if asked != ran or proto != "auto":
        raise UserError(f"--published {case} ran {run.op} on {run.gpus} GPUs of {run.hardware} "
                        f"with NCCL_ALGO {run.nccl_algo}, NCCL's own protocol and "
                        f"{run.gpus_per_process} GPU(s) per process: give -H {run.hardware} --gpus "
                        f"{run.gpus} --op {run.op} --algo {run.nccl_algo}, no --proto and "
                        "no --gpus-per-process (or its own)")
    return run
