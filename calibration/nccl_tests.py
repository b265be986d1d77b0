"""nccl-tests logs as published (issue 41): their text read row by row, and a cluster's link
fitted on them with the physics `scape calibrate collectives` fits (simulator/fit.py
`fit_tier`: one latency per ring step, one bandwidth per collective and rank count, on the
simulator's own algorithms), so `scape collective --hardware measured/NAME` then predicts any
size, op and rank count from them.

What is read (nccl-tests' `src/common.cu` output, both layouts: before about v2.11 an `error`
column and no `root`; since then `root` and `#wrong`):
- the header: `# nThread T nGpus G ...`, the ranks (`#  Rank  r ... on HOST device d [bus] NAME`),
  `# nccl-tests version` and `# Collective test starting: OP_perf` where printed;
- the size table: size (B, the whole buffer), count, type, redop and root where present, and
  out-of-place and in-place time (us), algbw and busbw (GB/s) and their check;
- the footer (`# Avg bus bandwidth`): a log without it was cut short, and is read as far as it
  is valid, said so.
A log of a failed run (a check that is not 0 or N/A, an "out of memory" or NCCL/CUDA failure
line) is refused with its file and line. Several runs writing one file (each rank process of
a multi-node job prints, or two jobs share a path) repeat rows: the first of each size is kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from profiles import UserError
from vocabulary.suggest import did_you_mean

# the op a log measures, from nccl-tests' binary names
BINARIES = {"all_reduce_perf": "all_reduce", "all_gather_perf": "all_gather",
            "reduce_scatter_perf": "reduce_scatter", "alltoall_perf": "all_to_all",
            "broadcast_perf": "broadcast", "sendrecv_perf": "sendrecv",
            "reduce_perf": "reduce"}
FAILURE = re.compile(r"out of memory|NCCL failure|CUDA failure|Test failure|test FAILED",
                     re.IGNORECASE)
RANK_LINE = re.compile(r"^#\s+Rank\s+(\d+)\s.*?\bPid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+"
                       r"\[[^\]]*\]\s+(.+?)\s*$")
THREADS = re.compile(r"^#\s*nThread\s+(\d+)\s+nGpus\s+(\d+)")


@dataclass(frozen=True)
class Row:
    size_bytes: int
    time_us: float  # out-of-place
    algbw_GBps: float
    busbw_GBps: float
    in_place_us: float | None
    line: int


@dataclass
class NcclTestsLog:
    path: str
    op: str
    rows: list[Row]
    ranks: int  # in one run: the highest rank + 1
    hosts: tuple[str, ...]
    devices: tuple[str, ...]
    gpus_per_process: int | None
    version: str | None
    complete: bool  # the footer was found
    repeated: int = 0  # rows dropped as repeats of a size already read
    spans_hosts: bool = False  # one run's ranks on several hosts (not several runs in a file)
    notes: list[str] = field(default_factory=list)


def _op_of(path: Path, text: str, op: str | None) -> str:
    started = re.search(r"Collective test starting:\s*(\w+)", text)
    named = next((o for b, o in BINARIES.items() if b in path.name), None)
    named = named or next((o for o in BINARIES.values() if o in path.name), None)
    found = BINARIES.get(started[1]) if started else named
    if op is not None:
        if found is not None and found != op:
            raise UserError(f"{path}: the log measures {found}, not --op {op}")
        return op
    if found is None:
        raise UserError(f"{path}: the log does not say which collective it measures (no "
                        "'Collective test starting' line, no op in the file name): give --op")
    return found


def _number(text: str, path: Path, line: int, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise UserError(f"{path}: line {line}: {what} {text!r} is not a number") from None


def parse_log(path: str | Path, op: str | None = None) -> NcclTestsLog:
    """One nccl-tests log, read as published; a UserError naming the file and line where it is
    not one, or where the run failed."""
    p = Path(path)
    try:
        text = p.read_text(errors="replace")
    except OSError as exc:
        raise UserError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    name = _op_of(p, text, op)
    ranks: dict[tuple[str, str], set[int]] = {}
    devices, hosts, rows, seen = [], [], [], set()
    threads = version = None
    complete, repeated, columns, cut = False, 0, None, None
    lines = text.splitlines()
    last = max((i for i, ln in enumerate(lines, 1) if ln.strip()), default=0)
    for i, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line:
            continue
        if FAILURE.search(line):
            raise UserError(f"{path}: line {i}: the run failed ({line[:80]!r}); nothing is "
                            "fitted on a failed run")
        if line.startswith("#"):
            m = RANK_LINE.match(line)
            if m:
                ranks.setdefault((m[3], m[2]), set()).add(int(m[1]))
                hosts.append(m[3])
                devices.append(m[5])
            elif (t := THREADS.match(line)) is not None:
                threads = int(t[2])
            elif "nccl-tests version" in line:
                version = line.lstrip("# ").split(" nccl-headers")[0]
            elif line.startswith("# Avg bus bandwidth"):
                complete = True
            elif re.match(r"#\s+size\s+count", line):
                columns = line.lstrip("#").split()
            continue
        cells = line.split()
        if columns is None:
            raise UserError(f"{path}: line {i}: a row before the table's header (size, count, "
                            "...): not an nccl-tests log")
        # size count type [redop] [root] time algbw busbw check time algbw busbw check
        n_keys = len(cells) - 8
        if n_keys not in (3, 4, 5) or len(cells) != len(columns):
            if i == last:  # the file ends inside this row: cut short, read up to it
                cut = i
                break
            raise UserError(f"{path}: line {i}: {len(cells)} cells where the header has "
                            f"{len(columns)} ({' '.join(columns)})")
        size = _number(cells[0], p, i, "size")
        t, algbw, busbw, check = cells[n_keys:n_keys + 4]
        t_in, _, _, check_in = cells[n_keys + 4:]
        for c in (check, check_in):
            if c not in ("N/A", "0") and not re.fullmatch(r"0(\.0+)?(e[+-]?\d+)?", c):
                raise UserError(f"{path}: line {i}: the result check reads {c} (wrong values "
                                "at this size): nothing is fitted on a run that failed it")
        if size <= 0:  # nccl-tests' 0-byte rows time a launch, not a collective
            continue
        if size in seen:
            repeated += 1
            continue
        seen.add(size)
        rows.append(Row(int(size), _number(t, p, i, "time"), _number(algbw, p, i, "algbw"),
                        _number(busbw, p, i, "busbw"),
                        None if t_in == "N/A" else _number(t_in, p, i, "time"), i))
    if not rows:
        raise UserError(f"{path}: no size row with a positive size (is it an nccl-tests log?)")
    if len(set(devices)) > 1:
        kinds = ", ".join(sorted(set(devices)))
        raise UserError(f"{path}: its ranks ran on different devices ({kinds}): one system "
                        "per log")
    # each run numbers its ranks from 0 (two runs in one file: two lists 0..7)
    world = max((max(r) + 1 for r in ranks.values()), default=0)
    notes = []
    if not complete:
        notes.append(f"{p.name}: no '# Avg bus bandwidth' footer: the log was cut short; its "
                     f"{len(rows)} complete rows are read"
                     + (f" (line {cut} ends inside a row and is left out)" if cut else ""))
    if repeated:
        notes.append(f"{p.name}: {repeated} rows repeat a size already read (several runs or "
                     "processes wrote the file): the first of each size is kept")
    if world < 2:
        raise UserError(f"{path}: the log names {world} rank(s) ('#  Rank' lines): a "
                        "collective needs 2 or more")
    # one run over several hosts: no process group holds all of its ranks (two runs of one
    # node each, written to one file, each hold 0..7)
    spans = len(set(hosts)) > 1 and max(len(r) for r in ranks.values()) < world
    return NcclTestsLog(str(p), name, rows, world, tuple(dict.fromkeys(hosts)),
                        tuple(dict.fromkeys(devices)), threads, version, complete,
                        repeated=repeated, spans_hosts=spans, notes=notes)


def with_repeat(held):
    """A held-out table with the log's own repeat beside each row: nccl-tests times every size
    twice, out of place and in place, the same call on other buffers, so their difference is
    how far the log repeats itself (`repeat_pct`: in-place / out-of-place - 1). `outside_pct`:
    how far the prediction lies outside the two measurements (0 between them; else its error
    against the nearer one), the error that the log's own spread does not explain. NaN where
    a log has no in-place column."""
    if held is None:
        return None
    import numpy as np

    oop = held["seconds"].to_numpy(float)
    ip = held["in_place_seconds"].astype(float).to_numpy() if "in_place_seconds" in held else (
        np.full(len(held), np.nan))
    pred = held["predicted_s"].to_numpy(float)
    lo, hi = np.fmin(oop, ip), np.fmax(oop, ip)
    outside = np.where(pred < lo, pred / lo - 1, np.where(pred > hi, pred / hi - 1, 0.0))
    return held.assign(repeat_pct=100 * (ip / oop - 1),
                       outside_pct=np.where(np.isnan(ip), np.nan, 100 * outside))


def fit_rows(logs: list[NcclTestsLog], min_bytes: int = 0) -> list[dict]:
    """The rows `fit_tier` takes: {op, size_bytes, world, seconds} (out-of-place times) of the
    ops the simulator models, from `min_bytes` up; each also keeps its in-place time, the same
    call measured again (`with_repeat`)."""
    from scape.plan import WIRE_FACTOR

    out = []
    for log in logs:
        if log.op not in WIRE_FACTOR:
            raise UserError(f"{log.path}: {log.op} is not a collective the simulator models "
                            f"({', '.join(WIRE_FACTOR)})")
        out += [{"op": log.op, "size_bytes": r.size_bytes, "world": log.ranks,
                 "seconds": r.time_us * 1e-6, "gpus_per_process": log.gpus_per_process,
                 "in_place_seconds": None if r.in_place_us is None else r.in_place_us * 1e-6,
                 "source": f"{Path(log.path).name}:{r.line}"}
                for r in log.rows if r.size_bytes >= min_bytes]
    return out


# what NCCL runs each collective of a log with, as the fit prices it: its ring (pairwise
# sends for all-to-all); the link's fit must not pick gloo's reduce-scatter through an
# all-reduce, which NCCL never runs (it made the link twice as fast as the rings say)
NCCL_RINGS = {"all_reduce": ("ring",), "all_gather": ("ring",), "reduce_scatter": ("ring",),
              "broadcast": ("ring",), "all_to_all": ("pairwise",)}
# what a profile of nccl-tests logs takes from the hardware profile of its GPU (--gpu-from):
# the logs say nothing of compute, and commands load a profile whole
GPU_TABLES = ("gpu", "compute", "roofline", "memory")


def launch_s(fit, world: int) -> float:
    """The fixed cost per call the fitted collectives share at `world` ranks (the median of
    their own, `simulator/fit.py` overheads_s): what launching one call costs the process that
    drives the GPUs (nccl-tests -g 8: one process launching on 8 GPUs), whatever the op, so a
    held-out op of the same runs pays it too."""
    import statistics

    own = [o for c in fit.collectives.values() for w, o in zip(c.ranks, c.overheads_s,
                                                                strict=True) if w == world]
    return statistics.median(own) if own else 0.0


MODELS = ("nccl", "link")


def calibrate_from_logs(name: str, paths: list[str], op: str | None = None,
                        holdout: str | None = None, min_bytes: int = 0,
                        gpu_from: str | None = None, model: str | None = None,
                        algo: str = "auto"):
    """Fit the logs' rows (all ops, or all but `holdout`) and write measured/<name>.toml;
    with `holdout`, also predict that op's rows from the fit made without them. `model`:
    nccl (the --gpu-from profile's NCCL path with its NVLink efficiency and launch cost
    fitted, calibration/nccl_tests_fit.py; logs of one node, a profile with [nccl]) or link
    (one latency per hop and a bandwidth per op, as `scape calibrate collectives` writes,
    with the sweep beside it); default: nccl where it applies. `algo`: the NCCL_ALGO the logs
    ran with (nccl model). Returns (path, fit, sweep table, held-out table or None, notes)."""
    from datetime import UTC, datetime

    import pandas as pd

    from calibration.collectives import _save_rows, link_tables
    from profiles import load_hardware
    from profiles.files import read_toml
    from profiles.measured import merge, path_of
    from simulator.fit import coefficients, fit_tier

    path_of(name)  # a bad name fails before any reading
    if gpu_from is None:
        raise UserError("--gpu-from NAME: the hardware profile whose GPU the logs ran on "
                        "(dgx-a100, dgx-h100, ...): nccl-tests measures the network only, and "
                        "the profile needs its GPU's tables to load")
    base = load_hardware(gpu_from)
    logs = [parse_log(p, op) for p in paths]
    devices = {d for log in logs for d in log.devices}
    if len(devices) > 1:
        raise UserError(f"the logs come from different systems ({', '.join(sorted(devices))}): "
                        "calibrate one system at a time")
    rows = fit_rows(logs, min_bytes)
    if not rows:
        raise UserError(f"no row of the logs is at or above --min-size ({min_bytes:,} B): the "
                        "largest they measured is "
                        f"{max((r.size_bytes for log in logs for r in log.rows), default=0):,} B")
    ops = sorted({r["op"] for r in rows})
    if holdout is not None and holdout not in ops:
        raise UserError(f"--holdout {holdout}: no log measures it (the logs hold "
                        f"{', '.join(ops)})")
    fitted = [r for r in rows if r["op"] != holdout]
    if not fitted:
        raise UserError(f"--holdout {holdout}: it is the only op of the logs; nothing is left "
                        "to fit on")
    notes = [n for log in logs for n in log.notes]
    multi = [log for log in logs if log.spans_hosts]
    one_node = (base.nccl is not None and not multi
                and all(log.ranks <= base.node.gpus_per_node for log in logs))
    if model is not None and model not in MODELS:
        raise UserError(f"--model {model!r}{did_you_mean(model, MODELS)}; choose one of: "
                        f"{', '.join(MODELS)}")
    if model == "nccl" and not one_node:
        raise UserError("--model nccl fits the NCCL path of one node: "
                        + (f"{base.name} has no [nccl] table" if base.nccl is None else
                           "these logs span several nodes")
                        + "; leave --model out (the link fit) or give --model link")
    if (model or ("nccl" if one_node else "link")) == "nccl":
        path, fit, sweep, held, notes = _from_logs_nccl(name, paths, logs, base, rows, fitted,
                                                        holdout, algo, notes)
        return path, fit, sweep, with_repeat(held), notes
    if algo != "auto":
        raise UserError(f"--algo {algo}: the link fit prices every op as NCCL's ring; --algo "
                        "is for --model nccl")
    fit = fit_tier([{k: r[k] for k in ("op", "size_bytes", "world", "seconds")}
                    for r in fitted], algorithms=NCCL_RINGS)
    if multi:
        notes.append("a run spans several hosts with several GPUs each: it is fitted as one "
                     "tier (its NVLink and NICs together); other layouts are extrapolations")
    held = None
    if holdout is not None:  # the fitted link: its latency and bandwidth, the op's algorithm
        out = []
        for r in (r for r in rows if r["op"] == holdout):
            a, c = coefficients(holdout, "ring", int(r["world"]), float(r["size_bytes"]))
            predicted = (fit.latency_s * a + launch_s(fit, int(r["world"]))
                         + float(r["size_bytes"]) * c / fit.bandwidth_Bps)
            out.append({**r, "predicted_s": predicted,
                        "error_pct": 100 * (predicted / r["seconds"] - 1)})
        held = with_repeat(pd.DataFrame(out))
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    logs_text = ", ".join(Path(p).name for p in paths)
    where = f"scape calibrate nccl-tests {logs_text}, {when}"
    tables = {
        **link_tables(fit, 0.0, f"fitted by {where}"),
        "node": {"gpus_per_node": 1, "source": "one rank per link: the fit's testbed "
                 "(simulator/fit.py), as scape calibrate collectives writes it"},
        "intra_node": {"kind": "none", "bw_GBps": 0.0, "efficiency": 1.0, "latency_us": 0.0,
                       "source": "one rank per link: no intra-node tier"},
        "fabric": {"topology": "fat-tree", "nodes_per_leaf": 250, "oversubscription": 1.0,
                   "switch_latency_us": 0.0, "source": "one switch (the fit's testbed)"},
    }
    raw = read_toml(Path(base.path))
    for table in GPU_TABLES:
        if table in raw:
            tables[table] = {**raw[table], "source": f"copied from hardware profile "
                             f"{base.name} by --gpu-from ({raw[table].get('source', '')})"}
    versions = sorted({log.version for log in logs if log.version})
    tables["measured"] = {
        "network": f"nccl-tests logs ({logs_text}) of {len(logs)} run(s) on "
                   f"{', '.join(sorted(devices)) or 'an unnamed device'}",
        "network_date": when, "network_host": ", ".join(
            sorted({h for log in logs for h in log.hosts})) or "not in the logs",
        "network_device": ", ".join(sorted(devices)) or "not in the logs",
        "network_backend": "nccl", "network_netbed": "none (loopback)",
        "network_torch": "; ".join(versions) or "nccl-tests version not in the logs",
        "network_nprocs": ",".join(sorted({str(log.ranks) for log in logs})),
        **tables["measured"]}
    path = merge(name, tables, f"Written by {where}. Rerun it to refresh; do not edit.",
                 drop=("network_refit",))
    sweep = _save_rows(path, pd.DataFrame([{k: r[k] for k in ("op", "size_bytes", "world",
                                                                "seconds")}
                                           for r in fitted]), fit)
    return path, fit, sweep, held, notes


def _from_logs_nccl(name: str, paths: list[str], logs, base, rows: list[dict],
                    fitted: list[dict], holdout: str | None, algo: str, notes: list[str]):
    """calibrate_from_logs with the nccl model: the base profile's NCCL path, its NVLink
    efficiency and launch cost fitted (calibration/nccl_tests_fit.py), written whole as
    measured/<name>.toml with the rows beside it (<name>.nccl-tests.csv)."""
    from datetime import UTC, datetime

    import pandas as pd

    from calibration.nccl_tests_fit import fit_nccl, predict
    from profiles.files import read_toml
    from profiles.loader import write_checked
    from profiles.measured import dumps, path_of
    from vocabulary.atomic import to_csv_atomic

    fit = fit_nccl(base, fitted, algo)

    def table(which: list[dict]) -> pd.DataFrame:
        got = predict(fit.hardware, which, algo)
        return pd.DataFrame([{**r, "predicted_s": p, "error_pct": 100 * (p / r["seconds"] - 1)}
                             for r, p in zip(which, got, strict=True)])

    held = table([r for r in rows if r["op"] == holdout]) if holdout is not None else None
    sweep = table(fitted)
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    logs_text = ", ".join(Path(p).name for p in paths)
    src = (f"fitted by scape calibrate nccl-tests {logs_text} (--algo {algo}), {when}: solved "
           "with the other on the logs' rows through this profile's NCCL path "
           "(calibration/nccl_tests_fit.py)")
    doc = read_toml(Path(base.path))
    doc["intra_node"] = {**doc["intra_node"], "efficiency": fit.efficiency,
                         "efficiency_source": src}
    doc["nccl"] = {**doc["nccl"], "launch_us": fit.launch_us, "launch_us_source": src}
    path = path_of(name)
    doc["name"] = path.stem
    devices = sorted({d for log in logs for d in log.devices})
    doc["description"] = (f"{base.name} with its NVLink efficiency and NCCL launch cost fitted "
                          f"on nccl-tests logs of {', '.join(devices) or 'an unnamed device'} "
                          f"({logs_text})")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_checked(path, f"# Written by scape calibrate nccl-tests {logs_text}, {when}. "
                  "Rerun it to refresh; do not edit.\n" + dumps(doc), "--out")
    to_csv_atomic(sweep, path.with_suffix(".nccl-tests.csv"), index=False)
    return path, fit, sweep, held, notes
