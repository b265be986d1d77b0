"""Run-average step time under SCAPE's density warm-up (simulator/step/schedule.py)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from profiles import load_hardware, load_model
from scape.plan import make_config, scheduled_density
from simulator.network.engine import PhaseCache
from simulator.network.topology import build_topology
from simulator.step.schedule import _at_density, run_mean
from simulator.step.simulate import simulate_step
from simulator.step.step_config import StepConfig


def config(warmup: int, sparsity: float = 0.99, scheme: str = "scape-partitioned",
           **schedule) -> StepConfig:
    return StepConfig(model=load_model("gpt-345m"), hardware=load_hardware("vista-gh200"),
                      gpus=32, scheme=make_config(scheme, sparsity=sparsity,
                                                  density_warmup_steps=warmup,
                                                  **schedule)).validate()


def test_dense_steps_then_a_linear_warmup():
    """The Llama-500M runs' schedule, as their logs give it: d(S) = 1 - 0.9 (S - 2000) / 8000."""
    def d(t):
        return scheduled_density(0.1, t, 8000, 2000, "linear")

    assert d(1) == d(2000) == 1.0
    assert d(2500) == pytest.approx(0.94375)
    assert d(6500) == pytest.approx(0.49375)
    assert d(10_000) == d(50_000) == 0.1
    # the geometric shape after the same dense steps
    assert scheduled_density(0.01, 2050, 100, 2000) == pytest.approx(0.1)


def test_schedule_is_geometric_from_one_to_the_target():
    assert scheduled_density(0.01, 0, 100) == 1.0
    assert scheduled_density(0.01, 50, 100) == pytest.approx(0.1)
    assert scheduled_density(0.01, 100, 100) == scheduled_density(0.01, 10**6, 100) == 0.01
    assert scheduled_density(0.01, 3, 0) == 0.01


def test_without_warmup_the_run_mean_is_the_steady_step():
    cfg = config(0)
    mean = run_mean(cfg, 1000)
    assert mean.warmup_steps == 0
    assert mean.mean_step_s == simulate_step(cfg).step_time_s
    dense = config(500, scheme="dense-adams", sparsity=None)
    assert run_mean(dense, 1000).mean_step_s == simulate_step(dense).step_time_s


@pytest.mark.parametrize(("warmup", "steps", "schedule"), [
    (200, 300, {}), (300, 200, {}),
    (200, 300, {"density_dense_steps": 40, "density_shape": "linear"}),
    (300, 200, {"density_dense_steps": 40, "density_shape": "linear"}),
])
def test_trapezoid_matches_the_sum_over_every_step(warmup, steps, schedule):
    """The quadrature against simulating each step of the run at its own density."""
    cfg = config(warmup, **schedule)
    cache = PhaseCache(build_topology(cfg.hardware, cfg.gpus))
    per_step = [_at_density(cfg, scheduled_density(
        0.01, t, warmup, schedule.get("density_dense_steps", 0),
        schedule.get("density_shape", "geometric")), cache) for t in range(1, steps + 1)]
    mean = run_mean(cfg, steps, cache)
    exact = sum(r.step_time_s for r in per_step) / steps
    exact_bytes = sum(r.bytes_per_gpu for r in per_step) / steps
    assert mean.warmup_steps == min(warmup + schedule.get("density_dense_steps", 0), steps)
    assert mean.mean_step_s == pytest.approx(exact, rel=2e-3)
    assert mean.mean_bytes_per_gpu == pytest.approx(exact_bytes, rel=2e-3)


def test_full_run_warmup_sends_about_the_geometric_mean_density():
    """Over a run as long as the warm-up, the values sent average (1 - d) / ln(1 / d) of the
    dense bytes (21.5% at d = 0.01); the mask adds at most its bitmap, n/8 bytes against the
    dense 4n (bf16 reduce-scatter + all-gather), 1/32."""
    cfg = config(10_000)
    mean = run_mean(cfg, 10_000)
    dense = simulate_step(replace(cfg, scheme=replace(cfg.scheme, sparsity=0.0)))
    share = mean.mean_bytes_per_gpu / dense.bytes_per_gpu
    values = (1 - 0.01) / math.log(100)
    assert values < share < values + 1 / 32 + 1e-3
    assert mean.steady.step_time_s < mean.mean_step_s < dense.step_time_s


def test_run_steps_must_be_positive():
    with pytest.raises(ValueError, match="run_steps"):
        run_mean(config(10), 0)


def test_piecewise_mean_against_every_step():
    """The logged linear schedule (flat, then a line, then flat) integrated on nodes matches
    the sum over every step of a short run, and a flat schedule is the steady step."""
    from simulator.step.schedule import _at_density, piecewise_mean

    cfg = config(0, scheme="scape")
    points = [(0, 1.0), (20, 1.0), (60, 0.1)]
    got = piecewise_mean(cfg, points, 100)
    from simulator.network.engine import PhaseCache
    from simulator.network.topology import build_topology

    cache = PhaseCache(build_topology(cfg.hardware, cfg.gpus))

    def d(t):  # density of step t (0-based), the lines between the points
        return 1.0 if t < 20 else max(0.1, 1.0 - 0.9 * (t - 20) / 40)

    exact = sum(_at_density(cfg, d(t), cache).step_time_s for t in range(100)) / 100
    assert got.mean_step_s == pytest.approx(exact, rel=0.01)
    assert got.warmup_steps == 60
    flat = piecewise_mean(cfg, [(0, 0.1)], 100)
    assert flat.mean_step_s == pytest.approx(flat.steady.step_time_s)
    assert got.mean_step_s > flat.mean_step_s  # the dense start and the line cost more
