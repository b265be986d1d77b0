"""Context parallelism (simulator/step/cp_comm.py, StepConfig.cp)."""

from __future__ import annotations

import json

import pytest

from profiles import UserError, load_hardware, load_model
from reports.tables import unwrapped
from scape.plan import make_config
from simulator.layout.shapes import layer_shapes
from simulator.memory.peak import step_memory
from simulator.network.topology import build_topology
from simulator.step.compute import fwd_bwd
from simulator.step.cp_comm import kv_block_bytes, layer_cp_s, ring_peers
from simulator.step.simulate import simulate_step
from simulator.step.step_config import StepConfig
from tests.test_cli import scape

L70 = load_model("llama-70b")
H100 = load_hardware("dgx-h100")


def _cfg(cp: int, gpus: int = 256, **kw) -> StepConfig:
    return StepConfig(L70, H100, gpus, make_config("dense-adams"), micro_batch=1,
                      global_batch=64, tp=4, pp=4, cp=cp, seq_len=8192, **kw).validate()


def test_each_rank_holds_its_tokens_and_its_share_of_attention():
    """GEMMs and elementwise work per rank shrink with cp; attention too (each rank's queries
    meet every key, causal and load-balanced: 1/cp of the whole)."""
    one, two = layer_shapes(L70, 1, 8192, 4, True), layer_shapes(L70, 1, 8192, 4, True, cp=2)
    assert [g.m for g in two.gemms] == [g.m // 2 for g in one.gemms]
    assert two.attention_flops == pytest.approx(one.attention_flops / 2)
    assert two.memory_bytes == pytest.approx(one.memory_bytes / 2)


def test_the_batch_and_the_gradient_group_follow_megatron():
    """cp ranks share a micro-batch: data parallelism is gpus / (tp pp cp), gradients are
    reduced (and the optimizer sharded) over dp x cp ranks."""
    c = _cfg(4)
    assert (c.dp, c.grad_ranks, c.accum) == (4, 16, 16)
    plain = _cfg(1)
    assert (plain.dp, plain.grad_ranks, plain.accum) == (16, 16, 4)
    # the same tokens per GPU per step: the compute a step holds is about the same
    r4, r1 = simulate_step(c), simulate_step(plain)
    assert r4.compute_s == pytest.approx(r1.compute_s, rel=0.05)
    # the gradient reduction spans the same 16 ranks, so its bytes are the same
    assert step_memory(c).optimizer == pytest.approx(step_memory(plain).optimizer)
    # each rank keeps the activations of its own tokens of a micro-batch
    half = _cfg(2, gpus=128)
    assert step_memory(half).activations == pytest.approx(
        step_memory(_cfg(1, gpus=64)).activations / 2, rel=0.01)


def test_the_ring_hides_behind_attention_unless_its_links_are_slow():
    c = _cfg(2)  # tp 4 x cp 2 ranks fill one 8-GPU node: the ring runs over NVLink
    topo = build_topology(c.hardware, c.gpus)
    assert layer_cp_s(c, topo, 1e-3, 2e-3) == (0.0, 0.0)
    # with almost no attention to hide behind, the transfer shows (K and V of 4,096 tokens,
    # 8 key/value heads over tp 4: 2 x 4096 x 2 x 128 x 2 bytes)
    assert kv_block_bytes(c) == 2 * 4096 * 2 * 128 * 2
    fwd, bwd = layer_cp_s(c, topo, 0.0, 0.0)
    assert 0 < fwd < bwd  # the backward sends twice the bytes
    # the same ring between nodes (tp 4 x cp 4 spans two): slower links, more exposed
    wide = _cfg(4)
    f4, _ = layer_cp_s(wide, build_topology(wide.hardware, wide.gpus), 0.0, 0.0)
    assert f4 > fwd


@pytest.mark.parametrize(("kw", "match"), [
    ({"cp": 0}, "--cp must be at least 1"),
    ({"cp": 3}, "does not divide"),
    ({"cp": 2, "attention": "unfused"}, "no context-parallel form"),
    ({"cp": 4, "gpus": 96}, "multiple of --tp x --pp x --cp"),
])
def test_impossible_context_parallel_layouts_are_refused(kw, match):
    with pytest.raises(UserError, match=match):
        _cfg(**kw)


def test_commands_carry_cp_and_no_borrowed_band(capsys):
    base = ("-m", "llama-70b", "-H", "dgx-h100", "--gpus", "256", "--tp", "4", "--pp", "4",
            "--micro-batch", "1", "--global-batch", "64", "--seq-len", "8192")
    code, out, err = scape(capsys, "simulate", *base, "--cp", "2", "--format", "json")
    assert code == 0, err
    row = json.loads(out)[0]
    assert row["cp"] == 2 and row["dp"] == 8 and row["grad_accum"] == 8
    assert row["heldout_step_rows"] == 0 and "cp_comm_s" in row
    code, out, err = scape(capsys, "simulate", *base, "--cp", "2")
    assert code == 0, err
    out = unwrapped(out)  # the header's lines as one line each
    assert "cp 2, data-parallel 8" in out and "context parallel) was held out" in out
    code, out, err = scape(capsys, "compare", *base, "--cp", "2", "--schemes",
                           "dense-adams,scape:0.99", "--format", "json")
    assert code == 0, err
    assert {r["cp"] for r in json.loads(out)} == {2}
    code, _, err = scape(capsys, "simulate", *base, "--cp", "3")
    assert code == 2 and "--cp 3" in err


def test_plan_takes_a_context_parallel_degree(capsys):
    """plan --cp C plans every layout with C context-parallel ranks (data parallelism shrinks
    by C, so fewer layouts split the batch), and its rows say so."""
    base = ("plan", "-m", "llama-7b", "--tokens", "1e10", "-H", "dgx-h100", "--max-gpus",
            "64", "--schemes", "dense-adams", "--top", "200", "--format", "json")
    code, out, err = scape(capsys, *base, "--cp", "2")
    assert code == 0, err
    rows = json.loads(out)
    assert rows and {r["cp"] for r in rows} == {2}
    assert all(r["gpus"] == r["tp"] * r["pp"] * r["dp"] * 2 for r in rows)
    code, out, err = scape(capsys, *base[:-2], "--cp", "2")  # the table names it
    assert code == 0, err
    assert " cp " in out.splitlines()[next(i for i, line in enumerate(out.splitlines())
                                             if line.startswith("hardware"))]
    code, _, err = scape(capsys, *base, "--cp", "0")
    assert code == 2 and "--cp must be at least 1" in err


def test_each_rank_sends_to_the_next_of_its_ring():
    """tp fastest, then cp: with tp 4 and cp 4, rank r's peer is r + 4, the last of each ring
    wrapping back to its first, at the same tensor- and data-parallel ranks."""
    ranks, peers = ring_peers(4, 4, 2)
    assert list(peers[:16]) == [*range(4, 16), *range(0, 4)]
    assert list(peers[16:]) == [*range(20, 32), *range(16, 20)]
    assert sorted(peers) == list(ranks)  # every rank receives once


def _exposed_cfg(**kw) -> StepConfig:
    """A ring over NICs with little attention to hide behind: its transfers show."""
    return StepConfig(L70, H100, 128, make_config("dense-adams"), micro_batch=1,
                      global_batch=16, tp=8, cp=8, seq_len=8192, **kw).validate()


def test_the_step_waits_for_what_the_ring_leaves_exposed():
    """cp_comm_s is the layers' exposed ring time over the step's micro-batches; recomputed
    attention (selective or full) runs the forward ring again, and full recomputation the
    tensor-parallel collectives."""
    c = _exposed_cfg()
    t = fwd_bwd(c.model, c.hardware, 1, c.seq, c.tp, sequence_parallel=True, cp=c.cp)
    f, b = layer_cp_s(c, build_topology(c.hardware, c.gpus), t.attn_fwd_s, t.attn_bwd_s)
    assert f > 0 and b > 0
    r = simulate_step(c)
    # the interference of overlapped gradient traffic may stretch it a little, never shrink
    want = c.model.arch.n_layers * c.accum * (f + b)
    assert want <= r.cp_comm_s <= 1.05 * want
    sel = simulate_step(_exposed_cfg(recompute="selective"))
    full = simulate_step(_exposed_cfg(recompute="full"))
    assert sel.cp_comm_s == pytest.approx(r.cp_comm_s + c.model.arch.n_layers * c.accum * f,
                                          rel=0.05)
    assert full.tp_comm_s > 1.3 * r.tp_comm_s and sel.tp_comm_s == pytest.approx(
        r.tp_comm_s, rel=0.05)
    # bytes: the re-run forward ring (selective) and the re-run tensor-parallel collectives
    # (full: 2 more all-reduces of 4 per layer)
    block = kv_block_bytes(c) * (c.cp - 1) * c.stage0_layers * c.accum
    assert sel.bytes_per_gpu - r.bytes_per_gpu == pytest.approx(block)
    tp_per = (c.micro_batch * c.seq / c.cp * c.model.arch.d_model * 2 * 2 * (c.tp - 1) / c.tp
              * c.stage0_layers * c.accum)
    assert full.bytes_per_gpu - sel.bytes_per_gpu == pytest.approx(2 * tp_per)

