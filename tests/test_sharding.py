"""Hybrid sharding (--shard-group) and FP8 parameter gathers (--fp8-param-gather), issue 57:
the state shards over the shard group, the gradient shards all-reduce across the groups, and
a run that gathers FP8 weights moves and holds a byte a parameter."""

from __future__ import annotations

import pytest

from profiles import UserError
from scape.plan import WIRE_FACTOR
from simulator.memory.peak import step_memory
from simulator.planning.options import Batch, Parallelism, Precision, SchemeOptions, StepOptions
from simulator.step.simulate import simulate_step


def _cfg(scheme="dense-zero3", gpus=256, shard_group=None, model="llama-7b", fp8=False,
         fp8_param_gather=False, hardware="dgx-h100"):
    return StepOptions(model, hardware, gpus, scheme=SchemeOptions(scheme),
                       batch=Batch(1, 4096, None, 2 * gpus),
                       parallelism=Parallelism(shard_group=shard_group),
                       precision=Precision(fp8=fp8, fp8_param_gather=fp8_param_gather)
                       ).config()


def test_a_shard_group_of_every_rank_is_plain_zero3():
    full, same = _cfg(), _cfg(shard_group=256)
    a, b = simulate_step(full), simulate_step(same)
    assert b.step_time_s == pytest.approx(a.step_time_s, rel=1e-12)
    assert step_memory(same).total == pytest.approx(step_memory(full).total, rel=1e-12)


def test_hybrid_sharding_shards_inside_and_all_reduces_across():
    """HSDP with groups of 8 (a node) on 256 GPUs: the plan's gathers and reduce-scatters run
    over the shard group, one all-reduce of the gradient shard (1/8 of the gradient) over the
    32 groups; the optimizer state is 1/8 per GPU instead of 1/256."""
    cfg = _cfg(shard_group=8)
    ops = [op for _, s in cfg._plan().steps for op in s.ops]
    assert {op.group for op in ops} == {"shard", "replica"}
    (across,) = [op for op in ops if op.group == "replica"]
    n = cfg.model.n_params
    assert across.collective == "all_reduce"
    assert across.size_bytes == pytest.approx(n / 8 * cfg.dtypes.grad_bytes, rel=1e-9)
    assert cfg.group_worlds["replica"] == 32
    hsdp, full = step_memory(cfg), step_memory(_cfg())
    assert hsdp.optimizer == pytest.approx(full.optimizer * 256 / 8, rel=1e-9)
    # bytes: each op over its own group's ranks
    sent = simulate_step(cfg).bytes_per_gpu
    micro = cfg.accum
    expect = sum(WIRE_FACTOR[op.collective](cfg.group_worlds[op.group]) * op.size_bytes
                 * (micro if op.every_micro_batch else 1) for op in ops)
    assert sent == pytest.approx(expect, rel=1e-12)


@pytest.mark.parametrize("scheme, group, expect", [
    ("dense-ddp", 8, "hybrid sharding shards a ZeRO scheme's state"),
    ("dense-zero3", 3, "--shard-group 3 must divide the 256 data-parallel ranks: valid 2 or 4"),
])
def test_bad_shard_groups_are_refused(scheme, group, expect):
    with pytest.raises(UserError, match=expect):
        _cfg(scheme=scheme, shard_group=group)


def test_fp8_parameter_gathers_move_and_hold_a_byte_a_parameter():
    """Megatron's --fp8-param-gather: the distributed optimizer's parameter all-gather moves 1
    byte a parameter instead of 2, and the weights are held in FP8."""
    bf16 = _cfg(scheme="dense-adams", gpus=64, fp8=True, hardware="dgx-h100")
    fp8 = _cfg(scheme="dense-adams", gpus=64, fp8=True, fp8_param_gather=True)
    gather = next(op for _, s in bf16._plan().steps for op in s.ops
              if op.collective == "all_gather")
    gather8 = next(op for _, s in fp8._plan().steps for op in s.ops
               if op.collective == "all_gather")
    assert gather8.size_bytes == pytest.approx(gather.size_bytes / 2, rel=1e-12)
    assert step_memory(fp8).weights == pytest.approx(step_memory(bf16).weights / 2, rel=1e-12)
    assert simulate_step(fp8).bytes_per_gpu < simulate_step(bf16).bytes_per_gpu


def test_fp8_parameter_gathers_need_fp8_and_a_gathering_scheme():
    with pytest.raises(UserError, match="give --fp8 too"):
        _cfg(scheme="dense-adams", gpus=64, fp8_param_gather=True)
    with pytest.raises(UserError, match="gathers no parameters"):
        _cfg(scheme="dense-ddp", gpus=64, fp8=True, fp8_param_gather=True)


def test_the_planner_searches_hybrid_sharding_for_fsdp():
    """dense-zero3 plans come with full sharding and with HSDP over a node's data-parallel
    ranks; every HSDP candidate's shard group is a node's GPUs over its TP."""
    from profiles import load_hardware, load_model
    from simulator.planning.plan_request import PlanRequest
    from simulator.planning.planner import candidates

    req = PlanRequest(load_model("nemotron4-15b"), 1e11, (load_hardware("dgx-h100"),),
                      max_gpus=64, schemes=("dense-zero3",), workers=1).validate()
    kept, _ = candidates(req)
    hybrid = [c for c in kept if c.shard_group is not None]
    assert hybrid and any(c.shard_group is None for c in kept)
    assert all(c.shard_group == 8 // c.tp and c.gpus // c.tp > c.shard_group for c in hybrid)


def test_a_stage_in_part_of_a_node_and_part_of_another_is_refused():
    """24 GPUs in 2 stages: 12 a stage straddles nodes of 8 (its collectives cannot be laid
    out); refused with the pipeline degrees that work, no internal error."""
    with pytest.raises(UserError, match=r"--pp valid here 1 or 3"):
        StepOptions("llama-7b", "dgx-h100", 24, batch=Batch(1, 4096, None, 48),
                    parallelism=Parallelism(pp=2)).config()
