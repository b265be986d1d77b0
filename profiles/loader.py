"""Find, read and validate profile files (TOML, read with stdlib `tomllib`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from profiles.files import ROOT, read_toml, user_dir
from profiles.hardware import HardwareProfile, parse_hardware
from profiles.model_aliases import canonical_model
from profiles.models import ModelProfile, parse_model
from profiles.problems import Problems
from vocabulary.errors import ProfileError, UserError
from vocabulary.suggest import did_you_mean


@dataclass(frozen=True)
class Kind:
    name: str  # "hardware" or "model"
    folder: str  # folder under profiles/
    parse: Callable[[Path | str, dict[str, Any]], Any]


KINDS = {
    "hardware": Kind("hardware", "hardware", parse_hardware),
    "model": Kind("model", "models", parse_model),
}


def _parse(kind: Kind, path: Path) -> Any:
    """The profile in `path`, or every error of it in one ProfileError: its contents' and a
    name that is not the file's (said in the same pass: issue 42)."""
    doc = read_toml(path)
    place = Problems(path)
    name = doc.get("name")
    if isinstance(name, str) and name not in (path.stem, path.resolve().stem):  # a symlink:
        place.add(f"{path}: name: must equal the file name {path.stem!r}, got "  # its target's
                  f"{name!r}", "", "name")
    with place.gather():
        profile = kind.parse(path, doc)
    place.raise_any()
    return profile


def names(kind: str) -> list[str]:
    """Names of the embedded profiles of one kind, sorted."""
    return sorted(p.stem for p in (ROOT / KINDS[kind].folder).glob("*.toml"))


def _resolve(kind: Kind, name_or_path: str | Path) -> Path:
    text = str(name_or_path)
    if text.endswith(".toml") or "/" in text:
        path = Path(text)
        bare = not text.endswith(".toml") and not path.exists()
        if bare:
            path = Path(text + ".toml")  # measured/NAME names profiles/measured/NAME.toml
        # measured/NAME is a name: built-in first, then the user's measured profiles, as
        # `profiles show` finds it, and a file of that name here only after them; any other
        # path is that file, or else one of those folders'
        named = bare and text.startswith("measured/")
        if not path.is_absolute() and (named or not path.exists()):
            for base in (ROOT, user_dir()):
                if (base / path).exists():
                    path = base / path
                    break
        if not path.exists() and path.is_symlink():
            raise ProfileError(f"{text}: a symlink that leads to no file (a loop, or its target "
                               "is gone)")
        if not path.exists():
            raise ProfileError(f"{text}: no such profile file (looked in {ROOT} and "
                               f"{user_dir()})")
        return path.resolve()
    if kind.name == "model":
        text = canonical_model(text)  # llama3.1-70b is llama3-70b's architecture
    path = ROOT / kind.folder / f"{text}.toml"
    if not path.exists():
        known = ", ".join(names(kind.name)) or "none"
        other = next((k.name for k in KINDS.values() if k is not kind
                      and (ROOT / k.folder / f"{text}.toml").exists()), None)
        hint = f" ({text} is a {other} profile)" if other else ""
        near = "" if other else did_you_mean(text, known.split(", "))
        raise ProfileError(f"unknown {kind.name} profile {text!r}{hint}{near}; known: {known}")
    return path


def _parse_as(kind: Kind, path: Path) -> Any:
    """`_parse`, refused with what the file is where it is a profile of another kind."""
    try:
        return _parse(kind, path)
    except ProfileError:
        try:
            other = kind_of(path, read_toml(path))
        except ProfileError:
            other = kind
        if other is not kind:
            raise ProfileError(f"{path}: a {other.name} profile, where a {kind.name} profile "
                               "is needed") from None
        raise


@lru_cache(maxsize=64)
def _load_cached(kind_name: str, path: Path) -> Any:
    return _parse_as(KINDS[kind_name], path)


def load_hardware(name_or_path: str | Path) -> HardwareProfile:
    """A hardware profile by embedded name (`dgx-h100`) or by path to a TOML file."""
    kind = KINDS["hardware"]
    return _load_cached(kind.name, _resolve(kind, name_or_path))


def shipped(hw: HardwareProfile) -> bool:
    """Whether `hw` is the profile its own name finds (the shipped one for a shipped name): a
    copy elsewhere, however named, has no published runs or bands of its own."""
    return _path_by_name(hw.name) == hw.path


@lru_cache(maxsize=64)
def _path_by_name(name: str) -> Path | None:
    try:
        return load_hardware(name).path
    except UserError:
        return None


