"""Strict, declarative validation of TOML tables (DESIGN section 8).

Units live in key names (`bw_GBps`, `latency_us`). A key that is unknown, missing, of the
wrong type, out of range, or written with another unit than the schema's is an error that names
the file, the table and the key.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profiles.problems import Problems
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
            raise ProfileError(f"{where}: expected a number{hint}, got {value!r}"
                               + _bare_number(key, value))
        value = float(value)
        if not math.isfinite(value):
            raise ProfileError(f"{where}: must be finite, got {value!r}")
    elif spec.kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ProfileError(f"{where}: expected an integer, got {value!r}"
                               + _bare_number(key, value))
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
        # a share written as a percentage (94 for 0.94)
        share = (f" (a fraction: {value / 100:g} for {value:g}%)"
                 if spec.le == 1 and 1 < value <= 100 else "")
        raise ProfileError(f"{where}: must be <= {spec.le:g}, got {value!r}{share}")
    if spec.choices is not None and value not in spec.choices:
        near = close_keys(str(value), list(spec.choices), limit=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise ProfileError(f"{where}: must be one of {', '.join(spec.choices)}, got "
                           f"{value!r}{hint}")
    if spec.nonempty and not str(value).strip():
        raise ProfileError(f"{where}: must not be empty")
    return value


def _bare_number(key: str, value: Any) -> str:
    """'; write key = 400' where a string holds the number and the key's own unit ("400Gbps"
    for bw_Gbps); nothing where its unit is another ("400 Gb/s" for bw_GBps is 50)."""
    number = re.match(r"\s*([-+]?(\d[\d_]*\.?\d*|\.\d+)([eE][-+]?\d+)?)",
                      value) if isinstance(value, str) else None
    if number is None:
        return ""
    rest = value[number.end():].replace(" ", "").replace("/s", "ps")
    unit = _split_unit(key)[1] or ""
    if rest in ("", unit) or (unit.endswith("flops") and rest.lower() == unit):
        return f"; write {key} = {number.group(1)}"
    return ""


def validate_table(
    path: Path | str, table: str, data: Any, fields: Mapping[str, Field],
    problems: Problems | None = None, shown: str | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Check one table against `fields`, every key of it.

    Returns (values, field_sources): values holds every declared key (None for an absent
    optional one, or one in error); field_sources holds the optional `<key>_source` strings.
    `problems`: where the errors go (the file's, profiles/problems.py); without it they are
    raised at the end, all of the table's at once. `shown`: the table's name as the file
    writes it, where another name was read as this table (a misspelt [fabrics] as [fabric]).
    """
    own = problems if problems is not None else Problems(path)
    table = shown if shown is not None else table
    values, sources = _table_values(path, table, data, fields, own)
    if problems is None:
        own.raise_any()
    return values, sources


def _table_values(path, table: str, data: Any, fields: Mapping[str, Field],
                  problems: Problems) -> tuple[dict[str, Any], dict[str, str]]:
    values: dict[str, Any] = {key: None for key in fields}
    sources: dict[str, str] = {}
    if not isinstance(data, dict):
        problems.add(f"{_where(path, '', table)}: expected a table, got {data!r}", table)
        return values, sources
    given: set[str] = set()  # keys present, or spoken for by a misspelling said once
    for key, raw in data.items():
        try:
            if key in fields:
                given.add(key)
                values[key] = _check_value(path, table, key, fields[key], raw)
            elif key.endswith("_source") and key[: -len("_source")] in fields:
                sources[key[: -len("_source")]] = _check_value(
                    path, table, key, Field(str, nonempty=True), raw)
            else:
                meant, message = _unknown(path, table, key, data, fields)
                if meant is not None and meant not in data:
                    given.add(meant)  # "missing bw_Gbps" would say this key's error again
                problems.add(message, table, key)
        except ProfileError as exc:
            problems.add(str(exc), table, key)
    for key, spec in fields.items():
        if spec.required and key not in given:
            problems.add(f"{_where(path, table, key)}: missing required key", table)
    return values, sources


def _unknown(path, table: str, key: str, data: dict, fields: Mapping[str, Field]
             ) -> tuple[str | None, str]:
    """(the declared key `key` stands for, or None; the error): a renamed key, a key in
    another unit, or a misspelling (with the closest declared keys), else an unknown key."""
    where = _where(path, table, key)
    old = key.removesuffix("_source")
    if old in RENAMED and RENAMED[old][0] in fields:
        new = RENAMED[old][0] + key[len(old):]
        both = new in data  # the new key is there too: the old one only needs deleting
        return (RENAMED[old][0], f"{where}: renamed {new} ({RENAMED[old][1]})"
                + (f"; delete this key, the table has {new}" if both else ""))
    stem, unit = _split_unit(key)
    same_stem = [f for f in fields if _split_unit(f)[0] == stem and _split_unit(f)[1]]
    if unit and same_stem:
        want = same_stem[0]
        return want, (f"{where}: wrong unit {UNITS[unit]!r}; this value is `{want}` in "
                      f"{UNITS[_split_unit(want)[1]]}")
    near = close_keys(key, [f for f in fields if f not in data])
    if near:
        return near[0], (f"{where}: unknown key; did you mean {' or '.join(near)}? (allowed: "
                         f"{', '.join(fields)})")
    return None, f"{where}: unknown key (allowed: {', '.join(fields)})"


