"""Overlap and the concurrency limit (coordinator/poller/overlap.py), starting deadlines
and placement (placement.py, leasing.py), applied to runs held by hand, with
hand-set times."""

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
    RunState,
)
from shardcron.coordinator.poller.overlap import Verdict, concurrency_limit, decide, victim
from shardcron.coordinator.poller.placement import (
    coming_classes,
    demand,
    past_deadline,
    pick_worker,
)
from shardcron.coordinator.poller.table import Phase
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
    assert [h.admit(s, fresh_fire=True) for s in (a, b, c, d)] == [
        Verdict.READY,
        Verdict.READY,
        Verdict.BLOCKED,
        Verdict.BLOCKED,
    ]
    assert (c.phase, d.phase) == (Phase.BLOCKED, Phase.BLOCKED)
    h.end(a)
    assert (c.phase, d.phase) == (Phase.READY, Phase.BLOCKED)


@pytest.mark.parametrize("overlap", list(OverlapPolicy))
def test_a_run_queued_keeps_later_runs_behind_it_even_under_the_limit(
    overlap: OverlapPolicy,
) -> None:
    """A run of a job with runs queued queues too, whatever the room: it would jump the
    queue."""
    j = job(overlap=overlap, max_concurrent=5)
    assert decide(j, [], queued=True, fresh_fire=False) == Verdict.BLOCKED
    assert decide(j, [], queued=False, fresh_fire=False) == Verdict.READY
    if overlap in (OverlapPolicy.ALLOW, OverlapPolicy.QUEUE):
        assert decide(j, [], queued=True, fresh_fire=True) == Verdict.BLOCKED


def test_a_run_is_not_queued_behind_runs_that_left_regression() -> None:
    """Issue 33, probe 5: a queued run that left without an end (its shard was lost)
    stayed in its job's queue, and the job's next run, with nothing running nor
    queued, was queued behind it: no end of a run of the job would ever admit it."""
    h = Held()
    j = job(overlap=OverlapPolicy.QUEUE)
    running, queued = h.slot(j), h.slot(j)
    assert h.admit(running, fresh_fire=True) == Verdict.READY
    assert h.admit(queued, fresh_fire=True) == Verdict.BLOCKED
    h.drop(running)
    h.drop(queued)
    assert h.admit(h.slot(j), fresh_fire=True) == Verdict.READY


def test_forbid_skips_a_fresh_fire_but_queues_a_retry() -> None:
    h = Held()
    j = job(overlap=OverlapPolicy.FORBID)
    running = h.slot(j)
    assert h.admit(running, fresh_fire=True) == Verdict.READY
    skipped = h.slot(j)
    assert h.admit(skipped, fresh_fire=True) == Verdict.SKIP
    assert (h.ended(skipped).state, h.ended(skipped).reason) == (
        RunState.SKIPPED,
        RunReason.OVERLAP,
    )
    retry = h.slot(j)
    assert h.admit(retry, fresh_fire=False) == Verdict.BLOCKED
    h.end(running)
    assert retry.phase == Phase.READY


def test_replace_queues_the_new_fire_first_and_cancels_the_oldest_run() -> None:
    h = Held()
    j = job(overlap=OverlapPolicy.REPLACE)
    old = h.slot(j, due=T0)
    h.admit(old, fresh_fire=True)
    queued_retry = h.slot(j)
    assert h.admit(queued_retry, fresh_fire=False) == Verdict.BLOCKED
    new = h.slot(j, due=T0 + timedelta(minutes=1))
    assert h.admit(new, fresh_fire=True) == Verdict.REPLACE
    # not on a worker, the replaced run ends at once, and the new fire takes its room
    assert h.ended(old).reason == RunReason.REPLACED
    assert (new.phase, queued_retry.phase) == (Phase.READY, Phase.BLOCKED)


def test_the_run_a_replace_cancels_is_the_oldest_not_being_cancelled_already() -> None:
    h = Held()
    j = job(overlap=OverlapPolicy.REPLACE, max_concurrent=3)
    older, old = h.orphan(j), h.slot(j, due=T0 + timedelta(seconds=1))
    h.admit(old, fresh_fire=True)
    assert victim(h.table.admitted(j.id)) is older
    h.table.mark_cancel(older, RunReason.REPLACED)  # the cancel is on its way
    assert victim(h.table.admitted(j.id)) is old
    h.ends.cancel(old, RunReason.REPLACED, h.turn, T0)
    assert victim(h.table.admitted(j.id)) is None


