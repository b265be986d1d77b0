"""Ranks sharing one GPU: the per-call kernel cost `scape calibrate collectives --share-gpu`
measures (calibration/sharing.py), the profile's [sharing] table, and the step it prices."""

from __future__ import annotations

from pathlib import Path

import pytest

from calibration.collectives import sweep
from profiles import ProfileError, UserError, load_hardware
from profiles.files import read_toml
from profiles.measured import merge
from reports.validate import predict, runtime_plan
from scape.plan import make_config
from tests.conftest import SHIPPED_MEASURED, renamed_measured

BASE = SHIPPED_MEASURED
SHARING = """
[sharing]
ranks = [2, 3]
elements = 1048576
source = "test"

[sharing.extra_us]
select = [1000.0, 3000.0]
pack = [500.0, 900.0]

[sharing.extra_mean_us]
select = [1500.0, 4000.0]
"""


def _profile(tmp_path, extra: str = SHARING) -> Path:
    path = tmp_path / "shared.toml"
    path.write_text(renamed_measured("shared") + extra)
    return path


def test_the_sharing_sweep_reports_each_kind_on_every_rank_without_hanging():
    """authors_step builds a reducer with its own Comm: inside the ranks' process group it
    must stay a world of one, or rank 0's alone calls would wait for peers that never come."""
    rows = sweep(2, "gloo", ops=("all_reduce",), sizes=(16384,), repeats=2, timeout_s=60,
                 sharing=("scale", "authors_step"))
    shared = {r["kind"]: r for r in rows if r["op"] == "sharing"}
    assert set(shared) == {"scale", "authors_step"}
    assert all(r["world"] == 2 and r["value"] >= 0 and r["mean"] >= 0
               for r in shared.values())


def test_each_kernel_call_pays_the_measured_wait_at_its_rank_count(tmp_path):
    plain, shared = load_hardware(str(BASE)), load_hardware(str(_profile(tmp_path)))
    assert shared.sharing == {"select": {2: 1e-3, 3: 3e-3}, "pack": {2: 5e-4, 3: 9e-4}}
    cfg = make_config("topk", sparsity=0.99)
    for ranks, select_s, pack_s in ((2, 1e-3, 5e-4), (3, 3e-3, 9e-4)):
        kernels = runtime_plan(cfg, "tiny-gpt", ranks, shared).steps[0][1].kernels
        calls = {kind: sum(k.kind == kind for k in kernels) for kind in ("select", "pack")}
        assert calls["select"] >= 1 and calls["pack"] >= 1
        before = predict(plain, "tiny-gpt", cfg, ranks, 16)
        after = predict(shared, "tiny-gpt", cfg, ranks, 16)
        added = calls["select"] * select_s + calls["pack"] * pack_s
        assert after.compression_s - before.compression_s == pytest.approx(added, rel=1e-6)
        assert after.step_time_s - before.step_time_s == pytest.approx(added, rel=1e-6)


def test_a_rank_count_the_profile_did_not_measure_sharing_at_is_refused(tmp_path):
    two = (SHARING.replace("ranks = [2, 3]", "ranks = [2]").replace(", 3000.0]", "]")
           .replace(", 900.0]", "]"))
    shared = load_hardware(str(_profile(tmp_path, two)))
    with pytest.raises(UserError, match="--share-gpu --nprocs 3"):
        predict(shared, "tiny-gpt", make_config("topk", sparsity=0.99), 3, 16)


@pytest.mark.parametrize("bad, message", [
    (SHARING.replace("ranks = [2, 3]", "ranks = [1, 3]"), "[sharing] ranks"),
    (SHARING.replace("select = [1000.0, 3000.0]", "select = [1000.0]"), "select: one number"),
    (SHARING.replace("pack = [500.0, 900.0]", "pack = [-1.0, 900.0]"), "pack: one number"),
    (SHARING.replace("select =", "sort ="), "sort: unknown kernel"),
])
def test_a_malformed_sharing_table_is_refused(tmp_path, bad, message):
    with pytest.raises(ProfileError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_hardware(str(_profile(tmp_path, bad)))


def test_a_calibration_without_shared_gpus_drops_an_earlier_sharing_table(tmp_path,
                                                                           monkeypatch):
    monkeypatch.setenv("SCAPE_PROFILE_DIR", str(tmp_path))
    path = tmp_path / "measured" / "p.toml"
    path.parent.mkdir()
    path.write_text(renamed_measured("p") + SHARING)
    merge("p", {"overlap": {"ranks": [2], "async_interference": [0.1]}}, "test")
    assert "sharing" in read_toml(path)
    merge("p", {"overlap": {"ranks": [2], "async_interference": [0.1]}}, "test",
          drop_tables=("sharing",))
    assert "sharing" not in read_toml(path) and "overlap" in read_toml(path)


def test_a_shared_gpu_calibration_records_how_the_ranks_shared_it(tmp_path, monkeypatch):
    """The sharing mode (MPS or time slices: timings differ by far) goes into the profile with
    the [sharing] table, and a later calibration without shared GPUs takes both away."""
    import calibration.collectives as cc
    from calibration.kernel_benches import KERNEL_BENCH
    from tests.test_fit import synthetic

    monkeypatch.setenv("SCAPE_PROFILE_DIR", str(tmp_path))
    links = synthetic(100e-6, 25e6, worlds=(2,))
    waits = [{"op": "sharing", "kind": k, "world": 2, "value": 1e-4, "mean": 2e-4}
             for k in KERNEL_BENCH]
    monkeypatch.setattr(cc, "gpu_sharing", lambda: "mps")
    monkeypatch.setattr(cc, "sweep", lambda p, *a, share_gpu, **k: links + (
        waits if share_gpu else []))
    path, _, _ = cc.calibrate("shared", [2], "nccl", None, share_gpu=True)
    doc = read_toml(path)
    assert doc["measured"]["network_gpu_sharing"] == "mps" and "(mps)" in doc["description"]
    assert doc["sharing"]["extra_us"]["pack"] == [pytest.approx(100.0)]
    merge("shared", {"measured": {"network_refit": "2026-11-27 00:00 UTC"}}, "test")
    cc.calibrate("shared", [2], "gloo", None, share_gpu=False)
    doc = read_toml(path)
    assert "network_gpu_sharing" not in doc["measured"] and "sharing" not in doc
    assert "network_refit" not in doc["measured"]  # a new sweep is no refit
