"""Which rows of a validation were fitted and which were predicted (issue 40), and their
figures on separate lines: a row the fit used, or one that follows from fitted rows, says how
well the fit reproduces its inputs, not how well the model predicts; only held-out rows say
that, so theirs is the headline figure. Every validation's table and files carry a `role`
column with one of ROLES.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

# fitted: an input of a fit; in-sample: not an input, but the fitted rows of the same runs
# determine it (a step that is the sum of a fitted computation and communication); held-out:
# nothing was fitted on it or on its runs
ROLES = ("fitted", "in-sample", "held-out")
LABELS = {"fitted": "fitted (the fit's own inputs)",
          "in-sample": "in sample (follow from fitted rows)",
          "held-out": "held out (nothing fitted on them)"}


def figures(errors: pd.Series) -> dict:
    """n, median and max |error| and the signed median, in % (NaN where there are no rows)."""
    import pandas as pd  # here: `scape validate --help` declares its options without it

    err = pd.Series(errors, dtype=float)
    return {"rows": len(err), "median_abs_error_pct": float(err.abs().median()),
            "max_abs_error_pct": float(err.abs().max()),
            "median_error_pct": float(err.median())}


def by_role(df: pd.DataFrame, error: str = "error_pct", role: str = "role") -> dict:
    """figures() of each role, held-out first; roles without rows are left out."""
    order = ["held-out", "in-sample", "fitted"]
    return {r: figures(df.loc[df[role] == r, error]) for r in order if (df[role] == r).any()}


def line(label: str, errors: pd.Series) -> str:
    f = figures(errors)
    if not f["rows"]:
        return f"{label}: none"
    return (f"{label}: {f['rows']} rows, median |error| {f['median_abs_error_pct']:.1f}%, max "
            f"{f['max_abs_error_pct']:.1f}%, median {f['median_error_pct']:+.1f}%")


def role_lines(df: pd.DataFrame, error: str = "error_pct", role: str = "role",
               why_none: str | None = None) -> list[str]:
    """One line per role: held out first (the headline), then in sample (the fitted rows and
    those that follow from them, together), each with n, median |error|, max |error| and the
    signed median; `why_none`: said when no row is in sample (nothing was fitted on steps)."""
    held = df.loc[df[role] == "held-out", error]
    inside = df.loc[df[role].isin(("fitted", "in-sample")), error]
    lines = [line(LABELS["held-out"], held)]
    if len(inside):
        lines.append(line("in sample (fitted, or following from fitted rows)", inside))
    else:
        lines.append("in sample: none" + (f" ({why_none})" if why_none else ""))
    return lines
