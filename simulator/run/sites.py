"""Where a run draws its power: the named grids and PUE figures of
profiles/external/grid-intensity.csv, and the site a plan uses when the user gives none
(simulator/run/energy.py Site)."""

from __future__ import annotations

import csv
from functools import lru_cache
from pathlib import Path

from simulator.run.energy import Site
from vocabulary.errors import UserError
from vocabulary.suggest import did_you_mean

SITES_CSV = Path(__file__).resolve().parents[2] / "profiles" / "external" / "grid-intensity.csv"


@lru_cache(maxsize=1)
def _rows() -> tuple[dict, ...]:
    with SITES_CSV.open() as f:
        return tuple(csv.DictReader(line for line in f if not line.startswith("#")))


def named(kind: str) -> dict[str, dict]:
    """The file's rows of one kind (grid, pue), by name."""
    return {r["name"]: r for r in _rows() if r["kind"] == kind}


def _default(kind: str) -> dict:
    return next(r for r in named(kind).values() if r["default"] == "yes")


def grid_of(text: str | None) -> tuple[float, str]:
    """A grid's carbon intensity (kg CO2e per kWh) and its source: a number the user typed,
    a named grid, or (None) the default."""
    if text is None:
        row = _default("grid")
        return float(row["value"]), f"grid {row['name']} (the default): {row['source']}"
    try:
        return float(text), f"--grid {text} kg CO2e/kWh, as typed"
    except ValueError:
        grids = named("grid")
        if text not in grids:
            raise UserError(f"--grid {text!r}{did_you_mean(text, list(grids))}: a carbon "
                            "intensity in kg CO2e per kWh, or one of "
                            f"{', '.join(grids)}") from None
        row = grids[text]
        return float(row["value"]), f"grid {text}: {row['source']}"


@lru_cache(maxsize=32)
def site_of(pue: float | None, grid: str | None) -> Site:
    """The site of a plan: the PUE and grid typed, else the file's defaults, each with its
    source (remembered: a plan's search asks for the default site at every bound)."""
    if pue is None:
        row = _default("pue")
        pue_value = float(row["value"])
        pue_said = f"PUE {row['value']} ({row['name']}, the default): {row['source']}"
    else:
        pue_value, pue_said = pue, f"--pue {pue:g}, as typed"
    kg, grid_said = grid_of(grid)
    return Site(pue_value, kg, f"{pue_said}; {grid_said}")
