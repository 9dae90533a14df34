"""The run table (coordinator/poller/table.py): the one writer of a held run's place
and record, its transitions keeping every index in step (``RunTable.check``)."""

from __future__ import annotations

import dataclasses
import re
from datetime import timedelta
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import shardcron.coordinator.poller as poller_package
from shardcron.client.types import Job, OverlapPolicy, Run, RunReason, RunState
from shardcron.coordinator.metrics import Metrics
from shardcron.coordinator.poller.config import PollerConfig
from shardcron.coordinator.poller.end_rules import Outcome
from shardcron.coordinator.poller.leasing import placements
from shardcron.coordinator.poller.table import Place, RunTable, Slot
from tests.support.held_runs import T0, Held, job, worker
from tests.support.pollers import FakeClock

# a write of a slot's place, phase, run record or worker, or a Slot built in a place
WRITES = re.compile(r"\.(place|phase|run|worker)\s*=[^=]|\b(place|phase)\s*=\s*(Place|Phase)\.")


def test_only_the_table_writes_a_held_runs_place_and_record() -> None:
    package = Path(poller_package.__file__).parent
    writes = [
        f"{path.name}:{n}: {line.strip()}"
        for path in sorted(package.glob("*.py"))
        if path.name != "table.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if WRITES.search(line)
    ]
    assert writes == []


def test_a_run_ends_once_whatever_ends_it_again() -> None:
    """A rule that raises after a run's end (``Isolated``) ended it a second time: its
    end was counted again and its record overwritten by FAILED INTERNAL_ERROR."""
    metrics = Metrics()
    h = Held(metrics=metrics)
    slot = h.slot(job())
    done = Outcome(state=RunState.SUCCEEDED, reason=RunReason.NONE)
    final = h.ends.end(slot, done, h.turn, T0)
    assert h.ends.end(slot, done, h.turn, T0) == final
    h.ends.fault(slot, RuntimeError("after its end"), h.turn, T0, where="result")
    assert h.ended(slot) == final and final.state == RunState.SUCCEEDED
    value = metrics.registry.get_sample_value
    assert value("shardcron_runs_final_total", {"state": "SUCCEEDED", "reason": "NONE"}) == 1
    h.table.check()


JOBS = (
    job("allow", max_concurrent=2, deadline=timedelta(seconds=30)),
    job("forbid", overlap=OverlapPolicy.FORBID),
    job("queue", overlap=OverlapPolicy.QUEUE, deadline=timedelta(seconds=20)),
    job("replace", overlap=OverlapPolicy.REPLACE),
)


