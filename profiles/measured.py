"""Measured profiles: `measured/<name>.toml` in the user's profile folder
(profiles.files.user_dir), written by `scape calibrate` (DESIGN section 7); the ones this
project ships live in profiles/measured/ and are found first. A measured profile is a hardware
profile whose numbers were measured on this machine (`[nic]` and `[collectives]` by `calibrate
collectives`, `[gpu]`, `[compute]`, `[kernels]` and `[concurrency]` by `calibrate compute`), with
provenance in `[measured]`. Each command merges its tables into the file, so the two can run in
either order.
"""

from __future__ import annotations

import json
import math
import re
import tempfile
from pathlib import Path
from typing import Any

from profiles.files import ROOT, inside_shipped, read_toml, user_dir
from vocabulary.atomic import write_text_atomic
from vocabulary.errors import UserError

BUILT_IN = ROOT / "measured"
FOLDER: Path | None = None  # where calibrate writes; None: user_dir() / "measured"
NETWORK_TABLES = ("node", "intra_node", "nic", "fabric", "collectives")
COMPUTE_TABLES = ("gpu", "compute", "kernels", "fwd_bwd", "concurrency")


def folder() -> Path:
    return FOLDER if FOLDER is not None else user_dir() / "measured"


def path_of(name: str, option: str = "--out", create: bool = True) -> Path:
    """Where `calibrate --out NAME` writes. A name a built-in measured profile has is refused
    unless the user folder is that folder (SCAPE_PROFILE_DIR=profiles in a checkout): the
    built-in would be found first and hide the new measurement. `option`: the flag that gave
    the name, as the refusals say it (`calibrate refit --profile`). `create`: make the folder
    and test that it takes a file now (a new measurement); False for a profile that must
    already be there (a refit), which leaves no folder behind when it is not."""
    if (not name or "/" in name or name.startswith((".", "-")) or name != name.strip()
            or not name.isprintable()):
        raise UserError(f"{option} must be a plain profile name like netbed-100mbit, got {name!r}")
    if name.endswith(".toml"):  # it is written as NAME.toml and named NAME
        raise UserError(f"{option} {name}: give the name without .toml ({name[:-5]}); it is "
                        f"written as measured/{name[:-5]}.toml")
    if len(f"{name}.collectives.csv".encode()) > 255:  # the longest file written beside it
        raise UserError(f"{option}: a profile name of {len(name)} characters makes file names "
                        "longer than the 255 bytes a file system allows; give a shorter one")
    path = folder() / f"{name}.toml"
    if inside_shipped(path.parent):
        raise UserError(f"{option} {name}: the profile folder {path.parent} is inside the shipped "
                        f"profiles ({ROOT}); point SCAPE_PROFILE_DIR elsewhere, or at {ROOT} "
                        "itself to rewrite a shipped measured profile")
    if (ROOT / "hardware" / f"{name}.toml").exists():  # rows would not tell the two apart
        raise UserError(f"{option} {name}: a shipped hardware profile has that name; choose "
                        "another (e.g. my-" + name + ")")
    shipped = BUILT_IN / f"{name}.toml"
    if shipped.exists() and shipped.resolve() != path.resolve():
        raise UserError(f"{option} {name}: a built-in measured profile has that name ({shipped}) "
                        f"and is found before the user's; set SCAPE_PROFILE_DIR={ROOT} to "
                        "rewrite it in this checkout, or use another name")
    if not create:
        return path
    try:  # the folder it goes in, made and written now, before minutes of measuring
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path.parent):
            pass
    except OSError as exc:
        raise UserError(f"{option} {name}: cannot write into the profile folder {path.parent} "
                        f"({exc.strerror}; it is $SCAPE_PROFILE_DIR/measured when that is set)"
                        ) from None
    return path


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"cannot write {v} to TOML")
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a TOML basic string: JSON's escapes are TOML's
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def toml_key(key: str) -> str:
    """A key as TOML reads it back: bare where it may be, else quoted (a model name with a
    dot, `llama-1.8b`, would be read as a dotted key)."""
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def dumps(doc: dict[str, Any]) -> str:
    """TOML for nested dicts of scalars and lists of scalars (what profiles hold)."""
    lines: list[str] = []

    def table(prefix: str, d: dict[str, Any]) -> None:
        scalars = {k: v for k, v in d.items() if not isinstance(v, dict)}
        if prefix and scalars:
            lines.append(f"\n[{prefix}]")
        lines.extend(f"{toml_key(k)} = {_value(v)}" for k, v in scalars.items())
        for k, v in d.items():
            if isinstance(v, dict):
                table(f"{prefix}.{toml_key(k)}" if prefix else toml_key(k), v)

    table("", doc)
    return "\n".join(lines).lstrip("\n") + "\n"


def merge(name: str, tables: dict[str, Any], header: str,
          drop: tuple[str, ...] = (), drop_tables: tuple[str, ...] = ()) -> Path:
    """Write `tables` into <folder>/<name>.toml, keeping the tables other calibrate commands
    wrote, less the [measured] keys in `drop` (what a new measurement no longer says) and the
    tables in `drop_tables`; the top keys name and description are (re)set."""
    path = path_of(name)
    doc = read_toml(path) if path.exists() else {}
    for table in drop_tables:
        doc.pop(table, None)
    kept = {k: v for k, v in doc.get("measured", {}).items() if k not in drop}
    measured = {**kept, **tables.pop("measured", {})}
    doc.update(tables)
    doc["measured"] = measured
    doc["name"] = name
    parts = [doc.get("measured", {}).get(k) for k in ("network", "device")]
    doc["description"] = ("Measured on the host that ran scape calibrate: "
                          + "; ".join(p for p in parts if p))
    top = {k: doc[k] for k in ("name", "description")}
    rest = {k: v for k, v in doc.items() if k not in top}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, f"# {header}\n" + dumps({**top, **rest}))
    return path


def missing_tables(path: Path) -> list[str]:
    doc = read_toml(path)
    return [t for t in (*NETWORK_TABLES, *COMPUTE_TABLES) if t not in doc]
