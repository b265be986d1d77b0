"""validate's rounds and its compute probe (reports/validate.py)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from profiles import UserError, load_hardware
from reports import validate as v


def test_aggregate_takes_medians_over_rounds_and_recomputes_the_error():
    rows = pd.DataFrame([
        {"round": r, "scheme": s, "ranks": 2, "netbed": "rate=100mbit",
         "measured_step_s": m, "predicted_step_s": p, "error_pct": 100 * (p / m - 1)}
        for r, s, m, p in [(1, "a", 1.0, 1.1), (2, "a", 2.0, 1.9), (3, "a", 1.2, 1.3),
                           (1, "b", 0.5, 0.5), (2, "b", 0.7, 0.6), (3, "b", 0.6, 0.55)]])
    df = v.aggregate(rows)
    assert list(df["scheme"]) == ["a", "b"]
    assert list(df["measured_step_s"]) == [1.2, 0.6]
    assert list(df["predicted_step_s"]) == [1.3, 0.55]
    assert list(df["error_pct"]) == pytest.approx([100 * (1.3 / 1.2 - 1), 100 * (0.55 / 0.6 - 1)])
    assert list(df["rounds"]) == [3, 3]
    # the rounds' spread: largest over smallest measurement, minus 1
    assert list(df["measured_spread_pct"]) == pytest.approx([100.0, 100 * (0.7 / 0.5 - 1)])
    stats = v.summarize(df)
    assert stats["max_round_spread_pct"] == pytest.approx(100.0)
    assert stats["median_round_spread_pct"] == pytest.approx((100 + 40) / 2)
    one = v.aggregate(rows[rows["round"] == 1])
    assert one["measured_spread_pct"].isna().all()
    assert "median_round_spread_pct" not in v.summarize(one)


def test_probe_sets_the_predicted_forward_backward_to_the_time_measured_now():
    hw = load_hardware("measured/netbed-400mbit")
    fresh, probed = v.probe_compute(hw, "tiny-gpt", 2, 2, repeats=2)
    assert probed["probe_fwd_bwd_s"] > 0 and fresh.slowdown[1] == probed["probe_slowdown"]
    assert fresh.slowdown[0] == 1.0 and len(fresh.slowdown) == len(hw.slowdown)
    # the simulated compute of one rank is the probed one-rank forward + backward
    from profiles import load_model
    from simulator.step.compute import fwd_bwd

    times = fwd_bwd(load_model("tiny-gpt"), fresh, 2, 128)
    assert times.fwd_s + times.bwd_s == pytest.approx(probed["probe_fwd_bwd_s"], rel=1e-9)


def test_kernel_probe_prices_the_runs_kernels_as_timed_now():
    """The kinds probed are those the runs' runtime plans price and the profile holds; after
    the probe the simulator prices them from the new measurement, the others unchanged."""
    from simulator.planning.compare import parse_scheme
    from simulator.step.compute import kernel_time

    hw = load_hardware("measured/netbed-100mbit")
    kinds = v.kernel_kinds(hw, "tiny-gpt", [parse_scheme("scape:0.99")], [2])
    assert "authors_step" in kinds and "quantize" not in kinds
    assert set(kinds) <= set(hw.kernels)
    fresh, probed = v.probe_kernels(hw, ["authors_step"], repeats=1)
    assert set(probed) == {"probe_authors_step_ns_per_element"}
    new = fresh.kernels["authors_step"]
    assert new["ns_per_element"] == probed["probe_authors_step_ns_per_element"]
    n = new["sizes"][2]
    assert kernel_time("authors_step", n, fresh) == pytest.approx(new["seconds"][2], rel=1e-9)
    assert fresh.kernels["quantize"] == hw.kernels["quantize"]
    assert v.probe_kernels(hw, []) == (hw, {})


def test_gpu_runs_are_not_refused_for_host_memory():
    """gloo ranks hold the model in the host's memory and are refused beyond it; NCCL ranks
    hold it on their GPUs, which launch checks there (a review found GPU runs refused)."""
    from profiles import UserError
    from reports.validate import check_runnable
    from scape.plan import make_config

    cfg = make_config("dense-adams")
    with pytest.raises(UserError, match="GB of memory"):
        check_runnable("llama-70b", cfg, 4, 8, 3)
    check_runnable("llama-70b", cfg, 4, 8, 3, backend="nccl")


def test_a_measured_validation_is_never_overwritten(tmp_path, monkeypatch):
    """--out holding an earlier measurement is refused; without --out each repeat goes to the
    next free folder (NAME, NAME-2, ...), so no measured run is lost."""
    from cli.validate import _measurement_folder

    monkeypatch.chdir(tmp_path)
    first = _measurement_folder(None, "out/validate/prof")
    assert first == Path("out/validate/prof") and first.is_dir()
    (first / "validate.rounds.csv").write_text("scheme\n")  # a run that got that far
    second = _measurement_folder(None, "out/validate/prof")
    assert second == Path("out/validate/prof-2")
    (second / "validate.csv").write_text("scheme\n")
    assert _measurement_folder(None, "out/validate/prof") == Path("out/validate/prof-3")
    with pytest.raises(UserError, match="holds a validation measured before"):
        _measurement_folder(str(first), "out/validate/prof")
    assert _measurement_folder("fresh", "out/validate/prof") == Path("fresh")
    # an interrupted validation keeps its measured rows and runs: not overwritten either
    (Path("out/validate/prof-3") / "runs").mkdir(parents=True)
    assert _measurement_folder(None, "out/validate/prof") == Path("out/validate/prof-4")
    (Path("part") / "validate.partial.csv").parent.mkdir()
    (Path("part") / "validate.partial.csv").write_text("scheme\n")
    with pytest.raises(UserError, match=r"validate\.partial\.csv"):
        _measurement_folder("part", "out/validate/prof")
