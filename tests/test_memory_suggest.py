"""A step one GPU cannot hold is refused with the changes that would make it fit (issue 58:
Llama 3.1 405B in Meta's layout was refused and dense-zero2, the sharding Meta ran, was never
named): simulator/memory/suggest.py."""

from __future__ import annotations

import json
import re

import pytest

from tests.test_cli import scape

META_405B = ["simulate", "-m", "llama3-405b", "-H", "dgx-h100", "--gpus", "16384", "--tp", "8",
             "--pp", "16"]
SEVEN_8K = ["simulate", "-m", "llama-7b", "-H", "dgx-h100", "--gpus", "8", "--seq-len", "8k"]


def _suggested(err: str) -> list[str]:
    assert err.count("\n") == 1 and "each of these fits" in err, err
    return re.findall(r"(-[^;()]+?) \(([0-9.]+) GB\)", err.split("first: ")[1])


def test_meta_405b_layout_names_zero2_first(capsys):
    code, _, err = scape(capsys, *META_405B)
    assert code == 2
    changes = _suggested(err)
    assert changes[0][0] == "-s dense-zero2"
    assert any(flag.startswith("--recompute") for flag, _ in changes)


@pytest.mark.parametrize("args", [SEVEN_8K])
def test_every_suggestion_fits_when_run(capsys, args):
    code, _, err = scape(capsys, *args)
    assert code == 2
    changes = _suggested(err)
    assert len(changes) >= 3
    for flags, gb in changes:
        code, out, err2 = scape(capsys, *args, *flags.split(), "--format", "json")
        assert code == 0, err2
        row = json.loads(out)[0]
        assert row["fits_memory"] and row["memory_GB"] == pytest.approx(float(gb), abs=0.051)
