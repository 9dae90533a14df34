"""Whether the poller may write and send now: its hold on its shards, confirmed.

A poller that cannot confirm its coordination session (frozen, cut off) may have
lost its shards to another poller meanwhile, so it stands still: it writes and
sends nothing, and forgets what it held (reloaded from the store once confirmed
again, as a new owner would). The same when the session was replaced meanwhile:
everything decided under the old one is void, and the shards of the old session
are not served until the new session's assignment arrives.

The writes of successive turns carry strictly increasing times (``write_time``):
a store that orders writes by their time (Cassandra) then never lets an older
turn's write win over a newer one, and a next owner, who takes the shards only
later, writes over them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from enum import Enum

log = logging.getLogger("shardcron.poller")


class Standing(Enum):
    CONFIRMED = 1  # go on
    STILL = 2  # write and send nothing this turn
    RELOAD = 3  # write and send nothing; forget what is held (it is void)


class Ownership:
    def __init__(
        self,
        poller_id: str,
        *,
        ownership_valid: Callable[[], bool],
        session_generation: Callable[[], int],
    ) -> None:
        self._poller_id = poller_id
        # False while coordination cannot confirm this poller still holds its shards
        self._valid = ownership_valid
        self._session = session_generation
        self._generation = session_generation()  # the session the state was built under
        self._fencing_generation = self._generation  # the session of the fencing epoch
        self._standing_still = False
        self._last_write_time: datetime | None = None

    def new_fencing_epoch(self) -> None:
        """An assignment with a new fencing epoch came, under the session of now."""
        self._fencing_generation = self._session()

    def standing(self, *, has_shards: bool) -> Standing:
        generation = self._session()
        if generation != self._generation:
            log.warning("poller %s: coordination session replaced; reloading", self._poller_id)
            self._generation = generation
            return Standing.RELOAD
        if has_shards and self._fencing_generation != generation:
            return Standing.STILL  # shards of the old session: the new assignment is on its way
        if self._valid():
            self._standing_still = False
            return Standing.CONFIRMED
        if not self._standing_still:
            log.warning("poller %s: shard ownership not confirmed; standing still", self._poller_id)
            self._standing_still = True
            return Standing.RELOAD
        return Standing.STILL

    def may_send_leases(self) -> bool:
        """Checked again as leases go out: a process frozen after it queued them must not
        send them when it runs again."""
        return (
            not self._standing_still
            and self._session() == self._generation == self._fencing_generation
            and self._valid()
        )

    def write_time(self, now: datetime) -> datetime:
        """``now`` as the time of this turn's writes, after every earlier turn's."""
        if self._last_write_time is not None and now <= self._last_write_time:
            now = self._last_write_time + timedelta(microseconds=1)
        self._last_write_time = now
        return now
