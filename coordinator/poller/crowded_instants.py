"""Instants many runs are due at, and how far ahead of each its runs are triggered.

A turn triggers and leases at most ``max_batch`` runs and writes them in one commit,
so runs due at one instant beyond what the lease lead covers (a cron fleet's minute, a
storm of one-off runs) were still being leased after their instant, seconds late for
the last ones of a large fleet. Such an instant is reached earlier: ``per_run`` more for each run due at it, up
to ``most`` in all (``CrowdedInstants.lead``), so its last lease goes out before it. Only
runs already held are counted; the lead is used only while it is not zero (a worker
holds leases until their due instant), and a run whose job has runs admitted is still
decided at its very instant (``overlap.waits_for_instant``).

The counts follow the runs waiting for their due instant (``add`` as one starts to
wait, ``remove`` as it is triggered or leaves), so a run cancelled or forgotten
before its instant no longer counts. Pure: times come in as arguments.
"""

from __future__ import annotations

import bisect
from datetime import datetime, timedelta

from shardcron.client.saturating import saturating_add

CROWD = 64  # runs due at one instant from which it is reached ahead of the lead


class CrowdedInstants:
    __slots__ = ("_counts", "_crowded", "_most", "_per_run", "_reached")

    def __init__(self, *, per_run: timedelta, most: timedelta) -> None:
        self._per_run = per_run
        self._most = most
        self._counts: dict[datetime, int] = {}  # due instant -> runs waiting for it
        self._crowded: list[datetime] = []  # instants with CROWD runs or more, sorted
        self._reached: datetime | None = None  # runs due up to it are triggered at once

    def clear(self) -> None:
        self._counts.clear()
        self._crowded.clear()
        self._reached = None

    def add(self, at: datetime) -> None:
        n = self._counts.get(at, 0) + 1
        self._counts[at] = n
        if n == CROWD:
            bisect.insort(self._crowded, at)

    def remove(self, at: datetime) -> None:
        n = self._counts.get(at, 0) - 1
        if n > 0:
            self._counts[at] = n
            return
        self._counts.pop(at, None)
        i = bisect.bisect_left(self._crowded, at)
        if i < len(self._crowded) and self._crowded[i] == at:
            del self._crowded[i]

    def counts(self) -> dict[datetime, int]:
        """Runs waiting, by due instant."""
        return dict(self._counts)

    def lead(self, at: datetime, base: timedelta) -> timedelta:
        """How far ahead of ``at`` its runs are triggered: ``base``, and more for a
        crowded instant (never more than ``most``, nor less than ``base``)."""
        n = self._counts.get(at, 0)
        if n < CROWD or not base:
            return base
        return max(base, min(self._most, base + n * self._per_run))

    def reach(self, now: datetime, base: timedelta) -> datetime:
        """Runs due up to this instant are triggered at ``now``: ``now + base``, or a
        later crowded instant whose own lead has come. Once reached, an instant stays
        reached: its lead shrinks as its runs are triggered, and its last ones must not
        wait for it."""
        until = saturating_add(now, base)
        if not base:
            return until
        for at in self._crowded:
            if at - now > self._most:
                break  # sorted: no later one is within reach either
            if at > until and at - self.lead(at, base) <= now:
                until = at
        if self._reached is None or until > self._reached:
            self._reached = until
        return self._reached

    def trigger_at(self, at: datetime, base: timedelta) -> datetime:
        """When runs due at ``at`` are triggered: ``at`` less its lead; for an instant
        reached already, a time already past (at once)."""
        if base and self._reached is not None and at <= self._reached:
            return at - self._most
        return at - self.lead(at, base)

    def next_reach(self, base: timedelta) -> datetime | None:
        """When the earliest crowded instant not reached yet comes within its lead (None:
        none, or no lead)."""
        if not base:
            return None
        ahead = (a for a in self._crowded if self._reached is None or a > self._reached)
        return min((at - self.lead(at, base) for at in ahead), default=None)
