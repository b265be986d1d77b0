"""--fp8-scope: which GEMMs an FP8 run quantizes (every linear, or the routed experts' grouped
GEMMs alone, as torchtitan's --quantize.grouped_mm; simulator/step/roofline.py in_fp8)."""

from __future__ import annotations

import pytest

from profiles import UserError, load_hardware, load_model
from simulator.layout.shapes import Routing, fp8_casts, layer_shapes
from simulator.planning.options import Batch, Parallelism, Precision, StepOptions
from simulator.step.roofline import gemm_s, in_fp8, layer_times

DSV3 = load_model("deepseek-v3")
B200 = load_hardware("dgx-b200")
ROUTING = Routing(ep=32)


def _moe_times(fp8: bool, scope: str = "all"):
    return layer_times(DSV3, B200, 1, 8192, 2, True, "flash", 1, fp8, ROUTING,
                       fp8_scope=scope)


def test_the_experts_scope_quantizes_the_routed_experts_gemms_and_nothing_else():
    s = layer_shapes(DSV3, 1, 8192, 2, True, 1, True, ROUTING)
    chosen = {g.name for g in s.gemms if in_fp8(g, "experts")}
    assert chosen == {"experts in", "experts out"}
    assert all(in_fp8(g, "all") for g in s.gemms)
    # the GEMM time moves by exactly the experts' GEMMs (forward here), in the MoE layers
    # (layer_times is the mean layer: DeepSeek-V3's first three are dense)
    bf16, fp8_all, fp8_exp = (_moe_times(False), _moe_times(True, "all"),
                              _moe_times(True, "experts"))
    saved = DSV3.moe_share * sum(gemm_s(g, B200) - gemm_s(g, B200, True) for g in s.gemms
                                 if g.name.startswith("experts"))
    assert bf16.parts["gemm_fwd"] - fp8_exp.parts["gemm_fwd"] == pytest.approx(saved, rel=1e-9)
    assert fp8_all.parts["gemm_fwd"] < fp8_exp.parts["gemm_fwd"] < bf16.parts["gemm_fwd"]
    # and its casts are the experts' operands alone
    experts = tuple(g for g in s.gemms if g.name.startswith("experts"))
    assert fp8_casts(experts)[0] < fp8_casts(s.gemms)[0]


def _options(model: str, **precision) -> StepOptions:
    return StepOptions(model, "dgx-b200", 64, batch=Batch(1, 4096, None, 64),
                       parallelism=Parallelism(ep=8) if model == "deepseek-v3" else Parallelism(),
                       precision=Precision(**precision))


@pytest.mark.parametrize("model, precision, said", [
    ("deepseek-v3", {"fp8_scope": "experts"}, "give --fp8 too"),
    ("llama3-8b", {"fp8": True, "fp8_scope": "experts"}, "has no experts"),
    ("deepseek-v3", {"fp8": True, "fp8_scope": "attention"}, "must be one of all, experts"),
    ("deepseek-v3", {"fp8": True, "fp8_scope": "experts", "fp8_param_gather": True},
     "leave one of them out"),
])
def test_a_scope_without_fp8_an_unknown_one_or_experts_on_a_dense_model_is_refused(
        model, precision, said):
    with pytest.raises(UserError, match=said):
        _options(model, **precision).config()


def test_the_scope_a_run_used_is_said_and_the_default_is_every_linear():
    assert _options("deepseek-v3", fp8=True).config().quantized_gemms == "all"
    cfg = _options("deepseek-v3", fp8=True, fp8_scope="experts").config()
    assert cfg.quantized_gemms == "experts"
