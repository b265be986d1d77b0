"""Collective microbenchmarks over torch.distributed, in nccl-tests terms (DESIGN section 7).

For each collective and message size S (nccl-tests' convention, scape/plan/types.py): warm-up
calls, then `repeats` timed calls, each started behind a barrier so every rank enters
together, as ranks do after the previous step's collective. A call's time is the slowest
rank's; the result is the median over repeats, with algbw = S / t and busbw = algbw times
nccl-tests' bus factor (scape.plan.WIRE_FACTOR).

`python -m calibration.collectives SPEC.json` is one rank (under torchrun or in a netbed
namespace); `sweep()` launches the ranks and returns the rows.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, timedelta
from pathlib import Path

from profiles import ProfileError, UserError
from profiles.hardware_schema import NIC_FIELDS
from profiles.schema import validate_table
from scape.plan import WIRE_FACTOR
from scape.train.devices import backend_env, gpu_sharing, local_gpu, nccl_device
from vocabulary.atomic import atomic_path
from vocabulary.suggest import did_you_mean
from vocabulary.units import format_duration

OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all")
DEFAULT_SIZES = tuple(2 ** i * 16384 for i in range(9))  # 16 KiB .. 4 MiB: what steps send
# NCCL's sockets between ranks sharing a GPU take ~5 ms a call up to a few MiB (an H100,
# 2026-11-26: profiles/measured/h100-2026-11-26.collectives.csv), so the 16 KiB-4 MiB sweep
# holds no bandwidth to fit; 256 KiB .. 64 MiB does
SHARED_GPU_SIZES = tuple(2 ** i * 262144 for i in range(9))


def _call(op: str, size_bytes: int, world: int, device) -> Callable[[], None]:
    """One call of `op` on fp32 buffers whose nccl-tests size is `size_bytes`."""
    import torch
    import torch.distributed as dist

    n = max(world, size_bytes // 4 // world * world)  # fp32 elements, divisible by world
    full = torch.ones(n, device=device)  # [n] fp32: the array S
    part = torch.ones(n // world, device=device)  # [n / P] fp32: one rank's share
    calls = {
        "all_reduce": lambda: dist.all_reduce(full),
        "reduce_scatter": lambda: (getattr(dist, "reduce_scatter_single", None)
                                   or dist.reduce_scatter_tensor)(part, full),
        "all_gather": lambda: dist.all_gather_into_tensor(full, part),
        "broadcast": lambda: dist.broadcast(full, 0),
        "all_to_all": lambda: dist.all_to_all_single(torch.empty_like(full), full),
    }
    return calls[op]


def async_interference(device, repeats: int = 9) -> float:
    """How much slower compute runs while an issued asynchronous collective has not been
    waited for yet (SCAPE's mask all-gather spans the next forward and backward): median time
    of tiny-gpt's forward and backward behind a small async all-gather, over the same alone,
    minus 1; the slowest rank's, as ranks wait for each other."""
    import torch
    import torch.distributed as dist

    from profiles import load_model
    from scape.train.data import batch
    from scape.train.model import GPT

    world = dist.get_world_size()
    part = torch.ones(4096, device=device)  # [4096] fp32: a 16 KiB share
    full = torch.empty(4096 * world, device=device)
    slowest = torch.zeros(1, dtype=torch.float64, device=device)
    model = GPT(load_model("tiny-gpt")).to(device)  # a forward and backward as in training
    x, y = (b.to(device) for b in batch("train", 1, dist.get_rank(), 8, 128))

    def work() -> float:
        t0 = time.perf_counter()
        model(x, y).backward()
        model.zero_grad(set_to_none=True)
        return time.perf_counter() - t0

    times = {False: [], True: []}
    for i in range(2 * repeats):
        pending = bool(i % 2)  # alternate, so drift in the machine's speed hits both alike
        dist.barrier()
        handle = dist.all_gather_into_tensor(full, part, async_op=True) if pending else None
        slowest.fill_(work())
        if handle is not None:
            handle.wait()
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        times[pending].append(slowest.item())
    return max(0.0, statistics.median(times[True]) / statistics.median(times[False]) - 1)


def bench_rank(spec: dict) -> list[dict]:
    """Run the sweep on this rank (the process group is already up); rank 0's rows."""
    import torch
    import torch.distributed as dist

    device = (torch.device("cuda", local_gpu()) if dist.get_backend() == "nccl"
              else torch.device("cpu"))
    world, rank = dist.get_world_size(), dist.get_rank()
    slowest = torch.zeros(1, dtype=torch.float64, device=device)
    rows = []
    total, t_start = len(spec["ops"]) * len(spec["sizes"]), time.perf_counter()
    for op in spec["ops"]:
        for size in spec["sizes"]:
            call = _call(op, size, world, device)
            for _ in range(spec["warmup"]):
                call()
            times = []
            for _ in range(spec["repeats"]):
                dist.barrier()
                t0 = time.perf_counter()
                call()
                if device.type == "cuda":
                    torch.cuda.synchronize()
                slowest.fill_(time.perf_counter() - t0)
                dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # untimed
                times.append(slowest.item())
            t = statistics.median(times)
            if rank == 0:
                rows.append({"op": op, "size_bytes": size, "world": world, "seconds": t,
                             "min_s": min(times), "max_s": max(times),
                             "algbw_GBps": size / t / 1e9,
                             "busbw_GBps": size / t / 1e9 * WIRE_FACTOR[op](world)})
                if spec.get("progress"):  # with the time the rest should take at this pace
                    done = len(rows)
                    rest = (time.perf_counter() - t_start) / done * (total - done)
                    print(f"{op:15s} {size:>10d} B  {t * 1e3:9.3f} ms  ({done}/{total} on "
                          f"{world} ranks, about {format_duration(rest)} left)",
                          file=sys.stderr, flush=True)
    if spec.get("interference"):
        x = async_interference(device)
        if rank == 0:
            rows.append({"op": "async_interference", "value": x, "world": world})
    if spec.get("sharing"):
        from calibration.sharing import sharing_extra

        extra = sharing_extra(device, spec["sharing"])
        if rank == 0:
            rows += [{"op": "sharing", "kind": k, "value": v, "mean": mean, "world": world}
                     for k, (v, mean) in extra.items()]
    return rows


def main() -> int:
    from scape.train.launch import write_rank_error

    spec = json.loads(Path(sys.argv[1]).read_text())
    rank = int(os.environ.get("RANK", "0"))
    try:
        import torch.distributed as dist

        backend = os.environ.get("SCAPE_BACKEND", "gloo")
        if backend == "nccl":  # its GPU first (shared round-robin when ranks outnumber them)
            nccl_device()
        dist.init_process_group(backend, timeout=timedelta(seconds=spec["timeout_s"]))
        rows = bench_rank(spec)
        dist.destroy_process_group()
    except Exception as exc:  # one line per rank, never a traceback
        write_rank_error(spec["out"], rank, exc, spec["timeout_s"])
        return 1
    if rank == 0:
        Path(spec["out"], "rows.json").write_text(json.dumps(rows, indent=1))
    return 0


def sweep(nprocs: int, backend: str = "gloo", netbed=None, ops=OPS, sizes=DEFAULT_SIZES,
          repeats: int = 7, warmup: int = 2, timeout_s: float = 120.0,
          progress: bool = False, share_gpu: bool = False,
          sharing: tuple[str, ...] = ()) -> list[dict]:
    """Launch the ranks (torchrun here, or one per netbed namespace) and return the rows;
    `sharing`: kernel kinds whose cost of sharing the device to measure after the sweep
    (calibration/sharing.py)."""
    from scape.train.launch import rank_error, run_ranks

    if nprocs < 2:
        raise UserError(f"a collective needs at least 2 ranks, got --nprocs {nprocs}")
    unknown = set(ops) - set(OPS)
    if unknown:
        hint = "".join(did_you_mean(u, OPS) for u in sorted(unknown))
        raise UserError(f"unknown collective(s) {sorted(unknown)}{hint}; choose from "
                        f"{', '.join(OPS)}")
    out = Path(tempfile.mkdtemp(prefix="scape-calibrate-"))
    keep = False  # the folder stays only where an error message points into it
    try:
        spec = {"ops": list(ops), "sizes": [int(s) for s in sizes], "repeats": repeats,
                "interference": True, "sharing": list(sharing),
                "warmup": warmup, "timeout_s": timeout_s, "out": str(out),
                "progress": progress}
        (out / "spec.json").write_text(json.dumps(spec))
        env = {**os.environ, "OMP_NUM_THREADS": "1", **backend_env(backend, share_gpu)}
        code = run_ranks(["calibration.collectives", str(out / "spec.json")], nprocs,
                         netbed, env, out / "launcher.log", timeout_s * 4 + 600)
        error = rank_error(out)
        if error:
            raise UserError(f"collective sweep failed: {error}")
        if code != 0 or not (out / "rows.json").exists():
            keep = True
            raise UserError(f"collective sweep failed (exit code {code}); see "
                            f"{out}/launcher.log")
        return json.loads((out / "rows.json").read_text())
    finally:
        if not keep:
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())


