"""Caches of opened profiles and of analysis answers, for profiles that can no longer change.

A finished profile never changes (a published profile directory is immutable; a removed job's id
is never reused), so its dashboard for a given scope is computed once: switching back and forth
between filters in the UI then costs a dictionary look-up. A *live* profile (its job InProgress or
Stopping, or a rank of its capture still running: a Failed job's other ranks may still flush)
gets new parts at every flush, so neither its metadata nor its answers are cached: a refresh
shows new data.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Generic, TypeVar

from hyperscope.schema.layout import profile_dir
from hyperscope.store.profile import Profile

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Lru(Generic[K, V]):
    """A thread-safe least-recently-used map of at most ``size`` entries."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


class ProfileCache:
    """Opened profiles and answers computed on them, keyed by profile id (checked by the caller)."""

    def __init__(self, home: Path, *, profiles: int = 64, answers: int = 128) -> None:
        self.home = home
        self._profiles: Lru[str, Profile] = Lru(profiles)
        self._answers: Lru[tuple[Hashable, ...], object] = Lru(answers)
        self._flights: dict[tuple[Hashable, ...], threading.Lock] = {}
        self._lock = threading.Lock()

    def profile(self, profile_id: str, live: bool) -> Profile:
        """The profile, opened once when finished, re-read each time while ``live`` (still written).

        ``profile_id`` has been matched against ``[0-9a-f]{16}`` and found in the catalog: it is
        the only request value that reaches a path, and only in that checked form.
        """
        if not live:
            found = self._profiles.get(profile_id)
            if found is not None:
                return found
        opened = Profile.open(profile_dir(self.home, profile_id))
        if not live:
            self._profiles.put(profile_id, opened)
        return opened

    def answer(self, key: tuple[Hashable, ...], live: bool, compute: Callable[[], V]) -> tuple[V, bool]:
        """``compute()``'s value for ``key`` (its first item the profile id) and whether it was cached."""
        if live:
            return compute(), False
        found = self._answers.get(key)
        if found is None:
            # One computation per key at a time: a second request for the same scope (a reload, a
            # double click) waits for the first's answer instead of taking a second analysis slot.
            with self._lock:
                flight = self._flights.setdefault(key, threading.Lock())
            try:
                with flight:
                    found = self._answers.get(key)
                    if found is None:
                        value = compute()
                        self._answers.put(key, value)
                        return value, False
            finally:
                with self._lock:
                    self._flights.pop(key, None)
        return found, True  # type: ignore[return-value]  # stored by this method with V
