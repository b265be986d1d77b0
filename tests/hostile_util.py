"""Shared by the tests/test_hostile_*.py files: hostile but realistic input (issue 16): every
value the user typed is used or refused with one `scape: error:` line and exit code 2, before any
work starts; never a traceback, never a default in its place, never one of two contradicting
options silently.

The files, by what they probe: test_hostile_flags (options typed on the command line, refused
or used), test_hostile_drawn (options drawn by hypothesis), test_hostile_profiles (edited
hardware, model, measured profiles and quality studies), test_hostile_paths (files and folders
read or written), test_hostile_train (training runs: another run's folder, resume, signals),
test_hostile_results (outputs and physics that must make sense)."""

from __future__ import annotations

from pathlib import Path

SIM = ("simulate", "-m", "gpt-345m", "-H", "dgx-h100", "--gpus", "16")


def _refused(code: int, err: str, match: str) -> None:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("scape: error:"), err
    assert "Traceback" not in err and match in lines[0], err


def _edited(tmp_path: Path, shipped: str, old: str, new: str) -> Path:
    """A copy of a shipped profile (profiles/<shipped>) with one line replaced."""
    text = (Path(__file__).resolve().parents[1] / "profiles" / shipped).read_text()
    assert old in text, old
    path = tmp_path / Path(shipped).name
    path.write_text(text.replace(old, new, 1))
    return path
