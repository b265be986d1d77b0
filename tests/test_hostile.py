"""Hostile but realistic input (issue 16): every value the user typed is used or refused with
one `scape: error:` line and exit code 2, before any work starts; never a traceback, never a
default in its place, never one of two contradicting options silently."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
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
    (row,) = json.loads(out)
    assert row[key] == value


@pytest.mark.parametrize(("args", "match"), [
    (("-s", "quantized:8", "--bits", "4"), "disagree"),
    (("-s", "scape:0.9", "--sparsity", "0.5"), "disagree"),
    (("-s", "dense-adams", "--optimizer", "adamw"), "contradicts"),
    (("-s", "quantized:8.7",), "whole number"),
    (("--seq-len", "0"), "seq-len must be at least 1"),
    (("--algo", "tree"), "--algo tree does not run"),
    (("--algo", "bogus"), "Invalid value for '--algo'"),
    (("-g", str(10**12)), "gpus must be between"),
    (("--trace", "/"), "a trailing / names a folder"),
    (("--trace", "/tmp"), "is a folder"),
    (("--trace", "/proc/no/such.json"), "does not exist"),
    (("--trace", "/proc/such.json"), "cannot write it"),
    (("-s", "scape", "--sync", "momentum"), "--sync: not an option of scape (--sync applies "
     "to scape-partitioned)"),
    # an option typed for a scheme that does not read it is refused, not dropped
    (("-s", "dense-adams", "--sparsity", "0.5"), "--sparsity: not an option of dense-adams"),
    (("-s", "quantized", "--sparsity", "0.5"), "--sparsity: not an option of quantized"),
    (("-s", "topk", "--bits", "8"), "--bits: not an option of topk"),
    (("-s", "topk", "--score", "m"), "--score: not an option of topk"),
    (("-s", "topk", "--refresh-every", "0"), "--refresh-every: not an option of topk"),
    (("-s", "dense-adams", "--density-warmup", "100"), "--density-warmup: not an option"),
    (("-s", "dense-adams", "--distributed-optimizer"), "--distributed-optimizer: not an "
     "option of dense-adams (--distributed-optimizer applies to scape)"),
    (("-s", "scape:",), "a value follows the colon"),
    # session 7's probe: a value a scheme does not take, a number float() alone would read,
    # two batch options that disagree, a GPT longer than its learned positions, a full disk
    (("-s", "dense-adams:0.5"), "dense-adams takes no value"),
    (("-s", "dense-ddp:8"), "dense-ddp takes no value"),
    (("-s", "topk:0.9_9"), "cannot read 'topk:0.9_9'"),
    (("-s", "quantized:0_8"), "cannot read 'quantized:0_8'"),
    (("--global-batch", "64", "--grad-accum", "2"), "--grad-accum 2 contradicts --global-batch"),
    (("--seq-len", "8192"), "gpt-345m has learned positions for 1024 tokens"),
    (("--trace", "/dev/full"), "not a regular file"),
    (("-H", "/dev/zero"), "not a regular file"),
])
def test_simulate_refuses(capsys, args, match):
    code, _out, err = scape(capsys, *_override(SIM, args), *args)
    _refused(code, err, match)


ALIASES = {"-g": "--gpus", "-H": "--hardware", "-m": "--model"}


def _override(base: tuple[str, ...], args: tuple[str, ...]) -> tuple[str, ...]:
    """`base` (a command and its option pairs) without the options `args` gives again: an
    option given twice is refused (test_an_option_given_twice_is_refused)."""
    typed = {ALIASES.get(a, a) for a in args if a.startswith("-")}
    pairs = zip(base[1::2], base[2::2], strict=True)
    return (base[0], *(x for f, v in pairs if ALIASES.get(f, f) not in typed for x in (f, v)))


@pytest.mark.parametrize(("args", "match"), [
    (("plan", "-m", "gpt-345m", "--tokens", "1e9", "-H", "dgx-h100", "--global-batch", "0"),
     "--global-batch must be at least 1"),
    (("report", "scaling", "-m", "gpt-345m", "-H", "dgx-h100", "--workers", "0"),
     "--workers must be between 1 and 1024"),
    (("plan", "-m", "gpt-345m", "--tokens", "1e9", "-H", "dgx-h100", "--workers", "10" * 12),
     "--workers must be between 1 and 1024"),
    (("reproduce", "--out", __file__), "is a file"),
    (("validate", "--profile", "measured/netbed-100mbit", "--micro-batch", "0"),
     "--micro-batch must be at least 1"),
    (("netbed", "--netbed", "rate=1.2.3mbit"), "--netbed rate must look like"),
    (("netbed", "--seconds", "nan"), "--seconds must be in"),
    (("validate", "--external", "scape-sc26", "--write-profile", "/"), "a .toml file"),
    (("validate", "--external", "scape-sc26", "--schemes", "scape"),
     "--schemes: options of a validation run, not of --external"),
    (("validate", "--external", "scape-sc26", "--no-probe-compute", "--steps", "5"),
     "--steps, --probe-compute: options of a validation run"),
    (("validate", "--external", "scape-sc26", "--out", ""), "--out: give a folder name"),
    (("validate", "--external", "scape-sc26", "--backend", "nccl", "--share-gpu"),
     "--backend, --share-gpu: options of a validation run"),
    (("validate", "--profile", "measured/netbed-100mbit", "--share-gpu"),
     "--share-gpu: netbed-100mbit's collectives were measured with one GPU per rank"),
    (("validate", "--profile", "measured/netbed-100mbit", "--backend", "nccl"),
     "--backend nccl: netbed-100mbit's collectives were measured with gloo"),
    (("validate", "--profile", "measured/h100-shared-tiny-gpt-2026-11-26", "--probe-compute"),
     "--probe-compute re-times a CPU testbed"),
    (("validate", "--profile", "measured/h100-shared-tiny-gpt-2026-11-26", "--backend", "gloo"),
     "measured with nccl; validate it there"),
    (("reproduce", "--out", " "), "--out: give a folder name"),
    (("report", "scaling", "-m", "gpt-345m", "-H", "dgx-h100", "--out", ""),
     "--out: give a folder name"),
    (("simulate", "-m", "gpt-345m", "-H", "dgx-h100", "-g", "16", "--trace", ""),
     "--trace: give a file name"),
    (("train", "--out", ""), "--out: give a folder name"),
    (("validate", "--profile", "measured/netbed-100mbit", "--schemes", ","),
     "--schemes: give at least one name"),
    (("validate", "--profile", "measured/netbed-100mbit", "--model", "llama-70b"),
     "GB of memory; this host has"),
    (("plan", "-m", "gpt-345m", "--tokens", "1e9", "-H", "dgx-h100", "--top", "0"),
     "--top must be at least 1"),
    (("plan", "-m", "gpt-345m", "--tokens", "inf", "-H", "dgx-h100"),
     "--tokens must be a finite positive number"),
    (("plan", "-m", "gpt-345m", "--tokens", "1e9", "-H", "dgx-h100", "--budget-usd", "inf"),
     "--budget-usd must be a finite positive number"),
    (("plan", "-m", "gpt-345m", "--tokens", "1e9", "-H", "dgx-h100", "--max-gpus", "1e11"),
     "Input should be a valid integer"),
    (("plan", "-m", "gpt-345m", "--tokens", "1e9", "-H", "dgx-h100", "--max-gpus",
      "99999999999"), "--max-gpus must be between 1 and"),
    (("plan", "-m", "gpt-345m", "--tokens", "1e9", "-H", "dgx-h100,dgx-h100"),
     "--hardware: dgx-h100 listed twice"),
    (("plan", "-m", "gpt-345m", "--tokens", "1e9", "-H", ","), "--hardware: give at least one"),
    (("compare", "-m", "gpt-345m", "-H", "dgx-h100", "-g", "16", "--schemes", "scape,scape"),
     "--schemes: scape listed twice"),
    (("compare", "-m", "gpt-345m", "-H", "dgx-h100", "-g", "16", "--schemes",
      "dense-adams,topk", "--sync", "momentum"), "--sync: not an option of dense-adams or topk"),
    (("compare", "-m", "gpt-345m", "-H", "dgx-h100", "-g", "16", "--schemes",
      "dense-adams,topk", "--distributed-optimizer"), "--distributed-optimizer: not an option"),
    (("compare", "-m", "gpt-345m", "-H", "dgx-h100", "-g", "16", "--global-batch", "64",
      "--grad-accum", "2"), "--grad-accum 2 contradicts --global-batch 64"),
    (("collective", "-H", "dgx-h100", "-g", str(10**20), "--sizes", "1MiB"),
     "a collective needs between 2 and 1,048,576 GPUs"),
    (("collective", "-H", "dgx-h100", "-g", "800000000", "--sizes", "1MiB"),
     "a collective needs between 2 and 1,048,576 GPUs"),
    (("collective", "-H", "commodity-100gbe", "-g", "8", "--sizes", "1MiB", "--algo", "nvls"),
     "--algo nvls needs switch hardware"),
    (("calibrate", "collectives", "--out", "x", "--nprocs", "100000"),
     "GB of memory; this host has"),
    (("calibrate", "collectives", "--out", "x", "--nprocs", "2,2"), "--nprocs lists 2 twice"),
    # session 8's probe: an empty list item, a data file of another kind, a path for a name
    (("calibrate", "collectives", "--out", "x", "--nprocs", "2,,3"), "has an empty item"),
    (("validate", "--external", "nccl-tuning"), "unknown external data set 'nccl-tuning'"),
    (("validate", "--external", "../hardware/dgx-h100"), "unknown external data set"),
    (("validate", "--external", "scape-sc26", "--profile", "commodity-100gbe"),
     "compute fit is not physical on commodity-100gbe"),
    (("collective", "-H", "dgx-a100", "-g", "8", "--op", "all_to_all", "--proto", "ll128",
      "--sizes", "1MiB"), "NCCL's tuner does not choose protocols for all_to_all"),
    (("collective", "-H", "measured/netbed-1gbit", "-g", "4", "--sizes", "1KiB"),
     "measured all_reduce with 2, 3 ranks, not 4"),
    (("collective", "-H", "dgx-a100", "-g", "8", "--algo", "nvls", "--sizes", "1MiB"),
     "nvls is false"),
    (("collective", "-H", "gcp-a3-mega", "-g", "16", "--algo", "nvls", "--sizes", "1MiB"),
     "nvls runs inside one node"),
    (("plan", "-m", "gpt-345m", "-H", "dgx-h100", "--tokens", "1e300"),
     "--tokens must be at most"),
    (("calibrate", "compute", "--out", "y", "--max-ranks", "100000"), "--max-ranks"),
    (("calibrate", "compute", "--out", "y", "--backend", "nccl"),
     "--backend nccl times this machine's GPU: none found"),
    (("netbed", "--cleanup", "--nprocs", "5"), "--cleanup builds no testbed: --nprocs"),
    (("netbed", "--netbed", "rate=1mbit,rate=1gbit"), "--netbed gives rate twice"),
    (("netbed", "--netbed", "rate=0.0001kbit"), "--netbed rate must be between"),
    (("netbed", "--netbed", "rate=1gbit,delay=99999999ms"), "--netbed delay must be at most"),
    (("train", "--steps", "2", "--seed", str(10**20)), "--seed must be between 0 and 2**63"),
    # round two of session 7's probe
    (("validate", "--external", "scape-sc26", "--write-profile",
      "profiles/hardware/vista-gh200.toml"), "inside the shipped profiles"),
    (("collective", "-H", "gcp-a3-mega", "-g", "16", "--algo", "hierarchical", "--proto", "ll",
      "--sizes", "1MiB"), "--algo hierarchical is not one of NCCL's algorithms"),
    (("collective", "-H", "aws-p5", "-g", "16", "--published", "D1-p5-2node-default",
      "--sizes", "3MiB"), "measured none of them"),
    (("compare", "-m", "gpt-345m", "-H", "dgx-h100", "-g", "16", "--schemes",
      "scape,scape:0.99"), "scape and scape:0.99 are the same scheme"),
    (("compare", "-m", "gpt-345m", "-H", "dgx-h100", "-g", "16", "--schemes",
      "dense-adams,dense-zero1"), "are the same scheme"),
    (("plan", "-m", "gpt-345m", "--tokens", "1e9", "-H", "dgx-h100,"), "has an empty item"),
    (("plan", "-m", "gpt-345m", "--tokens", "1e9", "-H", "dgx-h100", "--price-per-gpu-hour",
      "1e308"), "--price-per-gpu-hour must be at most"),
    (("plan", "-m", "gpt-345m", "--tokens", "1e9", "-H", "dgx-h100", "--schemes",
      "dense-adams", "--density-warmup-frac", "0.1"), "warms its density up"),
    (("simulate", "-m", "gpt-345m", "-H", "dgx-h100", "-g", "16", "-s", "scape:0.99",
      "--run-steps", "10", "--density-warmup", "100"), "ends before the density schedule"),
    (("simulate", "-m", "tiny-llama", "-H", "dgx-h100", "-g", "8", "--tp", "4"),
     "must divide the 2 key/value heads"),
    (("simulate", "-m", "gpt-345m", "-H", "dgx-h100", "-g", "8", "--tp", "8", "--seq-len", "3"),
     "--seq-len 3 does not divide"),
    (("simulate", "-m", "gpt-345m", "-H", "dgx-h100", "-g", "16", "--grad-accum",
      str(2**63 - 1)), "micro-batches (--grad-accum or --global-batch): at most"),
    (("calibrate", "collectives", "--out", "dgx-h100"), "a shipped hardware profile has that"),
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
    (("-s", "scape", "--clip-grad", "-1"), "--clip-grad must be a positive number"),
    (("-s", "dense-adams", "--clip-grad", "inf"), "--clip-grad must be a positive number"),
    (("-s", "dense-adams", "--density-shape", "linear"),
     "--density-shape: not an option of dense-adams"),
    (("-s", "scape", "--density-shape", "cubic"), "Invalid value for '--density-shape'"),
    (("-s", "scape", "--density-dense-steps", "-1"), "density dense steps must be >= 0"),
    (("-s", "topk:0.99", "--lowpass-beta", "0.5"),
     "--lowpass-beta: not an option of topk (--lowpass-beta applies to scalecom)"),
    (("-s", "scalecom:0.99", "--lowpass-beta", "0"), "--lowpass-beta must be in (0, 1], got 0.0"),
    (("-s", "scalecom:0.99", "--lowpass-beta", "nan"), "--lowpass-beta must be in (0, 1], got nan"),
    (("--micro-batch", "100000"), "GB of memory; this host has"),
    (("--model", "llama-70b"), "GB of memory; this host has"),
    (("--nprocs", "100000"), "GB of memory; this host has"),
])
def test_train_refuses_before_any_rank_starts(capsys, args, match):
    code, _out, err = scape(capsys, "train", *(() if "--steps" in args else ("--steps", "2")),
                            *args)
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
        (row,) = json.loads(out)
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
                       "1,2", " ", "scape:2", "x:1", ",,", "scape,scape", "scape:", "1XB",
                       "1MiB,2", "/etc/passwd", "/", "../x"])


def _opt(good: list[str]):
    """Mostly a sensible value (three draws in four), sometimes a hostile one."""
    sensible = st.sampled_from(good)
    return st.one_of(sensible, sensible, sensible, BAD)


def _good(values: list[str]):
    """A value from `values`, which may hold some the command must refuse ("x:1")."""
    return st.sampled_from(values)


@st.composite
def _drawn(draw, flags: dict):
    """{flag: value}: every flag with a value drawn from its strategy (mostly sensible), and
    in half the draws one flag given a hostile value, so that both the runs and the refusals
    are exercised, each refusal for one cause."""
    values = {flag: draw(strategy) for flag, strategy in flags.items()}
    if draw(st.booleans()):
        values[draw(st.sampled_from(sorted(flags)))] = draw(BAD)
    return values


FAST_COMMANDS = {
    "compare": _drawn({
        "-m": _good(["gpt-345m", "tiny-gpt"]), "-H": _good(["dgx-h100", "vista-gh200-socket"]),
        "-g": _good(["16", "32"]),
        "--schemes": _good(["dense-adams,scape-partitioned:0.99", "topk:0.9,scape-partitioned",
                            "scape:0.9,scape-partitioned,quantized:4"]),
        "--baseline": _good(["dense-adams", "topk:0.9", "scape-partitioned"]),
        "--micro-batch": _good(["1", "2"]), "--sync": _good(["momentum", "gradient"]),
        "--format": _good(["json"])}),
    "collective": _drawn({
        "-H": _good(["dgx-h100", "commodity-100gbe"]), "-g": _good(["8", "16"]),
        "--op": _good(["all_reduce", "all_gather", "reduce_scatter"]),
        "--algo": _good(["ring", "auto", "tree"]),
        "--sizes": _good(["1MiB", "1KiB..1GiB", "4KiB,1MiB"]), "--format": _good(["json"])}),
    "profiles show": _drawn({
        "name": _good(["dgx-h100", "llama-7b", "measured/netbed-1gbit", "tiny-gpt"]),
        "--format": _good(["json"])}),
    "plan": _drawn({
        "-m": _good(["gpt-345m"]), "--tokens": _good(["1e9", "5e8"]), "-H": _good(["dgx-h100"]),
        "--max-gpus": _good(["8", "16"]), "--schemes": _good(["dense-adams,scape:0.99"]),
        "--top": _good(["3", "1"]), "--workers": _good(["1"]),
        "--budget-usd": _good(["1e9", "1e5"]), "--format": _good(["json"])}),
}


def _argv(command: str, drawn: dict) -> list[str]:
    argv = command.split()
    for flag, value in drawn.items():
        argv += [value] if flag == "name" else [flag, value]
    return argv


def _asked_options_shown(command: str, drawn: dict, out: str) -> None:
    """On success the output carries every option as typed: the JSON says what ran."""
    data = json.loads(out)
    if command == "profiles show":  # a profile document, not results: one object
        assert isinstance(data, dict) and data["name"] in drawn["name"]
        return
    rows = data
    assert isinstance(rows, list) and rows, (command, drawn)  # every command: a list of rows
    if command == "compare":
        assert {r["scheme"] for r in rows} >= set(drawn["--schemes"].split(","))
        for r in rows:
            assert (r["model"], r["hardware"], r["baseline"]) == (
                drawn["-m"], drawn["-H"], drawn["--baseline"])
            assert r["gpus"] == int(drawn["-g"]) and r["micro_batch"] == int(
                drawn["--micro-batch"])
            if r["scheme_name"] == "scape-partitioned":
                assert r["sync"] == drawn["--sync"]
    elif command == "collective":
        for r in rows:
            assert (r["op"], r["algo_asked"], r["hardware"]) == (
                drawn["--op"], drawn["--algo"], drawn["-H"])
            assert r["ranks"] == int(drawn["-g"])
            assert drawn["--algo"] == "auto" or r["algo"] == drawn["--algo"]
    elif command == "plan":
        assert len(rows) <= int(drawn["--top"])
        for r in rows:
            assert r["model"] == drawn["-m"] and r["hardware"] == drawn["-H"]
            assert r["tokens"] == float(drawn["--tokens"]) and r["scheme"] in drawn[
                "--schemes"].split(",")
            assert r["gpus"] <= int(drawn["--max-gpus"]) == r["max_gpus"]
            assert r["cost_usd"] <= float(drawn["--budget-usd"]) == r["budget_usd"]


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=st.one_of(*(st.tuples(st.just(c), s) for c, s in FAST_COMMANDS.items())))
def test_fast_commands_with_drawn_options(capsys, case):
    """compare, collective, profiles show, plan with drawn values (zeros, negatives, NaN, inf,
    huge, malformed): exit 0 with every asked-for option in the JSON, or exit 2 with one
    `scape: error:` line; never a traceback."""
    command, drawn = case
    args = _argv(command, drawn)
    try:
        code, out, err = scape(capsys, *args)
    except Exception as exc:
        pytest.fail(f"{args}: {type(exc).__name__}: {exc}")
    event(f"{command}: exit {code}")  # --hypothesis-show-statistics: both branches are drawn
    if code == 0:
        _asked_options_shown(command, drawn, out)
    else:
        assert code == 2, (args, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("scape: error:"), (args, err)


class _Reached(Exception):
    """Raised by the stand-in launcher: the command got past every check."""


TRAIN_FLAGS = {
    "-s": _good(["dense-adams", "scape", "scape-partitioned:0.9", "topk", "quantized:4"]),
    "--steps": _good(["3", "50"]), "--micro-batch": _good(["2", "16"]),
    "--seq-len": _good(["64", "128"]), "--lr": _good(["1e-3", "3e-4"]),
    "--seed": _good(["0", "7"]), "--timeout": _good(["30", "5.5"]),
    "--nprocs": _good(["2", "3"]), "--checkpoint-every": _good(["0", "10"]),
    "--format": _good(["json", "table"]),
}
VALIDATE_FLAGS = {
    "--profile": _good(["measured/netbed-100mbit", "measured/netbed-1gbit"]),
    "--schemes": _good(["dense-adams,scape:0.99", "scape-partitioned:0.9"]),
    "--nprocs": _good(["2", "2,3"]), "--steps": _good(["3", "30"]),
    "--rounds": _good(["1", "2"]), "--micro-batch": _good(["8", "16"]),
    "--format": _good(["json", "csv"]),
}


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=st.one_of(st.tuples(st.just("train"), _drawn(TRAIN_FLAGS)),
                      st.tuples(st.just("validate"), _drawn(VALIDATE_FLAGS))))
def test_train_and_validate_with_drawn_options(capsys, monkeypatch, tmp_path_factory, case):
    """train and validate with drawn values, up to the point where ranks would start (the
    launcher is a stand-in that records what it was given): either every check passed and the
    run would get exactly the typed values, or exit 2 with one `scape: error:` line, before any
    process starts; never a traceback."""
    from reports import validate as v
    from scape import netbed
    from scape.train import launch

    command, drawn = case
    monkeypatch.setattr(netbed, "check_available", lambda *why: None)  # no namespaces built

    def fake_launch(cfg, nprocs, backend="gloo", netbed=None, progress=False, share_gpu=False):
        raise _Reached((cfg, nprocs))

    def fake_run(hw, model, configs, worlds, micro_batch, steps, rounds, *args, **kwargs):
        raise _Reached((configs, worlds, micro_batch, steps, rounds))

    monkeypatch.setattr(launch, "launch", fake_launch)
    monkeypatch.setattr(v, "run", fake_run)
    out_dir = ["--out", str(tmp_path_factory.mktemp("out"))]
    args = _argv(command, drawn) + out_dir
    try:
        code, _out, err = scape(capsys, *args)
    except _Reached as reached:
        event(f"{command}: reached the launch")
        if command == "train":
            cfg, nprocs = reached.args[0]
            assert nprocs == int(drawn["--nprocs"]) and cfg.steps == int(drawn["--steps"])
            assert cfg.micro_batch == int(drawn["--micro-batch"])
            assert cfg.seq_len == int(drawn["--seq-len"]) and cfg.seed == int(drawn["--seed"])
            assert cfg.lr == float(drawn["--lr"]) and cfg.timeout_s == float(drawn["--timeout"])
            assert cfg.checkpoint_every == int(drawn["--checkpoint-every"])
            name, _, value = drawn["-s"].partition(":")
            assert cfg.scheme.scheme in (name, "dense-zero1")
            if value:
                assert value in (str(cfg.scheme.sparsity), str(cfg.scheme.bits))
        else:
            configs, worlds, micro_batch, steps, rounds = reached.args[0]
            assert [s for s, _ in configs] == drawn["--schemes"].split(",")
            assert worlds == [int(w) for w in drawn["--nprocs"].split(",")]
            assert (micro_batch, steps, rounds) == (int(drawn["--micro-batch"]),
                                                    int(drawn["--steps"]),
                                                    int(drawn["--rounds"]))
        return
    except Exception as exc:
        pytest.fail(f"{args}: {type(exc).__name__}: {exc}")
    event(f"{command}: exit {code}")
    assert code == 2, (args, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("scape: error:"), (args, err)


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(gpus=st.sampled_from(["8", "16", "24", "64", "0", "-8", "x"]),
       tp=st.sampled_from(["1", "2", "8", "3", "0"]),
       pp=st.sampled_from(["1", "2", "4", "3", "48", "0", "-1", "x"]),
       schedule=st.sampled_from(["1f1b", "interleaved", "zigzag"]),
       virtual=st.sampled_from([None, "2", "3", "0", "-2", "100"]),
       recompute=st.sampled_from(["none", "selective", "full", "half"]),
       mfu=st.sampled_from([None, "0.5", "1", "0", "1.5", "-1", "nan"]),
       attention=st.sampled_from([None, "flash", "flash2", "unfused", "paged"]),
       scheme=st.sampled_from(["dense-adams", "dense-zero2", "dense-zero3", "scape:0.99",
                               "topk:0.99"]),
       batch=st.sampled_from([None, "64", "96", "7"]))
def test_simulate_with_drawn_parallel_layouts(capsys, gpus, tp, pp, schedule, virtual,
                                             recompute, mfu, attention, scheme, batch):
    """Pipeline, recomputation and compute-model options, drawn: exit 0 with the options
    in the JSON row, or exit 2 with one error line; never a traceback."""
    args = ["simulate", "-m", "llama-7b", "-H", "dgx-h100", "-g", gpus, "-s", scheme,
            "--tp", tp, "--pp", pp, "--pp-schedule", schedule, "--recompute", recompute,
            "--format", "json"]
    for flag, value in (("--virtual-stages", virtual), ("--mfu", mfu),
                        ("--global-batch", batch), ("--attention", attention)):
        if value is not None:
            args += [flag, value]
    try:
        code, out, err = scape(capsys, *args)
    except Exception as exc:  # anything but a clean exit is a failure
        pytest.fail(f"{args}: {type(exc).__name__}: {exc}")
    if code == 0:
        (row,) = json.loads(out)
        assert (row["tp"], row["pp"], row["pp_schedule"]) == (int(tp), int(pp), schedule)
        assert (row["recompute"], row["attention"]) == (recompute, attention or "flash")
        assert attention is None or mfu is None  # typed beside an MFU it is refused
        assert row["tp"] * row["pp"] * row["dp"] == row["gpus"]
        assert row["step_time_s"] > 0 and row["fits_memory"]
        if mfu is not None:
            assert row["mfu"] == float(mfu) and row["compute_model"].endswith("(given)")
    else:
        assert code == 2, (args, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("scape: error:"), (args, err)


def test_profile_folder_checked_before_measuring(capsys, monkeypatch):
    """A profile folder that cannot be written is refused before minutes of measuring."""
    monkeypatch.setenv("SCAPE_PROFILE_DIR", "/etc/passwd")  # a file, not a folder
    code, _out, err = scape(capsys, "calibrate", "collectives", "--out", "q", "--nprocs", "2",
                            "--sizes", "1KiB", "--repeats", "1")
    _refused(code, err, "cannot write into the profile folder /etc/passwd/measured")


@pytest.mark.parametrize(("old", "new", "match"), [
    # a misspelt table would silently fall back to the defaults
    (r"^\[collectives\.all_reduce\]", "[collectives.all_reducez]", "unknown collective"),
    (r'^algo = "ring"', 'algo = "nvls"', "algo: must be one a backend runs"),
])
def test_measured_profile_tables_are_checked(tmp_path, old, new, match):
    import re

    from profiles import ProfileError, check_profile
    from profiles.files import ROOT

    src = ROOT / "measured" / "netbed-100mbit.toml"
    text = src.read_text()
    assert re.search(old, text, flags=re.M), old
    bad = tmp_path / "measured" / src.name
    bad.parent.mkdir()
    bad.write_text(re.sub(old, new, text, count=1, flags=re.M))
    with pytest.raises(ProfileError, match=match):
        check_profile(bad)


def test_report_scaling_refuses_a_sweep_where_nothing_fits(capsys, tmp_path):
    code, _out, err = scape(capsys, "report", "scaling", "-m", "llama-405b", "-H", "dgx-h100",
                            "--quick", "--workers", "1", "--out", str(tmp_path / "r"))
    _refused(code, err, "no step of the sweep fits in GPU memory")


def test_reproduce_runs_on_a_shapes_priced_profile(capsys, tmp_path):
    """reproduce on a [roofline] profile (no MFU): it says how compute is priced instead."""
    code, _out, err = scape(capsys, "reproduce", "-H", "dgx-h100", "--out", str(tmp_path / "r"),
                            "--format", "csv")
    assert code == 0, err
    text = (tmp_path / "r" / "reproduce_assumptions.csv").read_text()
    assert "dgx-h100: 8 GPU(s) per node" in text and "([roofline], sustained 0.72)" in text


def test_symlink_loops_and_fifos_are_refused_in_one_line(capsys, tmp_path):
    import os

    (tmp_path / "a.toml").symlink_to(tmp_path / "b.toml")
    (tmp_path / "b.toml").symlink_to(tmp_path / "a.toml")
    code, _out, err = scape(capsys, "profiles", "check", str(tmp_path / "a.toml"))
    _refused(code, err, "cannot read it (Too many levels of symbolic links)")
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)  # opening it to write would block until a reader came
    code, _out, err = scape(capsys, *SIM, "--trace", str(fifo))
    _refused(code, err, "not a regular file")


def test_profiles_list_shows_measured_profiles_and_says_why_one_is_broken(capsys, tmp_path,
                                                                            monkeypatch):
    (tmp_path / "measured").mkdir()
    (tmp_path / "measured" / "broken.toml").write_text("bad = [\n")
    monkeypatch.setenv("SCAPE_PROFILE_DIR", str(tmp_path))
    code, out, err = scape(capsys, "profiles", "list", "--format", "json")
    assert code == 0, err
    rows = {r["name"]: r for r in json.loads(out)}
    assert rows["measured/netbed-100mbit"]["kind"] == "measured"
    assert rows["measured/broken"]["description"].startswith("INVALID: ")


@pytest.mark.parametrize(("args", "match"), [
    # round three of session 7's probe
    (("simulate", "-m", "x" * 300, "-H", "dgx-h100", "-g", "16"), "File name too long"),
    (("netbed", "--netbed", "rate=1kbit", "--seconds", "0.5"), "moves too little to time"),
    (("train", "--steps", "2", "--nprocs", "1", "--netbed", "rate=100mbit"),
     "--netbed shapes the links between ranks"),
    (("train", "--steps", "3", "-s", "scape", "--density-warmup", "100"),
     "ends before the density schedule"),
    (("train", "--steps", "2", "--lr", "1e300"), "--lr must be at most"),
    (("train", "--steps", str(10**12)), "--steps must be at most"),
    (("simulate", "-m", "gpt-345m", "-H", "dgx-h100", "-g", "16", "--mfu", "1e-300"),
     "is no training run"),
    (("plan", "-m", "gpt-345m", "--tokens", "1e9", "-H", "dgx-h100", "--quality", ""),
     "--quality: give a study name"),
    (("plan", "-m", "gpt-345m", "--tokens", "1e9", "-H", "dgx-h100", "--quality", "nope"),
     "no such study"),
    (("validate", "--profile", "measured/netbed-100mbit", "--netbed", "rate=1000mbit"),
     "was measured on rate=100mbit"),
])
def test_round_three_refusals(capsys, args, match):
    code, _out, err = scape(capsys, *args)
    _refused(code, err, match)


def test_train_keeps_other_runs_apart(capsys, tmp_path):
    """An --out holding another run is refused without --resume (not overwritten); --resume
    with other settings than the checkpoint's run is refused, naming them."""
    other = tmp_path / "run"
    (other / "checkpoint").mkdir(parents=True)
    code, _out, err = scape(capsys, "train", "--steps", "2", "--out", str(other))
    _refused(code, err, "holds another run (checkpoint)")
    (other / "config.json").write_text(json.dumps({"model": "tiny-gpt", "lr": 0.5}))
    code, _out, err = scape(capsys, "train", "--steps", "2", "--out", str(other), "--resume")
    _refused(code, err, "lr: 0.5 then, 0.001 now")


