"""A user's habits (issue 42): every option explained, Megatron-LM's spellings, nccl-tests'
-g, did-you-mean on every choice, fp32 gradient reduction by default."""

from __future__ import annotations

import json

import pytest
import typer

from cli.app import app
from tests.test_cli import scape
from vocabulary.suggest import close_matches, did_you_mean


def _commands(cmd, path=()):
    subs = getattr(cmd, "commands", None)
    if subs:
        for name, sub in subs.items():
            yield from _commands(sub, (*path, name))
    else:
        yield " ".join(path), cmd


def test_every_option_of_every_command_has_help():
    import cli  # noqa: F401  (registers the commands)

    bare = [f"{name} {'/'.join(p.opts)}"
            for name, cmd in _commands(typer.main.get_command(app)) for p in cmd.params
            if p.param_type_name == "option" and "--help" not in p.opts
            and not (getattr(p, "help", None) or "").strip()]
    assert bare == []


SIM = ("simulate", "-m", "llama-7b", "-H", "dgx-h100", "--gpus", "16", "--format", "json")


def _row(capsys, *args):
    code, out, err = scape(capsys, *args)
    assert code == 0, err
    return json.loads(out)[0]


def test_megatron_spellings_run_the_same_step(capsys):
    ours = _row(capsys, *SIM, "--tp", "2", "--pp", "2", "--micro-batch", "2", "--seq-len",
                "2048", "--global-batch", "64", "--cp", "1", "--overlap-grad")
    theirs = _row(capsys, *SIM, "--tensor-model-parallel-size", "2",
                  "--pipeline-model-parallel-size", "2", "--micro-batch-size", "2",
                  "--seq-length", "2048", "--global-batch-size", "64",
                  "--context-parallel-size", "1", "--overlap-grad-reduce")
    assert theirs == ours and ours["tp"] == 2 and ours["micro_batch"] == 2


def test_an_alias_and_its_name_together_are_one_option_given_twice(capsys):
    code, _, err = scape(capsys, *SIM, "--tp", "2", "--tensor-model-parallel-size", "2")
    assert code == 2 and "given 2 times" in err


def test_dash_g_is_nccl_tests_gpus_per_process(capsys):
    code, out, err = scape(capsys, "collective", "-H", "dgx-h100", "--gpus", "8", "-g", "8",
                           "--sizes", "8KiB", "--format", "json")
    per_process = json.loads(out)[0]["time_s"]
    code1, out1, _ = scape(capsys, "collective", "-H", "dgx-h100", "--gpus", "8", "--sizes",
                           "8KiB", "--format", "json")
    assert code == code1 == 0
    # one process launching for 8 GPUs: a small call comes no faster than 8 launches
    assert per_process > json.loads(out1)[0]["time_s"]
    code, _, err = scape(capsys, "collective", "-H", "dgx-h100", "-g", "8")
    assert code == 2 and "GPUs per process" in err and "--gpus N" in err
    code, _, err = scape(capsys, "simulate", "-m", "llama-7b", "-H", "dgx-h100", "-g", "8")
    assert code == 2 and "--gpus N" in err


@pytest.mark.parametrize(("args", "hint"), [
    (("collective", "-H", "dgx-h100", "--gpus", "8", "--op", "alreduce"), "'all_reduce'"),
    (("collective", "-H", "dgx-h100", "--gpus", "8", "--op", "AllGater"), "'all_gather'"),
    ((*SIM, "--recompute", "ful"), "'full'"),
    ((*SIM, "--scheme", "scpae"), "'scape'"),
    (("compare", "-m", "llama-7b", "-H", "dgx-h100", "--gpus", "16", "--schemes", "dense"),
     "'dense-"),
    (("collective", "-H", "dgx-h100", "--gpus", "8", "--format", "jsno"), "'json'"),
])
def test_a_misspelled_choice_gets_the_closest_names(capsys, args, hint):
    code, _, err = scape(capsys, *args)
    assert code == 2 and "did you mean" in err and hint in err
    assert "Value error" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("spelled, op", [("alltoall", "all_to_all"), ("AllReduce", "all_reduce"),
                                        ("reduce-scatter", "reduce_scatter")])
def test_a_collective_spelled_as_nccl_tests_spells_it_is_read(capsys, spelled, op):
    """nccl-tests' binaries say alltoall_perf, all_reduce_perf: --op takes the collective in any
    case and with any separators, and the output names it as this tool does."""
    code, out, _ = scape(capsys, "collective", "-H", "dgx-h100", "--gpus", "16", "--op",
                         spelled, "--sizes", "1MiB", "--format", "json")
    assert code == 0 and f'"op": "{op}"' in out


def test_suggestions_are_close_or_absent():
    assert close_matches("allreduce", ["all_reduce", "all_gather"]) == ["all_reduce"]
    assert close_matches("dense", ["dense-ddp", "dense-zero1", "scape"]) == [
        "dense-ddp", "dense-zero1"]
    assert did_you_mean("xyz", ["all_reduce", "broadcast"]) == ""
    assert did_you_mean("brodcast", ["all_reduce", "broadcast"]) == " (did you mean 'broadcast'?)"


def test_gradients_reduce_in_fp32_unless_told(capsys):
    base = ("simulate", "-m", "llama-1.8b", "-H", "dgx-h100", "--gpus", "16", "-s", "dense-ddp",
            "--format", "json")
    default = _row(capsys, *base)
    bf16 = _row(capsys, *base, "--grad-dtype", "bf16")
    fp32 = _row(capsys, *base, "--grad-dtype", "fp32")
    assert default["grad_dtype"] == "fp32" and default == fp32
    # an all-reduce of the gradients: twice the bytes in fp32
    assert default["bytes_per_gpu"] == pytest.approx(2 * bf16["bytes_per_gpu"], rel=1e-9)
