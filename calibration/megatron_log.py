"""A Megatron-LM training log's iteration times (issue 41 item 2: "and a Megatron log's
per-iteration times where given"), read beside a traced step (`scape calibrate trace
--megatron-log`): the same run's steps timed without the profiler, over many more steps than a
trace holds.

Megatron-LM prints one line per log interval (megatron/training/training.py `training_log`):
`[date] iteration N/ TOTAL | consumed samples: ... | elapsed time per iteration (ms): X | ...`,
where X is the interval's time over its iterations (`elapsed_time / total_iterations`); newer
versions print `X/MEAN` (the interval, then a running mean), and `N/infinity` without a
`--train-iters`. Megatron-DeepSpeed (BigScience's fork, which trained BLOOM) prints the same
line in seconds, `elapsed time per iteration (s): X`; both units are read. Lines before the
first interval (arguments, compile and start-up messages) and the other columns are skipped. The
first interval holds start-up (allocator warm-up, autotuning, the first data loads) and is left
out where others follow, said so. A line that names the iteration time but cannot be read is
refused with its file and line; a run that failed (a traceback, an out-of-memory line) is read
up to the failure, said so.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from profiles import UserError

# the interval's time, then a `|` or the line's end (some runs wrap their long lines there)
ITERATION = re.compile(r"\biteration\s+(\d+)\s*/\s*(?:\d+|infinity)\s*\|.*?"
                       r"elapsed time per iteration \((ms|s)\):\s*([0-9]+(?:\.[0-9]*)?)"
                       r"(?:\s*/\s*[0-9.]+)?\s*(?:\||$)")
# the unit the line names -> milliseconds
TO_MS = {"ms": 1.0, "s": 1e3}
NAMED = "elapsed time per iteration"
# a rank's traceback or its out-of-memory error (launchers prefix lines: "[default0]: ...")
FAILED = re.compile(r"(?:^|\]:?\s*)Traceback \(most recent call last\)|"
                    r"CUDA out of memory|OutOfMemoryError")


@dataclass(frozen=True)
class MegatronLog:
    path: Path
    iterations: tuple[int, ...]  # the iteration each interval ends at
    ms: tuple[float, ...]  # each interval's time per iteration
    notes: tuple[str, ...]

    @property
    def kept(self) -> tuple[float, ...]:
        """The intervals after the first (start-up), or the only one."""
        return self.ms[1:] if len(self.ms) > 1 else self.ms

    def median_ms(self) -> float:
        return statistics.median(self.kept)

    def spread_pct(self) -> float:
        """(max - min) / median of the intervals kept, percent."""
        return 100 * (max(self.kept) - min(self.kept)) / self.median_ms()


def read_megatron_log(path: str | Path) -> MegatronLog:
    p = Path(path)
    try:
        text = p.read_text(errors="replace")
    except OSError as exc:
        raise UserError(f"--megatron-log {path}: cannot read it ({exc.strerror})") from None
    iterations: list[int] = []
    ms: list[float] = []
    notes = []
    for number, line in enumerate(text.splitlines(), start=1):
        if FAILED.search(line):
            notes.append(f"{p.name}:{number}: the run failed here ({line.strip()[:80]}); its "
                         f"{len(ms)} interval(s) before it are read")
            break
        if NAMED not in line:
            continue
        found = ITERATION.search(line)
        if found is None:
            raise UserError(f"{p}:{number}: a line naming the '{NAMED}' that is not "
                            "Megatron-LM's 'iteration N/TOTAL | ... | elapsed time per "
                            "iteration (ms): X |' (or Megatron-DeepSpeed's '(s): X |'): "
                            f"{line.strip()[:120]!r}")
        iteration, value = int(found[1]), float(found[3]) * TO_MS[found[2]]
        if iterations and iteration <= iterations[-1]:
            raise UserError(f"{p}:{number}: iteration {iteration} after {iterations[-1]}: "
                            "several runs or ranks in one log; give one run's log")
        if not value > 0:
            raise UserError(f"{p}:{number}: elapsed time per iteration {found[3]} "
                            f"{found[2]}: expected a positive time")
        iterations.append(iteration)
        ms.append(value)
    if not ms:
        raise UserError(f"--megatron-log {path}: no 'iteration N/TOTAL | ... | {NAMED} (ms): "
                        "X |' line (nor Megatron-DeepSpeed's '(s): X |'): not a Megatron-LM "
                        "training log, or one cut before its first log interval")
    if len(ms) > 1:
        notes.append(f"{p.name}: the first interval (to iteration {iterations[0]}, "
                     f"{ms[0]:.1f} ms per iteration) holds start-up and is left out")
    return MegatronLog(p, tuple(iterations), tuple(ms), tuple(notes))
