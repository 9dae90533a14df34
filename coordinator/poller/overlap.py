"""Concurrency and overlap: whether a due run may start now, by its job's policy.

- A job runs at most ``max_concurrent`` runs at once (0: one, or no limit under
  ALLOW): ``concurrency_limit``. Its ready and leased runs count (admitted); a run
  taken over from an earlier owner (an orphan) counts too.
- A due run is admitted (READY) while its job is under the limit and has no run
  queued. Past it, by the job's overlap policy (``decide``, the only place the
  policies are told apart): FORBID — a fresh fire is skipped (SKIP, recorded
  SKIPPED OVERLAP); REPLACE — a fresh fire is queued first and the oldest admitted
  run not being cancelled already is cancelled (``victim``); QUEUE and ALLOW — it is
  queued behind the others. A run that is not a fresh fire (a retry, a manual run)
  always queues. A queued run is admitted when a run of its job ends, in order.
- Skipped only while a run is really going: under FORBID, a fresh fire whose job's
  admitted runs are all unclaimed orphans (leased by an earlier owner of the shard,
  no worker has renewed them here yet: maybe nothing runs) is held back (HOLD), not
  skipped, until one of them is claimed by its worker (it goes: the fire is decided
  again and skipped) or ends (decided again: admitted; skipped if a result its
  worker reported says the run went on past the fire's due time,
  ``skipped_by_reported_end``).
- Decided at the due instant: a run whose job has runs admitted is triggered at its
  very due instant, not a lease lead ahead (``waits_for_instant``), so overlap is
  decided against what runs at that instant.

The rules are pure functions of the job, its admitted runs and times; ``Overlap``
applies them to the runs of the ``RunTable`` as they come due and as runs end.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from contextlib import AbstractContextManager
from datetime import datetime
from enum import Enum

from shardcron.client.types import (
    Job,
    LateReason,
    OverlapPolicy,
    Run,
    RunReason,
    RunState,
)
from shardcron.coordinator.poller.end_rules import Outcome
from shardcron.coordinator.poller.lateness import Waits, bounded, skipped
from shardcron.coordinator.poller.table import Place, RunTable, Slot
from shardcron.coordinator.poller.turn import Turn

_REPORTED = (RunState.SUCCEEDED, RunState.FAILED, RunState.TIMED_OUT)  # ends a worker says


class Verdict(Enum):
    READY = 1  # admitted: waits for a worker's slot
    BLOCKED = 2  # queued behind the job's limit
    SKIP = 3  # FORBID: the fire is skipped (OVERLAP)
    REPLACE = 4  # queued first; the ``victim`` is cancelled to make room
    HOLD = 5  # FORBID, and only unclaimed orphans run: decided again later


def concurrency_limit(job: Job) -> float:
    c = job.spec.concurrency
    if c.max_concurrent > 0:
        return c.max_concurrent
    return math.inf if c.overlap == OverlapPolicy.ALLOW else 1


def decide(job: Job, admitted: Collection[Slot], *, queued: bool, fresh_fire: bool) -> Verdict:
    """What becomes of a due run of ``job``, given the job's ``admitted`` runs, whether
    runs of it are ``queued``, and whether the run is a fresh fire of its schedule."""
    if len(admitted) < concurrency_limit(job) and not queued:
        return Verdict.READY
    policy = job.spec.concurrency.overlap
    if fresh_fire and policy == OverlapPolicy.FORBID:
        return Verdict.HOLD if _unclaimed_only(admitted) else Verdict.SKIP
    if fresh_fire and policy == OverlapPolicy.REPLACE:
        return Verdict.REPLACE
    return Verdict.BLOCKED


def _unclaimed_only(admitted: Collection[Slot]) -> bool:
    """Every one of these runs is an orphan no worker has renewed here yet."""
    return all(s.place is Place.LEASED and s.worker is None for s in admitted)


def victim(admitted: Collection[Slot]) -> Slot | None:
    """The run a REPLACE cancels: the oldest admitted run not already being cancelled
    (None: each is)."""
    victims = [s for s in admitted if s.cancel_reason is None]
    return min(victims, key=lambda s: (s.run.due_at, s.run.id)) if victims else None


def waits_for_instant(busy: bool, due_at: datetime, now: datetime) -> bool:
    """A run reached ahead of its due instant waits for that very instant when its job
    has runs admitted (``busy``): whether it overlaps them is decided then."""
    return busy and due_at > now


def ran_until(final: Run, *, reported: bool) -> datetime | None:
    """Until when a run that ended went on, as far as its end says: the end time of a
    result its worker reported; None for any other end."""
    if reported and final.state in _REPORTED and final.reason != RunReason.WORKER_LOST:
        return final.ended_at
    return None


def skipped_by_reported_end(due_at: datetime, until: datetime | None) -> bool:
    """A FORBID fire held back, decided again after its job's run ended: it overlapped
    that run if the run went on past the fire's due time."""
    return until is not None and due_at < until


