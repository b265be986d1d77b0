"""The profile folders and how one TOML file is read: the floor of profiles/ that every
reader (loader, measured profiles, convergence studies, external data) stands on."""

from __future__ import annotations

import os
import stat
import tomllib
from pathlib import Path
from typing import Any

from vocabulary.errors import ProfileError

ROOT = Path(__file__).resolve().parent


def inside_shipped(path: str | Path) -> bool:
    """Whether writing `path` would change the shipped profiles, which every run reads;
    allowed only when the user folder is that folder (SCAPE_PROFILE_DIR=profiles, to rewrite
    them in a checkout)."""
    where, root = Path(path).resolve(), ROOT.resolve()
    return (where == root or root in where.parents) and user_dir().resolve() != root


def user_dir() -> Path:
    """Where `scape calibrate` writes measured profiles, searched after the built-in ones:
    $SCAPE_PROFILE_DIR, else $XDG_DATA_HOME/scape-costmodel/profiles, else
    ~/.local/share/scape-costmodel/profiles (never inside the installed package)."""
    import os

    # "~" as a shell would have expanded it: a quoted SCAPE_PROFILE_DIR='~/x' is no folder
    # named "~" in the current directory
    if os.environ.get("SCAPE_PROFILE_DIR"):
        return Path(os.environ["SCAPE_PROFILE_DIR"]).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base).expanduser() / "scape-costmodel" / "profiles"


MAX_PROFILE_BYTES = 16 << 20  # the largest shipped profile is ~30 KB


def read_toml(path: Path) -> dict[str, Any]:
    try:
        # a device or FIFO would block or be read forever (/dev/zero): refused unopened
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
            raise ProfileError(f"{path}: not a regular file")
        with open(path, "rb") as fh:
            data = fh.read(MAX_PROFILE_BYTES + 1)
            if len(data) > MAX_PROFILE_BYTES:
                raise ProfileError(f"{path}: larger than {MAX_PROFILE_BYTES >> 20} MiB; a "
                                   "profile is a small TOML file")
            # utf-8-sig: a byte-order mark some editors write is not part of the text
            return tomllib.loads(data.decode("utf-8-sig"))
    except RecursionError:  # tomllib recurses into nested arrays and inline tables
        raise ProfileError(f"{path}: not valid TOML here: arrays or tables nested too deeply "
                           "for the reader (a profile nests two or three levels)") from None
    except FileNotFoundError:
        raise ProfileError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ProfileError(f"{path}: is a directory, not a TOML file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{path}: not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ProfileError(f"{path}: not valid TOML: not UTF-8 text ({exc.reason})") from None
    except OSError as exc:  # a symlink loop, no permission, an I/O error
        raise ProfileError(f"{path}: cannot read it ({exc.strerror})") from None