def test_output_that_the_terminal_cannot_encode_is_escaped(tmp_path):
    """stdout in ASCII (PYTHONIOENCODING=ascii) and a path with an accent: escapes, exit 0."""
    import os
    import subprocess
    import sys

    folder = tmp_path / "\u00e9"
    folder.mkdir()
    (folder / "dgx-h100.toml").write_text(
        (Path(__file__).parents[1] / "profiles" / "hardware" / "dgx-h100.toml").read_text())
    proc = subprocess.run([sys.executable, "-m", "cli", "collective", "-H",
                           str(folder / "dgx-h100.toml"), "-g", "8", "--sizes", "1MiB"],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONIOENCODING": "ascii"},
                          cwd=Path(__file__).parents[1])
    assert proc.returncode == 0, proc.stderr
    assert "\\xe9" in proc.stdout


def test_calibrate_never_writes_inside_the_shipped_profiles(capsys, monkeypatch):
    """SCAPE_PROFILE_DIR (or XDG_DATA_HOME) pointing inside profiles/ is refused before any
    folder is made there; SCAPE_PROFILE_DIR=profiles itself is the one way to rewrite them."""
    from profiles.files import ROOT

    monkeypatch.setenv("SCAPE_PROFILE_DIR", str(ROOT / "hardware"))
    code, _out, err = scape(capsys, "calibrate", "collectives", "--out", "foo", "--nprocs", "2",
                            "--sizes", "1KiB", "--repeats", "1")
    _refused(code, err, "is inside the shipped profiles")
    assert not (ROOT / "hardware" / "measured").exists()


