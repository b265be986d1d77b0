"""Hostile but realistic input (issue 16): every value the user typed is used or refused with
one `scape: error:` line and exit code 2, before any work starts; never a traceback, never a
default in its place, never one of two contradicting options silently."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.test_cli import scape

SIM = ("simulate", "-m", "gpt-345m", "-H", "dgx-h100", "-g", "16")


def _refused(code: int, err: str, match: str) -> None:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("scape: error:"), err
    assert "Traceback" not in err and match in lines[0], err


@pytest.mark.parametrize(("args", "key", "value"), [
    # a typed zero is used, not replaced by the scheme's default
    (("-s", "scape", "--sparsity", "0"), "sparsity", 0.0),
    (("-s", "topk", "--sparsity", "0"), "sparsity", 0.0),
    (("-s", "scalecom", "--sparsity", "0"), "sparsity", 0.0),
    (("-s", "scape:0.9", "--sparsity", "0.9"), "sparsity", 0.9),  # agreeing twice is fine
    (("-s", "quantized", "--bits", "4"), "bits", 4),
    (("-s", "dense-ddp", "--optimizer", "adamw"), "optimizer", "adamw"),
])
def test_typed_values_are_used_and_shown(capsys, args, key, value):
    code, out, err = scape(capsys, *SIM, *args, "--format", "json")
    assert code == 0, err
    assert json.loads(out)[key] == value


@pytest.mark.parametrize(("args", "match"), [
    (("-s", "quantized:8", "--bits", "4"), "disagree"),
    (("-s", "scape:0.9", "--sparsity", "0.5"), "disagree"),
    (("-s", "dense-adams", "--optimizer", "adamw"), "contradicts"),
    (("-s", "quantized:8.7",), "whole number"),
    (("--seq-len", "0"), "seq-len must be at least 1"),
    (("--algo", "tree"), "--algo tree does not run"),
    (("--algo", "bogus"), "unknown --algo"),
    (("-g", str(10**12)), "gpus must be between"),
    (("--trace", "/"), "is a folder"),
    (("--trace", "/proc/no/such.json"), "does not exist"),
    (("--trace", "/proc/such.json"), "cannot write it"),
    (("-s", "scape", "--sync", "momentum"), "options of scape-partitioned"),
])
def test_simulate_refuses(capsys, args, match):
    code, _out, err = scape(capsys, *SIM, *args)
    _refused(code, err, match)


@pytest.mark.parametrize(("args", "match"), [
    (("plan", "-m", "gpt-345m", "--tokens", "1e9", "-H", "dgx-h100", "--global-batch", "0"),
     "--global-batch must be at least 1"),
    (("report", "scaling", "-m", "gpt-345m", "-H", "dgx-h100", "--workers", "0"),
     "--workers must be at least 1"),
    (("reproduce", "--out", __file__), "is a file"),
    (("validate", "--profile", "measured/netbed-100mbit", "--micro-batch", "0"),
     "--micro-batch must be at least 1"),
    (("netbed", "--netbed", "rate=1.2.3mbit"), "--netbed rate must look like"),
    (("netbed", "--seconds", "nan"), "--seconds must be in"),
    (("validate", "--external", "scape-sc26", "--write-profile", "/"), "is a folder"),
])
def test_other_commands_refuse_before_working(capsys, args, match):
    code, _out, err = scape(capsys, *args)
    _refused(code, err, match)


@pytest.mark.parametrize(("args", "match"), [
    (("-s", "quantized", "--bits", "16"), "quantized runtime sends 1, 4 or 8 bits"),
    (("--micro-batch", "0",), "--micro-batch must be at least 1"),
    (("--lr", "nan"), "--lr must be a positive number"),
    (("--timeout", "inf"), "--timeout must be a positive number"),
    (("--seq-len", "100000"), "context"),
    (("--resume",), "--resume needs --out"),
    (("--steps", "0"), "--steps must be at least 1"),
    (("--nprocs", "0"), "--nprocs must be at least 1"),
    (("-s", "scape", "--clip-grad", "-1"), "clip_grad must be positive"),
])
def test_train_refuses_before_any_rank_starts(capsys, args, match):
    code, _out, err = scape(capsys, "train", "--steps", "2", *args)
    _refused(code, err, match)


SCHEMES = ["dense-adams", "dense-ddp", "quantized", "topk", "scalecom", "scape",
           "scape-partitioned", "scape:0.99", "quantized:4", "topk:x", "", "scape:nan", "??"]
NUMBERS = st.one_of(st.integers(-3, 3), st.integers(10**6, 10**15),
                    st.sampled_from(["nan", "inf", "-inf", "1e400", "0.5", "abc", ""]))
FRACTIONS = st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                      st.sampled_from(["0", "1", "0.99", "x"]))


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scheme=st.sampled_from(SCHEMES), gpus=NUMBERS, micro=NUMBERS, seq=NUMBERS,
       sparsity=st.one_of(st.none(), FRACTIONS), bits=st.one_of(st.none(), NUMBERS),
       algo=st.sampled_from(["auto", "ring", "tree", "pairwise", "x"]))
def test_simulate_with_drawn_options(capsys, scheme, gpus, micro, seq, sparsity, bits, algo):
    """Whatever is drawn: exit 0 with the asked-for options in the JSON, or exit 2 with one
    error line; no traceback."""
    args = [*SIM[:5], "-g", str(gpus), "-s", scheme, "--micro-batch", str(micro),
            "--seq-len", str(seq), "--algo", algo, "--format", "json"]
    if sparsity is not None:
        args += ["--sparsity", str(sparsity)]
    if bits is not None:
        args += ["--bits", str(bits)]
    try:
        code, out, err = scape(capsys, *args)
    except Exception as exc:  # anything but a clean exit is a failure
        pytest.fail(f"{args}: {type(exc).__name__}: {exc}")
    if code == 0:
        row = json.loads(out)
        assert row["gpus"] == int(gpus) and row["micro_batch"] == int(micro)
        assert row["seq_len"] == int(seq) and row["algo"] == algo
        if sparsity is not None and row["scheme_name"] in ("topk", "scalecom", "scape",
                                                           "scape-partitioned"):
            assert math.isclose(row["sparsity"], float(sparsity))
        if bits is not None and row["scheme_name"] == "quantized":
            assert row["bits"] == int(bits)
    else:
        assert code == 2, (args, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("scape: error:"), (args, err)


def test_profiles_with_absurd_or_mistyped_values_are_refused(capsys, tmp_path):
    """A typo cannot make a simulation run for hours (2^63 layers) or crash on a string where
    a rank count belongs."""
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    text = (repo / "profiles/models/gpt-345m.toml").read_text()
    huge = tmp_path / "huge.toml"
    huge.write_text("\n".join(f"n_layers = {2**63 - 1}" if line.startswith("n_layers =")
                              else line for line in text.splitlines()))
    code, _out, err = scape(capsys, "profiles", "check", str(huge))
    _refused(code, err, "n_layers: must be <=")
    measured = (repo / "profiles/measured/netbed-100mbit.toml").read_text()
    head, _, tail = measured.partition("[overlap]")
    bad = tmp_path / "bad.toml"
    bad.write_text(head + "[overlap]" + tail.replace("ranks = [2, 3]", 'ranks = ["a", "b"]', 1))
    code, _out, err = scape(capsys, "simulate", "-m", "tiny-gpt", "-H", str(bad), "-g", "2")
    _refused(code, err, "[overlap] ranks")
    code, _out, err = scape(capsys, "collective", "-H", "dgx-h100", "-g", "8", "--sizes", "1e400")
    _refused(code, err, "beyond")


BAD = st.sampled_from(["0", "-1", "nan", "inf", "-inf", "1e400", "", "abc", "1.5", "2" * 25,
                       "1,2", " "])


def _opt(good: list[str]):
    """Mostly a sensible value (three draws in four), sometimes a hostile one."""
    sensible = st.sampled_from(good)
    return st.one_of(sensible, sensible, sensible, BAD)


FAST_COMMANDS = {
    "compare": st.tuples(
        st.just("compare"), st.just("-m"), _opt(["gpt-345m", "tiny-gpt"]), st.just("-H"),
        _opt(["dgx-h100", "vista-gh200-socket"]), st.just("-g"), _opt(["16", "32"]),
        st.just("--schemes"), _opt(["dense-adams,scape:0.99", "topk:0.9,scape-partitioned",
                                    "scape:2", "x:1", ",,"]),
        st.just("--baseline"), _opt(["dense-adams", "topk:0.9", "zzz"]),
        st.just("--micro-batch"), _opt(["1", "2"]), st.just("--format"),
        _opt(["json", "csv"])),
    "collective": st.tuples(
        st.just("collective"), st.just("-H"), _opt(["dgx-h100", "commodity-100gbe"]),
        st.just("-g"), _opt(["8", "16"]), st.just("--op"),
        _opt(["all_reduce", "all_gather", "reduce_scatter", "bcast"]), st.just("--algo"),
        _opt(["ring", "auto", "tree", "pairwise"]), st.just("--sizes"),
        _opt(["1MiB", "1KiB..1GiB", "1XB", "1MiB,2"]), st.just("--format"),
        _opt(["json", "csv"])),
    "profiles": st.tuples(
        st.just("profiles"), _opt(["show", "check"]),
        _opt(["dgx-h100", "llama-7b", "measured/netbed-1gbit", "/etc/passwd", "nope"])),
    "plan": st.tuples(
        st.just("plan"), st.just("-m"), _opt(["gpt-345m"]), st.just("--tokens"),
        _opt(["1e9", "5e8"]), st.just("-H"), _opt(["dgx-h100"]), st.just("--max-gpus"),
        _opt(["8", "16"]), st.just("--schemes"), _opt(["dense-adams,scape:0.99", "scape:x"]),
        st.just("--top"), _opt(["3"]), st.just("--workers"), _opt(["1"]), st.just("--format"),
        _opt(["json"])),
}


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=st.one_of(*FAST_COMMANDS.values()))
def test_fast_commands_with_drawn_options(capsys, args):
    """compare, collective, profiles, plan: exit 0, or exit 2 with one error line; no
    traceback, whatever the options."""
    try:
        code, out, err = scape(capsys, *args)
    except Exception as exc:
        pytest.fail(f"{args}: {type(exc).__name__}: {exc}")
    if code == 0:
        assert out.strip(), args
    else:
        assert code == 2, (args, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("scape: error:"), (args, err)
