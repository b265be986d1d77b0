"""profiles/external/attention-backends.csv (the attention kernel a published row's stack ran
where it differs from the tool's default for that stack) and what unfused attention costs a
model with and without attention dropout (simulator/layout/shapes.py unfused_passes)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from profiles import load_hardware, load_model
from simulator.layout.shapes import ACT_BYTES, layer_shapes, unfused_passes
from simulator.step.roofline import layer_times

EXTERNAL = Path(__file__).resolve().parents[1] / "profiles" / "external"
BACKENDS = pd.read_csv(EXTERNAL / "attention-backends.csv", comment="#", dtype=str).fillna("")
STEPS = pd.read_csv(EXTERNAL / "moe-blackwell-steps.csv", comment="#", dtype=str).fillna("")


def test_every_entry_names_a_published_row_once_with_a_kernel_the_tool_prices():
    assert BACKENDS["case"].is_unique
    assert set(BACKENDS["case"]) <= set(STEPS["case"])
    assert set(BACKENDS["attention"]) <= {"flash", "flash2", "unfused"}
    assert all(len(e) > 20 for e in BACKENDS["evidence"])


def test_the_unfused_rows_are_latent_attention_on_blackwell_with_a_head_wider_than_128():
    # Transformer Engine before 2.5 ran no cuDNN fused attention on sm100 above head dim 128
    # and no FlashAttention where the query-key and value heads differ (the file's evidence)
    rows = STEPS.set_index("case").loc[BACKENDS["case"]]
    for case, row in rows.iterrows():
        model = load_model(row["model"])
        assert model.mla is not None and model.mla.qk_head_dim > 128, case
        assert row["hardware"] in ("gb200-nvl72", "dgx-b200"), case


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
