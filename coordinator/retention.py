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
reads every part of every run. A deleted job's runs are not deleted with it
(``DeleteJob`` marks it DELETED): they and their parts go here, at the runs' retention.

**Blobs no run holds** (``OrphanWalk``). Cassandra's rows expire by TTL and name no
run; a restart forgets the prefixes kept; a node that had no blob store when its runs
expired deleted none. So each sweep also walks the blob store's `output/` and then
`results/` keys, at most ``WALK_PAGES`` pages of them from where the last sweep
stopped (a cursor in memory: a whole walk spans as many sweeps as it needs), and
deletes the prefix of each run whose id says it was due more than the retention ago
(``ids.run_due_at``) and that the job store no longer has (``get_runs``, one call
per page). A run still stored keeps its blobs, however old (a paused job's, a long
run's, a dead letter's); a run due within the retention is never asked for, so a
run being created is never taken for gone. A key not of the layout is left alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from shardcron.blobs.errors import BlobStoreUnavailable, InvalidBlobKey
from shardcron.blobs.layout import BlobKind, output_prefix, results_prefix
from shardcron.blobs.store import BlobStore
from shardcron.client.schedule import parse_duration
from shardcron.coordinator.ids import run_due_at, utcnow
from shardcron.coordinator.store import JobStore
from shardcron.coordinator.sweeps import Sweep

log = logging.getLogger(__name__)

DEFAULT_RETENTION = timedelta(days=30)
MIN_INTERVAL = timedelta(seconds=1)
MAX_INTERVAL = timedelta(hours=1)
MAX_PENDING_BLOBS = 100_000  # output prefixes kept to delete again, at most
WALK_PAGES = 10  # pages of blob keys (of up to 1,000) an orphan walk reads per sweep


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


class RetentionSweeper(Sweep):
    """Calls ``store.expire_runs`` every ``interval`` until ``stop``, and deletes the
    deleted runs' output from ``blobs`` (module docstring)."""

    name = "retention"

    def __init__(
        self,
        store: JobStore,
        *,
        interval: timedelta,
        clock: Callable[[], datetime] = utcnow,
        blobs: BlobStore | None = None,
        on_blob_failure: Callable[[str], None] = lambda outcome: None,
        max_pending: int = MAX_PENDING_BLOBS,
        retention: timedelta | None = None,
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
        # with the retention: the walk that finds blobs of runs the store no longer has
        self.orphans = (
            None if blobs is None or retention is None else OrphanWalk(store, blobs, retention)
        )

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
        if self.orphans is not None and not self.pending:  # a store failing: next time
            try:
                await self.orphans.step(self.clock())
            except BlobStoreUnavailable as e:
                self.on_blob_failure("failed")
                log.warning("retention: walking the blob store failed (%s)", e)
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


class OrphanWalk:
    """Deletes the output and result blobs of runs the job store no longer has (module
    docstring), a bounded part of the blob store per ``step``."""

    def __init__(
        self, store: JobStore, blobs: BlobStore, retention: timedelta, *, pages: int = WALK_PAGES
    ) -> None:
        self.store = store
        self.blobs = blobs
        self.retention = retention
        self.pages = pages
        self._kinds = (BlobKind.OUTPUT, BlobKind.RESULTS)
        self._kind = 0  # which of them the walk is in
        self._token = ""  # where it stopped in that kind's keys
        self.deleted = 0  # run prefixes deleted since start

    async def step(self, now: datetime) -> int:
        """Reads up to ``pages`` pages of keys from where the last step stopped and
        deletes the prefixes of the runs found gone; returns how many."""
        cutoff = now - self.retention
        deleted = 0
        for _ in range(self.pages):
            kind = self._kinds[self._kind]
            page = await self.blobs.list(f"{kind.value}/", page_token=self._token)
            runs: dict[str, str] = {}  # run id -> owner, of the runs due before the cutoff
            for entry in page.items:
                parts = entry.key.split("/")
                if len(parts) < 4:
                    continue
                due = run_due_at(parts[2])
                if due is not None and due < cutoff:
                    runs[parts[2]] = parts[1]
            if runs:
                stored = await self.store.get_runs(list(runs))
                for run_id, owner in runs.items():
                    if run_id in stored:
                        continue
                    try:
                        prefix = (output_prefix if kind is BlobKind.OUTPUT else results_prefix)(
                            owner, run_id
                        )
                    except InvalidBlobKey:
                        continue
                    await self.blobs.delete_prefix(prefix)
                    deleted += 1
            self._token = page.next_page_token
            if not self._token:  # this kind walked whole: the other next
                self._kind = (self._kind + 1) % len(self._kinds)
                if self._kind == 0:
                    break  # a whole walk: the next sweep begins another
        if deleted:
            log.info("retention: deleted the blobs of %d runs no longer stored", deleted)
        self.deleted += deleted
        return deleted
