"""Tables as people read them (issue 58 item 6): `profiles list` was 230 characters wide. A
table's free-text columns are cut to fit 100 columns (reports/tables.py _fit_text), whole in CSV
and JSON; a table wide for its numbers is left whole rather than cut to no purpose."""

from __future__ import annotations

import json

import pandas as pd

from reports.tables import WIDTH, render
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
