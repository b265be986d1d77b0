"""What every report figure shares (issue 42, "figures that show the answer"): matplotlib's Agg
backend with constrained layout, speedup maps coloured on a diverging scale centred on 1.0x,
annotation text that stays readable on its cell, plain tick labels on log axes (4, 8, 16 and
0.5, 1, 2 rather than 2^2 and 6x10^0), a legend outside the data, and the few representative
GPU counts a line plot can show apart."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

from vocabulary.atomic import savefig_atomic

PAYS_CMAP = "RdBu"  # red: slower than dense AdamS, blue: faster; white at 1.0x
MAX_LINES = 5  # lines of one colour family a reader still tells apart


def plt():
    """pyplot on the Agg backend (reports run headless)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure(ncols: int = 1, nrows: int = 1, figsize=(8, 4.5), **kw):
    """A figure laid out by matplotlib's constrained layout, so titles, legends outside the
    axes and colour bars get their room without hand placement."""
    return plt().subplots(nrows, ncols, figsize=figsize, layout="constrained", squeeze=False,
                          **kw)


def save(fig, path: Path, dpi: int = 110) -> Path:
    savefig_atomic(fig, path, dpi=dpi)
    plt().close(fig)
    return path


def wrap(text: str, width: int = 110) -> str:
    """A long title broken into lines, as a figure is not wider than its text."""
    return "\n".join(textwrap.fill(line, width) for line in text.splitlines())


def legend_outside(ax, where: str = "right upper", **kw):
    """The axes' legend outside them (right of them by default), where it hides no data and
    constrained layout gives it its room."""
    handles, labels = ax.get_legend_handles_labels()
    return ax.figure.legend(handles, labels, loc=f"outside {where}", fontsize=8, **kw)


def plain(value: float, _pos=None) -> str:
    """A tick label as a reader writes the number: 16, 1,024, 0.5, 0.001."""
    if value >= 1000 and float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:g}"


def plain_formatter(digits: int | None = None):
    """A tick formatter that writes `plain` numbers (to `digits` significant digits)."""
    from matplotlib.ticker import FuncFormatter

    if digits is None:
        return FuncFormatter(plain)
    return FuncFormatter(lambda v, _pos=None: plain(float(f"{v:.{digits}g}")))


def human_params(n: float) -> str:
    """A parameter count as models are named: 345M, 1.8B."""
    return f"{n / 1e9:.2g}B" if n >= 1e9 else f"{n / 1e6:.3g}M"


def plain_log_axis(axis, ticks: Sequence[float] | None = None) -> None:
    """Plain labels on a log axis: at `ticks` when given (the data's own values), else at
    1, 2, 3, 5 x each power of ten; no minor labels, which crowd into one another."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter

    if ticks is not None:
        axis.set_major_locator(FixedLocator(list(ticks)))
    else:
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 3.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(plain))
    axis.set_minor_formatter(NullFormatter())


def gpu_axis(ax, counts: Sequence[int], rotation: int = 45) -> None:
    """A log2 GPU axis labelled with the counts themselves, not powers of two."""
    ax.set_xscale("log", base=2)
    plain_log_axis(ax.xaxis, counts)
    ax.tick_params(axis="x", which="minor", bottom=False)
    for label in ax.get_xticklabels():
        label.set_rotation(rotation)


def representative(values: Sequence, k: int = MAX_LINES) -> list:
    """At most `k` of the sorted `values`, evenly spaced through them with both ends kept
    (GPU counts are powers of two, so evenly spaced indices are evenly spaced on a log axis)."""
    values = sorted(values)
    if len(values) <= k:
        return values
    picks = {round(i * (len(values) - 1) / (k - 1)) for i in range(k)}
    return [values[i] for i in sorted(picks)]


def ordinal_colors(n: int) -> list:
    """Colours in order (light-dark through viridis, yellow left out as it fades on white):
    a reader reads a larger GPU count from a darker line without matching a legend."""
    cmap = plt().get_cmap("viridis")
    return [cmap(0.85 * (1 - i / max(n - 1, 1))) for i in range(n)]


def speedup_norm(values):
    """A diverging norm centred on 1.0x whose ends are reciprocal, so 0.5x and 2x are equally
    strong colours; it always spans 1.0x, as TwoSlopeNorm needs vmin < 1 < vmax."""
    import numpy as np
    from matplotlib.colors import TwoSlopeNorm

    finite = np.asarray(values, dtype=float)
    finite = finite[np.isfinite(finite) & (finite > 0)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (1.0, 1.0)
    span = max(hi, 1 / lo, 1.05)  # at least 5% either way, so a flat map is not saturated
    return TwoSlopeNorm(vmin=1 / span, vcenter=1.0, vmax=span)


def text_color(rgba) -> str:
    """Black on light cells, white on dark ones (relative luminance of sRGB, WCAG 2)."""

    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(c) for c in rgba[:3])
    return "black" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.18 else "white"
