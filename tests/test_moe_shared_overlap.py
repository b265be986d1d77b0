"""--moe-shared-overlap (Megatron-Core's --moe-shared-expert-overlap): the shared expert's
GEMMs on their own stream beside the layer's dispatch and combine (simulator/step/moe.py
shared_beside, shared_expert_s)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from profiles import UserError
from simulator.planning.options import Batch, Parallelism, SchemeOptions, StepOptions
from simulator.step.moe import ep_layer_s, moe_layer_s, shared_beside, shared_expert_s


def _cfg(model="deepseek-v3", hardware="dgx-h100", gpus=1024, **parallel):
    return StepOptions(model, hardware, gpus, scheme=SchemeOptions("dense-adamw"),
                       batch=Batch(1, 4096, None, 8192),
                       parallelism=Parallelism(**{"tp": 2, "pp": 16, "ep": 64, "etp": 1,
                                                  **parallel})).config()


def test_each_half_of_the_calls_waits_for_its_excess_over_its_gemm_or_the_sms_it_takes():
    # calls of 10 s: 5 s beside a 3 s GEMM (2 s left), 5 s beside an 8 s one (the calls'
    # 5 s slow it by 5 x 0.2)
    assert shared_beside(10.0, (3.0, 8.0), 0.2) == pytest.approx(2.0 + 1.0, rel=1e-12)
    assert shared_beside(10.0, (0.0, 0.0), 0.2) == pytest.approx(10.0, rel=1e-12)


def test_the_overlap_hides_the_shared_experts_gemms_of_each_moe_layer_and_no_more():
    off = _cfg()
    on = replace(off, moe_shared_overlap=True)
    f1, f2, b1, b2 = shared_expert_s(on)
    assert f1 > 0 and f2 > 0 and b1 > f1 and b2 > f2  # backward: two GEMMs each
    one = moe_layer_s(on)
    i = on.hardware.compute.interference
    slowed = i / (1 + i)
    share = on.model.moe_share
    fwd_off, _ = ep_layer_s(off, 1.0, 2.0)
    fwd_on, bwd_on = ep_layer_s(on, 1.0, 2.0)
    assert fwd_off == pytest.approx(share * one, rel=1e-12)
    assert fwd_on == pytest.approx(
        share * sum(max(one / 2 - g, one / 2 * slowed) for g in (f1, f2)), rel=1e-12)
    assert bwd_on == pytest.approx(
        share * sum(max(one / 2 - g, one / 2 * slowed) for g in (b2, b1)), rel=1e-12)
    assert fwd_on < fwd_off


@pytest.mark.parametrize("model, parallel, said", [
    ("mixtral-8x7b", {"tp": 1, "pp": 1, "ep": 8}, "has no shared expert"),
    ("deepseek-v3", {"moe_dispatcher": "allgather"}, "alltoall or flex dispatcher"),
])
def test_a_model_without_a_shared_expert_or_the_allgather_dispatcher_is_refused(
        model, parallel, said):
    with pytest.raises(UserError, match=said):
        _cfg(model, gpus=64 if model == "mixtral-8x7b" else 1024, moe_shared_overlap=True,
             **parallel)
