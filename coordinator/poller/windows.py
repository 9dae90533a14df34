"""Which part of each owned shard's due index the poller reads, and when.

Each shard is read from where it was left (its cursor, or its oldest due row the
first time) up to ``now + lookahead + scan_reach``; a later scan reads on from there
once that edge comes near (``to_read``), so a shard is read about
once per ``scan_reach``, not at every scan. With a
``recheck_interval`` the recent past is read again too, back ``recheck_window``
from the previous re-read, for runs whose creation hint never came: however long
the poller was held up in between, nothing written meanwhile is skipped; runs
due within ``hint_grace`` of now are left to their hint by a re-read, and read by
a later one if it never comes (``left_to_hint``). A shard
taken over is remembered with when it was taken (an earlier owner's leases are
waited out one TTL from then). Cursors saved are the start of the bucket of the
oldest run still held (or of the loaded edge), so a shard is never rescanned
from its beginning. Pure: times come in as arguments.
"""

from __future__ import annotations

from datetime import datetime

from shardcron.client.saturating import saturating_add
from shardcron.coordinator.ids import bucket_for
from shardcron.coordinator.poller.config import PollerConfig


class ShardWindows:
    def __init__(self, config: PollerConfig) -> None:
        self._config = config
        self.shards: frozenset[int] = frozenset()
        self.taken_at: dict[int, datetime] = {}
        self._loaded_until: dict[int, datetime] = {}
        # when each shard's recent past was last re-read (recheck_interval)
        self._rechecked_at: dict[int, datetime] = {}
        self._next_scan = 0.0  # monotonic
        self._next_recheck = 0.0
        self._next_cursor_save = 0.0

    def take(self, shards: frozenset[int], now: datetime) -> None:
        """These shards are owned from ``now``: read from their cursors, at once."""
        for shard in shards:
            self.taken_at[shard] = now
            self._loaded_until.pop(shard, None)
        self.shards |= shards
        self._next_scan = 0.0

    def leave(self, shards: frozenset[int]) -> None:
        """These shards are owned no more."""
        for shard in shards:
            self.taken_at.pop(shard, None)
            self._loaded_until.pop(shard, None)
            self._rechecked_at.pop(shard, None)
        self.shards -= shards

    def reset(self, now: datetime) -> None:
        """Everything is read again, as by a poller taking every shard over now."""
        self._loaded_until.clear()
        self._rechecked_at.clear()
        self.taken_at = dict.fromkeys(self.shards, now)
        self._next_scan = 0.0

    def all_loaded(self) -> bool:
        return all(shard in self._loaded_until for shard in self.shards)

    def loaded_until(self, shard: int) -> datetime | None:
        return self._loaded_until.get(shard)

    # --- scans ---------------------------------------------------------------------

    def scan_due(self, clock: float) -> bool:
        return bool(self.shards) and clock >= self._next_scan

    def seconds_to_scan(self, clock: float) -> float | None:
        return self._next_scan - clock if self.shards else None

    def scan_edge(self, now: datetime) -> datetime:
        """How far a scan beginning ``now`` reads each shard it reads."""
        return saturating_add(now, self._config.lookahead + self._config.scan_reach)

    def to_read(self, now: datetime, *, recheck: bool) -> dict[int, datetime | None]:
        """The shards the scan beginning ``now`` reads, each with its loaded edge (None:
        not loaded yet): every one when it re-reads the recent past, else those whose
        edge would come within the lookahead before the next scan."""
        near = saturating_add(now, self._config.lookahead + self._config.scan_interval)
        edges = {s: self._loaded_until.get(s) for s in sorted(self.shards)}
        return {s: e for s, e in edges.items() if recheck or e is None or e < near}

    def recheck_due(self, clock: float) -> bool:
        """The scan beginning now re-reads the recent past too."""
        return self._config.recheck_interval is not None and clock >= self._next_recheck

    def scanned(self, clock: float, *, rechecked: bool) -> None:
        """A scan that began at ``clock`` is over: the next one is a scan interval
        after that (at once if its reads took longer)."""
        self._next_scan = clock + self._config.scan_interval.total_seconds()
        if rechecked:
            assert self._config.recheck_interval is not None
            self._next_recheck = clock + self._config.recheck_interval.total_seconds()

    def window_start(
        self, shard: int, start: datetime, now: datetime, *, recheck: bool
    ) -> datetime:
        """Where to read ``shard`` from: ``start`` (where it was left), or earlier to
        re-read the recent past back from the previous re-read."""
        if not recheck:
            return start
        since = min(now, self._rechecked_at.get(shard, now))
        return min(start, since - self._config.recheck_window)

    def left_to_hint(self, shard: int, due_at: datetime, now: datetime) -> bool:
        """A run of ``shard`` found before its loaded edge (so by a re-read of the
        recent past) and due at or after ``now - hint_grace``: not read this time, its
        hint is on its way (``PollerConfig.hint_grace``). The next re-read's window
        starts ``recheck_window`` before this one, so it meets the run again."""
        grace = self._config.hint_grace
        edge = self._loaded_until.get(shard)
        return bool(grace) and edge is not None and now - grace <= due_at < edge

    def loaded(self, shard: int, until: datetime, now: datetime, *, recheck: bool) -> None:
        """The shard was read up to ``until`` (and its recent past, if ``recheck``)."""
        self._loaded_until[shard] = max(until, self._loaded_until.get(shard, until))
        if recheck:
            self._rechecked_at[shard] = now

    # --- cursors ---------------------------------------------------------------------------

    def save_cursors_due(self, clock: float) -> bool:
        return bool(self.shards) and clock >= self._next_cursor_save

    def cursors(
        self, oldest_held: dict[int, datetime], now: datetime, bucket_seconds: int, clock: float
    ) -> dict[int, datetime]:
        """Per loaded shard, the cursor to save: the start of the bucket of the oldest
        run still held there, or of the loaded edge, never later than now."""
        self._next_cursor_save = clock + self._config.cursor_save_interval.total_seconds()
        out = {}
        for shard in self.shards:
            edge = self._loaded_until.get(shard)
            if edge is None:
                continue
            low = min(oldest_held.get(shard, edge), edge, now)
            out[shard] = datetime.fromtimestamp(bucket_for(low, bucket_seconds), low.tzinfo)
        return out