def test_a_typed_probe_compute_is_refused_where_nothing_can_be_probed(capsys, tmp_path):
    """--probe-compute typed on a measured profile without [concurrency] slowdowns was quietly
    turned off; it is refused, and left out it still runs without the probe."""
    from profiles.files import ROOT

    text = (ROOT / "measured" / "netbed-1gbit.toml").read_text()
    text = re.sub(r"^ranks = \[1, 2, 3\]\nslowdown = \[.*\]$", "ranks = []\nslowdown = []",
                  text, flags=re.M)
    assert "slowdown = []" in text
    path = tmp_path / "netbed-1gbit.toml"
    path.write_text(text)
    code, _out, err = scape(capsys, "validate", "--profile", str(path), "--probe-compute")
    _refused(code, err, "--probe-compute: netbed-1gbit has no [concurrency] slowdown")


def test_the_measured_algorithm_typed_runs_as_measured(capsys):
    """--algo ring on a profile that measured its ring: the measured efficiency and per-call
    overhead stay (they were dropped: 1315 us became 350 us)."""
    rows = []
    for extra in ((), ("--algo", "ring")):
        code, out, err = scape(capsys, "collective", "-H", "measured/netbed-1gbit", "-g", "3",
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
    code, out, err = scape(capsys, "collective", "-H", str(path), "-g", "8", "--sizes", "1GiB",
                           "--format", "json")
    assert code == 0, err
    assert json.loads(out)[0]["algo"] != "nvls"


def test_compare_table_names_the_typed_scheme_options(capsys):
    code, out, err = scape(capsys, "compare", "-m", "gpt-345m", "-H", "dgx-h100", "-g", "16",
                           "--sync", "momentum", "--distributed-optimizer", "--schemes",
                           "dense-adams,scape-partitioned:0.99,scape:0.99")
    assert code == 0, err
    header = next(line for line in out.splitlines() if line.startswith("# options:"))
    assert "sync momentum" in header and "'distributed_optimizer': True" in header


def test_a_default_bucket_too_small_is_named_as_the_default():
    from profiles import UserError, load_model
    from scape.plan import SchemeConfig, plan

    with pytest.raises(UserError, match=r"the default bucket \(.*Megatron's"):
        plan(SchemeConfig("dense-ddp"), load_model("llama-405b").n_params * 40, 8)


def test_a_fifo_in_the_report_folder_is_refused_before_work(capsys, tmp_path):
    """reproduce --out DIR with a FIFO named reproduce.md hung on the write; refused now, and
    nothing is written."""
    import os

    os.mkfifo(tmp_path / "reproduce.md")
    code, _out, err = scape(capsys, "reproduce", "--out", str(tmp_path))
    _refused(code, err, "reproduce.md is not a regular file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reproduce.md"]


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


def test_a_refused_report_leaves_no_folder_behind(capsys, tmp_path):
    """`report scaling` creates its --out folder before the work; refused during the work (a
    measured profile asked for more ranks than it measured), it removes the folders it created
    and that stayed empty, and keeps one that was there."""
    args = ("report", "scaling", "-m", "llama-405b", "-H", "measured/netbed-1gbit", "--quick")
    code, _, err = scape(capsys, *args, "--out", str(tmp_path / "new" / "deep"))
    _refused(code, err, "not 512")
    assert not (tmp_path / "new").exists()
    (tmp_path / "kept").mkdir()
    code, _, err = scape(capsys, *args, "--out", str(tmp_path / "kept"))
    _refused(code, err, "not 512")
    assert (tmp_path / "kept").is_dir()


@pytest.mark.parametrize(("args", "match"), [
    ((*SIM, "-g", "32"), "--gpus/-g given 2 times"),
    ((*SIM, "--tp", "2", "--sequence-parallel", "--no-sequence-parallel"),
     "--sequence-parallel/--no-sequence-parallel given 2 times"),
    (("collective", "-H", "dgx-h100", "-g", "8", "--sizes", "1MiB", "--sizes", "1GiB"),
     "--sizes given 2 times"),
    (("profiles", "show", "dgx-h100", "--format", "json", "--format", "table"),
     "--format given 2 times"),
])
def test_an_option_given_twice_is_refused(capsys, args, match):
    """click keeps the last of two values; the first, which the user typed too, would be
    silently replaced: refused instead, in every command and sub-command."""
    code, _, err = scape(capsys, *args)
    _refused(code, err, match)


def _shrunk(tmp_path: Path, base: str, name: str) -> Path:
    """A copy of a shipped hardware profile whose GPUs hold almost nothing."""
    text = (Path(__file__).resolve().parents[1] / "profiles" / "hardware" / f"{base}.toml"
            ).read_text()
    text = re.sub(r"(?m)^memory_GB = .*$", "memory_GB = 0.1", text)
    text = re.sub(r'(?m)^name = .*$', f'name = "{name}"', text)
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return path


def test_round_six_refusals(capsys, tmp_path, monkeypatch):
    """Session 9's probe: each of these ended in a traceback, a silently wrong result or a
    file where a folder was meant; now one line, exit 2, nothing left behind."""
    # a subnormal bucket overflowed the bucket count to infinity
    code, _, err = scape(capsys, *SIM, "--bucket-mb", "1e-320")
    _refused(code, err, "at most 10,000")
    # a scaling report where nothing fits indexed a missing column
    tiny = _shrunk(tmp_path, "dgx-h100", "tiny")
    code, _, err = scape(capsys, "report", "scaling", "-m", "gpt-345m", "-H", str(tiny),
                         "--quick", "--workers", "1", "--out", str(tmp_path / "sc"))
    _refused(code, err, "no step of the sweep fits in GPU memory")
    # reproduce printed step times of steps no GPU holds
    small = _shrunk(tmp_path, "vista-gh200", "small")
    code, _, err = scape(capsys, "reproduce", "-H", str(small), "--out", str(tmp_path / "rep"))
    _refused(code, err, "no step of the paper's setting fits")
    assert not (tmp_path / "sc").exists() and not (tmp_path / "rep").exists()
    # a trailing slash names a folder; pathlib dropped it and wrote a file of that name
    code, _, err = scape(capsys, *SIM, "--trace", str(tmp_path / "newdir") + "/")
    _refused(code, err, "a trailing / names a folder")
    assert not (tmp_path / "newdir").exists()
    # a written profile must be one -H and profiles show read
    code, _, err = scape(capsys, "validate", "--external", "scape-sc26", "--out",
                         str(tmp_path / "ve"), "--write-profile", str(tmp_path / "fit.txt"))
    _refused(code, err, "a profile is a .toml file")
    # a run shorter than one step
    code, _, err = scape(capsys, "plan", "-m", "gpt-345m", "-t", "1", "-H", "dgx-h100")
    _refused(code, err, "less than one step")
    # profiles show reads any path profiles check reads, with its messages
    code, _, err = scape(capsys, "profiles", "show", str(tmp_path))
    _refused(code, err, "is a directory")
    # calibrate: names that would write an unloadable profile, and an empty --sizes, refused
    # before any rank starts, and the profile folder made for them removed again
    monkeypatch.setenv("SCAPE_PROFILE_DIR", str(tmp_path / "user"))
    for out, match in ((" ", "plain profile name"), ("x.toml", "without .toml"),
                       ("-x", "plain profile name"), ("a\nb", "plain profile name")):
        code, _, err = scape(capsys, "calibrate", "collectives", "--out", out)
        _refused(code, err, match)
    code, _, err = scape(capsys, "calibrate", "collectives", "--out", "x", "--sizes", "")
    _refused(code, err, "no sizes given")
    code, _, err = scape(capsys, "calibrate", "collectives", "--out", "x", "--repeats", "0")
    _refused(code, err, "--repeats")
    assert not (tmp_path / "user").exists()


def test_round_seven_refusals(capsys, tmp_path):
    """Session 9's second probe: a launch count that changes nothing, a held-out band shown
    for calls no published run resembles, and a copy of a shipped profile against its runs."""
    code, _, err = scape(capsys, "collective", "-H", "commodity-100gbe", "-g", "8", "--sizes",
                         "1KiB", "--gpus-per-process", "8")
    _refused(code, err, "has no [nccl] launch_us")
    code, _, err = scape(capsys, "collective", "-H", "dgx-h100", "-g", "8", "--op",
                         "all_to_all", "--sizes", "1KiB", "--gpus-per-process", "8")
    _refused(code, err, "all_to_all is not an NCCL-tuned call")
    for args in (("--op", "broadcast"), ("--algo", "tree", "--proto", "ll"),
                 ("--op", "all_to_all")):
        code, out, err = scape(capsys, "collective", "-H", "dgx-h100", "-g", "8", "--sizes",
                               "64MiB", *args, "--format", "json")
        assert code == 0, err
        assert json.loads(out)[0]["heldout_rows"] == 0, args
    copy = tmp_path / "dgx-h100.toml"
    copy.write_text((Path(__file__).resolve().parents[1] / "profiles" / "hardware"
                     / "dgx-h100.toml").read_text())
    code, _, err = scape(capsys, "collective", "-H", str(copy), "-g", "8", "--published",
                         "A1-nvls")
    _refused(code, err, "is another file of that name")


@pytest.mark.parametrize(("args", "match"), [
    # session 14's probe: an algorithm a measured profile never ran, R = 1, profiles of the
    # other kind, a measured profile named wrongly, NVLS on two GPUs
    (("collective", "-H", "measured/h100-2026-11-26", "-g", "4", "--sizes", "1GiB", "--algo",
      "tree"), "all_reduce as tree: profile h100-2026-11-26 measured all_reduce as ring"),
    (("simulate", "-m", "llama-1.8b", "-H", "dgx-h100", "-g", "16", "-s",
      "scape-partitioned:0.99", "--refresh-every", "1"), "refresh_every 1 makes every step"),
    (("collective", "-H", "llama-7b", "-g", "8"), "(llama-7b is a model profile)"),
    (("simulate", "-m", "profiles/hardware/dgx-h100.toml", "-H", "dgx-h100", "-g", "8"),
     "a hardware profile, where a model profile is needed"),
    (("reproduce", "--compute-profile", "nosuch"), "a measured profile is named measured/NAME"),
    (("collective", "-H", "dgx-h100", "-g", "2", "--algo", "nvls", "--sizes", "1MiB"),
     "NVLS runs on 3 or more GPUs of a node (here 2)"),
    (("collective", "-H", "dgx-a100", "-g", "2", "--algo", "nvls", "--sizes", "1MiB"),
     "the profile's [nccl] nvls is false"),
    # session 14's second probe (train, calibrate, validate)
    (("calibrate", "compute", "--out", "c1", "--kinds", "scale", "--threads", "0"),
     "--threads must be at least 1"),
    (("calibrate", "compute", "--out", "c1", "--kinds", "scale", "--micro-batch", "2"),
     "--kinds times kernels only"),
    (("calibrate", "compute", "--out", "c1", "--threads", "100000"), "give at most"),
    (("validate", "--profile", "measured/h100-2026-11-26", "--netbed", "rate=100mbit"),
     "not on a shaped link"),
    (("validate", "--profile", "measured/netbed-1gbit", "--rounds", str(10**12)),
     "--rounds must be between 1 and 100"),
    (("validate", "--external", "scape-sc26", "--write-profile", ".toml"),
     "give the profile a name before .toml"),
    (("calibrate", "collectives", "--out", "big", "--nprocs", "2", "--sizes", "1KiB,1TiB"),
     "1TiB buffers need about"),
    (("calibrate", "collectives", "--out", "one", "--nprocs", "2", "--sizes", "1MiB"),
     "takes two sizes or more"),
    (("calibrate", "collectives", "--out", "a" * 300, "--nprocs", "2"),
     "longer than the 255 bytes"),
    (("validate", "--external", "scape-sc26", "--profile", "dgx-h100"),
     "leave --profile out (vista-gh200)"),
])
def test_session_fourteen_refusals(capsys, tmp_path, args, match):
    """Both of session 14's probes: collective..plan, then train, calibrate, validate."""
    if args[0] == "reproduce":
        args = (*args, "--out", str(tmp_path / "r"))
    code, _out, err = scape(capsys, *args)
    _refused(code, err, match)


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
    code, out, err = scape(capsys, "collective", "-H", "measured/h100-2026-11-26", "-g", "2",
                           "--op", "broadcast", "--sizes", "1GiB")
    assert code == 0 and "fitted its broadcast measurements with up to 592% error" in out, err
    assert "warning" in err
    code, out, err = scape(capsys, "compare", "-m", "gpt-345m", "-H", "dgx-h100", "-g", "16",
                           "--schemes", "scape:0.99,topk", "--baseline", "scape:0.990",
                           "--format", "json")
    assert code == 0, err
    rows = {r["scheme"]: r for r in json.loads(out)}
    assert set(rows) == {"scape:0.99", "topk"} and rows["scape:0.99"]["speedup"] == 1.0
    acts = []
    for pp in ("1", "16"):
        code, out, err = scape(capsys, "simulate", "-m", "llama-7b", "-H", "dgx-h100", "-g",
                               "16", "--pp", pp, "--format", "json")
        assert code == 0, err
        acts.append(json.loads(out)[0]["memory_activations_GB"])
    assert acts[1] < acts[0] / 8  # 2 of 32 layers, one micro-batch (was 18.25 against 18.78)
    code, out, err = scape(capsys, "plan", "-m", "tiny-gpt", "--tokens", "1e8", "-H",
                           "dgx-h100", "--max-gpus", "8", "--workers", "1", "--top", "1")
    assert code == 0, err
    row = out.strip().splitlines()[-1].split()
    assert "0.0" not in row and "0" not in row[1:], out  # tiny values keep two digits


def test_a_resume_keeps_the_runs_schedule_and_a_broken_config_is_refused(capsys, tmp_path,
                                                                        monkeypatch):
    """--steps set the learning-rate schedule: a resume may stop earlier on it (stop_at), not
    go past it; a config.json that cannot be read cannot vouch for the settings; RANK and
    WORLD_SIZE alone (a job script's) do not make scape train a torchrun rank."""
    from cli.train import _refuse_changed, _resumed_steps
    from profiles import UserError
    from scape.train.launch import under_torchrun
    from scape.train.loop import TrainConfig

    cfg = TrainConfig(steps=5, warmup_steps=1)
    assert _resumed_steps(cfg, {"steps": 5}) is cfg
    early = _resumed_steps(cfg, {"steps": 8})
    assert (early.steps, early.stop_at) == (8, 5)
    assert early.lr_at(5) != cfg.lr_at(5)  # step 5 of the run's 8-step schedule, not of 5
    with pytest.raises(UserError, match="goes past the run's 3"):
        _resumed_steps(cfg, {"steps": 3})
    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(UserError, match=r"config\.json cannot be read"):
        _refuse_changed(tmp_path, cfg)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    assert not under_torchrun()
    code, _out, err = scape(capsys, "train", "--steps", "1", "--out", str(tmp_path / "r"))
    _refused(code, err, "RANK and WORLD_SIZE are set, but not by torchrun")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "x")
    assert under_torchrun()


