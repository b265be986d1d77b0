"""NCCL's tuner (simulator/network/nccl.py): its cost model against figures worked out by hand from
tuning.cc's constants, the choices it makes, and what a protocol does to a simulated call."""

from __future__ import annotations

from pathlib import Path

import pytest

from profiles import UserError, load_hardware
from simulator.network import nccl
from simulator.network.collective import sweep

H100 = load_hardware("dgx-h100")


def test_latency_matches_tuning_cc_by_hand():
    """8 GPUs on one NVSwitch node, all-reduce: ring 2(P-1) steps, tree 2(P-1) chain steps,
    NVLS one NVLS hop (v2.25.1 baseLat + nsteps * hwLat)."""
    m = nccl.machine(H100, 8)
    assert nccl.latency_us("all_reduce", "ring", "ll", m) == pytest.approx(6.6 + 14 * 0.6)
    assert nccl.latency_us("all_reduce", "ring", "ll128", m) == pytest.approx(14 + 14 * 1.9)
    assert nccl.latency_us("all_reduce", "ring", "simple", m) == pytest.approx(8.4 + 14 * 3.4)
    assert nccl.latency_us("all_reduce", "tree", "ll", m) == pytest.approx(6.8 + 2 * 7 * 0.6)
    assert nccl.latency_us("all_reduce", "nvls", "simple", m) == pytest.approx(25.0)
    # two nodes: two of the ring's 2(P-1) steps cross the network, at NET's hwLat; the others
    # pay at least the network overhead (getNetOverhead, 1 us on Intel hosts)
    m2 = nccl.machine(H100, 16)
    assert nccl.latency_us("all_reduce", "ring", "ll", m2) == pytest.approx(
        6.6 + 28 * max(0.6, 1.0) + 2 * 2.7)


def test_bandwidth_factors():
    m = nccl.machine(H100, 8)
    simple = nccl.busbw("all_reduce", "ring", "simple", m)
    assert simple == pytest.approx(360.0)  # the profile's effective NVLink rate
    assert nccl.busbw("all_reduce", "ring", "ll", m) == pytest.approx(141.0)  # llMaxBw, Hopper
    assert nccl.busbw("all_reduce", "ring", "ll128", m) == pytest.approx(0.92 * 360)


def test_graph_bandwidth_between_nodes_is_the_nodes_nics():
    """NCCL's graph search prices a ring across nodes at one speed inside and between nodes,
    channels added until they fill the node's NICs (search.cc): on DGX A100 (8 x 24 GB/s) a
    ring on 2 or 4 nodes is 192 GB/s, not NVLink's 240 nor one GPU's 24; a tree on 2 nodes may
    run up to twice the NICs inside the node, so NVLink's 240 caps it; from 3 nodes it is
    NIC-bound too (0.92 x 0.85 with Ampere's per-channel cap of 17.8 on 3+ nodes)."""
    a100 = load_hardware("dgx-a100")
    two, four = nccl.machine(a100, 16), nccl.machine(a100, 32)
    for m in (two, four):
        assert nccl.busbw("all_reduce", "ring", "simple", m) == pytest.approx(192.0)
        assert nccl.busbw("all_gather", "ring", "ll128", m) == pytest.approx(0.92 * 192)
    assert nccl.busbw("all_reduce", "tree", "simple", two) == pytest.approx(240 * 0.92 * 0.85)
    assert nccl.busbw("all_reduce", "tree", "simple", four) == pytest.approx(192 * 0.92 * 0.85)
    # a node's NICs bound a ring only up to what NVLink carries (H100: 8 x 47 > 360)
    assert nccl.busbw("all_reduce", "ring", "simple", nccl.machine(H100, 32)) == pytest.approx(
        360.0)


def test_choices_follow_size():
    m = nccl.machine(H100, 8)
    assert nccl.choose("all_reduce", 1024, m) == ("ring", "ll")
    assert nccl.choose("all_reduce", 2**33, m) == ("nvls", "simple")
    assert nccl.choose("all_reduce", 2**33, m, algos=("ring",)) == ("ring", "simple")
    assert nccl.choose("all_gather", 2**33, m, algos=("ring",)) == ("ring", "simple")
    # NVLS is one node's: across nodes NVLS inside them and a tree between them
    assert nccl.choose("all_reduce", 2**33, nccl.machine(H100, 16)) == ("nvls_tree", "simple")


