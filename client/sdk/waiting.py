"""How the ``wait_*`` methods of both clients pace their polls and when they give up.

Polling starts fast (50 ms) and doubles up to the poll interval, so a run that ends
quickly is seen quickly without a busy loop on a long one. The clock is the monotonic
one: a wall-clock step changes no timeout.
"""

from __future__ import annotations

import time

from shardcron.client.types import Run

DEFAULT_POLL_INTERVAL = 0.5  # seconds between polls of wait_run / wait_job_runs, at most


class Waiter:
    """Poll pacing for the wait_* methods: short first delays growing to ``interval``,
    and TimeoutError once ``timeout`` seconds (None = never) have passed."""

    def __init__(self, timeout: float | None, interval: float) -> None:
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._timeout = timeout
        self._interval = interval
        self._delay = min(0.05, interval)

    def next_delay(self, waiting_for: str) -> float:
        delay, self._delay = self._delay, min(self._delay * 2, self._interval)
        if self._deadline is None:
            return delay
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"timed out after {self._timeout:g}s waiting for {waiting_for}")
        return min(delay, left)


def final_runs_wanted(runs: list[Run], count: int, job_id: str) -> str:
    """What is still awaited, or an empty string once ``runs`` holds ``count`` runs."""
    return "" if len(runs) >= count else f"{count} final runs of job {job_id} (have {len(runs)})"
