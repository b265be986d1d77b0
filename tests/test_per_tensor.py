"""Kernels that loop over the model's parameter tensors (the runtime's copies, the authors'
reducer): calibrated per extra tensor, priced by the model's own tensor count."""

from __future__ import annotations

from pathlib import Path

import pytest

from calibration.compute import measure_kernels
from calibration.kernel_benches import FLAT_TENSORS
from profiles import ProfileError, load_hardware
from reports.validate import runtime_plan, runtime_tensors
from scape.plan import make_config
from simulator.step.compute import kernel_time
from tests.conftest import SHIPPED_MEASURED, renamed_measured

BASE = SHIPPED_MEASURED  # flat_copy measured, no per-tensor cost
COPY = "[kernels.flat_copy]\n"


def _profile(tmp_path, keys: str) -> Path:
    path = tmp_path / "pt.toml"
    text = renamed_measured("pt")
    assert COPY in text
    path.write_text(text.replace(COPY, COPY + keys, 1))
    return path


def test_calibration_times_the_copies_at_two_tensor_counts():
    out = measure_kernels(sizes=(2**10, 2**12), repeats=3, kinds=("flat_copy", "scale"))
    assert out["flat_copy"]["tensors"] == FLAT_TENSORS
    assert out["flat_copy"]["per_tensor_us"] >= 0
    assert "per_tensor_us" not in out["scale"]  # one pass over a flat buffer


def test_each_tensor_beyond_the_benchmarks_count_costs_its_measured_time(tmp_path):
    plain = load_hardware(str(BASE))
    hw = load_hardware(str(_profile(tmp_path, "tensors = 8\nper_tensor_us = 20.0\n")))
    n = 842496
    base = kernel_time("flat_copy", n, plain)
    assert kernel_time("flat_copy", n, hw) == base  # no tensor count: the flat price
    assert kernel_time("flat_copy", n, plain, 52) == base  # no per-tensor cost measured
    assert kernel_time("flat_copy", n, hw, 52) == pytest.approx(base + 44 * 20e-6, rel=1e-12)
    assert kernel_time("flat_copy", n, hw, 4) == pytest.approx(base - 4 * 20e-6, rel=1e-12)


def test_the_runtime_copies_carry_the_models_tensor_count():
    sizes, _dense = runtime_tensors("tiny-gpt")
    for cfg in (make_config("dense-adams"), make_config("scape", sparsity=0.99)):
        kernels = runtime_plan(cfg, "tiny-gpt", 2).steps[0][1].kernels
        copies = [k for k in kernels if k.kind == "flat_copy"]
        assert [k.tensors for k in copies] == [len(sizes)] and len(sizes) > FLAT_TENSORS


def test_half_a_per_tensor_measurement_is_refused(tmp_path):
    with pytest.raises(ProfileError, match="tensors and per_tensor_us"):
        load_hardware(str(_profile(tmp_path, "per_tensor_us = 20.0\n")))


def test_the_calibrated_reducer_step_counts_the_pieces_its_slowest_owner_selects():
    """authors_step's per-tensor cost is its per-piece top-k (the benchmark selects every one
    of its 2-D tensors): priced per piece the slowest owner sparsifies, not per model tensor
    (tiny-gpt's 34 one-dimensional tensors are sent whole, and at P ranks each owner selects
    about 1/P of the 18 others)."""
    from scape.plan.scape_authors import owner_pieces

    hw = load_hardware(str(BASE))  # its authors_step calibrated
    sizes, dense = runtime_tensors("tiny-gpt")
    cfg = make_config("scape", sparsity=0.99)
    for world in (1, 2, 4):
        kernels = runtime_plan(cfg, "tiny-gpt", world, hw).steps[0][1].kernels
        (step,) = [k for k in kernels if k.kind == "authors_step"]
        # the slowest owner: the one that selects the most elements
        slowest = max(owner_pieces(sizes, dense, world, False),
                      key=lambda pcs: sum(b - a for a, b, d in pcs if not d))
        selecting = sum(1 for _, _, d in slowest if not d)
        assert step.tensors == selecting < len(sizes)
    assert step.tensors < sum(1 for d in dense if not d)  # 4 ranks: fewer than all 18
