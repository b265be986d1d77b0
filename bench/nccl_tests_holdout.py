"""Issue 41's acceptance figure: public nccl-tests logs of one system, each op in turn held out of
`scape calibrate nccl-tests`'s fit and predicted from the link fitted on the others, at every
size from 64 KiB; median and max |busbw error| per size band (< 1 MiB, 1-64 MiB, >= 64 MiB).
busbw error = predicted busbw / measured busbw - 1 = measured time / predicted time - 1.

Four models, each line says which:
- nccl: `scape calibrate nccl-tests` by default on one node (calibration/nccl_tests_fit.py:
  the --gpu-from profile's NCCL path, its NVLink efficiency and NCCL launch cost fitted on the
  other ops, and on -g N logs whether the process's launches add to the call; the held-out op
  priced by `scape collective`'s own code; the fit's discrete choices in brackets);
- link: `--model link` (simulator/network/fit.py fit_tier: one latency per ring hop for the whole
  tier, one bandwidth and fixed cost per op; NCCL's ring for every op; the held-out op pays the
  fitted ops' fixed cost per call);
- candidate (not in the product): NCCL's own per-step latency for the protocol its tuner picks
  at each size (hwLat NVLink ring LL/LL128/Simple from profiles/external/nccl-tuning.toml; the
  protocol from simulator/network/nccl.py on the --gpu-from profile's [nccl], ring forced), plus a
  fixed cost per call and a bandwidth per op fitted on the rows (L1); the held-out op takes the
  fitted ops' median cost per call and bandwidth (one launch, one ring). Nothing in it is
  fitted to the held-out rows;
- built-in: the shipped hardware profile, nothing fitted (`scape collective`).

Then, per system, issue 41's stated protocol: fit on ONE op's rows and predict each other op
(`fit on one op` lines, the nccl model only), which is harder than leaving one op out.

Logs: tests/fixtures/nccl-tests/ (sources in SOURCES.md). Each log is one run, one row per size
(nccl-tests' 20 iterations averaged), timed twice: out of place and in place, the same call on
other buffers. Their difference is how far the log repeats itself (`repeat:` lines); the
`outside:` lines give each model's |busbw error| beyond it (0 where the prediction lies between
the two times, else against the nearer), the part of the error the log's own spread does not
explain. The headline error is against the out-of-place times, as before.

A system whose logs cannot be shipped (no license) is added from a folder of them:
`--logs DIR --gpu-from PROFILE [--algo ALGO]` (e.g. the 4 x 8 H100 run of
ZiyanIshani/vpbenchmarking @ e55fe749, results/nccl/nccl_multinode/nccl_{allreduce,allgather}_
20260224_225706.txt and results/nccl_multinode/nccl_broadcast_20260224_225706.txt, read as
published); its ops are held out in turn as above, each log's op from its own header. Logs of
several nodes fit the nccl model's NIC efficiency, launch cost and GPUDirect RDMA
(calibration/nccl_tests_fit.py); the candidate model is for one node and is left out there.
Logs whose hosts ran another number of GPUs than the profile's node need the NICs a node
has: `--nics-per-node N` for a --logs folder; the shipped 10 x {1, 2, 4} H100 systems
(xxrjun/nccl-tests-cluster @ 455de4f, the same 10 nodes running 1, 2 or 4 GPUs each:
tests/fixtures/nccl-tests/SOURCES.md) take N = the GPUs a host ran. `built-in` is then "-".

With --bands PATH it also writes the errors of the ops predicted from a fit on other ops (the
`fit on one op` lines, and the leave-one-out nccl lines as fitted on "several"), by fitted op,
predicted op, node count, launch and size class (reports/fidelity.py cross_op_bands): what
`scape collective` quotes beside an op a calibrated profile did not measure
(profiles/external/cross-op-bands.csv is shipped; the shipped logs only, all_to_all left out:
its rows are in-sample for dgx-h100's all-to-all constants).

Usage: python bench/nccl_tests_holdout.py [--logs DIR --gpu-from PROFILE [--algo ALGO]
       [--nics-per-node N]] [--bands PATH]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from calibration.nccl_tests import calibrate_from_logs  # noqa: E402
from cli.outputs import script_outputs  # noqa: E402
from profiles import UserError, measured  # noqa: E402

LOGS = REPO / "tests" / "fixtures" / "nccl-tests"
# name: (logs, the hardware profile of their GPU, the algorithm they ran[, the NICs a node of
# theirs has where its hosts ran another GPU count than the profile's node])
SYSTEMS = {
    "8x A100-SXM4-40GB, one process (microsoft/superbenchmark)":
        (sorted(LOGS.glob("a100-sxm4-40gb-*.out")), "dgx-a100", "auto"),
    "8x H100 80GB HBM3, one process, NCCL_ALGO=Ring (together-nccl-tests 20260305_220944)":
        (sorted(LOGS.glob("h100-8x-ring-*.out")), "dgx-h100", "ring"),
    "8x H100 80GB HBM3, one process per GPU, five binaries in one file, 32 MiB up "
    "(xxrjun/nccl-tests-cluster)": ([LOGS / "h100-1x8-five-ops-xxrjun.log"], "dgx-h100", "auto"),
    # its all_to_all rows are in-sample for dgx-h100's [nccl] a2a pair (alltoall-latency.csv)
    "10 x 8 H100 80GB HBM3, one process per GPU, five binaries in one file, 32 MiB up "
    "(xxrjun/nccl-tests-cluster)": ([LOGS / "h100-10x8-five-ops-xxrjun.log"], "dgx-h100",
                                    "auto"),
}
# the same 10 nodes running 1, 2 and 4 GPUs each, a NIC a GPU (tests/fixtures/nccl-tests/
# SOURCES.md): nics = the GPUs a host ran
SYSTEMS.update({
    f"10 x {g} H100 80GB HBM3 (the same nodes, {g} GPU{'s' if g > 1 else ''} each; "
    f"{g} NIC{'s' if g > 1 else ''} a node assumed), one process per GPU, 32 MiB up "
    "(xxrjun/nccl-tests-cluster)": ([LOGS / f"h100-10x{g}-five-ops-xxrjun.log"], "dgx-h100",
                                    "auto", g)
    for g in (1, 2, 4)})
BANDS = (("< 1 MiB", 0, 2**20), ("1-64 MiB", 2**20, 2**26), (">= 64 MiB", 2**26, float("inf")))
MIN_BYTES = 64 * 1024


def _band_text(sizes, err) -> str:
    cells = []
    for label, lo, hi in BANDS:
        band = [abs(e) for s, e in zip(sizes, err, strict=True) if lo <= s < hi]
        cells.append(f"{label}: {statistics.median(band):.1f}% / {max(band):.1f}% "
                     f"({len(band)})" if band else f"{label}: -")
    return "; ".join(cells)


def candidate(rows: list[dict], gpu: str, held: str) -> tuple[list[float], list[float]]:
    """The candidate model's held-out sizes and |busbw error|s (module docstring)."""
    import numpy as np

    from profiles import load_hardware
    from simulator.network import nccl
    from simulator.network.fit import coefficients

    hop_us = nccl.constants()["hw_lat"]["nvlink"]["ring"]  # LL, LL128, Simple, per step
    m = nccl.machine(load_hardware(gpu), rows[0]["world"])

    def terms(r):
        proto = nccl.decide(r["op"], float(r["size_bytes"]), m, algos=("ring",))[1]
        steps, per_byte = coefficients(r["op"], "ring", r["world"], float(r["size_bytes"]))
        latency = steps * hop_us[("ll", "ll128", "simple").index(proto)] * 1e-6
        return latency, per_byte * float(r["size_bytes"])

    fits = {}
    for op in sorted({r["op"] for r in rows} - {held}):
        mine = [r for r in rows if r["op"] == op]
        t = np.array([r["seconds"] for r in mine])
        lat, byt = map(np.array, zip(*(terms(r) for r in mine), strict=True))
        design, y, w = np.stack([np.ones_like(t), byt], 1) / t[:, None], (t - lat) / t, 1.0
        for _ in range(40):  # L1 by reweighting, as simulator/network/fit.py _solve
            x, *_ = np.linalg.lstsq(design * np.c_[w], y * w, rcond=None)
            w = 1 / np.sqrt(np.maximum(np.abs(design @ x - y), 1e-3))
        fits[op] = (max(float(x[0]), 0.0), float(x[1]))
    call = statistics.median(f[0] for f in fits.values())
    per_byte = statistics.median(f[1] for f in fits.values())
    sizes, err = [], []
    for r in (r for r in rows if r["op"] == held):
        lat, byt = terms(r)
        sizes.append(r["size_bytes"])
        err.append(100 * (r["seconds"] / (call + lat + per_byte * byt) - 1))
    return sizes, err


