"""A run's wall time with failures and checkpoints (simulator/run/goodput.py, Daly 2006)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from profiles import UserError
from simulator.run.goodput import (
    Reliability,
    checkpoint_bytes,
    daly_interval,
    run_with_failures,
    wall_time_s,
)


@pytest.mark.parametrize("write_s, mttf_s", [(5.0, 3600.0), (60.0, 3 * 3600.0),
                                             (600.0, 8 * 3600.0), (20.0, 24 * 3600.0)])
def test_dalys_interval_is_the_least_wall_time(write_s, mttf_s):
    """Daly's higher-order optimum is within 0.1% of the wall time a fine search over the
    interval finds (the expression it approximates is flat near its minimum)."""
    work, restart = 30 * 86400.0, 600.0
    taus = np.geomspace(write_s / 10, 10 * mttf_s, 20_000)
    best = min(wall_time_s(work, t, write_s, restart, mttf_s) for t in taus)
    daly = wall_time_s(work, daly_interval(write_s, mttf_s), write_s, restart, mttf_s)
    assert daly <= best * 1.001  # (the grid's best may be a hair above Daly's)
    # Young's first-order sqrt(2 delta M) is near it where writes are short
    young = math.sqrt(2 * write_s * mttf_s)
    assert daly_interval(write_s, mttf_s) == pytest.approx(young, rel=0.2)


def test_the_run_loses_more_with_more_gpus_and_slower_writes():
    rel = Reliability(5e-4, 10, 500 / 16384)
    ckpt = checkpoint_bytes(70e9)
    small = run_with_failures(30 * 86400, 1024, ckpt, rel)
    big = run_with_failures(30 * 86400, 16384, ckpt, rel)
    assert 0 < big.goodput < small.goodput < 1
    assert big.mttf_s == pytest.approx(small.mttf_s / 16, rel=1e-12)
    # interruptions: the wall time over the job's mean time to failure
    assert big.interruptions == pytest.approx(big.wall_s / big.mttf_s, rel=1e-12)
    slow = run_with_failures(30 * 86400, 16384, ckpt, Reliability(5e-4, 10, 50 / 16384))
    assert slow.checkpoint_write_s == pytest.approx(10 * big.checkpoint_write_s, rel=1e-12)
    assert slow.goodput < big.goodput and slow.interval_s > big.interval_s
    # a rarer failure costs less, and in the limit nothing
    rare = run_with_failures(30 * 86400, 16384, ckpt, Reliability(1e-9, 10, 500))
    assert rare.goodput > 0.99


def test_a_checkpoint_is_its_weights_and_optimizer_state():
    assert checkpoint_bytes(1e9) == pytest.approx(14e9)
    assert checkpoint_bytes(1e9, param_bytes=2, state_bytes=8) == pytest.approx(10e9)


@pytest.mark.parametrize("kwargs, match", [
    (dict(failures_per_gpu_day=0, restart_min=10, checkpoint_GBps=1), "above 0"),
    (dict(failures_per_gpu_day=-1e-4, restart_min=10, checkpoint_GBps=1), "above 0"),
    (dict(failures_per_gpu_day=1e-4, restart_min=-1, checkpoint_GBps=1), "0 or more"),
    (dict(failures_per_gpu_day=1e-4, restart_min=10, checkpoint_GBps=0), "above 0"),
    (dict(failures_per_gpu_day=float("nan"), restart_min=10, checkpoint_GBps=1), "a number"),
    (dict(failures_per_gpu_day="often", restart_min=10, checkpoint_GBps=1), "a number"),
])
def test_bad_reliability_figures_are_refused_with_the_rule(kwargs, match):
    with pytest.raises(UserError, match=match):
        Reliability(**kwargs)


def test_an_interval_longer_than_the_run_is_refused():
    rel = Reliability(5e-4, 10, 500)
    with pytest.raises(UserError, match="at most the run's"):
        run_with_failures(3600, 1024, 1e12, rel, interval_s=7200)
    ok = run_with_failures(3600, 1024, 1e12, rel, interval_s=1800)
    assert ok.interval_s == 1800


@pytest.mark.parametrize("mttf_h, minutes", [(24, 117), (6, 57), (0.25, 9.1)])
def test_dalys_own_examples(mttf_h, minutes):
    """Daly 2006's worked optima for a 5-minute dump (profiles/external/reliability.csv,
    daly-2006 rows): 117, 57 and 9.1 minutes at M = 24 h, 6 h and 15 min."""
    assert daly_interval(300, mttf_h * 3600) / 60 == pytest.approx(minutes, abs=0.5)


def test_the_storage_caps_what_the_gpus_write():
    rel = Reliability(5e-4, 10, 0.15, storage_GBps=2000)
    assert rel.write_GBps(1024) == pytest.approx(153.6)
    assert rel.write_GBps(16384) == 2000
    with pytest.raises(UserError, match="storage_GBps must be above 0"):
        Reliability(5e-4, 10, 0.15, storage_GBps=0)


def test_the_defaults_come_from_the_studies_and_leave_llama_3_out():
    """simulator/run/defaults.py: the median of the studies' failure rates other than Llama
    3's (whose run bench/goodput_published.py predicts), within their range."""
    from simulator.run.defaults import default_reliability, failure_range, failure_rates

    rel, (low, high) = default_reliability(), failure_range()
    assert low < rel.failures_per_gpu_day < high
    assert not [k for k in failure_rates() if "llama3" in k]
    assert rel.restart_min == pytest.approx(10.0)  # sqrt(5 x 20)
    assert rel.write_GBps(384) == pytest.approx(0.15 * 384)  # BLOOM's save
    assert rel.write_GBps(16384) == pytest.approx(2000)  # Llama 3's storage