def provenance(backend: str, netbed, nprocs) -> dict:
    """Where and how a calibration was measured."""
    import platform
    from datetime import datetime

    import torch

    from calibration.device_info import cpu_model

    version = torch.__version__
    device = cpu_model()
    if backend == "nccl" and torch.cuda.is_available():
        version += f", NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}"
        device = torch.cuda.get_device_name()
    return {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "host": platform.node(), "device": device, "torch": version, "backend": backend,
            "netbed": str(netbed) if netbed else "none (loopback)", "nprocs": nprocs}


def calibrate(name: str, nprocs: list[int], backend: str = "gloo", netbed=None,
              sizes=DEFAULT_SIZES, repeats: int = 7, progress: bool = False,
              share_gpu: bool = False):
    """Sweep at each rank count in `nprocs`, fit all rows at once (simulator/network/fit.py), and
    write profiles/measured/<name>.toml plus the sweep with its predictions as
    <name>.collectives.csv. Returns (path, fit, that table as a DataFrame)."""
    import pandas as pd

    from calibration.kernel_benches import KERNEL_BENCH
    from calibration.sharing import SHARING_ELEMENTS
    from profiles.measured import merge, path_of
    from simulator.network.fit import fit_tier

    path_of(name)  # a bad name fails before minutes of measuring
    # ranks sharing one GPU: what each kernel kind costs more there (profile [sharing])
    kinds = tuple(KERNEL_BENCH) if share_gpu else ()
    every = [r for p in nprocs for r in sweep(p, backend, netbed, sizes=sizes,
                                              repeats=repeats, progress=progress,
                                              share_gpu=share_gpu, sharing=kinds)]
    rows = [r for r in every if r["op"] not in ("async_interference", "sharing")]
    interference = {r["world"]: r["value"] for r in every if r["op"] == "async_interference"}
    shared = {(r["kind"], r["world"]): r for r in every if r["op"] == "sharing"}
    extra = {k: [shared[k, p]["value"] * 1e6 for p in nprocs] for k in kinds}
    extra_mean = {k: [shared[k, p]["mean"] * 1e6 for p in nprocs] for k in kinds}
    burst = netbed.burst_bytes if netbed is not None else 0  # the links' tbf bucket
    fit = fit_tier(rows, burst)
    ranks = ",".join(map(str, nprocs))
    prov = {**provenance(backend, netbed, ranks), "share_gpu": share_gpu}
    link = f"netbed {netbed}" if netbed is not None else f"{backend} over loopback"
    if share_gpu:  # the description says it too ([measured] network_share_gpu is the key)
        prov["gpu_sharing"] = gpu_sharing()  # MPS or time slices: timings differ by far
        link += (f", ranks sharing the GPU(s) ({prov['gpu_sharing']}) over NCCL's socket "
                 "transport")
    where = f"scape calibrate collectives, {ranks} ranks, {link}, {prov['date']}"
    tables = {
        **link_tables(fit, burst, f"measured by {where}"),
        "node": {"gpus_per_node": 1, "source": "one rank per node (namespace or process)"},
        "intra_node": {"kind": "none", "bw_GBps": 0.0, "efficiency": 1.0, "latency_us": 0.0,
                       "source": "one rank per node: no intra-node tier"},
        "fabric": {"topology": "fat-tree", "nodes_per_leaf": 250, "oversubscription": 1.0,
                   "switch_latency_us": 0.0,
                   "source": "one switch (the netbed's bridge, or the host's loopback)"},
        "overlap": {"ranks": list(interference), "async_interference": list(interference.values()),
                    "source": f"measured by {where}: a matmul workload behind an async "
                              "all-gather not yet waited for, against the same alone"},
    }
    tables["measured"] = {**{f"network_{k}": v for k, v in prov.items()},
                          "network": f"{ranks} ranks on {link} ({backend})",
                          **tables["measured"]}
    if kinds:
        tables["sharing"] = {
            "ranks": list(nprocs), "elements": SHARING_ELEMENTS, "extra_us": extra,
            # the means, for reading only: the simulator prices the medians
            "extra_mean_us": extra_mean,
            "source": f"measured by {where}: each kernel kind at {SHARING_ELEMENTS} elements, "
                      "called by every rank at once behind a collective, against rank 0 "
                      "alone (calibration/sharing.py); the slowest rank's extra time"}
    # a new sweep leaves no refit date of an earlier fit, and one without shared GPUs no
    # [sharing] (nor sharing mode)
    path = merge(name, tables, f"Written by {where}. Rerun it to refresh; do not edit.",
                 drop=("network_refit", *(() if share_gpu else ("network_gpu_sharing",))),
                 drop_tables=() if kinds else ("sharing",))
    return path, fit, _save_rows(path, pd.DataFrame(rows), fit)


