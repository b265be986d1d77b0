"""Every `scape` command the README and docs/ show runs (issue 58: docs that match the code; a
documented DeepSeek-V3 and two GB200 examples had come to be refused), in process (about 7 s
in all). Commands that train, run ranks, build network namespaces, write reports or name a
file of the reader's own are left to their own tests."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.test_cli import scape

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
RUN = ("simulate", "compare", "plan", "collective", "profiles")


def documented() -> list[tuple[str, str]]:
    """(file, command) of each `scape ...` line in the docs' code blocks, continuation lines
    joined and trailing comments dropped."""
    found = []
    for path in DOCS:
        for block in re.findall(r"```[a-z]*\n(.*?)```", path.read_text(), re.S):
            lines = block.split("\n")
            i = 0
            while i < len(lines):
                line = lines[i].strip()
                if line.startswith("scape "):
                    while line.endswith("\\") and i + 1 < len(lines):
                        i += 1
                        line = line[:-1] + " " + lines[i].strip()
                    found.append((path.name, line.split(" #")[0].strip()))
                i += 1
    return found


def _runnable(kinds: tuple[str, ...]) -> list:
    cases = []
    for name, command in documented():
        argv = shlex.split(command)[1:]
        if argv[0] in kinds and "path/to" not in command:
            cases.append(pytest.param(argv, id=f"{name}:{' '.join(argv)[:60]}"))
    return cases


def test_the_docs_show_commands_of_every_kind():
    kinds = {shlex.split(c)[1] for _, c in documented()}
    assert {"simulate", "compare", "plan", "collective", "profiles", "train"} <= kinds


@pytest.mark.parametrize("argv", _runnable(RUN))
def test_a_documented_command_runs(capsys, tmp_path, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)  # a --trace or --out the docs name lands here
    monkeypatch.delenv("SCAPE_PROFILE_DIR", raising=False)  # the shipped profiles, as a reader
    code, _out, err = scape(capsys, *argv)
    assert code == 0, err
