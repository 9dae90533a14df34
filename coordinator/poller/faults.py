"""A fault in the poller's rules for one run: what it says, and the context that
keeps it to that run (``Ends.isolated``)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from shardcron.client.limits import MAX_ERROR_MESSAGE, clip
from shardcron.coordinator.poller.table import Slot
from shardcron.coordinator.poller.turn import Turn

Fail = Callable[..., None]  # Ends.fault(slot, error, turn, now, *, where)


def fault_text(error: BaseException) -> str:
    """What a run's error or a job's pause reason says of a fault: type and message, capped."""
    return clip(f"{type(error).__name__}: {error}", MAX_ERROR_MESSAGE)


class Isolated:
    """Rules applied to one run: an ``Exception`` they raise fails that run alone
    (``fail``) and goes no further. A class, as it is entered for every run
    triggered and every result: a generator-based context cost several times as much."""

    __slots__ = ("fail", "slot", "turn", "now", "where")

    def __init__(self, fail: Fail, slot: Slot, turn: Turn, now: datetime, where: str) -> None:
        self.fail, self.slot, self.turn, self.now, self.where = fail, slot, turn, now, where

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, error: BaseException | None, tb: object) -> bool:
        if not isinstance(error, Exception):
            return False  # none, or not a rule's fault (a cancellation)
        self.fail(self.slot, error, self.turn, self.now, where=self.where)
        return True