def _save_rows(path, df, fit):
    """The sweep beside the profile (<name>.collectives.csv), with the fit's predictions."""
    df["predicted_s"] = fit.predictions
    df["error_pct"] = 100 * (df["predicted_s"] / df["seconds"] - 1)
    with atomic_path(path.with_suffix(".collectives.csv")) as tmp:  # whole or not at all
        df.to_csv(tmp, index=False)
    return df


def link_tables(fit, burst: float, how: str) -> dict:
    """A fit's profile tables: the link ([nic]), each collective's algorithm, efficiency and
    per-call overhead, and the fit's residual ([measured])."""
    source = f"{how}: least-absolute-relative-error fit (simulator/network/fit.py)"
    nic = {"nics_per_node": 1, "bw_Gbps": fit.bandwidth_Bps * 8 / 1e9, "efficiency": 1.0,
           "latency_us": fit.latency_s * 1e6, "source": source}
    if burst:
        nic["burst_bytes"] = burst
        nic["source"] += "; burst_bytes: the netbed's tbf bucket (scape/netbed.py burst_bytes)"
    return {
        "measured": {"network_fit_median_residual_pct": fit.residual_median_pct},
        "nic": nic,
        "collectives": {op: {"algo": c.algo, "efficiency": c.efficiency,
                             "residual_median_pct": c.residual_median_pct,
                             "residual_max_pct": c.residual_max_pct,
                             "ranks": list(c.ranks), "efficiencies": list(c.efficiencies),
                             "overheads_us": [o * 1e6 for o in c.overheads_s]}
                        for op, c in fit.collectives.items()},
    }