def test_an_ignored_sighup_stays_ignored():
    """`nohup scape ...` ignores SIGHUP before scape starts: the run must outlive its terminal
    (the review caught SIGHUP ending such a run); a default SIGHUP ends it with cleanup."""
    import signal

    from vocabulary.errors import catch_terminating, raise_terminated, restore

    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        previous = catch_terminating()
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is raise_terminated
        restore(previous)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        previous = catch_terminating()
        assert signal.getsignal(signal.SIGHUP) is raise_terminated
        restore(previous)
    finally:
        signal.signal(signal.SIGHUP, before)


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


def _edited(tmp_path: Path, shipped: str, old: str, new: str) -> Path:
    """A copy of a shipped profile (profiles/<shipped>) with one line replaced."""
    text = (Path(__file__).resolve().parents[1] / "profiles" / shipped).read_text()
    assert old in text, old
    path = tmp_path / Path(shipped).name
    path.write_text(text.replace(old, new, 1))
    return path


def _validate_refused(capsys, tmp_path: Path, old: str, new: str, match: str) -> None:
    """`scape validate` on the shipped netbed-1gbit profile with one line replaced: refused,
    before any run, in one line."""
    profile = _edited(tmp_path, "measured/netbed-1gbit.toml", old, new)
    code, _out, err = scape(capsys, "validate", "--profile", str(profile), "--steps", "3",
                            "--nprocs", "2")
    _refused(code, err, match)


