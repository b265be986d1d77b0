"""Render result tables (pandas DataFrames) as an aligned text table, CSV or JSON."""

from __future__ import annotations

import json
import math
import subprocess
import textwrap
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from profiles import UserError
from reports.schema import also_line
from vocabulary.suggest import did_you_mean
from vocabulary.units import never_zero, reads_zero

if TYPE_CHECKING:
    import pandas as pd

FORMATS = ("table", "csv", "json")


class Records:
    """Rows of a table as a list of dicts, with the little of a DataFrame `render`'s table
    reads (columns, a column's values, a selection of columns, the row count): a command
    whose table needs nothing else prints without importing pandas (0.25 s on a 2-core host,
    issue 58); `frame()` gives the DataFrame for CSV and JSON."""

    def __init__(self, rows: list[dict], columns: list[str] | None = None):
        self.rows = rows
        self.columns = list(columns) if columns is not None else list(
            dict.fromkeys(k for r in rows for k in r))

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, key):
        if isinstance(key, list):  # a selection of columns, as df[[...]]
            return Records(self.rows, key)
        return [r.get(key) for r in self.rows]

    def __setitem__(self, key: str, values) -> None:
        for r, v in zip(self.rows, values, strict=True):
            r[key] = v
        if key not in self.columns:
            self.columns.append(key)

    def frame(self):
        import pandas as pd

        return pd.DataFrame(self.rows, columns=self.columns)


def git_revision() -> str:
    """The short git revision of this code (not of the caller's directory), "+dirty" when its
    tracked files differ from that revision (the output came from code no commit holds), or
    "unknown"."""
    here = Path(__file__).parent
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=True, cwd=here).stdout.strip()
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                 capture_output=True, text=True, check=True, cwd=here).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return rev + ("+dirty" if changed.strip() else "")


OUTPUT_SUFFIXES = (".csv", ".png", ".md", ".html", ".json")


def refuse_special_files(out: Path) -> None:
    """A report folder holding a FIFO, socket or device under an output's kind of name would
    hang or swallow the write: refused before any work, in one line."""
    if not out.is_dir():
        return
    for entry in out.iterdir():
        if (entry.suffix in OUTPUT_SUFFIXES and not entry.is_dir()
                and not entry.is_file()):
            raise UserError(f"--out {out}: {entry.name} is not a regular file (a FIFO, socket "
                            "or device); remove it or write elsewhere")


def check_format(fmt: str, allowed: tuple[str, ...] = FORMATS) -> str:
    if fmt not in allowed:
        raise UserError(f"unknown format {fmt!r}{did_you_mean(fmt, allowed)}; choose one of: "
                        f"{', '.join(allowed)}")
    return fmt


