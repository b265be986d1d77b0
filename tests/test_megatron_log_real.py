"""`calibrate trace --megatron-log` on real training logs as the trainers printed them (issue 59
item 3; tests/fixtures/megatron-logs/SOURCES.md): a whole Megatron-DeepSpeed run's output
(16 nodes of 4 V100, with torch.distributed's banners, DeepSpeed's configuration dump,
per-rank memory lines and Megatron's phase timers between the iteration lines) in
milliseconds, and BLOOM 176B's iteration lines in seconds behind the launcher's `[default7]:`
prefix."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from calibration.megatron_log import read_megatron_log
from profiles import UserError

LOGS = Path(__file__).resolve().parent / "fixtures" / "megatron-logs"
RUN = LOGS / "bigscience-gpt2-meg-ds-3d-n16-ds-off.out"
BLOOM = LOGS / "bloom-176b-chronicles-excerpt.log"


def _cells(path: Path) -> list[tuple[int, float, str]]:
    """Each iteration line's number, time and unit, read here by splitting at `|` (not by the
    reader's expression)."""
    out = []
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.split("|")]
        timed = [c for c in cells if c.startswith("elapsed time per iteration")]
        if not timed:
            continue
        number = int(cells[0].split("iteration")[1].split("/")[0])
        unit = timed[0].split("(")[1].split(")")[0]
        out.append((number, float(timed[0].rsplit(":", 1)[1]), unit))
    return out


def test_a_whole_megatron_deepspeed_run_is_read_through_its_noise():
    cells = _cells(RUN)
    read = read_megatron_log(RUN)
    assert len(cells) == 62 and {u for _, _, u in cells} == {"ms"}
    assert read.iterations == tuple(n for n, _, _ in cells) == tuple(range(1, 63))
    assert read.ms == pytest.approx([t for _, t, _ in cells], rel=1e-12)
    # the first iteration (144.9 s) holds start-up: the median is of the other 61
    assert read.median_ms() == pytest.approx(statistics.median(t for _, t, _ in cells[1:]),
                                             rel=1e-12)
    assert 120e3 < read.median_ms() < 130e3 and any("start-up" in n for n in read.notes)


def test_bloom_iteration_lines_in_seconds_are_read_as_milliseconds():
    cells = _cells(BLOOM)
    read = read_megatron_log(BLOOM)
    assert {u for _, _, u in cells} == {"s"} and len(cells) == 11
    assert read.iterations == tuple(n for n, _, _ in cells)
    assert read.ms == pytest.approx([1e3 * t for _, t, _ in cells], rel=1e-12)
    # BLOOM's README: "elapsed time per iteration (s): 104.70" at the end of its first epoch;
    # these iterations of April 2022 ran at 105.9-107.5 s
    assert 105e3 < read.median_ms() < 108e3


def test_a_line_in_an_unknown_unit_is_refused_with_its_line(tmp_path):
    line = BLOOM.read_text().splitlines()[0].replace("(s):", "(min):")
    bad = tmp_path / "minutes.log"
    bad.write_text(line + "\n")
    with pytest.raises(UserError, match=r"minutes\.log:1: a line naming .*'\(s\): X \|'"):
        read_megatron_log(bad)
