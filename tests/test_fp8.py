"""FP8 GEMMs (--fp8: simulator/step/roofline.py gemm_s, simulator/step/tp_overlap.py)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from profiles import ProfileError, UserError, check_profile, load_hardware, load_model
from reports import step_fidelity
from scape.plan import make_config
from simulator.layout.shapes import Gemm
from simulator.step.roofline import gemm_s, layer_times
from simulator.step.simulate import simulate_step
from simulator.step.step_config import StepConfig
from simulator.step.tp_overlap import tp_collective_s
from tests.test_cli import REPO, scape

H100 = load_hardware("dgx-h100")


def test_an_fp8_gemm_runs_at_the_measured_fp8_rate():
    """A large GEMM is compute-bound: FP8 over bf16 is the ratio of the two measured matmul
    rates (stas00's table: 1402.6 against 794.5 TFLOP/s, 1.77x, not the datasheet's 2x)."""
    g = Gemm("big", 16384, 16384, 16384)
    r = H100.roofline
    want = (r.fp8_gemm_peak_fraction * H100.gpu.peak_fp8_tflops) / (
        r.gemm_peak_fraction * H100.gpu.peak_bf16_tflops)
    assert gemm_s(g, H100) / gemm_s(g, H100, fp8=True) == pytest.approx(want, rel=0.01)
    assert 1.7 < want < 1.8


def _cfg(**kw) -> StepConfig:
    return StepConfig(load_model("llama-70b"), H100, 64, make_config("dense-adams"),
                      micro_batch=1, global_batch=64, tp=8, tp_comm_overlap=True, **kw).validate()


def test_fp8_runs_the_layer_gemms_and_the_all_gathers_in_one_byte():
    """The layer's linear GEMMs speed up; attention and the output layer do not; the
    sequence-parallel all-gathers move one byte a value (overlapped or not), the
    reduce-scatters two; a memory-bound GEMM saves its inputs' bytes."""
    from simulator.step.compute import fwd_bwd
    from simulator.step.roofline import _hbm_Bps
    from simulator.step.tp_overlap import layer_tp_s

    bf16, fp8 = _cfg(), _cfg(fp8=True)
    assert simulate_step(fp8).compute_s < 0.8 * simulate_step(bf16).compute_s
    m = load_model("llama-70b")
    for attention in ("flash", "unfused"):
        a = fwd_bwd(m, H100, 1, 4096, 8, sequence_parallel=True, attention=attention)
        b = fwd_bwd(m, H100, 1, 4096, 8, sequence_parallel=True, attention=attention, fp8=True)
        assert (a.head_fwd_s, a.attn_fwd_s, a.attn_bwd_s) == (b.head_fwd_s, b.attn_fwd_s,
                                                              b.attn_bwd_s)
        assert b.layer_fwd_s < a.layer_fwd_s
    ag1 = tp_collective_s(fp8, "all_gather", "ring", 1)
    assert ag1 < 0.7 * tp_collective_s(bf16, "all_gather", "ring")
    plain_bf16 = replace(bf16, tp_comm_overlap=False)
    plain_fp8 = replace(fp8, tp_comm_overlap=False)
    pair = (tp_collective_s(plain_fp8, "all_gather", "auto", 1)
            + tp_collective_s(plain_fp8, "reduce_scatter", "auto"))
    assert layer_tp_s(plain_fp8) == (2 * pair, 2 * pair)
    assert simulate_step(plain_fp8).tp_comm_s < simulate_step(plain_bf16).tp_comm_s
    assert simulate_step(plain_fp8).bytes_per_gpu < simulate_step(plain_bf16).bytes_per_gpu
    thin = Gemm("thin", 1, 8192, 8192)  # a vector times a matrix: all bytes, few FLOPs
    saved = (thin.m * thin.k + thin.k * thin.n) / _hbm_Bps(H100)
    assert gemm_s(thin, H100) - gemm_s(thin, H100, fp8=True) == pytest.approx(saved, rel=0.05)


