"""The Python API (costmodel: issue 58 item 5) answers what the commands answer: the same row
for the same options, the commands' defaults, and the commands' one-line refusals."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from costmodel import compare, plan, simulate
from profiles import UserError
from tests.test_cli import scape


def test_simulate_is_the_commands_json_row(capsys):
    row = simulate("llama-7b", "dgx-h100", 64, scheme="scape:0.99", pp=2, seq_len="4k")
    code, out, err = scape(capsys, "simulate", "-m", "llama-7b", "-H", "dgx-h100", "--gpus",
                           "64", "-s", "scape:0.99", "--pp", "2", "--format", "json")
    assert code == 0, err
    (cli_row,) = json.loads(out)
    assert set(row) == set(cli_row)
    for key, value in cli_row.items():
        if isinstance(value, float):
            assert row[key] == pytest.approx(value, rel=1e-12), key
        else:
            assert row[key] == value or (value is None and row[key] is None), key


def test_compare_is_the_commands_json(capsys):
    df = compare("gpt-345m", "vista-gh200", 32, schemes="dense-adams,scape:0.99")
    code, out, _ = scape(capsys, "compare", "-m", "gpt-345m", "-H", "vista-gh200", "--gpus",
                         "32", "--schemes", "dense-adams,scape:0.99", "--format", "json")
    assert code == 0
    rows = json.loads(out)
    assert list(df["scheme"]) == [r["scheme"] for r in rows]
    assert list(df["step_time_s"]) == pytest.approx([r["step_time_s"] for r in rows],
                                                     rel=1e-12)


def test_plan_is_the_commands_top(capsys):
    df = plan("llama-7b", "dgx-h100", "1T", max_gpus=16, workers=1, top=3)
    code, out, _ = scape(capsys, "plan", "-m", "llama-7b", "-H", "dgx-h100", "--tokens", "1e12",
                         "--max-gpus", "16", "--workers", "1", "--top", "3", "--format", "json")
    assert code == 0
    rows = json.loads(out)
    assert len(df) == 3 and list(df["step_time_s"]) == pytest.approx(
        [r["step_time_s"] for r in rows], rel=1e-12)
    # the bands and ranges the command adds come with the function's rows too
    banded = [c for c in rows[0] if c.startswith("heldout_step")
              or c.endswith(("_low", "_high", "_low_s", "_high_s"))]
    assert {"hours_low", "hours_high", "cost_usd_low"} <= set(banded) <= set(df.columns)
    for c in banded:
        assert [None if pd.isna(v) else v for v in df[c]] == [r[c] for r in rows], c


def test_the_docstrings_examples_run():
    """costmodel's docstring examples, line by line (a documented call that is refused is a
    broken example: issue 58)."""
    import costmodel

    lines = [line.strip()[4:] for line in costmodel.__doc__.splitlines()
             if line.strip().startswith(">>> ")]
    assert len(lines) == 4
    scope: dict = {}
    for line in lines:
        exec(line, scope)  # as documented (plan's is the slowest: ~1 s)


@pytest.mark.parametrize("call, says", [
    (lambda: simulate("llama-7b", "dgx-h100", 64, micro_batchh=2), "did you mean 'micro_batch'"),
    (lambda: plan("llama-7b", "dgx-h100", "1T", max_gpu=8), "did you mean 'max_gpus'"),
    (lambda: simulate("llama-7b", "dgx-h100", 64, tp=3), "tp"),
])
def test_bad_options_raise_the_commands_message(call, says):
    with pytest.raises(UserError, match=says):
        call()
