"""Hostile input (issue 16), options typed on the command line: a typed value is used and shown,
or refused in one `scape: error:` line with exit 2 before any work starts: simulate, the other
commands, train before any rank starts, an option given twice, and the refusals found by the
probes of sessions 7 (round three) and 14. The shared contract: tests/hostile_util.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.hostile_util import SIM, _refused
from tests.test_cli import scape

ROOT = Path(__file__).resolve().parents[1]


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
    (("--gpus", str(10**12)), "gpus must be between"),
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


ALIASES = {"-H": "--hardware", "-m": "--model"}


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
    (("simulate", "-m", "gpt-345m", "-H", "dgx-h100", "--gpus", "16", "--trace", ""),
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
     "Invalid value for '--max-gpus'"),  # then typer's words: they differ from 0.28 to 0.29
    (("plan", "-m", "gpt-345m", "--tokens", "1e9", "-H", "dgx-h100", "--max-gpus",
      "99999999999"), "--max-gpus must be between 1 and"),
    (("plan", "-m", "gpt-345m", "--tokens", "1e9", "-H", "dgx-h100,dgx-h100"),
     "--hardware: dgx-h100 listed twice"),
    (("plan", "-m", "gpt-345m", "--tokens", "1e9", "-H", ","), "--hardware: give at least one"),
    (("compare", "-m", "gpt-345m", "-H", "dgx-h100", "--gpus", "16", "--schemes", "scape,scape"),
     "--schemes: scape listed twice"),
    (("compare", "-m", "gpt-345m", "-H", "dgx-h100", "--gpus", "16", "--schemes",
      "dense-adams,topk", "--sync", "momentum"), "--sync: not an option of dense-adams or topk"),
    (("compare", "-m", "gpt-345m", "-H", "dgx-h100", "--gpus", "16", "--schemes",
      "dense-adams,topk", "--distributed-optimizer"), "--distributed-optimizer: not an option"),
    (("compare", "-m", "gpt-345m", "-H", "dgx-h100", "--gpus", "16", "--global-batch", "64",
      "--grad-accum", "2"), "--grad-accum 2 contradicts --global-batch 64"),
    (("collective", "-H", "dgx-h100", "--gpus", str(10**20), "--sizes", "1MiB"),
     "a collective needs between 2 and 1,048,576 GPUs"),
    (("collective", "-H", "dgx-h100", "--gpus", "800000000", "--sizes", "1MiB"),
     "a collective needs between 2 and 1,048,576 GPUs"),
    (("collective", "-H", "commodity-100gbe", "--gpus", "8", "--sizes", "1MiB", "--algo", "nvls"),
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
    (("collective", "-H", "dgx-a100", "--gpus", "8", "--op", "all_to_all", "--proto", "ll128",
      "--sizes", "1MiB"), "NCCL's tuner does not choose protocols for all_to_all"),
    (("collective", "-H", "measured/netbed-1gbit", "--gpus", "4", "--sizes", "1KiB"),
     "measured all_reduce with 2, 3 ranks, not 4"),
    (("collective", "-H", "dgx-a100", "--gpus", "8", "--algo", "nvls", "--sizes", "1MiB"),
     "nvls is false"),
    (("collective", "-H", "gcp-a3-mega", "--gpus", "16", "--algo", "nvls", "--sizes", "1MiB"),
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
    (("collective", "-H", "gcp-a3-mega", "--gpus", "16", "--algo", "hierarchical", "--proto", "ll",
      "--sizes", "1MiB"), "--algo hierarchical is not one of NCCL's algorithms"),
    (("collective", "-H", "aws-p5", "--gpus", "16", "--published", "D1-p5-2node-default",
      "--sizes", "3MiB"), "measured none of them"),
    (("compare", "-m", "gpt-345m", "-H", "dgx-h100", "--gpus", "16", "--schemes",
      "scape,scape:0.99"), "scape and scape:0.99 are the same scheme"),
    (("compare", "-m", "gpt-345m", "-H", "dgx-h100", "--gpus", "16", "--schemes",
      "dense-adams,dense-zero1"), "are the same scheme"),
    (("plan", "-m", "gpt-345m", "--tokens", "1e9", "-H", "dgx-h100,"), "has an empty item"),
    (("plan", "-m", "gpt-345m", "--tokens", "1e9", "-H", "dgx-h100", "--price-per-gpu-hour",
      "1e308"), "--price-per-gpu-hour must be at most"),
    (("plan", "-m", "gpt-345m", "--tokens", "1e9", "-H", "dgx-h100", "--schemes",
      "dense-adams", "--density-warmup-frac", "0.1"), "warms its density up"),
    (("simulate", "-m", "gpt-345m", "-H", "dgx-h100", "--gpus", "16", "-s", "scape:0.99",
      "--run-steps", "10", "--density-warmup", "100"), "ends before the density schedule"),
    (("simulate", "-m", "tiny-llama", "-H", "dgx-h100", "--gpus", "8", "--tp", "4"),
     "must divide the 2 key/value heads"),
    (("simulate", "-m", "gpt-345m", "-H", "dgx-h100", "--gpus", "8", "--tp", "8", "--seq-len", "3"),
     "--seq-len 3 does not divide"),
    (("simulate", "-m", "gpt-345m", "-H", "dgx-h100", "--gpus", "16", "--grad-accum",
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


@pytest.mark.parametrize(("args", "match"), [
    # round three of session 7's probe
    (("simulate", "-m", "x" * 300, "-H", "dgx-h100", "--gpus", "16"), "File name too long"),
    (("netbed", "--netbed", "rate=1kbit", "--seconds", "0.5"), "moves too little to time"),
    (("train", "--steps", "2", "--nprocs", "1", "--netbed", "rate=100mbit"),
     "--netbed shapes the links between ranks"),
    (("train", "--steps", "3", "-s", "scape", "--density-warmup", "100"),
     "ends before the density schedule"),
    (("train", "--steps", "2", "--lr", "1e300"), "--lr must be at most"),
    (("train", "--steps", str(10**12)), "--steps must be at most"),
    (("simulate", "-m", "gpt-345m", "-H", "dgx-h100", "--gpus", "16", "--mfu", "1e-300"),
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


@pytest.mark.parametrize(("args", "match"), [
    ((*SIM, "--gpus", "32"), "--gpus given 2 times"),
    ((*SIM, "--tp", "2", "--sequence-parallel", "--no-sequence-parallel"),
     "--sequence-parallel/--no-sequence-parallel given 2 times"),
    (("collective", "-H", "dgx-h100", "--gpus", "8", "--sizes", "1MiB", "--sizes", "1GiB"),
     "--sizes given 2 times"),
    (("profiles", "show", "dgx-h100", "--format", "json", "--format", "table"),
     "--format given 2 times"),
])
def test_an_option_given_twice_is_refused(capsys, args, match):
    """click keeps the last of two values; the first, which the user typed too, would be
    silently replaced: refused instead, in every command and sub-command."""
    code, _, err = scape(capsys, *args)
    _refused(code, err, match)


@pytest.mark.parametrize(("args", "match"), [
    # session 14's probe: an algorithm a measured profile never ran, R = 1, profiles of the
    # other kind, a measured profile named wrongly, NVLS on two GPUs
    (("collective", "-H", "measured/h100-2026-11-26", "--gpus", "4", "--sizes", "1GiB", "--algo",
      "tree"), "all_reduce as tree: profile h100-2026-11-26 measured all_reduce as ring"),
    (("simulate", "-m", "llama-1.8b", "-H", "dgx-h100", "--gpus", "16", "-s",
      "scape-partitioned:0.99", "--refresh-every", "1"), "refresh_every 1 makes every step"),
    (("collective", "-H", "llama-7b", "--gpus", "8"), "(llama-7b is a model profile)"),
    (("simulate", "-m", "profiles/hardware/dgx-h100.toml", "-H", "dgx-h100", "--gpus", "8"),
     "a hardware profile, where a model profile is needed"),
    (("reproduce", "--compute-profile", "nosuch"), "a measured profile is named measured/NAME"),
    (("collective", "-H", "dgx-h100", "--gpus", "2", "--algo", "nvls", "--sizes", "1MiB"),
     "NVLS runs on 3 or more GPUs of a node (here 2)"),
    (("collective", "-H", "dgx-a100", "--gpus", "2", "--algo", "nvls", "--sizes", "1MiB"),
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
])
def test_session_fourteen_refusals(capsys, tmp_path, args, match):
    """Both of session 14's probes: collective..plan, then train, calibrate, validate."""
    if args[0] == "reproduce":
        args = (*args, "--out", str(tmp_path / "r"))
    code, _out, err = scape(capsys, *args)
    _refused(code, err, match)