@pytest.mark.parametrize(("shipped", "old", "new", "match"), [
    ("measured/netbed-1gbit.toml", 'network_netbed = "rate=1000mbit,delay=0ms"',
     "network_netbed = 7", "[measured] network_netbed: expected str"),
    ("measured/netbed-1gbit.toml", "compute_micro_batch = 16", 'compute_micro_batch = "abc"',
     "[measured] compute_micro_batch: expected an integer"),
    ("measured/h100-2026-11-26.toml", "network_share_gpu = true", 'network_share_gpu = "no"',
     "[measured] network_share_gpu: expected bool"),
    ("measured/netbed-1gbit.toml", "[concurrency]\n", "[concurrency]\nslowdwon = [1.0]\n",
     "[concurrency] slowdwon: unknown key"),
    ("measured/netbed-1gbit.toml", "network_host =", 'netwrok_backend = "gloo"\nnetwork_host =',
     "[measured] netwrok_backend: unknown key"),
    ("hardware/dgx-h100.toml", "[gpu]\n", "[gpu]\nsms_source = " + "[" * 500 + "]" * 500
     + "\n", "nested too deeply"),
    ("hardware/dgx-h100.toml", "[price]\nusd_per_gpu_hour = 6.155",
     "[price]\nusd_per_gpu_hour = 1e-300", "usd_per_gpu_hour: must be >= 1e-06"),
])
def test_session_fifteen_profile_contents_refused(capsys, tmp_path, shipped, old, new, match):
    """Round 9 (a probe of hostile profile files): what a file holds is checked where it is
    read, in one line naming the file, table and key, before any command uses it."""
    path = _edited(tmp_path, shipped, old, new)
    code, _out, err = scape(capsys, "profiles", "check", str(path))
    _refused(code, err, match)


