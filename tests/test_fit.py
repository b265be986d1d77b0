"""Calibration fits (simulator/network/fit.py) and measured profiles (profiles/measured.py)."""

from __future__ import annotations

import numpy as np
import pytest

from profiles import UserError, load_hardware, load_model
from profiles import measured as measured_mod
from scape.plan import make_config
from simulator.network.fit import coefficients, fit_tier
from simulator.step.simulate import simulate_step
from simulator.step.step_config import StepConfig
from tests.conftest import renamed_measured

SIZES = [2 ** i * 16384 for i in range(9)]
TRUTH = {"all_reduce": ("ring", 1.0), "reduce_scatter": ("via_all_reduce", 1.0),
         "all_gather": ("ring", 0.9), "broadcast": ("flat", 1.0), "all_to_all": ("pairwise", 0.7)}


def synthetic(alpha: float, bw: float, noise: float = 0.0, worlds=(2, 3)) -> list[dict]:
    """What a backend with these algorithms and this link would measure."""
    rng = np.random.default_rng(0)
    rows = []
    for world in worlds:
        for op, (algo, eff) in TRUTH.items():
            for s in SIZES:
                a, c = coefficients(op, algo, world, s)
                t = alpha * a + s * c / (bw * eff)
                rows.append({"op": op, "size_bytes": s, "world": world,
                             "seconds": t * (1 + noise * rng.standard_normal())})
    return rows


def test_fit_recovers_known_latency_bandwidth_and_algorithms():
    alpha, bw = 150e-6, 12.5e6  # 150 us per hop, 100 Mbit/s
    fit = fit_tier(synthetic(alpha, bw))
    assert fit.latency_s == pytest.approx(alpha, rel=1e-6)
    assert fit.bandwidth_Bps == pytest.approx(bw, rel=1e-6)
    for op, (algo, eff) in TRUTH.items():
        if op != "all_gather":  # at P = 2 and 3, ring and hierarchical are the same schedule
            assert fit.collectives[op].algo == algo, op
        assert fit.collectives[op].efficiency == pytest.approx(eff, rel=1e-6), op
        assert fit.collectives[op].residual_max_pct < 1e-6


def test_fit_with_noise_stays_close():
    alpha, bw = 300e-6, 50e6
    fit = fit_tier(synthetic(alpha, bw, noise=0.03))
    assert fit.latency_s == pytest.approx(alpha, rel=0.15)
    assert fit.bandwidth_Bps == pytest.approx(bw, rel=0.03)
    assert fit.collectives["reduce_scatter"].algo == "via_all_reduce"
    assert fit.collectives["broadcast"].algo == "flat"
    assert fit.collectives["all_to_all"].efficiency == pytest.approx(0.7, rel=0.05)


def test_fit_refuses_nonsense():
    with pytest.raises(UserError):
        fit_tier([])
    with pytest.raises(UserError):
        fit_tier([{"op": "all_reduce", "size_bytes": 1024, "world": 2, "seconds": -1.0}])


def test_measured_profile_round_trip_drives_the_simulator(tmp_path, monkeypatch):
    monkeypatch.setattr(measured_mod, "FOLDER", tmp_path)
    fit = fit_tier(synthetic(150e-6, 12.5e6))
    network = {
        "node": {"gpus_per_node": 1, "source": "test"},
        "intra_node": {"kind": "none", "bw_GBps": 0.0, "efficiency": 1.0, "latency_us": 0.0,
                       "source": "test"},
        "nic": {"nics_per_node": 1, "bw_Gbps": fit.bandwidth_Bps * 8 / 1e9, "efficiency": 1.0,
                "latency_us": fit.latency_s * 1e6, "source": "test"},
        "fabric": {"topology": "fat-tree", "nodes_per_leaf": 250, "oversubscription": 1.0,
                   "switch_latency_us": 0.0, "source": "test"},
        "collectives": {op: {"algo": c.algo, "efficiency": c.efficiency,
                             "residual_median_pct": 0.0, "residual_max_pct": 0.0}
                        for op, c in fit.collectives.items()},
        "measured": {"network": "synthetic"},
    }
    path = measured_mod.merge("bench", dict(network), "test")
    assert measured_mod.missing_tables(path) == ["gpu", "compute", "kernels", "fwd_bwd",
                                                 "concurrency"]
    compute = {
        "gpu": {"model": "cpu", "peak_bf16_tflops": 0.1, "memory_GB": 8.0, "hbm_bw_GBps": 10.0,
                "source": "test"},
        "compute": {"mfu": 0.5, "mem_efficiency": 1.0, "interference": 0.0, "source": "test"},
        "kernels": {"optimizer_adams": {"fixed_us": 10.0, "ns_per_element": 2.0,
                                        "residual_pct": 1.0}},
        "fwd_bwd": {"total_s": 0.1},
        "concurrency": {"ranks": [1, 2, 3], "slowdown": [1.0, 1.0, 1.5]},
        "measured": {"device": "cpu"},
    }
    measured_mod.merge("bench", compute, "test")
    # a later measurement drops what it no longer says, keeps what it does not touch
    measured_mod.merge("bench", {"measured": {"device": "cpu", "gpu_profile": "x"}}, "test")
    measured_mod.merge("bench", {"measured": {"device": "cpu"}}, "test", drop=("gpu_profile",))
    hw = load_hardware(str(path))
    assert "gpu_profile" not in hw.measured
    assert hw.collectives["reduce_scatter"]["algo"] == "via_all_reduce"
    assert hw.measured["network"] == "synthetic" and hw.measured["device"] == "cpu"
    assert hw.slowdown == (1.0, 1.0, 1.5)

    def step(world, scheme="dense-adams"):
        cfg = StepConfig(model=load_model("tiny-gpt"), hardware=hw, gpus=world,
                         scheme=make_config(scheme, overlap_grad_reduce=False), micro_batch=4)
        return simulate_step(cfg.validate())

    two, three = step(2), step(3)
    # the measured slowdown of three ranks on one host scales compute by 1.5
    assert three.compute_s == pytest.approx(1.5 * two.compute_s, rel=0.01)
    with pytest.raises(UserError, match="up to 3 ranks"):
        step(4)


