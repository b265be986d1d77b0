"""Collective algorithms: closed forms on uncontended topologies, exact small timelines,
contention between concurrent collectives, and monotonicity properties."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from profiles import UserError, load_hardware
from simulator.network.collective import collective_time
from simulator.network.collectives import ALGORITHMS, auto_candidates
from simulator.network.collectives.tree import btree_parents, depth, dtree_parents
from simulator.network.engine import Request, Span, run
from simulator.network.topology import build_topology
from tests.conftest import time_of, topo

S = 2**30
REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("p", [2, 3, 4, 7, 32, 100])
def test_ring_allreduce_closed_form_one_gpu_per_node(p, approx):
    a, b = 5e-6, 47e9
    t = topo(p, nic=b, a_nic=a)
    assert time_of(t, "all_reduce", "ring", S) == approx(2 * (p - 1) * a + 2 * (p - 1) / p * S / b)


@pytest.mark.parametrize("p", [2, 4, 8])
def test_ring_allreduce_closed_form_inside_one_node(p, approx):
    a, b = 3.4e-6, 360e9
    t = topo(p, g=p, k=1, intra=b, a_intra=a)
    assert time_of(t, "all_reduce", "ring", S) == approx(2 * (p - 1) * a + 2 * (p - 1) / p * S / b)


@pytest.mark.parametrize("op", ["reduce_scatter", "all_gather"])
def test_ring_half_collectives_closed_form(op, approx):
    p, a, b = 16, 2e-6, 25e9
    t = topo(p, nic=b, a_nic=a)
    assert time_of(t, op, "ring", S) == approx((p - 1) * a + (p - 1) / p * S / b)


@pytest.mark.parametrize("size", [S, 2**20 * 40])
def test_ring_allreduce_with_a_store_and_forward_chunk(size, approx):
    # each of the 2(P-1) steps also waits for its first chunk (or its whole share, if
    # smaller) to cross one link: 1 GiB pays the full 2 MiB per step, 40 MiB over 64 only S/P
    p, a, b, c = 64, 5e-4, 3.6e9, 2.0 * 2**20
    t = replace(topo(p, nic=b, a_nic=a), nic_chunk_bytes=c)
    fill = min(c, size / p) / b
    assert time_of(t, "all_reduce", "ring", size) == approx(
        2 * (p - 1) * (a + fill) + 2 * (p - 1) / p * size / b)


def test_the_chunk_is_the_network_transport_s_only(approx):
    # a ring inside one node never goes through the NIC's transport: no fill
    p, a, b = 8, 3.4e-6, 360e9
    t = replace(topo(p, g=p, k=1, intra=b, a_intra=a), nic_chunk_bytes=2.0 * 2**20)
    assert time_of(t, "all_reduce", "ring", S) == approx(2 * (p - 1) * a + 2 * (p - 1) / p * S / b)


def test_ring_uses_every_nic_of_a_node(approx):
    # 4 nodes x 8 GPUs, 8 NICs each: 8 channels, each NIC carries one; per ring step a node
    # sends S/P over 8 NICs, while each GPU's NVLink port carries 7 of 8 channel flows.
    g, k, n = 8, 8, 4
    p, b_nic, b_nvl = g * n, 50e9, 400e9
    t = topo(p, g=g, k=k, nic=b_nic, intra=b_nvl)
    step = max(S / (k * p) / b_nic, (k - 1) * S / (k * p) / b_nvl)
    assert time_of(t, "all_reduce", "ring", S) == approx(2 * (p - 1) * step)


@pytest.mark.parametrize(("n", "g", "k"), [(2, 8, 1), (4, 4, 2), (3, 2, 1)])
def test_multi_node_ring_latency_is_its_critical_path(n, g, k):
    # A ring step waits only on the hop before it: the chunk that finishes each pass last
    # walks P - 1 hops and crosses the network once per node (NCCL's tuner counts the same),
    # not P - 1 network hops in lockstep. Tiny size: latency only.
    p, ai, an = n * g, 1e-6, 20e-6
    t = topo(p, g=g, k=k, intra=1e15, nic=1e15, a_intra=ai, a_nic=an)
    per_pass = (p - 1 - n) * ai + n * an
    assert time_of(t, "all_reduce", "ring", 1.0) == pytest.approx(2 * per_pass, rel=1e-9)
    assert time_of(t, "all_gather", "ring", 1.0) == pytest.approx(per_pass, rel=1e-9)
    # the tree: up and down the chain inside each node, up and down the tree between nodes
    assert time_of(t, "all_reduce", "tree", 1.0) == pytest.approx(
        2 * ((g - 1) * ai + max(depth(pp) for pp in dtree_parents(n)) * an), rel=1e-9)
    # a broadcast chain from the first GPU crosses between nodes n - 1 times where its ring
    # enters the node at the root; with a channel per NIC, the other channels' rings enter
    # elsewhere, and their chains cross n times
    cross = n - 1 if k == 1 else n
    assert time_of(t, "broadcast", "ring", 1.0) == pytest.approx(
        (p - 1 - cross) * ai + cross * an, rel=1e-9)


def test_broadcast_closed_form(approx):
    p, a, b = 6, 1e-6, 20e9
    assert time_of(topo(p, nic=b, a_nic=a), "broadcast", "ring", S) == approx((p - 1) * a + S / b)


def test_all_to_all_closed_form(approx):
    # One GPU per node: each NIC sends P-1 flows of S/P; (P-1) latencies.
    p, a, b = 5, 1e-6, 20e9
    assert time_of(topo(p, nic=b, a_nic=a), "all_to_all", "pairwise", S) == approx(
        (p - 1) * a + (p - 1) * (S / p) / b)


def test_all_to_all_across_nodes_costs_a_call_and_each_peer_off_the_node(approx):
    """With a profile's fitted pair (alltoall.py), an all-to-all spanning nodes pays
    call + peer x (P - ranks on its node) instead of P - 1 network steps; inside one node, or
    without the pair, the P - 1 steps stay."""
    call, peer, b = 150e-6, 3.5e-6, 20e9
    p, g = 64, 8  # 8 nodes of 8 GPUs, a NIC each: 63 x 14 us in turn against 150 + 56 x 3.5
    steps = topo(p, g=g, k=g, nic=b, a_nic=14e-6, intra=360e9, a_intra=3e-6)
    fitted = replace(steps, a2a_call_s=call, a2a_peer_s=peer)
    bytes_only = time_of(replace(fitted, a2a_call_s=0.0, a2a_peer_s=0.0), "all_to_all",
                         "pairwise", S)
    assert time_of(fitted, "all_to_all", "pairwise", S) == approx(
        bytes_only + call + peer * (p - g))
    assert time_of(steps, "all_to_all", "pairwise", S) > time_of(fitted, "all_to_all",
                                                                   "pairwise", S)
    one_node = topo(g, g=g, k=1, intra=360e9, a_intra=3e-6)
    assert time_of(replace(one_node, a2a_call_s=call, a2a_peer_s=peer), "all_to_all",
                   "pairwise", S) == approx(time_of(one_node, "all_to_all", "pairwise", S))


def test_the_all_to_all_pair_is_given_whole(tmp_path):
    """A profile with one of [nccl] a2a_call_us and a2a_peer_us is refused with the rule."""
    from profiles import ProfileError

    text = (REPO / "profiles" / "hardware" / "dgx-h100.toml").read_text()
    half = tmp_path / "half.toml"
    half.write_text(text.replace("a2a_peer_us = 3.46\n", "").replace(
        'a2a_peer_us_source = "see a2a_call_us_source"\n', ""))
    with pytest.raises(ProfileError, match="give both or neither"):
        load_hardware(str(half))


def test_hierarchical_closed_form(approx):
    g, k, n = 4, 2, 3  # 3 nodes of 4 GPUs with 2 NICs each
    p, bi, bn, ai, an = g * n, 200e9, 20e9, 1e-6, 5e-6
    t = topo(p, g=g, k=k, intra=bi, nic=bn, a_intra=ai, a_nic=an)
    intra = 2 * ((g - 1) * ai + (g - 1) / g * S / bi)
    # G inter-node rings of S/G; G/K rings share each NIC.
    inter = 2 * ((n - 1) * an + (n - 1) / n * (S / g) / (bn * k / g))
    assert time_of(t, "all_reduce", "hierarchical", S) == approx(intra + inter)


@pytest.mark.parametrize(("p", "g"), [(6, 1), (8, 8)])
def test_hierarchical_degenerates_to_ring(p, g, approx):
    t = topo(p, g=g, k=1, intra=100e9, nic=10e9, a_intra=1e-6, a_nic=3e-6)
    ring = time_of(t, "all_reduce", "ring", S)
    assert time_of(t, "all_reduce", "hierarchical", S) == approx(ring)


def test_btree_matches_nccl_layout():
    # NCCL's in-order binary tree of 8 ranks: 0 <- 4 <- {2, 6}, 2 <- {1, 3}, 6 <- {5, 7}.
    assert list(btree_parents(8)) == [-1, 2, 4, 2, 0, 6, 4, 6]
    assert depth(btree_parents(8)) == 3
    one, two = dtree_parents(4)
    assert list(one) == [-1, 2, 0, 2]
    assert list(two) == [1, 3, 1, -1]  # mirror of tree one: rank r plays 3 - r


def test_tree_allreduce_exact_four_ranks(approx):
    # Trees over 4 nodes (see test above): ranks 1 and 2 each send 4 flows of S/2
    # (up in both trees, down to two children in one), so time = S/2 / (B/4) = 2S/B;
    # latency 2 * depth 2 = 4 hops.
    a, b = 2e-6, 10e9
    t = topo(4, nic=b, a_nic=a)
    assert time_of(t, "all_reduce", "tree", S) == approx(4 * a + 2 * S / b)


def test_ring_allreduce_timeline_three_ranks(approx):
    a, b = 1e-6, 10e9
    t1 = 2 * a + 2 / 3 * S / b
    sim = run(topo(3, nic=b, a_nic=a), [Request("all_reduce", "ring", S, name="ar")])
    assert sim.timeline == [
        Span("ar", "reduce-scatter", 0.0, approx(t1), approx(3 * 2 / 3 * S)),
        Span("ar", "all-gather", approx(t1), approx(2 * t1), approx(3 * 2 / 3 * S)),
    ]


def test_hierarchical_timeline_two_nodes_of_two(approx):
    # 2 nodes x 2 GPUs, 1 NIC per node. Intra phases: 1 step, S/2 per flow at B_i.
    # Inter phases: 2 rings (one per local rank) share each node's NIC: S/4 per flow at B_n/2.
    ai, an, bi, bn = 1e-6, 4e-6, 100e9, 10e9
    t = topo(4, g=2, k=1, intra=bi, nic=bn, a_intra=ai, a_nic=an)
    intra = ai + (S / 2) / bi
    inter = an + (S / 4) / (bn / 2)
    sim = run(t, [Request("all_reduce", "hierarchical", S, name="h")])
    ends = np.cumsum([intra, inter, inter, intra])
    assert [(s.phase, s.start_s, s.end_s) for s in sim.timeline] == [
        ("intra reduce-scatter", 0.0, approx(ends[0])),
        ("inter reduce-scatter", approx(ends[0]), approx(ends[1])),
        ("inter all-gather", approx(ends[1]), approx(ends[2])),
        ("intra all-gather", approx(ends[2]), approx(ends[3])),
    ]


def test_two_rank_allreduces_timeline_concurrent(approx):
    # Same 2 ranks, second starts when the first is halfway through its first phase.
    b = 10.0
    t = topo(2, nic=b)
    s = 40.0  # each phase moves 20 bytes per flow
    sim = run(t, [Request("all_reduce", "ring", s, name="A"),
                  Request("all_reduce", "ring", s, start_s=1.0, name="B")])
    # A alone 0-1 (10 of 20 bytes), shared at 5 B/s: A's RS ends at 3; A's AG and B's RS
    # then share: both have 20 and 10 left... B's RS ends at 5 (10 at 5 B/s), A's AG has 10
    # left, B's AG starts with 20: shared until A ends at 7; B has 10 left alone: ends at 8.
    assert [(s.collective, s.phase, s.start_s, s.end_s) for s in sim.timeline] == [
        ("A", "reduce-scatter", 0.0, approx(3.0)),
        ("B", "reduce-scatter", 1.0, approx(5.0)),
        ("A", "all-gather", approx(3.0), approx(7.0)),
        ("B", "all-gather", approx(5.0), approx(8.0)),
    ]


def test_concurrent_collectives_on_disjoint_ranks_do_not_interact(approx):
    t = topo(4, nic=10e9, a_nic=1e-6)
    alone = time_of(t, "all_reduce", "ring", S, group=[0, 1])
    sim = run(t, [Request("all_reduce", "ring", S, group=np.array([0, 1]), name="x"),
                  Request("all_reduce", "ring", S, group=np.array([2, 3]), name="y")])
    assert [r.time_s for r in sim.results] == [approx(alone), approx(alone)]


def test_concurrent_collectives_sharing_links_slow_each_other(approx):
    a, b, p = 1e-6, 10e9, 4
    t = topo(p, nic=b, a_nic=a)
    sim = run(t, [Request("all_reduce", "ring", S, name="x"),
                  Request("all_reduce", "ring", S, name="y")])
    # Same links, same start: each gets half the bandwidth for the whole run.
    expected = 2 * (p - 1) * a + 2 * (p - 1) / p * S / (b / 2)
    assert [r.time_s for r in sim.results] == [approx(expected), approx(expected)]


def test_auto_picks_the_fastest():
    hw = load_hardware("dgx-h100")
    for size in (1024, S):
        auto = collective_time(hw, 1024, "all_reduce", "auto", size)
        each = [collective_time(hw, 1024, "all_reduce", a, size).time_s
                for a in auto_candidates("all_reduce")]
        assert auto.time_s == min(each)
        assert auto.algo in auto_candidates("all_reduce")
    # nvls needs an NVSwitch node: the model's own `auto` never picks it, NCCL's tuner may
    assert "nvls" in ALGORITHMS["all_reduce"] and "nvls" not in auto_candidates("all_reduce")


def test_busbw_definitions():
    res = collective_time(topo(4, nic=10e9), 4, "all_reduce", "ring", S)
    assert res.algbw_GBps == pytest.approx(S / res.time_s / 1e9)
    assert res.busbw_GBps == pytest.approx(res.algbw_GBps * 2 * 3 / 4)
    assert res.busbw_GBps == pytest.approx(10.0)  # equals the link rate when uncontended


def test_bad_requests_are_user_errors():
    t = topo(4)
    with pytest.raises(UserError, match="unknown op"):
        collective_time(t, 4, "all_sum", "ring", S)
    with pytest.raises(UserError, match="no algorithm 'tree' for all_gather"):
        collective_time(t, 4, "all_gather", "tree", S)
    with pytest.raises(UserError, match="positive"):
        collective_time(t, 4, "all_reduce", "ring", -5)
    with pytest.raises(UserError, match="at least 2 GPUs"):
        collective_time(t, 1, "all_reduce", "ring", S)
    with pytest.raises(UserError, match="multiple of the node size"):
        topo(12, g=8, k=8, intra=1e9)
    for group, message in (([0, 9], "outside"), ([1, 1], "twice"), ([], "non-empty")):
        with pytest.raises(UserError, match=message):
            run(t, [Request("all_reduce", "ring", S, group=np.array(group, dtype=int))])


# ---- properties ----
OPS = [(op, algo) for op, algos in ALGORITHMS.items() for algo in algos]
shapes = st.sampled_from([(1, 1, 2), (1, 1, 5), (4, 2, 2), (4, 4, 3), (8, 8, 2), (2, 1, 4),
                          (8, 8, 1), (4, 1, 1)])


def defined(shape, op_algo) -> bool:
    """NVLink SHARP exists inside one node of several GPUs only, CollNet between several such
    nodes; everything else everywhere."""
    g, _, n = shape
    if op_algo[1] == "collnet_direct":  # SHARP between nodes: several nodes of several GPUs
        return n > 1 and g > 1
    return op_algo[1] != "nvls" or (n == 1 and g > 1)


@settings(max_examples=60, deadline=None)
@given(
    shape=shapes,
    op_algo=st.sampled_from(OPS),
    size=st.integers(1, 2**32),
    bw=st.floats(1e8, 1e12),
    factor=st.floats(1.0, 100.0),
    alpha=st.floats(0, 1e-4),
    leaf=st.integers(1, 4),
)
def test_more_bandwidth_is_never_slower(shape, op_algo, size, bw, factor, alpha, leaf):
    assume(defined(shape, op_algo))
    g, k, n = shape
    def t(scale):
        return topo(g * n, g=g, k=k, leaf=leaf, intra=8 * bw * scale, nic=bw * scale,
                    up=bw * scale, a_intra=alpha / 2, a_nic=alpha)
    slow = time_of(t(1.0), *op_algo, size)
    fast = time_of(t(factor), *op_algo, size)
    assert fast <= slow * (1 + 1e-12)


@settings(max_examples=60, deadline=None)
@given(
    shape=shapes,
    op_algo=st.sampled_from(OPS),
    size=st.integers(1, 2**32),
    extra=st.integers(0, 2**32),
    alpha=st.floats(0, 1e-4),
)
def test_more_bytes_is_never_faster(shape, op_algo, size, extra, alpha):
    assume(defined(shape, op_algo))
    g, k, n = shape
    t = topo(g * n, g=g, k=k, leaf=2, intra=300e9, nic=40e9, up=60e9, a_intra=1e-6, a_nic=alpha)
    assert time_of(t, *op_algo, size + extra) >= time_of(t, *op_algo, size) * (1 - 1e-12)


@settings(max_examples=60, deadline=None)
@given(
    p=st.integers(2, 64),
    single_node=st.booleans(),
    size=st.integers(1, 2**34),
    bw=st.floats(1e8, 1e12),
    alpha=st.floats(0, 1e-4),
    op=st.sampled_from(["all_reduce", "reduce_scatter", "all_gather"]),
)
def test_ring_busbw_never_exceeds_link_bandwidth(p, single_node, size, bw, alpha, op):
    if single_node:
        t = topo(p, g=p, k=1, intra=bw, nic=bw / 10, a_intra=alpha)
    else:
        t = topo(p, nic=bw, a_nic=alpha)
    res = collective_time(t, p, op, "ring", size)
    assert res.busbw_GBps * 1e9 <= bw * (1 + 1e-9)


@pytest.mark.parametrize("name", ["dgx-h100", "dgx-a100"])
def test_ring_busbw_within_10pct_of_published_reference(name):
    hw = load_hardware(name)
    ref = hw.reference
    res = collective_time(hw, ref.ring_allreduce_gpus, "all_reduce", "ring", S)
    assert abs(res.busbw_GBps / ref.ring_allreduce_busbw_GBps - 1) <= 0.10


def test_several_nics_per_gpu_add_up():
    """AWS p5: 4 x 100G EFA per GPU act as one 4 x 12 GB/s link per GPU (the leaf's uplinks
    keep all 32 NICs of each of its 32 nodes)."""
    hw = load_hardware("aws-p5")
    t = build_topology(hw, 16)
    assert t.nics_per_node == 8 and t.nic_Bps == pytest.approx(4 * 12e9)
    assert t.uplink_Bps == pytest.approx(32 * 32 * 12e9)  # the leaf's 32 nodes x 32 NICs


def test_nvls_tree_between_nodes_is_a_double_binary_tree():
    """NVLS_TREE links every node's heads with NCCL's double binary tree (connect.cc
    connectNvls, ncclGetDtree): on two nodes each head sends and receives its 1/8 share once,
    and the NVSwitch (at NVLS's efficiency) is the bottleneck; from three nodes a head internal
    in one tree has two children, its NIC carries twice its share, and the bus bandwidth tops
    out at the node's NICs (8 x 47 GB/s on DGX H100), as a ring's does. NVLS's efficiency slows
    the switch traffic only, not the NICs'."""
    from simulator.network import nccl
    from simulator.network.collective import sweep

    hw = load_hardware("dgx-h100")
    size = 2**34
    eff = nccl.nvls_efficiency("hopper", hw.nccl.channels)
    two = sweep(hw, 16, "all_reduce", "nvls_tree", [size])[0]
    # the switch: S (1 + 1/8) through each port at eff x 360 GB/s
    assert two.time_s == pytest.approx(size * 9 / 8 / (eff * 360e9), rel=0.01)
    for gpus in (32, 64):
        many = sweep(hw, gpus, "all_reduce", "nvls_tree", [size])[0]
        # a head's NIC: twice its 1/8 share at 47 GB/s
        assert many.time_s == pytest.approx(2 * size / 8 / 47e9, rel=0.01)
        ring = sweep(hw, gpus, "all_reduce", "ring", [size])[0]
        assert many.busbw_GBps == pytest.approx(ring.busbw_GBps, rel=0.05)
