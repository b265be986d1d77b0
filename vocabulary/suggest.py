"""Did-you-mean for every choice a user types (issue 42): a refused name is answered with the
closest valid ones, as git and click answer a misspelled command."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def _plain(text: str) -> str:
    """A name as typed without case or separators: 'AllReduce', 'all-reduce' and 'all_reduce'
    are one name to a reader."""
    return "".join(ch for ch in text.lower() if ch.isalnum())


def spelled(got: str, known: Iterable[str]) -> str | None:
    """The one name of `known` that `got` is, spelled with other case or separators
    (nccl-tests' binaries say 'alltoall' where the collective is all_to_all); None if none."""
    same = [k for k in known if _plain(k) == _plain(str(got))]
    return same[0] if len(same) == 1 else None


def close_matches(got: str, known: Iterable[str], limit: int = 3) -> list[str]:
    """The valid names closest to `got`: the same name spelled with other case or separators
    first, then names it begins (a prefix such as 'dense' of 'dense-zero1'), then difflib's
    close matches of the plain spellings."""
    known = list(dict.fromkeys(str(k) for k in known))
    plain = {k: _plain(k) for k in known}
    g = _plain(str(got))
    if not g:
        return []
    same = [k for k in known if plain[k] == g]
    if same:
        return same[:limit]
    begun = [k for k in known if plain[k].startswith(g) and len(g) >= 3]
    if begun:
        return begun[:limit]
    by_plain: dict[str, list[str]] = {}
    for k, p in plain.items():
        by_plain.setdefault(p, []).append(k)
    near = difflib.get_close_matches(g, list(by_plain), n=limit, cutoff=0.6)
    return [k for p in near for k in by_plain[p]][:limit]


def did_you_mean(got: str, known: Iterable[str]) -> str:
    """' (did you mean 'x'?)' or ' (did you mean 'x' or 'y'?)', or '' where nothing is
    close: for the end of a refusal's first clause."""
    near = close_matches(got, known)
    if not near:
        return ""
    quoted = [repr(k) for k in near]
    text = quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]
    return f" (did you mean {text}?)"
