"""Tensor-parallel communication overlapped with its GEMMs (simulator/step/tp_overlap.py)."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pandas as pd
import pytest

from profiles import UserError, load_hardware, load_model
from reports import step_fidelity
from reports.tables import unwrapped
from scape.plan import make_config
from simulator.step.compute import fwd_bwd
from simulator.step.simulate import simulate_step
from simulator.step.step_config import StepConfig
from simulator.step.streams import tp_allreduce_s
from simulator.step.tp_overlap import _bulk, _pipeline, _ring, layer_tp_s
from tests.test_cli import scape
from tests.test_fidelity_bands import _bench


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_a_ring_step_waits_only_for_transfers_slower_than_its_gemm_chunk(tp):
    """Nothing is exposed while each of the tp - 1 transfers is shorter than a GEMM chunk;
    past that, what shows is the transfers' excess, never more than the collective itself
    and never less than the collective minus the whole GEMM."""
    gemm = 1.0
    assert _ring(gemm * (tp - 1) / tp, gemm, tp) == 0.0  # transfer = chunk: all hidden
    for comm in (0.1, 0.5, 1.0, 2.0, 10.0):
        e = _ring(comm, gemm, tp)
        assert max(0.0, comm - gemm) <= e + 1e-12 and e <= comm
    assert _ring(10.0, gemm, tp) == pytest.approx(10.0 - gemm * (tp - 1) / tp)


def _cfg(**kw) -> StepConfig:
    return StepConfig(load_model("llama-70b"), load_hardware("dgx-h100"), 64,
                      make_config("dense-adams"), micro_batch=1, global_batch=64, tp=8,
                      **kw).validate()


def test_the_pipeline_and_bulk_methods_expose_what_they_cannot_hide():
    """Pipeline (4 splits): the last chunk's reduce-scatter always shows; bulk: only what
    outlasts the GEMM beside it."""
    assert _pipeline(1.0, 100.0) == pytest.approx(0.25)
    assert _pipeline(8.0, 4.0) == pytest.approx(2.0 + 3 * (2.0 - 1.0))
    assert _bulk(1.0, 3.0) == 0.0 and _bulk(5.0, 3.0) == 2.0


def test_without_the_overlap_a_layer_pays_its_collectives_each_pass():
    """Sequence parallelism issues two all-gathers and two reduce-scatters a pass (as rings:
    NVLS prices only the all-reduce), without it two all-reduces (NVLS on this node)."""
    from simulator.step.tp_overlap import tp_collective_s

    cfg = _cfg()
    ar = tp_allreduce_s(cfg)
    pair = (tp_collective_s(cfg, "all_gather", "auto")
            + tp_collective_s(cfg, "reduce_scatter", "auto"))
    assert layer_tp_s(cfg) == (2 * pair, 2 * pair)
    no_sp = replace(cfg, sequence_parallel=False)
    assert layer_tp_s(no_sp) == (2 * tp_allreduce_s(no_sp),) * 2
    assert pair > ar  # the node's NVLS all-reduce beats a ring all-gather and reduce-scatter
    fwd, bwd = layer_tp_s(_cfg(tp_comm_overlap=True))
    assert 0 < fwd < 2 * ar and 0 <= bwd < 2 * ar  # NVLink: mostly behind the GEMMs
    # on NVLink 100 times slower the transfers outrun the GEMMs: more shows, yet less than
    # the layer's plain all-reduces on that link, by at most its forward GEMMs
    hw = cfg.hardware
    slow_hw = replace(hw, intra_node=replace(hw.intra_node, bw_GBps=hw.intra_node.bw_GBps / 100))
    slow = replace(cfg, hardware=slow_hw, tp_comm_overlap=True)
    ar_slow = tp_allreduce_s(replace(cfg, hardware=slow_hw))
    f_slow, b_slow = layer_tp_s(slow)
    layer_fwd = fwd_bwd(cfg.model, hw, 1, cfg.seq, 8, sequence_parallel=True).layer_fwd_s
    assert f_slow > 10 * fwd and b_slow > 10 * max(bwd, 1e-6)
    assert f_slow < 2 * ar_slow * 1.5 and 2 * ar_slow - f_slow < layer_fwd


def test_the_step_hides_what_the_overlap_hides():
    plain = simulate_step(_cfg())
    over = simulate_step(_cfg(tp_comm_overlap=True))
    assert over.tp_comm_s < plain.tp_comm_s
    assert over.step_time_s == pytest.approx(
        plain.step_time_s - (plain.tp_comm_s - over.tp_comm_s), rel=0.02)
    assert over.compute_s == pytest.approx(plain.compute_s, rel=0.01)  # interference moves


@pytest.mark.parametrize("kw", [{"tp": 1}, {"sequence_parallel": False}])
def test_the_overlap_needs_a_sequence_parallel_tp_group(kw):
    with pytest.raises(UserError, match="--tp-comm-overlap"):
        StepConfig(load_model("llama-70b"), load_hardware("dgx-h100"), 64,
                   make_config("dense-adams"), micro_batch=1, global_batch=64,
                   **{"tp": 8, **kw}, tp_comm_overlap=True).validate()


def test_commands_carry_the_overlap_and_its_own_band(capsys):
    """simulate, compare and plan take --tp-comm-overlap, show it (False when not given), and
    find the band of published steps that ran with it; without it that band is not borrowed."""
    band = pd.read_csv(step_fidelity.STEP_BANDS).set_index(["hardware", "layout", "schemes"])
    rows = int(band.loc[("dgx-h100", "tensor/pipeline parallel, TP comm overlapped", "dense"),
                        "rows"])
    step = ("-m", "llama-70b", "-H", "dgx-h100", "--gpus", "64", "--tp", "8", "--micro-batch",
            "1", "--global-batch", "64", "--format", "json")
    code, out, err = scape(capsys, "simulate", *step, "--scheme", "dense-adams")
    assert code == 0, err
    plain = json.loads(out)[0]
    assert plain["tp_comm_overlap"] is False and plain["heldout_step_rows"] == 0
    code, out, err = scape(capsys, "simulate", *step, "--scheme", "dense-adams",
                           "--tp-comm-overlap")
    assert code == 0, err
    over = json.loads(out)[0]
    assert over["tp_comm_overlap"] is True and over["heldout_step_rows"] == rows
    assert over["tp_comm_s"] < plain["tp_comm_s"]
    # without the flag the line says which layouts of the profile were checked, each with its
    # held-out steps and the model's signed median error on them
    code, out, err = scape(capsys, "simulate", *step[:-2], "--scheme", "dense-adams")
    assert code == 0, err
    text = unwrapped(out)
    assert "held-out layouts on dgx-h100: data parallel (" in text
    assert re.search(r"; tensor/pipeline parallel, TP comm overlapped \(\d+ steps, median "
                     r"[+-]\d+\.\d%\)", text), text
    code, out, err = scape(capsys, "compare", *step, "--schemes", "dense-adams,scape:0.99",
                           "--tp-comm-overlap")
    assert code == 0, err
    assert {r["scheme"]: (r["tp_comm_overlap"], r["heldout_step_rows"])
            for r in json.loads(out)} == {"dense-adams": (True, rows), "scape:0.99": (True, 0)}
    code, _, err = scape(capsys, "simulate", "-m", "llama-70b", "-H", "dgx-h100", "--gpus", "8",
                         "--micro-batch", "1", "--tp-comm-overlap")
    assert code == 2 and "needs --tp above 1" in err
    code, out, err = scape(capsys, "plan", "-m", "gpt-345m", "--tokens", "1e9", "-H",
                           "dgx-h100", "--max-gpus", "16", "--schemes", "dense-adams",
                           "--tp-comm-overlap", "--top", "50", "--format", "json")
    assert code == 0, err
    plans = json.loads(out)
    # asked of every plan, run by those with a tensor-parallel group
    assert all(r["tp_comm_overlap_asked"] is True for r in plans)
    assert {(r["tp"] > 1, r["tp_comm_overlap"]) for r in plans} == {(True, True), (False, False)}
    tp_rows = [r for r in plans if r["tp"] > 1]
    assert tp_rows and all(r["heldout_step_rows"] == rows for r in tp_rows)


def test_nemotron_rows_keep_their_parameters_in_the_llama_layout():
    """The bench builds Nemotron-4's squared-ReLU MLP as the llama layout with d_ff = 2 ffn / 3:
    the parameter count equals Nemotron's own (two plain projections, GQA, untied, no
    biases), counted here independently."""
    bench = _bench("fidelity_parallel")
    cases = pd.read_csv(bench.DATA, comment="#")
    for name, (h, layers, ffn) in {"dgxc-nemotron4-15b-2411-16": (6144, 32, 24576),
                                   "dgxc-nemotron4-340b-2411-128": (18432, 96, 73728)}.items():
        row = next(cases[cases["case"] == name].itertuples())
        model = bench.gpt(row)
        kv = 8 * h // int(row.heads)  # 8 key/value heads
        layer = 2 * h * h + 2 * h * kv + 2 * h * ffn + 2 * h  # q, o, k, v; up, down; two norms
        want = 2 * 256000 * h + layers * layer + h
        assert model.family == "llama" and model.arch.d_ff == 2 * ffn // 3
        assert model.n_params == pytest.approx(want, rel=1e-4)


def test_each_gemm_uses_transformer_engines_default_method():
    """TE's initialize_ub defaults: ring exchange for qkv_fprop, fc1_fprop, proj_dgrad,
    fc2_dgrad; pipeline for proj_fprop, fc2_fprop; bulk for the column-parallel backward (the
    input's all-gather beside the data gradient, the reduce-scatter beside the weight
    gradient). The collectives are rings on the node, not the all-reduce's NVLS."""
    from simulator.layout.shapes import layer_shapes
    from simulator.step.tp_overlap import _gemm_time, tp_collective_s

    cfg = _cfg(tp_comm_overlap=True)
    ag = tp_collective_s(cfg, "all_gather", "ring")
    rs = tp_collective_s(cfg, "reduce_scatter", "ring")
    qkv, proj, fc1, fc2 = layer_shapes(cfg.model, 1, cfg.seq, 8, True).gemms

    def g(x):
        return _gemm_time(x, cfg)

    want_fwd = _ring(ag, g(qkv), 8) + _pipeline(rs, g(proj)) + _ring(ag, g(fc1), 8) + _pipeline(
        rs, g(fc2))
    want_bwd = (_ring(ag, g(proj.backward()[0]), 8) + _ring(ag, g(fc2.backward()[0]), 8)
                + sum(_bulk(ag, g(x.backward()[0])) + _bulk(rs, g(x.backward()[1]))
                      for x in (qkv, fc1)))
    assert layer_tp_s(cfg) == pytest.approx((want_fwd, want_bwd))
    assert want_fwd > 0  # the pipeline's last chunk always shows
    nvls = tp_collective_s(cfg, "all_reduce", "auto")
    assert nvls != pytest.approx(ag + rs)  # the all-reduce runs NVLS; the overlap does not