def test_session_fifteen_measured_lists_and_files(capsys, tmp_path):
    """Measured lists take finite values with the scalars' floors (an inf kernel time printed
    an infinite step, exit 0); a profile's own netbed is blamed on the profile, not on a
    --netbed never typed; a BOM is not TOML's business; a study names known schemes."""
    source = Path(__file__).resolve().parents[1] / "profiles" / "measured" / "netbed-1gbit.toml"
    bad = _edited(tmp_path, "measured/netbed-1gbit.toml", "0.01499870100087719]", "inf]")
    code, _out, err = scape(capsys, "simulate", "-m", "gpt-345m", "-H", str(bad), "-g", "3",
                            "-s", "dense-adamw")
    _refused(code, err, "sizes/seconds: must be two lists")
    _validate_refused(capsys, tmp_path, '"rate=1000mbit,delay=0ms"', '"rate=garbage"',
                      "profile netbed-1gbit: [measured] network_netbed 'rate=garbage'")
    bom = tmp_path / "bom" / "dgx-h100.toml"
    bom.parent.mkdir()
    bom.write_bytes(b"\xef\xbb\xbf" + (source.parents[1] / "hardware" / "dgx-h100.toml")
                    .read_bytes())
    code, out, err = scape(capsys, "profiles", "check", str(bom))
    assert "valid hardware profile" in out
    assert code == 0, err
    study = (source.parents[1] / "quality" / "convergence-protocol.toml").read_text()
    typo = tmp_path / "typo.toml"
    typo.write_text(study.replace('scheme = "scape"', 'scheme = "scpae"', 1))
    code, _out, err = scape(capsys, "plan", "-m", "tiny-gpt", "-t", "1e8", "-H", "dgx-h100",
                            "--quality", str(typo))
    _refused(code, err, "unknown scheme 'scpae'")


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
        code, out, err = scape(capsys, "collective", "-H", str(big), "-g", gpus, "--sizes",
                               "1GiB", "--format", "json")
        assert code == 0 and json.loads(out)[0]["algo"].startswith("nvls"), err