def repeat(table) -> tuple[list, list]:
    """The log's own repeat per row (calibration/nccl_tests.py with_repeat's `repeat_pct`:
    the in-place time against the out-of-place one, the same call on other buffers), which is
    also the busbw difference."""
    t = table[table["repeat_pct"].notna()]
    return list(t["size_bytes"]), list(t["repeat_pct"])


def outside(table) -> tuple[list, list]:
    """|busbw error| beyond the log's own repeat: with_repeat's `outside_pct` (the prediction
    against the nearer of the two times, 0 between them) turned into busbw terms, nearer time /
    predicted - 1."""
    t = table[table["outside_pct"].notna()]
    return list(t["size_bytes"]), list(100 * (1 / (1 + t["outside_pct"] / 100) - 1))


def built_in(rows: list[dict], gpu: str, op: str, algo: str) -> tuple[list, list]:
    """The shipped profile's own prediction, nothing fitted: `scape collective -H GPU --op OP
    --algo ALGO --gpus-per-process G` at the logs' sizes (G: the GPUs one process drove)."""
    from profiles import load_hardware
    from simulator.network.collective import sweep

    mine = [r for r in rows if r["op"] == op]
    got = sweep(load_hardware(gpu), mine[0]["world"], op, algo,
                [r["size_bytes"] for r in mine],
                gpus_per_process=int(mine[0]["gpus_per_process"]))
    return ([r["size_bytes"] for r in mine],
            [100 * (r["seconds"] / g.time_s - 1) for r, g in zip(mine, got, strict=True)])