def test_no_ll128_over_sockets():
    socket = load_hardware("vista-gh200-socket")
    assert socket.nccl is None  # no tuner there: the Simple protocol, as before
    m = nccl.machine(H100, 16)
    assert m.ll128
    from dataclasses import replace

    m_sock = replace(m, ll128=False)
    assert not nccl.available("all_reduce", "ring", "ll128", m_sock)


def test_sweep_names_the_choice_and_protocol_slows_what_it_should():
    auto = sweep(H100, 8, "all_reduce", "auto", [1024, 2**30])
    assert (auto[0].algo, auto[0].proto) == ("ring", "ll")
    assert (auto[1].algo, auto[1].proto) == ("nvls", "simple")
    ll, simple = (sweep(H100, 8, "all_reduce", "ring", [2**30], p)[0] for p in ("ll", "simple"))
    # LL at 1 GiB: capped at llMaxBw, 141 of Simple's 360 GB/s bus bandwidth
    assert ll.busbw_GBps == pytest.approx(141.0, rel=0.01)
    assert simple.busbw_GBps > 2 * ll.busbw_GBps


def test_nvls_rate_is_the_switch_traffic_at_nccl_efficiency():
    """One phase moving S(1 + 1/P) each way per GPU at 0.85 x 15/16 of the NVLink rate."""
    (r,) = sweep(H100, 8, "all_reduce", "nvls", [2**33])
    algbw = 360e9 * 0.85 * 15 / 16 / (1 + 1 / 8)
    t = 2**33 / algbw + 25e-6
    assert r.time_s == pytest.approx(t, rel=1e-6)


def test_proto_needs_an_nccl_profile():
    with pytest.raises(UserError, match="no \\[nccl\\] table"):
        sweep(load_hardware("vista-gh200"), 32, "all_reduce", "ring", [1024], "ll")
    with pytest.raises(UserError, match="--proto must be"):
        sweep(H100, 8, "all_reduce", "ring", [1024], "fast")


def test_nvls_tree_pipeline_chunks_and_fill_follow_nccls_rules():
    """enqueue.cc calcCollChunking per channel (1/16 of the call), 8 heads on a DGX H100 node:
    128 KiB chunks from 64 MiB, 64 KiB from 8 MiB, 32 KiB below; from 4 nodes 64 KiB at most;
    the fill is 2 log2(nodes) waves, a share that falls as the call grows."""
    from simulator.network import nccl

    two = nccl.machine(H100, 16)
    assert two.nvls_heads == 8
    assert [nccl.nvls_tree_chunk(s, two) for s in (2**20, 2**23, 2**26, 2**30)] == [
        2**15, 2**16, 2**17, 2**17]
    assert nccl.nvls_tree_chunk(2**30, nccl.machine(H100, 32)) == 2**16
    fills = [nccl.nvls_tree_fill(s, two) for s in (2**23, 2**26, 2**30)]
    assert fills == sorted(fills, reverse=True) and fills[0] == pytest.approx(2 * 1.0)
    assert nccl.nvls_tree_fill(2**30, nccl.machine(H100, 8)) == 0.0  # one node: no tree


def test_nvls_tree_across_nodes():
    """Two nodes: NVLS inside each node pipelined with the NIC exchange of each GPU's 1/G
    share; at 8 GiB the switch traffic bounds it, so its time is NVLS's on one node plus the
    tree's latency (25 us + 2 log2(2) x 14 us)."""
    (r,) = sweep(H100, 16, "all_reduce", "auto", [2**33])
    assert (r.algo, r.proto) == ("nvls_tree", "simple")
    switch = 2**33 * (1 + 1 / 8) / (360e9 * 0.85 * 15 / 16)
    nic = 2**33 / 8 / 47e9 / (0.85 * 15 / 16)  # the same wire factor applies to its bytes
    assert switch > nic
    # the pipeline's fill: 2 log2(2) waves of 16 channels x 8 heads x 128 KiB chunks
    fill = 2 * 16 * 8 * 2**17 / 2**33
    assert r.time_s == pytest.approx(switch * (1 + fill) + (25 + 2 * 14) * 1e-6, rel=1e-6)
    with pytest.raises(UserError, match="no algorithm for all_reduce with algo nvls"):
        sweep(H100, 16, "all_reduce", "nvls", [2**20])  # NCCL_ALGO=NVLS on two nodes
    from simulator.network.collective import collective_time

    with pytest.raises(UserError, match="runs inside one node"):  # the builder itself
        collective_time(H100, 16, "all_reduce", "nvls", 2**20)


