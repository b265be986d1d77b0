"""The tables `scape calibrate` writes into a measured hardware profile ([measured],
[collectives], [kernels], [sharing], the concurrency and overlap curves), read and checked
against what the simulator can price (vocabulary/names.py)."""

from __future__ import annotations

import itertools
import math
from typing import Any

from profiles.hardware_schema import (
    COLLECTIVE_FIELDS,
    KERNEL_FIELDS,
    MEASURED_FIELDS,
    MEASURED_KEYS,
)
from profiles.schema import Field, validate_table
from vocabulary.errors import ProfileError
from vocabulary.names import ALGORITHM_NAMES, KERNEL_BYTES, OTHER_KINDS, software_algorithms


def parse_measured(path, doc: dict[str, Any]) -> dict[str, Any]:
    """The calibrated tables of a measured profile, validated."""
    # what the simulator can price (the names its registries are keyed by)
    known = {"collectives": list(ALGORITHM_NAMES), "kernels": [*KERNEL_BYTES, *OTHER_KINDS]}
    for table, keys in MEASURED_KEYS.items():
        data = doc.get(table, {})
        if not isinstance(data, dict):
            raise ProfileError(f"{path}: [{table}]: expected a table, got {data!r}")
        for key in data:
            if key not in keys and key.removesuffix("_source") not in keys:
                raise ProfileError(f"{path}: [{table}] {key}: unknown key (allowed: "
                                   f"{', '.join(keys)}, each with its _source)")
    out: dict[str, Any] = {"measured": measured_provenance(path, doc)}
    for key, fields in (("collectives", COLLECTIVE_FIELDS), ("kernels", KERNEL_FIELDS)):
        out[key] = {}
        for name, table in doc.get(key, {}).items():
            if name not in known[key]:
                raise ProfileError(f"{path}: [{key}.{name}]: unknown {key[:-1]} (known: "
                                   f"{', '.join(known[key])})")
            if not isinstance(table, dict):  # `broadcast = 5` where [collectives.broadcast] goes
                raise ProfileError(f"{path}: [{key}] {name}: expected a table "
                                   f"([{key}.{name}]), got {table!r}")
            if key == "collectives" and isinstance(table, dict) and table.get(
                    "algo") not in software_algorithms(name):
                raise ProfileError(f"{path}: [{key}.{name}] algo: must be one a backend runs "
                                   f"{name} with ({', '.join(software_algorithms(name))}), got "
                                   f"{table.get('algo')!r}")
            curve = {k: table[k] for k in ("sizes", "seconds") if k in table}
            per_rank = {k: table[k] for k in ("ranks", "efficiencies", "overheads_us")
                        if k in table}
            scalars = {k: v for k, v in table.items() if k not in curve and k not in per_rank}
            out[key][name] = {**validate_table(path, f"{key}.{name}", scalars, fields)[0],
                              **_curve(path, f"{key}.{name}", curve)}
            pair = [out[key][name].get(k) for k in ("tensors", "per_tensor_us")]
            if key == "kernels" and (pair[0] is None) != (pair[1] is None):
                raise ProfileError(f"{path}: [{key}.{name}] tensors and per_tensor_us: give "
                                   "both (the benchmark's tensor count and the cost of one "
                                   "more) or neither")
            if per_rank:
                ranks, effs = per_rank.get("ranks"), per_rank.get("efficiencies")
                if not (isinstance(ranks, list) and isinstance(effs, list)
                        and len(ranks) == len(effs) and len(set(ranks)) == len(ranks)
                        and all(is_count(r) and r >= 2 for r in ranks)
                        and all(is_number(e) and LEAST <= e <= 1 for e in effs)):
                    raise ProfileError(f"{path}: [{key}.{name}] ranks/efficiencies: two lists "
                                       "of equal length, distinct rank counts >= 2, "
                                       f"efficiencies in [{LEAST:g}, 1]")
                out[key][name]["by_ranks"] = dict(zip(ranks, map(float, effs), strict=True))
                over = per_rank.get("overheads_us", [0.0] * len(ranks))
                if not (isinstance(over, list) and len(over) == len(ranks)
                        and all(is_number(o) and 0 <= o <= MAX_US for o in over)):
                    raise ProfileError(f"{path}: [{key}.{name}] overheads_us: one number in "
                                       f"[0, {MAX_US:g}] per rank count")
                out[key][name]["overhead_s"] = {r: o * 1e-6 for r, o in zip(ranks, over,
                                                                             strict=True)}
    slow = doc.get("concurrency", {}).get("slowdown", [])
    if not isinstance(slow, list) or not all(is_number(x) and LEAST <= x <= 1e6 for x in slow):
        raise ProfileError(f"{path}: [concurrency] slowdown: must be a list of numbers in "
                           f"[{LEAST:g}, 1e6] (1: ranks ran as fast as one alone)")
    out["slowdown"] = tuple(float(x) for x in slow)
    overlap = doc.get("overlap", {})
    ranks, values = overlap.get("ranks", []), overlap.get("async_interference", [])
    if not (isinstance(ranks, list) and isinstance(values, list) and len(ranks) == len(values)
            and all(is_count(r) and r >= 2 for r in ranks)
            and all(is_number(v) and v >= 0 for v in values)):
        raise ProfileError(f"{path}: [overlap] ranks/async_interference: two lists of equal "
                           "length, rank counts >= 2, values >= 0")
    out["async_interference"] = {int(r): float(v) for r, v in zip(ranks, values, strict=True)}
    out["sharing"] = _sharing(path, doc.get("sharing", {}), known["kernels"])
    return out


