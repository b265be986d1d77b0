"""Hostile input (issue 16), options drawn by hypothesis (zeros, negatives, NaN, inf, huge,
malformed) for simulate, compare, collective, profiles show, plan, train and validate: exit 0
with every asked-for option in the output, or exit 2 with one `scape: error:` line; never a
traceback. The shared contract: tests/hostile_util.py."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.hostile_util import SIM
from tests.test_cli import scape

SCHEMES = ["dense-adams", "dense-ddp", "quantized", "topk", "scalecom", "scape",
           "scape-partitioned", "scape:0.99", "quantized:4", "topk:x", "", "scape:nan", "??"]
NUMBERS = st.one_of(st.integers(-3, 3), st.integers(10**6, 10**15),
                    st.sampled_from(["nan", "inf", "-inf", "1e400", "0.5", "abc", ""]))
FRACTIONS = st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                      st.sampled_from(["0", "1", "0.99", "x"]))



def _run(capsys, args):
    """`scape` on drawn arguments: an exit code and its output; anything but a clean exit (an
    exception escaping the CLI) is a failure."""
    try:
        return scape(capsys, *args)
    except Exception as exc:
        pytest.fail(f"{args}: {type(exc).__name__}: {exc}")


def _one_error_line(code: int, err: str, args) -> None:
    """A refusal: exit 2 and one `scape: error:` line."""
    assert code == 2, (args, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("scape: error:"), (args, err)

@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scheme=st.sampled_from(SCHEMES), gpus=NUMBERS, micro=NUMBERS, seq=NUMBERS,
       sparsity=st.one_of(st.none(), FRACTIONS), bits=st.one_of(st.none(), NUMBERS),
       algo=st.sampled_from(["auto", "ring", "tree", "pairwise", "x"]))
def test_simulate_with_drawn_options(capsys, scheme, gpus, micro, seq, sparsity, bits, algo):
    """Whatever is drawn: exit 0 with the asked-for options in the JSON, or exit 2 with one
    error line; no traceback."""
    args = [*SIM[:5], "--gpus", str(gpus), "-s", scheme, "--micro-batch", str(micro),
            "--seq-len", str(seq), "--algo", algo, "--format", "json"]
    if sparsity is not None:
        args += ["--sparsity", str(sparsity)]
    if bits is not None:
        args += ["--bits", str(bits)]
    code, out, err = _run(capsys, args)
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
        _one_error_line(code, err, args)


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
        "--gpus": _good(["16", "32"]),
        "--schemes": _good(["dense-adams,scape-partitioned:0.99", "topk:0.9,scape-partitioned",
                            "scape:0.9,scape-partitioned,quantized:4"]),
        "--baseline": _good(["dense-adams", "topk:0.9", "scape-partitioned"]),
        "--micro-batch": _good(["1", "2"]), "--sync": _good(["momentum", "gradient"]),
        "--format": _good(["json"])}),
    "collective": _drawn({
        "-H": _good(["dgx-h100", "commodity-100gbe"]), "--gpus": _good(["8", "16"]),
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
            assert r["gpus"] == int(drawn["--gpus"]) and r["micro_batch"] == int(
                drawn["--micro-batch"])
            if r["scheme_name"] == "scape-partitioned":
                assert r["sync"] == drawn["--sync"]
    elif command == "collective":
        for r in rows:
            assert (r["op"], r["algo_asked"], r["hardware"]) == (
                drawn["--op"], drawn["--algo"], drawn["-H"])
            assert r["ranks"] == int(drawn["--gpus"])
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
    code, out, err = _run(capsys, args)
    event(f"{command}: exit {code}")  # --hypothesis-show-statistics: both branches are drawn
    if code == 0:
        _asked_options_shown(command, drawn, out)
    else:
        _one_error_line(code, err, args)


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
    _one_error_line(code, err, args)


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
    args = ["simulate", "-m", "llama-7b", "-H", "dgx-h100", "--gpus", gpus, "-s", scheme,
            "--tp", tp, "--pp", pp, "--pp-schedule", schedule, "--recompute", recompute,
            "--format", "json"]
    for flag, value in (("--virtual-stages", virtual), ("--mfu", mfu),
                        ("--global-batch", batch), ("--attention", attention)):
        if value is not None:
            args += [flag, value]
    code, out, err = _run(capsys, args)
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
        _one_error_line(code, err, args)
