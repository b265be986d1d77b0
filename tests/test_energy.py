"""A run's energy and carbon (issue 60 item 2, simulator/run/energy.py): the arithmetic of a
run's power, energy and emissions, the site's figures used or refused as typed, the [power]
rule, and `plan`'s columns, ranking and power cap."""

from __future__ import annotations

import csv
import io
import json

import pytest

from profiles import ProfileError, UserError, load_hardware
from simulator.run.energy import Site, run_energy
from simulator.run.sites import site_of
from tests.test_cli import scape


def test_a_run_s_energy_is_its_gpus_nodes_and_building_over_its_wall_time():
    power = load_hardware("dgx-h100").power
    site = Site(1.2, 0.4)
    # 16 GPUs (2 nodes), computing 80% of each step; 100 h of work, 110 h with failures
    got = run_energy(power, site, 16, 8, 0.8, 100 * 3600, 110 * 3600, 1e9)
    gpu = power.gpu_wait_W + 0.8 * (power.gpu_max_W - power.gpu_wait_W)
    train_W = 16 * gpu + 2 * power.node_other_W
    idle_W = 16 * power.gpu_wait_W + 2 * power.node_other_W
    mwh = 1.2 * (train_W * 100 + idle_W * 10) / 1e6
    assert got.gpu_W == pytest.approx(gpu, rel=1e-12)
    assert got.facility_MW == pytest.approx(1.2 * train_W / 1e6, rel=1e-12)
    assert got.energy_MWh == pytest.approx(mwh, rel=1e-12)
    assert got.tco2e == pytest.approx(mwh * 0.4, rel=1e-12)
    assert got.wh_per_token == pytest.approx(mwh * 1e6 / 1e9, rel=1e-12)
    # the share a step computes (simulator/step/power.py): its compute stream's work over the
    # step, without pipelining (the simulated rank is every rank)
    from types import SimpleNamespace

    from simulator.step.power import mean_busy

    step = SimpleNamespace(compute_s=5.0, compression_s=0.5, tp_comm_s=1.0, cp_comm_s=0.0,
                           ep_comm_s=None, step_time_s=10.0)
    assert mean_busy(SimpleNamespace(pp=1), step) == pytest.approx(0.65)


def test_the_site_is_used_as_typed_or_named_and_bad_figures_are_refused():
    assert site_of(1.3, "0.2").grid_kg_per_kWh == 0.2
    france = site_of(None, "france")
    assert france.pue == pytest.approx(1.10) and france.grid_kg_per_kWh == pytest.approx(0.056)
    assert "Our World in Data" in france.source and "Google" in france.source
    with pytest.raises(UserError, match="--pue must be between 1"):
        site_of(0.95, None)
    with pytest.raises(UserError, match="did you mean 'france'"):
        site_of(None, "frnace")
    with pytest.raises(UserError, match="--grid must be a carbon intensity"):
        site_of(None, "-0.1")


def test_a_waiting_gpu_drawing_its_limit_is_refused(tmp_path):
    from pathlib import Path

    text = Path(load_hardware("dgx-h100").path).read_text().replace("gpu_wait_W = 175.0",
                                                                    "gpu_wait_W = 700.0")
    bad = tmp_path / "hot.toml"
    bad.write_text(text.replace('name = "dgx-h100"', 'name = "hot"'))
    with pytest.raises(ProfileError, match=r"gpu_wait_W \(700\) must be below gpu_max_W"):
        load_hardware(bad)


def test_plan_prices_energy_ranks_by_it_and_caps_power(capsys):
    args = ("plan", "-m", "gpt-345m", "-t", "1e9", "-H", "dgx-h100", "--max-gpus", "16",
            "--schemes", "dense-adams", "--workers", "1", "--format", "csv")
    code, out, err = scape(capsys, *args, "--grid", "france", "--pue", "1.3")
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    for r in rows:
        assert float(r["tco2e"]) == pytest.approx(float(r["energy_MWh"]) * 0.056, rel=1e-9)
        assert (r["pue"], r["grid_kg_per_kwh"], r["grid_asked"]) == ("1.3", "0.056", "france")
        assert 175 < float(r["gpu_power_W"]) <= 700
    code, out, err = scape(capsys, *args, "--rank", "energy")
    assert code == 0, err
    energies = [float(r["energy_MWh"]) for r in csv.DictReader(io.StringIO(out))]
    assert energies == sorted(energies)
    code, out, err = scape(capsys, *args, "--max-power-mw", "0.012")
    assert code == 0, err
    assert all(float(r["facility_MW"]) <= 0.012 for r in csv.DictReader(io.StringIO(out)))
    code, _, err = scape(capsys, *args, "--max-power-mw", "0.001")
    assert code == 2 and "no plan draws at most 0.001 MW" in err
    code, _, err = scape(capsys, "plan", "-m", "gpt-345m", "-t", "1e9", "-H", "vista-gh200",
                         "--rank", "energy", "--price-per-gpu-hour", "2")
    assert code == 2 and "--rank energy: vista-gh200 has no [power] table" in err


