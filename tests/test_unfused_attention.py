"""What unfused attention costs a model with and without attention dropout
(simulator/layout/shapes.py unfused_passes)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from profiles import load_hardware, load_model
from simulator.layout.shapes import ACT_BYTES, layer_shapes, unfused_passes
from simulator.step.roofline import layer_times


def test_unfused_attention_without_dropout_runs_the_softmax_alone():
    dsv3 = load_model("deepseek-v3")  # attention_dropout 0.0 (NeMo's DeepSeekConfig)
    assert not dsv3.dropout and unfused_passes(dsv3) == 1
    kept = replace(dsv3, arch=replace(dsv3.arch, dropout=True))
    assert unfused_passes(kept) == 2
    lean, full = layer_shapes(dsv3, 1, 4096, 2), layer_shapes(kept, 1, 4096, 2)
    scores = 1 * (dsv3.arch.n_heads // 2) * 4096**2
    # softmax: read and write each score; dropout: read, write and a mask byte more
    assert lean.unfused_memory_bytes == pytest.approx(scores * 2 * ACT_BYTES, rel=1e-12)
    assert full.unfused_memory_bytes == pytest.approx(scores * (4 * ACT_BYTES + 1), rel=1e-12)
    hw = load_hardware("gb200-nvl72")
    t_lean = layer_times(dsv3, hw, 1, 4096, 2, True, "unfused", 1, False).parts["attention"]
    t_full = layer_times(kept, hw, 1, 4096, 2, True, "unfused", 1, False).parts["attention"]
    assert t_lean < t_full