def test_session_fifteen_values_read_by_nothing_and_where_files_are(capsys, tmp_path,
                                                                   monkeypatch):
    """A profile value nothing reads is refused (an MFU beside [roofline], a netbed bucket on
    a cluster profile); a file is what its tables say wherever it is kept; measured/NAME is the
    same file for -H and for `profiles show` whatever the current directory holds; a
    description's control characters are escaped; a study is checked as a study."""
    for shipped, old, new, match in (
            ("hardware/dgx-h100.toml", "[compute]\n", "[compute]\nmfu = 0.05\n",
             "[compute] mfu: a profile with a [roofline] table"),
            ("hardware/dgx-h100.toml", "[nic]\n", "[nic]\nburst_bytes = 1e9\n",
             "[nic] burst_bytes: the token bucket of a netbed link"),
            ("hardware/dgx-h100.toml", "[gpu]\n", "[gpu_tables]\n",
             "[gpu] must be a table")):
        path = _edited(tmp_path, shipped, old, new)
        if new.startswith("[gpu_tables]"):  # gpu as a key, not a table
            path.write_text("gpu = [1, 2]\n" + path.read_text())
        code, _out, err = scape(capsys, "profiles", "check", str(path))
        _refused(code, err, match)
    kept = tmp_path / "models"
    kept.mkdir()
    (kept / "dgx-h100.toml").write_bytes(
        (Path(__file__).resolve().parents[1] / "profiles" / "hardware" / "dgx-h100.toml")
        .read_bytes())
    code, out, err = scape(capsys, "profiles", "check", str(kept / "dgx-h100.toml"))
    assert code == 0 and "valid hardware profile" in out, err
    here = tmp_path / "cwd"
    shadow = _edited(tmp_path, "measured/netbed-1gbit.toml", "[nic]\n", "[nic]\n")
    (here / "measured").mkdir(parents=True)
    shadow.rename(here / "measured" / "netbed-1gbit.toml")
    monkeypatch.chdir(here)
    code, out, err = scape(capsys, "collective", "-H", "measured/netbed-1gbit", "-g", "2",
                           "--sizes", "1MiB")
    assert code == 0, err
    shipped = Path(__file__).resolve().parents[1] / "profiles" / "measured" / "netbed-1gbit.toml"
    assert f"# profile {shipped}" in out
    code, out, err = scape(capsys, "profiles", "check", "measured/netbed-1gbit")
    assert code == 0 and str(shipped) in out, err
    escaped = _edited(tmp_path, "hardware/dgx-h100.toml", 'description = "',
                      'description = "line1\\nline2 \\u001b[31m')
    code, out, err = scape(capsys, "profiles", "show", str(escaped))
    assert code == 0 and "line1\\nline2 \\x1b[31m" in out and "\x1b" not in out, err
    study = shipped.parents[1] / "quality" / "convergence-protocol.toml"
    code, out, err = scape(capsys, "profiles", "check", str(study))
    assert code == 0 and "valid quality study" in out, err


