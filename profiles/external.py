"""External measurements: other people's published numbers, as data (DESIGN section 9).

One TOML file per source under profiles/external/, every number with the repository, path,
commit and line it was transcribed from. `scape validate --external NAME` predicts them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profiles.errors import ProfileError, UserError
from profiles.loader import read_toml

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

    def config(self, row: ExternalRow) -> dict[str, Any] | None:
        """The launch settings `row` was measured with, where the source has them."""
        for c in self.configs:
            if (c.get("model") == row.model and row.series in c.get("series", ())
                    and row.table in c.get("tables", ())):
                return c
        return None


def names() -> list[str]:
    return sorted(p.stem for p in FOLDER.glob("*.toml"))


def load_external(name: str) -> ExternalData:
    """Read profiles/external/NAME.toml; an unknown name or a malformed row is one clear error."""
    path = FOLDER / f"{name}.toml"
    if not path.exists():
        raise UserError(f"unknown external data set {name!r}; known: {', '.join(names())}")
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
    return ExternalData(doc["name"], doc["repo"], doc["description"], tuple(rows),
                        tuple(doc.get("config", [])), str(path))
