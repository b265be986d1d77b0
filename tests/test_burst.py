"""The netbed's token-bucket links: each call's first bucket of bytes passes at veth speed
(scape/netbed.py NetbedSpec.burst_bytes), which the link fit (simulator/network/fit.py) and the
simulator (simulator/network/collective.py past_bucket) take off the bytes a link carries; `scape
calibrate refit` fits a saved sweep again."""

from __future__ import annotations

import re
import tomllib

import pandas as pd
import pytest

from profiles import load_hardware
from profiles import measured as measured_mod
from scape.netbed import NetbedSpec
from simulator.network.collective import sweep
from simulator.network.fit import coefficients, fit_tier
from tests.conftest import SHIPPED_MEASURED, renamed_measured
from tests.test_cli import scape

SIZES = [2 ** i * 16384 for i in range(9)]  # 16 KiB .. 4 MiB
TRUTH = {"all_reduce": ("ring", 1.0), "all_gather": ("ring", 0.9), "all_to_all": ("pairwise", 0.8)}


def bucketed(alpha: float, bw: float, burst: float, worlds=(2, 3)) -> list[dict]:
    """What a link behind a full token bucket of `burst` bytes would measure."""
    rows = []
    for world in worlds:
        for op, (algo, eff) in TRUTH.items():
            for s in SIZES:
                a, c = coefficients(op, algo, world, s)
                t = alpha * a + max(0.0, s * c - burst) / (bw * eff)
                rows.append({"op": op, "size_bytes": s, "world": world, "seconds": t})
    return rows


def test_the_bucket_is_half_a_millisecond_of_traffic_and_two_frames_at_least():
    assert NetbedSpec(rate_mbit=1000).burst_bytes == 62_500
    assert NetbedSpec(rate_mbit=200).burst_bytes == 12_500
    assert NetbedSpec(rate_mbit=1).burst_bytes == 2 * 1514


def test_the_fit_finds_the_link_behind_the_bucket_that_a_plain_fit_misreads():
    alpha, bw, burst = 200e-6, 125e6, 62_500.0  # 1 Gbit/s and its bucket
    rows = bucketed(alpha, bw, burst)
    fit = fit_tier(rows, burst)
    assert fit.latency_s == pytest.approx(alpha, rel=1e-3)
    assert fit.bandwidth_Bps == pytest.approx(bw, rel=1e-3)
    assert max(c.residual_max_pct for c in fit.collectives.values()) < 0.1
    # without it, small calls look faster than the link, and the fit misses them
    plain = fit_tier(rows)
    assert max(c.residual_max_pct for c in plain.collectives.values()) > 10


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A user profile folder of the test's own, where -H measured/NAME finds NAME.toml."""
    monkeypatch.setenv("SCAPE_PROFILE_DIR", str(tmp_path))
    monkeypatch.setattr(measured_mod, "FOLDER", None)
    (tmp_path / "measured").mkdir()
    return tmp_path / "measured"


def _without_bucket(text: str) -> str:
    out, n = re.subn(r"(?m)^burst_bytes = .*\n", "", text)
    assert n == 1, "the shipped netbed profile was refitted with its bucket"
    return out


def test_a_bucketed_profile_prices_each_call_past_its_bucket(folder):
    """The same link with and without its bucket: a large call differs by the bucket's time
    at the link's rate, a call inside the bucket pays only its latency."""
    (folder / "open.toml").write_text(_without_bucket(renamed_measured("open")))
    with_bucket = load_hardware("measured/netbed-100mbit")
    without = load_hardware("measured/open")
    burst = with_bucket.nic.burst_bytes
    assert burst == NetbedSpec.parse("rate=100mbit").burst_bytes and without.nic.burst_bytes is None
    big, small = 4 * 2**20, 1024
    t_with, t_without = ([r.time_s for r in sweep(hw, 2, "all_gather", "auto", [small, big])]
                         for hw in (with_bucket, without))
    table = with_bucket.collectives["all_gather"]
    eff = table["by_ranks"][2]
    rate = with_bucket.nic.bw_Gbps * 1e9 / 8 * eff  # bytes/s through the link
    assert t_without[1] - t_with[1] == pytest.approx(burst / rate, rel=1e-3)
    latency_only = sweep(with_bucket, 2, "all_gather", "auto", [1])[0].time_s
    assert t_with[0] == pytest.approx(latency_only, rel=1e-6)
    assert t_with[0] < t_without[0]


