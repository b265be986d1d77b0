"""bench/memory_published.py prices each published run as its source states it (attention
kernel, sequence parallelism) and reports both directions per distinct configuration (issue 61
item 6)."""

from __future__ import annotations

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
