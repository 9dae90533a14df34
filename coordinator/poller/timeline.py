"""A keyed, time-ordered index: each key at most once, at one time, earliest first.

The poller keeps its runs' times in these: when each waiting run is due, when each
lease expires, each starting deadline, each ready run by due time. ``remove`` and
``push`` (which moves a key already there) take effect at once: membership and
length are exact, and nothing outside ever meets a key that left.

Inside, a binary heap of (time, key, seq) entries and a dict of each live key's
entry: a key removed or moved leaves its old heap entry behind, which the reads
skip, and which are dropped all at once when they outnumber the live keys (the
heap is rebuilt from the dict). Moving a key costs one push, never a search.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from datetime import datetime

Entry = tuple[datetime, str, int]  # (time, key, seq): seq tells a live entry from one left


class Timeline:
    __slots__ = ("_heap", "_live", "_seq")

    def __init__(self) -> None:
        self._heap: list[Entry] = []
        self._live: dict[str, Entry] = {}  # key -> its entry in the heap
        self._seq = 0

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, key: str) -> bool:
        return key in self._live

    def __iter__(self) -> Iterator[str]:
        """The keys, in no order."""
        return iter(self._live)

    def at(self, key: str) -> datetime | None:
        entry = self._live.get(key)
        return None if entry is None else entry[0]

    def clear(self) -> None:
        self._heap.clear()
        self._live.clear()

    def push(self, key: str, at: datetime) -> None:
        """Puts ``key`` at ``at`` (moves it there if it is in already)."""
        self._seq += 1
        entry = (at, key, self._seq)
        self._live[key] = entry
        heapq.heappush(self._heap, entry)
        if len(self._heap) > 2 * len(self._live) + 64:
            self._compact()

    def remove(self, key: str) -> bool:
        """Takes ``key`` out; False if it was not in."""
        return self._live.pop(key, None) is not None

    def first(self) -> tuple[datetime, str] | None:
        """The earliest (time, key), left in."""
        heap, live = self._heap, self._live
        while heap:
            entry = heap[0]
            if live.get(entry[1]) is entry:
                return entry[0], entry[1]
            heapq.heappop(heap)  # left behind by a remove or a move
        return None

    def first_at(self) -> datetime | None:
        first = self.first()
        return None if first is None else first[0]

    def pop(self) -> tuple[datetime, str]:
        """Takes the earliest (time, key) out (IndexError when empty)."""
        first = self.first()
        if first is None:
            raise IndexError("pop from an empty timeline")
        heapq.heappop(self._heap)
        del self._live[first[1]]
        return first

    def pop_until(self, until: datetime, limit: int) -> list[tuple[datetime, str]]:
        """Takes out the (time, key) at or before ``until``, earliest first, at most ``limit``."""
        out: list[tuple[datetime, str]] = []
        while len(out) < limit and (first := self.first()) is not None and first[0] <= until:
            out.append(self.pop())
        return out

    def until(self, until: datetime, limit: int) -> list[str]:
        """The keys at or before ``until``, at most ``limit``, left in: the work is that of
        the keys returned (and the entries left behind met on the way), not of the whole."""
        heap, live = self._heap, self._live
        out: list[str] = []
        stack = [0] if heap else []
        while stack and len(out) < limit:
            i = stack.pop()
            entry = heap[i]
            if entry[0] > until:
                continue  # the entries below it come later still
            if live.get(entry[1]) is entry:
                out.append(entry[1])
            stack.extend(c for c in (2 * i + 1, 2 * i + 2) if c < len(heap))
        return out

    def _compact(self) -> None:
        self._heap = list(self._live.values())
        heapq.heapify(self._heap)