def test_an_expert_block_too_large_for_a_stage_names_the_etp_that_fits(capsys):
    """--etp left out is --tp (Megatron-Core's default): EP 64 with TP 2 on a 64-GPU stage
    needs 128; the refusal says so and offers --etp 1 beside the EPs that fit."""
    code, _, err = scape(capsys, "simulate", "-m", "deepseek-v3", "-H", "dgx-h100", "--gpus",
                         "1024", "--tp", "2", "--pp", "16", "--ep", "64")
    assert code == 2 and "(not given: --tp, Megatron-Core's default)" in err
    assert "--ep valid here 32 (of 1, 2, 4, 8, 16, 32); or keep --ep 64 with --etp 1" in err


def test_a_layout_that_cannot_run_names_the_nearest_valid_values(capsys):
    """Issue 39's bad input: the rule and the nearest valid values, one line, exit 2."""
    step = ("simulate", "-m", "llama-7b", "-H", "dgx-h100", "--gpus", "64")
    code, _, err = scape(capsys, *step, "--tp", "3")
    # TP 16 and 32 span two and four nodes, priced over the network (32 heads: no 64)
    assert code == 2 and "valid here 2 or 4 (of 1, 2, 4, 8, 16, 32)" in err
    code, _, err = scape(capsys, *step, "--pp", "5")
    assert code == 2 and "--pp that divide here: 4 or 8 (of 1, 2, 4, 8, 16, 32)" in err
    code, _, err = scape(capsys, *step, "--global-batch", "100")
    assert code == 2 and "the nearest that do are 64, 128 (multiples of 64)" in err


