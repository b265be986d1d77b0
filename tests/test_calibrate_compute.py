"""`scape calibrate compute` measurements, shrunk to run in seconds: the linear fit, a bench
for every simulator kernel kind, the real model's forward and backward, the returned tables
(valid hardware-profile tables), and ranks sharing the host."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from calibration.compute import PER_TENSOR_KINDS, calibrate_compute, measure_kernels
from calibration.fwd_bwd import measure_concurrency, measure_fwd_bwd
from calibration.kernel_benches import KERNEL_BENCH, SIZES
from calibration.timing import fit_linear
from profiles import load_model
from profiles.hardware_schema import COMPUTE_FIELDS, GPU_FIELDS
from profiles.schema import validate_table
from simulator.step.compute import forward_flops_per_token
from vocabulary.names import KERNEL_BYTES

A, B = 20e-6, 5e-9  # 20 us fixed, 5 ns per element


def test_fit_linear_exact():
    seconds = [A + B * n for n in SIZES]
    a, b, residual = fit_linear(SIZES, seconds)
    assert a == pytest.approx(A, rel=1e-9)
    assert b == pytest.approx(B, rel=1e-9)
    assert residual < 1e-6


def test_fit_linear_noisy():
    rng = np.random.default_rng(0)
    seconds = [(A + B * n) * (1 + 0.01 * rng.standard_normal()) for n in SIZES]
    a, b, residual = fit_linear(SIZES, seconds)
    assert b == pytest.approx(B, rel=0.03)
    assert a == pytest.approx(A, rel=0.2)  # A is 20% of the smallest time only
    assert residual < 4.0


def test_fit_linear_clips_negative_fixed_cost():
    sizes, seconds = [10, 20, 30], [0.5, 2.0, 3.5]  # the line crosses t = 0 at n = 20/3
    a, b, _ = fit_linear(sizes, seconds)
    assert a == 0.0
    ratios = [n / t for n, t in zip(sizes, seconds, strict=True)]
    assert b == pytest.approx(sum(ratios) / sum(r * r for r in ratios))  # relative LS fit
    assert fit_linear([8, 8], [1.0, 1.0])[:2] == (0.0, 1 / 8)  # one distinct size


def test_every_simulator_kernel_kind_has_a_bench():
    assert set(KERNEL_BYTES) <= set(KERNEL_BENCH)
    assert "flat_copy" in KERNEL_BENCH


@pytest.mark.parametrize("kind", sorted(KERNEL_BENCH))
def test_kernel_bench_runs(kind):
    run = KERNEL_BENCH[kind](4096, torch.device("cpu"))
    run()
    run()


def test_measure_kernels_fits_positive_costs():
    fits = measure_kernels((4096, 262144), repeats=3, kinds=["optimizer_adams", "select"])
    assert set(fits) == {"optimizer_adams", "select"}
    for fit in fits.values():
        assert fit["ns_per_element"] > 0 and fit["fixed_us"] >= 0
        assert len(fit["seconds"]) == 2
    assert fits["select"]["density"] == 0.01


def test_measure_fwd_bwd_tiny_gpt():
    fb = measure_fwd_bwd("tiny-gpt", 2, repeats=2)
    assert fb["fwd_s"] > 0 and fb["bwd_s"] > 0 and fb["total_s"] > 0
    seq = load_model("tiny-gpt").arch.seq_len
    assert fb["seq_len"] == seq
    assert fb["flops"] == 3 * forward_flops_per_token(load_model("tiny-gpt"), seq) * 2 * seq


def test_calibrate_compute_tables():
    out = calibrate_compute("tiny-gpt", 2, max_ranks=1, device="cpu", sizes=(4096, 8192),
                            kernel_repeats=1, fwd_bwd_repeats=1, matmul_n=128,
                            copy_elements=2**16)
    assert set(out) == {"gpu", "compute", "kernels", "fwd_bwd", "concurrency", "versions"}
    # what measured it: torch and the date on a CPU (CUDA, NCCL and the driver on a GPU)
    assert out["versions"]["torch"] == torch.__version__ and "cuda" not in out["versions"]
    # every required [gpu] key (the host link is optional: calibrate does not measure it)
    assert set(out["gpu"]) == {k for k, f in GPU_FIELDS.items() if f.required}
    # and the measured MFU, which a profile without a [roofline] table must give, and the
    # interference as a figure (not measured: 0.0), where a profile may instead give the SMs
    # a running collective holds
    assert set(out["compute"]) == {k for k, f in COMPUTE_FIELDS.items() if f.required} | {
        "mfu", "interference"}
    validate_table("calibrated", "gpu", out["gpu"], GPU_FIELDS)
    validate_table("calibrated", "compute", out["compute"], COMPUTE_FIELDS)
    assert out["gpu"]["source"].startswith("measured by scape calibrate compute")
    assert set(out["kernels"]) == set(KERNEL_BENCH)
    for kind, fit in out["kernels"].items():
        # the kernels that loop over parameter tensors also say what one more tensor costs
        per_tensor = {"tensors", "per_tensor_us"} if kind in PER_TENSOR_KINDS else set()
        assert set(fit) == {"fixed_us", "ns_per_element", "residual_pct", "sizes",
                            "seconds"} | per_tensor
    assert set(out["fwd_bwd"]) == {"model", "micro_batch", "seq_len", "fwd_s", "bwd_s",
                                   "total_s", "flops"}
    assert out["concurrency"] == {"ranks": [1], "slowdown": [1.0]}
    assert json.loads(json.dumps(out)) == out  # plain floats, ints, strings and lists


def test_measure_concurrency_two_ranks():
    slowdown, alone = measure_concurrency("tiny-gpt", 2, max_ranks=2, repeats=2)
    assert alone > 0
    assert len(slowdown) == 2
    assert slowdown[0] == 1.0
    assert slowdown[1] > 0


def test_measure_concurrency_reports_a_failing_worker():
    with pytest.raises(RuntimeError, match="worker 0 failed"):
        measure_concurrency("no-such-model", 2, max_ranks=1, repeats=1, timeout_s=60)


def test_the_profile_records_what_measured_it(tmp_path, monkeypatch, capsys):
    """`scape calibrate compute` writes the software that measured into [measured] (on a GPU
    also CUDA, NCCL, the driver and the shipped profile of the GPU: issue 15)."""
    from calibration.kernel_benches import KERNEL_BENCH
    from profiles.measured import read_toml
    from tests.test_cli import scape

    monkeypatch.setenv("SCAPE_PROFILE_DIR", str(tmp_path))
    # one kernel kind is enough to write the record (every kind: test_kernel_bench_runs)
    for kind in list(KERNEL_BENCH)[1:]:
        monkeypatch.delitem(KERNEL_BENCH, kind)
    code, _, err = scape(capsys, "calibrate", "compute", "--out", "cpu-here", "--model",
                         "tiny-gpt", "--micro-batch", "2", "--max-ranks", "1", "--backend",
                         "gloo")
    assert code == 0, err
    # the compute half alone (a profile loads once calibrate collectives adds the network)
    measured = read_toml(tmp_path / "measured" / "cpu-here.toml")["measured"]
    assert measured["compute_torch"] == torch.__version__
    assert measured["compute_model"] == "tiny-gpt" and "compute_date" in measured
