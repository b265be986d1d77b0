"""Strict, declarative validation of TOML tables (DESIGN section 8).

Units live in key names (`bw_GBps`, `latency_us`). A key that is unknown, missing, of the
wrong type, out of range, or written with another unit than the schema's is an error that names
the file, the table and the key.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vocabulary.errors import ProfileError

# Keys of earlier versions: (the key now, what changed), said instead of "unknown key".
RENAMED = {
    "launch_floor_us": ("launch_us", "one GPU's launch: the old floor of one process driving "
                                     "the node's 8 GPUs, divided by 8"),
}
# Unit suffixes a key may carry; used to tell "wrong unit" apart from "unknown key".
UNITS = {
    "GBps": "gigabytes per second",
    "Gbps": "gigabits per second",
    "MBps": "megabytes per second",
    "Mbps": "megabits per second",
    "TBps": "terabytes per second",
    "us": "microseconds",
    "ms": "milliseconds",
    "ns": "nanoseconds",
    "s": "seconds",
    "GB": "gigabytes",
    "GiB": "gibibytes",
    "MB": "megabytes",
    "tflops": "teraFLOP/s",
    "gflops": "gigaFLOP/s",
}


@dataclass(frozen=True)
class Field:
    """One key of a table: its type, whether it is required, and its allowed range."""

    kind: type  # int, float, str or bool; float also accepts an int
    required: bool = True
    gt: float | None = None  # value must be > gt
    ge: float | None = None  # value must be >= ge
    le: float | None = None  # value must be <= le
    choices: tuple[str, ...] | None = None
    nonempty: bool = False
    # a rate or share that is not 0 must be at least this: 1e-300 passes gt=0 and prints
    # step times of 300 digits (1e-6: a measured MFU of a tiny model is ~1e-3, the netbed's
    # slowest link 1 kbit/s = 1e-6 Gbit/s)
    least: float | None = None


def _split_unit(key: str) -> tuple[str, str | None]:
    stem, _, unit = key.rpartition("_")
    if stem and unit in UNITS:
        return stem, unit
    return key, None


def _where(path: Path | str, table: str, key: str) -> str:
    return f"{path}: [{table}] {key}" if table else f"{path}: {key}"


def _check_value(path, table, key, spec: Field, value):
    where = _where(path, table, key)
    if spec.kind is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            unit = _split_unit(key)[1]
            hint = f" in {UNITS[unit]} (the unit is in the key name)" if unit else ""
            raise ProfileError(f"{where}: expected a number{hint}, got {value!r}")
        value = float(value)
        if not math.isfinite(value):
            raise ProfileError(f"{where}: must be finite, got {value!r}")
    elif spec.kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ProfileError(f"{where}: expected an integer, got {value!r}")
    elif not isinstance(value, spec.kind):
        raise ProfileError(f"{where}: expected {spec.kind.__name__}, got {value!r}")
    if spec.gt is not None and not value > spec.gt:
        raise ProfileError(f"{where}: must be > {spec.gt:g}, got {value!r}")
    if spec.ge is not None and not value >= spec.ge:
        raise ProfileError(f"{where}: must be >= {spec.ge:g}, got {value!r}")
    if spec.least is not None and value != 0 and not value >= spec.least:
        raise ProfileError(f"{where}: must be 0 or >= {spec.least:g} (a rate or share this "
                           f"small is a typo), got {value!r}" if spec.ge == 0 else
                           f"{where}: must be >= {spec.least:g} (a rate or share this small "
                           f"is a typo), got {value!r}")
    if spec.le is not None and not value <= spec.le:
        raise ProfileError(f"{where}: must be <= {spec.le:g}, got {value!r}")
    if spec.choices is not None and value not in spec.choices:
        raise ProfileError(f"{where}: must be one of {', '.join(spec.choices)}, got {value!r}")
    if spec.nonempty and not str(value).strip():
        raise ProfileError(f"{where}: must not be empty")
    return value


def validate_table(
    path: Path | str, table: str, data: Any, fields: Mapping[str, Field]
) -> tuple[dict[str, Any], dict[str, str]]:
    """Check one table against `fields`.

    Returns (values, field_sources): values holds every declared key (None for an absent
    optional one); field_sources holds the optional `<key>_source` strings.
    """
    if not isinstance(data, dict):
        raise ProfileError(f"{_where(path, '', table)}: expected a table, got {data!r}")
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for key, raw in data.items():
        if key in fields:
            values[key] = _check_value(path, table, key, fields[key], raw)
            continue
        if key.endswith("_source") and key[: -len("_source")] in fields:
            sources[key[: -len("_source")]] = _check_value(
                path, table, key, Field(str, nonempty=True), raw
            )
            continue
        old = key.removesuffix("_source")
        if old in RENAMED and RENAMED[old][0] in fields:
            new = RENAMED[old][0] + key[len(old):]
            both = new in data  # the new key is there too: the old one only needs deleting
            raise ProfileError(f"{_where(path, table, key)}: renamed {new} "
                               f"({RENAMED[old][1]})" + ("; delete this key, the table has "
                                                         f"{new}" if both else ""))
        stem, unit = _split_unit(key)
        same_stem = [f for f in fields if _split_unit(f)[0] == stem and _split_unit(f)[1]]
        if unit and same_stem:
            want = same_stem[0]
            raise ProfileError(
                f"{_where(path, table, key)}: wrong unit {UNITS[unit]!r}; this value is "
                f"`{want}` in {UNITS[_split_unit(want)[1]]}"
            )
        raise ProfileError(
            f"{_where(path, table, key)}: unknown key (allowed: {', '.join(fields)})"
        )
    for key, spec in fields.items():
        if key not in values:
            if spec.required:
                raise ProfileError(f"{_where(path, table, key)}: missing required key")
            values[key] = None
    return values, sources


def require_tables(
    path: Path | str, doc: Mapping[str, Any], required: set[str], optional: set[str]
) -> None:
    """Every table in `required` is present; no table outside required | optional is."""
    for name in doc:
        if name in required | optional and not isinstance(doc[name], dict):
            raise ProfileError(f"{path}: [{name}] must be a table ([{name}] and its keys "
                               f"below it), got {name} = {doc[name]!r}")
        if isinstance(doc[name], dict) and name not in required | optional:
            allowed = ", ".join(sorted(required | optional))
            raise ProfileError(f"{path}: [{name}]: unknown table (allowed: {allowed})")
    for name in sorted(required):
        if name not in doc:
            raise ProfileError(f"{path}: [{name}]: missing required table")
