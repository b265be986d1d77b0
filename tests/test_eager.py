"""torchtitan's eager PyTorch ops (issue 61 item 3): a layer's elementwise ops run one kernel
each unless torch.compile fuses them, and the step pays what those kernels move."""

from __future__ import annotations

from dataclasses import replace

import pytest

from profiles import UserError, load_hardware, load_model
from scape.plan import make_config
from simulator.layout.shapes import eager_extra
from simulator.step.roofline import _hbm_Bps, layer_times
from simulator.step.simulate import simulate_step
from simulator.step.step_config import StepConfig
from tests.test_cli import scape

H100 = load_hardware("dgx-h100")
LLAMA3_8B = load_model("llama3-8b")


def test_eager_bytes_are_the_ops_counted_one_by_one():
    """Llama 3 8B (h 4096, 32 query and 8 key/value heads of 128, SwiGLU 14336), 1,000 tokens,
    TP 2 with sequence parallelism: two composite RMSNorms (36 bytes an element against a fused
    kernel's 4) on h/2, rotary on q and k (20 against 4), the GQA copies of k and v (read 512,
    write 2048, 2 bytes each a head-width), the unfused SwiGLU (10 against 6 bytes a hidden
    value); a GPT layer and a MoE layer's experts add nothing there."""
    h, q, kv, f, t, tokens = 4096, 4096, 1024, 14336, 2, 1000
    expected = (2 * 32 * h / t + 16 * (q + kv) / t + 2 * 2 * (kv + q) / t + 4 * f / t) * tokens
    moved, kernels = eager_extra(LLAMA3_8B, tokens, t, True)
    assert moved == pytest.approx(expected, rel=1e-12)
    assert kernels == 2 * 7 + 5 + 2 + 1
    assert eager_extra(load_model("gpt3-175b"), tokens, t, True) == (0.0, 0)
    moe, _ = eager_extra(load_model("mixtral-8x7b"), tokens, t, True, moe_layer=True)
    dense, _ = eager_extra(load_model("mixtral-8x7b"), tokens, t, True)
    assert moe < dense


def test_eager_layer_pays_its_bytes_at_memory_bandwidth():
    """A layer's forward in eager mode is the fused layer's plus the eager bytes over HBM
    bandwidth and a launch per extra kernel; backward twice the bytes, as every elementwise
    kernel's backward."""
    fused = layer_times(LLAMA3_8B, H100, 2, 8192, 1)
    eager = layer_times(LLAMA3_8B, H100, 2, 8192, 1, eager=True)
    moved, kernels = eager_extra(LLAMA3_8B, 2 * 8192, 1, False)
    extra = kernels * H100.roofline.gemm_launch_us * 1e-6 + moved / _hbm_Bps(H100)
    assert eager.fwd_s - fused.fwd_s == pytest.approx(extra, rel=1e-9)
    assert eager.bwd_s - fused.bwd_s == pytest.approx(2 * extra, rel=1e-9)


def test_torchtitan_steps_are_eager_unless_compiled():
    base = StepConfig(LLAMA3_8B, H100, 8, make_config("dense-zero3"), micro_batch=2,
                      global_batch=16, recompute="selective-op").validate()
    titan = replace(base, stack="torchtitan").validate()
    compiled = replace(titan, torch_compile=True).validate()
    assert titan.eager_kernels and not compiled.eager_kernels and not base.eager_kernels
    eager_s, compiled_s = (simulate_step(c).step_time_s for c in (titan, compiled))
    # the layers alike; the stacks' once-a-step work differs (simulator/step/per_step.py:
    # torchtitan scales the clipped gradients, Megatron zeroes its gradient buffer)
    here, there = simulate_step(compiled), simulate_step(base)
    assert here.per_step_s != pytest.approx(there.per_step_s, rel=1e-3)
    assert here.step_time_s - here.per_step_s == pytest.approx(
        there.step_time_s - there.per_step_s, rel=1e-9)
    assert eager_s > compiled_s * 1.05
    with pytest.raises(UserError, match="the megatron stack's kernels are fused already"):
        replace(base, torch_compile=True).validate()


