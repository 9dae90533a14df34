"""The invariants of the runs a poller holds, checked after each of its turns.

``InvariantWatch`` is a poller's ``after_turn``: it runs ``RunTable.check`` on the
runs the poller holds and keeps the first invariant a turn broke (raising in the
poller's loop would only reset the poller), for ``raise_broken`` to fail the test
with.
"""

from __future__ import annotations

from shardcron.coordinator.poller.table import RunTable


class InvariantWatch:
    def __init__(self) -> None:
        self.broken: str | None = None
        self.turns = 0

    def __call__(self, table: RunTable) -> None:
        self.turns += 1
        if self.broken is not None:
            return
        try:
            table.check()
        except Exception as error:  # an invariant broken, or the check itself failing
            self.broken = f"after turn {self.turns}: {error!r}"

    def raise_broken(self) -> None:
        if self.broken is not None:
            raise AssertionError(f"a poller invariant broke {self.broken}")