End = Callable[[Slot, Outcome, Turn, datetime], Run]
Cancel = Callable[[Slot, RunReason, Turn, datetime], None]
Isolate = Callable[..., AbstractContextManager[None]]  # Ends.isolated(slot, turn, now, where=...)


class Overlap:
    """The rules above, applied to the table's runs. It ends the runs they skip and
    cancels the runs a REPLACE replaces through ``end`` and ``cancel`` (``Ends``)."""

    def __init__(self, table: RunTable, *, end: End, cancel: Cancel, isolated: Isolate) -> None:
        self._table = table
        self._end = end
        self._cancel = cancel
        self._isolated = isolated

    def admit(self, slot: Slot, fresh_fire: bool, turn: Turn, now: datetime) -> Verdict:
        """The due run asks to start: it is made ready, queued, held back or skipped,
        as ``decide`` says; a REPLACE cancels the run it replaces."""
        job = slot.job
        assert job is not None
        table = self._table
        admitted = table.admitted(job.id)
        verdict = decide(job, admitted, queued=table.queued(job.id), fresh_fire=fresh_fire)
        if verdict == Verdict.READY:
            if slot.waits is not None:
                slot.waits.note(None, "", now)  # what it waits for next is not known yet
            table.make_ready(slot)
        elif verdict == Verdict.HOLD:
            _waits(slot, now).note(LateReason.OVERLAP, _HELD_BACK, now)
            table.hold_back(slot)
        elif verdict == Verdict.SKIP:
            self._end(slot, _overlap_skip(job, admitted), turn, now)
        else:
            code, text = _blocked(job, admitted)
            _waits(slot, now).note(code, text, now)
            table.queue(slot, first=verdict == Verdict.REPLACE)
            replaced = victim(admitted) if verdict == Verdict.REPLACE else None
            if replaced is not None:
                self._cancel(replaced, RunReason.REPLACED, turn, now)
        return verdict

    def after_end(
        self, job_id: str, turn: Turn, now: datetime, *, ran_until: datetime | None = None
    ) -> None:
        """A run of the job ended: its queued runs are admitted while the limit allows,
        in order; then its fires held back are decided again: those due before
        ``ran_until`` (when its worker says the run went on until) overlapped it and
        are skipped, the others may run."""
        self._table.unblock(job_id, concurrency_limit, now)
        self._decide_held_again(job_id, turn, now, ran_until)

    def claimed(self, job_id: str, turn: Turn, now: datetime) -> None:
        """An orphan of the job was claimed by its worker: it is going, and the job's
        fires held back are decided again (skipped)."""
        self._decide_held_again(job_id, turn, now, None)

    def _decide_held_again(
        self, job_id: str, turn: Turn, now: datetime, until: datetime | None
    ) -> None:
        for slot in self._table.release_held(job_id):
            with self._isolated(slot, turn, now, where="admit"):
                if skipped_by_reported_end(slot.run.due_at, until):
                    assert slot.job is not None
                    self._end(slot, _overlap_skip(slot.job, ()), turn, now)
                else:
                    self.admit(slot, True, turn, now)


# --- why a run waits or is skipped, in words (``lateness``) -------------------------------


def _waits(slot: Slot, now: datetime) -> Waits:
    """The run's waits, begun at its due instant (or now, if it is due later)."""
    if slot.waits is None:
        slot.waits = Waits(max(now, slot.run.due_at))
    return slot.waits


def _previous(admitted: Collection[Slot]) -> str:
    first = next(iter(admitted), None)
    return "previous run" if first is None else f"previous run {first.run.id}"


def _blocked(job: Job, admitted: Collection[Slot]) -> tuple[LateReason, str]:
    limit = concurrency_limit(job)
    policy = job.spec.concurrency.overlap.value
    if limit == 1:
        return LateReason.OVERLAP, bounded(
            f"overlap: {_previous(admitted)} still running ({policy})"
        )
    return LateReason.CONCURRENCY_LIMIT, f"concurrency limit: {len(admitted)} runs of its job going"


_HELD_BACK = "overlap: waiting to learn whether a run taken over from another poller still runs"


def _overlap_skip(job: Job, admitted: Collection[Slot]) -> Outcome:
    text = f"overlap: {_previous(admitted)} still running ({job.spec.concurrency.overlap.value})"
    late = skipped(LateReason.OVERLAP, text)
    return Outcome(state=RunState.SKIPPED, reason=RunReason.OVERLAP, lateness=late)