def test_fp8_casts_are_the_operands_counted_one_by_one():
    """Each FP8 GEMM's input (forward) and output gradient (backward) is read in bf16 and
    written twice in 8 bits; the fused QKV's and MLP-in's inputs come from a LayerNorm-Linear
    that writes FP8 itself (free), unless PyTorch runs op by op; the router stays 16-bit."""
    from simulator.layout.shapes import FP8_CAST_BYTES, fp8_casts

    qkv, out = Gemm("qkv", 100, 30, 20), Gemm("attn out", 100, 20, 10)
    experts, router = Gemm("experts in", 7, 40, 20, batch=3), Gemm("router", 100, 8, 20)
    assert FP8_CAST_BYTES == 4
    fwd, bwd, kf, kb = fp8_casts((qkv, out, experts, router))
    assert fwd == pytest.approx(4 * (100 * 10 + 7 * 20 * 3), rel=1e-12)
    assert bwd == pytest.approx(4 * (100 * 30 + 100 * 20 + 7 * 40 * 3), rel=1e-12)
    assert (kf, kb) == (2, 3)
    fwd_eager, _, kf_eager, _ = fp8_casts((qkv, out, experts, router), eager=True)
    assert fwd_eager == pytest.approx(fwd + 4 * 100 * 20, rel=1e-12) and kf_eager == 3


def test_fp8_layer_pays_its_casts_at_memory_bandwidth():
    """The FP8 layer's elementwise time grows by exactly its casts' bytes at HBM bandwidth
    and their launches; a bf16 layer pays none."""
    from simulator.layout.shapes import fp8_casts, layer_shapes
    from simulator.step.roofline import _hbm_Bps, layer_times

    m = load_model("llama-70b")
    launch = H100.roofline.gemm_launch_us * 1e-6
    s = layer_shapes(m, 1, 4096, 8, True)
    fwd, bwd, kf, kb = fp8_casts(s.gemms)
    plain = layer_times(m, H100, 1, 4096, 8, True)
    fp8 = layer_times(m, H100, 1, 4096, 8, True, fp8=True)
    assert fwd > 0 and bwd > fwd  # the backward casts QKV's and MLP-in's gradients too
    assert fp8.parts["memory"] - plain.parts["memory"] == pytest.approx(
        (fwd + bwd) / _hbm_Bps(H100) + (kf + kb) * launch, rel=1e-9)


def test_fp8_is_refused_where_it_cannot_be_priced(tmp_path):
    a100 = load_hardware("dgx-a100")
    with pytest.raises(UserError, match="no FP8 GEMM rate"):
        StepConfig(load_model("llama-7b"), a100, 8, make_config("dense-adams"),
                   fp8=True).validate()
    with pytest.raises(UserError, match="--fp8 prices the layers' GEMMs from their shapes"):
        _cfg(fp8=True, mfu=0.4)
    text = (REPO / "profiles" / "hardware" / "dgx-h100.toml").read_text()
    bad = tmp_path / "h100.toml"
    bad.write_text("\n".join(line for line in text.splitlines()
                             if not line.startswith("peak_fp8_tflops")))
    with pytest.raises(ProfileError, match="fp8_gemm_peak_fraction"):
        check_profile(str(bad))


def test_commands_carry_fp8_and_its_own_band(capsys):
    # the band of that class, from every file that holds out rows of it (all_bands)
    rows = int(step_fidelity.all_bands()[("dgx-h100", "tensor/pipeline parallel, TP comm "
                                          "overlapped, FP8", "dense")]["rows"])
    step = ("simulate", "-m", "llama-70b", "-H", "dgx-h100", "--gpus", "64", "--tp", "8",
            "--micro-batch", "1", "--global-batch", "64", "--tp-comm-overlap", "--format",
            "json")
    code, out, err = scape(capsys, *step, "--fp8")
    assert code == 0, err
    row = json.loads(out)[0]
    assert row["fp8"] is True and row["heldout_step_rows"] == rows
    code, out, err = scape(capsys, *step)
    assert code == 0, err
    assert json.loads(out)[0]["fp8"] is False
    code, _, err = scape(capsys, "simulate", "-m", "llama-7b", "-H", "dgx-a100", "--gpus", "8",
                         "--fp8")
    assert code == 2 and "no FP8 GEMM rate" in err
    code, out, err = scape(capsys, "plan", "-m", "gpt-345m", "--tokens", "1e9", "-H",
                           "dgx-h100", "--max-gpus", "8", "--schemes", "dense-adams", "--fp8",
                           "--top", "3", "--format", "json")
    assert code == 0, err
    fp8_plans = json.loads(out)
    assert all(r["fp8"] is True and r["fp8_asked"] is True for r in fp8_plans)
    code, out, err = scape(capsys, "plan", "-m", "gpt-345m", "--tokens", "1e9", "-H",
                           "dgx-h100", "--max-gpus", "8", "--schemes", "dense-adams",
                           "--top", "3", "--format", "json")
    assert code == 0, err
    # the same top layout runs faster with its GEMMs in FP8 (by less than the GEMMs' 2x: this
    # small model's eager host holds both steps back, simulator/step/host.py)
    assert fp8_plans[0]["step_time_s"] < 0.95 * json.loads(out)[0]["step_time_s"]