# the largest collective a sweep may hold: more than any GPU's memory (2^40 B = 1 TiB)
MAX_SWEEP_BYTES = 2**40


def _check_sweep_rows(name: str, file: str, df) -> None:
    """Every row of a saved sweep a collective the fit knows, at a size from 1 B to
    MAX_SWEEP_BYTES, over 2 or more ranks, in a finite positive time: else a UserError naming
    the file, the row (its line in the file) and what was expected."""
    import math

    for i, row in enumerate(df.itertuples(index=False), 2):  # line 1: the header
        op = row.op
        where = f"refit {name}: {file} line {i}"
        if not isinstance(op, str) or op not in WIRE_FACTOR:
            raise UserError(f"{where}: op {op!r} is not a collective "
                            f"({', '.join(WIRE_FACTOR)})")
        if not 1 <= row.size_bytes <= MAX_SWEEP_BYTES:
            raise UserError(f"{where}: size_bytes {row.size_bytes:g} is outside 1 B to "
                            f"{MAX_SWEEP_BYTES:g} B")
        if row.world != int(row.world) or row.world < 2:
            raise UserError(f"{where}: world {row.world:g} is not a rank count of 2 or more")
        if not (math.isfinite(row.seconds) and row.seconds > 0):
            raise UserError(f"{where}: seconds {row.seconds!r} is not a positive time")