def test_compile_flag_is_read_or_refused(capsys):
    args = ("simulate", "-m", "llama3-8b", "-H", "dgx-h100", "--gpus", "8", "-s", "dense-zero3",
            "--micro-batch", "2", "--global-batch", "16", "--recompute", "selective-op",
            "--format", "json")
    code, out, err = scape(capsys, *args, "--stack", "torchtitan", "--compile")
    assert code == 0, err
    assert '"torch_compile": true' in out
    code, out, err = scape(capsys, *args)
    assert code == 0 and "torch_compile" not in out  # a Megatron row carries none
    code, _, err = scape(capsys, *args, "--compile")
    assert code == 2 and "--stack torchtitan" in err


def test_torchtitan_attention_is_pytorch_sdpa_flash2_where_the_profile_tells_it_apart():
    """PyTorch's SDPA runs FlashAttention-2 first (cuDNN opt-in since 2.5.1): on a Hopper
    profile with FA2 rates the torchtitan stack's default kernel is flash2, Megatron's stays
    flash, and a typed --attention is used as typed."""
    from simulator.planning.options import Parallelism, Pricing, SchemeOptions, StepOptions

    def cfg(**pricing):
        return StepOptions("llama3-8b", "dgx-h100", 8, scheme=SchemeOptions("dense-zero3"),
                           parallelism=Parallelism(recompute="selective-op"),
                           pricing=Pricing(**pricing)).config()

    assert cfg(stack="torchtitan").attention == "flash2"
    assert cfg().attention == "flash"
    assert cfg(stack="torchtitan", attention="flash").attention == "flash"
    def on(hw, gpus=4):
        return StepOptions("llama3-8b", hw, gpus, scheme=SchemeOptions("dense-zero3"),
                           pricing=Pricing(stack="torchtitan")).config()

    # Blackwell gives FA2's rates apart too (late-constants.md row 56), far below cuDNN's
    gb200 = on("gb200-nvl72")
    assert gb200.attention == "flash2"
    r = gb200.hardware.roofline
    assert r.attn_flash2_fwd_fraction < r.attn_fwd_fraction / 3
    assert on("vista-gh200").attention == "flash"  # no FA2 rates apart there


def test_fsdp_with_pipelining_is_refused_naming_what_it_does():
    cfg = StepConfig(load_model("llama3-70b"), H100, 64, make_config("dense-zero3"), pp=2,
                     recompute="full")
    with pytest.raises(UserError, match="give -s dense-zero1 with --pp"):
        cfg.validate()
    replace(cfg, scheme=make_config("dense-zero1")).validate()


def test_plan_prices_the_stack_it_is_given(capsys):
    """plan --stack torchtitan prices every plan on that stack: its top plan is the step
    simulate gives for the same layout and stack (time and memory), slower than the same
    layout on the Megatron stack (eager kernels, SDPA's FlashAttention-2), and the rows say
    which stack and whether compiled; --compile without it is refused."""
    import json

    args = ("plan", "-m", "llama3-8b", "-H", "dgx-h100", "--tokens", "1e10", "--max-gpus",
            "16", "--global-batch", "64", "--schemes", "dense-zero3", "--workers", "1",
            "--format", "json")
    code, out, err = scape(capsys, *args, "--stack", "torchtitan")
    assert code == 0, err
    top = json.loads(out)[0]
    assert top["stack"] == "torchtitan" and top["torch_compile"] is False
    code, out, err = scape(capsys, "simulate", "-m", "llama3-8b", "-H", "dgx-h100", "--gpus",
                           str(top["gpus"]), "-s", top["scheme"], "--tp", str(top["tp"]),
                           "--pp", str(top["pp"]), "--micro-batch", str(top["micro_batch"]),
                           "--global-batch", "64", "--recompute", top["recompute"],
                           "--stack", "torchtitan", "--format", "json")
    assert code == 0, err
    row = json.loads(out)[0]
    assert top["step_time_s"] == pytest.approx(row["step_time_s"], rel=1e-9)
    assert top["memory_GB"] == pytest.approx(row["memory_GB"], rel=1e-9)
    code, out, err = scape(capsys, *args)
    assert code == 0 and "stack" not in json.loads(out)[0]
    code, _, err = scape(capsys, *args, "--compile")
    assert code == 2 and "--stack torchtitan" in err