def test_torchtitan_op_sac_gathers_the_layer_inputs_again():
    """torchtitan's op-level selective checkpointing saves the reduce-scatters' outputs and
    not the all-gathers', so recomputing the key projection and SwiGLU's w3 runs both of a
    Llama layer's sequence-parallel all-gathers again in the backward (tp_overlap.sac_regathers);
    Megatron's selective recompute, full recompute (already all of the forward's), a GPT layer
    and TP without sequence parallelism gather nothing more. The bytes a layer sends count
    them too, and with the overlap they hide behind the GEMMs they feed, at most as plain."""
    from simulator.step.tp_overlap import sac_regathers, tp_bytes_per_layer, tp_collective_s

    def cfg(**kw) -> StepConfig:
        return StepConfig(load_model("llama3-8b"), load_hardware("dgx-h100"), 64,
                          make_config("dense-zero3"), micro_batch=1, global_batch=8, tp=8,
                          recompute="selective-op", **kw).validate()

    base, titan = cfg(), cfg(stack="torchtitan")
    assert sac_regathers(titan) == 2
    assert sac_regathers(base) == 0  # Megatron's stack
    assert sac_regathers(replace(titan, recompute="full")) == 0
    assert sac_regathers(replace(titan, sequence_parallel=False)) == 0
    assert sac_regathers(replace(titan, model=load_model("gpt-345m"))) == 0
    # every layer of Llama 4 Scout is MoE: torchtitan's MoE gathers its sequence-sharded input
    # (apply_moe_ep_tp), and its recomputed shared expert needs it, so both gathers run again
    scout = load_model("llama4-scout")
    assert scout.moe_share == 1.0
    assert sac_regathers(replace(titan, model=scout)) == 2
    ag = tp_collective_s(titan, "all_gather", titan.algo)
    (f0, b0), (f1, b1) = layer_tp_s(base), layer_tp_s(titan)
    assert f1 == pytest.approx(f0, rel=1e-12)
    assert b1 - b0 == pytest.approx(2 * ag, rel=1e-9)
    t = titan.tp
    extra = 2 * (t - 1) / t * titan.activation_values * titan.dtypes.param_bytes
    assert tp_bytes_per_layer(titan) - tp_bytes_per_layer(base) == pytest.approx(extra, rel=1e-9)
    from simulator.step.tp_overlap import _regathers_s, _torchtitan_passes

    overlapped = replace(titan, tp_comm_overlap=True)
    hidden = layer_tp_s(overlapped)[1] - _torchtitan_passes(overlapped)[1]
    assert hidden == pytest.approx(_regathers_s(overlapped), rel=1e-12)
    assert 0 <= hidden <= 2 * tp_collective_s(titan, "all_gather", "ring") * (1 + 1e-9)


