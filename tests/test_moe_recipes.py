"""profiles/external/moe-recipes.csv and attention-backends.csv, the recipe settings
bench/moe_steps.py prices its rows with: every entry names a published row, every MoE row has
one, each value is one the bench reads, and each entry quotes where it was read
(docs/research/moe-recipes.md)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from profiles import load_model

EXTERNAL = Path(__file__).resolve().parents[1] / "profiles" / "external"


def _table(name: str) -> pd.DataFrame:
    return pd.read_csv(EXTERNAL / name, comment="#", dtype=str).fillna("")


STEPS = _table("moe-blackwell-steps.csv")
RECIPES = _table("moe-recipes.csv")
# the attention kernel of rows whose stack ran another than the tool's default for it
BACKENDS = _table("attention-backends.csv")


@pytest.mark.parametrize("table", [RECIPES, BACKENDS], ids=["recipes", "attention-backends"])
def test_every_entry_names_a_published_row_once_and_quotes_its_source(table):
    assert table["case"].is_unique
    assert set(table["case"]) <= set(STEPS["case"])
    assert all(len(e) > 20 for e in table["evidence"])


def test_the_attention_entries_are_kernels_the_tool_prices_and_latent_heads_on_blackwell():
    assert set(BACKENDS["attention"]) <= {"flash", "flash2", "unfused"}
    # Transformer Engine before 2.5 ran no cuDNN fused attention on sm100 above head dim 128
    # and no FlashAttention where the query-key and value heads differ (the file's evidence)
    rows = STEPS.set_index("case").loc[BACKENDS["case"]]
    for case, row in rows.iterrows():
        model = load_model(row["model"])
        assert model.mla is not None and model.mla.qk_head_dim > 128, case
        assert row["hardware"] in ("gb200-nvl72", "dgx-b200"), case


def test_every_moe_row_has_an_entry_and_dense_rows_carry_only_their_graphs():
    moe = {c for c, m in zip(STEPS["case"], STEPS["model"], strict=True)
           if load_model(m).moe is not None}
    assert moe <= set(RECIPES["case"])
    dense = RECIPES[~RECIPES["case"].isin(moe)]
    assert len(dense) >= 30  # the dense Megatron-stack rows' CUDA graphs (session 47)
    for col in ("dispatcher", "flex_backend", "ep_overlap", "shared_expert_overlap"):
        assert (dense[col] == "").all(), col
    assert set(dense["cuda_graphs"]) <= {"true", "false"}


def test_values_are_ones_the_bench_reads():
    assert set(RECIPES["dispatcher"]) <= {"", "alltoall", "allgather", "flex"}
    assert set(RECIPES["flex_backend"]) <= {"", "deepep", "hybridep", "deepseek-own"}
    for col in ("ep_overlap", "shared_expert_overlap", "cuda_graphs", "fp8_param_gather"):
        assert set(RECIPES[col]) <= {"", "true", "false"}, col
    assert set(RECIPES["fp8_scope"]) <= {"", "all", "experts"}
    # a scope is said only of an FP8 row
    fp8 = set(STEPS.loc[STEPS["precision"] == "fp8", "case"])
    assert set(RECIPES.loc[RECIPES["fp8_scope"] != "", "case"]) <= fp8
    flex = RECIPES[RECIPES["flex_backend"] != ""]
    assert (flex["dispatcher"] == "flex").all()


def test_a_shared_expert_overlap_is_said_of_rows_whose_model_has_one_and_can_run_it():
    on = RECIPES[RECIPES["shared_expert_overlap"] == "true"]
    assert len(on) >= 13  # NeMo's DeepSeek-V3 and Llama 4 configs (moe-recipes.md)
    models = STEPS.set_index("case").loc[on["case"], "model"]
    assert all(load_model(m).moe.shared_width > 0 for m in models)
    assert set(on["dispatcher"].str.split().str[0]) <= {"alltoall", "flex"}
