"""Megatron-Core's --use-tp-pp-dp-mapping (ranks ordered tp, cp, pp, dp): a model replica on
consecutive GPUs, its pipeline sends inside an NVLink domain and its data-parallel peers a
replica apart (simulator/step/simulate.py, streams.py pipeline_send_s; step_config.py
_validate_mapping). MLPerf's GB200 Llama 3.1 405B runs set it (profiles/external/
moe-recipes.csv)."""

from __future__ import annotations

import io

import pandas as pd
import pytest

from profiles import UserError
from simulator.network.topology import build_topology
from simulator.planning.options import Batch, Parallelism, Precision, StepOptions
from simulator.step.simulate import simulate_step
from simulator.step.streams import pipeline_send_s


def _options(gpus: int, hardware: str = "gb200-nvl72", model: str = "llama3-405b",
             mapping: bool | None = None, tp: int = 4, pp: int = 8, cp: int = 2,
             global_batch: int | None = None) -> StepOptions:
    return StepOptions(
        model, hardware, gpus,
        batch=Batch(1, 8192, None, global_batch or gpus // (tp * pp * cp) * 16),
        parallelism=Parallelism(tp=tp, pp=pp, pp_schedule="interleaved" if pp > 1 else "1f1b",
                                virtual_stages=8 if pp > 1 else None, cp=cp,
                                tp_pp_dp_mapping=mapping),
        precision=Precision(fp8=True))


def test_a_run_whose_stages_straddle_racks_is_priced_with_the_mapping_it_ran():
    """MLPerf v5.0's 2,496-GPU GB200 run (39 racks of 64, PP 8: 312 GPUs a stage) is refused in
    Megatron's default order, whose stages would straddle racks unevenly, and priced with
    the tp-pp-dp order it set, where a 64-GPU replica fills each rack."""
    with pytest.raises(UserError, match="--pp 8 leaves 312 GPUs a stage"):
        _options(2496, global_batch=1248).config()
    cfg = _options(2496, mapping=True, global_batch=1248).config()
    assert cfg.tp_pp_dp_mapping and cfg.domain == 64
    assert simulate_step(cfg).step_time_s > 0


def test_the_mapping_moves_pipeline_sends_inside_the_rack():
    """Default order on 512 GB200 (a stage is a 64-GPU rack): a stage's neighbour is in the
    next rack, over the NICs; tp-pp-dp: tp x cp = 8 ranks on, over NVLink. The send of a
    128 MiB activation is faster inside the rack."""
    topo = build_topology(_options(512).config().hardware, 512)
    stage, size = 64, 128 * 2**20
    across = pipeline_send_s(topo, stage, size)
    inside = pipeline_send_s(topo, stage, size, hop=8, pp=8)
    assert inside < across / 2


def test_without_stages_the_mapping_is_the_default_order():
    plain = simulate_step(_options(64, "dgx-h100", "llama3-8b", None, 1, 1, 2, 32).config())
    mapped = simulate_step(_options(64, "dgx-h100", "llama3-8b", True, 1, 1, 2, 32).config())
    assert mapped.step_time_s == pytest.approx(plain.step_time_s, rel=1e-12)


@pytest.mark.parametrize("kw, msg", [
    # a replica of tp 4 x cp 1 x pp 3 = 12 GPUs neither divides nor fills 8-GPU nodes
    (dict(gpus=96, hardware="dgx-h100", model="llama3-70b", tp=4, pp=3, cp=1, mapping=True),
     "replica's tp x cp x pp = 12 GPUs"),
    (dict(gpus=256, hardware="dgx-h100", model="mixtral-8x7b", tp=2, pp=4, cp=1, mapping=True),
     "not modelled with a model with experts"),
])
def test_layouts_the_mapping_cannot_place_are_refused(kw, msg):
    gpus = kw.pop("gpus")
    with pytest.raises(UserError, match=msg):
        _options(gpus, global_batch=gpus, **kw).config()


def test_the_mapping_puts_data_parallel_peers_in_other_racks():
    """512 GB200 at TP 4, PP 8, CP 2: in the default order a stage (one 64-GPU rack) holds
    its own data-parallel group, reduced over NVLink; in tp-pp-dp order the group's peers
    sit one a rack, so the gradients cross the NICs (more comm) while the bubble, whose sends
    now stay in the rack, shrinks."""
    plain = simulate_step(_options(512, global_batch=896).config())
    mapped = simulate_step(_options(512, mapping=True, global_batch=896).config())
    assert (mapped.exposed_comm_s + mapped.overlapped_comm_s
            > 2 * (plain.exposed_comm_s + plain.overlapped_comm_s))
    assert mapped.pipeline_bubble_s < plain.pipeline_bubble_s


def test_the_planner_lays_out_in_the_replica_order_where_a_stage_cannot_be_placed():
    """scape plan on GB200 NVL72 at 2,496 GPUs (39 racks of 64): layouts whose pipeline
    stage straddles racks unevenly are searched in the tp-pp-dp order where the model replica
    fills a rack or part of one (space.py replica_order), each plan's step set to that order
    and said so (rank_order); layouts the default order places keep it; a model with experts
    (whose groups the order is not modelled for) gets none."""
    from profiles import load_hardware, load_model
    from simulator.network.topology import domain_used
    from simulator.planning.plan_request import PlanRequest
    from simulator.planning.space import layouts

    hw = load_hardware("gb200-nvl72")
    req = PlanRequest(load_model("llama3-405b"), 1e11, (hw,), global_batch=1248, cp=2,
                      max_gpus=2496).validate()
    domain = domain_used(hw, 2496)
    shapes = list(layouts(req, hw, 2496))
    mapped = [s for s in shapes if s[5]]
    assert mapped and any(not s[5] for s in shapes)
    for tp, pp, _, _, _, mapping in shapes:
        stage_fits = domain % (2496 // pp) == 0 or (2496 // pp) % domain == 0
        replica = tp * 2 * pp
        assert mapping == (not stage_fits), (tp, pp)
        assert not mapping or domain % replica == 0 or replica % domain == 0
    assert (4, 8) in {(s[0], s[1]) for s in mapped}  # MLPerf's own: TP 4 x CP 2 x PP 8
    moe = PlanRequest(load_model("qwen3-30b-a3b"), 1e11, (hw,), global_batch=1248,
                      max_gpus=2496).validate()
    assert not any(s[5] for s in layouts(moe, hw, 2496))


def test_a_planned_step_in_the_replica_order_runs_in_it():
    """A plan laid out in the replica order builds its step in it (which validates and
    prices), where the same layout in the default order is refused."""
    from profiles import load_hardware, load_model
    from simulator.planning.plan_request import PlanRequest
    from simulator.planning.space import Candidate

    hw = load_hardware("gb200-nvl72")
    req = PlanRequest(load_model("llama3-405b"), 1e11, (hw,), global_batch=1248, cp=2,
                      max_gpus=2496).validate()
    cand = Candidate(hw, 2496, "dense-adamw", 4, 1, "none", 0.0, 8, "interleaved", 8, 2,
                     mapping=True)
    cfg = cand.step_config(req)
    cfg.validate()
    assert cfg.tp_pp_dp_mapping and simulate_step(cfg).step_time_s > 0
    with pytest.raises(UserError, match="--pp 8 leaves 312 GPUs a stage"):
        Candidate(hw, 2496, "dense-adamw", 4, 1, "none", 0.0, 8, "interleaved", 8,
                  2).step_config(req).validate()


def test_plan_says_which_plans_run_in_the_replica_order(capsys):
    """The table shows rank_order (with its legend) where a plan runs in the tp-pp-dp order,
    and a plan without such a layout (DGX H100, whose 8-GPU nodes place every stage) has no
    such column at all."""
    from tests.test_cli import scape

    code, out, err = scape(capsys, "plan", "-m", "llama3-405b", "-H", "gb200-nvl72",
                           "--tokens", "1e11", "--global-batch", "1248", "--cp", "2",
                           "--max-gpus", "2496", "--format", "csv")
    assert code == 0, err
    rows = pd.read_csv(io.StringIO(out), comment="#")
    assert set(rows["rank_order"]) == {"default", "tp-pp-dp"}
    code, out, err = scape(capsys, "plan", "-m", "llama3-405b", "-H", "gb200-nvl72",
                           "--tokens", "1e11", "--global-batch", "1248", "--cp", "2",
                           "--max-gpus", "2496")
    assert code == 0 and "rank_order: tp-pp-dp is Megatron-Core's" in out, err
    code, out, err = scape(capsys, "plan", "-m", "llama-7b", "-H", "dgx-h100", "--tokens",
                           "1e11", "--max-gpus", "64", "--format", "csv")
    assert code == 0 and "rank_order" not in out, err