def test_plan_rows_carry_the_run_with_failures_and_the_figures_it_used(capsys):
    import json

    from tests.test_cli import scape

    plan = ("plan", "-m", "llama-7b", "-H", "dgx-h100", "--tokens", "1e11", "--max-gpus", "64",
            "--top", "3", "--format", "json")
    code, out, err = scape(capsys, *plan)
    assert code == 0, err
    rows = json.loads(out)
    from simulator.run.defaults import default_reliability

    rel = default_reliability()
    for r in rows:
        assert r["failures_per_gpu_day"] == rel.failures_per_gpu_day
        assert 0 < r["goodput"] < 1 and r["wall_hours"] > r["hours"]
        assert r["wall_hours"] * r["goodput"] == pytest.approx(r["hours"], rel=1e-9)
        assert r["wall_cost_usd"] == pytest.approx(
            r["wall_hours"] * r["gpus"] * r["usd_per_gpu_hour"], rel=1e-9)
    # a typed figure is used: ten times the failures, more interruptions and less goodput
    code, out, err = scape(capsys, *plan, "--failures-per-gpu-day",
                           str(10 * rel.failures_per_gpu_day))
    worse = {(r["gpus"], r["scheme"], r["tp"], r["pp"]): r for r in json.loads(out)}
    for r in rows:
        w = worse[r["gpus"], r["scheme"], r["tp"], r["pp"]]
        assert w["goodput"] < r["goodput"] and w["interruptions"] > r["interruptions"]
        assert w["restart_min"] == rel.restart_min  # the rest stay the defaults
    for flag, value, rule in (("--failures-per-gpu-day", "0", "must be above 0"),
                              ("--restart-min", "-5", "must be 0 or more"),
                              ("--checkpoint-gbps", "0", "must be above 0"),
                              ("--storage-gbps", "-1", "must be above 0")):
        match = f"{flag} {rule}"  # the rule, named by the flag typed
        code, _, err = scape(capsys, *plan, flag, value)
        assert code == 2 and match in err and "Traceback" not in err, err