def test_collnet_direct_only_where_sharp_is_on_and_priced_as_ncclS_tuner():
    """CollNet Direct (SHARP): off unless the profile turns it on (NCCL_COLLNET_ENABLE=1);
    then NCCL's latency 2(3.7 + 7 x 0.4) + 31 = 44 us on 8 GPUs per node, busbw NVLink /
    (r - (r - 1)/2) x 0.85 with r = 8/16, and the simulated rate bound by the NVLink scatter
    and gather (2 S 7/8 each way), about NCCL's algbw (busbw / 2)."""
    from dataclasses import replace as swap

    from simulator.network import nccl

    with pytest.raises(UserError, match="NCCL_COLLNET_ENABLE"):
        sweep(H100, 16, "all_reduce", "collnet_direct", [2**20])
    sharp = swap(H100, nccl=swap(H100.nccl, collnet=True))
    m = nccl.machine(sharp, 16)
    assert nccl.latency_us("all_reduce", "collnet_direct", "simple", m) == pytest.approx(44.0)
    bus = nccl.busbw("all_reduce", "collnet_direct", "simple", m)
    assert bus == pytest.approx(360 / 0.75 * 0.85)
    (r,) = sweep(sharp, 16, "all_reduce", "collnet_direct", [2**33])
    nvlink = 2 * 2**33 * 7 / 8 / 360e9
    assert r.time_s == pytest.approx(nvlink + 44e-6, rel=1e-6)
    assert 2**33 / r.time_s / 1e9 == pytest.approx(bus / 2, rel=0.02)
    assert not nccl.available("all_reduce", "collnet_direct", "simple", nccl.machine(sharp, 8))


def test_tree_bandwidth_time_follows_nccls_size_correction():
    """Tree all-reduce across two nodes: the bytes' time at 1 MiB (log2(2^20 / 64) = 14,
    treeCorrectionFactor LL128 0.6) is 1/0.6 of what the same call's bytes take at the rate of
    a size NCCL does not correct (1.0 from 2^28 bytes), and the choice prices it the same."""
    m = nccl.machine(H100, 16)
    assert nccl.tree_correction("all_reduce", "tree", "ll128", 2**20) == pytest.approx(0.6)
    assert nccl.tree_correction("all_reduce", "tree", "ll128", 2**28) == 1.0
    assert nccl.tree_correction("all_reduce", "ring", "ll128", 2**20) == 1.0
    mid = nccl.protocol("all_reduce", "tree", "ll128", 2**20, m)
    large = nccl.protocol("all_reduce", "tree", "ll128", 2**28, m)
    # the correction is a floor on the call's bandwidth time, not bytes on the links (issue
    # 45): the wire is LL128's own 128/120 at every size
    assert mid.wire == large.wire == pytest.approx(128 / 120)
    assert mid.min_s / 2**20 == pytest.approx(large.min_s / 2**28 / 0.6)
    lat = nccl.call_latency_us("all_reduce", "tree", "ll128", 2**20, m)
    bw = nccl.algbw("all_reduce", "tree", "ll128", m)
    assert nccl.estimate_us("all_reduce", "tree", "ll128", 2**20, m) == pytest.approx(
        lat + 2**20 / (1000 * bw * 0.6))
    # the simulated calls: per byte, 1-2 MiB (both 0.6) cost 1/0.6 of 256-512 MiB (both 1.0)
    t = {r.size_bytes: r.time_s for r in sweep(H100, 16, "all_reduce", "tree",
                                               [2**20, 2**21, 2**28, 2**29], "ll128")}
    per_byte_mid = (t[2**21] - t[2**20]) / 2**20
    per_byte_large = (t[2**29] - t[2**28]) / 2**28
    assert per_byte_mid == pytest.approx(per_byte_large / 0.6, rel=1e-6)


