"""How far the collective model is from published runs like the one asked about: the held-out
errors of bench/fidelity_public.py, grouped into bands (issue 18's benchmark, shown to users).

A band is (shipped hardware profile, node count class, how the run was launched, size class).
`bands` computes them from the bench's predictions; the bench writes them to
profiles/external/fidelity-bands.csv (`--bands`), which `lookup` reads for `scape collective`.
Only held-out rows count; a band with no published run is absent, never guessed.

The cross-op bands do the same for a profile `scape calibrate nccl-tests` fitted (issue 59):
(the shipped profile whose NCCL path it fitted, the op or ops it was fitted on, the op
predicted, node count, launch and size classes), from
bench/nccl_tests_holdout.py's fits on one op of a shipped public log predicting its other ops
(`--bands`: profiles/external/cross-op-bands.csv), read by `cross_op_lookup`.
"""

from __future__ import annotations

import csv
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

BANDS = Path(__file__).resolve().parents[1] / "profiles" / "external" / "fidelity-bands.csv"
MIB = 2**20
KEYS = ["hardware", "nodes", "launch", "sizes"]
# an op a calibrated profile did not measure, predicted from the ops it did (issue 59):
# bench/nccl_tests_holdout.py --bands writes it from the shipped public logs
CROSS_OP_BANDS = BANDS.with_name("cross-op-bands.csv")
CROSS_KEYS = ["hardware", "fitted", "op", "nodes", "launch", "sizes"]
CROSS_MIN_BYTES = 64 * 1024  # the smallest size the bench predicts (its MIN_BYTES)
STATS = ["rows", "median_abs_err_pct", "max_abs_err_pct", "median_err_pct", "cases"]


def node_class(gpus: int, gpus_per_node: int) -> str:
    """1, 2 or 3+ nodes: NCCL's tuner and a tree's NIC load change at these (tuning.cc
    perCh caps by 1/2/3+ nodes; simulator/network/collectives/nvls.py)."""
    nodes = -(-gpus // gpus_per_node)
    return "1" if nodes == 1 else "2" if nodes == 2 else "3+"


def launch_class(gpus_per_process: int, size: float) -> str:
    """How the run was launched, where it matters: below 64 MiB (a call of one process for 8
    GPUs waits for 8 launches, and A100 runs so launched are slower at 1-64 MiB,
    docs/research/single-process-launch.md); from 64 MiB a call takes hundreds of microseconds
    and the launch is lost in it."""
    if size >= 64 * MIB:
        return "any"
    return "one process per GPU" if gpus_per_process == 1 else "one process, several GPUs"


def size_class(size: float) -> str:
    """Below 1 MiB (launch and latency), 1-64 MiB (protocols and pipelines), from 64 MiB
    (bandwidth)."""
    return "<1MiB" if size < MIB else "1-64MiB" if size < 64 * MIB else ">=64MiB"


def summarize(held: pd.DataFrame, keys: list[str], err: str) -> pd.DataFrame:
    """Per group of `keys`: held-out rows, median and max |error| and median signed error (in
    %, column `err`), and the cases they come from; a group without rows is absent."""
    rows = []
    for values, part in held.groupby(keys, sort=True):
        e = part[err]
        rows.append({**dict(zip(keys, values, strict=True)), "rows": len(part),
                     "median_abs_err_pct": round(e.abs().median(), 1),
                     "max_abs_err_pct": round(e.abs().max(), 1),
                     "median_err_pct": round(e.median(), 1),
                     "cases": ";".join(sorted(part["case"].unique()))})
    import pandas as pd  # here, not at the top: `scape simulate` runs without it

    return pd.DataFrame(rows, columns=[*keys, *STATS])


def _classed(held: pd.DataFrame, per_node: list[int]) -> pd.DataFrame:
    """`held` with its node count, launch and size classes (`per_node`: each row's GPUs a
    node)."""
    held["nodes"] = [node_class(int(g), n)
                     for g, n in zip(held["gpus"], per_node, strict=True)]
    held["launch"] = [launch_class(int(p), s)
                      for p, s in zip(held["gpus_per_process"], held["size_bytes"], strict=True)]
    held["sizes"] = [size_class(s) for s in held["size_bytes"]]
    return held


def bands(df: pd.DataFrame, gpus_per_node: dict[str, int]) -> pd.DataFrame:
    """The bands of the bench's held-out rows (`df`: its predictions, with case, hardware,
    gpus, gpus_per_process, size_bytes, err_pct and held_out)."""
    held = df[df["held_out"]].copy()
    held = _classed(held, [gpus_per_node[h] for h in held["hardware"]])
    return summarize(held, KEYS, "err_pct")


def cross_op_bands(df: pd.DataFrame) -> pd.DataFrame:
    """The bands of ops predicted from a `scape calibrate nccl-tests` fit on other ops of the
    same public logs (bench/nccl_tests_holdout.py; `df`: one row a predicted size, with case,
    hardware (the shipped profile whose NCCL path was fitted), fitted (the op fitted on, or
    "several": every other op of the log), op, gpus,
    gpus_per_node (the ranks a host of the log ran), gpus_per_process, size_bytes, err_pct)."""
    held = _classed(df.copy(), list(df["gpus_per_node"]))
    return summarize(held, CROSS_KEYS, "err_pct")


def fitted_class(ops: list[str]) -> str:
    """A profile's fitted ops as cross_op_bands keys them: the one op, or "several"."""
    return ops[0] if len(ops) == 1 else "several"


def cross_op_lookup(hardware: str, fitted_ops: list[str], op: str, gpus: int,
                    gpus_per_node: int, gpus_per_process: int, size: float) -> dict:
    """How far an op predicted from a fit on `fitted_ops` of the shipped profile `hardware`'s
    NCCL path was on public logs like this call (`heldout`'s columns; none where no public log
    was predicted so, nor below the sizes the bench predicted)."""
    return heldout(None if size < CROSS_MIN_BYTES else stored(
        CROSS_OP_BANDS, tuple(CROSS_KEYS)).get((
            hardware, fitted_class(fitted_ops), op, node_class(gpus, gpus_per_node),
            launch_class(gpus_per_process, size), size_class(size))))


@lru_cache(maxsize=4)
def stored(path: Path, keys: tuple[str, ...]) -> dict[tuple[str, ...], dict]:
    """A shipped band file by its key columns; empty where the file is absent."""
    if not path.is_file():
        return {}
    with path.open() as f:
        return {tuple(r[k] for k in keys): r for r in csv.DictReader(f)}


def heldout(band: dict | None, prefix: str = "heldout") -> dict:
    """A band's figures as output columns: held-out rows, median and max |error| in %, median
    signed error (negative: the model is fast); empty values where no band is like it."""
    names = [f"{prefix}_rows", f"{prefix}_median_abs_err_pct", f"{prefix}_max_abs_err_pct",
             f"{prefix}_median_err_pct"]
    if band is None:
        return dict(zip(names, (0, None, None, None), strict=True))
    return {names[0]: int(band["rows"]), **{
        name: float(band[col]) for name, col in zip(names[1:], STATS[1:4], strict=True)}}


def lookup(hardware: str, gpus: int, gpus_per_node: int, gpus_per_process: int,
           size: float) -> dict:
    """The band of a call like this one (`heldout`'s columns)."""
    return heldout(stored(BANDS, tuple(KEYS)).get((
        hardware, node_class(gpus, gpus_per_node), launch_class(gpus_per_process, size),
        size_class(size))))
