"""Files written whole or not at all (issue 45): the text goes to a temporary file beside the
target, is flushed to disk, and replaces the target in one rename, so a refused or interrupted
write never leaves a half-written or emptied profile, log, summary or table."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path beside `path` to write to; on a clean exit it replaces `path`, on an
    exception it is removed and `path` is left as it was."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb+") as fh:  # on disk before the rename makes it the file
            os.fsync(fh.fileno())
            # mkstemp makes the file 0600; the file the user gets has the mode a plain open()
            # would give it (0666 less the umask), or the mode of the file it replaces
            try:
                mode = target.stat().st_mode & 0o7777
            except FileNotFoundError:
                mode = 0o666 & ~_umask()
            os.fchmod(fh.fileno(), mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    """The process's umask (read by setting it and setting it back: there is no getter)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_text_atomic(path: str | Path, text: str) -> None:
    """`path` holding `text`, written aside and renamed into place."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def to_csv_atomic(table, path: str | Path, **kwargs) -> None:
    """A pandas table written to `path` as CSV, aside and renamed into place."""
    with atomic_path(path) as tmp:
        table.to_csv(tmp, **kwargs)


def savefig_atomic(fig, path: str | Path, **kwargs) -> None:
    """A matplotlib figure saved to `path` (its format from the name's suffix), aside and
    renamed into place."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=Path(path).suffix.lstrip(".") or None, **kwargs)