def load_model(name_or_path: str | Path) -> ModelProfile:
    """A model profile by embedded name (`llama-7b`) or by path to a TOML file."""
    kind = KINDS["model"]
    return _load_cached(kind.name, _resolve(kind, name_or_path))


def kind_of(path: Path, doc: dict[str, Any]) -> Kind:
    """Tell a hardware from a model profile: by its tables ([arch] is a model's, [gpu] or [nic]
    a hardware profile's), else by its folder (a file with neither is checked as its folder's
    kind, whose errors then name what is missing). The tables come first: a copy kept in a
    folder named for the other kind is still what it holds."""
    if "arch" in doc:
        return KINDS["model"]
    if "gpu" in doc or "nic" in doc:
        return KINDS["hardware"]
    for kind in KINDS.values():
        if path.resolve().parent.name == kind.folder:
            return kind
    raise ProfileError(
        f"{path}: cannot tell the profile kind: a hardware profile has [gpu], [node], "
        "[intra_node], [nic] and [fabric]; a model profile has [arch]; a convergence study "
        "(plan --quality) has study and [[scheme]]"
    )


def check_profile(path: str | Path) -> tuple[str, Any]:
    """Validate any profile file; returns (kind name, profile). Raises `ProfileError`."""
    if not str(path).strip():
        raise ProfileError("no profile file given: give the path of a TOML file")
    path = Path(path)
    doc = read_toml(path)
    if "study" in doc and "scheme" in doc:  # a convergence study (plan --quality) reads so
        from profiles.quality import parse_quality

        return "quality study", parse_quality(path, doc)
    kind = kind_of(path, doc)
    return kind.name, _parse(kind, path)


def write_checked(path: Path, text: str, option: str) -> tuple[str, Any]:
    """Write a profile to `path` only once it loads back: checked under its own name in a
    scratch folder beside it, then moved into place, so a profile that fails leaves neither a
    broken file nor an overwritten one. Returns what `check_profile` read; errors name
    `option`, the flag that chose `path`."""
    import os
    import tempfile

    from vocabulary.errors import UserError

    try:
        scratch = Path(tempfile.mkdtemp(prefix=".scape-", dir=path.parent if str(path.parent)
                                        else "."))
    except OSError as exc:
        raise UserError(f"{option} {path}: cannot write it ({exc.strerror})") from None
    tmp = scratch / path.name
    try:
        tmp.write_text(text)  # in scratch: checked, then renamed into place
        loaded = check_profile(str(tmp))  # what is written loads back
        os.replace(tmp, path)
    except OSError as exc:
        raise UserError(f"{option} {path}: cannot write it ({exc.strerror})") from None
    except ProfileError as exc:
        raise UserError(f"{option} {path}: the fitted profile would not load, nothing "
                        f"written: {str(exc).replace(str(tmp), path.name)}") from None
    finally:
        tmp.unlink(missing_ok=True)
        scratch.rmdir()
    return loaded


def find(name: str) -> tuple[str, Any]:
    """A profile of any kind by name (`dgx-h100`, `llama-7b`, `hardware/dgx-h100`) or path."""
    if Path(name).exists() and ("/" in name or name.endswith(".toml")):
        return check_profile(name)  # a path, as `profiles check` and -H read it
    if name.endswith(".toml"):
        if Path(name).is_absolute():
            return check_profile(name)
        # a file name as shipped: profiles/NAME, then each kind's folder, then the user's
        tried = [ROOT / name, *(ROOT / k.folder / name for k in KINDS.values()),
                 user_dir() / name]
        for path in tried:
            if path.is_file():
                return check_profile(path)
        raise ProfileError(f"{name}: no such profile file (looked in "
                           f"{', '.join(str(p.parent) for p in tried)})")
    folder, _, stem = name.rpartition("/")
    if folder in ("", "models"):
        stem = canonical_model(stem)  # llama3.1-8b is llama3-8b's architecture
    for kind in KINDS.values():
        if folder in ("", kind.folder) and (ROOT / kind.folder / f"{stem}.toml").exists():
            return kind.name, _load_cached(kind.name, ROOT / kind.folder / f"{stem}.toml")
    # measured/NAME, as -H takes it: built-in, then the user's, then a file of that name here
    for base in (ROOT, user_dir(), Path(".")):
        if folder and (base / f"{name}.toml").is_file():
            return check_profile(base / f"{name}.toml")
    known = ", ".join(n for k in KINDS for n in names(k))
    raise ProfileError(f"unknown profile {name!r}{did_you_mean(name, known.split(', '))}; "
                       f"known: {known}")
