"""Tables as people read them (issue 58 item 6): `profiles list` was 230 characters wide. A
table's free-text columns are cut to fit 100 columns (reports/tables.py _fit_text), whole in CSV
and JSON; a table wide for its numbers is left whole rather than cut to no purpose."""

from __future__ import annotations

import json

import pandas as pd

from reports.tables import WIDTH, render, unwrapped
from tests.test_cli import scape


def test_profiles_list_fits_and_csv_keeps_every_word(capsys):
    code, out, _ = scape(capsys, "profiles", "list")
    assert code == 0 and max(len(line) for line in out.splitlines()) <= WIDTH
    assert "..." in out and "cut to fit 100 columns" in out
    code, js, _ = scape(capsys, "profiles", "list", "--format", "json")
    whole = {r["name"]: r["description"] for r in json.loads(js)}
    assert any(len(d) > 60 for d in whole.values())  # the words the table cut are here


def test_numeric_tables_are_never_cut():
    wide = pd.DataFrame([{f"column_{i}": 1.5 * i for i in range(12)} | {"note": "a b " * 30}])
    text = render(wide, "table")
    assert "..." not in text and "a b " * 30 in text + " "


def fits_width(out: str) -> bool:
    """Every line within WIDTH, but a '#' line of one word too long to break (a path)."""
    return all(len(line) <= WIDTH or (line.startswith("#") and len(line.split()) <= 2)
               for line in out.splitlines())


def test_wide_tables_go_on_in_blocks_that_fit():
    """A table too wide for its numbers goes on in blocks, each led by the key columns, every
    row in every block in the same order; the header wraps at spaces and reads back whole."""
    df = pd.DataFrame([{"scheme": f"scheme-{i}", **{f"quantity_{k}_ms": 1000.0 * i + k
                                                   for k in range(14)}} for i in range(3)])
    header = "options: " + ", ".join(f"option_{k} {k}" for k in range(40))
    text = render(df, "table", header=header)
    assert fits_width(text) and unwrapped(text).splitlines()[0] == "# " + header
    blocks = [b.splitlines() for b in text.split("\n\n")]
    assert len(blocks) > 1 and "blocks of columns to fit 100, each led by scheme" in text
    names = [c for b in blocks for c in next(x for x in b if x.split()[0] == "scheme").split()]
    assert [c for c in names if c != "scheme"] == [c for c in df.columns if c != "scheme"]
    for b in blocks:
        rows = [x.split()[0] for x in b if x.split()[0].startswith("scheme-")]
        assert rows == ["scheme-0", "scheme-1", "scheme-2"]


def test_compare_and_plan_fit_100_columns(capsys):
    """Issue 58 item 6: compare's table was 145 characters wide and plan's 280, their headers
    615; now every line fits and CSV keeps one row a line."""
    for args in (("compare", "-m", "llama-7b", "-H", "commodity-100gbe", "--gpus", "64"),
                 ("plan", "-m", "llama-7b", "--tokens", "1T", "-H", "dgx-h100", "--max-gpus",
                  "256", "--top", "3")):
        code, out, err = scape(capsys, *args)
        assert code == 0, err
        assert fits_width(out) and "blocks of columns to fit 100" in out, args[0]
        code, csv, err = scape(capsys, *args, "--format", "csv")
        assert code == 0 and max(len(line) for line in csv.splitlines()) > WIDTH
