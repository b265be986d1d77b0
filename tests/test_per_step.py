"""The stack's once-a-step work besides the update (simulator/step/per_step.py): which kernels
each stack runs, over how many elements, and where the step reports them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from profiles import load_hardware, load_model
from scape.plan import Dtypes, make_config
from simulator.step.compute import kernel_time
from simulator.step.per_step import buffer_bytes, describe, with_step_work
from simulator.step.simulate import simulate_step
from simulator.step.step_config import StepConfig

H100 = load_hardware("dgx-h100")
MODEL = load_model("llama-1.8b")
DT = Dtypes(grad_bytes=4, param_bytes=2)


def _cfg(scheme="dense-zero1", stack="megatron", hw=H100, gpus=64, model=MODEL, **more):
    return StepConfig(model, hw, gpus, make_config(scheme), dtypes=DT, stack=stack,
                      **more).validate()


def _kernels(cfg):
    (_, step), = with_step_work(cfg, cfg._plan()).steps
    return {k.name: (k.kind, k.elements, k.stage) for k in step.kernels}


def test_megatron_zeroes_its_whole_buffer_and_norms_the_shard_it_updates():
    cfg = _cfg()
    n = sum(size for size, _ in cfg.dense_tensors)
    got = _kernels(cfg)
    assert got["gradient norm (clipping)"] == ("grad_norm", pytest.approx(n / 64), "update")
    # Megatron-Core's buffer is the rank's whole gradient even under the distributed optimizer
    assert got["zero the gradient buffer"] == ("memset", pytest.approx(4 * n), "post")
    assert "clip scale" not in got
    # the norm reads the gradients before the update changes anything
    names = [k for k in got]
    assert names.index("gradient norm (clipping)") < names.index("adams update")


def test_torchtitan_scales_every_step_and_zeroes_nothing():
    cfg = _cfg("dense-zero3", stack="torchtitan")
    got = _kernels(cfg)
    n = sum(size for size, _ in cfg.dense_tensors)
    assert got["clip scale"] == ("clip_scale", pytest.approx(n / 64), "update")
    assert "zero the gradient buffer" not in got  # optimizer.zero_grad(set_to_none=True)


def test_sharded_gradients_zero_only_their_shard_and_experts_count_theirs():
    zero3 = _cfg("dense-zero3")
    n = sum(size for size, _ in zero3.dense_tensors)
    assert buffer_bytes(zero3) == pytest.approx(4 * n / 64)
    moe = _cfg("dense-zero1", model=load_model("mixtral-8x7b"), gpus=64, ep=8)
    dense, experts = sum(s for s, _ in moe.dense_tensors), sum(moe.expert_tensors)
    assert experts > 0 and buffer_bytes(moe) == pytest.approx(4 * (dense + experts))


def test_per_step_time_is_its_kernels_and_a_part_of_compute():
    cfg = _cfg()
    r = simulate_step(cfg)
    n = sum(size for size, _ in cfg.dense_tensors)
    expected = (kernel_time("grad_norm", n / 64, H100)
                + kernel_time(f"optimizer_{cfg.scheme.optimizer}", n / 64, H100)
                + kernel_time("memset", 4 * n, H100))
    assert r.per_step_s == pytest.approx(expected, rel=1e-9)
    assert 0 < r.per_step_s < r.compute_s
    without = simulate_step(cfg, step_work=False)
    # nothing overlaps these kernels here: the step grows by the added ones alone
    added = expected - kernel_time(f"optimizer_{cfg.scheme.optimizer}", n / 64, H100)
    assert r.step_time_s - without.step_time_s == pytest.approx(added, rel=1e-6)


def test_a_profile_fitted_on_whole_steps_adds_nothing():
    """vista-gh200-socket's step_fixed_ms and optimizer constant were fitted on whole steps
    (reports/external.py): they hold this work already."""
    socket = load_hardware("vista-gh200-socket")
    assert socket.compute.step_fixed_ms is not None
    cfg = _cfg(hw=socket, gpus=4)
    assert _kernels(cfg) == {k.name: (k.kind, k.elements, k.stage)
                             for k in cfg._plan().steps[0][1].kernels}
    assert "fitted fixed work" in describe(cfg)
    plain = replace(cfg, hardware=replace(socket, compute=replace(socket.compute,
                                                                  step_fixed_ms=None)))
    assert "zeroing the gradient buffer" in describe(plain)
