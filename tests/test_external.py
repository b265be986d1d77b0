"""The SCAPE authors' published measurements: data file, fit protocol, authors' plan."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from profiles import UserError, check_profile, load_hardware, load_model
from profiles.external import load_external
from reports.external import dense_rows, fitted_hardware, summary, validate_external
from scape.plan import Dtypes, make_config, plan
from scape.plan.scape_authors import greedy_owners, k_of, shard_pieces
from simulator.memory.peak import reserve
from simulator.step.external_fit import fit_dense


def test_every_row_cites_a_commit_and_line():
    ext = load_external("scape-sc26")
    assert len(ext.rows) >= 200
    for r in ext.rows:
        assert len(r.commit) == 40 and int(r.commit, 16) >= 0
        assert r.line >= 1 and r.path


def test_unknown_external_set_is_one_clear_error():
    with pytest.raises(UserError, match="unknown external data set"):
        load_external("no-such-set")


def test_fit_uses_only_dense_rows_and_recovers_a_synthetic_network():
    ext = load_external("scape-sc26")
    rows = dense_rows(ext)
    assert rows and all("adams" in r.key and "scape" not in r.key for r in rows)
    # rewrite the measured communication as a known ring: the fit must find it again
    hw = load_hardware("vista-gh200")
    from simulator.step.external_fit import comm_coefficients, socket_view

    alpha, bw, chunk = 2e-3, 5e9, ext.chunk_bytes
    assert chunk == 2 * 2**20  # NCCL's 1 MiB proxy slice x 2 ring channels, as sourced
    # each call as the fit prices it: NCCL's choice over sockets (a ring for the GB-sized
    # gradients, a tree for the distributed optimizer's one-element norm)
    synthetic = [replace(r, comm_s=alpha * a + w / bw) for r in rows
                 for a, w in [comm_coefficients(r.plan, r.gpus, chunk, socket_view(hw))]]
    fit = fit_dense(synthetic, hw, chunk)
    assert math.isclose(fit.alpha_s, alpha, rel_tol=1e-6)
    assert math.isclose(fit.bandwidth_Bps, bw, rel_tol=1e-6)
    assert fit.chunk_bytes == chunk
    # the chunk's fill is a data term: fitting without it must find another network
    assert not math.isclose(fit_dense(synthetic, hw).alpha_s, alpha, rel_tol=1e-3)


def test_external_validation_protocol_and_accuracy():
    table, _fit, meta = validate_external("scape-sc26")
    fitted = table[table["fitted"]]
    assert set(fitted["quantity"]) == {"compute", "comm"}
    assert set(fitted["series"]) == {"adams", "adams-distopt"}
    held = table[~table["fitted"]]
    assert held["series"].str.startswith("scape").sum() == 60  # every SCAPE step row
    # held out: the SCAPE rows; in sample: the dense step rows the fitted rows sum to
    assert list(held[held["role"] == "held-out"]["series"].str.startswith("scape")) == [True] * 60
    assert (held[held["role"] == "in-sample"]["series"].str.startswith("adams")).all()
    assert set(table[table["fitted"]]["role"]) == {"fitted"}
    s = summary(table)
    # measured 2026-11-29 with every collective as NCCL's tuner picks it (auto, one pricing
    # path; issue 40): held out 60 rows, median 1.6%, max 21.3% (llama-500m
    # scape-d0.01-distopt on 64 GPUs: NCCL's model takes a tree for its 20.5 MB all-reduces
    # at the 400 Gb/s the socket plugin reads); in sample 20 rows, median 0.7%, max 2.0%.
    # Issue 40's goal (max 15%) is not met here: bench/nccl_choice_sensitivity.py prints
    # under 10% where NCCL reads the interface at 100 Gb/s or below
    assert s["predicted_rows"] == 60 and s["in_sample"]["rows"] == 20
    assert s["median_abs_error_pct"] < 5
    assert s["max_abs_error_pct"] < 25
    assert s["in_sample"]["max_abs_error_pct"] < 5
    assert meta["skipped"] and all(x["why"] for x in meta["skipped"])


def test_fitted_profile_has_a_socket_transport():
    ext = load_external("scape-sc26")
    base = load_hardware("vista-gh200")
    hw = fitted_hardware(fit_dense(dense_rows(ext), base), base, "t")
    assert hw.transport.kind == "socket"
    assert hw.inter_node_Bps < 0.2 * base.inter_node_Bps  # TCP sockets, far below NDR


def test_authors_plan_bytes_bitmap_padded_to_the_largest_owner():
    model = load_model("llama-500m")
    tensors = model.tensors()
    sizes, dense = [n for n, _ in tensors], [d for _, d in tensors]
    cfg = make_config("scape", sparsity=0.99)
    p = plan(cfg, model.n_params, 64, Dtypes(4, 2), tensors=sizes, dense=dense)
    (_, step), = p.steps
    ops = {op.name: op for op in step.ops}
    owners = greedy_owners(sizes, 64)
    assert sum(owners.owned) == model.n_params and sum(owners.tensors) == len(sizes)
    assert max(owners.owned) == 32000 * 1536  # an embedding table, never split
    mask = ops["next-mask bitmap all-gather"]
    assert mask.size_bytes == 64 * math.ceil(32000 * 1536 / 8)
    k = sum(n if d else k_of(0.01, n) for n, d in tensors)
    assert ops["momentum payload all-reduce (fp32)"].size_bytes == 4 * k
    # the distributed optimizer balances the bitmap and adds the sparse parameter sync
    q = plan(replace(cfg, extra={"distributed_optimizer": True}), model.n_params, 64,
             Dtypes(4, 2), tensors=sizes, dense=dense)
    ops_q = {op.name: op for op in q.steps[0][1].ops}
    shard = math.ceil(model.n_params / 64)
    assert ops_q["next-mask bitmap all-gather"].size_bytes == 64 * math.ceil(shard / 8)
    # top-k per piece of a tensor in a shard: a cut tensor keeps floor(d*n) of each piece
    k_q = sum(b - a if d else k_of(0.01, b - a)
              for pieces in shard_pieces(sizes, dense, 64) for a, b, d in pieces)
    assert k - 64 <= k_q <= k
    assert ops_q["sparse parameter sync all-reduce (fp32)"].size_bytes == 4 * k_q
    assert ops_q["momentum payload all-reduce (fp32)"].size_bytes == 4 * k_q


def test_authors_runtime_refuses_the_parameter_offload():
    import torch

    from scape.adams import Hyper
    from scape.comm import Comm
    from scape.schemes import make_scheme

    cfg = make_config("scape", sparsity=0.9,
                      extra={"distributed_optimizer": True, "param_offload": True})
    with pytest.raises(UserError, match="plan for the simulator only"):
        make_scheme(cfg, [torch.nn.Parameter(torch.zeros(8))], Comm(), Hyper())


@pytest.mark.parametrize(("kind", "extra", "match"), [
    ("carrier-pigeon", "", "kind"),
    ("socket", "chunk_kib = -1\n", "chunk_kib"),
])
def test_transport_table_is_validated(tmp_path, kind, extra, match):

    body = Path(load_hardware("vista-gh200").path).read_text() + (
        f'\n[transport]\nkind = "{kind}"\nefficiency = 0.5\nlatency_us = 1.0\n'
        f'call_us = 0.0\n{extra}source = "test"\n')
    path = tmp_path / "vista-gh200.toml"
    path.write_text(body)
    with pytest.raises(Exception, match=match):
        check_profile(str(path))
    assert load_hardware("vista-gh200").inter_node_chunk_bytes == 0.0  # absent: streamed


def test_shipped_socket_profile_is_the_fit():
    """profiles/hardware/vista-gh200-socket.toml holds what `validate --external
    --write-profile` fits now (rounded to 6 significant digits)."""
    from reports.external import SOCKET_PROFILE

    ext = load_external("scape-sc26")
    base = load_hardware("vista-gh200")
    fit = fit_dense(dense_rows(ext), base, ext.chunk_bytes)
    shipped = load_hardware(SOCKET_PROFILE)
    assert shipped.inter_node_chunk_bytes == ext.chunk_bytes > 0
    fresh = fitted_hardware(fit, base, SOCKET_PROFILE)
    assert shipped.transport.kind == "socket"
    assert shipped.inter_node_Bps == pytest.approx(fresh.inter_node_Bps, rel=1e-5)
    assert shipped.inter_node_latency_s == pytest.approx(fresh.inter_node_latency_s, rel=1e-5)
    assert shipped.compute.step_fixed_ms == pytest.approx(fit.step_fixed_s * 1e3, rel=1e-5)
    assert shipped.model_mfu == pytest.approx(fit.mfu, rel=1e-5)
    assert shipped.kernels["optimizer_adams"]["ns_per_element"] == pytest.approx(
        fit.optimizer_s_per_element * 1e9, rel=1e-5)


def test_external_transport_needs_a_number_and_a_source(tmp_path, monkeypatch):
    import profiles.external as pe

    text = Path(load_external("scape-sc26").path).read_text()
    monkeypatch.setattr(pe, "FOLDER", tmp_path)
    (tmp_path / "bad.toml").write_text(text.replace("chunk_kib = 2048", "chunk_kib = -2"))
    with pytest.raises(Exception, match="chunk_kib must be a number"):
        pe.load_external("bad")
    (tmp_path / "nosrc.toml").write_text(text.replace("chunk_kib_source =", "chunk_note ="))
    with pytest.raises(Exception, match="chunk_kib has no chunk_kib_source"):
        pe.load_external("nosrc")


def test_memory_rows_predicted_with_nothing_fitted():
    from reports.external_memory import GPU_RANGE, memory_summary, memory_table

    ext = load_external("scape-sc26")
    table, skipped = memory_table(ext)
    with_settings = [r for r in ext.rows if r.quantity == "memory_MB" and ext.config(r)]
    assert len(table) == len(with_settings) == 12
    assert all("no public launch settings" in s["why"] for s in skipped)
    assert len(skipped) + len(table) == sum(r.quantity == "memory_MB" for r in ext.rows)
    distopt = table["series"].str.contains("distopt")
    # replicated runs do not depend on the unstated GPU count (their interval is the
    # allocator's slack alone, max allocated to max reserved); sharded ones do
    lo, hi = table["predicted_low_MiB"], table["predicted_high_MiB"]
    slack = reserve(load_hardware("vista-gh200-socket"))[0].fragmentation
    assert list(hi[~distopt]) == pytest.approx(list(lo[~distopt] * (1 + slack)))
    assert (hi[distopt] > lo[distopt] * (1 + slack)).all()
    inside = (table["measured_MiB"] >= table["predicted_low_MiB"]) & (
        table["measured_MiB"] <= table["predicted_high_MiB"])
    assert (table.loc[inside, "error_pct"] == 0).all()
    s = memory_summary(table)
    assert s["gpu_range_assumed"] == list(GPU_RANGE) and s["memory_rows"] == 12
    # measured 2026-11-28 (per-stage model, no dropout in Llama, allocated-to-reserved
    # interval): median 5.7%, max 18.5% (SCAPE with the distributed optimizer)
    assert s["median_abs_error_pct"] < 10 and s["max_abs_error_pct"] < 20


def test_residual_offload_keeps_two_staging_buffers_of_the_largest_tensor():
    from simulator.memory.peak import memory_use

    model = load_model("llama-500m")
    n, largest = model.n_params, max(size for size, _ in model.tensors())
    on, off = (memory_use(model, make_config("scape", sparsity=0.9,
                                              extra={"residual_offload": flag}),
                          8, 1, 8, 4096, Dtypes(4, 2)) for flag in (True, False))
    assert off.total - on.total == pytest.approx(4 * n - 2 * 4 * largest)


def test_fitted_profile_replaces_the_base_tables_it_fits(tmp_path):
    """A base that already carries a fitted [transport], [model_mfu], optimizer step and
    step_fixed_ms (vista-gh200-socket) or an [nccl] table (dgx-h100) gives a profile that loads:
    the base's tables are replaced, not appended twice (that wrote invalid TOML); a name with a
    quote or a backslash is escaped."""
    from reports.external import fitted_profile_text

    ext = load_external("scape-sc26")
    for base_name, stem in (("vista-gh200-socket", "refit"), ("dgx-h100", 'q"uo\\te')):
        base = load_hardware(base_name)
        fit = fit_dense(dense_rows(ext), base, ext.chunk_bytes)
        path = tmp_path / f"{stem}.toml"
        path.write_text(fitted_profile_text(fit, base, stem, "test", {}))
        _, hw = check_profile(str(path))
        assert hw.name == stem and hw.nccl is None and hw.transport.kind == "socket"
        assert hw.model_mfu == pytest.approx(fit.mfu, rel=1e-5)


def test_a_published_run_that_does_not_say_how_it_was_launched(tmp_path, monkeypatch):
    """public-collectives.csv's last column says how many GPUs one process drove (nccl-tests'
    -g); a row without it (the file's earlier layout, or an empty field) takes the documented
    default: the node's GPUs on one node, one per process across nodes."""
    import profiles.external as ext

    path = tmp_path / "runs.csv"
    path.write_text("case,hardware,gpus,op,nccl_algo,size_bytes,time_us,busbw_GBps,"
                    "gpus_per_process\n"
                    "one,dgx-h100,8,all_reduce,auto,1048576,50.0,36.0\n"
                    "two,dgx-h100,16,all_reduce,auto,1048576,87.0,22.0,\n"
                    "said,dgx-h100,8,all_reduce,auto,1048576,40.0,45.0,1\n")
    monkeypatch.setattr(ext, "PUBLIC_COLLECTIVES", path)
    assert ext.published_collective("one").gpus_per_process == 8
    assert ext.published_collective("two").gpus_per_process == 1
    assert ext.published_collective("said").gpus_per_process == 1
    assert ext.default_gpus_per_process(4, 8) == 4
