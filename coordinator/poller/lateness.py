"""Why a run was late, skipped or missed: the waits a held run meets past its due
instant, kept in its slot, and the ``RunLateness`` its lease or end record carries.

**Late** is leased more than ``late_after`` past the due instant: 1 s, or the lease
lead when that is longer (a run may be triggered a lead ahead of its instant, so a
lead is what a turn may take to place it). The lease is the poller's last say in
when a run starts (its worker starts it on arrival, or at its instant), and its
LEASED record is written anyway: the lateness rides on it, and on every later
record of the run (a copy keeps it), never in a write of its own.

**Waits** are segments of time past the due instant, each with a code and a text,
summed by code in the run's slot (``Slot.waits``), from the rules that see them:

- the poller came to it late (``Due.trigger`` past the cut-off): the time from its
  due instant, ``POLLER_BEHIND``; ``PAUSED`` instead for a run of a job that held
  runs back in the store while paused, until one of its runs comes on time (the
  poller remembers such jobs, a bounded number, not across a restart);
- its job's limit queued it, its overlap policy held it back (``Overlap.admit``):
  ``CONCURRENCY_LIMIT`` or ``OVERLAP``, until it is admitted;
- it is ready and no worker takes it: once a second, with the waiting-runs gauge
  (``Leasing.count_waiting``), each ready run past its due instant is told its
  class's reason (``placement.why_waiting``: no worker for its owner, its handler or
  commands, with its labels, big enough, with a free slot); a class some worker has
  room for waits for the poller's turn (``POLLER_BEHIND``). A wait whose reason is
  not known yet (admitted since the last count) counts once the next count names
  it, or not at all if the run is leased first.

The record names the code waited for the longest, how long, and a text of at most
``TEXT_LIMIT`` characters. A run on time costs a comparison of its due instant with a
cut-off made once per turn (``LateCut``): its ``waits`` stays None, and nothing is
made for it. A run skipped or missed gets its record from the rule that ended it
(``skipped``, ``missed``): paused, the overlap policy, the misfire policy, the
starting deadline (with the wait it met the longest).

Pure: nothing here reads a clock or calls the store.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from shardcron.client.types import LateReason, RunLateness
from shardcron.coordinator.poller.placement import WaitReason

LATE_AFTER = timedelta(seconds=1)  # the least lateness recorded
TEXT_LIMIT = 200  # characters of a lateness text

_FROM_WAIT = {
    WaitReason.NO_WORKER_FOR_OWNER: LateReason.NO_WORKER_FOR_OWNER,
    WaitReason.NO_WORKER_FOR_HANDLER: LateReason.NO_WORKER_FOR_HANDLER,
    WaitReason.NO_WORKER_FOR_COMMANDS: LateReason.NO_WORKER_FOR_COMMANDS,
    WaitReason.NO_WORKER_WITH_LABELS: LateReason.NO_WORKER_WITH_LABELS,
    WaitReason.NO_CAPACITY: LateReason.NO_CAPACITY,
    WaitReason.NO_FREE_SLOT: LateReason.NO_FREE_SLOT,
    WaitReason.CONCURRENCY_LIMIT: LateReason.CONCURRENCY_LIMIT,
}


def late_after(lease_lead: timedelta) -> timedelta:
    """How far past its due instant a run's lease is late: 1 s, or the lease lead."""
    return max(LATE_AFTER, lease_lead)


def from_wait(reason: WaitReason) -> LateReason:
    return _FROM_WAIT[reason]


def bounded(text: str) -> str:
    return text if len(text) <= TEXT_LIMIT else text[: TEXT_LIMIT - 3] + "..."


class LateCut:
    """The due instants before which a run is late now: ``now - late_after``, made once
    for each ``now`` (a turn's rules share one), so a run on time costs a comparison."""

    __slots__ = ("_after", "_cut", "_now")

    def __init__(self, after: timedelta) -> None:
        self._after = after
        self._now: datetime | None = None
        self._cut: datetime | None = None

    def before(self, now: datetime) -> datetime:
        if now is not self._now:
            self._now, self._cut = now, now - self._after
        assert self._cut is not None
        return self._cut

    def late(self, due_at: datetime, now: datetime) -> bool:
        """A run due at ``due_at`` is late if it starts now."""
        return due_at < self.before(now)


