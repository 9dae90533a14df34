"""Admission and placement (coordinator/poller/admission.py) with hand-set times."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from shardcron.client.types import (
    CommandTask,
    HandlerTask,
    OverlapPolicy,
    Resources,
    RunReason,
)
from shardcron.coordinator.poller.admission import (
    Verdict,
    concurrency_limit,
    past_deadline,
    pick_worker,
)
from shardcron.coordinator.poller.state import Phase
from tests.support.held_runs import T0, TICK, Held, job, lease_all, worker

# --- concurrency and overlap ---------------------------------------------------------


@pytest.mark.parametrize(
    ("overlap", "max_concurrent", "limit"),
    [
        (OverlapPolicy.ALLOW, 0, float("inf")),
        (OverlapPolicy.ALLOW, 3, 3),
        (OverlapPolicy.FORBID, 0, 1),
        (OverlapPolicy.QUEUE, 0, 1),
        (OverlapPolicy.REPLACE, 2, 2),
    ],
)
def test_the_concurrency_limit(overlap: OverlapPolicy, max_concurrent: int, limit: float) -> None:
    assert concurrency_limit(job(overlap=overlap, max_concurrent=max_concurrent)) == limit


def test_allow_admits_up_to_the_limit_and_then_queues_in_order() -> None:
    h = Held()
    j = job(max_concurrent=2)
    a, b, c, d = (h.slot(j) for _ in range(4))
    assert [h.admission.admit(s, fresh_fire=True) for s in (a, b, c, d)] == [
        Verdict.READY,
        Verdict.READY,
        Verdict.BLOCKED,
        Verdict.BLOCKED,
    ]
    assert (c.phase, d.phase) == (Phase.BLOCKED, Phase.BLOCKED)
    h.end(a)
    assert (c.phase, d.phase) == (Phase.READY, Phase.BLOCKED)


def test_a_run_queued_keeps_later_runs_behind_it_even_when_a_slot_frees() -> None:
    h = Held()
    j = job(overlap=OverlapPolicy.QUEUE)
    first, queued = h.slot(j), h.slot(j)
    h.admission.admit(first, fresh_fire=True)
    assert h.admission.admit(queued, fresh_fire=True) == Verdict.BLOCKED
    h.admission.forget(first)  # ended, but the queue not yet looked at
    del h.slots[first.run.id]
    late = h.slot(j)
    assert h.admission.admit(late, fresh_fire=True) == Verdict.BLOCKED, "jumped the queue"


def test_a_run_is_not_queued_behind_runs_that_left_regression() -> None:
    """Issue 33, probe 5: a queued run that left without an end (its shard was lost)
    stayed in its job's queue, and the job's next run, with nothing running nor
    queued, was queued behind it: no end of a run of the job would ever admit it."""
    h = Held()
    j = job(overlap=OverlapPolicy.QUEUE)
    running, queued = h.slot(j), h.slot(j)
    assert h.admission.admit(running, fresh_fire=True) == Verdict.READY
    assert h.admission.admit(queued, fresh_fire=True) == Verdict.BLOCKED
    h.drop(running)
    h.drop(queued)
    assert h.admission.admit(h.slot(j), fresh_fire=True) == Verdict.READY


def test_forbid_skips_a_fresh_fire_but_queues_a_retry() -> None:
    h = Held()
    j = job(overlap=OverlapPolicy.FORBID)
    running = h.slot(j)
    assert h.admission.admit(running, fresh_fire=True) == Verdict.READY
    assert h.admission.admit(h.slot(j), fresh_fire=True) == Verdict.SKIP
    retry = h.slot(j)
    assert h.admission.admit(retry, fresh_fire=False) == Verdict.BLOCKED
    h.end(running)
    assert retry.phase == Phase.READY


def test_replace_queues_the_new_fire_first_and_names_the_oldest_run_to_cancel() -> None:
    h = Held()
    j = job(overlap=OverlapPolicy.REPLACE)
    old = h.slot(j, due=T0)
    h.admission.admit(old, fresh_fire=True)
    queued_retry = h.slot(j)
    assert h.admission.admit(queued_retry, fresh_fire=False) == Verdict.BLOCKED
    new = h.slot(j, due=T0 + timedelta(minutes=1))
    assert h.admission.admit(new, fresh_fire=True) == Verdict.REPLACE
    assert h.admission.replaced(j.id) is old
    old.cancel_reason = RunReason.REPLACED  # the cancel is on its way
    assert h.admission.replaced(j.id) is None, "a run being cancelled is cancelled again"
    h.end(old)
    assert (new.phase, queued_retry.phase) == (Phase.READY, Phase.BLOCKED)


def test_an_adopted_orphan_counts_against_its_jobs_limit() -> None:
    h = Held()
    j = job(overlap=OverlapPolicy.QUEUE)
    orphan = h.slot(j)
    orphan.phase = Phase.LEASED
    h.admission.adopt(orphan)
    assert h.admission.admit(h.slot(j), fresh_fire=True) == Verdict.BLOCKED


def test_forbid_holds_a_fire_back_while_only_an_unclaimed_orphan_runs() -> None:
    """Found on a three-node cluster: after a shard move, the fires :26 to :41 of a
    FORBID job were recorded SKIPPED/OVERLAP while nothing ran: the new owner counted the
    previous owner's lease, whose run had ended, as a run going. A fire meeting only
    orphans no worker has claimed is held back and decided once one is claimed (it
    goes: skipped) or ends (admitted)."""
    h = Held()
    j = job(overlap=OverlapPolicy.FORBID)
    orphan = h.slot(j)
    orphan.phase = Phase.LEASED  # adopted: no worker renewed it here yet
    h.admission.adopt(orphan)
    held = h.slot(j)
    assert h.admission.admit(held, fresh_fire=True) == Verdict.HOLD
    assert held.phase == Phase.BLOCKED
    assert "taken over" in h.admission.waiting_reason(held, [])
    orphan.worker = worker()  # its worker renewed it: the run is going
    [again] = h.admission.release_held(j.id)
    assert h.admission.admit(again, fresh_fire=True) == Verdict.SKIP
    assert h.admission.release_held(j.id) == []

    h2 = Held()
    orphan2 = h2.slot(j)
    orphan2.phase = Phase.LEASED
    h2.admission.adopt(orphan2)
    first, second = h2.slot(j), h2.slot(j)
    assert [h2.admission.admit(s, fresh_fire=True) for s in (first, second)] == [Verdict.HOLD] * 2
    h2.end(orphan2)  # its lease lapsed: nothing was known to run
    released = h2.admission.release_held(j.id)
    assert released == [first, second]
    assert [h2.admission.admit(s, fresh_fire=True) for s in released] == [
        Verdict.READY,
        Verdict.SKIP,  # the first is going now
    ]


# --- starting deadlines -----------------------------------------------------------------


def test_a_starting_deadline_is_missed_only_after_it_passes() -> None:
    j = job(deadline=timedelta(seconds=30))
    run = Held().slot(j).run
    at = run.due_at + timedelta(seconds=30)
    assert not past_deadline(j, run, at)  # now == due + deadline: still on time
    assert past_deadline(j, run, at + TICK)
    assert not past_deadline(job(), run, at + timedelta(days=1))  # no deadline


def test_runs_waiting_are_missed_at_their_deadline_and_others_are_not() -> None:
    h = Held()
    j = job(deadline=timedelta(seconds=30), overlap=OverlapPolicy.QUEUE)
    other = job("other", deadline=timedelta(0), task=HandlerTask(name="other"))
    ready, blocked, leased = h.slot(j), h.slot(j), h.slot(other)
    h.admission.admit(ready, fresh_fire=True)
    h.admission.admit(blocked, fresh_fire=True)
    h.admission.admit(leased, fresh_fire=True)
    assert h.admission.next_deadline() == T0
    # placed on a worker (of its handler alone): its start is no longer watched
    assert lease_all(h, [worker(handlers=frozenset({"other"}))]) == [(leased.run.id, "w")]
    at = T0 + timedelta(seconds=30)
    assert h.admission.next_deadline() == at
    assert list(h.admission.missed(at)) == []
    assert list(h.admission.missed(at + TICK)) == [ready, blocked]
    assert h.admission.next_deadline() is None


# --- placement ---------------------------------------------------------------------------


def test_ready_runs_go_by_priority_then_due_time_to_the_freest_worker() -> None:
    h = Held()
    j = job()
    low = h.slot(j, priority=0, due=T0 - timedelta(seconds=9))
    high_late = h.slot(j, priority=5, due=T0)
    high_early = h.slot(j, priority=5, due=T0 - timedelta(seconds=1))
    for s in (low, high_late, high_early):
        h.admission.admit(s, fresh_fire=False)
    small, big = worker("small", slots=1), worker("big", slots=2)
    assert lease_all(h, [small, big]) == [
        (high_early.run.id, "big"),
        (high_late.run.id, "small"),  # 1 free each: the first found
        (low.run.id, "big"),
    ]
    assert not h.admission.has_ready()


def test_a_run_no_worker_fits_waits_without_holding_up_the_rest() -> None:
    h = Held()
    gpu = h.slot(job("gpu", resources=Resources(labels={"gpu": "1"})), priority=9)
    cmd = h.slot(job("cmd", task=CommandTask(argv=("true",))), priority=8)
    big = h.slot(job("big", resources=Resources(cpu_millis=2000)), priority=7)
    plain = h.slot(job("plain"))
    for s in (gpu, cmd, big, plain):
        h.admission.admit(s, fresh_fire=False)
    w = worker(cpu_millis=1000, memory_mb=512)
    assert lease_all(h, [w]) == [(plain.run.id, "w")]
    assert h.admission.has_ready() and len(h.admission) == 3  # the three wait
    assert pick_worker(gpu.job, "o", [worker(labels={"gpu": "1"})]) is not None  # type: ignore[arg-type]


def test_placement_stops_at_the_free_slots_and_the_batch() -> None:
    h = Held()
    j = job()
    for _ in range(5):
        h.admission.admit(h.slot(j), fresh_fire=False)
    assert len(lease_all(h, [worker(slots=3)])) == 3
    assert len(lease_all(h, [worker("x", slots=8)], max_batch=1)) == 1
    assert len(lease_all(h, [])) == 0


def test_a_ready_run_past_its_deadline_is_placed_nowhere() -> None:
    h = Held()
    late = h.slot(job("late", deadline=timedelta(seconds=5)))
    h.admission.admit(late, fresh_fire=False)
    at = T0 + timedelta(seconds=5)
    assert lease_all(h, [worker()], now=at + TICK) == [(late.run.id, None)]


def test_a_refused_lease_is_ready_again() -> None:
    h = Held()
    s = h.slot(job())
    h.admission.admit(s, fresh_fire=False)
    lease_all(h, [worker()])
    h.admission.requeue(s)
    assert s.phase == Phase.READY and h.admission.has_ready()


def test_demand_counts_the_ready_slots_a_sharing_worker_could_take() -> None:
    h = Held()
    for _ in range(3):
        h.admission.admit(h.slot(job(resources=Resources(slots=2))), fresh_fire=False)
    h.admission.admit(h.slot(job("cmd", task=CommandTask(argv=("true",)))), fresh_fire=False)
    shared = worker("shared", slots=4, credit_limit=0)
    cmds = worker("cmds", slots=10, credit_limit=1, runs_commands=True, handlers=frozenset())
    assert shared.restricted and cmds.restricted
    assert h.admission.demand([shared, cmds]) == {shared: 4, cmds: 1}


def test_demand_counts_the_runs_coming_due_a_sharing_worker_could_take() -> None:
    """Room is asked for runs about to come due too, so it is granted by the time
    they are ready (a grant comes one round trip after the demand)."""
    h = Held()
    h.admission.admit(h.slot(job()), fresh_fire=False)
    shared = worker("shared", slots=8, credit_limit=0)
    cmds = worker("cmds", slots=8, credit_limit=0, runs_commands=True, handlers=frozenset())
    handler, command = job().spec, job("cmd", task=CommandTask(argv=("true",))).spec
    coming = [(handler, "o"), (handler, "o"), (command, "o")]
    assert h.admission.demand([shared, cmds], coming) == {shared: 3, cmds: 1}
    many = [(handler, "o")] * 20
    assert h.admission.demand([shared, cmds], many) == {shared: 8, cmds: 0}


def test_a_worker_gives_back_what_a_run_held() -> None:
    w = worker(slots=2, cpu_millis=1000, memory_mb=100)
    need = Resources(slots=2, cpu_millis=600, memory_mb=50)
    spec = dataclasses.replace(job().spec, resources=need)
    assert w.fits(spec, "o")
    w.hold("r", need)
    assert w.free == 0 and not w.fits(spec, "o") and w.could_run(spec, "o")
    w.release("r")
    assert (w.free, w.used_cpu, w.used_mem) == (2, 0, 0)
