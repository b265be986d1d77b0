"""The `scape` command line: parse, call a library function, print. No logic lives here.

One module per command group (DESIGN.md: past ~500 lines cli.py becomes a `cli/` package);
importing them registers their commands on `app`, in the order `scape --help` lists them."""

# the order below is the order of `scape --help`
from cli import profiles, collective, simulate, plan, report, train, calibrate, validate  # noqa: F401, I001
from cli.app import app

__all__ = ["app"]
