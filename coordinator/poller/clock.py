"""The poller's clock, injected: every rule takes its time from here, never reads it.

``now()`` is wall time (aware UTC) for what is written and compared with stored
times (due, lease expiry, deadlines); ``monotonic()`` is for intervals the poller
keeps to itself (next scan, job copies' age, how long a run counts as just ended).
Tests pass a fake clock and move it by hand.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """Wall time, an aware UTC datetime."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary start, never going back."""
        ...


class SystemClock:
    """The machine's clocks."""

    __slots__ = ()

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()
