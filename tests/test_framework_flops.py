"""Megatron-LM's FLOPs counts (simulator/step/framework_flops.py) against the published rows
that state both tokens/s and TFLOP/s per GPU, whose ratio is their source's own FLOPs per token
(profiles/external/moe-blackwell-steps.csv)."""

from pathlib import Path

import pandas as pd
import pytest

from profiles import load_model
from simulator.step.compute import forward_flops_per_token
from simulator.step.framework_flops import megatron_flops_per_token, padded_vocab

ROWS = Path(__file__).resolve().parents[1] / "profiles" / "external" / "moe-blackwell-steps.csv"
TOLERANCE = 0.01  # the rows' TFLOP/s and tokens/s are printed to 3-4 digits


def own_count(case: str) -> tuple[object, int, float]:
    """(model, sequence, the source's FLOPs per token) of a row stating both rates."""
    df = pd.read_csv(ROWS, comment="#")
    r = df[df["case"] == case].iloc[0]
    return (load_model(r["model"]), int(r["seq"]),
            float(r["tflops_per_gpu"]) * 1e12 / float(r["tokens_per_s_per_gpu"]))


@pytest.mark.parametrize("case", [
    "mbridge-llama3-8b-8-gb200-mx", "mbridge-llama3-70b-64-gb200-mxfp8",
    "mbridge-llama3-405b-256-gb200-mxfp8", "mbridge-qwen3-235b-256-gb200-bf16",
    "mbridge-qwen3-30b-16-h100-fp8"])
def test_the_causal_count_is_megatron_bridges(case):
    model, seq, own = own_count(case)
    assert megatron_flops_per_token(model, seq, "causal") == pytest.approx(own, rel=TOLERANCE)
    # the full count is Megatron's before 2025-03-06: more, by the other half of the scores
    assert megatron_flops_per_token(model, seq, "full") > own * (1 + 2 * TOLERANCE)


@pytest.mark.parametrize("case", [
    "nemo25-gpt3-175b-512-b200", "nemo25-llama3-70b-64-b200", "nemo25-nemotron4-15b-64-b200",
    "nemo25-mixtral-8x7b-64-b200"])
def test_the_full_count_is_nemo_2025s_and_this_tools(case):
    model, seq, own = own_count(case)
    full = megatron_flops_per_token(model, seq, "full")
    assert full == pytest.approx(own, rel=TOLERANCE)
    assert full == pytest.approx(3 * forward_flops_per_token(model, seq), rel=TOLERANCE)


def test_multi_latent_attention_and_the_mtp_layer():
    # Megatron-Bridge's DeepSeek-V3 H100 row trained one MTP layer: its count holds it
    model, seq, own = own_count("mbridge-dsv3-1024-h100-fp8")
    with_mtp = megatron_flops_per_token(model, seq, "causal", mtp_layers=1)
    without = megatron_flops_per_token(model, seq, "causal")
    assert with_mtp == pytest.approx(own, rel=TOLERANCE)
    # one more MoE layer of 61 and a second output layer: 3-5% more
    assert 1.03 < with_mtp / without < 1.05


def test_vocabulary_padding_and_refusals():
    assert padded_vocab(32000, 128, 8) == 32768  # Mixtral at TP 8
    assert padded_vocab(129280, 3232, 1) == 129280  # the DeepSeek-V3 guide's 3232 x 40
    with pytest.raises(ValueError, match="one of"):
        megatron_flops_per_token(load_model("llama3-8b"), 8192, "half")
    with pytest.raises(ValueError, match="multi-latent"):
        megatron_flops_per_token(load_model("deepseek-v3"), 4096, "full")