def _fitted(fit) -> str:
    """The nccl fit's discrete choices, as it made them on the other ops ('' for the link)."""
    found = [f"{name} {str(value).lower()}" for name, value in (
        ("launch_adds", getattr(fit, "launch_adds", None)), ("gdr", getattr(fit, "gdr", None)))
        if value is not None]
    return f" [{', '.join(found)}]" if found else ""


def predicted_rows(case: str, gpu: str, fitted: str, log, table) -> list[dict]:
    """The held-out rows of one fit as cross-op band rows (reports/fidelity.py
    cross_op_bands): `gpu` the hardware profile whose NCCL path was fitted; `fitted` the op
    fitted on, or "several"; `log` the predicted op's parsed
    log (its ranks a host and GPUs a process); `table` calibrate_from_logs' held-out table.
    Their error is the time's, predicted / measured - 1 (negative: the model is fast), as every
    band `scape collective` quotes; the lines this bench prints are busbw errors, measured /
    predicted - 1."""
    per_host = max(log.host_ranks) if log.host_ranks else log.ranks
    return [{"case": case, "hardware": gpu, "fitted": fitted, "op": log.op, "gpus": int(world),
             "gpus_per_node": per_host, "gpus_per_process": log.gpus_per_process or 1,
             "size_bytes": int(size), "err_pct": 100 * (p / t - 1)}
            for world, size, t, p in zip(table["world"], table["size_bytes"], table["seconds"],
                                         table["predicted_s"], strict=True)]


