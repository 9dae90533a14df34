"""Retention: final runs and their output are deleted once older than ``--retention``.

What expires is the store's rule (``store_rules.run_expires_at``: final, not a dead
letter, ended more than the retention ago; never a run still to run, never a job).
``RetentionSweeper`` is the background task that has a store apply it: every
``interval`` it calls ``JobStore.expire_runs(now)``. SQLite deletes there; Cassandra
returns at once, its final rows carrying TTLs (``cassandra/schema``), so a sweeper
on every node of a cluster costs nothing. A failed sweep is logged and tried again
at the next interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from shardcron.client.schedule import parse_duration
from shardcron.coordinator.ids import utcnow
from shardcron.coordinator.store import JobStore

log = logging.getLogger(__name__)

DEFAULT_RETENTION = timedelta(days=30)
MIN_INTERVAL = timedelta(seconds=1)
MAX_INTERVAL = timedelta(hours=1)


def parse_retention(text: str) -> timedelta | None:
    """``"30d"``, ``"12h"``, ``"90m"``; ``"0"`` or ``"forever"`` = keep every run (None).
    Raises ValueError saying what is accepted."""
    if text.strip().lower() == "forever":
        return None
    value = parse_duration(text)
    return value or None


def sweep_interval(retention: timedelta) -> timedelta:
    """How often to sweep: a 24th of the retention, within 1 s to 1 h (1 h for 30 days),
    so a run outlives its retention by a small part of it."""
    return min(MAX_INTERVAL, max(MIN_INTERVAL, retention / 24))


class RetentionSweeper:
    """Calls ``store.expire_runs`` every ``interval`` until ``stop``."""

    def __init__(
        self,
        store: JobStore,
        *,
        interval: timedelta,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.store = store
        self.interval = interval
        self.clock = clock
        self.deleted = 0  # runs deleted since start
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="retention")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def sweep(self) -> int:
        """One sweep now; returns how many runs it deleted."""
        deleted = len(await self.store.expire_runs(self.clock()))
        self.deleted += deleted
        if deleted:
            log.info("retention: deleted %d final runs and their output", deleted)
        return deleted

    async def _run(self) -> None:
        while True:
            try:
                await self.sweep()
            except Exception:  # a top-level loop: log, and try again next time
                log.exception("retention sweep failed; trying again in %s", self.interval)
            await asyncio.sleep(self.interval.total_seconds())