def test_platform_proto_limits_the_choice_and_a_typed_one_replaces_it():
    """gcp-a3-mega ships NCCL_PROTO=Simple,LL128 (Google's TCPXO environment): NCCL never
    picks LL there, whatever the size; --proto ll (NCCL_PROTO=LL) replaces the platform's."""
    a3 = load_hardware("gcp-a3-mega")
    assert a3.transport.kind == "tcpx" and a3.nccl.protocols == ("simple", "ll128")
    m = nccl.machine(a3, 16)
    assert not nccl.available("all_reduce", "tree", "ll", m)
    picks = {nccl.choose(op, s, m)[1] for op in ("all_reduce", "all_gather")
             for s in (8, 2**10, 2**16, 2**20, 2**30)}
    assert "ll" not in picks and "ll128" in picks
    # on an IB machine of the same shape NCCL's own choice at 1 KiB is LL
    assert nccl.choose("all_reduce", 2**10, nccl.machine(H100, 16))[1] == "ll"
    assert nccl.choose("all_reduce", 2**10, m, protos=("ll",)) == ("tree", "ll")


def test_a_ring_pays_its_network_crossings_on_the_critical_path():
    """NCCL's tuner counts nNodes - 1 network steps for a ring all-gather and 2(nNodes - 1) for
    an all-reduce; the chunk that finishes last crosses every one of the ring's nNodes
    crossings (twice over in all-reduce), and that is what the simulated call pays. The
    tuner's own estimate, and so its choice, keep NCCL's count."""
    assert [nccl.ring_crossings("all_gather", n) for n in (1, 2, 4)] == [0, 1, 3]
    assert [nccl.ring_crossings("all_gather", n, paid=True) for n in (1, 2, 4)] == [0, 2, 4]
    assert [nccl.ring_crossings("reduce_scatter", n, paid=True) for n in (1, 2, 4)] == [0, 2, 4]
    assert [nccl.ring_crossings("all_reduce", n) for n in (1, 2, 4)] == [0, 2, 6]
    assert [nccl.ring_crossings("all_reduce", n, paid=True) for n in (1, 2, 4)] == [0, 4, 8]
    assert nccl.ring_crossings("broadcast", 4, paid=True) == 3
    m = nccl.machine(H100, 32)  # 4 nodes
    intra = max(1.9, 1.0)  # NVLink ring LL128, at least the network overhead
    inter = 4.0  # NET ring LL128
    tuner = nccl.latency_us("all_gather", "ring", "ll128", m)
    assert tuner == pytest.approx(14 + (31 - 3) * intra + 3 * inter)
    # what the call pays: every step at least the network step's pace (RING_NET_PACED, next
    # test), and the crossings along the critical path
    assert nccl.latency_us("all_gather", "ring", "ll128", m, paid=True) == pytest.approx(
        14 + (31 - 4) * max(intra, inter) + 4 * inter)
    assert nccl.protocol("all_gather", "ring", "ll128", 2**20, m).latency_s == pytest.approx(
        nccl.latency_us("all_gather", "ring", "ll128", m, paid=True) * 1e-6)
    # one node: nothing crosses, both counts agree
    one = nccl.machine(H100, 8)
    assert nccl.latency_us("all_reduce", "ring", "simple", one, paid=True) == pytest.approx(
        nccl.latency_us("all_reduce", "ring", "simple", one))


def test_a_ring_spanning_nodes_pays_each_step_at_the_network_steps_pace():
    """RING_NET_PACED: on LL128, every step of a ring that spans nodes pays at least the
    network step's tuner latency (hwLat NET plus latencyInter), where its NVLink steps paid
    NVLink's hwLat; LL and Simple keep NCCL's sum; one node, and NCCL's own estimate (so its
    choices), are unchanged. Four nodes of 8: 31 all-gather steps, 4 crossings paid."""
    from dataclasses import replace

    m = replace(nccl.machine(H100, 32), net_latency_us=2.0)
    lat = {"ll": 2.7 + 2.0, "ll128": 4.0 + 2.0, "simple": 14.0 + 2 * 2.0}  # the network step
    base = {"ll": 6.6, "ll128": 14.0, "simple": 8.4}
    nvlink = {"ll": 0.6, "ll128": 1.9, "simple": 3.4}
    overhead = {"ll": 1.0, "ll128": 1.0, "simple": 3.0}  # NCCL's net overhead floor
    assert nccl.latency_us("all_gather", "ring", "ll128", m, paid=True) == pytest.approx(
        base["ll128"] + 31 * lat["ll128"])
    for proto in ("ll", "simple"):  # the NVLink steps at NCCL's floor, 4 crossings the network's
        assert nccl.latency_us("all_gather", "ring", proto, m, paid=True) == pytest.approx(
            base[proto] + 27 * max(nvlink[proto], overhead[proto]) + 4 * lat[proto])
    for proto in ("ll", "ll128", "simple"):  # the tuner's estimate: NCCL's own sum
        assert nccl.latency_us("all_gather", "ring", proto, m) == pytest.approx(
            base[proto] + 28 * max(nvlink[proto], overhead[proto]) + 3 * lat[proto])
    one = nccl.machine(H100, 8)
    assert nccl.latency_us("all_gather", "ring", "ll128", one, paid=True) == pytest.approx(
        14.0 + 7 * 1.9)


