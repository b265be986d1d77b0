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
