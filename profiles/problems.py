"""The errors of one profile file, gathered so that one `scape profiles check` names them all
(issue 42: a hand-written profile took 11 runs, one error each). Each error is one line that
names the file, the line where TOML puts the key (when the file holds it), the table and the
key; a file with one error reads as before, in one line."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path

from vocabulary.errors import ProfileError

# `[table]` or `[[table]]` (a header), and `key =` (a key of the table above it)
_HEADER = re.compile(r"^\s*\[\[?\s*([^\]\[#]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"^\s*([A-Za-z0-9_\-]+|\"[^\"]*\")\s*=")
# how a message names its place: "[table] key" or "[table]"
_NAMED = re.compile(r"\[([A-Za-z0-9_.\-]+)\]:? ?([A-Za-z0-9_]+)?")


def key_lines(text: str) -> dict[tuple[str, str], int]:
    """Where each (table, key) of a TOML text is written, 1-based; (table, "") is the table's
    header. A line scan, not a parser: enough for the flat tables a profile holds; a key it
    cannot place (in an inline table, a dotted key) has no line and is named without one."""
    out: dict[tuple[str, str], int] = {}
    table, quote = "", None
    for number, line in enumerate(text.splitlines(), start=1):
        if quote is not None:  # inside a multi-line string: no headers or keys here
            if line.count(quote) % 2:
                quote = None
            continue
        header = _HEADER.match(line)
        if header:
            table = header.group(1).replace('"', "").replace(" ", "")
            out.setdefault((table, ""), number)
            continue
        key = _KEY.match(line)
        if key:
            out.setdefault((table, key.group(1).strip('"')), number)
        for mark in ('"""', "'''"):
            if line.count(mark) % 2:
                quote = mark
                break
    return out


class Problems:
    """Errors of one file, each with where it is; `raise_any` raises them as one
    `ProfileError` (one line each). Tables whose keys had errors are `bad`: the checks across
    tables skip them, so that one mistake is said once, not again by every check reading it."""

    def __init__(self, path: Path | str):
        self.path = path
        self.found: list[tuple[int | None, str]] = []
        self.bad: set[str] = set()
        self._lines: dict[tuple[str, str], int] | None = None

    def __len__(self) -> int:
        return len(self.found)

    def line_of(self, table: str, key: str = "") -> int | None:
        if self._lines is None:  # read only once an error needs it
            self._lines = {}
            with contextlib.suppress(OSError, ValueError):
                if Path(self.path).is_file():
                    self._lines = key_lines(Path(self.path).read_text("utf-8-sig",
                                                                      errors="replace"))
        return self._lines.get((table, key)) or (self._lines.get((table, "")) if key else None)

    def add(self, message: str, table: str | None = None, key: str = "") -> None:
        """One error; `table` and `key` place it in the file (table "" is the top level)."""
        line = self.line_of(table, key) if table is not None else None
        prefix = f"{self.path}: "
        if line is not None and message.startswith(prefix):  # path:LINE:, as compilers say it
            message = f"{self.path}:{line}: {message[len(prefix):]}"
        self.found.append((line, message))
        if table:
            self.bad.add(table)

    def sound(self, *tables: str) -> bool:
        """Whether none of `tables` had an error (an absent optional table is sound)."""
        return not self.bad.intersection(tables)

    @contextlib.contextmanager
    def gather(self, *tables: str) -> Iterator[None]:
        """Run a check that raises at its first error; keep that error and go on. `tables`:
        what it read, marked bad when it fails (its message names its own place)."""
        try:
            yield
        except ProfileError as exc:
            for text in lines_of(exc):
                self.add(text, *self._place(text))
            self.bad.update(tables)

    def _place(self, message: str) -> tuple[str | None, str]:
        """The (table, key) a check's message names after the path ("[nic] nics_per_node:"),
        for its line; (None, "") where it names none or already has a line."""
        named = _NAMED.match(message[len(f"{self.path}: "):]) if message.startswith(
            f"{self.path}: ") else None
        return (named.group(1), named.group(2) or "") if named else (None, "")

    def raise_any(self) -> None:
        if not self.found:
            return
        # top to bottom as the file reads; errors with no line (a missing table) after them
        ordered = [m for _, m in sorted(self.found, key=lambda f: (f[0] is None, f[0] or 0))]
        raise combined(self.path, ordered)


def lines_of(exc: ProfileError) -> list[str]:
    """The errors one `ProfileError` holds: one, or those of a file with several."""
    return list(getattr(exc, "errors", None) or [str(exc)])


def combined(path: Path | str, errors: list[str]) -> ProfileError:
    """One `ProfileError` for `errors`: one line as it is, several under a head line that
    counts them (the CLI prints the message after `scape: error: `)."""
    if len(errors) == 1:
        exc = ProfileError(errors[0])
    else:
        exc = ProfileError(f"{path}: {len(errors)} errors, one a line:\n"
                           + "\n".join(f"  {e}" for e in errors))
    exc.errors = list(errors)
    return exc
