"""Time arithmetic that saturates instead of raising.

Validation bounds every duration and time a user sends (``limits``), so adding an
allowed duration to an allowed time never overflows. But a job stored before those
bounds, or written by another version, may still carry a ten-thousand-year starting
deadline or backoff; the scheduler's rules add such durations to times on every
turn, and one ``OverflowError`` there must not stop the scheduler for everybody.
Every place the poller and the fire rules add a duration to a time goes through
``saturating_add``: a sum past ``FAR_FUTURE`` is ``FAR_FUTURE`` (a deadline that never
comes), one before ``FAR_PAST`` is ``FAR_PAST``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shardcron.client.limits import EARLIEST_TIME, LATEST_TIME

# Far beyond every time validation admits (LATEST_TIME), far enough inside what
# ``datetime`` holds that a few more saturated additions (a grace, a retry delay) fit.
FAR_FUTURE = datetime(9999, 1, 1, tzinfo=UTC)
FAR_PAST = datetime(1, 1, 2, tzinfo=UTC)
_LONGEST = timedelta.max
_ZERO = timedelta(0)

assert FAR_PAST < EARLIEST_TIME and LATEST_TIME < FAR_FUTURE


def saturating_add(at: datetime, delta: timedelta) -> datetime:
    """``at + delta``, held within [``FAR_PAST``, ``FAR_FUTURE``], and never on the wrong
    side of ``at`` (a time stored beyond ``FAR_FUTURE`` stays where it is)."""
    if delta >= _ZERO:
        ceiling = max(at, FAR_FUTURE)
        return ceiling if delta > ceiling - at else at + delta
    floor = min(at, FAR_PAST)
    return floor if delta < floor - at else at + delta


def saturating_seconds(seconds: float) -> timedelta:
    """A non-negative duration of ``seconds``, at most the longest ``timedelta`` (NaN and
    infinity included): for delays computed in floats, such as a retry's jitter."""
    if not seconds > 0:
        return _ZERO
    if not seconds < _LONGEST.total_seconds():
        return _LONGEST
    return timedelta(seconds=seconds)