def fit_on_one(logs: list[Path], parsed: list, gpu: str, algo: str,
               nics: int | None = None, case: str = "") -> list[dict]:
    """Issue 41's stated protocol: fit on ONE op's rows and predict each other op of the run
    (the leave-one-out lines above fit on all the others, which is easier). The nccl model
    only, as `scape calibrate nccl-tests FIT_LOG OTHER_LOG --holdout OTHER` runs it; one line
    per (fitted op -> predicted op). `nics`: the NICs a node of the logs has, where the logs'
    node shape differs from the profile's and they do not print it. Returns the predicted rows
    (`predicted_rows`, named `case`) but all_to_all's, which are in-sample for the profile's
    own all-to-all constants (alltoall-latency.csv)."""
    by_op: dict[str, list[Path]] = {}
    log_of = {}
    for path, log in zip(logs, parsed, strict=True):
        by_op.setdefault(log.op, []).append(path)
        log_of[log.op] = log
    print("  fit on one op, predict another (nccl): median / max |busbw error| (rows)")
    rows = []
    for fit_op in sorted(by_op):
        for held in sorted(set(by_op) - {fit_op}):
            fit, table = held_out_fit(by_op[fit_op] + by_op[held], held, gpu, algo, nics)
            err = 100 * (table["seconds"] / table["predicted_s"] - 1)
            print(f"    {fit_op} -> {held}: " + _band_text(list(table["size_bytes"]), list(err))
                  + _fitted(fit))
            if held != "all_to_all":
                rows += predicted_rows(case, gpu, fit_op, log_of[held], table)
    return rows


def one_op_per_file(paths: list[Path], folder: Path) -> list[Path]:
    """Files of one collective each: a file several binaries ran into is cut into its
    sections (calibration/nccl_tests.py `_sections`), each written to `folder`; collectives
    the simulator does not model (sendrecv) are left out."""
    from calibration.nccl_tests import _sections, parse_logs
    from scape.plan import WIRE_FACTOR

    out = []
    for path in paths:
        lines = path.read_text().splitlines()
        starts = _sections(lines)
        if len(starts) == 1:
            out.append(path)
            continue
        for log, start, end in zip(parse_logs(path), starts, [*starts[1:], len(lines)],
                                   strict=True):
            if log.op in WIRE_FACTOR:
                out.append(folder / f"{path.stem}-{log.op}.log")
                out[-1].write_text("\n".join(lines[start:end]))
    return out


def with_logs_option(parser) -> dict:
    """SYSTEMS, and the system of a --logs folder where one is given (the options this bench
    and bench/nccl_protocol_oracle.py take): parses the command line."""
    parser.add_argument("--logs", default=None, help="a folder of one system's nccl-tests "
                        "logs to add (not shipped)")
    parser.add_argument("--gpu-from", default=None, help="their GPU's hardware profile")
    parser.add_argument("--algo", default="auto", help="the NCCL_ALGO they ran with")
    parser.add_argument("--nics-per-node", type=int, default=None,
                        help="the NICs a node of the --logs system has, where its logs put "
                        "another number of GPUs on a host than the profile's node and do not "
                        "print NCCL's NIC lines (scape calibrate nccl-tests asks it then)")
    args = parser.parse_args()
    if args.nics_per_node is not None and args.logs is None:
        parser.error("--nics-per-node describes the --logs system: give --logs")
    systems = dict(SYSTEMS)
    if args.logs is not None:
        if args.gpu_from is None:
            parser.error("--logs needs --gpu-from")
        found = sorted(p for p in Path(args.logs).iterdir() if p.is_file())
        if not found:
            parser.error(f"--logs {args.logs}: no file there")
        systems[f"{args.logs} (--gpu-from {args.gpu_from})"] = (
            found, args.gpu_from, args.algo, args.nics_per_node)
    return systems