def test_the_transport_message_cost_is_paid_per_network_step_and_unseen_by_the_tuner():
    """gcp-a3-mega's [transport] message_us (FasTrak's message time, which its plugin does not
    report to NCCL): a 2-node ring all-gather pays it at each of its 2 crossings, NCCL's
    estimate and choice do not see it, and a one-node call never pays it."""
    from dataclasses import replace

    a3 = load_hardware("gcp-a3-mega")
    assert a3.transport.message_us == pytest.approx(22.9)
    bare = replace(a3, transport=replace(a3.transport, message_us=None))
    assert bare.inter_node_message_us == 0.0
    m, m0 = nccl.machine(a3, 16), nccl.machine(bare, 16)
    size = 2**23
    for proto in ("ll128", "simple"):
        assert nccl.estimate_us("all_gather", "ring", proto, size, m) == pytest.approx(
            nccl.estimate_us("all_gather", "ring", proto, size, m0))
        paid = nccl.protocol("all_gather", "ring", proto, size, m).latency_s
        assert paid - nccl.protocol("all_gather", "ring", proto, size, m0).latency_s == \
            pytest.approx(2 * 22.9e-6)
    t = sweep(a3, 16, "all_gather", "ring", [size], "ll128")[0].time_s
    t0 = sweep(bare, 16, "all_gather", "ring", [size], "ll128")[0].time_s
    assert t - t0 == pytest.approx(2 * 22.9e-6, rel=1e-6)
    # inside one node no message crosses the network
    assert sweep(a3, 8, "all_gather", "ring", [size])[0].time_s == pytest.approx(
        sweep(bare, 8, "all_gather", "ring", [size])[0].time_s)
    # all-to-all issues its P - 1 messages together: their times overlap, and its per-message
    # latency stays the transport's step figure
    assert a3.inter_node_latency_s == pytest.approx(14.0e-6)
    assert sweep(a3, 16, "all_to_all", "auto", [size])[0].time_s == pytest.approx(
        sweep(bare, 16, "all_to_all", "auto", [size])[0].time_s)


def test_dgx_a100_runs_as_nccl_does_on_ampere_without_nvls():
    """dgx-a100's [nccl] table: Ampere constants, 24 channels, no NVLink SHARP. Small calls run
    LL (llMaxBw 87.7 GB/s on one Ampere node, not Hopper's 141), large ones Simple, never NVLS;
    no call beats its process's launches (8 x launch_us when one process drives the 8 GPUs,
    as nccl-tests -g 8; NCCL's LL latency, 6.6 + 14 x 0.6 us, above one launch when each GPU
    has its own process); --algo nvls is refused as NCCL would not run it."""
    a100 = load_hardware("dgx-a100")
    m = nccl.machine(a100, 8)
    assert (m.arch, m.channels, m.nvls) == ("ampere", 24, False)
    assert nccl.busbw("all_reduce", "ring", "ll", m) == pytest.approx(87.7)
    assert nccl.choose("all_reduce", 1024, m) == ("ring", "ll")
    assert nccl.choose("all_gather", 2**33, m)[1] == "simple"
    assert all(nccl.choose("all_reduce", s, m)[0] != "nvls" for s in (2**20, 2**30))
    small = sweep(a100, 8, "all_reduce", "auto", [8], gpus_per_process=8)[0]
    assert small.time_s == pytest.approx(8 * a100.nccl.launch_us * 1e-6)
    alone = sweep(a100, 8, "all_reduce", "auto", [8])[0]
    assert alone.time_s == pytest.approx((6.6 + 14 * 0.6) * 1e-6, rel=0.01)
    for gpus, bad in ((8, 0), (8, 3), (8, 16), (24, 3)):  # GPUs of one node, split evenly
        with pytest.raises(UserError, match="--gpus-per-process"):
            sweep(a100, gpus, "all_reduce", "auto", [8], gpus_per_process=bad)
    with pytest.raises(UserError):
        sweep(a100, 8, "all_reduce", "nvls", [2**20])


