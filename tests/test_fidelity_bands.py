"""The held-out error bands `scape collective` shows (reports/fidelity.py): the shipped file is
what bench/fidelity_public.py computes from the shipped rows and model now, and a call finds
the band of runs like it, or none."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from profiles import load_hardware
from reports import fidelity, step_fidelity
from reports.tables import unwrapped
from tests.test_cli import scape

REPO = Path(__file__).resolve().parents[1]


def _bench(name: str = "fidelity_public"):
    """A bench script as a module (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_shipped_bands_are_the_bench_of_this_model():
    """Regenerate: SCAPE_PROFILE_DIR=profiles python bench/fidelity_public.py --bands
    profiles/external/fidelity-bands.csv (a change to the model or the rows moves them)."""
    bench = _bench()
    rows = pd.read_csv(bench.DATA)
    df = bench.predict(rows)
    df["held_out"] = ~bench.calibration(df)
    per_node = {h: load_hardware(h).node.gpus_per_node for h in df["hardware"].unique()}
    now = fidelity.bands(df, per_node).reset_index(drop=True)
    shipped = pd.read_csv(fidelity.BANDS)
    pd.testing.assert_frame_equal(now, shipped, check_dtype=False)


def test_a_call_finds_the_band_of_runs_like_it(capsys, tmp_path):
    """4 x 8 H100 at 1 GiB: the 3+-node, large-size band; one process per GPU on one H100 node
    below 64 MiB: none was published (the H100 tables were run by one process for 8 GPUs);
    a copy of a shipped profile elsewhere has no published runs of its own."""
    got = fidelity.lookup("dgx-h100", 32, 8, 1, 2**30)
    band = pd.read_csv(fidelity.BANDS).set_index(["hardware", "nodes", "launch", "sizes"])
    assert got["heldout_rows"] == band.loc[("dgx-h100", "3+", "any", ">=64MiB"), "rows"]
    assert fidelity.lookup("dgx-h100", 8, 8, 1, 2**20)["heldout_rows"] == 0
    assert fidelity.lookup("dgx-h100", 8, 8, 8, 2**20)["heldout_rows"] > 0
    code, out, err = scape(capsys, "collective", "-H", "dgx-h100", "--gpus", "32", "--sizes",
                           "1GiB", "--format", "json")
    assert code == 0, err
    (row,) = json.loads(out)
    assert row["heldout_rows"] == got["heldout_rows"]
    assert row["heldout_max_abs_err_pct"] == pytest.approx(got["heldout_max_abs_err_pct"])
    copy = tmp_path / "dgx-h100.toml"
    copy.write_text((REPO / "profiles" / "hardware" / "dgx-h100.toml").read_text())
    code, out, err = scape(capsys, "collective", "-H", str(copy), "--gpus", "32", "--sizes",
                           "1GiB", "--format", "json")
    assert code == 0, err
    assert json.loads(out)[0]["heldout_rows"] == 0


def test_shipped_step_bands_name_the_bench_rows():
    """The quick half of the check below, in the default run: the shipped step bands name every
    published step bench/step_loso.py holds out, once, each band its sources (no simulation)."""
    bench = _bench("step_loso")
    shipped = pd.read_csv(step_fidelity.STEP_BANDS)
    named = ";".join(shipped["cases"]).split(";")
    assert sorted(named) == sorted(bench.all_rows()["case"])
    assert all(s for s in shipped["sources"])


# about 25 s on 2 cores (840 steps simulated): with the slow tests, so the default run stays
# under CI's 6 minutes; `make test-long` runs it
@pytest.mark.slow
def test_shipped_step_bands_are_the_bench_of_this_model():
    """Regenerate: SCAPE_PROFILE_DIR=profiles python bench/step_loso.py --bands
    profiles/external/step-fidelity-bands.csv (a change to the step model or the rows moves
    them). Every row is predicted by a share fitted without any row of its stack: a band's
    rows never share a stack (Megatron-LM's two papers are one) or a source with the fit that
    priced them, each band names its sources and counts its distinct configurations."""
    bench = _bench("step_loso")
    rows = bench.all_rows()
    held = bench.leave_one_out(rows, bench.grid_times(rows))
    assert all(r.source not in r.fitted_on.split(";") for r in held.itertuples())
    assert all(r.framework not in r.fitted_stacks.split(";") for r in held.itertuples())
    assert not any({"narayanan", "korthikanti"} & set(r.fitted_on.split(";"))
                   for r in held.itertuples() if r.framework == "Megatron-LM")
    now = step_fidelity.summarize_sources(held).reset_index(drop=True)
    shipped = pd.read_csv(step_fidelity.STEP_BANDS)
    pd.testing.assert_frame_equal(now, shipped, check_dtype=False)
    named = ";".join(shipped["cases"]).split(";")
    assert sorted(named) == sorted(held["case"])
    assert all(s for s in shipped["sources"])


def test_a_step_finds_the_band_of_published_steps_like_it(capsys, tmp_path):
    """simulate, compare and plan carry the band of dense steps on the same shipped profile and
    layout; a typed --mfu, another layout, a compressed scheme or a copy of the profile have
    none, and the table says why."""
    band = pd.read_csv(step_fidelity.STEP_BANDS).set_index(["hardware", "layout", "schemes"])
    rows = int(band.loc[("dgx-h100", "data parallel", "dense"), "rows"])
    step = ("simulate", "-m", "llama-1.8b", "--gpus", "32", "--micro-batch", "8")

    def one(*args: str) -> dict:
        code, out, err = scape(capsys, *step, *args, "--format", "json")
        assert code == 0, err
        return json.loads(out)[0]

    assert one("-H", "dgx-h100")["heldout_step_rows"] == rows
    assert one("-H", "dgx-h100")["heldout_step_max_abs_err_pct"] == pytest.approx(
        band.loc[("dgx-h100", "data parallel", "dense"), "max_abs_err_pct"])
    for args in (("--mfu", "0.4"), ("--tp", "2"), ("--scheme", "scape", "--sparsity", "0.99")):
        assert one("-H", "dgx-h100", *args)["heldout_step_rows"] == 0, args
    copy = tmp_path / "dgx-h100.toml"
    copy.write_text((REPO / "profiles" / "hardware" / "dgx-h100.toml").read_text())
    assert one("-H", str(copy))["heldout_step_rows"] == 0
    code, out, err = scape(capsys, *step, "-H", "dgx-h100", "--mfu", "0.4")
    assert code == 0, err
    assert "how sure: unvalidated: its compute is your --mfu 0.4" in out
    code, out, err = scape(capsys, "compare", "-m", "llama-1.8b", "-H", "dgx-h100", "--gpus", "32",
                           "--micro-batch", "8", "--schemes", "dense-adamw,scape:0.99")
    assert code == 0, err
    out = unwrapped(out)  # the header's lines as one line each
    assert f"how sure: {rows} published dense steps on this profile and layout" in out
    assert "fitted without its stack" in out
    # a band whose rows repeat configurations says how many distinct ones it holds
    repeated = band[band["configs"] < band["rows"]].iloc[0]
    code, again, err = scape(capsys, "simulate", "-m", "llama-70b", "-H", repeated.name[0],
                           "--gpus", "64", "--tp", "8", "--pp", "2", *(
                               ("--tp-comm-overlap",) if "overlapped" in repeated.name[1]
                               else ()), *(("--fp8",) if "FP8" in repeated.name[1] else ()))
    assert code == 0, err
    assert (f"how sure: {repeated['rows']} published dense steps ({repeated['configs']} distinct "
            "configurations: the median counts each once)") in unwrapped(again)
    assert "scape:0.99: no published step was held out" in out
    code, out, err = scape(capsys, "compare", "-m", "llama-1.8b", "-H", "dgx-h100", "--gpus", "32",
                           "--micro-batch", "8", "--schemes", "dense-adamw,scape:0.99",
                           "--format", "json")
    assert code == 0, err
    assert {r["scheme"]: r["heldout_step_rows"] for r in json.loads(out)} == {
        "dense-adams": rows, "dense-adamw": rows, "scape:0.99": 0}
    code, out, err = scape(capsys, "plan", "-m", "gpt-345m", "--tokens", "1e9", "-H",
                           "dgx-h100", "--max-gpus", "8", "--schemes", "dense-adams,scape:0.99",
                           "--top", "3", "--format", "json")
    assert code == 0, err
    for r in json.loads(out):
        plain = r["tp"] == 1 and r["pp"] == 1 and r["scheme"].startswith("dense")
        assert r["heldout_step_rows"] == (rows if plain else 0), r


def test_shipped_moe_step_bands_are_the_bench_of_this_model():
    """Regenerate: SCAPE_PROFILE_DIR=profiles python bench/moe_steps.py --bands
    profiles/external/moe-step-fidelity-bands.csv. The mixture-of-experts and Blackwell rows'
    bands: no row of the source the shipped shares were fitted on (dgxc), no row converted
    from TFLOP/s, and no key that bench/step_loso.py's bands also have (a step finds one band,
    from one file)."""
    bench = _bench("moe_steps")
    rows = pd.read_csv(bench.DATA, comment="#")
    df = pd.DataFrame([bench.evaluate(r) for r in rows.itertuples()])
    now = bench.bands(df)
    shipped = pd.read_csv(step_fidelity.MOE_BANDS)
    pd.testing.assert_frame_equal(now, shipped, check_dtype=False, rtol=1e-6)
    cases = ";".join(shipped["cases"]).split(";")
    assert cases and not [c for c in cases if c.startswith(bench.FIT_SOURCE + "-")]
    keys = step_fidelity.KEYS
    # a key both files band is one band the answer's range takes the wider max from
    dense = pd.read_csv(step_fidelity.STEP_BANDS).set_index(keys)
    merged = step_fidelity.all_bands()
    for key in set(dense.index) & {tuple(k) for k in shipped[keys].values.tolist()}:
        moe = shipped.set_index(keys).loc[key]
        band = merged[key]
        assert int(band["rows"]) == dense.loc[key, "rows"] + moe["rows"], key
        assert float(band["max_abs_err_pct"]) == pytest.approx(
            max(dense.loc[key, "max_abs_err_pct"], moe["max_abs_err_pct"]), abs=1e-9), key
        assert moe["cases"] in band["also"] and int(band["first_rows"]) == dense.loc[key, "rows"]
    # a MoE step on a profile and layout of that file finds its band, named by its file
    from profiles import load_hardware
    from reports.step_fidelity import how_sure

    first = shipped.iloc[0]
    text = how_sure(load_hardware(first["hardware"]), first["layout"], ["dense-adamw"], None)
    assert f"{first['rows']} published dense step" in text
    assert "moe-step-fidelity-bands.csv from bench/moe_steps.py" in text


def test_moe_steps_with_and_without_cuda_graphs_are_apart(capsys):
    """Published MoE steps on Blackwell run without CUDA graphs were up to 66% slower than the
    model, those with them within 23% (reports/step_fidelity.py layout_class): a MoE step's
    band is of steps that ran as it does, and a dense step's class does not move with it."""
    assert step_fidelity.layout_class(2, 4, moe=True, graphs=True) == (
        "tensor/pipeline parallel, mixture-of-experts, CUDA graphs")
    assert step_fidelity.layout_class(2, 4, moe=True) == (
        "tensor/pipeline parallel, mixture-of-experts")
    assert step_fidelity.layout_class(2, 4, graphs=True) == step_fidelity.layout_class(2, 4)
    # DeepSeek-V3 as dgxc-benchmarking ran it on GB200 (TP 2, PP 4, EP 32, no graphs): no
    # held-out step ran so (dgxc's own rows are not held out), and the line says how the
    # model fared on the layouts that were checked
    step = ("-m", "deepseek-v3", "-H", "gb200-nvl72", "--gpus", "256", "--tp", "2", "--pp", "4",
            "--ep", "32", "--global-batch", "256", "--recompute", "selective")
    code, out, err = scape(capsys, "simulate", *step)
    assert code == 0, err
    text = unwrapped(out)
    assert "how sure: unvalidated" in text and "step_time_low_s, step_time_high_s: none" in text
    assert re.search(r"data parallel, mixture-of-experts \(\d+ steps?, median -\d+\.\d%\)",
                     text), text
    code, out, err = scape(capsys, "simulate", *step, "--cuda-graphs", "--format", "json")
    assert code == 0, err
    graphed = json.loads(out)[0]
    band = step_fidelity.all_bands()[("gb200-nvl72", "tensor/pipeline parallel, "
                                      "mixture-of-experts, CUDA graphs", "dense")]
    assert graphed["heldout_step_rows"] == int(band["rows"]) > 0


def test_rows_alike_but_for_scale_or_release_are_one_configuration():
    """bench/step_loso.py counts a recipe published at eight GPU counts and two releases once:
    NeMo's 62 rows of parallel-steps.csv are 8 configurations (issue 61 item 6), and a
    configuration's median error enters a band's median once."""
    bench = _bench("step_loso")
    rows = bench.all_rows()
    nemo = rows[rows["source"] == "dgxc"]
    assert nemo["config"].nunique() == 8
    assert rows["config"].nunique() < len(rows)
    # rows that differ in anything the step reads besides scale are apart
    changed = rows.copy()
    changed.loc[changed.index[0], "micro_batch"] = changed["micro_batch"].iloc[0] * 2
    assert bench.config_ids(changed).nunique() == rows["config"].nunique() + (
        (rows["config"] == rows["config"].iloc[0]).sum() > 1)
    held = pd.DataFrame({"config": ["a", "a", "a", "b"], "error_pct": [1.0, 2.0, 30.0, -4.0]})
    assert step_fidelity.config_medians(held).to_dict() == {"a": 2.0, "b": -4.0}


def test_a_band_over_one_job_size_names_it_once():
    """A band whose rows ran at one GPU count says '64', not '64-64' (vocabulary/units.py
    span, as the scaling report writes its sweep)."""
    held = pd.DataFrame({"hardware": ["h"] * 3, "layout": ["l"] * 3, "schemes": ["dense"] * 3,
                         "gpus": [64, 64, 64], "source": ["s"] * 3, "framework": ["f"] * 3,
                         "case": ["a", "b", "c"], "error_pct": [1.0, -2.0, 3.0]})
    assert list(step_fidelity.summarize_sources(held)["gpus"]) == ["64"]
    held.loc[2, "gpus"] = 512
    assert list(step_fidelity.summarize_sources(held)["gpus"]) == ["64-512"]


def test_shipped_torchtitan_step_bands_are_the_bench_of_this_model(capsys):
    """Regenerate: SCAPE_PROFILE_DIR=profiles python bench/torchtitan_steps.py --bands
    profiles/external/torchtitan-step-fidelity-bands.csv. torchtitan's published H100 steps on
    their own hosts (grand-teton-h100), every row held out and a configuration of its own; no
    key another band file has; a torchtitan step simulated there finds its band, named by its
    file, and a layout none of its rows ran says so."""
    bench = _bench("torchtitan_steps")
    rows = pd.read_csv(bench.DATA, comment="#")
    df = pd.DataFrame([bench.price(r, bench.HARDWARE) for r in rows.itertuples()])
    now = bench.bands(df)
    shipped = pd.read_csv(step_fidelity.TORCHTITAN_BANDS)
    pd.testing.assert_frame_equal(now, shipped, check_dtype=False, rtol=1e-6)
    assert shipped["rows"].sum() == df["error_pct"].notna().sum()
    assert (shipped["rows"] == shipped["configs"]).all()
    keys = step_fidelity.KEYS
    mine = {tuple(k) for k in shipped[keys].values.tolist()}
    for other in (step_fidelity.STEP_BANDS, step_fidelity.MOE_BANDS):
        assert not mine & {tuple(k) for k in pd.read_csv(other)[keys].values.tolist()}
    step = ("-m", "llama3-70b", "-H", "grand-teton-h100", "--gpus", "256", "--tp", "8",
            "--stack", "torchtitan", "--tp-comm-overlap", "--recompute", "full",
            "--global-batch", "512", "--micro-batch", "16", "--fp8", "-s", "dense-zero3")
    code, out, err = scape(capsys, "simulate", *step)
    assert code == 0, err
    text = unwrapped(out)
    band = shipped[shipped["layout"] == "tensor/pipeline parallel, TP comm overlapped, FP8"]
    assert len(band) == 1
    assert f"{int(band['rows'].iloc[0])} published dense steps" in text
    assert "torchtitan-step-fidelity-bands.csv from bench/torchtitan_steps.py" in text
    # TP with context parallelism, in BF16 and without the overlap: none of its rows ran so
    plain = ("-m", "llama3-70b", "-H", "grand-teton-h100", "--gpus", "256", "--tp", "8",
             "--cp", "2", "--stack", "torchtitan", "--recompute", "full", "--global-batch",
             "512", "--micro-batch", "16", "-s", "dense-zero3")
    code, out, err = scape(capsys, "simulate", *plain)
    assert code == 0, err
    text = unwrapped(out)
    assert "how sure: unvalidated" in text
    assert "held-out layouts on grand-teton-h100: data parallel (4 steps" in text


def test_shipped_deepspeed_step_bands_are_the_bench_of_this_model(capsys):
    """Regenerate: SCAPE_PROFILE_DIR=profiles python bench/deepspeed_steps.py --step-bands
    profiles/external/deepspeed-step-fidelity-bands.csv. BigScience's runs that ran on Jean
    Zay, each a configuration of its own, on a profile no other band file has; BLOOM's own
    layout there finds the band."""
    bench = _bench("deepspeed_steps")
    res = bench.priced(megatron=False)
    now = bench.step_bands(res[res.outcome == "ran"])
    shipped = pd.read_csv(step_fidelity.DEEPSPEED_BANDS, dtype={"gpus": str})  # '384'
    pd.testing.assert_frame_equal(now, shipped, check_dtype=False, rtol=1e-6)
    assert int(shipped["rows"].sum()) == int((res.outcome == "ran").sum())
    keys = step_fidelity.KEYS
    mine = {tuple(k) for k in shipped[keys].values.tolist()}
    for other in (step_fidelity.STEP_BANDS, step_fidelity.MOE_BANDS,
                  step_fidelity.TORCHTITAN_BANDS):
        assert not mine & {tuple(k) for k in pd.read_csv(other)[keys].values.tolist()}
    code, out, err = scape(capsys, "simulate", "-m", "bloom-176b", "-H", "jean-zay-a100",
                           "--gpus", "384", "--tp", "4", "--pp", "12", "--stack", "deepspeed",
                           "--recompute", "full", "--micro-batch", "2", "--global-batch",
                           "2048", "-s", "dense-adamw", "--attention", "unfused",
                           "--no-sequence-parallel")
    assert code == 0, err
    text = unwrapped(out)
    assert "17 published dense steps" in text and "bigscience (Megatron-DeepSpeed) 17" in text
    assert "deepspeed-step-fidelity-bands.csv from bench/deepspeed_steps.py" in text


def test_a_layout_two_band_files_hold_out_gets_one_band_with_the_wider_max():
    """MLPerf's Llama 3.1 8B on 128 H100 at TP 2 (bench/moe_steps.py) shares its class with
    step_loso's H100 TP FP8 runs: a step of that class is answered with one band whose max is
    the larger of the two files' and whose sentence names both."""
    hw = load_hardware("dgx-h100")
    layout = step_fidelity.layout_class(2, 1, tp_overlap=True, fp8=True)
    key = (hw.name, layout, "dense")
    dense = step_fidelity.stored(step_fidelity.STEP_BANDS, tuple(step_fidelity.KEYS))[key]
    moe = step_fidelity.stored(step_fidelity.MOE_BANDS, tuple(step_fidelity.KEYS))[key]
    text = step_fidelity.how_sure(hw, layout, ["dense-adamw"], None)
    widest = max(float(dense["max_abs_err_pct"]), float(moe["max_abs_err_pct"]))
    assert f"max {widest:g}%" in text and moe["cases"] in text, text
    assert f"{int(dense['rows']) + int(moe['rows'])} published dense steps" in text, text
    row = step_fidelity.lookup(hw, layout, "dense-adamw", None)
    assert row["heldout_step_max_abs_err_pct"] == pytest.approx(widest, abs=1e-9)