def test_a_typed_interval_is_used_and_one_longer_than_the_run_refused():
    """--checkpoint-every-min: the interval the user gives, never replaced by Daly's; the wall
    time is Daly's formula at it, never below the optimum's; longer than the run: refused."""
    ckpt, work = checkpoint_bytes(70e9), 30 * 86400.0
    best = run_with_failures(work, 4096, ckpt, Reliability(5e-4, 10, 0.15))
    typed = Reliability(5e-4, 10, 0.15, interval_min=120.0)
    got = run_with_failures(work, 4096, ckpt, typed)
    assert got.interval_s == pytest.approx(7200.0, rel=1e-12)
    assert got.wall_s == pytest.approx(wall_time_s(work, 7200.0, got.checkpoint_write_s, 600.0,
                                                   got.mttf_s), rel=1e-12)
    assert got.wall_s >= best.wall_s
    with pytest.raises(UserError, match=r"at most the run.s 1\.0 hours of work, got 120 minutes"):
        run_with_failures(3600.0, 4096, ckpt, typed)
    # an hour of a longer run (a planner's bound) is not the run
    assert run_with_failures(3600.0, 4096, ckpt, typed, whole_run=False).goodput == \
        pytest.approx(got.goodput, rel=1e-9)
    for bad in (0.0, -5.0, math.inf, math.nan, True):
        with pytest.raises(UserError, match="interval_min must be minutes"):
            Reliability(5e-4, 10, 0.15, interval_min=bad)


def test_an_asynchronous_save_stalls_for_the_host_copy_and_redoes_the_write_lag():
    """Staged over the host link (C / n / S), written behind the training (C / B): the stall
    is the copy; a failure redoes C / B more work (Daly's formula with R + C / B); a save that
    comes before the last write ends waits for it."""
    ckpt, work, gpus, host = checkpoint_bytes(176e9), 30 * 86400.0, 384, 31.5
    sync_rel = Reliability(5e-4, 10, 0.15)
    async_rel = Reliability(5e-4, 10, 0.15, async_save=True)
    sync = run_with_failures(work, gpus, ckpt, sync_rel)
    run = run_with_failures(work, gpus, ckpt, async_rel, host_GBps=host)
    stage = ckpt / gpus / (host * 1e9)
    assert run.save_stall_s == pytest.approx(stage, rel=1e-12)
    assert sync.save_stall_s == sync.checkpoint_write_s  # a synchronous save waits for it all
    assert run.interval_s >= run.checkpoint_write_s
    assert run.wall_s == pytest.approx(wall_time_s(work, run.interval_s, stage,
                                                   600.0 + run.checkpoint_write_s, run.mttf_s),
                                       rel=1e-12)
    assert run.goodput > sync.goodput
    # saves closer together than the write: each waits for the one before to reach storage
    tight = run_with_failures(work, gpus, ckpt, Reliability(5e-4, 10, 0.15, interval_min=0.1,
                                                            async_save=True), host_GBps=host)
    assert tight.save_stall_s == pytest.approx(stage + tight.checkpoint_write_s - 6.0,
                                               rel=1e-9)
    with pytest.raises(UserError, match="host_bw_GBps"):
        run_with_failures(work, gpus, ckpt, async_rel)


