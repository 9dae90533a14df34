"""The stored state of each run, as one store last wrote or read it.

A poller's ``commit`` keeps the run upsert rule (never back to an earlier state) and
tells new runs from stored ones by the stored state of the runs it writes. The
poller has read or written every run it writes moments before: it found the run in
the due index and read it, was hinted it by an api that wrote it, or wrote its
previous state itself. What this store learnt then answers the commit without a
read; only runs it knows nothing of are read.

What is remembered is never ahead of the store: a write is remembered only once it
was acknowledged (and forgotten when it is under way, so a write that fails leaves
its runs unknown and read again), a read is what was stored. After that, a run's
state moves only by the writes of the poller that owns its shard (store.py, "Write
ownership"); the api's own writes of existing runs do not move a state (a resumed
run is PENDING again as it was; clearing a dead letter leaves its run final). A
poller that takes a shard over reads each run of it that it holds (the scan, a
hint, a retry or a cancel reads the run), which refreshes what is remembered here,
so a state written meanwhile by another owner is not missed. And what lands at
last is decided by write timestamps, not by this rule (store.py docstring).

Bounded: past ``LIMIT`` entries it forgets them all and learns again.
"""

from __future__ import annotations

from collections.abc import Iterable

LIMIT = 200_000

# (run_state_order of the stored state, dead_letter)
StoredState = tuple[int, bool]


class RunStates:
    """run id -> its stored state, as last written or read here (module docstring)."""

    def __init__(self) -> None:
        self._states: dict[str, StoredState] = {}

    def get(self, run_id: str) -> StoredState | None:
        return self._states.get(run_id)

    def learn(self, states: Iterable[tuple[str, StoredState]]) -> None:
        known = self._states
        for run_id, state in states:
            if len(known) >= LIMIT and run_id not in known:
                known.clear()
            known[run_id] = state

    def forget(self, run_ids: Iterable[str]) -> None:
        known = self._states
        for run_id in run_ids:
            known.pop(run_id, None)

    def __len__(self) -> int:
        return len(self._states)
