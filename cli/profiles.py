"""`scape profiles list|show|check|new`."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

import typer

from cli.app import StrictTyper, app
from cli.common import Format2, Format3
from profiles import check_profile, find, names
from reports.tables import Records, check_format, render, visible

profiles_app = StrictTyper(help="List, show, check and begin hardware and model profiles.",
                           no_args_is_help=True, rich_markup_mode=None)
app.add_typer(profiles_app, name="profiles")


@profiles_app.command("list")
def profiles_list(fmt: Format3 = typer.Option("table", "--format", help="table|csv|json")):
    """The embedded profiles, then the measured ones (shipped, and the user's), with a
    one-line description each; a measured file that does not load says why."""
    check_format(fmt)
    from profiles.files import ROOT, user_dir

    rows = []
    for kind in ("hardware", "model"):
        for name in names(kind):
            _, prof = find(f"{'models' if kind == 'model' else kind}/{name}")
            rows.append({"kind": kind, "name": name, "description": prof.description})
    # the user's own (scape profiles new): found by folder/NAME, as -H hardware/NAME finds them
    for kind, folder in (("hardware", "hardware"), ("model", "models")):
        for path in sorted((user_dir() / folder).glob("*.toml")):
            rows.append({"kind": f"{kind} (yours)", "name": f"{folder}/{path.stem}",
                         "description": _described(path, kind)})
    seen = set()
    for base in (ROOT, user_dir()):
        for path in sorted((base / "measured").glob("*.toml")):
            name = f"measured/{path.stem}"
            if name in seen:  # the shipped one is found first, as -H finds it: said, not lost
                if path.resolve() != (ROOT / "measured" / path.name).resolve():
                    rows.append({"kind": "measured", "name": str(path), "description":
                                 f"HIDDEN: {name} names the shipped profile of that name; "
                                 f"use this one by its path, or rename it"})
                continue
            seen.add(name)
            rows.append({"kind": "measured", "name": name,
                         "description": _described(path, "hardware")})
    print(render(Records(rows), fmt))


def _described(path, kind: str) -> str:
    """A profile file's description, or why it does not load (one cell: the first error, and
    how many there are)."""
    from profiles import ProfileError
    from profiles.problems import lines_of

    try:
        found, prof = check_profile(path)
    except ProfileError as exc:
        errors = lines_of(exc)
        more = (f" (and {len(errors) - 1} more: scape profiles check {path})"
                if len(errors) > 1 else "")
        return f"INVALID: {errors[0]}{more}"
    if found != kind:
        return f"INVALID: a {found} profile, not a {kind} profile"
    return prof.description


@profiles_app.command("show")
def profiles_show(
    name: str = typer.Argument(..., help="a profile name (dgx-h100, llama-7b) or a TOML path"),
    fmt: Format2 = typer.Option("table", "--format", help="table|json"),
):
    """Every value of one profile, with its source; for models the computed parameter count."""
    check_format(fmt, ("table", "json"))
    kind, prof = find(name)
    data = asdict(prof)
    if kind == "model":
        data["n_params"] = prof.n_params
    if fmt == "json":
        print(json.dumps(data, indent=2))
        return
    if kind == "quality study":  # a study's entries, one line each
        print(visible(f"{kind} {prof.study}: {prof.model} on {prof.corpus}, {prof.steps} "
                      f"steps, {prof.date}") + f"\n  file: {prof.path}")
        print(render(Records(list(data["entries"])), "table"))
        return
    print(visible(f"{kind} profile {prof.name}: {prof.description}") + f"\n  file: {prof.path}")
    for key, value in data.items():
        if isinstance(value, dict):
            # a table the profile does not fill (a shipped profile's measured-only tables) is
            # left out rather than printed empty
            items = {k: v for k, v in value.items()
                     if k != "sources" and v is not None and v not in ((), [], {})}
            sources = value.get("sources") or {}
            if not items and not sources:
                continue
            print(f"[{key}]")
            for k, v in items.items():
                print(visible(f"  {k} = {v}"))
            for k, v in sources.items():
                print(visible(f"  {k}_source = {v}"))
        elif key not in ("name", "description", "path") and value is not None:
            is_count = isinstance(value, int) and not isinstance(value, bool)
            print(f"{key} = {value:,}" if is_count else visible(f"{key} = {value}"))


@profiles_app.command("check")
def profiles_check(path: str = typer.Argument(..., help="path to a profile TOML file, or "
                                              "a profile name (dgx-h100, measured/NAME)")):
    """Validate a profile file: unknown or missing keys, wrong units, out-of-range values,
    every error of the file in one run (one a line, with its line number); a valid hardware
    profile is followed by a warning for each optional table it lacks, saying what the
    simulator puts in its place."""
    # a path that exists is checked as that file; anything else as the name -H / -m take
    kind, prof = check_profile(path) if Path(path).exists() or not path.strip() else find(path)
    extra = f", {prof.n_params:,} parameters" if kind == "model" else ""
    where = "" if Path(path).resolve() == Path(prof.path).resolve() else f" ({prof.path})"
    what = f"{kind} profile" if kind != "quality study" else kind
    name = prof.study if kind == "quality study" else prof.name
    print(f"ok: {path}{where} is a valid {what} ({name}{extra})")
    if kind == "hardware":
        from profiles.datasheet import datasheet_warnings
        from simulator.step.fallbacks import absent_tables

        for line in datasheet_warnings(prof) + absent_tables(prof):
            print(visible(f"scape: warning: {line}"), file=sys.stderr)


@profiles_app.command("new")
def profiles_new(
    name: str = typer.Argument(..., help="the new profile's name (the file is NAME.toml)"),
    like: str = typer.Option(..., "--like", help="the profile to copy: dgx-h100, llama-7b, ..."),
    force: bool = typer.Option(False, "--force", help="overwrite NAME.toml where it exists"),
):
    """Begin a profile of your own: a copy of --like with each key's meaning, unit, bounds and
    source as comments, written into the user's profile folder (hardware/NAME.toml or
    models/NAME.toml under $SCAPE_PROFILE_DIR, else ~/.local/share/scape-costmodel/profiles),
    where -H hardware/NAME and -m models/NAME find it."""
    from profiles.template import write_new

    kind, path = write_new(like, name, force)
    use = f"-H hardware/{name}" if kind == "hardware" else f"-m models/{name}"
    print(f"wrote {path}: a {kind} profile begun as a copy of {like}; edit it, check it with "
          f"`scape profiles check {path}`, use it as {use}")