def test_refusals_name_their_own_rule_and_the_value_as_typed(capsys, tmp_path):
    """Issue 45's smaller cases: --max-gpus 0 is refused as a --max-gpus problem (not --cp),
    --mfu 1.0000001 echoes what was typed (not "got 1"), an interleaved step says the model
    chunks it ran, and a quality study whose dense AdamS ratio is not 1 is refused."""
    code, _, err = scape(capsys, "plan", "--model", "llama-70b", "--tokens", "1e12",
                         "--hardware", "dgx-h100", "--max-gpus", "0")
    assert code == 2 and "--max-gpus must be at least 1, got 0" in err
    code, _, err = scape(capsys, "simulate", "--model", "gpt-345m", "--hardware", "dgx-h100",
                         "--gpus", "8", "--mfu", "1.0000001")
    assert code == 2 and "got 1.0000001" in err
    code, out, _ = scape(capsys, "simulate", "--model", "llama-7b", "--hardware", "dgx-h100",
                         "--gpus", "16", "--pp", "2", "--pp-schedule", "interleaved",
                         "--global-batch", "64", "--format", "json")
    assert code == 0 and json.loads(out)[0]["virtual_stages"] == 2
    study = (ROOT / "profiles" / "quality").glob("*.toml")
    text = next(iter(study)).read_text()
    assert "tokens_ratio = 1.0000" in text
    bad = tmp_path / "study.toml"
    bad.write_text(text.replace("tokens_ratio = 1.0000", "tokens_ratio = 2.0", 1))
    from profiles import ProfileError
    from profiles.quality import load_quality

    with pytest.raises(ProfileError, match="dense-adams: tokens_ratio must be 1"):
        load_quality(str(bad))


def test_validate_on_a_profile_without_a_host_link_names_the_one_that_has_it(
        capsys, tmp_path):
    """The authors' offload rows copy over the host link: a profile without [gpu]
    host_bw_GBps cannot price them and is refused with the profile that can (session 14's
    probe ran on dgx-h100, which has had its PCIe 5.0 link since)."""
    text = (ROOT / "profiles" / "hardware" / "dgx-h100.toml").read_text()
    text = text.replace('name = "dgx-h100"', 'name = "no-host-link"')
    kept = [line for line in text.splitlines() if not line.startswith("host_bw_GBps")]
    path = tmp_path / "no-host-link.toml"
    path.write_text("\n".join(kept) + "\n")
    code, _out, err = scape(capsys, "validate", "--external", "scape-sc26", "--profile",
                            str(path))
    _refused(code, err, "leave --profile out (vista-gh200)")