def test_an_adopted_orphan_counts_against_its_jobs_limit() -> None:
    h = Held()
    j = job(overlap=OverlapPolicy.QUEUE)
    h.orphan(j)
    assert h.admit(h.slot(j), fresh_fire=True) == Verdict.BLOCKED


def test_forbid_holds_a_fire_back_while_only_an_unclaimed_orphan_runs() -> None:
    """Found on a three-node cluster: after a shard move, the fires :26 to :41 of a
    FORBID job were recorded SKIPPED/OVERLAP while nothing ran: the new owner counted the
    previous owner's lease, whose run had ended, as a run going. A fire meeting only
    orphans no worker has claimed is held back and decided once one is claimed (it
    goes: skipped) or ends (admitted)."""
    h = Held()
    j = job(overlap=OverlapPolicy.FORBID)
    orphan = h.orphan(j)
    held = h.slot(j)
    assert h.admit(held, fresh_fire=True) == Verdict.HOLD
    assert held.phase == Phase.BLOCKED
    assert "taken over" in h.leasing.waiting_reasons([held.run.id], [])[held.run.id]
    # its worker renews it: the run is going
    expires, claimed = h.table.renew(
        orphan, worker("w-gone"), orphan.run.lease_token, T0, active=True
    )
    assert expires is not None and claimed
    [again] = h.table.release_held(j.id)
    assert h.admit(again, fresh_fire=True) == Verdict.SKIP
    assert h.table.release_held(j.id) == []

    h2 = Held()
    orphan2 = h2.orphan(j)
    first, second = h2.slot(j), h2.slot(j)
    assert [h2.admit(s, fresh_fire=True) for s in (first, second)] == [Verdict.HOLD] * 2
    h2.end(orphan2)  # its lease lapsed: nothing was known to run; decided again in order
    assert first.phase == Phase.READY
    assert h2.ended(second).reason == RunReason.OVERLAP  # the first is going now


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
    h.admit(ready, fresh_fire=True)
    h.admit(blocked, fresh_fire=True)
    h.admit(leased, fresh_fire=True)
    assert h.table.next_deadline() == T0
    # placed on a worker (of its handler alone): its start is no longer watched
    assert lease_all(h, [worker(handlers=frozenset({"other"}))]) == [(leased.run.id, "w")]
    at = T0 + timedelta(seconds=30)
    assert h.table.next_deadline() == at
    h.due_rules.miss_deadlines(at, h.turn)
    assert not h.turn.runs
    h.due_rules.miss_deadlines(at + TICK, h.turn)
    assert [(r.id, r.state) for r in h.turn.runs.values()] == [
        (ready.run.id, RunState.MISSED),
        (blocked.run.id, RunState.MISSED),
    ]
    assert h.table.next_deadline() is None


# --- placement ---------------------------------------------------------------------------


def test_ready_runs_go_by_priority_then_due_time_to_the_freest_worker() -> None:
    h = Held()
    j = job()
    low = h.slot(j, priority=0, due=T0 - timedelta(seconds=9))
    high_late = h.slot(j, priority=5, due=T0)
    high_early = h.slot(j, priority=5, due=T0 - timedelta(seconds=1))
    for s in (low, high_late, high_early):
        h.admit(s, fresh_fire=False)
    small, big = worker("small", slots=1), worker("big", slots=2)
    assert lease_all(h, [small, big]) == [
        (high_early.run.id, "big"),
        (high_late.run.id, "small"),  # 1 free each: the first found
        (low.run.id, "big"),
    ]
    assert not h.table.ready.worth_a_pass()


