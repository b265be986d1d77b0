"""Hostile input (issue 16), profile files: hardware, model and measured profiles and quality
studies edited by hand (absurd or mistyped values, misspelt tables and keys, values nothing
reads, files kept elsewhere or named alike) are refused in one line naming the file, table and
key, before any command uses them; what calibrate writes stays loadable (session 15's probes).
The shared contract: tests/hostile_util.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.hostile_util import _edited, _refused
from tests.test_cli import scape


def test_profiles_with_absurd_or_mistyped_values_are_refused(capsys, tmp_path):
    """A typo cannot make a simulation run for hours (2^63 layers) or crash on a string where
    a rank count belongs."""
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    text = (repo / "profiles/models/gpt-345m.toml").read_text()
    huge = tmp_path / "huge.toml"
    huge.write_text("\n".join(f"n_layers = {2**63 - 1}" if line.startswith("n_layers =")
                              else 'name = "huge"' if line.startswith("name =")
                              else line for line in text.splitlines()))
    code, _out, err = scape(capsys, "profiles", "check", str(huge))
    _refused(code, err, "n_layers: must be <=")
    measured = (repo / "profiles/measured/netbed-100mbit.toml").read_text()
    head, _, tail = measured.partition("[overlap]")
    bad = tmp_path / "bad.toml"
    head = re.sub(r'(?m)^name = .*$', 'name = "bad"', head)  # its own name: one error
    bad.write_text(head + "[overlap]" + tail.replace("ranks = [2, 3]", 'ranks = ["a", "b"]', 1))
    code, _out, err = scape(capsys, "simulate", "-m", "tiny-gpt", "-H", str(bad), "--gpus", "2")
    _refused(code, err, "[overlap] ranks")
    code, _out, err = scape(capsys, "collective", "-H", "dgx-h100", "--gpus", "8", "--sizes",
                            "1e400")
    _refused(code, err, "beyond")


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
    code, _out, err = scape(capsys, "simulate", "-m", "gpt-345m", "-H", str(bad), "--gpus", "3",
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
    code, out, err = scape(capsys, "collective", "-H", "measured/netbed-1gbit", "--gpus", "2",
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
    code, out, err = scape(capsys, "collective", "-H", str(slow), "--gpus", "16", "--sizes",
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
    code, out, err = scape(capsys, "collective", "-H", "hardware/dgx-h100", "--gpus", "8",
                           "--sizes", "1MiB")
    assert code == 0 and "2 node(s) x 4 GPU(s)" in out, err
    code, out, err = scape(capsys, "profiles", "check", "measured/localonly")
    assert code == 0 and "localonly" in out, err


def test_a_number_where_a_measured_table_belongs_is_refused(tmp_path):
    """Issue 45: `broadcast = 5` under [collectives] (where [collectives.broadcast] goes) gave
    a traceback; now the file, table and key in one line."""
    from profiles import ProfileError, check_profile
    from profiles.files import ROOT

    src = ROOT / "measured" / "netbed-100mbit.toml"
    text = src.read_text()
    head, sep, tail = text.partition("[collectives.broadcast]")
    assert sep
    rest = tail.split("\n[", 1)[1]  # the tables after [collectives.broadcast]
    first = head.index("[collectives.")
    bad = tmp_path / "measured" / src.name
    bad.parent.mkdir()
    bad.write_text(head[:first] + "[collectives]\nbroadcast = 5\n\n" + head[first:] + "[" + rest)
    with pytest.raises(ProfileError, match=r"\[collectives\] broadcast: expected a table"):
        check_profile(bad)


@pytest.mark.parametrize(("old", "new", "match"), [
    # a lump beside its parts: which one counts is not the tool's guess
    ("cuda_context_GiB = 0.3\n", "cuda_context_GiB = 0.3\ncontext_GiB = 2.5\n",
     "[memory] context_GiB is the lump of cuda_context_GiB, workspace_GiB, "
     "nccl_communicator_GiB: give the parts"),
    # a part left out would count as nothing: named, with what it is needed with
    ("nccl_communicator_GiB = 1.0\n", "", "[memory] nccl_communicator_GiB: required with "
     "cuda_context_GiB, workspace_GiB"),
    ("nccl_communicator_GiB = 1.0\n", "nccl_communicator_GiB = -1\n",
     "[memory] nccl_communicator_GiB: must be >= 0"),
    ("workspace_GiB = 0.2\n", 'workspace_GiB = "lots"\n',
     "[memory] workspace_GiB: expected a number"),
])
def test_memory_outside_the_allocator_is_its_parts_or_one_lump(capsys, tmp_path, old, new, match):
    """Issue 61 item 1: what lives outside PyTorch's allocator is the CUDA context, library
    workspaces and NCCL buffers per communicator (the layout's), or one context_GiB as profiles
    gave it before; a mix, a missing part or a bad value is refused with the rule."""
    path = _edited(tmp_path, "hardware/dgx-h100.toml", old, new)
    code, _out, err = scape(capsys, "profiles", "check", str(path))
    _refused(code, err, match)


def test_a_profile_with_one_context_lump_still_loads(capsys, tmp_path):
    """A profile written before the parts (context_GiB = 2.5) is read as it was: the same
    usable memory for every layout."""
    text = _edited(tmp_path, "hardware/dgx-h100.toml", "cuda_context_GiB = 0.3\n"
                   "workspace_GiB = 0.2\nnccl_communicator_GiB = 1.0\n",
                   "context_GiB = 2.5\n")
    code, _out, err = scape(capsys, "profiles", "check", str(text))
    assert code == 0, err
    from profiles import load_hardware
    from simulator.memory.peak import usable_bytes

    hw = load_hardware(text)
    assert hw.memory.context_GiB == 2.5 and hw.memory.nccl_communicator_GiB is None
    assert usable_bytes(hw, 0) == usable_bytes(hw, 6)
