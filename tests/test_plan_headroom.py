"""A plan's memory headroom (--min-spare-gb, the thin-headroom footnote) and answers beyond
the scale a calibrated profile was measured at (issue 61 item 4)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from reports.calibration_reach import beyond_measured, measured_reach
from reports.tables import unwrapped
from tests.test_cli import scape
from tests.test_nccl_tests import A100_AG, A100_AR, NT

PLAN = ("plan", "-m", "llama-7b", "--tokens", "1e10", "-H", "dgx-h100", "--max-gpus", "16",
        "--schemes", "dense-adamw", "--top", "5")


def test_min_spare_gb_keeps_a_margin_free_on_every_plan(capsys):
    code, out, err = scape(capsys, *PLAN, "--format", "json")
    assert code == 0, err
    free = min(r["memory_spare_GB"] for r in json.loads(out))
    margin = round(free + 5, 1)  # more than the thinnest plan leaves without it
    code, out, err = scape(capsys, *PLAN, "--min-spare-gb", str(margin), "--format", "json")
    assert code == 0, err
    rows = json.loads(out)
    assert rows and all(r["memory_spare_GB"] >= margin - 1e-9 for r in rows)
    assert all(r["min_spare_gb"] == pytest.approx(margin) for r in rows)  # what was typed


@pytest.mark.parametrize("value, rule", [
    ("-1", "0 or more"), ("nan", "0 or more"), ("500", "leaves nothing to train with"),
    ("many", "not a valid float")])
def test_a_bad_min_spare_gb_is_refused_with_the_rule(capsys, value, rule):
    code, _, err = scape(capsys, *PLAN, "--min-spare-gb", value)
    assert code == 2 and rule in err, err


def test_a_plan_near_the_memory_limit_is_flagged(capsys):
    # llama-7b data parallel on 64 H100 without recomputation: some of the fastest plans sit
    # within a few GB of the limit, and the footnote counts them
    plan = (*PLAN[:8], "64", *PLAN[9:])
    code, out, err = scape(capsys, *plan, "--format", "json")
    assert code == 0, err
    rows = json.loads(out)
    thin = [r for r in rows if r["memory_spare_pct"] < 5]
    assert thin
    code, table, err = scape(capsys, *plan)
    assert code == 0, err
    text = unwrapped(table)
    assert f"thin headroom: {len(thin)} of the {len(rows)} plans shown" in text
    assert f"(the least: {min(r['memory_spare_GB'] for r in thin):.1f} GB)" in text
    code, table, err = scape(capsys, *plan, "--min-spare-gb", "8")
    assert code == 0, err
    assert "thin headroom" not in table  # 8 GB of 79 is above 5%: none is thin


def test_beyond_measured_names_what_the_calibration_reached():
    shipped = SimpleNamespace(measured={}, node=SimpleNamespace(gpus_per_node=8), name="x")
    assert measured_reach(shipped) is None and beyond_measured(shipped, 4096) is None
    logs = SimpleNamespace(measured={"logs_gpus": "8,16", "logs_nodes": "1,2"},
                           node=SimpleNamespace(gpus_per_node=8), name="mine")
    assert measured_reach(logs)[:2] == (16, 2)
    assert beyond_measured(logs, 16) is None
    text = beyond_measured(logs, 64)
    assert "64 GPUs (measured: at most 16) and 8 nodes (measured: at most 2)" in text
    ranks = SimpleNamespace(measured={"network_nprocs": "2,4"},
                            node=SimpleNamespace(gpus_per_node=1), name="bed")
    assert "8 GPUs (measured: at most 4)" in beyond_measured(ranks, 8)


def test_a_step_beyond_the_calibrated_scale_says_so(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("SCAPE_PROFILE_DIR", str(tmp_path))
    code, out, err = scape(capsys, *NT, str(A100_AR), str(A100_AG),
                           "--out", "a100", "--gpu-from", "dgx-a100", "--format", "csv")
    assert code == 0, err
    step = ("simulate", "-m", "llama-500m", "-H", "measured/a100")
    code, out, err = scape(capsys, *step, "--gpus", "64")
    assert code == 0, err
    assert ("extrapolated: 64 GPUs (measured: at most 8) and 8 nodes (measured: at most 1)"
            in unwrapped(out))
    code, out, err = scape(capsys, *step, "--gpus", "8")
    assert code == 0, err
    assert "extrapolated" not in out
    plan = ("plan", "-m", "llama-500m", "--tokens", "1e9", "-H", "measured/a100",
            "--max-gpus", "32", "--top", "2")
    code, out, err = scape(capsys, *plan, "--format", "json")
    assert code == 0, err
    top = json.loads(out)[0]["gpus"]
    code, out, err = scape(capsys, *plan)
    assert code == 0, err
    assert top > 8  # the fastest plan uses more GPUs than the logs had: its line says so
    assert f"extrapolated: {top} GPUs (measured: at most 8)" in unwrapped(out)


def test_simulate_and_compare_say_when_a_step_fits_with_thin_headroom(capsys):
    """Issue 61 item 3: a step that fits with under THIN_SPARE_PCT of its usable memory left is
    told that the allocator's retries near the limit are not priced; one with room is not."""
    from simulator.memory.peak import THIN_SPARE_PCT, thin_note
    from tests.test_cli import scape

    assert thin_note(THIN_SPARE_PCT) is None and thin_note(-1.0) is None
    assert "num_alloc_retries" in thin_note(THIN_SPARE_PCT / 2)
    step = ("-m", "llama-70b", "-H", "dgx-h100", "--gpus", "64", "--tp", "8", "--micro-batch",
            "1", "--global-batch", "64")
    for seq, thin in (("5632", True), ("4096", False)):
        code, out, err = scape(capsys, "simulate", *step, "--seq-len", seq)
        assert code == 0, err
        assert ("# thin headroom:" in out) == thin, out
    code, out, err = scape(capsys, "compare", *step, "--seq-len", "5632", "--schemes",
                           "dense-adams,scape:0.99")
    assert code == 0 and "thin headroom (the tightest row):" in out, err


def test_the_thin_headroom_footnote_counts_the_shipped_peaks(tmp_path):
    """The footnote's 'N of M reported reserved peaks' is read from the shipped bands
    (reports/memory_fidelity.py reserved_under), not a literal: it follows the bench."""
    from reports.memory_fidelity import MEMORY_BANDS, reserved_under

    under, peaks = reserved_under()
    import csv

    rows = [r for r in csv.DictReader(MEMORY_BANDS.open()) if r["peak_kind"] == "reserved"]
    assert peaks == sum(int(r["rows"]) for r in rows) and 0 <= under <= peaks
    assert under == sum(int(r["under"]) for r in rows)


def test_a_model_without_a_published_batch_is_refused_with_the_published_ones(capsys):
    """No batch is invented for llama3-70b (Meta published none): the refusal lists the
    shipped models' published batches converted to this run's sequence length."""
    from profiles import load_model

    code, _, err = scape(capsys, "plan", "-m", "llama3-70b", "-H", "dgx-h100", "--tokens",
                         "1e12", "--max-gpus", "4096")
    text = unwrapped(err)
    assert code == 2 and "give --global-batch" in text
    gpt3 = load_model("gpt3-175b")
    seqs = gpt3.global_batch * gpt3.arch.seq_len / 8192  # GPT-3's 3.2M tokens at 8,192
    assert f"gpt3-175b {gpt3.global_batch * gpt3.arch.seq_len / 1e6:.1f}M tokens = " \
           f"{seqs:,.0f} sequences" in text
    assert "llama3-70b " not in text.split("give --global-batch")[1]  # it has none to give
