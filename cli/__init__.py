"""The `scape` command line: parse, call a library function, print. No logic lives here.

One module per command group (DESIGN.md: past ~500 lines cli.py becomes a `cli/` package);
importing them registers their commands on `app`, in the order `scape --help` lists them.
`main` (the `scape` entry point) imports only the module of the command asked for (issue 58:
a short answer in a fraction of a second); `from cli import app` gets every command."""

from __future__ import annotations

import importlib
import sys

# the order below is the order of `scape --help`
MODULES = ("profiles", "collective", "simulate", "compare", "plan", "report", "train",
           "calibrate", "validate")
# a command (or group) -> the module that registers it
COMMANDS = {"profiles": "profiles", "collective": "collective", "simulate": "simulate",
            "compare": "compare", "plan": "plan", "report": "report", "reproduce": "report",
            "train": "train", "netbed": "train", "calibrate": "calibrate",
            "validate": "validate"}
__all__ = ["app", "main"]

# the submodule cli.app, imported here so that its name is taken back from the package: `cli.app`
# (`from cli import app`) is the Typer app with every command, made on first use (__getattr__)
importlib.import_module("cli.app")
del globals()["app"]


def _load(modules) -> object:
    for name in modules:
        importlib.import_module(f"cli.{name}")
    typer_app = sys.modules["cli.app"].app
    if modules == MODULES:
        globals()["app"] = typer_app
    return typer_app


def main() -> None:
    """`scape ARGS`: the command's own module only where ARGS name one (`scape --version`
    loads none); every module for `scape`, `scape --help` and anything unknown, so that help
    and did-you-mean see every command."""
    args = sys.argv[1:]
    first = next((a for a in args if not a.startswith("-")), None)
    if first is None and args and all(a == "--version" for a in args):
        modules: tuple[str, ...] = ()
    elif first in COMMANDS:
        modules = (COMMANDS[first],)
    else:
        modules = MODULES
    _load(modules)()


def __getattr__(name: str):
    if name == "app":  # `from cli import app` (tests, notebooks): every command
        return _load(MODULES)
    raise AttributeError(f"module 'cli' has no attribute {name!r}")
