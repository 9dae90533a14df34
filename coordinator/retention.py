"""Retention: final runs and their output are deleted once older than ``--retention``.

What expires is the store's rule (``store_rules.run_expires_at``: final, not a dead
letter, ended more than the retention ago; never a run still to run, never a job).
``RetentionSweeper`` is the background task that has a store apply it: every
``interval`` it calls ``JobStore.expire_runs(now)``. SQLite deletes there; Cassandra
returns at once, its final rows carrying TTLs (``cassandra/schema``), so a sweeper
on every node of a cluster costs nothing. A failed sweep is logged and tried again
at the next interval.

**Blobs follow.** Given the node's blob store, the sweeper deletes the output parts
(``output/<owner>/<run>/``, every attempt's) and the result files
(``results/<owner>/<run>/``) of each run the store says it deleted.
A delete that fails is logged, counted (``on_blob_failure``) and kept, with the
prefixes not yet tried, to be tried first at the next sweep: a blob store that is
down never stops the job store's sweep, and costs one failed call per sweep. The ones kept are bounded (``max_pending``, oldest
dropped, logged and counted as given up): a store down for long leaves those parts
behind rather than the node's memory growing. Kept in memory, not found by listing
the blob store: the job store names exactly the runs it deleted, while a listing
reads every part of every run. Cassandra's rows expire by TTL and name no run, so
there the parts are not deleted by the sweep (an expiry rule of the bucket can).
A deleted job's runs are not deleted with it (``DeleteJob`` marks it DELETED): they
and their parts go here, at the runs' retention.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from shardcron.blobs.errors import BlobStoreUnavailable, InvalidBlobKey
from shardcron.blobs.layout import output_prefix, results_prefix
from shardcron.blobs.store import BlobStore
from shardcron.client.schedule import parse_duration
from shardcron.coordinator.ids import utcnow
from shardcron.coordinator.store import JobStore

log = logging.getLogger(__name__)

DEFAULT_RETENTION = timedelta(days=30)
MIN_INTERVAL = timedelta(seconds=1)
MAX_INTERVAL = timedelta(hours=1)
MAX_PENDING_BLOBS = 100_000  # output prefixes kept to delete again, at most


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
    """Calls ``store.expire_runs`` every ``interval`` until ``stop``, and deletes the
    deleted runs' output from ``blobs`` (module docstring)."""

    def __init__(
        self,
        store: JobStore,
        *,
        interval: timedelta,
        clock: Callable[[], datetime] = utcnow,
        blobs: BlobStore | None = None,
        on_blob_failure: Callable[[str], None] = lambda outcome: None,
        max_pending: int = MAX_PENDING_BLOBS,
    ) -> None:
        """``on_blob_failure(outcome)``: once per output prefix whose delete ``"failed"``
        (kept for the next sweep) or that was ``"dropped"`` (given up, its parts left)."""
        self.store = store
        self.interval = interval
        self.clock = clock
        self.blobs = blobs
        self.on_blob_failure = on_blob_failure
        self.max_pending = max_pending
        self.deleted = 0  # runs deleted since start
        # output prefixes to delete, oldest first (a dict: ordered, no duplicates), each
        # with its run's results prefix, deleted after it
        self.pending: dict[str, str] = {}
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
        deleted = await self.store.expire_runs(self.clock())
        self.deleted += len(deleted)
        if deleted:
            log.info("retention: deleted %d final runs and their output", len(deleted))
        if self.blobs is not None:
            for owner, run_id in deleted:
                try:
                    self.pending[output_prefix(owner, run_id)] = results_prefix(owner, run_id)
                except InvalidBlobKey:  # no key of the layout names it: it has no parts
                    continue
            self._bound_pending()
            await self._delete_blobs(self.blobs)
        return len(deleted)

    def _bound_pending(self) -> None:
        over = len(self.pending) - self.max_pending
        if over <= 0:
            return
        for prefix in list(self.pending)[:over]:
            del self.pending[prefix]
            self.on_blob_failure("dropped")
        log.warning("retention: gave up deleting the output blobs of %d runs (too many kept)", over)

    async def _delete_blobs(self, blobs: BlobStore) -> None:
        """Deletes the pending prefixes in order; at the first failure the rest wait for
        the next sweep, so a store that is down costs one failed call per sweep."""
        for prefix, results in list(self.pending.items()):
            try:
                await blobs.delete_prefix(prefix)
                await blobs.delete_prefix(results)
            except BlobStoreUnavailable as e:
                self.on_blob_failure("failed")
                log.warning(
                    "retention: deleting %s failed (%s); %d output prefixes kept for the"
                    " next sweep",
                    prefix,
                    e,
                    len(self.pending),
                )
                return
            del self.pending[prefix]

    async def _run(self) -> None:
        while True:
            try:
                await self.sweep()
            except Exception:  # a top-level loop: log, and try again next time
                log.exception("retention sweep failed; trying again in %s", self.interval)
            await asyncio.sleep(self.interval.total_seconds())
