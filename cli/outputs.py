"""The files and folders a command writes, refused before any work when they cannot be
written, and the folders a refused or failed run created removed again."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from profiles import UserError


def _named(path: str, flag: str, what: str) -> None:
    """An empty name would write into the current folder (or nowhere): refused; so is a
    place inside the shipped profiles, which every later run reads."""
    if not path.strip():
        raise UserError(f"{flag}: give a {what} name, got {path!r}")
    from profiles.files import ROOT, inside_shipped

    if inside_shipped(path):
        raise UserError(f"{flag} {path}: inside the shipped profiles ({ROOT}), which every run "
                        f"reads; write elsewhere, or set SCAPE_PROFILE_DIR={ROOT} to rewrite "
                        "them in this checkout")


def output_file(path: str, flag: str) -> Path:
    """A file the command will write: refused before any work if it is a folder or its folder
    cannot be written."""
    _named(path, flag, "file")
    if path.endswith(("/", os.sep)):  # Path() would drop the slash and write a file there
        raise UserError(f"{flag} {path}: a trailing / names a folder, give a file name")
    p = Path(path)
    if p.is_dir():
        raise UserError(f"{flag} {path}: is a folder, give a file name")
    if p.exists() and not p.is_file():  # a FIFO would block, a device swallow or refuse it
        raise UserError(f"{flag} {path}: not a regular file, give a file name")
    parent = p.parent if str(p.parent) else Path(".")
    if parent.exists() and not parent.is_dir():
        raise UserError(f"{flag} {path}: {parent} is a file, not a folder")
    if not parent.is_dir():
        raise UserError(f"{flag} {path}: folder {parent} does not exist")
    existed = p.exists()
    try:  # the one test that holds everywhere (/proc, read-only mounts, permissions)
        with open(p, "a"):
            pass
    except OSError as exc:
        raise UserError(f"{flag} {path}: cannot write it ({exc.strerror})") from None
    if not existed:
        p.unlink()
    return p


def script_outputs(parser, outputs: dict[str, str | None]) -> None:
    """A bench script's output files ({flag: path}, None: not given), refused before its work
    in one line, as the CLI's outputs are: two flags naming one file, or a file `output_file`
    refuses."""
    given = {flag: path for flag, path in outputs.items() if path is not None}
    seen: dict[str, str] = {}
    for flag, path in given.items():
        real = os.path.realpath(path)
        if real in seen:
            parser.exit(2, f"{parser.prog}: error: {seen[real]} and {flag} name the same file "
                           f"({path}); give two\n")
        seen[real] = flag
    for flag, path in given.items():
        try:
            output_file(path, flag)
        except UserError as exc:
            parser.exit(2, f"{parser.prog}: error: {exc}\n")


def out_folder(out: str | None, default: str) -> Path:
    """--out, or `default` when it was not given (and an error about that folder says so)."""
    if out is None:
        return output_dir(default, "the default folder (no --out given)")
    return output_dir(out, "--out")


# folders this run created for its outputs, leaf first: removed again, if still empty, when
# the run is refused or fails (a refusal leaves nothing behind)
CREATED: list[Path] = []


def missing_folders(folder: Path) -> list[Path]:
    """`folder` and its parents that do not exist yet, leaf first: what creating it makes,
    for `CREATED` once it is made."""
    return [q for q in (folder, *folder.parents) if not q.exists()]


def remove_created() -> None:
    for folder in CREATED:
        with contextlib.suppress(OSError):  # only an empty folder goes; one written into stays
            folder.rmdir()
    CREATED.clear()


def output_dir(path: str, flag: str) -> Path:
    """A folder the command will write into, created now: refused before any work if it is a
    file or cannot be created or written."""
    _named(path, flag, "folder")
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise UserError(f"{flag} {path}: is a file, give a folder")
    new = missing_folders(p)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{flag} {path}: cannot create the folder ({exc.strerror})") from None
    CREATED.extend(new)
    if not os.access(p, os.W_OK):
        raise UserError(f"{flag} {path}: not writable")
    return p
