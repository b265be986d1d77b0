"""A ring collective over many equal groups is built in one pass (simulator/network/
collectives/ring.py batched_phases) and must give the phases PhaseCache gets by building each group
alone and merging them (simulator/network/engine.py _merge): same links, loads, flows,
latencies and steps."""

from __future__ import annotations

import numpy as np
import pytest

from profiles import load_hardware
from simulator.network.collectives import ALGORITHMS
from simulator.network.engine import PhaseCache, _merge
from simulator.network.topology import build_topology


def _one_by_one(topo, op: str, groups: list[np.ndarray]):
    per_group = [ALGORITHMS[op]["ring"](topo, 1.0, g) for g in groups]
    return [[_merge(d.name, [pg[i].demands[j] for pg in per_group])
             for j, d in enumerate(ph.demands)] for i, ph in enumerate(per_group[0])], per_group


def _strided(gpus: int, every: int) -> list[np.ndarray]:
    """Data-parallel groups beside tensor parallelism of `every`: rank r's group is r mod every."""
    return [np.arange(i, gpus, every) for i in range(every)]


@pytest.mark.parametrize("profile, gpus, groups", [
    ("dgx-h100", 64, _strided(64, 8)),  # one GPU per node in each group, 8 groups
    ("dgx-h100", 64, _strided(64, 2)),  # four per node
    ("dgx-h100", 64, [np.arange(0, 32), np.arange(32, 64)]),  # whole nodes
    ("gb200-nvl72", 144, _strided(144, 4)),  # across two NVLink domains
    ("aws-p5", 128, _strided(128, 16)),
])
@pytest.mark.parametrize("op", ["all_reduce", "reduce_scatter", "all_gather"])
def test_batched_ring_phases_are_the_merged_phases(profile, gpus, groups, op):
    topo = build_topology(load_hardware(profile), gpus)
    merged, per_group = _one_by_one(topo, op, groups)
    got = PhaseCache(topo).phases(op, "ring", groups, 1.0)
    assert [p.name for p in got] == [p.name for p in per_group[0]]
    for phase, first, demands in zip(got, per_group[0], merged, strict=True):
        assert (phase.steps, phase.net_steps, phase.intra_latency_s) == (
            first.steps, first.net_steps, first.intra_latency_s)
        for a, b in zip(phase.demands, demands, strict=True):
            assert np.array_equal(a.links, b.links)
            assert np.allclose(a.load, b.load, rtol=0, atol=0)
            assert (a.n_flows, a.hop_latency_s, a.chunk_bytes, a.chunk_Bps, a.bytes_each) == (
                b.n_flows, b.hop_latency_s, b.chunk_bytes, b.chunk_Bps, b.bytes_each)


def test_groups_of_other_shapes_are_built_one_by_one():
    topo = build_topology(load_hardware("dgx-h100"), 64)
    # one group inside a node, one with a GPU on each of eight nodes: rings of the same
    # shape that cross the network a different number of times
    groups = [np.arange(0, 8), np.array([*range(8, 64, 8), 1])]
    from simulator.network.collectives import ring

    assert ring.batched_phases(topo, 1.0, groups, ("all-gather",)) is None
