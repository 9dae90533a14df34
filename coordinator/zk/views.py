"""The cluster view and the live pollers, as last read, kept until ZooKeeper says they changed.

An api node's router looks up shard owners and poller addresses for every hint it
sends. Read afresh each time (or every half second), that was about 75 ZooKeeper
requests per read: the whole owner map, the members, the contenders. Under load
ZooKeeper and the nodes' kazoo threads took about a tenth of a 2-core machine for
it, while the view changes only when a poller joins, leaves or takes a shard.

So each read sets a watch on every node and child list it read (``read_view``,
``read_members``), and what it read is served until one of those watches fires,
the session's connection changes state (kazoo drops its watches then), or
``MAX_AGE`` passes. A read that a change overtook is not served: each read is
tagged with the count of changes seen when it began, and served only while that
count stands. Served views are exactly as fresh as ZooKeeper's notifications: a
change is seen once the watch's event reaches this node, as a read after it would.

Threads: watches fire on kazoo's event thread, state hooks on its connection
thread, reads run in executor threads, and the loop asks for what is held;
``_lock`` guards the count and the entries.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")

MAX_AGE = 30.0  # seconds a view is served without a change seen: a bound, should a watch be missed


class _Entry(Generic[T]):
    __slots__ = ("changes", "read_at", "value")

    def __init__(self, value: T, changes: int, read_at: float) -> None:
        self.value = value
        self.changes = changes
        self.read_at = read_at


class WatchedReads:
    """Values read with a watch, by name, each served until a change is seen."""

    def __init__(self, *, max_age: float = MAX_AGE, clock: Callable[[], float] = time.monotonic):
        self._lock = threading.Lock()
        self._changes = 0
        self._entries: dict[str, _Entry[Any]] = {}
        self._max_age = max_age
        self._clock = clock

    def changed(self, *_: object) -> None:
        """Something read may have changed: nothing held is served any more. The watch
        given to every read (kazoo's event thread) and a session state hook (its
        connection thread); it never blocks."""
        with self._lock:
            self._changes += 1
            self._entries.clear()

    def held(self, name: str) -> Any | None:
        """What was read under ``name``, if no change was seen since the read began."""
        with self._lock:
            entry = self._entries.get(name)
            if entry is None:
                return None
            if entry.changes != self._changes or self._clock() - entry.read_at > self._max_age:
                del self._entries[name]
                return None
            return entry.value

    def read(self, name: str, read: Callable[[Callable[..., None]], T]) -> T:
        """Reads afresh (``read`` gets the watch to set on what it reads) and holds the
        value, unless a change was seen while it was read. Runs in an executor thread."""
        with self._lock:
            changes, began = self._changes, self._clock()
        value = read(self.changed)
        with self._lock:
            if changes == self._changes:
                self._entries[name] = _Entry(value, changes, began)
        return value
