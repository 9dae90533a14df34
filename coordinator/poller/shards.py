"""The shards this poller serves, and whether it may write and send for them now.

**Acquire and release, one pair.** Each assignment coordination delivers is applied
as the shards it gains and the shards it loses (``apply``):

- ``acquire``: the shards are read from the store from scratch (their windows from
  their saved cursors), remembered with when they were taken: the leases an earlier
  owner granted for their runs are waited out one TTL from then (``lease_book``).
- ``release``: every run held of them is dropped (a cancel waiting on one is told to
  try again), a lease decided for them and not yet sent is never sent, and their
  windows are forgotten; the starts of their runs not written yet
  (``start_write_delay``) are written by the turn, for the next owner to read.

**A shard released waits for the turn's write.** The future each assignment comes
with (``AssignmentChanged.applied``) is answered once the turn that applied it is
over: after its commit, or once that commit failed (``Turn.applied``, answered by the
loop as the turn ends). Coordination hands a released shard to another poller only
then (its listener contract, ``coordination.Coordination``), so what this poller
decided before the release — a result its worker reported, which the worker is told
was accepted only after the commit — is in the store before the next owner reads
the shard. That holds whatever the turn holds: an assignment whose applying fails
(the poller voids what it holds) and an empty turn are answered as the turn ends too.

**Standing.** A poller that cannot confirm its coordination session (frozen, cut off)
may have lost its shards to another poller meanwhile, so it stands still: it writes
and sends nothing, and voids what it holds (reloaded from the store once confirmed
again, as a new owner would). The same when the session was replaced meanwhile:
everything decided under the old one is void, and the shards of the old session are
not served until the new session's assignment arrives. The writes of successive
turns carry strictly increasing times (``write_time``): a store that orders writes
by their time (Cassandra) never lets an older turn's write win over a newer one, and
a next owner, who takes the shards only later, writes over them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from enum import Enum

from shardcron.coordinator.coordination import Assignment
from shardcron.coordinator.metrics import Metrics
from shardcron.coordinator.poller.config import PollerConfig
from shardcron.coordinator.poller.streams import WorkerStreams
from shardcron.coordinator.poller.table import RunTable
from shardcron.coordinator.poller.turn import Turn
from shardcron.coordinator.poller.windows import ShardWindows

log = logging.getLogger("shardcron.poller")


class Standing(Enum):
    CONFIRMED = 1  # go on
    STILL = 2  # write and send nothing this turn
    RELOAD = 3  # write and send nothing; void what is held


class Shards:
    def __init__(
        self,
        poller_id: str,
        *,
        config: PollerConfig,
        metrics: Metrics,
        table: RunTable,
        streams: WorkerStreams,
        ownership_valid: Callable[[], bool],
        session_generation: Callable[[], int],
        new_scans: Callable[[], None],
        forget_reads: Callable[[], None],
    ) -> None:
        self._poller_id = poller_id
        self._metrics = metrics
        self._table = table
        self._streams = streams
        self._new_scans = new_scans  # a scan begun for the shards of before is not held
        self._forget_reads = forget_reads  # nothing read beside the turns is held any more
        self.windows = ShardWindows(config)
        self.epoch = 0
        self.active = False
        # False while coordination cannot confirm this poller still holds its shards
        self._valid = ownership_valid
        self._session = session_generation
        self._generation = session_generation()  # the session what is held was built under
        self._fencing_generation = self._generation  # the session of the fencing epoch
        self._standing_still = False
        self._last_write_time: datetime | None = None

    def owns(self, shard: int) -> bool:
        return shard in self.windows.shards

    def settled(self) -> bool:
        """Every owned shard was loaded once: a run not held now is not ours."""
        return self.active and self.windows.all_loaded()

    # --- acquire and release ---------------------------------------------------------

    def apply(
        self, a: Assignment, applied: asyncio.Future[None], turn: Turn, now: datetime
    ) -> None:
        """Takes a new assignment; ``applied`` is answered once ``turn`` is over (its
        write landed or never will): only then is a shard released here handed on."""
        turn.applied.append(applied)
        self._new_scans()
        if a.fencing_epoch != self._table.leases.fencing_epoch:
            self._fencing_generation = self._session()  # a new fencing epoch, of this session
        self.epoch = a.epoch
        self._table.leases.set_fencing_epoch(a.fencing_epoch)
        self.active = a.active
        held = self.windows.shards
        if gained := a.shards - held:
            self.acquire(gained, now)
        if lost := held - a.shards:
            for run in self._table.starts_to_write(now, lost):  # the next owner reads them
                turn.runs[run.id] = run
            self.release(lost)
        self._metrics.epoch.set(self.epoch)
        self._metrics.owned_shards.set(len(a.shards))

    def acquire(self, shards: frozenset[int], now: datetime) -> None:
        """These shards are served from now: read from the store from scratch, their
        earlier owner's leases waited out from ``now``."""
        self.windows.take(shards, now)

    def release(self, shards: frozenset[int]) -> None:
        """These shards are served by another poller from now: nothing of them is held,
        and no lease of them decided here goes out."""
        self._table.release(shards)
        self._streams.drop_unsent_leases()
        self.windows.leave(shards)

    # --- standing ---------------------------------------------------------------------

    def stand_still(self, now: datetime) -> bool:
        """True while ownership is unconfirmed or the session was replaced: nothing is
        written or sent, and what is held is voided once."""
        standing = self._standing()
        if standing == Standing.RELOAD:
            self.void(now)
        return standing != Standing.CONFIRMED

    def _standing(self) -> Standing:
        generation = self._session()
        if generation != self._generation:
            log.warning("poller %s: coordination session replaced; reloading", self._poller_id)
            self._generation = generation
            return Standing.RELOAD
        if self.windows.shards and self._fencing_generation != generation:
            return Standing.STILL  # shards of the old session: the new assignment is on its way
        if self._valid():
            self._standing_still = False
            return Standing.CONFIRMED
        if not self._standing_still:
            log.warning("poller %s: shard ownership not confirmed; standing still", self._poller_id)
            self._standing_still = True
            return Standing.RELOAD
        return Standing.STILL

    def void(self, now: datetime) -> None:
        """Forgets everything held in memory; the next scan reloads it from the store,
        as a poller taking the shards over would (leases are waited out or renewed)."""
        self._metrics.poller_resets.inc()
        self._forget_reads()
        self._table.clear()
        self.windows.reset(now)
        self._streams.forget_all()

    def may_send_leases(self) -> bool:
        """Leases may go out: active, ownership confirmed, the same session throughout.
        Checked again as leases go out: a process frozen after it queued them must not
        send them when it runs again."""
        return (
            self.active
            and not self._standing_still
            and self._session() == self._generation == self._fencing_generation
            and self._valid()
        )

    def write_time(self, now: datetime) -> datetime:
        """``now`` as the time of this turn's writes, after every earlier turn's."""
        if self._last_write_time is not None and now <= self._last_write_time:
            now = self._last_write_time + timedelta(microseconds=1)
        self._last_write_time = now
        return now
