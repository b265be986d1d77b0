"""Forward and backward from shapes: the GEMM roofline, attention, recomputation, and which
model (shapes or an MFU) prices a step."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from profiles import load_hardware, load_model
from profiles.hardware import parse_hardware
from simulator.layout.shapes import Gemm, layer_shapes
from simulator.step.compute import fwd_bwd, pricing
from simulator.step.roofline import gemm_s, layer_times
from vocabulary.errors import ProfileError, UserError

H100 = load_hardware("dgx-h100")
A100 = load_hardware("dgx-a100")
# the kernels at their benchmark peak (what OpenXLA's table measured)
H100_BENCH = replace(H100, roofline=replace(H100.roofline, sustained=1.0))
VISTA = load_hardware("vista-gh200")  # no [roofline]: priced by its MFU
L7B = load_model("llama-7b")
XLA = Path(__file__).resolve().parents[1] / "profiles" / "external" / "gemm-h100-xla.csv"
XLA_B200 = XLA.with_name("gemm-b200-xla.csv")


def test_gemm_roofline_predicts_the_held_out_xla_shapes():
    """Fitted on the five squares only; the fifteen transformer shapes are held out."""
    rows = pd.read_csv(XLA, comment="#")
    errors = _errors(rows[rows["split"] == "held-out"], H100_BENCH)
    assert len(errors) == 15
    assert sorted(errors)[len(errors) // 2] < 0.05 and max(errors) < 0.15


def _errors(rows: pd.DataFrame, hw) -> list[float]:
    """|predicted / table - 1| of each row's BF16 GEMM on `hw`."""
    return [abs(2.0 * r.m * r.n * r.k / gemm_s(Gemm("x", r.m, r.n, r.k), hw) / 1e12
                / r.tflops - 1) for r in rows.itertuples()]


