"""One schema for every command's results (issue 42): CSV and JSON carry the columns under their
names and units (seconds, bytes); a table may show a column in another unit only under the name
that says so (step_time_s as step_time_ms), never a value under a name of another unit.

`table_name` is that rule in one place; tests/test_schema.py runs every command in all formats
and checks each table column against it."""

from __future__ import annotations

# columns a table shows in another unit than CSV/JSON: csv name -> (table name, factor)
DISPLAY = {
    "time_s": ("time_us", 1e6),  # a collective's time, as nccl-tests prints it
    "bytes_per_gpu": ("GB_per_gpu", 1e-9),
    "run_mean_bytes_per_gpu": ("run_mean_GB_per_gpu", 1e-9),
}
# any other *_s column shown in milliseconds is *_ms
MS_SUFFIX = ("_s", "_ms")


def table_name(column: str) -> str:
    """The name a table shows `column` under when it converts its unit for reading. A nested
    key (CSV's `breakdown_median_s.comm_s`) shows by its own name under its group's line."""
    column = column.rsplit(".", 1)[-1]
    if column in DISPLAY:
        return DISPLAY[column][0]
    if column.endswith(MS_SUFFIX[0]):
        return column.removesuffix(MS_SUFFIX[0]) + MS_SUFFIX[1]
    return column


def table_value(column: str, value: float | None) -> float | None:
    """`value` of `column` in the unit its table name says; None (not known) stays None."""
    if value is None:
        return None
    if column in DISPLAY:
        return value * DISPLAY[column][1]
    if column.endswith(MS_SUFFIX[0]):
        return value * 1e3
    return value


def explained(table_column: str, columns) -> bool:
    """Whether a table column is one of `columns` (the CSV's) under its own name, or under the
    name `table_name` gives it in another unit."""
    return table_column in columns or any(table_name(c) == table_column for c in columns)


def left_out(columns, shown, header: str = "") -> list[str]:
    """The columns of `columns` (CSV's, in order) a table neither shows (under its name or its
    table name) nor names in its header."""
    shown = set(shown)
    words = set(header.translate(str.maketrans(",;():", "     ")).split())
    return [c for c in columns if c not in shown and table_name(c) not in shown
            and c not in words and c.rsplit(".", 1)[-1] not in words]


def also_line(columns, shown, header: str = "") -> str:
    """The line a table ends with naming the columns only CSV and JSON print ('' where none
    is left out): a table is a view of the one schema, and says what it does not show."""
    rest = left_out(columns, shown, header)
    # a column shown in another unit says its CSV name too (issue 58: a table's GB_per_gpu
    # is CSV's bytes_per_gpu, which a reader of both would otherwise look for in vain)
    shown = set(shown)
    renamed = [f"{DISPLAY[c][0]} is {c}" for c in columns if c in DISPLAY
               and DISPLAY[c][0] in shown]
    parts = [f"also in --format csv and json: {', '.join(rest)}"] if rest else []
    if renamed:
        parts.append(f"{', '.join(renamed)} {'there' if rest else 'in --format csv and json'}")
    return f"# {'; '.join(parts)}" if parts else ""
