"""The host's kernel launches and CUDA graphs (simulator/step/roofline.py host_launch_s): a
layer's pass takes the traced blend of its host's and its GPU's times (simulator/step/host.py),
the host's pace where it launches the pass's kernels much slower than the GPU runs them, the
GPU's where it is much faster, more than either where the two are alike; CUDA graphs remove
the wait; a step whose GPU time is far above its host's moves by a fraction of a percent."""

from __future__ import annotations

import json

import pytest

from profiles import UserError, load_hardware, load_model
from simulator.layout.shapes import layer_shapes
from simulator.step.compute import fwd_bwd
from simulator.step.roofline import host_launch_s, layer_times
from tests.test_cli import scape

H100 = load_hardware("dgx-h100")
GPT = load_model("gpt-345m")


def test_a_pass_waits_for_a_slow_host_by_its_kernel_count():
    """At a millisecond a launch the host sets the pace: the forward launches one kernel per
    GEMM, attention and elementwise kernel, the backward two per GEMM and elementwise kernel
    and one for attention, and the pass takes the blend of that and the GPU's own time, the
    wait shared between forward and backward by their launches; at no launch time the GPU's
    own times remain."""
    from simulator.step.host import blended, moe_host_trace

    s = layer_shapes(GPT, 1, 128, 1, False, 1, False, None)
    gpu = layer_times(GPT, H100, 1, 128)
    slow = layer_times(GPT, H100, 1, 128, host_s=1e-3)
    assert gpu.parts["host_wait"] == 0.0
    host_f = (len(s.gemms) + 1 + s.memory_kernels) * 1e-3
    host_b = (2 * len(s.gemms) + 1 + 2 * s.memory_kernels) * 1e-3
    g = gpu.fwd_s + gpu.bwd_s
    assert slow.fwd_s + slow.bwd_s == pytest.approx(
        blended(host_f + host_b, g, moe_host_trace().blend), rel=1e-12)
    assert slow.fwd_s + slow.bwd_s == pytest.approx(host_f + host_b, rel=1e-4)  # host-bound
    wait = slow.fwd_s + slow.bwd_s - g
    assert slow.fwd_s - gpu.fwd_s == pytest.approx(wait * host_f / (host_f + host_b), rel=1e-9)
    assert slow.parts["host_wait"] == pytest.approx(wait, rel=1e-12)


def test_the_blend_is_fitted_on_the_trace_and_predicts_the_other_run():
    """simulator/step/host.py fits n of (H^n + G^n)^(1/n) on the steady run's wide passes
    (host H = kernels x the traced time a kernel, G the GPU's busy time, against the traced
    wall): about 2.3, where max(H, G) (n = infinity) is 25% short on the pass whose host and
    GPU are alike (16 local experts: wall 33.0 ms, H 24.8, G 21.6). The other run, its host
    time a kernel from its own narrow rows, is within 3% of the blend on every wide pass."""
    from pathlib import Path

    from simulator.step.host import (
        TRACE_FILE,
        blended,
        moe_host_trace,
        per_kernel_us,
        wide_passes,
    )

    n = moe_host_trace().blend
    assert 2.0 < n < 2.7
    runs = json.loads(Path(TRACE_FILE).read_text())["runs"]
    rows = {r["config"]: r for r in runs[1]["layers"]}
    passes = wide_passes(rows, per_kernel_us(rows))
    shared = [c for c in passes if not c.startswith(("dense", "narrow"))]
    assert len(shared) == 5  # the MoE passes (and the MoE layer) both runs traced
    for c in shared:
        h, g, wall = passes[c]
        assert blended(h, g, n) == pytest.approx(wall, rel=0.03), c
    # the dense layers only this run traced: closer than max(H, G) too (-10% against -20% on
    # the narrow one, whose host and GPU are alike)
    for c in ("dense-llama70b-layer", "narrow-dense-layer"):
        h, g, wall = passes[c]
        assert abs(blended(h, g, n) / wall - 1) < 0.11
        assert abs(blended(h, g, n) / wall - 1) <= abs(max(h, g) / wall - 1)
    h, g, wall = passes["dsv3-e16"]
    assert max(h, g) < 0.8 * wall
    assert blended(3.0, 4.0, float("inf")) == 4.0 and blended(0.0, 4.0, n) == 4.0


def test_cuda_graphs_remove_the_wait_and_cuda_launches_alone_never_bind():
    """A profile's host time a kernel is the traced Megatron-Core cost scaled by its
    [compute] host_linear_us (simulator/step/host.py): it binds on small layers, and CUDA
    graphs take it away. Without that figure it is CUDA's own launch ([nccl] launch_us),
    below the GPU's own cost of a kernel, so it never holds a pass back."""
    from dataclasses import replace

    from simulator.step.host import moe_host_trace

    traced = moe_host_trace().host_us(H100.compute.host_linear_us)
    assert host_launch_s(H100, False) == pytest.approx(traced * 1e-6)
    assert 15 < traced < 40  # us: the traced host's ~52 us, scaled to a DGX H100's Xeon
    assert host_launch_s(H100, True, 20.0) == 0.0
    eager = fwd_bwd(GPT, H100, 1, 128)
    graphs = fwd_bwd(GPT, H100, 1, 128, cuda_graphs=True)
    assert eager.parts["host_wait"] > 0 and eager.fwd_s + eager.bwd_s > graphs.fwd_s + graphs.bwd_s
    assert graphs.parts["host_wait"] == 0.0
    floor = replace(H100, compute=replace(H100.compute, host_linear_us=None))
    assert host_launch_s(floor, False) == pytest.approx(H100.nccl.launch_us * 1e-6)
    default = fwd_bwd(GPT, floor, 1, 128)
    plain = fwd_bwd(GPT, floor, 1, 128, cuda_graphs=True)
    # CUDA's own launch, below the GPU's cost of a kernel, still leaves the GPU a little idle
    # (the traced blend), less than the traced Python-and-PyTorch host time a kernel does
    assert 0 < default.parts["host_wait"] < eager.parts["host_wait"]
    assert default.fwd_s + default.bwd_s > plain.fwd_s + plain.bwd_s
    # a larger layer is GPU-bound at the traced cost, but split 8 ways its host launches at
    # three quarters of the GPU's pace: a few percent of its time; at TP 1, a fraction of one
    big = fwd_bwd(load_model("llama-7b"), H100, 1, 4096, 8)
    assert 0.01 < big.parts["host_wait"] / (big.fwd_s + big.bwd_s) < 0.08
    whole = fwd_bwd(load_model("llama-7b"), H100, 1, 4096, 1)
    assert 0 < whole.parts["host_wait"] < 0.003 * (whole.fwd_s + whole.bwd_s)


