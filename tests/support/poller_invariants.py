"""The invariants of the runs a poller holds, checked after each of its turns.

``InvariantWatch`` is a poller's ``after_turn``: it checks what the poller holds
and keeps the first invariant a turn broke (raising in the poller's loop would only
reset the poller), for ``raise_broken`` to fail the test with.
"""

from __future__ import annotations

from collections import Counter

from shardcron.client.types import RunState
from shardcron.coordinator.poller.keeper import RunKeeper
from shardcron.coordinator.poller.state import Phase


class InvariantWatch:
    def __init__(self) -> None:
        self.broken: str | None = None
        self.turns = 0

    def __call__(self, keeper: RunKeeper) -> None:
        self.turns += 1
        if self.broken is not None:
            return
        try:
            check(keeper)
        except AssertionError as error:
            self.broken = f"after turn {self.turns}: {error}"

    def raise_broken(self) -> None:
        if self.broken is not None:
            raise AssertionError(f"a poller invariant broke {self.broken}")


_PENDING_PHASES = (Phase.WAITING, Phase.BLOCKED)


def check(keeper: RunKeeper) -> None:
    """What holds of the runs held between two turns (AssertionError naming the first
    that does not)."""
    slots = keeper.slots
    leased = {rid for rid, s in slots.items() if s.phase == Phase.LEASED}
    books = {s.worker for s in slots.values() if s.worker is not None}
    for rid, slot in slots.items():
        run = slot.run
        assert run.id == rid, f"run {run.id} held as {rid}"
        assert not run.state.is_final, f"run {rid} held in a final state"
        if slot.phase in _PENDING_PHASES:
            assert run.state == RunState.PENDING, f"{slot.phase.name} run {rid} is {run.state}"
        if slot.phase == Phase.LEASED:
            assert run.state in (RunState.LEASED, RunState.RUNNING), (
                f"leased run {rid} is {run.state}"
            )
            assert keeper.leases.holds(rid, run.lease_token), (
                f"leased run {rid} not in the lease book"
            )
        elif slot.cancel_reason is not None or slot.cancel_waiters:
            raise AssertionError(f"{slot.phase.name} run {rid} waits for a cancel")
        if slot.worker is not None:
            assert slot.phase == Phase.LEASED, f"{slot.phase.name} run {rid} holds a worker"
            assert run.worker_id == slot.worker.id, (
                f"run {rid} on {slot.worker.id}, granted {run.worker_id}"
            )
        assert rid not in keeper.recent_final, f"run {rid} held and ended here"
    assert len(keeper.leases) == len(leased), "the lease book holds runs not leased here"
    jobs = Counter(s.run.job_id for s in slots.values())
    assert keeper._job_runs == dict(jobs), "the runs counted per job are not those held"
    admitted = keeper.admission._admitted
    want: dict[str, set[str]] = {}
    for rid, s in slots.items():
        if s.phase in (Phase.READY, Phase.LEASED):
            want.setdefault(s.run.job_id, set()).add(rid)
    admitted = {
        job_id: runs for job_id, runs in admitted.items() if runs
    }  # SKIP leaves an empty one
    assert admitted == want, "the runs admitted per job are not those ready or leased"
    blocked = {rid for rid, s in slots.items() if s.phase == Phase.BLOCKED}
    assert keeper.admission._blocked_runs == blocked, "the runs counted blocked are not those held"
    on: dict[int, set[str]] = {}
    for rid, s in slots.items():
        if s.worker is not None:
            on.setdefault(id(s.worker), set()).add(rid)
    for book in books:
        mine = on[id(book)]
        assert set(book.leases) == mine, f"worker {book.id} holds {set(book.leases) ^ mine}"
        assert book.used == sum(n.slots or 1 for n in book.leases.values()), (
            f"worker {book.id} used"
        )
