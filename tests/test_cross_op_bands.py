"""The cross-op bands `scape collective` quotes beside an op a calibrated profile did not
measure (reports/fidelity.py cross_op_bands, issue 59): the shipped file is what
bench/nccl_tests_holdout.py computes from the shipped logs now, and a call on a profile fitted
on all_reduce finds the band of such predictions on its GPU's logs, or none."""

from __future__ import annotations

import importlib.util
import json
import tempfile
from pathlib import Path

import pandas as pd
import pytest

from profiles import measured
from reports import fidelity
from tests.test_cli import scape

REPO = Path(__file__).resolve().parents[1]
A100_AR = REPO / "tests" / "fixtures" / "nccl-tests" / "a100-sxm4-40gb-all_reduce.out"
NT = ("calibrate", "nccl-tests")


def _bench():
    spec = importlib.util.spec_from_file_location(
        "nccl_tests_holdout", REPO / "bench" / "nccl_tests_holdout.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _band(**key) -> pd.Series:
    shipped = pd.read_csv(fidelity.CROSS_OP_BANDS).set_index(fidelity.CROSS_KEYS)
    return shipped.loc[tuple(key[k] for k in fidelity.CROSS_KEYS)]


def test_the_bands_start_where_the_bench_s_fits_do():
    """No band is quoted below the smallest size the bench predicts."""
    assert _bench().MIN_BYTES == fidelity.CROSS_MIN_BYTES


def test_an_op_the_logs_did_not_measure_quotes_its_band(capsys, tmp_path, monkeypatch):
    """Fitted on the A100 run's all_reduce: all_gather at 1 MiB and 1 GiB quotes the band of
    all_reduce-fitted all_gather predictions on dgx-a100's public logs (one process driving 8
    GPUs, as that run); below 64 KiB, the measured op itself, a forced protocol and another
    node count quote none."""
    monkeypatch.setenv("SCAPE_PROFILE_DIR", str(tmp_path))
    code, _, err = scape(capsys, *NT, str(A100_AR), "--out", "a100", "--no-intervals")
    assert code == 0, err
    profile = str(tmp_path / "measured" / "a100.toml")
    assert 'gpu_profile = "dgx-a100"' in Path(profile).read_text()

    def rows(*more: str) -> list[dict]:
        code, out, err = scape(capsys, "collective", "-H", profile, "--gpus", "8", "-g", "8",
                               "--format", "json", *more)
        assert code == 0, err
        return json.loads(out)

    small, mid, big = rows("--op", "all_gather", "--sizes", "32KiB,1MiB,1GiB")
    key = {"hardware": "dgx-a100", "fitted": "all_reduce", "op": "all_gather", "nodes": "1"}
    want = _band(**key, launch="one process, several GPUs", sizes="1-64MiB")
    assert mid["heldout_rows"] == want["rows"]
    assert mid["heldout_max_abs_err_pct"] == pytest.approx(want["max_abs_err_pct"])
    assert mid["heldout_median_err_pct"] == pytest.approx(want["median_err_pct"])
    assert big["heldout_rows"] == _band(**key, launch="any", sizes=">=64MiB")["rows"]
    assert small["heldout_rows"] == 0
    (own,) = rows("--op", "all_reduce", "--sizes", "1MiB")
    assert own["heldout_rows"] == 0
    (forced,) = rows("--op", "all_gather", "--sizes", "1MiB", "--proto", "ll128")
    assert forced["heldout_rows"] == 0
    code, out, err = scape(capsys, "collective", "-H", profile, "--gpus", "16", "--op",
                           "all_gather", "--sizes", "1GiB", "--format", "json")
    assert code == 0, err
    assert json.loads(out)[0]["heldout_rows"] == 0  # no public 2-node log of this GPU
    code, out, err = scape(capsys, "collective", "-H", profile, "--gpus", "8", "-g", "8",
                           "--op", "all_gather", "--sizes", "1MiB")
    assert code == 0, err
    assert "all_gather is predicted from this profile's fit on all_reduce" in " ".join(
        line.lstrip("# ") for line in out.splitlines())


def test_a_link_fit_quotes_no_cross_op_band(capsys, tmp_path, monkeypatch):
    """The bands are of NCCL's path: a profile of the link fit has none."""
    monkeypatch.setenv("SCAPE_PROFILE_DIR", str(tmp_path))
    code, _, err = scape(capsys, *NT, str(A100_AR), "--out", "link", "--model", "link")
    assert code == 0, err
    code, out, err = scape(capsys, "collective", "-H", str(tmp_path / "measured" / "link.toml"),
                           "--gpus", "8", "--op", "all_gather", "--sizes", "1MiB",
                           "--format", "json")
    assert code == 0, err
    assert json.loads(out)[0]["heldout_rows"] == 0


# the bench's fits on the shipped logs: about 40 s on 2 cores, with the slow tests
@pytest.mark.slow
def test_shipped_cross_op_bands_are_the_bench_of_this_model(capsys):
    """Regenerate: SCAPE_PROFILE_DIR=profiles python bench/nccl_tests_holdout.py --bands
    profiles/external/cross-op-bands.csv (a change to the NCCL path or the logs moves them)."""
    bench = _bench()
    with tempfile.TemporaryDirectory() as tmp:
        folder, measured.FOLDER = measured.FOLDER, Path(tmp)
        try:
            now = fidelity.cross_op_bands(pd.DataFrame(bench.cross_op_rows(Path(tmp))))
        finally:
            measured.FOLDER = folder
    capsys.readouterr()
    pd.testing.assert_frame_equal(now.reset_index(drop=True),
                                  pd.read_csv(fidelity.CROSS_OP_BANDS), check_dtype=False,
                                  atol=0.11)