def test_b200_table_fits_its_own_constants_better_than_h100s():
    """XLA's sm_100 table (docs/research/gemm-efficiency.md 1e): the constants
    bench/fidelity_gemm.py fits on its five squares (5.1 us, 1.10) predict its other 120
    shapes within 6% in the median, and better than the H100 constants the profile keeps."""
    b200 = load_hardware("dgx-b200")
    shipped = replace(b200, roofline=replace(b200.roofline, sustained=1.0))
    fitted = replace(shipped, roofline=replace(shipped.roofline, gemm_launch_us=5.1,
                                               gemm_blend=1.10))
    rows = pd.read_csv(XLA_B200, comment="#")
    assert len(rows) == 125 and (rows["split"] == "calibration").sum() == 5
    held = rows[rows["split"] == "held-out"]
    fit_errors, shipped_errors = _errors(held, fitted), _errors(held, shipped)
    assert max(_errors(rows[rows["split"] == "calibration"], fitted)) < 0.06
    assert sorted(fit_errors)[len(fit_errors) // 2] < 0.06
    assert sorted(fit_errors)[60] < sorted(shipped_errors)[60]


def test_gemm_is_memory_bound_when_thin_and_compute_bound_when_square():
    r = H100.roofline
    peak = r.gemm_peak_fraction * r.sustained * H100.gpu.peak_bf16_tflops * 1e12
    square = Gemm("sq", 8192, 8192, 8192)
    assert square.flops / gemm_s(square, H100) == pytest.approx(peak, rel=0.05)
    thin = Gemm("thin", 8192, 8192, 16)  # 16-deep reduction: bytes dominate
    hbm = H100.gpu.hbm_bw_GBps * 1e9 * H100.compute.mem_efficiency
    assert gemm_s(thin, H100) > thin.bytes / hbm
    assert thin.flops / gemm_s(thin, H100) < 0.1 * peak


def test_backward_gemms_have_the_forward_flops_twice():
    g = Gemm("qkv", 4096, 12288, 4096)
    dgrad, wgrad = g.backward()
    assert dgrad.flops == wgrad.flops == g.flops
    assert (dgrad.m, dgrad.n, dgrad.k) == (4096, 4096, 12288)
    assert (wgrad.m, wgrad.n, wgrad.k) == (4096, 12288, 4096)


def test_tensor_parallel_splits_every_layer_gemm():
    one, eight = layer_shapes(L7B, 1, 4096, 1), layer_shapes(L7B, 1, 4096, 8)
    assert sum(g.flops for g in eight.gemms) == pytest.approx(
        sum(g.flops for g in one.gemms) / 8, rel=1e-9)
    assert eight.attention_flops == pytest.approx(one.attention_flops / 8)


def test_recomputation_adds_to_the_backward_only():
    none = fwd_bwd(L7B, H100, 1, 4096)
    full = fwd_bwd(L7B, H100, 1, 4096, recompute="full")
    sel = fwd_bwd(L7B, H100, 1, 4096, recompute="selective")
    assert full.fwd_s == none.fwd_s == sel.fwd_s
    assert full.layer_bwd_s == pytest.approx(none.layer_bwd_s + none.layer_fwd_s, rel=1e-12)
    assert none.layer_bwd_s < sel.layer_bwd_s < full.layer_bwd_s
    assert full.flops_per_step_per_gpu == none.flops_per_step_per_gpu  # model FLOPs


def test_unfused_attention_costs_more_at_long_sequences():
    flash = layer_times(L7B, A100, 1, 8192, attention="flash")
    unfused = layer_times(L7B, A100, 1, 8192, attention="unfused")
    assert unfused.parts["attention"] > 2 * flash.parts["attention"]
    assert unfused.parts["gemm"] == flash.parts["gemm"]


def test_flash2_prices_attention_at_flashattention2s_rates_and_nothing_else():
    """H100: cuDNN's fused attention (`flash`) against FlashAttention-2 (`flash2`), the
    attention core slower by the ratio of the two kernels' rates, every GEMM and elementwise
    kernel the same; on A100 FlashAttention-2 is the profile's fused kernel, so both agree."""
    cudnn = layer_times(L7B, H100, 1, 4096, attention="flash")
    fa2 = layer_times(L7B, H100, 1, 4096, attention="flash2")
    r = H100.roofline
    launch = 2 * r.gemm_launch_us * 1e-6  # one forward and one backward kernel
    flops = layer_shapes(L7B, 1, 4096).attention_flops  # forward FLOPs
    peak = H100.gpu.peak_bf16_tflops * 1e12 * r.sustained
    expected = launch + flops / peak * (1 / r.attn_flash2_fwd_fraction
                                        + 2.5 / r.attn_flash2_bwd_fraction)
    assert fa2.parts["attention"] == pytest.approx(expected)
    assert fa2.parts["attention"] > 1.5 * cudnn.parts["attention"]
    assert (fa2.parts["gemm"], fa2.parts["memory"]) == (cudnn.parts["gemm"], cudnn.parts["memory"])
    a = layer_times(L7B, A100, 1, 4096, attention="flash2")
    assert a == layer_times(L7B, A100, 1, 4096, attention="flash")


def test_flash2_is_refused_where_the_profile_gives_no_flashattention2_rates():
    bare = replace(H100, roofline=replace(H100.roofline, attn_flash2_fwd_fraction=None,
                                          attn_flash2_bwd_fraction=None))
    with pytest.raises(UserError, match="gives no FlashAttention-2 rates"):
        layer_times(L7B, bare, 1, 4096, attention="flash2")


def test_shapes_give_a_plausible_mfu_and_h100_below_a100():
    """Kernel-level constants alone: large dense layers near the matmul efficiency, the H100's
    share lower (its FLOPs grew 3.2x, its memory bandwidth 1.6x)."""
    def mfu(hw):
        t = fwd_bwd(L7B, hw, 4, 4096)
        return t.flops_per_step_per_gpu / (t.fwd_s + t.bwd_s) / (hw.gpu.peak_bf16_tflops * 1e12)

    assert 0.6 < mfu(A100) < 0.87 and 0.5 < mfu(H100) < mfu(A100)


def test_pricing_order_given_then_measured_then_shapes_then_profile_mfu():
    assert pricing(L7B, H100, 0.5) == (0.5, "mfu 0.5 (given)")
    assert pricing(L7B, H100)[0] is None  # shapes
    fitted = replace(H100, model_mfu={"llama-7b": 0.37})
    assert pricing(L7B, fitted)[0] == 0.37
    assert pricing(L7B, VISTA)[0] == VISTA.compute.mfu
    given = fwd_bwd(L7B, H100, 1, 4096, mfu=0.5)
    rate = 0.5 * H100.gpu.peak_bf16_tflops * 1e12
    assert given.fwd_s + given.bwd_s == pytest.approx(given.flops_per_step_per_gpu / rate)


def test_a_profile_needs_an_mfu_or_a_roofline():
    import tomllib

    doc = tomllib.loads(Path(H100.path).read_text())
    del doc["roofline"]
    with pytest.raises(ProfileError, match="mfu: required unless"):
        parse_hardware(H100.path, doc)


def test_training_metric_passes_add_a_forward_pass_over_the_logits_each():
    """A trainer's training metrics (Composer: llm-foundry's two cross-entropies on every
    micro-batch) cost each pass two kernels and METRIC_CE_BYTES per logit at the profile's
    memory rate, on the forward only; the step pays it once per micro-batch; a count that is
    not a whole number of passes is refused."""
    from simulator.step.roofline import METRIC_CE_BYTES, head_times

    hw, model = load_hardware("dgx-a100"), load_model("gpt-345m")
    mb, seq = 8, 1024
    base, two = head_times(model, hw, mb, seq), head_times(model, hw, mb, seq, metric_passes=2)
    one_pass = (2 * hw.roofline.gemm_launch_us * 1e-6 + METRIC_CE_BYTES * mb * seq
                * model.arch.vocab_size / (hw.gpu.hbm_bw_GBps * 1e9 * hw.compute.mem_efficiency))
    assert two.fwd_s - base.fwd_s == pytest.approx(2 * one_pass, rel=1e-12)
    assert two.bwd_s == base.bwd_s
    assert METRIC_CE_BYTES == 22  # fp32 copy (2 + 4), log_softmax 3 reads + 1 write of fp32
    from scape.plan import make_config
    from simulator.step.simulate import simulate_step
    from simulator.step.step_config import StepConfig

    cfg = StepConfig(model, hw, 8, make_config("dense-ddp"), micro_batch=mb, seq_len=seq,
                     global_batch=mb * 8 * 4)
    plain, counted = simulate_step(cfg), simulate_step(replace(cfg, metric_passes=2))
    assert counted.compute_s - plain.compute_s == pytest.approx(4 * 2 * one_pass, rel=1e-6)
    for bad in (-1, 1.5, True):
        with pytest.raises(UserError, match="metric-passes"):
            simulate_step(replace(cfg, metric_passes=bad))
