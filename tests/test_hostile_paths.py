"""Hostile input (issue 16), files and folders: paths that are folders, FIFOs, symlink loops,
unwritable or inside the shipped profiles, names a terminal cannot encode; refused before any
work, and a refused command leaves no folder behind (session 9's probe, round six). The shared
contract: tests/hostile_util.py."""

from __future__ import annotations

import re
from pathlib import Path

from tests.hostile_util import SIM, _refused
from tests.test_cli import scape


def test_profile_folder_checked_before_measuring(capsys, monkeypatch):
    """A profile folder that cannot be written is refused before minutes of measuring."""
    monkeypatch.setenv("SCAPE_PROFILE_DIR", "/etc/passwd")  # a file, not a folder
    code, _out, err = scape(capsys, "calibrate", "collectives", "--out", "q", "--nprocs", "2",
                            "--sizes", "1KiB", "--repeats", "1")
    _refused(code, err, "cannot write into the profile folder /etc/passwd/measured")


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
                           str(folder / "dgx-h100.toml"), "--gpus", "8", "--sizes", "1MiB"],
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


def test_a_fifo_in_the_report_folder_is_refused_before_work(capsys, tmp_path):
    """reproduce --out DIR with a FIFO named reproduce.md hung on the write; refused now, and
    nothing is written."""
    import os

    os.mkfifo(tmp_path / "reproduce.md")
    code, _out, err = scape(capsys, "reproduce", "--out", str(tmp_path))
    _refused(code, err, "reproduce.md is not a regular file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reproduce.md"]


def test_a_refused_report_leaves_no_folder_behind(capsys, tmp_path):
    """`report scaling` creates its --out folder before the work; refused during the work (a
    measured profile asked for more ranks than it measured), it removes the folders it created
    and that stayed empty, and keeps one that was there."""
    args = ("report", "scaling", "-m", "llama-405b", "-H", "measured/netbed-1gbit", "--quick")
    code, _, err = scape(capsys, *args, "--out", str(tmp_path / "new" / "deep"))
    _refused(code, err, "prices the rank counts it measured")
    assert not (tmp_path / "new").exists()
    (tmp_path / "kept").mkdir()
    code, _, err = scape(capsys, *args, "--out", str(tmp_path / "kept"))
    _refused(code, err, "prices the rank counts it measured")
    assert (tmp_path / "kept").is_dir()


def _shrunk(tmp_path: Path, base: str, name: str) -> Path:
    """A copy of a shipped hardware profile whose GPUs hold almost nothing."""
    text = (Path(__file__).resolve().parents[1] / "profiles" / "hardware" / f"{base}.toml"
            ).read_text()
    text = re.sub(r"(?m)^memory_GB = .*$", "memory_GB = 0.1", text)
    text = re.sub(r"(?m)^device_MiB = .*$", "device_MiB = 95", text)  # [memory]: 0.1 GB
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