def _tiers_profile(tmp_path):
    """dgx-h100 as 'tiers', with reserved and spot prices and a spot interruption rate."""
    from pathlib import Path

    text = Path(load_hardware("dgx-h100").path).read_text().replace(
        'name = "dgx-h100"', 'name = "tiers"')
    text = text.replace("[price]\n", "[price]\nreserved_usd_per_gpu_hour = 2.0\n"
                        "spot_usd_per_gpu_hour = 1.5\nspot_interruptions_per_node_day = 2.0\n"
                        'date = "2026-12-03"\n', 1)
    hw = tmp_path / "tiers.toml"
    hw.write_text(text)
    return hw


def test_plan_ranked_by_cost_names_the_cheapest_plan_under_each_tier(capsys, tmp_path):
    """Issue 60 item 3: ranked by cost, plan shows the cheapest plan under each price tier the
    profile prices, each the top plan of that tier's own search (the same as plan with
    --price-tier that tier), and which is cheapest with failures; ranked by time it does not
    search the other tiers."""
    hw = _tiers_profile(tmp_path)
    args = ("plan", "-m", "gpt-345m", "-t", "1e10", "-H", str(hw), "--max-gpus", "16",
            "--schemes", "dense-adams", "--workers", "1", "--rank", "wall-cost")
    tops = {}
    for tier in ("on-demand", "reserved", "spot"):
        code, out, err = scape(capsys, *args, "--price-tier", tier, "--format", "json")
        assert code == 0, err
        tops[tier] = json.loads(out)[0]
    asked = tops["on-demand"]
    for tier in ("reserved", "spot"):
        top, line = tops[tier], asked[f"cheapest_{tier}"]
        assert line.startswith(f"{top['gpus']} x tiers, {top['scheme']}, tp {top['tp']}, "
                               f"pp {top['pp']}, ")
        assert f"(with failures ${top['wall_cost_usd']:,.0f}," in line
    cheapest = min(tops, key=lambda t: tops[t]["wall_cost_usd"])
    code, out, err = scape(capsys, *args)
    assert code == 0, err
    note = " ".join(x.lstrip("# ").strip() for x in out.splitlines() if x.startswith("#"))
    assert "the cheapest plan under each price tier (--rank wall-cost): on-demand (asked): " in note
    suffix = " (asked)" if cheapest == "on-demand" else ""
    assert f"the cheapest of them with failures: {cheapest}{suffix} (" in note
    code, out, err = scape(capsys, *args[:-2], "--format", "json")
    assert code == 0 and "cheapest_spot" not in out


def test_price_tiers_price_every_plan_and_spot_interruptions_join_the_failures(capsys,
                                                                              tmp_path):
    """Issue 60 item 3: --price-tier reserved and spot pay the profile's tier prices, and spot
    capacity taken back (per node and day) adds to the failures, so a spot plan's wall time is
    longer than the same plan's on demand; a tier a profile lacks is refused naming it."""
    hw = _tiers_profile(tmp_path)
    args = ("plan", "-m", "gpt-345m", "-t", "1e10", "-H", str(hw), "--max-gpus", "16",
            "--schemes", "dense-adams", "--workers", "1", "--format", "csv")
    rows = {}
    for tier in ("on-demand", "reserved", "spot"):
        code, out, err = scape(capsys, *args, "--price-tier", tier)
        assert code == 0, err
        rows[tier] = {(r["gpus"], r["tp"], r["pp"], r["micro_batch"]): r
                      for r in csv.DictReader(io.StringIO(out))}
    for key, spot in rows["spot"].items():
        r = rows["reserved"][key]
        assert float(r["cost_usd"]) == pytest.approx(float(r["gpu_hours"]) * 2.0, rel=1e-9)
        assert float(spot["cost_usd"]) == pytest.approx(float(spot["gpu_hours"]) * 1.5,
                                                        rel=1e-9)
        demand = rows["on-demand"][key]
        assert float(spot["interruptions"]) > float(demand["interruptions"])
        assert float(spot["wall_hours"]) > float(demand["wall_hours"])
    code, _, err = scape(capsys, *args, "--price-tier", "spot",
                         "--spot-interruptions-per-node-day", "-1")
    assert code == 2 and "--spot-interruptions-per-node-day is for --price-tier spot" in err
    code, _, err = scape(capsys, "plan", "-m", "gpt-345m", "-t", "1e9", "-H", "dgx-h100",
                         "--price-tier", "spot")
    assert code == 2 and "dgx-h100's [price] has no spot_usd_per_gpu_hour" in err
