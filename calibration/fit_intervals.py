"""How sure a fit of nccl-tests rows is (issue 59 item 2): a bootstrap over the rows fitted.

`calibration/nccl_tests_fit.py` solves two constants of a profile's NCCL path (one node: the
NVLink's efficiency and the launch cost; several: the transport's efficiency and its cost per
network message) to minimize the sum of |predicted / measured - 1| over the rows. How far those
constants would move had the log held other rows of the same system is what the rows can say
of their own uncertainty: resample the rows with replacement, refit, and take the spread of the
refitted constants (Efron's percentile bootstrap, `scipy.stats.bootstrap`).

A refit per resample would price every row a few hundred times per resample. Each row's price
depends only on the two constants, and smoothly, so every row is priced once on a grid of both
(GRID points a side around the fit), interpolated FINE times finer, and a resample's refit is
the fine point its loss is lowest at: the intervals are as fine as that step, printed with
them. An interval that reaches an end of the grid is said ("at most" / "or more"), not cut
there silently.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

GRID = 11  # points a side of the two constants' grid, each row priced at each
FINE = 10  # points between two grid points, each row's price interpolated
RESAMPLES = 999  # bootstrap resamples (percentile intervals)
LEVEL = 0.95
SEED = 59  # resampling is seeded: a profile written twice from the same logs is the same
# the grid's span around the fit: the efficiency within 25% either side (inside its bounds),
# the cost per call or message from 0 to twice the fit plus PROBE_US (a cost of 0 is possible)
SPAN = 0.25


@dataclass(frozen=True)
class Interval:
    name: str  # the constant, as the profile names it ([tier] key)
    value: float  # the fit's own
    low: float
    high: float
    step: float  # the grid's step: the interval's resolution
    open_low: bool  # the interval reaches the grid's lower end: the constant may be lower
    open_high: bool
    rows: int
    unit: str = ""

    def text(self) -> str:
        f = "{:.2f}" if self.unit else "{:.3f}"  # a cost in us, or a share
        lo = ("at most " if self.open_low else "") + f.format(self.low)
        hi = f.format(self.high) + (" or more" if self.open_high else "")
        return (f"{self.name} {f.format(self.value)}{self.unit}: {LEVEL:.0%} interval {lo} to "
                f"{hi}{self.unit} (bootstrap over the {self.rows} rows fitted, {RESAMPLES} "
                f"resamples; step {self.step:.2g}{self.unit})")


def _finer(axis: np.ndarray) -> np.ndarray:
    return np.linspace(axis[0], axis[-1], (len(axis) - 1) * FINE + 1) if len(axis) > 1 else axis


def _interp(values: np.ndarray, axis: np.ndarray, fine: np.ndarray, dim: int) -> np.ndarray:
    """`values` linearly interpolated from `axis` to `fine` along dimension `dim`."""
    if len(axis) == 1:
        return values
    moved = np.moveaxis(values, dim, -1)
    pos = np.interp(fine, axis, np.arange(len(axis)))
    lo = np.minimum(pos.astype(int), len(axis) - 2)
    w = pos - lo
    out = moved[..., lo] * (1 - w) + moved[..., lo + 1] * w
    return np.moveaxis(out, -1, dim)


def _axis(value: float, lo: float, hi: float, cost: bool, probe: float) -> np.ndarray:
    if cost:
        return np.linspace(0.0, min(hi, 2 * value + probe), GRID)
    return np.linspace(max(lo, value * (1 - SPAN)), min(hi, value * (1 + SPAN)), GRID)


def bootstrap_constants(price, rows: list[dict], first: tuple[str, float, float, float],
                        second: tuple[str, float, float, float] | None, probe: float,
                        unit: str = " us") -> list[Interval]:
    """Intervals of the fitted constants. `price(a, b)`: every row's predicted seconds with
    the first constant at a and the second at b (b ignored where `second` is None: a constant
    the rows do not tell, kept at the base's); `first`, `second`: (name, fitted value, lower
    bound, upper bound)."""
    from scipy.stats import bootstrap

    measured = np.array([r["seconds"] for r in rows], dtype=float)  # s, per row
    a_axis = _axis(first[1], first[2], first[3], False, probe)
    b_axis = (_axis(second[1], second[2], second[3], True, probe) if second is not None
              else np.array([0.0]))
    # every row priced at every grid point: (rows, a points, b points), s
    priced = np.stack([np.asarray(price(a, b), dtype=float) for a in a_axis for b in b_axis],
                      axis=1).reshape(len(rows), len(a_axis), len(b_axis))
    # between the grid points each row's price is interpolated (it is smooth in both
    # constants; the loss, a sum of |errors|, is not), FINE points to a grid step
    fine_a, fine_b = _finer(a_axis), _finer(b_axis)
    priced = _interp(_interp(priced, a_axis, fine_a, 1), b_axis, fine_b, 2)
    errors = np.abs(priced / measured[:, None, None] - 1).reshape(len(rows), -1)

    def refit(idx: np.ndarray, which: int) -> np.ndarray:
        """Each resample's refitted constant (`which`: 0 the first, 1 the second): the fine
        grid's point its loss is lowest at; idx: row indices (resamples, rows)."""
        idx = np.atleast_2d(idx.astype(int))
        counts = np.stack([np.bincount(i, minlength=len(rows)) for i in idx])  # (B, rows)
        best = (counts @ errors).argmin(axis=1)  # flat index into (fine a, fine b)
        i, j = np.divmod(best, len(fine_b))
        return (fine_a[i] if which == 0 else fine_b[j]).astype(float)

    n = len(rows)
    picks = []
    for which in (0, 1) if second is not None else (0,):
        def stat(idx, axis=-1, which=which):
            return refit(idx, which)

        res = bootstrap((np.arange(n, dtype=float),), stat, vectorized=True,
                        n_resamples=RESAMPLES, confidence_level=LEVEL, method="percentile",
                        random_state=np.random.default_rng(SEED), batch=200)
        # the grid's refit of all the rows lies near, not on, the fit's own value: the
        # resamples' refits are moved by that difference, so the grid's own offset is not
        # taken for the rows' uncertainty
        shift = (first, second)[which][1] - float(refit(np.arange(n)[None, :], which)[0])
        picks.append((res.confidence_interval.low + shift,
                      res.confidence_interval.high + shift))
    out = []
    for (name, value, _, _), axis, (lo, hi), u in zip(
            (first, *([second] if second is not None else [])), (fine_a, fine_b), picks,
            ("", unit), strict=False):
        step = float(axis[1] - axis[0]) if len(axis) > 1 else 0.0
        bound_lo, bound_hi = (first if name == first[0] else second)[2:]
        # an end of the grid inside the constant's own range: the interval may go on
        out.append(Interval(name, value, float(lo), float(hi), step,
                            bool(lo <= axis[0] + 1e-12 and axis[0] > bound_lo),
                            bool(hi >= axis[-1] - 1e-12 and axis[-1] < bound_hi), n, u))
    return out
