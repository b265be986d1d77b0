"""`scape train --cleanup DIR` (issue 45): what a crashed or killed run leaves behind. Its
processes (torchrun and the ranks, whose command lines name the run's config in DIR) are
ended, SIGTERM first and SIGKILL after a grace period; its half-written files (the temporary
files checkpoints, profiles and logs are written to before their rename, and the write probe)
are removed. Checkpoints, the log, config.json and summary.json are kept: `--resume` goes on
from them."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from profiles import UserError

GRACE_S = 5.0  # SIGTERM to SIGKILL


# what a run's processes run: torchrun, and each rank's module
RUN_MODULES = ("torch.distributed.run", "scape.train.worker")


def run_processes(folder: Path) -> list[int]:
    """Pids, other than this process, of the run whose config is `folder`/config.json: torchrun
    and its ranks (scape/train/launch.py hands them that file). Nothing else is matched: a
    process that merely names a path in the folder is not the run's."""
    config = str(folder.resolve() / "config.json")
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            args = [a.decode(errors="replace")
                    for a in (d / "cmdline").read_bytes().split(b"\0") if a]
        except OSError:
            continue
        if config in args and any(m in args for m in RUN_MODULES):
            found.append(int(d.name))
    return sorted(found)


def _alive(pid: int) -> bool:
    """Running (a zombie, ended but not yet reaped by its parent, is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _end(pids: list[int]) -> list[int]:
    """SIGTERM, then SIGKILL what is still there after GRACE_S; the pids that were ended."""
    ended = []
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
            ended.append(pid)
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline and any(_alive(p) for p in ended):
        time.sleep(0.1)
    for pid in ended:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return ended


def half_written(folder: Path) -> list[Path]:
    """The temporary files a write leaves when it is interrupted before its rename."""
    found = [p for p in folder.rglob("*.tmp") if p.is_file()]
    found += [p for p in folder.rglob(".write-probe") if p.is_file()]
    return sorted(set(found))


def clean_run(path: str) -> str:
    """End the run in `path`'s processes and remove its half-written files; say what was done
    and what was kept."""
    folder = Path(path)
    if not path.strip() or not folder.is_dir():
        raise UserError(f"--cleanup {path!r}: no such folder (give a run's --out)")
    if not (folder / "config.json").is_file():  # not a run's folder: nothing of it is touched
        raise UserError(f"--cleanup {path}: holds no config.json, so it is not a scape train "
                        "run's --out; nothing done")
    ended = _end(run_processes(folder))
    removed = half_written(folder)
    for p in removed:
        p.unlink(missing_ok=True)
    kept = sorted(p.name for p in (folder / "log.jsonl", folder / "config.json",
                                    folder / "summary.json") if p.exists())
    checkpoints = len(list((folder / "checkpoint").glob("*.pt")))
    return (f"cleanup {folder}: ended {len(ended)} process(es)"
            + (f" ({', '.join(map(str, ended))})" if ended else "")
            + f"; removed {len(removed)} half-written file(s)"
            + (f" ({', '.join(p.name for p in removed)})" if removed else "")
            + f"; kept {checkpoints} checkpoint file(s)"
            + (f" and {', '.join(kept)}" if kept else "") + " (resume with --resume)")