def test_torchtitan_async_tp_fuses_only_one_matmul_with_its_collective():
    """PyTorch's micro-pipeline TP (torchtitan's async TP): the gathers into wq/wk/wv and
    w1/w3, and in the backward into wo's and w2's data gradients, run as ring exchanges; wo's
    and w2's reduce-scatters as rings too, each followed by the local sum of the tp partials
    (a read of the activations' partials, a write of a tp-th); the backward's input-gradient
    reduce-scatters (a sum of several matmuls' outputs) as without async TP; full recompute
    runs the forward's again. Megatron's stack keeps Transformer Engine's methods."""
    from simulator.layout.shapes import layer_shapes
    from simulator.step.roofline import _hbm_Bps
    from simulator.step.tp_overlap import _gemm_time, partials_sum_s, tp_collective_s

    te = StepConfig(load_model("llama3-70b"), load_hardware("dgx-h100"), 64,
                    make_config("dense-zero3"), micro_batch=2, global_batch=16, tp=8,
                    tp_comm_overlap=True).validate()
    titan = replace(te, stack="torchtitan", recompute="full")  # the 70B rows' full AC
    ag = tp_collective_s(titan, "all_gather", "ring")
    rs = tp_collective_s(titan, "reduce_scatter", "ring")
    plain_rs = tp_collective_s(titan, "reduce_scatter", titan.algo)
    gemms = layer_shapes(titan.model, 2, titan.seq, 8, True).gemms
    qkv, proj, fc1, fc2 = gemms

    def g(x):
        return _gemm_time(x, titan)

    summed = partials_sum_s(titan)
    assert summed == pytest.approx(
        (1 + 1 / 8) * titan.activation_values * 2 / _hbm_Bps(titan.hardware), rel=1e-12)
    want_fwd = (_ring(ag, g(qkv), 8) + _ring(rs, g(proj), 8) + _ring(ag, g(fc1), 8)
                + _ring(rs, g(fc2), 8) + 2 * summed)
    want_bwd = (_ring(ag, g(proj.backward()[0]), 8) + _ring(ag, g(fc2.backward()[0]), 8)
                + 2 * plain_rs)
    assert layer_tp_s(titan) == pytest.approx((want_fwd, want_bwd + want_fwd), rel=1e-12)
    assert summed > 0 and plain_rs > 0
    # the same layer on Megatron's stack: Transformer Engine's methods, no partials' sum
    te_fwd, _ = layer_tp_s(te)
    assert te_fwd == pytest.approx(
        _ring(ag, g(qkv), 8) + _pipeline(rs, g(proj)) + _ring(ag, g(fc1), 8)
        + _pipeline(rs, g(fc2)), rel=1e-12)
