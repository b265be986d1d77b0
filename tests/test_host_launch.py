"""The host's kernel launches and CUDA graphs (simulator/step/roofline.py host_launch_s): a
layer's pass waits for the host only where it launches the pass's kernels slower than the GPU
runs them; CUDA graphs remove the wait; published (GPU-bound) steps do not move."""

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
    """At a millisecond a launch the host sets the pace: the forward takes one launch per
    GEMM, attention and elementwise kernel, the backward two per GEMM and elementwise kernel
    and one for attention; at no launch time the GPU's own times remain."""
    s = layer_shapes(GPT, 1, 128, 1, False, 1, False, None)
    gpu = layer_times(GPT, H100, 1, 128)
    slow = layer_times(GPT, H100, 1, 128, host_s=1e-3)
    assert gpu.parts["host_wait"] == 0.0
    assert slow.fwd_s == pytest.approx((len(s.gemms) + 1 + s.memory_kernels) * 1e-3)
    assert slow.bwd_s == pytest.approx((2 * len(s.gemms) + 1 + 2 * s.memory_kernels) * 1e-3)
    assert slow.parts["host_wait"] == pytest.approx(slow.fwd_s + slow.bwd_s - gpu.fwd_s
                                                    - gpu.bwd_s)


def test_cuda_graphs_remove_the_wait_and_cuda_launches_alone_never_bind():
    """The profile's launch (CUDA's own, [nccl] launch_us) is below the GPU's own cost of a
    kernel, so it never holds a pass back; a framework's 20 us a launch does on small
    kernels, and CUDA graphs take it away."""
    eager = fwd_bwd(GPT, H100, 1, 128, host_launch_us=20.0)
    graphs = fwd_bwd(GPT, H100, 1, 128, host_launch_us=20.0, cuda_graphs=True)
    default = fwd_bwd(GPT, H100, 1, 128)
    plain = fwd_bwd(GPT, H100, 1, 128, cuda_graphs=True)
    assert eager.parts["host_wait"] > 0 and eager.fwd_s + eager.bwd_s > graphs.fwd_s + graphs.bwd_s
    assert graphs.parts["host_wait"] == 0.0
    assert default.parts["host_wait"] == 0.0
    assert (default.fwd_s, default.bwd_s) == (plain.fwd_s, plain.bwd_s)
    assert host_launch_s(H100, False) == pytest.approx(H100.nccl.launch_us * 1e-6)
    assert host_launch_s(H100, True, 20.0) == 0.0
    # a large layer is GPU-bound even at 20 us a launch: nothing to remove
    big = load_model("llama-7b")
    assert fwd_bwd(big, H100, 1, 4096, 8, host_launch_us=20.0).parts["host_wait"] == 0.0


def test_simulate_says_what_the_host_held_back(capsys):
    step = ("simulate", "-m", "gpt-345m", "-H", "dgx-h100", "--gpus", "8", "--seq-len", "128")

    def row(*args: str) -> dict:
        code, out, err = scape(capsys, *step, *args, "--format", "json")
        assert code == 0, err
        return json.loads(out)[0]

    plain, eager, graphs = row(), row("--host-launch-us", "20"), row("--host-launch-us", "20",
                                                                     "--cuda-graphs")
    assert "cuda_graphs" not in plain and "host_wait_per_micro_batch_s" not in plain
    assert eager["host_wait_per_micro_batch_s"] > 0 and eager["cuda_graphs"] is False
    assert graphs["host_wait_per_micro_batch_s"] == 0 and graphs["cuda_graphs"] is True
    assert graphs["step_time_s"] < eager["step_time_s"]
    code, out, err = scape(capsys, *step, "--host-launch-us", "20")
    assert not err
    assert code == 0 and "# host: 20 us a kernel launch; the layers wait" in out


@pytest.mark.parametrize("value", ["0", "-3", "inf", "nan", "20000"])
def test_a_host_launch_time_outside_its_range_is_refused(capsys, value):
    code, _out, err = scape(capsys, "simulate", "-m", "gpt-345m", "-H", "dgx-h100", "--gpus", "8",
                           "--host-launch-us", value)
    assert code != 0 and "--host-launch-us must be a time in microseconds" in err
    with pytest.raises(UserError, match="host-launch-us"):
        from simulator.step.step_config import check_host_launch

        check_host_launch(False, float(value))