class TableMoves(RuleBasedStateMachine):
    """Runs held, triggered, admitted, leased, refused, claimed, started, cancelled,
    ended, missed, expired and dropped with their shard, in any order: after each
    step the table's invariants hold (``RunTable.check``)."""

    def __init__(self) -> None:
        super().__init__()
        self.h = Held()
        self.now = T0
        self.n = 0
        self.workers = [worker("w1", slots=3), worker("w2", slots=2, waits_for_due=True)]

    def _run(self, j: Job, seconds: int, shard: int) -> Run:
        self.n += 1
        run = self.h.run(j, due=T0 + timedelta(seconds=seconds))
        return dataclasses.replace(run, id=f"m{self.n}", shard=shard)

    def _pick(self, i: int, place: Place | None = None) -> Slot | None:
        slots = [s for s in self.h.table.slots.values() if place is None or s.place is place]
        return slots[i % len(slots)] if slots else None

    @rule(j=st.sampled_from(JOBS), seconds=st.integers(-30, 90), shard=st.integers(0, 2))
    def hold(self, j: Job, seconds: int, shard: int) -> None:
        self.h.table.hold(self._run(j, seconds, shard), j)

    @rule(j=st.sampled_from(JOBS), shard=st.integers(0, 2))
    def take_over_an_orphan(self, j: Job, shard: int) -> None:
        self.n += 1
        run = dataclasses.replace(
            self._run(j, -60, shard), state=RunState.LEASED, worker_id="w1", lease_token=self.n
        )
        self.h.table.adopt(run, j, taken_at=self.now, now=self.now)

    @rule(j=st.sampled_from(JOBS), seconds=st.integers(0, 60))
    def decide_a_retry(self, j: Job, seconds: int) -> None:
        slot = self.h.table.hold_retry(self._run(j, seconds, 0), j)
        assert slot is not None
        self.h.table.place_retry(slot)

    @rule(by=st.integers(0, 40), fresh=st.booleans(), lead=st.integers(0, 5))
    def come_due(self, by: int, fresh: bool, lead: int) -> None:
        self.now += timedelta(seconds=by)
        for slot in self.h.due_rules.take(self.now, timedelta(seconds=lead)):
            self.h.ends.overlap.admit(slot, fresh, self.h.turn, self.now)

    @rule()
    def place(self) -> None:
        for slot, w in placements(self.h.table, self.workers, self.now, 10):
            if w is None:
                missed = Outcome(state=RunState.MISSED, reason=RunReason.DEADLINE)
                self.h.ends.end(slot, missed, self.h.turn, self.now)
            else:
                self.h.table.lease(slot, w, self.now)

    @rule(i=st.integers(0, 50))
    def refuse(self, i: int) -> None:
        slot = self._pick(i, Place.LEASED)
        if slot is None or slot.worker is None or slot.run.state != RunState.LEASED:
            return
        if slot.cancel_reason is not None:  # as streams: a refused run to cancel ends
            cancelled = Outcome(state=RunState.CANCELLED, reason=slot.cancel_reason)
            self.h.ends.end(slot, cancelled, self.h.turn, self.now)
        else:
            self.h.table.refuse(slot)

    @rule(i=st.integers(0, 50))
    def start(self, i: int) -> None:
        slot = self._pick(i, Place.LEASED)
        if slot is not None and slot.worker is not None and slot.run.state == RunState.LEASED:
            written = self.h.table.start(slot, self.now, self.now)  # its write waits
            assert written is None and slot.run.state == RunState.RUNNING

    @rule()
    def write_starts(self) -> None:
        for run in self.h.table.starts_to_write(self.now):
            assert run.state == RunState.RUNNING and run.started_at is not None

    @rule(i=st.integers(0, 50), which=st.integers(0, 1))
    def renew(self, i: int, which: int) -> None:
        slot = self._pick(i, Place.LEASED)
        if slot is None:
            return
        book = next((w for w in self.workers if w.id == slot.run.worker_id), self.workers[which])
        token = slot.run.lease_token
        _, claimed = self.h.table.renew(slot, book, token, self.now, active=True)
        if claimed:
            self.h.ends.overlap.claimed(slot.run.job_id, self.h.turn, self.now)

    @rule(i=st.integers(0, 50), state=st.sampled_from([RunState.SUCCEEDED, RunState.FAILED]))
    def end(self, i: int, state: RunState) -> None:
        slot = self._pick(i)
        if slot is not None:
            outcome = Outcome(state=state, reason=RunReason.NONE, reported=True)
            self.h.ends.end(slot, outcome, self.h.turn, self.now)

    @rule(i=st.integers(0, 50))
    def cancel(self, i: int) -> None:
        slot = self._pick(i)
        if slot is not None:
            self.h.ends.cancel(slot, RunReason.CANCELLED_BY_USER, self.h.turn, self.now)

    @rule(shard=st.integers(0, 2))
    def release_a_shard(self, shard: int) -> None:
        for run in self.h.table.starts_to_write(self.now, {shard}):  # as ``shards`` does
            assert run.state == RunState.RUNNING
        self.h.table.release({shard})

    @rule(by=st.integers(0, 30))
    def time_passes(self, by: int) -> None:
        self.now += timedelta(seconds=by)
        self.h.due_rules.miss_deadlines(self.now, self.h.turn)
        self.h.leasing.expire(self.now, self.h.turn)

    @invariant()
    def holds(self) -> None:
        self.h.table.check()


TableMoves.TestCase.settings = settings(max_examples=100, stateful_step_count=50, deadline=None)
test_the_table_holds_its_invariants_through_any_moves = TableMoves.TestCase


def test_runs_ended_are_let_go_oldest_first_once_past_the_time_kept() -> None:
    clock = FakeClock(T0)
    table = RunTable(config=PollerConfig(), clock=clock)
    for rid in ("a", "b", "c"):
        table.remember_ended(rid)
        clock.advance(timedelta(seconds=10))
    table.remember_ended("a")  # met again: remembered from now
    table.prune_ended(15)  # "b" ended 20 s ago, "c" 10 s ago, "a" now
    assert list(table.recent_final) == ["c", "a"]
    assert table.known("a") and not table.known("b")
    clock.advance(timedelta(seconds=10))
    table.prune_ended(15)
    assert list(table.recent_final) == ["a"]