class Waits:
    """What one held run has waited for past its due instant: seconds by code, the
    text each code last had, and the wait going on (``code`` None: one whose reason
    is not known yet)."""

    __slots__ = ("code", "seconds", "since", "text", "texts")

    def __init__(self, since: datetime, code: LateReason | None = None, text: str = "") -> None:
        self.seconds: dict[LateReason, float] = {}
        self.texts: dict[LateReason, str] = {}
        self.code = code
        self.text = text
        self.since = since

    def note(self, code: LateReason | None, text: str, now: datetime) -> None:
        """From ``now`` on the run waits for ``code`` (None: for what is not known yet);
        the wait before is counted to its code."""
        if code is not None and code is self.code:
            self.text = text
            return
        self._count(now)
        self.code, self.text, self.since = code, text, max(now, self.since)

    def seen(self, code: LateReason, text: str, now: datetime) -> None:
        """The run was seen waiting for ``code``: a wait not known yet was this one."""
        if self.code is None:
            self.code, self.text = code, text
        else:
            self.note(code, text, now)

    def longest(self, now: datetime) -> tuple[LateReason, str, float] | None:
        """The code waited for the longest by ``now``, its text and seconds; None when
        no wait with a known reason was met."""
        self._count(now)
        self.since = max(now, self.since)
        if not self.seconds:
            return None
        code = max(self.seconds, key=self.seconds.__getitem__)
        return code, self.texts[code], self.seconds[code]

    def _count(self, now: datetime) -> None:
        code = self.code
        if code is None or now <= self.since:
            return
        self.seconds[code] = self.seconds.get(code, 0.0) + (now - self.since).total_seconds()
        self.texts[code] = self.text


def behind_since(due_at: datetime) -> Waits:
    """The waits of a run the poller came to late: behind since its due instant."""
    return Waits(due_at, LateReason.POLLER_BEHIND, "the poller came to it late")


def _said(code: LateReason, text: str, seconds: float) -> str:
    if code is LateReason.POLLER_BEHIND:
        return f"poller behind by {seconds:.1f} s"
    if code is LateReason.PAUSED:
        return f"paused for {seconds:.1f} s"
    return f"{text} for {seconds:.1f} s"


def leased(waits: Waits | None, due_at: datetime, now: datetime) -> RunLateness:
    """The lateness of a run leased late at ``now``: the wait it met the longest (a run
    whose waits are not known waited for a worker)."""
    late = (now - due_at).total_seconds()
    longest = None if waits is None else waits.longest(now)
    if longest is None:
        longest = (LateReason.NO_FREE_SLOT, "waiting for a worker", late)
    code, text, seconds = longest
    return RunLateness(
        reason=code,
        text=bounded(f"leased {late:.1f} s after its due time: {_said(code, text, seconds)}"),
        waited=timedelta(seconds=seconds),
    )


def skipped(code: LateReason, text: str) -> RunLateness:
    """The lateness of a fire its rules skipped (paused, overlap, misfire)."""
    return RunLateness(reason=code, text=bounded(text))


def missed(waits: Waits | None, deadline: timedelta | None, now: datetime) -> RunLateness:
    """The lateness of a run whose starting deadline passed: the wait it met the
    longest, else the deadline itself."""
    limit = "" if deadline is None else f" ({deadline.total_seconds():g} s)"
    longest = None if waits is None else waits.longest(now)
    if longest is None:
        return RunLateness(
            reason=LateReason.DEADLINE, text=bounded(f"its starting deadline{limit} passed")
        )
    code, text, seconds = longest
    return RunLateness(
        reason=code,
        text=bounded(f"its starting deadline{limit} passed: {_said(code, text, seconds)}"),
        waited=timedelta(seconds=seconds),
    )
