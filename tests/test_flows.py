"""Max-min fair sharing, checked against hand-computed cases."""

from __future__ import annotations

import numpy as np
import simpy

from simulator.network.flows import FlowNetwork, maxmin_rates
from simulator.network.topology import Demand
from tests.conftest import topo


def demand(name, links, size, load=None):
    links = np.asarray(links)
    load = np.ones(len(links)) if load is None else np.asarray(load, dtype=float)
    return Demand(name, links, load, float(size), 1, 0.0)


def test_two_flows_on_one_link_share_it_equally(approx):
    rates = maxmin_rates(np.array([10.0]), [demand("a", [0], 1), demand("b", [0], 1)])
    assert list(rates) == [5.0, 5.0]


def test_textbook_maxmin():
    # Link 0 (cap 1) carries a and b; link 1 (cap 2) carries b and c.
    # Filling: link 0 saturates at 0.5 each; c then takes what b leaves on link 1: 1.5.
    cap = np.array([1.0, 2.0])
    rates = maxmin_rates(cap, [demand("a", [0], 1), demand("b", [0, 1], 1), demand("c", [1], 1)])
    assert np.allclose(rates, [0.5, 0.5, 1.5], rtol=1e-12)


def test_load_counts_flows_of_a_class():
    # A class with 3 flows on link 0 gets a third of what a lone flow would.
    rates = maxmin_rates(np.array([9.0]), [demand("x", [0], 1, load=[3])])
    assert rates[0] == 3.0


def _finish_times(capacity, starts_and_demands):
    env = simpy.Environment()
    net = FlowNetwork(env, np.asarray(capacity, dtype=float))
    log = []

    def go(start, d):
        yield env.timeout(start)
        yield net.transfer(d)
        log.append((d.name, env.now))

    for start, d in starts_and_demands:
        env.process(go(start, d))
    env.run()
    return log


def test_timeline_short_flow_frees_bandwidth_for_long_one(approx):
    # B = 10 B/s; sizes 10 and 30: both at 5 B/s until the short one ends at t=2,
    # then the long one has 20 bytes left at 10 B/s: ends at t=4.
    log = _finish_times([10.0], [(0, demand("short", [0], 10)), (0, demand("long", [0], 30))])
    assert log == [("short", approx(2.0)), ("long", approx(4.0))]


def test_timeline_late_arrival_slows_the_first(approx):
    # 'first' (40 bytes) alone at 10 B/s for 1 s (30 left); 'late' (10 bytes) joins:
    # both at 5 B/s, late ends at t=3 (first has 20 left), first ends at t=5.
    log = _finish_times([10.0], [(0, demand("first", [0], 40)), (1, demand("late", [0], 10))])
    assert log == [("late", approx(3.0)), ("first", approx(5.0))]


def test_flow_crossing_oversubscribed_uplink(approx):
    # 2 nodes per leaf, 1 NIC of B each, oversubscription 4: a leaf's uplinks carry 2B/4 = B/2.
    b = 10e9
    t = topo(4, leaf=2, nic=b, up=2 * b / 4)
    size = 1e9
    cross = t.pairs("cross", np.array([0]), np.array([2]), size)
    local = t.pairs("local", np.array([0]), np.array([1]), size)
    assert _finish_times(t.capacity(), [(0, cross)]) == [("cross", approx(size / (b / 2)))]
    assert _finish_times(t.capacity(), [(0, local)]) == [("local", approx(size / b))]
    # Two nodes of leaf 0 both send across: they split the B/2 uplink.
    both = t.pairs("both", np.array([0, 1]), np.array([2, 3]), size)
    assert _finish_times(t.capacity(), [(0, both)]) == [("both", approx(size / (b / 4)))]


def test_disjoint_links_do_not_interact(approx):
    t = topo(4, nic=10.0)
    a = t.pairs("a", np.array([0]), np.array([1]), 10)
    b = t.pairs("b", np.array([2]), np.array([3]), 10)
    assert sorted(_finish_times(t.capacity(), [(0, a), (0, b)])) == [
        ("a", approx(1.0)), ("b", approx(1.0))]


def test_topology_layout_and_routes():
    t = topo(16, g=4, k=2, leaf=2, intra=100.0, nic=10.0, up=15.0)
    assert (t.nodes, t.leaves, t.n_nics) == (4, 2, 8)
    cap = t.capacity()
    assert len(cap) == t.n_links == 2 * 16 + 2 * 8 + 2 * 2
    # GPU 5 (node 1, local 1) uses NIC 1*2 + 1*2//4 = 2; GPU 7 uses NIC 3.
    assert list(t.nic_of(np.array([5, 6, 7]))) == [2, 3, 3]
    d = t.pairs("x", np.array([1, 1]), np.array([2, 9]), 1.0)  # intra; node 0 -> node 2 (leaf 1)
    assert sorted(t.tier_of(int(link)) for link in d.links) == sorted(
        ["intra_tx", "intra_rx", "nic_tx", "nic_rx", "leaf_up", "leaf_down"])
    assert d.load.sum() == 2 + 4  # intra flow: 2 ports; cross-leaf flow: 2 NICs + 2 uplinks