def test_fit_keeps_an_efficiency_per_rank_count():
    """A backend whose all-gather reaches 0.9 of the link at 2 ranks and 0.6 at 3."""
    alpha, bw = 100e-6, 25e6
    rows = synthetic(alpha, bw)
    for r in rows:
        if r["op"] == "all_gather" and r["world"] == 3:
            a, c = coefficients("all_gather", "ring", 3, r["size_bytes"])
            r["seconds"] = alpha * a + r["size_bytes"] * c / (bw * 0.6)
    fit = fit_tier(rows)
    gather = fit.collectives["all_gather"]
    assert gather.ranks == (2, 3)
    assert gather.efficiencies == pytest.approx((0.9, 0.6), rel=1e-6)
    assert gather.residual_max_pct < 1e-6


def test_fit_finds_a_fixed_cost_per_call():
    """A backend that spends 2 ms per all-to-all call at 3 ranks before moving data."""
    alpha, bw = 100e-6, 25e6
    rows = synthetic(alpha, bw)
    for r in rows:
        if r["op"] == "all_to_all" and r["world"] == 3:
            r["seconds"] += 2e-3
    fit = fit_tier(rows)
    a2a = fit.collectives["all_to_all"]
    assert a2a.overheads_s[a2a.ranks.index(3)] == pytest.approx(2e-3, rel=1e-3)
    assert a2a.overheads_s[a2a.ranks.index(2)] == pytest.approx(0.0, abs=1e-9)
    assert fit.latency_s == pytest.approx(alpha, rel=1e-3)


def test_measured_profiles_go_to_the_user_folder(tmp_path, monkeypatch):
    """calibrate writes into $SCAPE_PROFILE_DIR/measured, never into the package; -H finds it
    there after the built-in profiles; a built-in name is refused (it would hide the file)."""
    import profiles.measured as measured_mod
    from profiles import UserError, load_hardware
    from profiles.files import ROOT

    monkeypatch.setenv("SCAPE_PROFILE_DIR", str(tmp_path))
    monkeypatch.setattr(measured_mod, "FOLDER", None)
    path = measured_mod.path_of("my-cluster")
    assert path == tmp_path / "measured" / "my-cluster.toml"
    assert ROOT not in path.parents
    with pytest.raises(UserError, match="built-in measured profile has that name"):
        measured_mod.path_of("netbed-100mbit")
    assert path.parent.is_dir()  # made (and its writing tried) before any measuring
    path.write_text(renamed_measured("my-cluster"))
    assert load_hardware("measured/my-cluster").name == "my-cluster"
    assert load_hardware("measured/netbed-100mbit").path.startswith(str(ROOT))


@pytest.mark.parametrize(("rows", "match"), [
    ([{"op": "all_reduce", "size_bytes": 1024, "world": 2, "seconds": 1e-3}] * 2,
     "measured at one size only"),
    ([{"op": "all_reduce", "size_bytes": 1024, "world": 2, "seconds": float("nan")},
      {"op": "all_reduce", "size_bytes": 2048, "world": 2, "seconds": 1e-3}],
     "measured times must be positive numbers"),
    ([{"op": "all_reduce", "size_bytes": 0, "world": 2, "seconds": 1e-3},
      {"op": "all_reduce", "size_bytes": 2048, "world": 2, "seconds": 1e-3}],
     "measured sizes must be positive"),
    ([{"op": "all_reduce", "size_bytes": 1024, "world": 1, "seconds": 1e-3},
      {"op": "all_reduce", "size_bytes": 2048, "world": 1, "seconds": 1e-3}],
     "whole number of at least 2"),
])
def test_a_fit_refuses_rows_it_cannot_fit(rows, match):
    """One size cannot separate a latency from a bandwidth (it fitted 0.0% from one point);
    a damaged row is named, not a numpy traceback."""
    with pytest.raises(UserError, match=match):
        fit_tier(rows)