def test_pipeline_stages_keep_outputs_only_where_asked():
    """PyTorch's pipelining keeps every micro-batch's receive buffers (input, with its
    gradient; the output gradient's before the last stage); with pp_kept_outputs (PyTorch
    before 2025) also every output, the bf16 logits on the last stage. Megatron keeps none,
    and refuses the option."""
    from simulator.memory.activations import pipeline_buffers_per_token
    from simulator.memory.peak import step_memory

    m = LLAMA3_8B
    hidden, logits = 2 * m.arch.d_model / 2, 2 * m.arch.vocab_size / 2  # bf16 bytes, TP 2
    now = {(f, last): pipeline_buffers_per_token(m, 2, 4, f, last, "torchtitan")
           for f in (True, False) for last in (True, False)}
    assert now[(True, False)] == pytest.approx(4 * hidden, rel=1e-12)
    assert now[(False, False)] == pytest.approx(4 * 3 * hidden, rel=1e-12)
    assert now[(False, True)] == pytest.approx(4 * 2 * hidden, rel=1e-12)
    then = pipeline_buffers_per_token(m, 2, 4, False, True, "torchtitan", kept_outputs=True)
    assert then == pytest.approx(4 * (2 * hidden + logits), rel=1e-12)
    assert pipeline_buffers_per_token(m, 2, 4, False, True, "megatron", True) == 0.0
    cfg = StepConfig(m, H100, 16, make_config("dense-zero1"), micro_batch=1, tp=2, pp=2,
                     global_batch=32, stack="torchtitan", recompute="full").validate()
    kept = replace(cfg, pp_kept_outputs=True).validate()
    assert step_memory(kept).activations > step_memory(cfg).activations
    with pytest.raises(UserError, match="Megatron frees a sent output"):
        replace(cfg, stack="megatron", pp_kept_outputs=True).validate()


def test_pp_kept_outputs_is_read_and_carried(capsys):
    import json

    step = ("simulate", "-m", "llama3-8b", "-H", "dgx-h100", "--gpus", "16", "--tp", "2",
            "--pp", "2", "-s", "dense-zero1", "--stack", "torchtitan", "--global-batch", "32",
            "--format", "json")
    rows = {}
    for flag in ("--pp-kept-outputs", "--no-pp-kept-outputs"):
        code, out, err = scape(capsys, *step, flag)
        assert code == 0, err
        rows[flag] = json.loads(out)[0]
    assert rows["--pp-kept-outputs"]["pp_kept_outputs"] is True
    assert rows["--no-pp-kept-outputs"]["pp_kept_outputs"] is False
    assert rows["--pp-kept-outputs"]["memory_GB"] > rows["--no-pp-kept-outputs"]["memory_GB"]
    code, _, err = scape(capsys, "simulate", "-m", "llama3-8b", "-H", "dgx-h100", "--gpus",
                         "16", "--tp", "2", "--pp", "2", "--pp-kept-outputs")
    assert code == 2 and "Megatron frees a sent output" in err
    code, _, err = scape(capsys, "simulate", "-m", "llama3-8b", "-H", "dgx-h100", "--gpus",
                         "16", "--tp", "2", "--stack", "torchtitan", "--no-pp-kept-outputs")
    assert code == 2 and "--pp 1 has none" in err