def test_each_fp8_recipe_adds_what_its_casts_move():
    """Current scaling reads each tensor once more for its amax (two more kernels), except
    after a norm, which finds the amax itself; MXFP8 and blockwise add their scales, and their
    norms write bf16 for a cast to follow; delayed scaling's norm writes FP8. The names are
    Megatron-LM's, as the CLI offers them."""
    from simulator.layout.shapes import FP8_CAST_BYTES, FP8_RECIPES, fp8_casts
    from vocabulary.names import FP8_RECIPE_NAMES

    assert set(FP8_RECIPE_NAMES) == set(FP8_RECIPES)
    qkv, out = Gemm("qkv", 100, 30, 20), Gemm("attn out", 100, 20, 10)
    delayed = fp8_casts((qkv, out), recipe="delayed")
    assert delayed == fp8_casts((qkv, out))  # the default
    tensorwise = fp8_casts((qkv, out), recipe="tensorwise")
    assert tensorwise[0] == pytest.approx(6 * 100 * 10 + FP8_CAST_BYTES * 100 * 20, rel=1e-12)
    assert tensorwise[1] == pytest.approx(6 * (100 * 30 + 100 * 20), rel=1e-12)
    assert tensorwise[2:] == (3 + 1, 3 * 2)
    mx = fp8_casts((qkv, out), recipe="mxfp8")
    assert mx[0] == pytest.approx((4 + 2 / 32) * (100 * 10 + 100 * 20), rel=1e-12)
    assert mx[2:] == (2, 2)
    blockwise = fp8_casts((qkv, out), recipe="blockwise")
    assert blockwise[1] == pytest.approx((4 + 8 / 128) * (100 * 30 + 100 * 20), rel=1e-12)


def test_per_tensor_casts_write_one_copy_where_fp8_gemms_take_any_layout():
    """Transformer Engine's per-tensor quantizers (delayed, current scaling) make no transpose
    on Blackwell (quantizer.cpp: `columnwise_usage && !is_non_tn_fp8_gemm_supported`): 2 + 1
    bytes an element there, 2 + 1 + 1 on Hopper; MXFP8 and blockwise quantize the column-wise
    copy apart on both. The layer's cast time follows, on the profiles' own [nccl] arch."""
    from simulator.layout.shapes import fp8_casts, fp8_copies, layer_shapes

    assert [fp8_copies("blackwell", r) for r in ("delayed", "tensorwise", "mxfp8",
                                                 "blockwise")] == [1, 1, 2, 2]
    assert {fp8_copies(a, "delayed") for a in ("hopper", "ampere", None)} == {2}
    out = Gemm("attn out", 100, 20, 10)
    assert fp8_casts((out,), copies=1)[0] == pytest.approx(3 * 100 * 10, rel=1e-12)
    assert fp8_casts((out,))[0] == pytest.approx(4 * 100 * 10, rel=1e-12)
    b200 = load_hardware("dgx-b200")
    assert b200.nccl.arch == "blackwell" and H100.nccl.arch == "hopper"
    model = load_model("llama3-8b")
    s = layer_shapes(model, 1, 4096, 1)
    one, _, _, _ = fp8_casts(s.gemms, recipe="tensorwise", copies=1)
    two, _, _, _ = fp8_casts(s.gemms, recipe="tensorwise", copies=2)
    hbm = b200.gpu.hbm_bw_GBps * 1e9 * b200.compute.mem_efficiency
    plain = layer_times(model, b200, 1, 4096, fp8=True, fp8_recipe="tensorwise")
    unfused_b200 = replace(b200, nccl=replace(b200.nccl, arch="hopper"))  # two copies
    both = layer_times(model, unfused_b200, 1, 4096, fp8=True, fp8_recipe="tensorwise")
    assert both.parts["memory_fwd"] - plain.parts["memory_fwd"] == pytest.approx(
        (two - one) / hbm, rel=1e-9)