def refit(name: str):
    """Fit the link of measured/<name>.toml again, with the fit as it is now, from the sweep
    saved beside it (<name>.collectives.csv: the measured rows, never re-measured); on a
    netbed profile with the bucket of the rate it names ([measured] network_netbed). Rewrites
    the link tables and the sweep's predictions; compute, kernels, overlap and sharing stay.
    Returns (path, fit, the sweep as a DataFrame)."""
    from datetime import datetime

    import pandas as pd

    from profiles.files import read_toml
    from profiles.measured import merge, path_of
    from scape.netbed import NetbedSpec
    from simulator.network.fit import fit_tier

    path = path_of(name, option="--profile", create=False)
    sweep_csv = path.with_suffix(".collectives.csv")
    if not path.exists() or not sweep_csv.exists():
        raise UserError(f"refit {name}: needs {path} and the sweep beside it, {sweep_csv.name} "
                        "(written by scape calibrate collectives --out NAME)")
    from profiles.measured_tables import measured_provenance

    # its [measured] table as every command checks it (a profile of collectives alone has no
    # [gpu] or [compute] for a whole load to accept)
    measured = measured_provenance(path, read_toml(path))
    netbed = measured.get("network_netbed")
    if netbed is None:
        raise UserError(f"refit {name}: its [measured] table has no network_netbed: not a "
                        "profile scape calibrate collectives wrote")
    spec = NetbedSpec.recorded(netbed, name)
    burst = 0 if spec is None else spec.burst_bytes
    try:
        df = pd.read_csv(sweep_csv)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise UserError(f"refit {name}: {sweep_csv.name} is not a sweep table "
                        f"({type(exc).__name__}: {str(exc).splitlines()[0]})") from None
    missing = {"op", "size_bytes", "world", "seconds"} - set(df.columns)
    if missing:
        raise UserError(f"refit {name}: {sweep_csv.name} lacks column(s) {sorted(missing)}")
    for col in ("size_bytes", "world", "seconds"):  # a damaged cell, not a traceback
        values = pd.to_numeric(df[col], errors="coerce")
        if values.isna().any():
            bad = df.loc[values.isna(), col].iloc[0]
            raise UserError(f"refit {name}: {sweep_csv.name} column {col} holds "
                            f"{str(bad)!r}, not a number")
        df[col] = values
    _check_sweep_rows(name, sweep_csv.name, df)
    # a sweep without an op the profile measured would drop that op's fit: refused, the
    # profile kept (calibrate collectives measures every op again)
    had = set(read_toml(path).get("collectives", {}))
    lost = sorted(had - set(df["op"]))
    if lost:
        raise UserError(f"refit {name}: {sweep_csv.name} holds no row of {', '.join(lost)}, "
                        f"which the profile measured: a refit would drop their fit; restore the "
                        f"sweep, or measure again (scape calibrate collectives --out {name})")
    df = df[["op", "size_bytes", "world", "seconds", *(
        c for c in ("min_s", "max_s") if c in df.columns)]].copy()
    try:
        fit = fit_tier(df[["op", "size_bytes", "world", "seconds"]].to_dict("records"), burst)
    except UserError as exc:  # a damaged row: say which file holds it
        raise UserError(f"refit {name}: {sweep_csv.name}: {exc}") from None
    # the rates as the times give them (the file's own columns may be stale or edited)
    known = df["op"].isin(list(WIRE_FACTOR))
    df["algbw_GBps"] = df["size_bytes"] / df["seconds"] / 1e9
    df["busbw_GBps"] = [a * WIRE_FACTOR[op](int(w)) if ok else float("nan") for a, op, w, ok
                        in zip(df["algbw_GBps"], df["op"], df["world"], known, strict=True)]
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    how = (f"refitted by scape calibrate refit on {when} from {sweep_csv.name} (measured "
           f"{measured.get('network_date', 'on an unrecorded date')})")
    tables = link_tables(fit, burst, how)
    try:  # what every command will check when it loads the profile, before it is rewritten
        validate_table(path, "nic", tables["nic"], NIC_FIELDS)
    except ProfileError as exc:
        raise UserError(f"refit {name}: the fit of {sweep_csv.name} gives a link no command "
                        f"would load ({exc}); the profile is kept as it was") from None
    tables["measured"]["network_refit"] = when
    header = (path.read_text().splitlines() or ["# "])[0].lstrip("# ").split(" Link refit")[0]
    path = merge(name, tables, f"{header} Link refitted by scape calibrate refit, {when}.")
    return path, fit, _save_rows(path, df, fit)
