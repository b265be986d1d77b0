"""bench/memory_published.py prices each published run as its source states it (attention
kernel, sequence parallelism) and reports both directions per distinct configuration (issue 61
item 6)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from tests.test_fidelity_bands import _bench


def test_runs_published_as_not_fitting_are_priced_as_they_ran_and_refused():
    bench = _bench("memory_published")
    published, _ = bench.published_rows()
    korthikanti = [r for r in published if r["case"].startswith("korthikanti-")]
    assert len(korthikanti) == 12
    for r in korthikanti:  # Megatron before FlashAttention: the s x s scores kept
        assert r["args"]["attention"] == "unfused", r["case"]
        assert r["args"]["sequence_parallel"] == r["case"].endswith("-sp-selective"), r["case"]
    priced = bench.price(korthikanti).set_index("case")
    nofit = priced[~priced["ran"].astype(bool)]
    assert len(nofit) == 4 and not nofit["fits"].any(), nofit  # the paper: above 80 GB
    assert priced[priced["ran"].astype(bool)]["fits"].all()


def test_agreement_counts_each_configuration_once_in_both_directions():
    bench = _bench("memory_published")
    rows = pd.DataFrame({
        "case": ["a-16", "a-32", "b", "c-oom", "d-oom"], "gpu": ["H100"] * 5,
        "ran": [True, True, True, False, False],
        "allocated_GiB": [50.0, 50.0, 90.0, 100.0, 60.0],
        "fits": [True, True, False, False, True]})
    table = bench.agreement(rows)
    assert table.loc["ran", "accepted"] == 1 and table.loc["ran", "accepted_rows"] == 2
    assert table.loc["ran", "refused"] == 1
    assert table.loc["did not fit", "refused"] == 1 and table.loc["did not fit", "accepted"] == 1


def test_shipped_memory_bands_are_the_bench_of_this_model():
    """Regenerate: SCAPE_PROFILE_DIR=profiles python bench/memory_published.py --bands
    profiles/external/memory-fidelity-bands.csv (a change to the memory model or the rows
    moves them)."""
    from reports.memory_fidelity import MEMORY_BANDS

    bench = _bench("memory_published")
    published, _ = bench.published_rows()
    priced = bench.price(published)
    now = bench.memory_bands(priced[priced["reported_GiB"].notna()]).reset_index(drop=True)
    pd.testing.assert_frame_equal(now, pd.read_csv(MEMORY_BANDS), check_dtype=False)


def test_a_memory_figure_says_which_published_peaks_checked_it(capsys, tmp_path):
    from reports.memory_fidelity import MEMORY_BANDS
    from reports.tables import unwrapped
    from tests.test_cli import scape

    band = pd.read_csv(MEMORY_BANDS).set_index(["hardware", "stack", "peak_kind"])
    # torchtitan's and torchao's H100 96GB peaks were taken on Grand Teton hosts: their band
    # is that profile's, not DGX H100's (bench/memory_published.py GPU_PROFILE)
    rows = int(band.loc[("grand-teton-h100", "torchtitan", "reserved"), "rows"])
    here = ("simulate", "-m", "llama3-8b", "-H", "grand-teton-h100", "--gpus", "8",
            "--global-batch", "16", "-s", "dense-zero3", "--stack", "torchtitan")
    code, out, err = scape(capsys, *here)
    assert code == 0, err
    assert (f"memory how sure: {rows} published reserved peaks on grand-teton-h100 with the "
            "torchtitan stack") in unwrapped(out)
    step = ("simulate", "-m", "llama3-8b", "-H", "dgx-h100", "--gpus", "8",
            "--global-batch", "16", "-s", "dense-zero3")
    code, out, err = scape(capsys, *step, "--stack", "torchtitan")
    assert code == 0, err
    assert ("memory how sure: no published peak of a torchtitan-stack run on dgx-h100 was "
            "checked") in unwrapped(out)
    code, out, err = scape(capsys, *step)  # Megatron's stack: no published peak of it
    assert code == 0, err
    assert ("memory how sure: no published peak of a megatron-stack run on dgx-h100 was "
            "checked") in unwrapped(out)
    copy = tmp_path / "dgx-h100.toml"
    copy.write_text((Path(__file__).resolve().parents[1] / "profiles" / "hardware"
                     / "dgx-h100.toml").read_text())
    code, out, err = scape(capsys, "compare", "-m", "llama-7b", "-H", str(copy), "--gpus", "8",
                           "--schemes", "dense-adamw,dense-zero3")
    assert code == 0, err
    assert "memory how sure: unvalidated: no published peak ran on" in unwrapped(out)