def test_fp8_recipe_is_read_or_refused(capsys):
    """--fp8-recipe prices the casts it names and every row says which ran; without --fp8,
    MXFP8 on a Hopper profile, or a name Megatron does not know, one error line each."""
    step = ("simulate", "-m", "llama3-8b", "-H", "dgx-h100", "--gpus", "8", "--tp", "2",
            "--fp8", "--format", "json")
    times = {}
    for recipe in ("delayed", "blockwise", "tensorwise"):
        code, out, err = scape(capsys, *step, "--fp8-recipe", recipe)
        assert code == 0, err
        row = json.loads(out)[0]
        assert row["fp8_recipe"] == recipe
        times[recipe] = row["step_time_s"]
    code, out, err = scape(capsys, *step)
    assert code == 0, err
    assert json.loads(out)[0]["fp8_recipe"] == "delayed"  # not given: Megatron's default
    assert json.loads(out)[0]["step_time_s"] == pytest.approx(times["delayed"], rel=1e-12)
    # Transformer Engine's own H200 table orders them so (profiles/external/
    # te-gemm-recipes-h200.csv): block scales slow Hopper's GEMMs more than current scaling's
    # extra amax pass slows its casts
    assert times["delayed"] < times["tensorwise"] < times["blockwise"]
    refusals = (
        (("--fp8-recipe", "mxfp8"), "needs Blackwell tensor cores"),
        (("--fp8-recipe", "nvfp4"), "is not one of"),
    )
    for args, words in refusals:
        code, _, err = scape(capsys, *step, *args)
        assert code == 2 and words in err, err
    code, _, err = scape(capsys, "simulate", "-m", "llama3-8b", "-H", "dgx-h100", "--gpus",
                         "8", "--tp", "2", "--fp8-recipe", "tensorwise")
    assert code == 2 and "give --fp8 too" in err
    code, out, err = scape(capsys, "simulate", "-m", "llama3-8b", "-H", "dgx-b200", "--gpus",
                           "8", "--fp8", "--fp8-recipe", "mxfp8", "--format", "json")
    assert code == 0, err
    assert json.loads(out)[0]["fp8_recipe"] == "mxfp8"
    plan = ("plan", "-m", "gpt-345m", "--tokens", "1e9", "-H", "dgx-h100", "--max-gpus", "8",
            "--schemes", "dense-adams", "--top", "2", "--format", "json")
    code, _, err = scape(capsys, *plan, "--fp8", "--fp8-recipe", "mxfp8")
    assert code == 2 and "needs Blackwell tensor cores" in err
    code, _, err = scape(capsys, *plan, "--fp8-recipe", "blockwise")
    assert code == 2 and "give --fp8 too" in err
    code, out, err = scape(capsys, *plan, "--fp8", "--fp8-recipe", "tensorwise")
    assert code == 0, err
    assert all(r["fp8_recipe"] == "tensorwise" for r in json.loads(out))


def test_block_scaled_gemms_on_hopper_run_at_the_te_table_rate():
    """Blockwise FP8 GEMMs on Hopper take simulator/step/block_scaling.py's slowdown, derived
    from Transformer Engine's H200 benchmark; the same cast arithmetic predicts that table's
    tensorwise row from its delayed and pre-quantized rows within 3% (a check of the cast
    model the derivation leans on). Blackwell runs block scaling through MXFP8 GEMMs: no
    slowdown there, and none for the per-tensor recipes anywhere."""
    from simulator.step.block_scaling import block_slowdown, tensorwise_check

    predicted, measured = tensorwise_check()
    assert predicted == pytest.approx(measured, rel=0.03)
    slow = block_slowdown()
    assert 1.1 < slow < 1.4  # the table's block row is 22.9 ms against 16.8 ms of GEMMs
    big = Gemm("x", 8192, 8192, 8192)  # compute-bound: the rate is what moves
    h100, b200 = load_hardware("dgx-h100"), load_hardware("dgx-b200")
    plain, block = (gemm_s(big, h100, True, r) for r in ("delayed", "blockwise"))
    launch = h100.roofline.gemm_launch_us * 1e-6
    assert (block - launch) / (plain - launch) == pytest.approx(slow, rel=0.02)
    assert gemm_s(big, h100, True, "tensorwise") == pytest.approx(plain, rel=1e-12)
    assert gemm_s(big, b200, True, "blockwise") == pytest.approx(
        gemm_s(big, b200, True, "delayed"), rel=1e-12)
    assert gemm_s(big, h100, False, "blockwise") == pytest.approx(gemm_s(big, h100), rel=1e-12)