def measured_provenance(path, doc: dict[str, Any]) -> dict[str, Any]:
    """A measured profile's [measured] table, checked (MEASURED_FIELDS, and a `kernel_<kind>`
    note per kernel kind `calibrate compute --kinds` timed): only the keys the file has, so
    that a reader's default stands for a key it lacks. Also what `calibrate refit` reads of a
    profile that has its network tables only."""
    fields = {**MEASURED_FIELDS, **{f"kernel_{k}": Field(str, required=False)
                                    for k in (*KERNEL_BYTES, *OTHER_KINDS)}}
    given = doc.get("measured", {})
    values = validate_table(path, "measured", given, fields)[0]
    return {k: v for k, v in values.items() if k in given}


def _sharing(path, table: dict, kinds: list[str]) -> dict[str, dict[int, float]]:
    """[sharing]: ranks = [r, ...] and extra_us = {kind = [us per call at each r]}."""
    if not table:
        return {}
    ranks, extra = table.get("ranks"), table.get("extra_us")
    if not (isinstance(ranks, list) and ranks and len(set(ranks)) == len(ranks)
            and all(is_count(r) and r >= 2 for r in ranks)):
        raise ProfileError(f"{path}: [sharing] ranks: a list of distinct rank counts >= 2")
    if not isinstance(extra, dict):
        raise ProfileError(f"{path}: [sharing] extra_us: a table of kernel kinds")
    out = {}
    for kind, values in extra.items():
        if kind not in kinds:
            raise ProfileError(f"{path}: [sharing.extra_us] {kind}: unknown kernel (known: "
                               f"{', '.join(kinds)})")
        if not (isinstance(values, list) and len(values) == len(ranks)
                and all(is_number(v) and v >= 0 for v in values)):
            raise ProfileError(f"{path}: [sharing.extra_us] {kind}: one number >= 0 (us) per "
                               "rank count")
        out[kind] = {int(r): v * 1e-6 for r, v in zip(ranks, values, strict=True)}
    return out


# the floor of a measured rate or share, as the scalar fields' `least` (profiles/schema.py),
# and the longest one measured call may take (a per-call cost of seconds is a typo of units)
LEAST = 1e-6


MAX_US = 1e7


def is_number(x) -> bool:
    """A finite int or float (TOML booleans are not numbers here)."""
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def is_count(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _curve(path, table: str, curve: dict) -> dict:
    """A measured curve: `sizes` (increasing) and `seconds`, positive and of equal length."""
    if not curve:
        return {}
    sizes, seconds = curve.get("sizes"), curve.get("seconds")
    ok = (isinstance(sizes, list) and isinstance(seconds, list) and len(sizes) == len(seconds)
          and len(sizes) >= 2 and all(is_number(x) and x > 0 for x in sizes)
          and all(is_number(x) and LEAST * 1e-6 <= x <= MAX_US * 1e-6 for x in seconds)
          and all(a < b for a, b in itertools.pairwise(sizes)))
    if not ok:
        raise ProfileError(f"{path}: [{table}] sizes/seconds: must be two lists of equal "
                           "length, sizes positive and increasing, seconds in "
                           f"[{LEAST * 1e-6:g}, {MAX_US * 1e-6:g}]")
    return {"sizes": tuple(sizes), "seconds": tuple(seconds)}
