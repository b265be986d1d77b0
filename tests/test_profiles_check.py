"""Issue 42, profiles: `scape profiles check` names every error of a file in one run (the
hand-written H100 profile of tests/fixtures/profiles took 11 runs, one error each), warns of
the optional tables a valid hardware profile lacks and says what replaces each, and `scape
profiles new --like PROFILE NAME` begins a commented copy in the user's profile folder."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from profiles import ProfileError, check_profile, load_hardware, load_model
from profiles.files import ROOT
from profiles.problems import key_lines
from tests.test_cli import scape

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "profiles"
HAND = FIXTURES / "hand-h100.toml"

# the eleven mistakes of hand-h100.toml: (line, where the error places it, what it says)
HAND_ERRORS = [
    (7, "[price] must be a table", "usd_per_gpu_hour"),
    (9, "[gpu] source: missing required key", ""),
    (11, "[gpu] peak_bf16_tflops: expected a number", "write peak_bf16_tflops = 989"),
    (13, "[gpu] hbm_bw_TBps: wrong unit", "hbm_bw_GBps"),
    (22, "[intra_node] kind: must be one of", "did you mean 'nvlink'"),
    (23, "[intra_node] bandwith_GBps: unknown key", "did you mean bw_GBps"),
    (30, "[nic] bw_Gbps: expected a number", "write bw_Gbps = 400"),
    (31, "[nic] efficiency: must be <= 1", "0.94 for 94%"),
    (32, "[nic] latency_us: must be >= 0", ""),
    (40, "[fabric] sorce: unknown key", "did you mean source"),
    (None, "[compute]: missing required table", "mem_efficiency"),
]


def test_one_check_names_every_error_of_the_hand_written_profile():
    with pytest.raises(ProfileError) as info:
        check_profile(HAND)
    errors = info.value.errors
    assert len(errors) == len(HAND_ERRORS), "\n".join(errors)
    for error, (line, where, says) in zip(errors, HAND_ERRORS, strict=True):
        place = f"{HAND}:{line}: " if line else f"{HAND}: "
        assert error.startswith(place + where) and says in error, error
    # a missing required key is said once: not again as "missing bw_GBps" beside its misspelling
    assert not any("bw_GBps: missing" in e or "hbm_bw_GBps: missing" in e for e in errors)


def test_the_cli_prints_them_one_a_line_with_exit_2(capsys):
    code, out, err = scape(capsys, "profiles", "check", str(HAND))
    lines = err.strip().splitlines()
    assert code == 2 and not out and "Traceback" not in err
    assert lines[0] == f"scape: error: {HAND}: 11 errors, one a line:"
    assert len(lines) == 12 and all(line.startswith(f"  {HAND}") for line in lines[1:])


def test_the_mended_profile_is_ok_and_warned_of_each_absent_table(capsys):
    code, out, err = scape(capsys, "profiles", "check", str(FIXTURES / "hand-h100-fixed.toml"))
    assert code == 0 and out.startswith("ok: ") and "valid hardware profile" in out, err
    warned = [line for line in err.splitlines() if line.startswith("scape: warning: ")]
    assert [w.split(":")[2].strip() for w in warned] == [
        "no [nccl]", "no [roofline]", "no [memory]", "no [transport]"], err
    nccl, roofline, memory, transport = warned
    assert "tuner_view" in nccl and "arch hopper" in nccl and "Simple protocol" in nccl
    assert "[compute] mfu 0.4" in roofline
    assert "DEFAULT_RESERVE" in memory and "76,294 MiB" in memory
    assert "[nic] efficiency 0.94" in transport and "latency_us 2 " in transport


def test_warnings_follow_the_profile():
    """dgx-h100 lacks only [transport]; a GPU NCCL's tuner does not know is said to be priced
    by the simulator's own choice."""
    from simulator.step.fallbacks import absent_tables

    h100 = load_hardware("dgx-h100")
    assert [w.split(":")[0] for w in absent_tables(h100)] == ["no [transport]"]
    odd = replace(h100, nccl=None, gpu=replace(h100.gpu, model="Gaudi 3"), price=None)
    lines = {w.split(":")[0]: w for w in absent_tables(odd)}
    assert "names no architecture" in lines["no [nccl]"]
    assert "--price-per-gpu-hour" in lines["no [price]"]


def _copy(tmp_path: Path, src: Path, edits: list[tuple[str, str]], folder="hardware") -> Path:
    text = src.read_text()
    for old, new in edits:
        assert re.search(old, text, flags=re.M), old
        text = re.sub(old, new, text, count=1, flags=re.M)
    out = tmp_path / folder / src.name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return out


def test_a_misspelt_table_is_read_as_the_one_it_stands_for(tmp_path):
    """[fabrics] is said once (not again as a missing [fabric]) and its keys are checked in
    the same run; the checks across tables wait for the tables they read."""
    bad = _copy(tmp_path, ROOT / "hardware" / "dgx-h100.toml",
                [(r"^\[fabric\]", "[fabrics]"), (r"^nodes_per_leaf = 32", "nodes_per_leaf = 0"),
                 (r"^nics_per_node = 8.*$", 'nics_per_node = "8"')])
    with pytest.raises(ProfileError) as info:
        check_profile(bad)
    errors = info.value.errors
    assert len(errors) == 3, errors
    assert "[nic] nics_per_node: expected an integer" in errors[0]
    assert "[fabrics]: unknown table; did you mean [fabric]?" in errors[1]
    assert "[fabrics] nodes_per_leaf: must be >= 1" in errors[2]