def test_refit_fits_the_saved_sweep_again_and_keeps_the_rest(folder, capsys):
    sweep_csv = SHIPPED_MEASURED.with_suffix(".collectives.csv")
    (folder / "again.toml").write_text(_without_bucket(renamed_measured("again")))
    rows = pd.read_csv(sweep_csv)
    rows.assign(predicted_s=0.0, error_pct=0.0).to_csv(folder / "again.collectives.csv",
                                                       index=False)
    code, out, err = scape(capsys, "calibrate", "refit", "--profile", "measured/again")
    assert code == 0, err
    doc = tomllib.loads((folder / "again.toml").read_text())
    shipped = tomllib.loads(SHIPPED_MEASURED.read_text())
    assert doc["nic"]["burst_bytes"] == NetbedSpec.parse("rate=100mbit").burst_bytes
    assert doc["kernels"] == shipped["kernels"] and doc["compute"] == shipped["compute"]
    assert doc["measured"]["network_date"] == shipped["measured"]["network_date"]
    assert "network_refit" in doc["measured"]
    fit = fit_tier(rows[["op", "size_bytes", "world", "seconds"]].to_dict("records"),
                   doc["nic"]["burst_bytes"])
    again = pd.read_csv(folder / "again.collectives.csv")
    assert again["seconds"].tolist() == rows["seconds"].tolist()
    assert again["predicted_s"].tolist() == pytest.approx(fit.predictions)
    assert "wrote" in out and (folder / "again.toml").read_text().startswith("# Written by")


def test_refit_refuses_a_profile_without_its_sweep(folder, capsys):
    (folder / "alone.toml").write_text(renamed_measured("alone"))
    code, _, err = scape(capsys, "calibrate", "refit", "--profile", "alone")
    assert code == 2 and "alone.collectives.csv" in err and "Traceback" not in err


def test_refit_names_its_own_flag_when_it_refuses_a_name(folder, capsys):
    code, _, err = scape(capsys, "calibrate", "refit", "--profile", "../elsewhere")
    assert code == 2 and err.startswith("scape: error: --profile must be a plain profile name")
    # a shipped one: how to refit it, not "choose another name"
    code, _, err = scape(capsys, "calibrate", "refit", "--profile", "netbed-100mbit")
    assert code == 2 and "SCAPE_PROFILE_DIR=" in err and "built-in" in err


@pytest.mark.parametrize("damage, says", [
    (lambda rows: rows.assign(size_bytes=rows["size_bytes"].astype(float).where(
        rows.index != 3, 1e30)),
     "line 5: size_bytes 1e+30 is outside"),
    (lambda rows: rows[rows["op"] == "all_reduce"], "holds no row of"),
    (lambda rows: rows.assign(op=rows["op"].where(rows.index != 0, "")), "line 2: op"),
    (lambda rows: rows.assign(seconds=rows["seconds"].where(rows.index != 1, -1.0)),
     "line 3: seconds -1.0 is not a positive time"),
])
def test_refit_of_a_damaged_sweep_is_refused_and_keeps_the_profile(folder, capsys, damage,
                                                                   says):
    """Issue 45: a sweep with an absurd size, one op of several, an empty op cell or a
    negative time is refused with the file and line, and the profile stays byte for byte
    (it was rewritten with a link no command loads, lost its other collectives, or gave a
    traceback)."""
    sweep_csv = SHIPPED_MEASURED.with_suffix(".collectives.csv")
    text = renamed_measured("kept")
    (folder / "kept.toml").write_text(text)
    rows = pd.read_csv(sweep_csv)
    assert rows["op"].nunique() > 1
    damage(rows).to_csv(folder / "kept.collectives.csv", index=False)
    code, _, err = scape(capsys, "calibrate", "refit", "--profile", "measured/kept")
    assert code == 2 and says in err and "Traceback" not in err, err
    assert (folder / "kept.toml").read_text() == text
    assert not list(folder.glob(".kept*"))  # no temporary file left beside it