def test_session_fifteen_refusals_name_their_source(capsys, tmp_path, monkeypatch):
    """A refit of no profile makes no folder; a quoted ~ in SCAPE_PROFILE_DIR is the home
    folder; the paper's fixed 32 GPUs (nodes of 24 cannot make them) and a profile's own
    model are named as such; a slow
    link's rate is not printed as 0.0 GB/s; nodes of 72 GPUs sweep 72, 144, ... GPUs."""
    from profiles.files import user_dir
    from reports.scaling import Sweep

    monkeypatch.setenv("SCAPE_PROFILE_DIR", str(tmp_path / "new"))
    code, _out, err = scape(capsys, "calibrate", "refit", "--profile", "nosuch")
    _refused(code, err, "refit nosuch: needs")
    assert not (tmp_path / "new").exists()
    monkeypatch.setenv("SCAPE_PROFILE_DIR", "~/scape-profiles")
    assert user_dir() == Path.home() / "scape-profiles"
    monkeypatch.delenv("SCAPE_PROFILE_DIR")
    big = _edited(tmp_path, "hardware/dgx-h100.toml", "gpus_per_node = 8",
                  "gpus_per_node = 24")
    code, _out, err = scape(capsys, "reproduce", "-H", str(big), "--out", str(tmp_path / "r"))
    _refused(code, err, "the paper's setting runs 32 GPUs, which nodes of 24 GPUs")
    _validate_refused(capsys, tmp_path, 'compute_model = "tiny-gpt"', 'compute_model = "nosuch"',
                      "profile netbed-1gbit: [measured] compute_model 'nosuch'")
    slow = _edited(tmp_path, "hardware/dgx-h100.toml", "bw_Gbps = 400.0", "bw_Gbps = 0.000001")
    code, out, err = scape(capsys, "collective", "-H", str(slow), "-g", "16", "--sizes",
                           "1MiB")
    assert code == 0 and "x 0.0 GB/s" not in out.splitlines()[0], err
    assert Sweep.full(72).gpus[:3] == (8, 72, 144)
    assert Sweep.full(8).gpus[0] == 8 and 72 not in Sweep.full(8).gpus


def test_session_fifteen_review_findings(capsys, tmp_path, monkeypatch):
    """A review of round 9's checks: what calibrate writes stays loadable (a kernel_<kind>
    note, a profile of collectives alone refitted), a study shows and lists in one line, a
    relative path is that file, measured/NAME found here after the shipped and user ones."""
    noted = _edited(tmp_path, "measured/netbed-1gbit.toml", "network_host =",
                    'kernel_scale = "2026-11-27 on a CPU"\nnetwork_host =')
    code, out, err = scape(capsys, "profiles", "check", str(noted))
    assert code == 0, err
    sourced = _edited(tmp_path, "measured/netbed-1gbit.toml", "[concurrency]\n",
                      '[concurrency]\nslowdown_source = "measured"\n')
    code, out, err = scape(capsys, "profiles", "check", str(sourced))
    assert code == 0, err
    home = tmp_path / "pd" / "measured"
    home.mkdir(parents=True)
    shipped = Path(__file__).resolve().parents[1] / "profiles" / "measured"
    text = (shipped / "netbed-1gbit.toml").read_text().replace(
        'name = "netbed-1gbit"', 'name = "netonly"')
    keep = text.split("\n[gpu]")[0] if "\n[gpu]" in text else text
    (home / "netonly.toml").write_text(keep)
    (home / "netonly.collectives.csv").write_bytes(
        (shipped / "netbed-1gbit.collectives.csv").read_bytes())
    monkeypatch.setenv("SCAPE_PROFILE_DIR", str(tmp_path / "pd"))
    code, out, err = scape(capsys, "calibrate", "refit", "--profile", "netonly")
    assert code == 0, err
    (home / "study.toml").write_bytes(
        (shipped.parent / "quality" / "convergence-protocol.toml").read_bytes())
    code, out, err = scape(capsys, "profiles", "list")
    assert code == 0 and "INVALID: a quality study" in out, err
    code, out, err = scape(capsys, "profiles", "show", "quality/convergence-protocol.toml")
    assert code == 0 and "quality study convergence-protocol" in out, err
    monkeypatch.delenv("SCAPE_PROFILE_DIR")
    here = tmp_path / "cwd"
    (here / "hardware").mkdir(parents=True)
    local = _edited(tmp_path, "hardware/dgx-h100.toml", "gpus_per_node = 8",
                    "gpus_per_node = 4")
    local.rename(here / "hardware" / "dgx-h100.toml")
    (here / "measured").mkdir()
    (here / "measured" / "localonly.toml").write_text(
        (shipped / "netbed-1gbit.toml").read_text().replace('name = "netbed-1gbit"',
                                                             'name = "localonly"'))
    monkeypatch.chdir(here)
    code, out, err = scape(capsys, "collective", "-H", "hardware/dgx-h100", "-g", "8",
                           "--sizes", "1MiB")
    assert code == 0 and "2 node(s) x 4 GPU(s)" in out, err
    code, out, err = scape(capsys, "profiles", "check", "measured/localonly")
    assert code == 0 and "localonly" in out, err


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

    times = [r["time_s"] for r in rows("collective", "-H", "dgx-h100", "-g", "16", "--algo",
                                       "tree", "--sizes", "4095KiB,4MiB,4097KiB")]
    assert times == sorted(times), times
    code, _out, err = scape(capsys, "simulate", "-m", "gpt-345m", "-H", "dgx-h100", "-g", "16",
                            "-s", "dense-zero3", "--no-overlap-grad")
    _refused(code, err, "--overlap-grad: not an option of dense-zero3")
    (topk,) = rows("simulate", "-m", "gpt-345m", "-H", "dgx-h100", "-g", "16", "-s",
                   "topk:0.99")
    assert topk["overlap_grad_reduce"] is None and topk["overlap_param_gather"] is None
    mem = {r["scheme"]: r["memory_GB"] for r in rows(
        "compare", "-m", "gpt-345m", "-H", "dgx-h100", "-g", "16", "--schemes",
        "quantized:16,dense-ddp")}
    assert mem["quantized:16"] == pytest.approx(mem["dense-ddp"])
    compute = {s: rows("simulate", "-m", "llama-1.8b", "-H", "vista-gh200-socket", "-g", "32",
                       "-s", s)[0]["compute_s"] for s in ("dense-adamw", "dense-adams")}
    assert compute["dense-adamw"] > compute["dense-adams"]
    for args, match in ((("--density-shape", "linear"), "the shape of a density warm-up"),
                        (("--density-dense-steps", "5"), "without a warm-up")):
        code, _out, err = scape(capsys, "simulate", "-m", "gpt-345m", "-H", "aws-p5", "-g",
                                "16", "-s", "scape:0.99", *args)
        _refused(code, err, match)