def test_an_eager_moe_layer_launches_what_megatron_core_launched_in_the_trace():
    """Without CUDA graphs a MoE layer's host launches the traced Megatron-Core count over its
    rank's local experts (about 22 more kernels an expert), so more local experts hold a pass
    back longer; torchtitan's one grouped GEMM (expert_loop False) keeps the fused count, and
    the GPU's own times do not change."""
    from simulator.layout.shapes import Routing
    from simulator.step.host import moe_host_trace
    from simulator.step.roofline import _layer_times

    # a second a kernel: the host sets the pace, the GPU's own milliseconds within 1e-3 of it
    dsv3, h = load_model("deepseek-v3"), 1.0

    def times(ep, loop=True, host=h):  # one MoE layer (DeepSeek-V3's first 3 are dense)
        return _layer_times(dsv3, H100, 1, 4096, 1, False, "flash", 1, False, moe_layer=True,
                            routing=Routing(ep), host_s=host, expert_loop=loop)

    t = moe_host_trace()
    assert 20 < t.per_expert < 24 and 100 < t.fixed_shared < 150  # the trace's line
    gpu, ep32, ep8 = times(32, host=0.0), times(32), times(8)
    fused = times(32, loop=False)
    f8, b8 = t.kernels(8, True)
    s = layer_shapes(dsv3, 1, 4096, 1, False, 1, True, Routing(32))
    moe_gemms = sum(g.name.startswith(("router", "shared", "experts")) for g in s.gemms)
    fused_f = len(s.gemms) + 1 + s.memory_kernels
    assert fused.fwd_s == pytest.approx(fused_f * h, rel=1e-3)
    assert ep32.fwd_s == pytest.approx((fused_f - moe_gemms - 4 + f8) * h, rel=1e-3)
    assert ep32.bwd_s == pytest.approx((2 * fused_f - 1 - 2 * moe_gemms - 8 + b8) * h, rel=1e-3)
    # 32 local experts at EP 8 against 8 at EP 32: 24 more experts' kernels, both ways
    assert (ep8.fwd_s + ep8.bwd_s) - (ep32.fwd_s + ep32.bwd_s) == pytest.approx(
        24 * t.per_expert * h, rel=1e-3)
    assert gpu.parts["host_wait"] == 0.0 and ep32.parts["gemm"] == gpu.parts["gemm"]


def test_simulate_says_what_the_host_held_back(capsys):
    step = ("simulate", "-m", "gpt-345m", "-H", "dgx-h100", "--gpus", "8", "--seq-len", "128")

    def row(*args: str) -> dict:
        code, out, err = scape(capsys, *step, *args, "--format", "json")
        assert code == 0, err
        return json.loads(out)[0]

    plain, eager, graphs = row(), row("--host-launch-us", "20"), row("--host-launch-us", "20",
                                                                     "--cuda-graphs")
    # the profile's traced host time a kernel holds this small layer back: said unasked
    assert plain["host_wait_per_micro_batch_s"] > eager["host_wait_per_micro_batch_s"] > 0
    assert plain["host_launch_us"] > 20 and plain["cuda_graphs"] is False
    big = ("simulate", "-m", "llama-7b", "-H", "dgx-h100", "--gpus", "8", "--format", "json")
    code, out, err = scape(capsys, *big)
    assert code == 0 and "host_wait_per_micro_batch_s" not in json.loads(out)[0]
    assert eager["host_wait_per_micro_batch_s"] > 0 and eager["cuda_graphs"] is False
    assert graphs["host_wait_per_micro_batch_s"] == 0 and graphs["cuda_graphs"] is True
    assert graphs["step_time_s"] < eager["step_time_s"]
    code, out, err = scape(capsys, *step, "--host-launch-us", "20")
    assert not err
    assert code == 0 and "# host: 20 us a kernel; the layers wait" in out


@pytest.mark.parametrize("value", ["0", "-3", "inf", "nan", "20000"])
def test_a_host_launch_time_outside_its_range_is_refused(capsys, value):
    code, _out, err = scape(capsys, "simulate", "-m", "gpt-345m", "-H", "dgx-h100", "--gpus", "8",
                           "--host-launch-us", value)
    assert code != 0 and "--host-launch-us must be a time in microseconds" in err
    with pytest.raises(UserError, match="host-launch-us"):
        from simulator.step.step_config import check_host_launch

        check_host_launch(False, float(value))
