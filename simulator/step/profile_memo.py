"""Answers remembered per hardware profile object. Profiles hold dicts and do not hash, so an
entry is keyed on the profile's id and keeps the profile itself: its id cannot be reused by
another object while the entry lives. The planner asks the same questions of thousands of
layouts that share a profile (a layer's tensor-parallel collective, one micro-batch's forward
and backward)."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any


class ProfileMemo:
    def __init__(self, limit: int = 4096):
        self._entries: dict[tuple, tuple[Any, Any]] = {}
        self.limit = limit

    def get(self, hw: Any, key: tuple[Hashable, ...], compute: Callable[[], Any]) -> Any:
        """compute(), remembered for (`hw`, `key`)."""
        full = (id(hw), *key)
        hit = self._entries.get(full)
        if hit is not None and hit[0] is hw:
            return hit[1]
        value = compute()
        if len(self._entries) >= self.limit:
            self._entries.clear()
        self._entries[full] = (hw, value)
        return value

    def clear(self) -> None:
        self._entries.clear()