def test_model_profiles_collect_their_errors_too(tmp_path):
    bad = _copy(tmp_path, ROOT / "models" / "llama-7b.toml",
                [(r"^family = \"llama\"", 'family = "Llama"'), (r"^n_heads = 32.*$", "n_heads = 0"),
                 (r"^vocab_size = 32000.*$", "vocab = 32000")], folder="models")
    with pytest.raises(ProfileError) as info:
        check_profile(bad)
    errors = info.value.errors
    assert len(errors) == 3, errors
    assert "family: must be one of gpt, llama, got 'Llama' (did you mean 'llama'?)" in errors[0]
    assert "[arch] n_heads: must be >= 1" in errors[1]
    assert "[arch] vocab: unknown key; did you mean vocab_size?" in errors[2]


def test_one_error_is_still_one_line(capsys, tmp_path):
    bad = _copy(tmp_path, ROOT / "hardware" / "dgx-h100.toml", [(r"^sms = 132$", "sms = -1")])
    code, _out, err = scape(capsys, "profiles", "check", str(bad))
    assert code == 2 and err.count("\n") == 1, err
    line = key_lines(bad.read_text())[("gpu", "sms")]
    assert err.startswith(f"scape: error: {bad}:{line}: [gpu] sms: must be >= 1"), err


def test_key_lines_places_keys_under_their_tables():
    text = ('name = "x"\n[gpu]\nmodel = """a\n[nic]\nb"""\nsms = 1\n\n'
            '[collectives.all_reduce]\nalgo = 1\n')
    assert key_lines(text) == {("", "name"): 1, ("gpu", ""): 2, ("gpu", "model"): 3,
                               ("gpu", "sms"): 6, ("collectives.all_reduce", ""): 8,
                               ("collectives.all_reduce", "algo"): 9}


def test_profiles_new_writes_a_commented_copy_that_checks(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("SCAPE_PROFILE_DIR", str(tmp_path))
    code, out, err = scape(capsys, "profiles", "new", "--like", "dgx-h100", "my-h100")
    path = tmp_path / "hardware" / "my-h100.toml"
    assert code == 0 and str(path) in out and "-H hardware/my-h100" in out, err
    text = path.read_text()
    # each key with its meaning, unit and bounds, and dgx-h100's source for it
    above = re.search(r"((?:#.*\n)+)latency_us = 14.0\n", text).group(1)
    said = " ".join(line.lstrip("# ") for line in above.splitlines())
    assert said.startswith("per inter-node ring step through one leaf switch; in microseconds; "
                           "a number >= 0 and <= 100000 source: NVIDIA/nccl src/graph/"), said
    code, out, err = scape(capsys, "profiles", "check", str(path))
    assert code == 0 and "valid hardware profile (my-h100)" in out, err
    mine, shipped = load_hardware("hardware/my-h100"), load_hardware("dgx-h100")
    for table in ("gpu", "node", "intra_node", "nic", "fabric", "roofline", "memory", "nccl",
                  "price", "reference"):
        assert replace(getattr(mine, table), sources={}, source="") == replace(
            getattr(shipped, table), sources={}, source=""), table
    code, out, err = scape(capsys, "profiles", "new", "--like", "llama-1.8b", "my-model")
    assert code == 0, err
    assert load_model("models/my-model").n_params == load_model("llama-1.8b").n_params
    code, out, err = scape(capsys, "profiles", "list", "--format", "json")
    listed = {r["name"]: r for r in json.loads(out)}
    assert listed["hardware/my-h100"]["kind"] == "hardware (yours)"
    assert listed["models/my-model"]["kind"] == "model (yours)"
    assert "begun as a copy of dgx-h100" in listed["hardware/my-h100"]["description"]


def test_profiles_new_refuses_to_overwrite_unless_forced(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("SCAPE_PROFILE_DIR", str(tmp_path))
    path = tmp_path / "hardware" / "mine.toml"
    path.parent.mkdir()
    path.write_text("# my own\n")
    code, _out, err = scape(capsys, "profiles", "new", "--like", "dgx-a100", "mine")
    assert code == 2 and err.count("\n") == 1 and "exists; give --force" in err, err
    assert path.read_text() == "# my own\n"
    code, _out, err = scape(capsys, "profiles", "new", "--like", "dgx-a100", "mine", "--force")
    assert code == 0 and 'name = "mine"' in path.read_text(), err
    for name, says in (("dgx-h100", "a shipped hardware profile has that name"),
                       ("../x", "must be a plain profile name")):
        code, _out, err = scape(capsys, "profiles", "new", "--like", "dgx-a100", name)
        assert code == 2 and err.count("\n") == 1 and says in err, err


def test_a_wrong_name_is_said_with_the_other_errors(capsys, tmp_path):
    """A copy under another file name, with a mistake in it: both in one run (the name used to
    be checked only once the rest was sound)."""
    text = (ROOT / "hardware" / "dgx-h100.toml").read_text()
    copy = tmp_path / "ours.toml"
    copy.write_text(text.replace("nics_per_node = 8", "nics_per_node = -8", 1))
    code, _out, err = scape(capsys, "profiles", "check", str(copy))
    assert code == 2 and "2 errors" in err, err
    assert "name: must equal the file name 'ours'" in err and "nics_per_node" in err
