"""profiles/quality.py reads what bench/convergence_protocol.py writes (its report,
bench/convergence_report.py)."""

from __future__ import annotations

import importlib.util
import json
import sys

import pandas as pd
import pytest

from profiles import ProfileError
from profiles.files import ROOT
from profiles.quality import load_quality

BENCH = ROOT.parent / "bench" / "convergence_report.py"


def _bench():
    spec = importlib.util.spec_from_file_location("convergence_report", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look themselves up there
    spec.loader.exec_module(module)
    return module


def test_reads_the_study_file_the_bench_writes(tmp_path):
    bench = _bench()
    bench.QUALITY = tmp_path / "study.toml"
    summary = pd.DataFrame([
        {"scheme": "dense-adams", "variant": "adams", "sparsity": 0.0, "lr": 2.5e-4,
         "seeds": 3, "steps": 3000, "mean_val_loss": 1.58, "gap_pct": 0.0,
         "mean_bytes_ratio": 1.0, "tokens_to_dense_quality": 1.0},
        {"scheme": "scape", "variant": "authors-0.99", "sparsity": 0.99, "lr": 5e-4,
         "seeds": 3, "steps": 3000, "mean_val_loss": 1.62, "gap_pct": 2.5,
         "mean_bytes_ratio": 0.04, "tokens_to_dense_quality": float("nan")},
        {"scheme": "scape", "variant": "authors-0.9", "sparsity": 0.9, "lr": 5e-4,
         "seeds": 3, "steps": 3000, "mean_val_loss": 1.585, "gap_pct": 0.3,
         "mean_bytes_ratio": 0.15, "tokens_to_dense_quality": 1.2},
    ])
    rows = pd.DataFrame([{"model": "tiny-llama", "corpus": "shakespeare",
                          "tokens_per_step": 1024}])
    bench._quality(summary, summary.iloc[0], 2900.0, rows)
    study = load_quality(str(bench.QUALITY))
    assert study.model == "tiny-llama" and study.dense_adams_steps_to_quality == 2900.0
    assert study.lookup("scape", 0.99).tokens_ratio is None  # never reached
    assert study.lookup("scape", 0.9).tokens_ratio == pytest.approx(1.2)
    assert study.lookup("topk", 0.99) is None
    json.dumps(study.lookup("dense-adams", 0.0).__dict__)  # plain values


def test_refuses_an_entry_that_says_neither(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('study = "s"\ncommand = "c"\ndate = "d"\nmodel = "m"\ncorpus = "c"\n'
                    "tokens_per_step = 1\nsteps = 1\ndense_adams_lr = 0.1\n"
                    "dense_adams_final_val_loss = 1.0\ndense_adams_steps_to_quality = 1.0\n"
                    '[[scheme]]\nscheme = "topk"\nvariant = "v"\nsparsity = 0.5\nlr = 0.1\n'
                    "seeds = 1\nfinal_val_loss = 1.0\ngap_pct = 0.0\nmean_bytes_ratio = 1.0\n")
    with pytest.raises(ProfileError, match="tokens_ratio, or reached = false"):
        load_quality(str(path))
