"""The held-out error bands `scape collective` shows (reports/fidelity.py): the shipped file is
what bench/fidelity_public.py computes from the shipped rows and model now, and a call finds
the band of runs like it, or none."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest

from profiles import load_hardware
from reports import fidelity
from tests.test_cli import scape

REPO = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("fidelity_public",
                                                  REPO / "bench" / "fidelity_public.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_shipped_bands_are_the_bench_of_this_model():
    """Regenerate: SCAPE_PROFILE_DIR=profiles python bench/fidelity_public.py --bands
    profiles/external/fidelity-bands.csv (a change to the model or the rows moves them)."""
    bench = _bench()
    rows = pd.read_csv(bench.DATA)
    df = bench.predict(rows)
    df["held_out"] = ~bench.calibration(df)
    per_node = {h: load_hardware(h).node.gpus_per_node for h in df["hardware"].unique()}
    now = fidelity.bands(df, per_node).reset_index(drop=True)
    shipped = pd.read_csv(fidelity.BANDS)
    pd.testing.assert_frame_equal(now, shipped, check_dtype=False)


def test_a_call_finds_the_band_of_runs_like_it(capsys, tmp_path):
    """4 x 8 H100 at 1 GiB: the 3+-node, large-size band; one process per GPU on one H100 node
    below 64 MiB: none was published (the H100 tables were run by one process for 8 GPUs);
    a copy of a shipped profile elsewhere has no published runs of its own."""
    got = fidelity.lookup("dgx-h100", 32, 8, 1, 2**30)
    band = pd.read_csv(fidelity.BANDS).set_index(["hardware", "nodes", "launch", "sizes"])
    assert got["heldout_rows"] == band.loc[("dgx-h100", "3+", "any", ">=64MiB"), "rows"]
    assert fidelity.lookup("dgx-h100", 8, 8, 1, 2**20)["heldout_rows"] == 0
    assert fidelity.lookup("dgx-h100", 8, 8, 8, 2**20)["heldout_rows"] > 0
    code, out, err = scape(capsys, "collective", "-H", "dgx-h100", "-g", "32", "--sizes",
                           "1GiB", "--format", "json")
    assert code == 0, err
    (row,) = json.loads(out)
    assert row["heldout_rows"] == got["heldout_rows"]
    assert row["heldout_max_abs_err_pct"] == pytest.approx(got["heldout_max_abs_err_pct"])
    copy = tmp_path / "dgx-h100.toml"
    copy.write_text((REPO / "profiles" / "hardware" / "dgx-h100.toml").read_text())
    code, out, err = scape(capsys, "collective", "-H", str(copy), "-g", "32", "--sizes",
                           "1GiB", "--format", "json")
    assert code == 0, err
    assert json.loads(out)[0]["heldout_rows"] == 0