def main() -> int:
    import argparse

    from calibration.nccl_tests import fit_rows, parse_log

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bands", default=None,
                        help="write the errors of the ops predicted from a fit on others, "
                        "by band (reports/fidelity.py cross_op_bands; shipped: "
                        "profiles/external/cross-op-bands.csv), from the shipped logs only")
    systems = with_logs_option(parser)
    args = parser.parse_args()
    if args.bands is not None and args.logs is not None:
        parser.error("--bands writes the shipped logs' bands: leave --logs out")
    script_outputs(parser, {"--bands": args.bands})
    predicted = []
    with tempfile.TemporaryDirectory() as tmp:
        measured.FOLDER = Path(tmp)  # the profiles written go nowhere that lasts
        for system, (logs, gpu, algo, *shape) in systems.items():
            nics = shape[0] if shape else None
            case = case_of(logs)
            logs = one_op_per_file(logs, Path(tmp))
            parsed = [parse_log(p) for p in logs]
            ops = sorted(log.op for log in parsed)
            one_node = not any(log.spans_hosts for log in parsed)
            print(system)
            for held in ops:
                print(f"  {held} held out (fitted on the others): median / max |busbw error| "
                      "(rows)")
                for model in ("nccl", "link"):
                    fit, table = held_out_fit(logs, held, gpu, algo, nics, model)
                    err = 100 * (table["seconds"] / table["predicted_s"] - 1)  # busbw error
                    print(f"    {model + ':':<11}" + _band_text(list(table["size_bytes"]),
                                                              list(err)) + _fitted(fit))
                    if model == "nccl" and held != "all_to_all":  # (fit_on_one's reason)
                        log = next(g for g in parsed if g.op == held)
                        predicted += predicted_rows(case, gpu, "several", log, table)
                    print(f"    {'  outside:':<11}" + _band_text(*outside(table)))
                print(f"    {'repeat:':<11}" + _band_text(*repeat(table)))
                rows = fit_rows(parsed, MIN_BYTES)
                if one_node and "all_to_all" not in ops:  # NCCL's rings only
                    print("    candidate: " + _band_text(*candidate(rows, gpu, held)))
                try:
                    print("    built-in:  " + _band_text(*built_in(rows, gpu, held, algo)))
                except UserError as e:  # the profile's node is not the logs' (--nics-per-node)
                    print(f"    built-in:  - ({str(e).splitlines()[0][:120]})")
            predicted += fit_on_one(logs, parsed, gpu, algo, nics, case)
    if args.bands is not None:
        import pandas as pd

        from reports.fidelity import cross_op_bands

        try:
            cross_op_bands(pd.DataFrame(predicted)).to_csv(args.bands, index=False)
        except OSError as exc:
            parser.exit(2, f"{parser.prog}: error: --bands {args.bands}: cannot write it "
                           f"({exc.strerror or exc})\n")
        print(f"wrote {args.bands}")
    return 0


def held_out_fit(logs: list[Path], held: str, gpu: str, algo: str, nics: int | None,
                 model: str = "nccl"):
    """`scape calibrate nccl-tests` on every op of `logs` but `held`, with `model`, `held`
    predicted: (the fit, the held-out table)."""
    _, fit, _, table, _ = calibrate_from_logs(
        "holdout", [str(p) for p in logs], holdout=held, min_bytes=MIN_BYTES, gpu_from=gpu,
        model=model, algo=algo if model == "nccl" else "auto", nics=nics, force=True,
        with_intervals=False)
    return fit, table


def cross_op_rows(tmp: Path) -> list[dict]:
    """The rows of the cross-op bands alone (what `--bands` writes, without this bench's
    other models), from the shipped logs; `tmp` holds the split logs (and, where the caller
    points measured.FOLDER there, the profiles written)."""
    from calibration.nccl_tests import parse_log

    rows = []
    for logs, gpu, algo, *shape in SYSTEMS.values():
        nics = shape[0] if shape else None
        case = case_of(logs)
        logs = one_op_per_file(logs, tmp)
        parsed = [parse_log(p) for p in logs]
        for log in parsed:
            if log.op != "all_to_all":  # (fit_on_one's reason)
                rows += predicted_rows(case, gpu, "several", log,
                                       held_out_fit(logs, log.op, gpu, algo, nics)[1])
        rows += fit_on_one(logs, parsed, gpu, algo, nics, case)
    return rows


def case_of(logs: list[Path]) -> str:
    """A system's short name in the bands' cases: its logs' file names less the op, or the
    folder of a --logs system."""
    stems = [Path(p).stem for p in logs]
    if len(stems) == 1:
        return stems[0]
    # the longest leading run of characters the names share (a prefix of strings, not paths)
    same = next((i for i, chars in enumerate(zip(*stems, strict=False))  # to the shortest
                 if len(set(chars)) > 1), min(map(len, stems)))
    common = stems[0][:same].rstrip("-_")
    return common or Path(logs[0]).parent.name


if __name__ == "__main__":
    raise SystemExit(main())
