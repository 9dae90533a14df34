"""The lease book: which runs are leased, under which fencing token, until when.

Never twice at once rests on it:
- a token is ``fencing_epoch << 32 | sequence``; the sequence restarts at 1 when the
  fencing epoch changes, and a poller's fencing epoch is above every earlier owner's,
  so a newer lease always carries a larger token;
- a lease is held for ``lease_ttl`` from when it was granted, from when it was sent,
  and from each renewal (never less than it was: a lease given ahead of its run's
  due instant holds one TTL from that instant, the wait included); that absolute ``expires_at`` goes to the worker in the
  lease and in each granted renewal, and the run's supervisor kills the command by
  then (minus a safety margin, on the worker's clock); the lease is taken back only
  ``expiry_grace`` after it, that is at ``now >= expires_at + expiry_grace``, so
  clocks may disagree by the margin plus the grace (proto/README.md);
- a renewal is granted only for the current token of a run, to the worker the lease
  was granted to, while the poller is active;
- a run leased by an earlier owner (met in the store when a shard is taken over) is
  held at least one full TTL from the take-over: its worker may still run it and
  come back to renew it.

Pure: every method takes ``now``; the book reads no clock and writes nothing.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from shardcron.client.saturating import saturating_add
from shardcron.coordinator.poller.config import EPOCH_SHIFT
from shardcron.coordinator.poller.timeline import Timeline


class LeaseBook:
    __slots__ = ("_expiries", "_held", "_seq", "expiry_grace", "fencing_epoch", "lease_ttl")

    def __init__(self, *, lease_ttl: timedelta, expiry_grace: timedelta) -> None:
        self.lease_ttl = lease_ttl
        self.expiry_grace = expiry_grace
        self.fencing_epoch = 0
        self._seq = 0
        # run id -> (token, worker id, expires at): the current lease of each held run
        self._held: dict[str, tuple[int, str, datetime]] = {}
        self._expiries = Timeline()  # run id -> when its current lease expires

    def __len__(self) -> int:
        return len(self._held)

    def set_fencing_epoch(self, fencing_epoch: int) -> None:
        """Tokens from now on carry this epoch; a new epoch restarts the sequence."""
        if fencing_epoch != self.fencing_epoch:
            self._seq = 0
            self.fencing_epoch = fencing_epoch

    def clear(self) -> None:
        """Forgets every lease held (the sequence goes on: tokens never repeat)."""
        self._held.clear()
        self._expiries.clear()

    # --- taking leases --------------------------------------------------------------

    def grant(self, run_id: str, worker_id: str, now: datetime) -> tuple[int, datetime]:
        """A new lease of the run to the worker: its token and when it expires."""
        self._seq += 1
        token = (self.fencing_epoch << EPOCH_SHIFT) | self._seq
        expires = saturating_add(now, self.lease_ttl)
        self._hold(run_id, token, worker_id, expires)
        return token, expires

    def sent(self, run_id: str, token: int, now: datetime) -> datetime | None:
        """The lease goes out to its worker now: its TTL counts from now, as the worker's
        will. None if the run is no longer held under that token."""
        held = self._held.get(run_id)
        if held is None or held[0] != token:
            return None
        expires = saturating_add(now, self.lease_ttl)
        self._hold(run_id, token, held[1], expires)
        return expires

    def adopt(
        self,
        run_id: str,
        token: int,
        worker_id: str,
        expires_at: datetime | None,
        *,
        taken_at: datetime,
        now: datetime,
    ) -> datetime:
        """A run leased before this poller took its shard (at ``taken_at``): held until
        its stored expiry, and one full TTL after the take-over at least."""
        expires = max(expires_at or now, saturating_add(taken_at, self.lease_ttl))
        self._hold(run_id, token, worker_id, expires)
        return expires

    def _hold(self, run_id: str, token: int, worker_id: str, expires: datetime) -> None:
        self._held[run_id] = (token, worker_id, expires)
        self._expiries.push(run_id, expires)

    # --- holding them -----------------------------------------------------------------

    def held(self) -> set[str]:
        """The runs leased here."""
        return set(self._held)

    def holds(self, run_id: str, token: int) -> bool:
        """The run is leased here under exactly this token."""
        held = self._held.get(run_id)
        return held is not None and held[0] == token

    def renew(
        self, run_id: str, token: int, worker_id: str, now: datetime, *, active: bool
    ) -> datetime | None:
        """A worker's heartbeat names the lease: its new expiry if the renewal is granted
        (current token, granted to this worker, poller active), else None."""
        held = self._held.get(run_id)
        if not active or held is None or held[0] != token or held[1] != worker_id:
            return None
        # never earlier than it was: a lease sent ahead of its run's due instant holds
        # one TTL from that instant, and a heartbeat during the wait must not cut it
        expires = max(saturating_add(now, self.lease_ttl), held[2])
        self._hold(run_id, token, worker_id, expires)
        return expires

    def expires_at(self, run_id: str) -> datetime | None:
        """When the run's lease held here expires (None: not held)."""
        held = self._held.get(run_id)
        return None if held is None else held[2]

    def release(self, run_id: str) -> None:
        """The run is no longer leased here (it ended, was refused or forgotten)."""
        self._held.pop(run_id, None)
        self._expiries.remove(run_id)

    # --- taking them back ---------------------------------------------------------------

    def expired(self, now: datetime) -> list[str]:
        """Runs whose lease ran out, grace included; released from the book."""
        cutoff = saturating_add(now, -self.expiry_grace)
        out = [run_id for _, run_id in self._expiries.pop_until(cutoff, len(self._expiries))]
        for run_id in out:
            del self._held[run_id]
        return out

    def next_expiry(self) -> datetime | None:
        """When the earliest lease may be taken back."""
        first = self._expiries.first_at()
        return None if first is None else saturating_add(first, self.expiry_grace)
