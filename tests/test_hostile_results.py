"""Hostile input (issue 16), results that must make sense: reports where nothing fits, options
named in tables, tiny or signed-zero quantities, measured algorithms kept, NVLS where NCCL runs
it, sequence parallelism only with a tensor-parallel group, and session 15's physics probe
(numbers that broke sense). The shared contract: tests/hostile_util.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from reports.tables import unwrapped
from tests.hostile_util import SIM, _edited, _refused
from tests.test_cli import scape


@pytest.mark.slow  # about 15 s on 2 cores; the --quick report itself: tests/test_scaling.py
def test_report_scaling_of_405b_has_points_through_the_plans_layouts(capsys, tmp_path):
    """Once refused ("no step of the sweep fits": its layouts had no pipeline parallelism),
    a 405B report now takes `scape plan`'s layouts: it has points, pipelined; a sweep where
    nothing fits is still refused (tests/test_hostile_paths.py test_round_six_refusals)."""
    import pandas as pd

    code, _out, err = scape(capsys, "report", "scaling", "-m", "llama-405b", "-H", "dgx-h100",
                            "--quick", "--workers", "1", "--out", str(tmp_path / "r"))
    assert code == 0, err
    df = pd.read_csv(tmp_path / "r" / "all_points.csv")
    fits = df[df["fits"] & (df["model"] == "llama-405b")]
    assert len(fits) and (fits["pp"] > 1).all() and set(fits["gpus"]) >= {512, 4096}


def test_reproduce_runs_on_a_shapes_priced_profile(capsys, tmp_path):
    """reproduce on a [roofline] profile (no MFU): it says how compute is priced instead."""
    code, _out, err = scape(capsys, "reproduce", "-H", "dgx-h100", "--out", str(tmp_path / "r"),
                            "--format", "csv")
    assert code == 0, err
    text = (tmp_path / "r" / "reproduce_assumptions.csv").read_text()
    assert "dgx-h100: 8 GPU(s) per node" in text and "([roofline], sustained 0.72)" in text


def test_the_measured_algorithm_typed_runs_as_measured(capsys):
    """--algo ring on a profile that measured its ring: the measured efficiency and per-call
    overhead stay (they were dropped: 1315 us became 350 us)."""
    rows = []
    for extra in ((), ("--algo", "ring")):
        code, out, err = scape(capsys, "collective", "-H", "measured/netbed-1gbit", "--gpus", "3",
                               "--sizes", "1KiB", "--format", "json", *extra)
        assert code == 0, err
        rows.append(json.loads(out)[0]["time_s"])
    assert rows[0] == pytest.approx(rows[1])


def test_nvls_needs_two_channels_as_nccl_does(tmp_path, capsys):
    """[nccl] channels = 1 with nvls: NCCL skips NVLS graphs of one channel (it divided by
    zero here); the call runs another algorithm."""
    from profiles.files import ROOT

    text = (ROOT / "hardware" / "dgx-h100.toml").read_text().replace(
        "channels = 16", "channels = 1", 1)
    path = tmp_path / "dgx-h100.toml"
    path.write_text(text)
    code, out, err = scape(capsys, "collective", "-H", str(path), "--gpus", "8", "--sizes", "1GiB",
                           "--format", "json")
    assert code == 0, err
    assert json.loads(out)[0]["algo"] != "nvls"


def test_compare_table_names_the_typed_scheme_options(capsys):
    code, out, err = scape(capsys, "compare", "-m", "gpt-345m", "-H", "dgx-h100", "--gpus", "16",
                           "--sync", "momentum", "--distributed-optimizer", "--schemes",
                           "dense-adams,scape-partitioned:0.99,scape:0.99")
    assert code == 0, err
    header = next(line for line in unwrapped(out).splitlines() if line.startswith("# options:"))
    assert "sync momentum" in header and "'distributed_optimizer': True" in header


def test_a_default_bucket_too_small_is_named_as_the_default():
    from profiles import UserError, load_model
    from scape.plan import SchemeConfig, plan

    with pytest.raises(UserError, match=r"the default bucket \(.*Megatron's"):
        plan(SchemeConfig("dense-ddp"), load_model("llama-405b").n_params * 40, 8)


def test_sequence_parallel_without_a_tp_group(capsys):
    """--sequence-parallel typed with --tp 1 has nothing to split: refused, not run as if
    given; left out, it is on exactly where there is a tensor-parallel group, and the row
    says which."""
    code, _, err = scape(capsys, *SIM, "--sequence-parallel")
    _refused(code, err, "--tp 1 has none")
    for tp, on in ((1, False), (2, True)):
        code, out, err = scape(capsys, *SIM, "--tp", str(tp), "--format", "json")
        assert code == 0, err
        assert json.loads(out)[0]["sequence_parallel"] is on
    code, out, err = scape(capsys, *SIM, "--tp", "2", "--no-sequence-parallel", "--format",
                           "json")
    assert code == 0 and json.loads(out)[0]["sequence_parallel"] is False, err


def test_round_seven_refusals(capsys, tmp_path):
    """Session 9's second probe: a launch count that changes nothing, a held-out band shown
    for calls no published run resembles, and a copy of a shipped profile against its runs."""
    code, _, err = scape(capsys, "collective", "-H", "commodity-100gbe", "--gpus", "8", "--sizes",
                         "1KiB", "--gpus-per-process", "8")
    _refused(code, err, "has no [nccl] launch_us")
    code, _, err = scape(capsys, "collective", "-H", "dgx-h100", "--gpus", "8", "--op",
                         "all_to_all", "--sizes", "1KiB", "--gpus-per-process", "8")
    _refused(code, err, "all_to_all is not an NCCL-tuned call")
    for args in (("--op", "broadcast"), ("--algo", "tree", "--proto", "ll"),
                 ("--op", "all_to_all")):
        code, out, err = scape(capsys, "collective", "-H", "dgx-h100", "--gpus", "8", "--sizes",
                               "64MiB", *args, "--format", "json")
        assert code == 0, err
        assert json.loads(out)[0]["heldout_rows"] == 0, args
    copy = tmp_path / "dgx-h100.toml"
    copy.write_text((Path(__file__).resolve().parents[1] / "profiles" / "hardware"
                     / "dgx-h100.toml").read_text())
    code, _, err = scape(capsys, "collective", "-H", str(copy), "--gpus", "8", "--published",
                         "A1-nvls")
    _refused(code, err, "is another file of that name")


def test_round_eight_outputs(capsys, tmp_path):
    """A profile rate of 1e-300 is a typo; a measured fit that misses its own runs by 592%
    says so; another spelling of a listed scheme is that scheme's row as the baseline; the
    activations of one micro-batch through 16 stages are not those of 16 micro-batches."""
    bad = tmp_path / "dgx-h100.toml"
    text = (Path(__file__).resolve().parents[1] / "profiles" / "hardware"
            / "dgx-h100.toml").read_text()
    bad.write_text(re.sub(r"(?m)^bw_Gbps = .*$", "bw_Gbps = 1e-300", text))
    code, _, err = scape(capsys, "profiles", "check", str(bad))
    _refused(code, err, "must be >= 1e-06")
    code, out, err = scape(capsys, "collective", "-H", "measured/h100-2026-11-26", "--gpus", "2",
                           "--op", "broadcast", "--sizes", "1GiB")
    assert code == 0 and "fitted its broadcast measurements with up to 592% error" in out, err
    assert "warning" in err
    code, out, err = scape(capsys, "compare", "-m", "gpt-345m", "-H", "dgx-h100", "--gpus", "16",
                           "--schemes", "scape:0.99,topk", "--baseline", "scape:0.990",
                           "--format", "json")
    assert code == 0, err
    rows = {r["scheme"]: r for r in json.loads(out)}
    assert set(rows) == {"scape:0.99", "topk"} and rows["scape:0.99"]["speedup"] == 1.0
    acts = []
    for pp in ("1", "16"):
        code, out, err = scape(capsys, "simulate", "-m", "llama-7b", "-H", "dgx-h100", "--gpus",
                               "16", "--pp", pp, "--grad-accum", "1", "--format", "json")
        assert code == 0, err
        acts.append(json.loads(out)[0]["memory_activations_GB"])
    assert acts[1] < acts[0] / 8  # 2 of 32 layers, one micro-batch (was 18.25 against 18.78)
    code, out, err = scape(capsys, "plan", "-m", "tiny-gpt", "--tokens", "1e8", "-H",
                           "dgx-h100", "--max-gpus", "8", "--workers", "1", "--top", "1")
    assert code == 0, err
    row = out.strip().splitlines()[-1].split()
    assert "0.0" not in row and "0" not in row[1:], out  # tiny values keep two digits


def test_tables_keep_small_quantities_and_signed_zeros():
    """A positive quantity never prints as 0 (a tiny plan's cost), float residue does, and
    nothing near zero prints -0 (the probe saw -2.2e-14 in a calibration sweep)."""
    import pandas as pd

    from reports.tables import render

    df = pd.DataFrame({"cost": [0.0004, 12.0, 1e-17, -1e-17],
                       "err": [-2.2e-14, 0.021, -0.04, 3.0]})
    text = render(df, "table", floatfmt={"cost": "{:,.0f}", "err": "{:+.1f}"})
    cells = [line.split() for line in text.splitlines()[1:]]
    assert cells == [["0.0004", "+0.0"], ["12", "+0.0"], ["0", "+0.0"], ["0", "+3.0"]]


def test_session_fifteen_plans_and_nvls(capsys, tmp_path):
    """A model whose sequence tensor parallelism cannot split plans on the layouts that can
    (plan has no --seq-len or --no-sequence-parallel to offer); NVLS all-reduce runs on any
    number of GPUs of a node, on one node as on two (a 72-GPU node had one node without NVLS
    and two with it, 19x faster)."""
    model = _edited(tmp_path, "models/gpt-345m.toml", "seq_len = 1024", "seq_len = 1020")
    code, out, err = scape(capsys, "plan", "-m", str(model), "-t", "1e9", "-H", "dgx-h100",
                           "--max-gpus", "16", "--top", "100000", "--format", "json")
    assert code == 0, err
    assert {r["tp"] for r in json.loads(out)} == {1, 2, 4}  # 1020 splits over 2 and 4, not 8
    big = _edited(tmp_path, "hardware/dgx-b200.toml", "gpus_per_node = 8",
                  "gpus_per_node = 72")
    for gpus in ("72", "144"):  # all-reduce: any number, one node or two
        code, out, err = scape(capsys, "collective", "-H", str(big), "--gpus", gpus, "--sizes",
                               "1GiB", "--format", "json")
        assert code == 0 and json.loads(out)[0]["algo"].startswith("nvls"), err


def test_session_fifteen_physics_probe(capsys):
    """Round 10 (numbers that broke sense): a tree call one KiB under a power of two is not
    slower than at it (NCCL's size table read between its points for the time, as its tuner
    reads it for the choice); an overlap flag a scheme never reads is refused and shows as
    None; quantized at the gradient's width holds no residual; an unmeasured AdamW is not
    cheaper than a fitted AdamS; density options without a warm-up are refused, not dropped."""
    def rows(*args: str) -> list[dict]:
        code, out, err = scape(capsys, *args, "--format", "json")
        assert code == 0, err
        return json.loads(out)

    times = [r["time_s"] for r in rows("collective", "-H", "dgx-h100", "--gpus", "16", "--algo",
                                       "tree", "--sizes", "4095KiB,4MiB,4097KiB")]
    assert times == sorted(times), times
    code, _out, err = scape(capsys, "simulate", "-m", "gpt-345m", "-H", "dgx-h100", "--gpus", "16",
                            "-s", "dense-zero3", "--no-overlap-grad")
    _refused(code, err, "--overlap-grad: not an option of dense-zero3")
    (topk,) = rows("simulate", "-m", "gpt-345m", "-H", "dgx-h100", "--gpus", "16", "-s",
                   "topk:0.99")
    assert topk["overlap_grad_reduce"] is None and topk["overlap_param_gather"] is None
    mem = {r["scheme"]: r["memory_GB"] for r in rows(
        "compare", "-m", "gpt-345m", "-H", "dgx-h100", "--gpus", "16", "--schemes",
        "quantized:32,dense-ddp")}  # the gradients reduce in fp32
    assert mem["quantized:32"] == pytest.approx(mem["dense-ddp"])
    compute = {s: rows("simulate", "-m", "llama-1.8b", "-H", "vista-gh200-socket", "--gpus", "32",
                       "-s", s)[0]["compute_s"] for s in ("dense-adamw", "dense-adams")}
    assert compute["dense-adamw"] > compute["dense-adams"]
    for args, match in ((("--density-shape", "linear"), "the shape of a density warm-up"),
                        (("--density-dense-steps", "5"), "without a warm-up")):
        code, _out, err = scape(capsys, "simulate", "-m", "gpt-345m", "-H", "aws-p5", "--gpus",
                                "16", "-s", "scape:0.99", *args)
        _refused(code, err, match)


def test_a_closed_stdout_is_refused_not_answered_into_nothing():
    """Issue 45: `scape simulate ... >&-` exited 0 having written nothing (Python's stdout is
    None); now exit 2 with one line on stderr."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, "-m", "cli", "simulate", "--model", "gpt-345m",
                        "--hardware", "dgx-h100", "--gpus", "8"], cwd=repo,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                       timeout=120, pass_fds=(), close_fds=True,
                       preexec_fn=lambda: __import__("os").close(1))
    assert r.returncode == 2 and "standard output is closed" in r.stderr, r.stderr
