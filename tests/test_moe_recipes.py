"""profiles/external/moe-recipes.csv and attention-backends.csv, the recipe settings
bench/moe_steps.py prices its rows with: every entry names a published row, every MoE row has
one, each value is one the bench reads, and each entry quotes where it was read
(docs/research/moe-recipes.md)."""

from __future__ import annotations

import csv
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
    for col in ("ep_overlap", "shared_expert_overlap", "cuda_graphs", "fp8_param_gather",
                "tp_comm_overlap", "tp_pp_dp_mapping", "overlap_param_gather"):
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


def test_a_run_config_s_tp_overlap_and_rank_order_are_priced_as_it_set_them():
    """The mlperf rows: University-of-Florida's 405B config comments TP_COMM_OVERLAP out
    (priced without it, against the bench's rule for NVIDIA recipes), NVIDIA's 512-GPU GB200
    run sets TP_PP_DP_MAPPING (priced in that rank order), and every such row is read."""
    from tests.test_fidelity_bands import _bench

    bench = _bench("moe_steps")
    rows = pd.read_csv(bench.DATA, comment="#")  # as the bench reads them

    def row(case):
        return next(rows[rows["case"] == case].itertuples())

    def config(case):
        return bench.options(row(case)).config()

    for case, off in (("mlperf51-llama31-405b-256-b200-uf", True),
                      ("mlperf50-llama31-405b-512-gb200", False)):
        cfg = config(case)
        assert cfg.tp_comm_overlap is (not off), case
        assert cfg.tp_pp_dp_mapping, case
        assert cfg.dtypes.grad_bytes == 2, case  # grad_reduce_in_fp32=False (step-optimizer)
    # session 53's rows: Eos keeps Megatron's default order and runs eager; Carina sets the
    # tp-pp-dp order and full CUDA graphs; Cisco's 8B overlaps its TP 2 communication
    for case, mapping, graphs, overlap in (
            ("mlperf50-llama31-405b-8192-h100", None, False, True),
            ("mlperf50-llama31-405b-2048-gb200-carina", True, True, True),
            ("mlperf51-llama31-8b-128-h100-cisco", None, False, True)):
        cfg = config(case)
        assert (cfg.tp_pp_dp_mapping or None, cfg.cuda_graphs, cfg.tp_comm_overlap) == (
            mapping, graphs, overlap), case
        # overlap_param_gather, as every mlperf config or log sets it: the gathers wait in
        # the next forward, not after the update
        assert cfg.scheme.overlap_param_gather, case
    # session 54: NeMo 2's and Megatron-Bridge's recipes as their configs set it (true; the
    # 25.11 MXFP8 405B run false), the folding paper's runs unstated (Megatron's default, off),
    # and Megatron-FSDP's row priced with the zero-3 scheme's prefetch, not refused
    def gathers(case):
        return config(case).scheme.overlap_param_gather

    assert gathers("dgxc-dsv3-1024-h100-bf16") and gathers("nemo25-mixtral-8x7b-64-b200")
    assert not gathers("mbridge-llama3-405b-128-b200-mx")
    assert not gathers("folding-mixtral-8x22b-128-mcore")
    fsdp = bench.evaluate(row("mbridge-llama3-70b-64-gb200-fp8"))
    assert not fsdp["note"].startswith("refused") and fsdp["predicted_s"] > 0
    mlperf = RECIPES[RECIPES["case"].str.startswith("mlperf")]
    assert len(mlperf) == (STEPS["source"] == "mlperf").sum() >= 28
    assert (mlperf["tp_pp_dp_mapping"] != "").all() and (mlperf["tp_comm_overlap"] != "").all()
    nvidia = RECIPES[RECIPES["case"].str.match(r"(mlperf|dgxc|nemo25|mbridge)")]
    assert (nvidia["overlap_param_gather"] != "").all()


@pytest.mark.parametrize("path", sorted(EXTERNAL.glob("*.csv")), ids=lambda p: p.name)
def test_every_data_file_reads_the_same_with_pandas_comments_as_with_csv(path):
    """The benches read these files with pandas' comment='#', which cuts a line at a '#'
    outside quotes (a quoted config line such as "#export ..." once lost a row its last two
    columns): every row pandas reads equals the csv module's reading of the same line."""
    table = pd.read_csv(path, comment="#", dtype=str, keep_default_na=False)
    lines = [r for r in csv.reader(path.open(newline="")) if r and not r[0].startswith("#")]
    assert list(table.columns) == lines[0]
    width = len(lines[0])  # a short row's missing trailing cells read as empty
    assert table.values.tolist() == [r + [""] * (width - len(r)) for r in lines[1:]], path.name