def test_a_run_no_worker_fits_waits_without_holding_up_the_rest() -> None:
    h = Held()
    gpu = h.slot(job("gpu", resources=Resources(labels={"gpu": "1"})), priority=9)
    cmd = h.slot(job("cmd", task=CommandTask(argv=("true",))), priority=8)
    big = h.slot(job("big", resources=Resources(cpu_millis=2000)), priority=7)
    plain = h.slot(job("plain"))
    for s in (gpu, cmd, big, plain):
        h.admit(s, fresh_fire=False)
    w = worker(cpu_millis=1000, memory_mb=512)
    assert lease_all(h, [w]) == [(plain.run.id, "w")]
    assert h.table.ready.worth_a_pass() and len(h.table.ready) == 3  # the three wait
    assert pick_worker(gpu.job, "o", [worker(labels={"gpu": "1"})]) is not None  # type: ignore[arg-type]


def test_placement_stops_at_the_free_slots_and_the_batch() -> None:
    h = Held()
    j = job()
    for _ in range(5):
        h.admit(h.slot(j), fresh_fire=False)
    assert len(lease_all(h, [worker(slots=3)])) == 3
    assert len(lease_all(h, [worker("x", slots=8)], max_batch=1)) == 1
    assert len(lease_all(h, [])) == 0


def test_a_ready_run_past_its_deadline_is_placed_nowhere() -> None:
    h = Held()
    late = h.slot(job("late", deadline=timedelta(seconds=5)))
    h.admit(late, fresh_fire=False)
    at = T0 + timedelta(seconds=5)
    assert lease_all(h, [worker()], now=at + TICK) == [(late.run.id, None)]


def test_a_refused_lease_is_ready_again_and_pending_regression() -> None:
    """Issue 33, probe 2: a lease its worker refused made the run READY again but left
    its record LEASED (with the old worker and token) in memory: a READY run must be
    PENDING, as the next lease's record supersedes the stored one."""
    h = Held()
    s = h.slot(job())
    h.admit(s, fresh_fire=False)
    lease_all(h, [worker()])
    assert (s.phase, s.run.state) == (Phase.LEASED, RunState.LEASED)
    h.table.refuse(s)
    assert (s.phase, s.run.state) == (Phase.READY, RunState.PENDING)
    assert h.table.ready.worth_a_pass() and not h.table.leases.held()


def test_demand_counts_the_ready_slots_a_sharing_worker_could_take() -> None:
    h = Held()
    for _ in range(3):
        h.admit(h.slot(job(resources=Resources(slots=2))), fresh_fire=False)
    h.admit(h.slot(job("cmd", task=CommandTask(argv=("true",)))), fresh_fire=False)
    shared = worker("shared", slots=4, credit_limit=0)
    cmds = worker("cmds", slots=10, credit_limit=1, runs_commands=True, handlers=frozenset())
    assert shared.restricted and cmds.restricted
    assert demand(h.table.ready, [shared, cmds]) == {shared: 4, cmds: 1}


def test_demand_counts_the_runs_coming_due_a_sharing_worker_could_take() -> None:
    """Room is asked for runs about to come due too, so it is granted by the time
    they are ready (a grant comes one round trip after the demand)."""
    h = Held()
    h.admit(h.slot(job()), fresh_fire=False)
    shared = worker("shared", slots=8, credit_limit=0)
    cmds = worker("cmds", slots=8, credit_limit=0, runs_commands=True, handlers=frozenset())
    handler, command = job().spec, job("cmd", task=CommandTask(argv=("true",))).spec
    coming = coming_classes([(handler, "o"), (handler, "o"), (command, "o")])
    assert sorted(n for _, _, n in coming) == [1, 2]  # two classes
    assert demand(h.table.ready, [shared, cmds], coming) == {shared: 3, cmds: 1}
    many = coming_classes([(handler, "o")] * 10 + [(job().spec, "o")] * 10)  # equal specs
    assert [n for _, _, n in many] == [20]
    assert demand(h.table.ready, [shared, cmds], many) == {shared: 8, cmds: 0}


def test_a_worker_gives_back_what_a_run_held() -> None:
    w = worker(slots=2, cpu_millis=1000, memory_mb=100)
    need = Resources(slots=2, cpu_millis=600, memory_mb=50)
    spec = dataclasses.replace(job().spec, resources=need)
    assert w.fits(spec, "o")
    w.hold("r", need)
    assert w.free == 0 and not w.fits(spec, "o") and w.could_run(spec, "o")
    w.release("r")
    assert (w.free, w.used_cpu, w.used_mem) == (2, 0, 0)