def close_keys(got: str, known: list[str], limit: int = 2) -> list[str]:
    """The declared names closest to a misspelt `got`: the same letters in another case or
    with other separators first, then difflib's close matches (its default cutoff, as
    vocabulary/suggest.py answers a mistyped choice)."""
    def plain(text: str) -> str:
        return "".join(ch for ch in text.lower() if ch.isalnum())

    by_plain = {plain(k): k for k in known}
    if plain(got) in by_plain:
        return [by_plain[plain(got)]]
    near = difflib.get_close_matches(plain(got), list(by_plain), n=limit, cutoff=0.6)
    return [by_plain[p] for p in near]


def require_tables(
    path: Path | str, doc: Mapping[str, Any], required: set[str], optional: set[str],
    problems: Problems | None = None, fields_of: Mapping[str, Mapping[str, Field]] | None = None,
    needs: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Every table in `required` is present; no table outside required | optional is; a table
    name holds a table. Returns {table: the name the file writes it under} for the tables
    found under another name: an unknown table whose name or keys make it one that is missing
    or not a table ([fabrics], [gpu_tables] beside `gpu = [1, 2]`), said in one error and
    then read as that table, so that its keys are checked in the same pass. `fields_of`: each
    table's keys, to tell a table by what it holds; `needs`: what a missing table needs
    beyond its required keys, said with them."""
    own = problems if problems is not None else Problems(path)
    allowed = required | optional
    broken = {name for name in allowed if name in doc and not isinstance(doc[name], dict)}
    unknown = [name for name in doc if isinstance(doc[name], dict) and name not in allowed]
    wanted = broken | {name for name in allowed if name not in doc}  # a misspelling may be one
    alias: dict[str, str] = {}
    for name in unknown:
        meant = _table_meant(name, doc[name], sorted(wanted - set(alias)), fields_of or {})
        if meant is None:
            own.add(f"{path}: [{name}]: unknown table (allowed: {', '.join(sorted(allowed))})",
                    name)
            continue
        alias[meant] = name
        if meant not in broken:  # missing: said here, as a misspelling, and not again below
            own.add(f"{path}: [{name}]: unknown table; did you mean [{meant}]? (the profile "
                    f"has none; allowed: {', '.join(sorted(allowed))})", name)
    for name in sorted(broken):
        held = (f"; [{alias[name]}] holds its keys: name that table [{name}]"
                if name in alias else "")
        own.add(f"{path}: [{name}] must be a table ([{name}] and its keys below it"
                f"{_keys_of(name, fields_of)}), got {name} = {doc[name]!r}{held}", "", name)
        own.bad.add(name)
    for name in sorted(required):
        if name not in doc and name not in alias:
            more = (needs or {}).get(name)
            own.add(f"{path}: [{name}]: missing required table (its keys"
                    f"{_keys_of(name, fields_of, required_only=True)}"
                    + (f"; {more}" if more else "") + ")")
            own.bad.add(name)
    if problems is None:
        own.raise_any()
    return alias


def _keys_of(table: str, fields_of: Mapping[str, Mapping[str, Field]] | None,
             required_only: bool = False) -> str:
    """': key, key, ...' of a table, for a message that says the table is missing."""
    fields = (fields_of or {}).get(table, {})
    keys = [k for k, f in fields.items() if f.required or not required_only]
    return f": {', '.join(keys)}" if keys else ""


def _table_meant(name: str, data: dict, wanted: list[str],
                 fields_of: Mapping[str, Mapping[str, Field]]) -> str | None:
    """The table of `wanted` that the unknown table `name` is meant to be: the closest name,
    else the one whose keys it holds (most of its own keys are that table's)."""
    near = close_keys(name, wanted, limit=1)
    if near:
        return near[0]
    keys = [k for k in data if not k.endswith("_source") and k != "source"]
    best, share = None, 0.5
    for table in wanted:
        fields = fields_of.get(table, {})
        hit = sum(k in fields for k in keys) / len(keys) if keys and fields else 0.0
        if hit > share:
            best, share = table, hit
    return best