def _clean(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return value


_MISSING = "-"  # a table's cell with no value (NaN, None); csv leaves it empty, json null


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _formatted(form: str, v) -> str:
    """`v` in its column's format, except that a positive quantity never reads as zero (a tiny
    model's hours, a cheap plan's cost): from 1e-9 up it gets two significant digits instead
    (below, float residue reads 0). A value that rounds to zero never reads -0: signed
    formats ("{:+.1f}": an error, a difference) show +0.0, the others 0."""
    text = form.format(v)
    if "+" not in form and isinstance(v, float | int):
        text = never_zero(text, v, least=1e-9)
    return form.format(0.0) if text.startswith("-") and reads_zero(text) else text


def visible(text: str) -> str:
    """`text` with its control characters escaped (a newline or an ESC sequence in a profile's
    description would break a table's rows or drive the terminal)."""
    if text.isprintable():
        return text
    # control characters only: a no-break or thin space from a pasted source stays as it is
    return "".join(repr(c)[1:-1] if unicodedata.category(c) == "Cc" else c for c in text)


def render(df: pd.DataFrame | Records, fmt: str, *, floatfmt: dict[str, str] | None = None,
           header: str = "", schema=None, keys: Sequence[str] | None = None) -> str:
    """The frame (or Records: plain rows, pandas loaded only for CSV and JSON) as `table`
    (aligned text, with `header` lines prefixed by '#'; a missing value reads "-"), `csv`,
    `json`. `schema`: the columns CSV and JSON print where the table shows fewer; the table
    then ends with a line naming the ones it leaves out (reports/schema.py). A table wider
    than WIDTH once its text is cut goes on in blocks, each led by the `keys` columns
    (default: the first), as pandas prints a wide frame; header lines wrap at spaces."""
    check_format(fmt)
    if fmt != "table" and isinstance(df, Records):  # CSV and JSON are pandas' own
        df = df.frame()
    if fmt == "json":
        rows = [{k: _clean(v) for k, v in row.items()} for row in df.to_dict(orient="records")]
        return json.dumps(rows, indent=2)
    if fmt == "csv":
        return df.to_csv(index=False).rstrip("\n")
    floatfmt = floatfmt or {}
    cells = {
        col: [_MISSING if _missing(v) else _formatted(floatfmt[col], v) if col in floatfmt
              else visible(str(v)) for v in df[col]]
        for col in df.columns
    }
    widths = {c: max(len(c), *(len(x) for x in cells[c])) if len(df) else len(c) for c in cells}
    cut = _fit_text(df, cells, widths)
    lines = [wrapped for line in header.splitlines() for wrapped in comment_lines(line)]
    lead = [k for k in (keys or df.columns[:1]) if k in df.columns]  # each block's first
    blocks = _blocks(list(df.columns), widths, lead)
    for n, cols in enumerate(blocks):
        if n:
            lines.append("")  # a blank line between blocks
        lines.append("  ".join(c.ljust(widths[c]) if c in cut else c.rjust(widths[c])
                               for c in cols))
        for i in range(len(df)):
            lines.append("  ".join(cells[c][i].ljust(widths[c]) if c in cut
                                   else cells[c][i].rjust(widths[c]) for c in cols))
    also = also_line(schema, df.columns, header) if schema is not None else ""
    notes = []  # the '#' lines after the table, without their '# '
    if cut:
        notes.append(f"{', '.join(cut)}: cut to fit {WIDTH} columns; whole in --format csv "
                     "and json")
    if len(blocks) > 1:
        notes.append(f"{len(blocks)} blocks of columns to fit {WIDTH}, each led by "
                     f"{', '.join(lead)}; one row a line in --format csv")
    if also:
        notes.append(also.removeprefix("# "))
    return "\n".join(lines + [w for note in notes for w in comment_lines(note)])


def comment_lines(text: str) -> list[str]:
    """A '#' line of a table's header, wrapped at spaces to WIDTH (a word longer than a line,
    a path, stays whole on its own line); continuation lines are indented."""
    return ["# " + line for line in textwrap.wrap(
        text, WIDTH - 2, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False)
        ] or ["#"]


def unwrapped(text: str) -> str:
    """`text` with each wrapped '#' line joined back into one (comment_lines' inverse): what a
    script that greps a header reads."""
    out: list[str] = []
    for line in text.splitlines():
        if line.startswith("#   ") and out and out[-1].startswith("#"):
            out[-1] += " " + line[4:]
        else:
            out.append(line)
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def _blocks(columns: list[str], widths: dict[str, int], keys: list[str]) -> list[list[str]]:
    """The columns in blocks whose lines fit WIDTH, each block led by `keys`; one block where
    the table fits, and a column wider than a block alone gets a block of its own."""
    def width(cols: list[str]) -> int:
        return sum(widths[c] for c in cols) + 2 * (len(cols) - 1)

    if width(columns) <= WIDTH:
        return [columns]
    blocks: list[list[str]] = [list(keys)]
    for col in (c for c in columns if c not in keys):
        if width([*blocks[-1], col]) > WIDTH and len(blocks[-1]) > len(keys):
            blocks.append(list(keys))
        blocks[-1].append(col)
    return blocks


WIDTH = 100  # a table's text columns are cut to keep its lines within this many characters
LEAST_TEXT = 24  # ... but none below this


def _fit_text(df: pd.DataFrame, cells: dict[str, list[str]], widths: dict[str, int]
              ) -> list[str]:
    """Cut the widest free-text columns (descriptions, notes: cells with spaces in them) until
    the table's lines fit WIDTH, none below LEAST_TEXT; a cut cell ends in "...". Numbers are
    never cut, and a table too wide for its numbers is left whole. Returns the columns cut."""
    text = [c for c in df.columns if any(" " in x for x in cells[c]) and widths[c] > LEAST_TEXT]
    least = sum(max(LEAST_TEXT, len(c)) if c in text else widths[c] for c in widths)
    if least + 2 * (len(widths) - 1) > WIDTH:
        return []  # wide for its numbers: cutting its words would lose them and not fit
    cut = []
    for col in sorted(text, key=lambda c: -widths[c]):
        over = sum(widths.values()) + 2 * (len(widths) - 1) - WIDTH
        if over <= 0:
            break
        width = max(LEAST_TEXT, widths[col] - over, len(col))
        cells[col] = [x if len(x) <= width else x[:width - 3].rstrip() + "..."
                      for x in cells[col]]
        widths[col] = max(len(col), *(len(x) for x in cells[col]))
        cut.append(col)
    return cut


def markdown(df: pd.DataFrame, floatfmt: str = "{:.3f}") -> str:
    """A GitHub-flavoured Markdown table (floats formatted, None/NaN as empty cells)."""
    def cell(v) -> str:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return ""
        text = floatfmt.format(v) if isinstance(v, float) else str(v)
        return text.replace("|", "\\|")

    lines = ["| " + " | ".join(map(str, df.columns)) + " |",
             "|" + "|".join("---" for _ in df.columns) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |"
              for row in df.itertuples(index=False)]
    return "\n".join(lines)