def test_the_tuner_reproduces_nccls_own_estimates_at_three_nodes():
    """NCCL 2.22.3's TUNING log of 3 x 8 H100 with 8 x 200G NICs per node (nccl #1453,
    profiles/external/nccl-choices.csv): its choice and its own estimate per size. The tree
    rows (4 B - 256 KiB, LL then LL128) are reproduced to 0.1%, the ring at 8 GiB to 0.1%,
    which needs the ring priced at the node's NICs (one GPU's share would estimate it 8x
    slower); NVLS_TREE's 2.28 formula, which this module follows, is within 3% of 2.22's at
    512 KiB, and at 8 GiB makes it tie the ring (0.3% apart), so it takes NVLS_TREE there
    where 2.22 took the ring."""
    import csv
    import dataclasses

    path = Path(nccl.__file__).resolve().parents[2] / "profiles" / "external" / "nccl-choices.csv"
    with path.open() as f:
        rows = list(csv.DictReader(f))
    assert rows
    for r in rows:
        hw = load_hardware(r["hardware"])
        hw = dataclasses.replace(hw, nic=dataclasses.replace(
            hw.nic, bw_Gbps=float(r["nic_Gbps"]), efficiency=float(r["nic_efficiency"])))
        m = nccl.machine(hw, int(r["gpus"]))
        size, want = int(r["size_bytes"]), float(r["estimate_us"])
        ours = nccl.estimate_us(r["op"], r["algo"], r["proto"], size, m)
        tolerance = 0.03 if r["algo"] == "nvls_tree" else 0.001
        assert ours == pytest.approx(want, rel=tolerance), r
        if r["algo"] != "ring":  # the tie at 8 GiB is the one choice that differs
            assert nccl.choose(r["op"], size, m) == (r["algo"], r["proto"]), r


def test_tuner_view_chooses_as_ncclS_tuner_over_sockets():
    """A profile without an [nccl] table: NCCL's tuner picks, from the NIC's line rate
    (issue 40). The SCAPE authors' 73.7 MB fp32 all-reduce on 32 single-GPU nodes is a ring
    at every speed the socket plugin may read (10-400 Gb/s) and with 1 or 2 channels; their
    2 GB dense all-reduce is a ring; a 1 MB call on 32 nodes at 400 Gb/s a tree."""
    from dataclasses import replace

    hw = load_hardware("vista-gh200-socket")
    assert hw.nccl is None
    view = nccl.tuner_view(hw, 32)
    assert view.nodes == 32 and view.inter_GBps == pytest.approx(50.0) and view.ll128
    for gbps in (1.25, 12.5, 25.0, 50.0):
        for channels in (1, 2):
            m = replace(view, inter_GBps=gbps, intra_GBps=gbps, channels=channels)
            assert nccl.choose("all_reduce", 73.7e6, m)[0] == "ring"
            assert nccl.choose("all_reduce", 2.054e9, m)[0] == "ring"
    assert nccl.choose("all_reduce", 1e6, view)[0] == "tree"
    # and the step prices what the tuner chose: a tree-sized call runs the simulator's tree
    from simulator.network.collective import calibrated

    assert calibrated(hw, "all_reduce", "auto", 32, 1e6).algo == "tree"
    assert calibrated(hw, "all_reduce", "auto", 32, 73.7e6).algo == "ring"


def test_tuner_view_needs_an_nccl_cluster():
    """A measured gloo profile, or a GPU NCCL's tables do not know, keeps no tuner view."""
    from dataclasses import replace

    hw = load_hardware("vista-gh200-socket")
    assert nccl.tuner_view(replace(hw, measured={"network_backend": "gloo"}), 4) is None
    unknown = replace(hw, gpu=replace(hw.gpu, model="some accelerator"))
    assert nccl.tuner_view(unknown, 4) is None
