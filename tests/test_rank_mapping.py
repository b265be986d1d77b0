"""Megatron-Core's --use-tp-pp-dp-mapping (ranks ordered tp, cp, pp, dp): a model replica on
consecutive GPUs, its pipeline sends inside an NVLink domain and its data-parallel peers a
replica apart (simulator/step/simulate.py, streams.py pipeline_send_s; step_config.py
_validate_mapping). MLPerf's GB200 Llama 3.1 405B runs set it (profiles/external/
moe-recipes.csv)."""

from __future__ import annotations

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