def test_simulate_prices_the_run_of_its_tokens_as_plan_prices_the_same_plan(capsys):
    """`simulate --tokens` gives plan's hours, goodput, wall hours and energy for plan's own
    top layout, with the failure options typed to both; without --tokens they are refused."""
    import json

    from tests.test_cli import scape

    run = ("--tokens", "2e11", "--failures-per-gpu-day", "2e-3", "--checkpoint-every-min", "45",
           "--async-checkpoint", "--pue", "1.3")
    code, out, err = scape(capsys, "plan", "-m", "llama-7b", "-H", "dgx-h100", "--max-gpus",
                           "16", "--schemes", "dense-adams", "--top", "1", "--format", "json",
                           *run)
    assert code == 0, err
    (top,) = json.loads(out)
    assert top["checkpoint_every_min"] == pytest.approx(45.0)
    flags = ["simulate", "-m", "llama-7b", "-H", "dgx-h100", "--gpus", str(top["gpus"]),
             "--scheme", "dense-adams", "--tp", str(top["tp"]), "--pp", str(top["pp"]),
             "--micro-batch", str(top["micro_batch"]), "--global-batch",
             str(top["micro_batch"] * top["grad_accum"] * top["dp"]),
             "--recompute", top["recompute"], "--format", "json", *run]
    if top["pp"] > 1 and top["chunks"] > 1:
        flags += ["--pp-schedule", "interleaved", "--virtual-stages", str(top["chunks"])]
    code, out, err = scape(capsys, *flags)
    assert code == 0, err
    (row,) = json.loads(out)
    assert row["step_time_s"] == pytest.approx(top["step_time_s"], rel=1e-9)
    for key in ("hours", "goodput", "wall_hours", "interruptions", "energy_MWh", "tco2e"):
        assert row[key] == pytest.approx(top[key], rel=1e-9), key
    assert row["async_checkpoint"] is True and row["pue"] == pytest.approx(1.3)
    assert row["checkpoint_stall_s"] < row["checkpoint_write_s"]  # staged, written behind
    code, _, err = scape(capsys, *flags[:-len(run)], "--pue", "1.3")
    assert code == 2 and "--pue price a run: give --tokens" in err


def test_a_profile_s_own_failure_rate_replaces_the_studies_median_never_a_typed_one(tmp_path):
    """[failures] (jean-zay-a100: BLOOM's chronicles) is the rate a run on that cluster uses
    where the user typed none; a typed --failures-per-gpu-day stands; a bad rate in a profile
    is refused when the profile loads."""
    from dataclasses import replace

    from cli.run_options import reliability_of
    from profiles import ProfileError, load_hardware
    from simulator.run.defaults import default_reliability, on_profile

    jz, h100 = load_hardware("jean-zay-a100"), load_hardware("dgx-h100")
    assert jz.failures.failures_per_gpu_day == pytest.approx(3.75e-4)
    d = default_reliability()
    assert on_profile(d, jz).failures_per_gpu_day == pytest.approx(3.75e-4)
    assert "jean-zay-a100" in on_profile(d, jz).source
    assert on_profile(d, h100) == d  # no published rate of its own: the studies' median
    assert on_profile(reliability_of(None, None, None, None, 30.0), jz) \
        .failures_per_gpu_day == pytest.approx(3.75e-4)  # only the interval typed
    typed = reliability_of(2e-3, None, None, None)
    assert on_profile(typed, jz).failures_per_gpu_day == pytest.approx(2e-3)
    assert on_profile(replace(d, rate_from_profile=False), jz) == replace(
        d, rate_from_profile=False)  # a Reliability built by hand is used as given
    text = Path(jz.path).read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace("failures_per_gpu_day = 0.000375", "failures_per_gpu_day = 0"))
    with pytest.raises(ProfileError, match="failures_per_gpu_day"):
        load_hardware(str(bad))


@pytest.mark.parametrize("args, match", [
    (("--tokens", "0"), "--tokens must be a finite positive number"),
    (("--tokens", "1e40"), "--tokens must be at most"),
    (("--tokens", "1e3"), "less than one step of 1024 sequences"),
    (("--tokens", "1T", "--failures-per-gpu-day", "1e9"), "it would never finish"),
    (("--tokens", "1T", "--checkpoint-every-min", "nan"), "--checkpoint-every-min must be"),
])
def test_simulate_refuses_a_run_it_cannot_price_in_one_line(capsys, args, match):
    from tests.test_cli import scape

    code, _, err = scape(capsys, "simulate", "-m", "llama-7b", "-H", "dgx-h100", "--gpus", "64",
                         *args)
    assert code == 2 and len(err.strip().splitlines()) == 1 and match in err, err
