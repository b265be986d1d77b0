"""Writes that land whole or not at all (issue 45, vocabulary/atomic.py)."""

from __future__ import annotations

import pytest

from vocabulary.atomic import atomic_path, write_text_atomic


def test_a_failed_write_leaves_the_file_as_it_was_and_nothing_beside_it(tmp_path):
    target = tmp_path / "profile.toml"
    target.write_text("old = 1\n")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("new = ")  # half a write, then the writer fails
        raise RuntimeError("interrupted")
    assert target.read_text() == "old = 1\n"
    assert [p.name for p in tmp_path.iterdir()] == ["profile.toml"]
    write_text_atomic(target, "new = 2\n")
    assert target.read_text() == "new = 2\n"
    assert [p.name for p in tmp_path.iterdir()] == ["profile.toml"]
    write_text_atomic(tmp_path / "fresh.json", "{}")  # a file that was not there
    assert (tmp_path / "fresh.json").read_text() == "{}"


def test_report_tables_and_figures_land_whole(tmp_path, monkeypatch):
    """Reports (reproduce, scaling, validate --external, traces) write their CSVs and figures
    through to_csv_atomic / savefig_atomic: a table whose writer fails halfway leaves the old
    file, and a figure keeps the format its name asks for though written under a temporary
    name."""
    import pandas as pd

    from reports import figure_style
    from vocabulary.atomic import to_csv_atomic

    csv = tmp_path / "predictions.csv"
    to_csv_atomic(pd.DataFrame({"a": [1, 2]}), csv, index=False)
    assert csv.read_text() == "a\n1\n2\n"

    class HalfWritten:
        def to_csv(self, path, **kwargs):
            open(path, "w").write("a\n1\n")  # noqa: SIM115
            raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        to_csv_atomic(HalfWritten(), csv)
    assert csv.read_text() == "a\n1\n2\n" and len(list(tmp_path.iterdir())) == 1
    fig, _ = figure_style.figure(figsize=(2, 2))
    png = figure_style.save(fig, tmp_path / "figure.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["figure.png", "predictions.csv"]


def test_written_files_get_the_users_umask_not_mkstemps_0600(tmp_path):
    """Issue 58: report files came out 0600 (mkstemp's mode), unreadable to the user's group
    where every other tool's output is readable; a replaced file keeps its own mode."""
    import os

    from vocabulary.atomic import write_text_atomic

    old = os.umask(0o022)
    try:
        write_text_atomic(tmp_path / "new.md", "x")
        assert (tmp_path / "new.md").stat().st_mode & 0o777 == 0o644
        os.umask(0o077)
        write_text_atomic(tmp_path / "private.md", "x")
        assert (tmp_path / "private.md").stat().st_mode & 0o777 == 0o600
        (tmp_path / "new.md").chmod(0o640)
        write_text_atomic(tmp_path / "new.md", "y")
        assert (tmp_path / "new.md").stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(old)
