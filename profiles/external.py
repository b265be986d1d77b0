"""External measurements: other people's published numbers, as data (DESIGN section 9).

One TOML file per source under profiles/external/, every number with the repository, path,
commit and line it was transcribed from. `scape validate --external NAME` predicts them.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from profiles.files import read_toml
from vocabulary.errors import ProfileError, UserError
from vocabulary.suggest import did_you_mean

FOLDER = Path(__file__).resolve().parent / "external"
ROW_KEYS = ("table", "series", "quantity", "model", "gpus", "value", "path", "commit", "line")


@dataclass(frozen=True)
class ExternalRow:
    table: str
    series: str
    quantity: str  # step_ms | compute_ms | comm_ms | memory_MB
    model: str
    gpus: int | None  # None where the source does not say
    value: float
    path: str
    commit: str
    line: int

    @property
    def cite(self) -> str:
        return f"{self.path}:{self.line} @ {self.commit[:8]}"


@dataclass(frozen=True)
class ExternalData:
    name: str
    repo: str
    description: str
    rows: tuple[ExternalRow, ...]
    configs: tuple[dict[str, Any], ...]  # the launch settings each series ran with
    path: str
    transport: dict[str, Any] = field(default_factory=dict)  # how NCCL crossed nodes, sourced

    @property
    def chunk_bytes(self) -> float:
        """The transport's store-and-forward unit per NIC and ring step (0: not stated)."""
        return float(self.transport.get("chunk_kib", 0.0)) * 1024

    def config(self, row: ExternalRow) -> dict[str, Any] | None:
        """The launch settings `row` was measured with, where the source has them."""
        for c in self.configs:
            if (c.get("model") == row.model and row.series in c.get("series", ())
                    and row.table in c.get("tables", ())):
                return c
        return None


def names() -> list[str]:
    """The external data sets: files of profiles/external with measured rows ([[row]]); the
    folder's other TOML files (NCCL's tuning constants) are data of another kind."""
    return sorted(p.stem for p in FOLDER.glob("*.toml")
                  if "[[row]]" in p.read_text(errors="replace"))


# the SCAPE authors' --micro-batch-size in the runs of table comp_comm_micro_bs_8
AUTHORS_MICRO_BATCH = 8


def authors_compute_rows() -> list[ExternalRow]:
    """The SCAPE authors' dense AdamS computation per step on GH200 (scape-sc26, table
    comp_comm_micro_bs_8: Llama-500M and 1.8B at micro-batch AUTHORS_MICRO_BATCH, global batch
    1024, 4-64 GPUs), in ms."""
    return [r for r in load_external("scape-sc26").rows
            if (r.table, r.series, r.quantity) == ("comp_comm_micro_bs_8", "adams", "compute_ms")]


def authors_micro_batches(row: ExternalRow) -> int:
    """Micro-batches of AUTHORS_MICRO_BATCH each GPU runs per step in an `authors_compute_rows`
    row: the model's global batch over the row's GPUs."""
    from profiles import load_model  # lazily: profiles.external is imported by profiles

    return load_model(row.model).global_batch // row.gpus // AUTHORS_MICRO_BATCH


def load_external(name: str) -> ExternalData:
    """Read profiles/external/NAME.toml; an unknown name (a path too: names only) or a
    malformed row is one clear error."""
    known = names()
    if name not in known:
        raise UserError(f"unknown external data set {name!r}{did_you_mean(name, known)}; "
                        f"known: {', '.join(known)}")
    path = FOLDER / f"{name}.toml"
    doc = read_toml(path)
    rows = []
    for i, raw in enumerate(doc.get("row", [])):
        missing = [k for k in ROW_KEYS if k not in raw and k != "gpus"]
        if missing:
            raise ProfileError(f"{path}: row {i + 1}: missing {', '.join(missing)}")
        if not isinstance(raw["value"], int | float) or isinstance(raw["value"], bool):
            raise ProfileError(f"{path}: row {i + 1}: value must be a number")
        rows.append(ExternalRow(**{k: raw.get(k) for k in ROW_KEYS}))
    if not rows:
        raise ProfileError(f"{path}: no [[row]] entries")
    for key in ("name", "repo", "description"):
        if not isinstance(doc.get(key), str):
            raise ProfileError(f"{path}: {key}: missing or not text")
    transport = doc.get("transport", {})
    chunk = transport.get("chunk_kib", 0.0)
    if not isinstance(chunk, int | float) or isinstance(chunk, bool) or not 0 <= chunk <= 1 << 20:
        raise ProfileError(f"{path}: [transport] chunk_kib must be a number in [0, 1048576]")
    for key in [k for k in transport if k != "source" and not k.endswith("_source")]:
        if f"{key}_source" not in transport and key != "kind":
            raise ProfileError(f"{path}: [transport] {key} has no {key}_source")
    return ExternalData(doc["name"], doc["repo"], doc["description"], tuple(rows),
                        tuple(doc.get("config", [])), str(path), dict(transport))


PUBLIC_COLLECTIVES = FOLDER / "public-collectives.csv"  # sources in public-collectives.md


@dataclass(frozen=True)
class PublishedCollective:
    """One published nccl-tests run (a case of public-collectives.csv): where it ran and its
    out-of-place time and bus bandwidth per size."""

    case: str
    hardware: str
    gpus: int
    op: str
    nccl_algo: str  # auto: NCCL's own choice; else what NCCL_ALGO forced
    # nccl-tests' -g: GPUs one process drove (1 under mpirun -g 1); a row that does not say
    # (an empty last field, or a file without the column) takes `default_gpus_per_process`
    gpus_per_process: int
    rows: dict[int, tuple[float, float]]  # size_bytes -> (time_us, busbw_GBps)


def default_gpus_per_process(gpus: int, gpus_per_node: int) -> int:
    """How a published run that does not say was launched: one process driving the node's
    GPUs on one node (nccl-tests without MPI, the common single-node run, and the floor this
    project priced every call at before it modelled the launch), one process per GPU across
    nodes (mpirun -g 1, as multi-node runs are launched)."""
    return gpus if gpus <= gpus_per_node else 1


def _gpus_per_process(value: str | None, hardware: str, gpus: int) -> int:
    if value not in (None, ""):
        return int(value)
    from profiles import load_hardware  # lazily: profiles.external is imported by profiles

    return default_gpus_per_process(gpus, load_hardware(hardware).node.gpus_per_node)


def published_collective(case: str) -> PublishedCollective:
    """The published run `case`; an unknown name is one error listing the known ones."""
    with PUBLIC_COLLECTIVES.open() as f:
        every = list(csv.DictReader(f))
    found = [r for r in every if r["case"] == case]
    if not found:
        known = sorted({r["case"] for r in every})
        raise UserError(f"unknown published case {case!r}{did_you_mean(case, known)}; "
                        f"known: {', '.join(known)} "
                        f"(profiles/external/public-collectives.csv)")
    first = found[0]
    return PublishedCollective(
        case, first["hardware"], int(first["gpus"]), first["op"], first["nccl_algo"],
        _gpus_per_process(first.get("gpus_per_process"), first["hardware"], int(first["gpus"])),
        {int(r["size_bytes"]): (float(r["time_us"]), float(r["busbw_GBps"])) for r in found})
