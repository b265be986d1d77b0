"""`scape profiles new --like PROFILE NAME`: a copy of a shipped profile to edit, with each
key's meaning, unit, bounds and source as comments (issue 42: bringing one's own profile took
11 runs of `profiles check`). Written into the user's profile folder, where `-H hardware/NAME`
and `-m models/NAME` find it (profiles/loader.py looks there after the shipped folders)."""

from __future__ import annotations

import re
import textwrap
import tomllib
from pathlib import Path
from typing import Any

from profiles.files import ROOT, inside_shipped, read_toml, user_dir
from profiles.hardware import TABLES as HARDWARE_TABLES
from profiles.hardware_schema import TOP_FIELDS as HARDWARE_TOP
from profiles.loader import KINDS, find
from profiles.meanings import KEYS, TABLES
from profiles.measured import _value as toml_value
from profiles.measured import dumps
from profiles.models import MODEL_TABLES
from profiles.models import TOP_FIELDS as MODEL_TOP
from profiles.schema import UNITS, Field, _split_unit
from vocabulary.atomic import write_text_atomic
from vocabulary.errors import UserError

WIDTH = 96  # comment lines wrap here


def target(kind: str, name: str) -> Path:
    """Where `profiles new` writes NAME of `kind`: <user folder>/hardware/NAME.toml or
    <user folder>/models/NAME.toml. A name the shipped profiles hold is refused: they are
    found first, and would hide the new file."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name) or name.endswith(".toml"):
        raise UserError(f"profiles new: NAME must be a plain profile name like my-h100 (letters, "
                        f"digits, '.', '-', '_'; no .toml), got {name!r}")
    folder = KINDS[kind].folder
    if (ROOT / folder / f"{name}.toml").exists():
        raise UserError(f"profiles new {name}: a shipped {kind} profile has that name and would "
                        f"be found before yours; choose another (e.g. my-{name})")
    path = user_dir() / folder / f"{name}.toml"
    if inside_shipped(path):
        raise UserError(f"profiles new {name}: the profile folder {user_dir()} is inside the "
                        f"shipped profiles ({ROOT}); point SCAPE_PROFILE_DIR elsewhere")
    return path


def write_new(like: str, name: str, force: bool = False) -> tuple[str, Path]:
    """Write the commented copy of profile `like` as NAME; returns (kind, path). An existing
    file is refused unless `force`."""
    kind, prof = find(like)
    if kind not in KINDS:
        raise UserError(f"profiles new --like {like}: a {kind}, not a hardware or model profile")
    path = target(kind, name)
    if path.exists() and not force:
        raise UserError(f"{path}: exists; give --force to overwrite it, or choose another NAME")
    text = render(kind, Path(prof.path), name, path)
    KINDS[kind].parse(path, tomllib.loads(text))  # what is written checks: a bug is said here
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, text)
    return kind, path


def render(kind: str, source: Path, name: str, path: Path) -> str:
    """The template's text: `source`'s tables and values, NAME as its name, and comments;
    `path`: where it is written."""
    doc = read_toml(source)
    like = source.stem
    tables, top_fields = ((HARDWARE_TABLES, HARDWARE_TOP) if kind == "hardware" else
                          ({t: (None, f) for t, f in MODEL_TABLES.items()}, MODEL_TOP))
    units = ", ".join(f"_{u} {w}" for u, w in UNITS.items())
    lines = [
        f"# {name}: a {kind} profile, begun by `scape profiles new --like {like} {name}`.",
        *_wrapped(f"Every value below is {like}'s ({source}); replace each with your own and "
                  "say where it comes from in the table's `source` (or a key's own "
                  "`KEY_source = \"...\"` line). Above each key: what it means, its unit and "
                  f"bounds, and where {like}'s value comes from. Units are in the key names: "
                  f"{units}. A table marked optional may be deleted: `scape profiles check` "
                  "then says what stands in for it.", "# "),
        f"# Check it with: scape profiles check {path}",
        "",
    ]
    for key, spec in top_fields.items():
        value = name if key == "name" else doc.get(key)
        if key == "description" and isinstance(value, str):
            value = f"{name}: begun as a copy of {like} ({value})"
        if value is not None:
            lines += _key_lines("", key, spec, value, None)
    for table, data in doc.items():
        if not isinstance(data, dict):
            continue
        fields = tables.get(table, (None, {}))[1]
        lines += ["", *_wrapped(f"[{table}]: {TABLES.get(table, 'as ' + like + ' has it')}",
                                "# ")]
        if any(isinstance(v, dict) for v in data.values()) or not fields:
            lines.append(dumps({table: data}).rstrip("\n"))  # measured tables: as they are
            continue
        lines.append(f"[{table}]")
        for key, value in data.items():
            if key in fields and key != "source":
                lines += _key_lines(table, key, fields[key], value, data.get(f"{key}_source"))
        if "source" in data:
            lines += _wrapped(f"{like}'s source: {data['source']}", "#   ")
            lines.append(f"source = {toml_value(_copied(like))}")
    return "\n".join(lines) + "\n"


def _copied(like: str) -> str:
    return (f"copied from {like} (its sources are the comments above): replace with where "
            "your figures come from")


def _key_lines(table: str, key: str, spec: Field, value: Any, source: str | None) -> list[str]:
    """The comment lines above one key, and the key."""
    meaning = KEYS.get((table, key), "")
    about = "; ".join(p for p in (meaning, _unit(key), _bounds(spec)) if p)
    out = _wrapped(about, "# ") if about else []
    if source:
        out += _wrapped(f"source: {source}", "#   ")
    return [*out, f"{key} = {toml_value(value)}"]


def _unit(key: str) -> str:
    unit = _split_unit(key)[1]
    return f"in {UNITS[unit]}" if unit else ""


def _bounds(spec: Field) -> str:
    """A Field's type and bounds as a reader writes them: 'a number > 0 and <= 1'."""
    kind = {float: "a number", int: "an integer", bool: "true or false", str: "text"}.get(
        spec.kind, spec.kind.__name__)
    if spec.choices:
        kind = "one of " + ", ".join(spec.choices)
    limits = [f"{op} {v:g}" for op, v in ((">", spec.gt), (">=", spec.ge), ("<=", spec.le))
              if v is not None]
    text = kind + (" " + " and ".join(limits) if limits else "")
    return text + ("" if spec.required else " (optional)")


def _wrapped(text: str, prefix: str) -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=prefix, subsequent_indent=prefix,
                         break_on_hyphens=False) or [prefix.rstrip()]
