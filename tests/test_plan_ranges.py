"""Every answer with its range, its MFU and its headroom (issue 61 item 4): simulate, compare
and plan carry step_time_low_s / _high_s (plan also hours and cost) from the held-out band of
steps like them, none where the step is unvalidated; plan's mfu column and --min-mfu filter,
and its memory_spare_GB."""

from __future__ import annotations

import json
import math

import pytest

from profiles import load_hardware, load_model
from reports.step_fidelity import band_range
from simulator.memory.peak import nccl_communicators, usable_bytes
from simulator.step.compute import forward_flops_per_token
from tests.test_cli import scape
from tests.test_table_width import fits_width

PLAN = ("plan", "-m", "llama-7b", "--tokens", "1T", "-H", "dgx-h100", "--max-gpus", "256",
        "--format", "json")


def test_a_band_of_m_percent_brackets_the_measured_value():
    """error = predicted / measured - 1 in [-m, m]: at either end of the range the error is
    exactly +m or -m."""
    low, high = band_range(10.0, 20.0)
    assert 10.0 / low - 1 == pytest.approx(0.20, rel=1e-12)
    assert 10.0 / high - 1 == pytest.approx(-0.20, rel=1e-12)
    assert band_range(10.0, None) == (None, None) and band_range(10.0, math.nan) == (None, None)


def test_simulate_and_compare_carry_the_range_only_with_a_band(capsys):
    step = ("-m", "llama-7b", "-H", "dgx-h100", "--gpus", "64", "--format", "json")
    code, out, err = scape(capsys, "simulate", *step)
    assert code == 0, err
    (row,) = json.loads(out)
    low, high = band_range(row["step_time_s"], row["heldout_step_max_abs_err_pct"])
    assert row["heldout_step_rows"] > 0
    assert row["step_time_low_s"] == pytest.approx(low, rel=1e-12)
    assert row["step_time_high_s"] == pytest.approx(high, rel=1e-12)
    assert row["step_time_low_s"] < row["step_time_s"] < row["step_time_high_s"]
    code, out, err = scape(capsys, "compare", *step, "--schemes", "dense-adams,scape:0.99")
    assert code == 0, err
    rows = {r["scheme"]: r for r in json.loads(out)}
    assert rows["dense-adams"]["step_time_low_s"] is not None
    # no published SCAPE step: no range, as its how-sure line says
    assert rows["scape:0.99"]["step_time_low_s"] is None
    assert rows["scape:0.99"]["step_time_high_s"] is None


def test_plan_rows_carry_mfu_headroom_and_ranges(capsys):
    code, out, err = scape(capsys, *PLAN)
    assert code == 0, err
    rows = json.loads(out)
    hw, model = load_hardware("dgx-h100"), load_model("llama-7b")
    peak = hw.gpu.peak_bf16_tflops * 1e12
    for r in rows:
        # the model's FLOPs of the tokens trained per second, over the GPUs' dense BF16 peak
        flops = 3 * forward_flops_per_token(model, r["seq_len"]) * r["tokens_per_s"]
        assert r["mfu"] == pytest.approx(flops / (r["gpus"] * peak), rel=1e-9)
        # the usable memory of the plan's layout: its process groups keep NCCL buffers
        comms = nccl_communicators(r["gpus"] // (r["tp"] * r["pp"]), r["tp"], r["pp"], r["cp"])
        assert r["memory_spare_GB"] == pytest.approx(
            usable_bytes(hw, comms) / 1e9 - r["memory_GB"], rel=1e-9)
        if r["heldout_step_rows"]:
            for name in ("hours", "cost_usd"):
                low, high = band_range(r[name], r["heldout_step_max_abs_err_pct"])
                assert r[f"{name}_low"] == pytest.approx(low, rel=1e-12)
                assert r[f"{name}_high"] == pytest.approx(high, rel=1e-12)
        else:
            assert r["hours_low"] is None and r["cost_usd_high"] is None
    assert any(r["heldout_step_rows"] for r in rows)


def test_min_mfu_keeps_exactly_the_plans_that_reach_it(capsys):
    """The bounded search with --min-mfu gives the top plans of every feasible plan at or
    above it (--exhaustive, filtered here)."""
    plan = (*PLAN[:-3], "16", *PLAN[-2:])  # --max-gpus 16: still 1,000s of plans, 3x faster
    assert PLAN[-4] == "--max-gpus"
    code, out, err = scape(capsys, *plan, "--exhaustive", "--top", "1000")
    assert code == 0, err
    every = json.loads(out)
    floor = sorted(r["mfu"] for r in every)[len(every) // 2]  # half the plans reach it
    want = [r for r in every if r["mfu"] >= floor][:5]
    code, out, err = scape(capsys, *plan, "--min-mfu", str(floor), "--top", "5")
    assert code == 0, err
    got = json.loads(out)
    assert all(r["mfu"] >= floor for r in got) and got[0]["min_mfu"] == floor
    key = ("gpus", "scheme", "tp", "pp", "micro_batch", "recompute")
    assert [tuple(r[k] for k in key) for r in got] == [tuple(r[k] for k in key) for r in want]


@pytest.mark.parametrize("value, match", [
    ("0", "--min-mfu is a share of the GPU's dense BF16 peak"),
    ("35", "above 0 and at most 1"), ("nan", "above 0 and at most 1"),
    ("0.99", "no plan reaches --min-mfu 0.99: of the")])
def test_min_mfu_refused_in_one_line(capsys, value, match):
    code, _, err = scape(capsys, *PLAN, "--min-mfu", value)
    assert code == 2 and len(err.strip().splitlines()) == 1 and match in err, err


def test_a_lossy_top_plan_quotes_the_projects_own_quality_evidence(capsys):
    """Not only "not measured at this scale": the footnote quotes the shipped convergence
    study's entry for the scheme (its loss gap, whether it reached dense AdamS's loss)."""
    from profiles.quality import load_quality
    from reports.tables import unwrapped
    from simulator.planning.space import scheme_of

    code, out, err = scape(capsys, "plan", "-m", "llama-7b", "--tokens", "1T", "-H",
                           "commodity-100gbe", "--max-gpus", "512", "--top", "3")
    assert code == 0, err
    assert fits_width(out)  # but a '#' line of one word too long to break (the schemes asked)
    line = next(x for x in unwrapped(out).splitlines() if "quality evidence for" in x)
    spec = line.split("quality evidence for ")[1].split(" ")[0]
    s = scheme_of(spec)
    entry = load_quality("convergence-protocol").lookup(s.scheme, s.sparsity)
    assert s.sparsity > 0 and entry is not None
    assert f"{entry.gap_pct:+.1f}%" in line and entry.variant in line
